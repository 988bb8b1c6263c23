/* contentw.h - the content store's writes, off the coordinator's loop: each chunk
 * of a content.put is written, hashed and (the last of a file) checked, fsynced and
 * put in place (br_content_write) on a thread of its own, in the order the chunks
 * came, so that the answers of a wake (heartbeats) never wait on an upload's disk
 * work. The answers come back through br_contentw_fd: the loop takes them and sends
 * them, a chunk answered only once it is on disk, as before. A chunk that makes a
 * manifest's listing whole has it parsed there too, for the loop's listcache.h. */
#ifndef BRAMBLE_CONTENTW_H
#define BRAMBLE_CONTENTW_H

#include <stddef.h>
#include <stdint.h>

#include "content.h"
#include "err.h"
#include "msg.h"

#define BR_CONTENTW_QUEUE 1024 /* chunks waiting at once (256 MiB): more are EAGAIN */

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
/* The answer to the oldest chunk written, to send ({"held", "whole"}, or the error
 * br_content_write gave); NULL when none is done. When that chunk made a manifest's
 * listing whole, *listing is the manifest, parsed and verified on the writer's thread
 * (a new reference), and lhash (lhlen bytes) its content hash; else *listing is NULL. */
br_msg_t *br_contentw_take(br_contentw_t *w, json_t **listing, char *lhash, size_t lhlen);

#endif
