/* storemark.h - the store's high-water mark, kept beside it in DIR/store.mark: the
 * highest job and event ids this coordinator has committed. A store that knows
 * fewer at start (its WAL deleted, the file truncated, emptied or replaced by an
 * older copy) is refused, instead of serving with acknowledged jobs gone and their
 * ids issued again. The mark is written after each commit that changed the store,
 * so it never runs ahead of what is on disk. */
#ifndef BRAMBLE_STOREMARK_H
#define BRAMBLE_STOREMARK_H

#include "err.h"
#include "store.h"

typedef struct br_storemark br_storemark_t;

/* Check store against DIR/store.mark (a missing mark is written now). Fails with
 * words naming what was lost and how to go on when the store is behind it. */
br_storemark_t *br_storemark_new(const char *dir, br_store_t *store, br_err_t *err);
void br_storemark_destroy(br_storemark_t **m);

/* After a commit: write the mark again when the store changed. */
void br_storemark_update(br_storemark_t *m, br_store_t *store);

#endif
