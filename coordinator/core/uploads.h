/* uploads.h - what each user has put into the content store that nothing of theirs
 * refers to yet: the files of an upload under way, or of one given up. They count
 * against --user-store-quota from their first chunk on, so a client that stores
 * files without ever submitting them (or without asking content.lack first) cannot
 * pass the quota. A file leaves a user's ledger when a job or data set of theirs
 * comes to refer to it (br_uploads_settle), or BR_UPLOADS_TTL_MS after it was last
 * written to (br_uploads_expire, which names it so the store can drop it if still
 * nothing refers to it). In memory only: a restart forgets the ledger, and the
 * store's collection at a start removes what uploads left a day before. */
#ifndef BRAMBLE_UPLOADS_H
#define BRAMBLE_UPLOADS_H

#include <jansson.h>
#include <stdint.h>

#define BR_UPLOADS_TTL_MS (24LL * 3600 * 1000)
#define BR_UPLOADS_USED_MS 2000 /* a user's referenced bytes, as cached, this long */

typedef struct br_uploads br_uploads_t;

br_uploads_t *br_uploads_new(void);
void br_uploads_destroy(br_uploads_t **u);

/* 1 when user's ledger holds hash (marked written to at now_ms), 0 when not. */
int br_uploads_touch(br_uploads_t *u, int64_t user, const char *hash, int64_t now_ms);
/* Charge hash, of size bytes, to user's ledger. 0, or -1 (out of memory). */
int br_uploads_add(br_uploads_t *u, int64_t user, const char *hash, int64_t size,
                   int64_t now_ms);
/* The bytes hash is charged to user with (0: it is not in their ledger). */
int64_t br_uploads_size(const br_uploads_t *u, int64_t user, const char *hash);
/* Whether the ledger of a user other than `user` holds hash: a file another
 * upload under way wrote (u may be NULL: none). */
int br_uploads_others(const br_uploads_t *u, int64_t user, const char *hash);
/* Bytes user's ledger holds. */
int64_t br_uploads_pending(const br_uploads_t *u, int64_t user);
/* The bytes user's jobs and data sets refer to, as last told (br_uploads_set_used),
 * when told less than BR_UPLOADS_USED_MS before now_ms; -1 when not. */
int64_t br_uploads_used(const br_uploads_t *u, int64_t user, int64_t now_ms);
void br_uploads_set_used(br_uploads_t *u, int64_t user, int64_t used, int64_t now_ms);
/* hash is referenced by something of user's now: out of their ledger (and their
 * cached referenced bytes forgotten). */
void br_uploads_settle(br_uploads_t *u, int64_t user, const char *hash);
/* The files last written to BR_UPLOADS_TTL_MS or more before now_ms leave every
 * ledger: a new array of their hashes (NULL: out of memory). */
json_t *br_uploads_expire(br_uploads_t *u, int64_t now_ms);

#endif
