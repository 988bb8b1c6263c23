/* content.h - the coordinator's content store (--store-dir): the files of data sets,
 * jobs' code and their outputs, each kept once by its BLAKE2b-256 as
 * DIR/objects/HH/HASH, and the manifests that name them as DIR/manifests/HASH.json.
 * A file comes in chunk by chunk, in order, into DIR/partial/HASH (so an upload cut
 * off goes on from what is there); it counts only once it is whole, hashes to its
 * name, is fsynced and renamed into objects/ (and the directory fsynced). What
 * refers to a content is the SQL store's (br_store_content_*); this keeps bytes and
 * the quota on all of them (objects and partials). Files no reference holds are
 * removed by br_content_sweep, after the wake that dropped the last reference has
 * committed; partials untouched for a day when the coordinator starts. */
#ifndef BRAMBLE_CONTENT_H
#define BRAMBLE_CONTENT_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "err.h"
#include "store.h"

#define BR_CONTENT_CHUNK (256 * 1024) /* bytes of one content.put */
#define BR_CONTENT_OPEN 64            /* partials kept open (with their hash so far) */

typedef struct br_content br_content_t;

/* Open (make) the store at dir; quota: bytes it may hold in all, 0 for no limit. */
br_content_t *br_content_open(const char *dir, uint64_t quota, br_err_t *err);
void br_content_destroy(br_content_t **c);

const char *br_content_dir(const br_content_t *c);
uint64_t br_content_quota(const br_content_t *c);
/* Bytes held: whole contents and partials. */
uint64_t br_content_used(br_content_t *c);

/* 1 when the content hash (lowercase hex) is whole here, 0 when not. */
int br_content_has(br_content_t *c, const char *hash);
/* Up to len bytes of the whole content hash from offset into buf, *size its
 * length: the count read, or -1 with err (ENOENT: not here; ERANGE: offset past
 * its end). */
ssize_t br_content_read(br_content_t *c, const char *hash, int64_t offset, void *buf,
                        size_t len, int64_t *size, br_err_t *err);
/* Bytes of hash's partial held so far (0: none): the shared one (who 0), or user
 * who's own. */
int64_t br_content_partial(br_content_t *c, const char *hash, int64_t who);

/* Add len bytes at offset to the content hash of size bytes. offset must be what
 * is held (ERANGE otherwise, *held saying what is). When the content is whole it is
 * checked (EBADMSG: it does not hash to its name, and the partial is gone), fsynced
 * and put in place: *whole 1. Past the quota: EDQUOT; a full disk: ENOSPC (what the
 * write added is taken back). 0, or -1 with err.
 * who: 0 for the shared partial (a node's, the admin's), whose content the store may
 * hold already (then *whole at once); else a user's own partial, written even when
 * the store holds the content, unless that user proved it before: a user's whole
 * partial is their proof that they hold the content (br_content_proved), knowing its
 * hash being no such proof, and is let go when the store held it already. */
int br_content_write(br_content_t *c, const char *hash, int64_t who, int64_t size,
                     int64_t offset, const void *data, size_t len, int64_t *held, int *whole,
                     br_err_t *err);
/* Whether user who sent every byte of content hash (br_content_write) in the last
 * day. */
int br_content_proved(br_content_t *c, const char *hash, int64_t who);

/* Keep a manifest's text as manifests/HASH.json (fsynced), unless it is there. */
int br_content_put_manifest(br_content_t *c, const json_t *manifest, br_err_t *err);
/* The manifest whose hash is mhash, or NULL with err (ENOENT). */
json_t *br_content_get_manifest(br_content_t *c, const char *mhash, br_err_t *err);

/* A content (manifest 0) or a manifest (1) that may have lost its last reference:
 * looked at by the next sweep. */
int br_content_doubt(br_content_t *c, const char *hash, int manifest);
/* After a commit: remove every doubted content no reference in s holds, and
 * manifests no data set names (br_store_content_refs, br_store_data_manifest_used).
 * The number removed. */
int br_content_sweep(br_content_t *c, br_store_t *s);
/* Remove the contents nothing in s refers to that are older than max_age_s: what
 * uploads that never became a data set left (at a start). The number removed. */
int br_content_collect(br_content_t *c, br_store_t *s, int64_t max_age_s);

#endif
