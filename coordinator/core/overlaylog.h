/* overlaylog.h - what changed in the overlay, version by version (overlaynet.h):
 * the nodes whose entry in their peers' lists changed (a node joined, took a new
 * key, moved, was removed; a pair's relay changed), so that a node that has its
 * peers of an earlier version is told only those, not its whole list again.
 *
 * A ring of the last BR_OVERLAY_LOG_MAX changes; a node further behind, or one
 * behind a change that concerns every node, is told its whole list. */
#ifndef BRAMBLE_OVERLAY_LOG_H
#define BRAMBLE_OVERLAY_LOG_H

#include <jansson.h>
#include <stdint.h>

#define BR_OVERLAY_LOG_MAX 8192 /* changes remembered */

typedef struct br_overlay_log br_overlay_log_t;

br_overlay_log_t *br_overlay_log_new(void);
void br_overlay_log_destroy(br_overlay_log_t **l);

/* Node name's entry changed (NULL: every node's): the version grows. */
void br_overlay_log_changed(br_overlay_log_t *l, const char *name);

/* The version now (0: nothing changed yet). */
uint64_t br_overlay_log_version(const br_overlay_log_t *l);

/* The names of the nodes changed after version since, each once (a new array), or
 * NULL when the log does not reach back that far or a change since concerned every
 * node: a whole list is due. */
json_t *br_overlay_log_since(const br_overlay_log_t *l, uint64_t since);

#endif
