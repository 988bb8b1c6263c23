/* dirlock.h - one daemon per data dir: an exclusive flock on a lock file inside it,
 * held for the life of the process and never inherited by its children. */
#ifndef BRAMBLE_DIRLOCK_H
#define BRAMBLE_DIRLOCK_H

#include "err.h"

typedef struct br_dirlock br_dirlock_t;

/* Lock DIR/name (created 0600) and write this pid into it. When another process
 * holds it, fails with EBUSY: "pid N holds DIR/name: another WHO runs on this data
 * dir" (who: "brambled", "bramble-agent"). */
br_dirlock_t *br_dirlock_new(const char *dir, const char *name, const char *who,
                             br_err_t *err);
/* Let go of the lock (the file stays); accepts NULL. */
void br_dirlock_destroy(br_dirlock_t **lock);

#endif
