/* listing.h - the whole manifests of checkpoints too big for a report. A report
 * lists a manifest's entries while their JSON stays within BR_MANIFEST_LIST_MAX;
 * past that it is truncated and names its "listing": the hash and length of the
 * whole manifest's text, which this node keeps as DIR/<manifest hash>.json (the
 * agent's data dir, manifests/). The writer keeps the ones it reports; a node that
 * pulls such a checkpoint fetches the listing first (pull.h) and keeps it too, so
 * that every holder can serve it on and check its copy by it. Files unused for
 * BR_LISTING_KEEP_DAYS are removed when the agent starts. */
#ifndef BRAMBLE_LISTING_H
#define BRAMBLE_LISTING_H

#include <jansson.h>
#include <stddef.h>

#include "err.h"

#define BR_LISTING_KEEP_DAYS 30

typedef struct br_listings br_listings_t;

/* The directory (created 0700 when missing); listings unused for
 * BR_LISTING_KEEP_DAYS and temporary files older than a day are removed. */
br_listings_t *br_listings_new(const char *dir, br_err_t *err);
void br_listings_destroy(br_listings_t **l);
const char *br_listings_dir(const br_listings_t *l);

/* What to report for a manifest this node built (whole, every entry listed): a
 * new reference to whole when its entries fit in a report; else a copy listing the
 * first entries that fit, with "truncated" and "listing", whose text is now kept
 * here. When the text cannot be kept (a full disk; more than
 * BR_MANIFEST_LISTING_MAX), the copy names no listing and err says why: the
 * checkpoint still counts, but cannot be copied. NULL only when out of memory. */
json_t *br_listings_report(br_listings_t *l, const json_t *whole, br_err_t *err);

/* Where dir keeps the listing of the manifest whose hash is mhash. */
void br_listings_path(const char *dir, const char *mhash, char *buf, size_t len);

/* The whole manifest m stands for: m itself (a new reference) when it is whole,
 * else the listing kept in dir, read, checked against m's listing hash and against
 * m (br_manifest_from_listing), and marked used; path (may be NULL) gets its file
 * ("" for a whole m). NULL with err: ENOENT when dir keeps none, EBADMSG when the
 * one kept is damaged (it is removed), ENOTSUP when m names no listing. */
json_t *br_listings_whole(const char *dir, const json_t *m, char *path, size_t plen,
                          br_err_t *err);

#endif
