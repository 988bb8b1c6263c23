/* upload.h - a tree of files sent into the coordinator's content store (PROTOCOL.md
 * section 12), over a client connection: the manifest's own text first (its
 * "listing"), then only the files the store lacks, each from what a cut-off upload
 * left, in chunks of BR_UPLOAD_CHUNK with BR_CLIENT_PENDING in flight. Afterwards
 * every file of the manifest is stored and verified by its hash, and the listing
 * names the tree to the request that uses it (data.push, job.submit's code, an
 * agent's job.outputs). The CLI (cli/upload.c: a progress line, its words for a
 * refusal) and the agent (its jobs' outputs) both send through it. */
#ifndef BRAMBLE_UPLOAD_H
#define BRAMBLE_UPLOAD_H

#include <jansson.h>
#include <stdint.h>

#include "client.h"
#include "err.h"

#define BR_UPLOAD_CHUNK (256 * 1024) /* the coordinator's BR_CONTENT_CHUNK */

typedef struct {
    int64_t files;      /* files of the tree */
    int64_t bytes;      /* their bytes */
    int64_t sent_files; /* of them, sent (in whole or in part) */
    int64_t sent;       /* bytes of files sent (the listing not counted) */
    int64_t listing;    /* bytes of the manifest's own text sent */
} br_upload_stats_t;

typedef struct {
    br_client_t *client;
    int timeout_ms;         /* for one answer (the store fsyncs a whole file) */
    const json_t *manifest; /* the whole manifest (mfbuild.h's JSON) */
    /* the local file behind a manifest path (NULL: gone) */
    const char *(*source)(void *arg, const char *path);
    /* bytes sent so far of those the store lacked (total), as they go; may be NULL */
    void (*progress)(void *arg, int64_t done, int64_t total);
    /* what the store lacks is known (bytes so far), with the manifest's listing and
     * summary: after each page of content.lack's answers, before the files it names
     * are sent; may be NULL (bramble submit has the job's code staged on a node once
     * it is much, docs/files.md) */
    void (*lacking)(void *arg, const json_t *listing, const json_t *summary, int64_t bytes);
    void *arg;
} br_upload_t;

/* Send what the store lacks of u->manifest. On success *listing is {"hash",
 * "size"} of the manifest's text and *summary {"hash", "root", "files", "bytes"}
 * (new references). -1 with err otherwise, and path (len bytes; may be NULL) the
 * manifest path the refusal is about ("" for none): EBADMSG when a file is not what
 * was hashed (changed since), EDQUOT over a quota, ENOSPC a full store. */
int br_upload_run(const br_upload_t *u, json_t **listing, json_t **summary,
                  br_upload_stats_t *st, char *path, size_t len, br_err_t *err);

#endif
