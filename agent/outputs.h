/* outputs.h - the files an attempt leaves that its spec's `outputs:` names
 * (docs/files.md), kept at its end, failed attempts too: on a thread of their own,
 * as the job's user, the working dir is walked, each file that a pattern matches
 * (as .gitignore lines match: `results/`, `*.json`, `!tmp.json`) is hashed into a
 * manifest (mfbuild.h), only what the coordinator's store lacks is sent
 * (proto/upload.h) over a connection of the node's own key, and `job.outputs` names
 * the tree to the coordinator. The agent holds the attempt's exit report until
 * this is done, so the outputs are stored before the job is seen to end.
 * Symlinks and what is not a regular file are left out; so is a directory that a
 * link leads to. */
#ifndef BRAMBLE_OUTPUTS_H
#define BRAMBLE_OUTPUTS_H

#include <jansson.h>
#include <stdint.h>
#include <sys/types.h>

#include "cred.h"
#include "err.h"

typedef struct br_outputs br_outputs_t;

/* Start the thread; cred: the node's (kept, not copied: it outlives this). */
br_outputs_t *br_outputs_new(const br_cred_t *cred, br_err_t *err);
void br_outputs_destroy(br_outputs_t **o);

/* Readable (an eventfd) when a result can be taken. */
int br_outputs_fd(const br_outputs_t *o);

/* Keep the outputs of attempt `attempt` of job `job`: the files below dir that
 * patterns (a JSON array of strings) match, read as uid:gid. */
int br_outputs_submit(br_outputs_t *o, int64_t job, int attempt, const char *dir,
                      const json_t *patterns, uid_t uid, gid_t gid, br_err_t *err);

/* A finished one: {"job", "attempt", "files", "bytes", "sent"} or with "error"; NULL
 * when none is finished. */
json_t *br_outputs_take(br_outputs_t *o);

#endif
