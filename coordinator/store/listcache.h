/* listcache.h - manifests made from the listings in the content store, parsed and
 * checked, the last few kept by listing: the pages of an upload's content.lack, and
 * the push or submit that ends it, each need the same one, and parsing and checking
 * a tree of 10,000 files takes the coordinator's loop tens of milliseconds. What is
 * kept is shared and never changed; unused for BR_LISTCACHE_KEEP_MS, it goes. */
#ifndef BRAMBLE_LISTCACHE_H
#define BRAMBLE_LISTCACHE_H

#include <jansson.h>
#include <stdint.h>

#define BR_LISTCACHE_N 4
#define BR_LISTCACHE_KEEP_MS 60000
#define BR_LISTCACHE_LISTING_MAX (32 << 20) /* larger listings are not kept parsed */

typedef struct br_listcache br_listcache_t;

br_listcache_t *br_listcache_new(void);
void br_listcache_destroy(br_listcache_t **lc);

/* The manifest kept for the listing lhash, made with summary (equal to the one it
 * was kept with), as a new reference; NULL when none is. */
json_t *br_listcache_get(br_listcache_t *lc, const char *lhash, const json_t *summary,
                         int64_t now_ms);
/* Keep manifest (a reference is taken; it must not change after) as the one made
 * from lhash with summary; the least recently used goes when all are taken. */
void br_listcache_put(br_listcache_t *lc, const char *lhash, const json_t *summary,
                      json_t *manifest, int64_t now_ms);
/* Let go of what was not used for BR_LISTCACHE_KEEP_MS. */
void br_listcache_expire(br_listcache_t *lc, int64_t now_ms);

#endif
