/* sendtree.h - a packed tree sent into the coordinator's content store (docs/files.md),
 * as the CLI shows it: proto/upload.h sends only what the store lacks; this adds a
 * progress line (bytes, rate, time left) on a terminal's stderr once an upload has
 * taken a second, and the refusals in the user's words (a file changed since it was
 * hashed; over a quota, the tree's largest files). */
#ifndef BRAMBLE_CLI_SENDTREE_H
#define BRAMBLE_CLI_SENDTREE_H

#include <jansson.h>
#include <stdint.h>

#include "cli.h"
#include "pack.h"
#include "upload.h"

typedef br_upload_stats_t cli_upload_t;

/* Send what the store lacks of p's manifest. progress: a progress line may be
 * shown. stage: {"spec", "sets"} of the job whose code it is, to have it fetched
 * by the node the job would go to while it is sent (code.stage), or NULL. On success *listing is {"hash", "size"} of the manifest's text and
 * *summary {"hash", "root", "files", "bytes"} (new references). CLI_OK, or
 * CLI_FAIL after saying why (over a quota: naming the largest files). */
int cli_upload(cli_t *cli, br_pack_t *p, int progress, const json_t *stage,
               json_t **listing, json_t **summary, cli_upload_t *st);

/* Tell stderr what the ignore rules left out of p (nothing when nothing). */
void cli_upload_say_left_out(const br_pack_t *p);

#endif
