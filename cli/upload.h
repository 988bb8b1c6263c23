/* upload.h - a packed tree sent into the coordinator's content store (docs/files.md,
 * PROTOCOL.md section 12): the manifest's own text first (its "listing"), then only
 * the files the store lacks, each from what a cut-off upload left, in chunks of
 * BR_CONTENT_CHUNK with BR_CLIENT_PENDING in flight. Afterwards every file of the
 * manifest is stored and verified by its hash, and the listing names the tree to
 * the request that uses it (data.push). A progress line (bytes, rate, time left) is
 * shown on a terminal's stderr once an upload has taken a second. */
#ifndef BRAMBLE_CLI_UPLOAD_H
#define BRAMBLE_CLI_UPLOAD_H

#include <jansson.h>
#include <stdint.h>

#include "cli.h"
#include "pack.h"

typedef struct {
    int64_t files;   /* files of the tree */
    int64_t bytes;   /* their bytes */
    int64_t sent_files; /* of them, sent (in whole or in part) */
    int64_t sent;    /* bytes of files sent (the listing not counted) */
    int64_t listing; /* bytes of the manifest's own text sent */
} cli_upload_t;

/* Send what the store lacks of p's manifest. progress: a progress line may be
 * shown. On success *listing is {"hash", "size"} of the manifest's text and
 * *summary {"hash", "root", "files", "bytes"} (new references). CLI_OK, or
 * CLI_FAIL after saying why (over a quota: naming the largest files). */
int cli_upload(cli_t *cli, br_pack_t *p, int progress, json_t **listing, json_t **summary,
               cli_upload_t *st);

/* Tell stderr what the ignore rules left out of p (nothing when nothing). */
void cli_upload_say_left_out(const br_pack_t *p);

#endif
