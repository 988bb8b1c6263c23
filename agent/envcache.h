/* envcache.h - the environments jobs' setups build on this node (the spec's setup:,
 * docs/files.md, "Setup"), kept in the node's cache and shared by later jobs of the
 * same user with the same setup:
 *   CACHE/envs/                  searchable, not listable (0711)
 *   CACHE/envs/<uid>/            the user's own (0700, theirs)
 *   CACHE/envs/<uid>/<key>/      one environment (BRAMBLE_ENV_DIR); whole once it
 *                                holds .bramble-ready (setuprun.h)
 *   CACHE/envs/<uid>/<key>.setup the setup's text, for the runner
 *   CACHE/envs/<uid>/<key>.lock  held while it is built
 * The key is a hash of the uid, the setup's text, the image (its ID when it was
 * loaded into bramble, else its name; none for a bare job) and the
 * path and contents of each of setup_files, read from the attempt's copy of the
 * code. An environment belongs to its user: another user's job, even with the same
 * setup, builds its own, so that nobody runs what another may have changed. */
#ifndef BRAMBLE_ENVCACHE_H
#define BRAMBLE_ENVCACHE_H

#include <jansson.h>
#include <sys/types.h>

#include "err.h"

typedef struct {
    char dir[4200];    /* BRAMBLE_ENV_DIR */
    char user_dir[4200]; /* CACHE/envs/<uid>, the user's own */
    int ready;         /* 1: built already (a hit: nothing to run) */
} br_envcache_env_t;

/* The environment of setup (its command and files, the job.run order's "setup")
 * for a job of uid:gid whose code is in code_dir (NULL: none), in image (NULL: a
 * bare job), under cache: its
 * directories made as above and the setup's text written for the runner. 0, or -1
 * with err naming what is wrong (a setup file not in the code dir, a full disk). */
int br_envcache_prepare(const char *cache, const json_t *setup, const char *code_dir,
                        const char *image, uid_t uid, gid_t gid, br_envcache_env_t *env,
                        br_err_t *err);

#define BR_ENVCACHE_LISTED 1024 /* environments a heartbeat names at most */

/* The environments built under cache, most recently used first: [{"key", "uid",
 * "bytes", "seconds" (its setup took), "built", "used" (unix ms)}]. */
json_t *br_envcache_list(const char *cache);

/* Bytes the environments under cache hold, as their setups counted them. */
int64_t br_envcache_bytes(const char *cache);

/* Remove the environment key (of any user) unless a setup is building it now
 * (EBUSY) or in_use (an object whose keys are the directories running attempts
 * use; NULL: none) names it (EBUSY). 0, or -1 with err (ENOENT: none such). */
int br_envcache_remove(const char *cache, const char *key, const json_t *in_use,
                       br_err_t *err);

/* Make room: remove the environments used longest ago, none in in_use, until
 * their bytes are at most keep. Returns how many were removed. */
int br_envcache_trim(const char *cache, int64_t keep, const json_t *in_use);

#endif
