/* contentw.h - the content store's writes, off the coordinator's loop: each chunk
 * of a content.put is written, hashed and (the last of a file) checked, fsynced and
 * put in place (br_content_write) on a thread of its own, in the order the chunks
 * came, so that the answers of a wake (heartbeats) never wait on an upload's disk
 * work. The answers come back through br_contentw_fd: the loop takes them and sends
 * them, a chunk answered only once it is on disk, as before. A chunk that makes a
 * manifest's listing whole has it parsed there too, for the loop's listcache.h.
 * Looks at what the store holds (br_contentw_look: a page of content.lack's
 * thousand files, each a path looked up twice) take their turn there as well, so
 * that the loop does no file system work for them either. */
#ifndef BRAMBLE_CONTENTW_H
#define BRAMBLE_CONTENTW_H

#include <stddef.h>
#include <stdint.h>

#include "content.h"
#include "err.h"
#include "msg.h"

#define BR_CONTENTW_QUEUE 1024 /* chunks waiting at once (256 MiB): more are EAGAIN */
#define BR_CONTENTW_LOOKS 64   /* looks waiting at once (each up to some 80 KiB): more are
                                * EAGAIN, and the caller looks itself */

typedef struct br_contentw br_contentw_t;

/* The writer of store c (which must outlive it), its thread started. */
br_contentw_t *br_contentw_new(br_content_t *c, br_err_t *err);
/* Stop: the chunk being written is finished, those waiting are dropped unanswered. */
void br_contentw_destroy(br_contentw_t **w);

/* Readable (an eventfd) when an answer can be taken. */
int br_contentw_fd(const br_contentw_t *w);
/* Queue the chunk [offset, offset+len) of content hash (size bytes in all), into
 * the partial br_content_write's who names; data is copied; reply (br_msg_reply of
 * the request) is taken, to be filled in. 0, or -1 with err (ENOMEM, or EAGAIN when
 * BR_CONTENTW_QUEUE wait) and reply untouched. */
int br_contentw_put(br_contentw_t *w, br_msg_t *reply, const char *hash, int64_t who,
                    int64_t size, int64_t offset, const void *data, size_t len, br_err_t *err);
/* A look at n contents of the store (hash[i]: whether the store holds it whole;
 * partial[i]: the bytes br_content_write's partial of `who` holds of it), made on
 * the writer's thread after the chunks queued before it are written. */
typedef struct br_contentw_look br_contentw_look_t;
struct br_contentw_look {
    size_t n;
    char (*hash)[72];       /* filled in by the caller; "" or not a hash: held by none */
    int64_t who;
    unsigned char *has;     /* the answers */
    int64_t *partial;
    int dropped;            /* the writer stopped before looking: answers unset */
    /* called on the loop's thread by br_contentw_take (or by br_contentw_destroy, with
     * dropped set) once the look is made; it owns the look from then on */
    void (*seen)(br_contentw_look_t *look, void *arg);
    void *arg;
};
/* A look at n contents for `who`'s partials, seen(look, arg) once made; hash to be
 * filled in. NULL when out of memory. */
br_contentw_look_t *br_contentw_look_new(size_t n, int64_t who,
                                         void (*seen)(br_contentw_look_t *, void *),
                                         void *arg);
void br_contentw_look_free(br_contentw_look_t **look);
/* Queue the look (taken on success; on failure, -1 with err, the caller's still:
 * EAGAIN when BR_CONTENTW_LOOKS wait). Looks do not count against the chunks' bound. */
int br_contentw_look(br_contentw_t *w, br_contentw_look_t *look, br_err_t *err);

/* The answer to the oldest chunk written, to send ({"held", "whole"}, or the error
 * br_content_write gave); NULL when none is done. When that chunk made a manifest's
 * listing whole, *listing is the manifest, parsed and verified on the writer's thread
 * (a new reference), and lhash (lhlen bytes) its content hash; else *listing is NULL.
 * Looks made before it are handed to their seen() on the way. */
br_msg_t *br_contentw_take(br_contentw_t *w, json_t **listing, char *lhash, size_t lhlen);

#endif
