/* trash.h - trees the agent no longer needs (an ended attempt's working directory
 * in the cache: a whole copy of its code), removed on a thread of their own, so that
 * a tree of many files never holds the agent's loop and its heartbeats. A tree is
 * renamed aside at once (nothing finds it under its name from then on), then
 * removed; what a stop leaves aside, the next start sweeps (the cache's sweep of
 * its working dirs, br_cache_sweep_work). */
#ifndef BRAMBLE_TRASH_H
#define BRAMBLE_TRASH_H

#include "err.h"

#define BR_TRASH_PREFIX ".trash-" /* a tree set aside: DIR/.trash-NAME-N */

typedef struct br_trash br_trash_t;

br_trash_t *br_trash_new(br_err_t *err);
/* Stop: the removal in progress stops where it is, the trees waiting stay aside. */
void br_trash_destroy(br_trash_t **t);

/* Set the tree at dir/name aside and have it removed. 0; 1 when there is none; -1
 * with err when it could not be set aside (it stays where it is) or out of memory
 * (it stays aside, for the next start's sweep). */
int br_trash_tree(br_trash_t *t, const char *dir, const char *name, br_err_t *err);

#endif
