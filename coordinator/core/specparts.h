/* specparts.h - the parts of job specs that many current jobs have alike, kept
 * once. A spec in memory is a jansson tree of about 5 KiB for 400 bytes of text;
 * its objects and arrays (resources, restart, preempt, env, after, ...) are the
 * same in most jobs of a queue, and more than half of that size. The pool holds
 * one of each distinct part (by its text) and a spec taken in points at it. A
 * spec once in a job is never changed (whoever changes one deep-copies it first),
 * so sharing its parts is safe. */
#ifndef BRAMBLE_SPECPARTS_H
#define BRAMBLE_SPECPARTS_H

#include <jansson.h>
#include <stddef.h>

typedef struct br_specparts br_specparts_t;

/* NULL when out of memory. */
br_specparts_t *br_specparts_new(void);
void br_specparts_destroy(br_specparts_t **p);

/* Point spec's object and array members at the pool's alike parts, in place (the
 * spec's text is unchanged); a part the pool lacks joins it. Parts no spec holds
 * any longer leave the pool as it grows. Out of memory, a part stays unshared.
 * The spec shared last is held, and sharing it again does nothing (the tasks of
 * one array share one spec). */
void br_specparts_share(br_specparts_t *p, json_t *spec);

/* The distinct parts the pool holds now. */
size_t br_specparts_count(const br_specparts_t *p);

#endif
