/* resume.h - where a resuming attempt starts from: the checkpoint its order names
 * (BRAMBLE_RESUME_FROM), or a newer complete one in the job's checkpoint dir that
 * the previous attempt wrote after its last report: a node that dies just after
 * finishing a checkpoint, before its agent counted it, loses nothing when the next
 * node sees the same disk (docs/checkpoints.md, "Nothing newer is lost"). */
#ifndef BRAMBLE_RESUME_H
#define BRAMBLE_RESUME_H

#include <jansson.h>
#include <stdint.h>
#include <sys/types.h>

#include "ckpt.h"
#include "err.h"

/* 0 when an order's checkpoint section (NULL: none) is well formed for this: its
 * "resume_after", when there, a whole number of unix ms; -1 with err otherwise. */
int br_resume_check(const json_t *checkpoint, br_err_t *err);

/* When checkpoint carries "resume_after" (when the previous attempt started), look
 * in its dir, as uid/gid, for a complete checkpoint above env's BRAMBLE_RESUME_STEP
 * (any step when BRAMBLE_RESUME_FROM is empty) whose marker was written since then
 * (br_ckpt_newer); take the newest: env's BRAMBLE_RESUME_FROM and
 * BRAMBLE_RESUME_STEP then name it. 1 with *found, 0 when the attempt resumes as
 * ordered (nothing newer, no "resume_after", or a BRAMBLE_RESUME_STEP that is not a
 * step), -1 with err (env unchanged). */
int br_resume_newer(const json_t *checkpoint, json_t *env, uid_t uid, gid_t gid,
                    br_ckpt_found_t *found, br_err_t *err);

#endif
