/* envcache.h - the environments jobs' setups build on this node (the spec's setup:,
 * docs/files.md, "Setup"), kept in the node's cache and shared by later jobs of the
 * same user with the same setup:
 *   CACHE/envs/                  searchable, not listable (0711)
 *   CACHE/envs/<uid>/            the user's own (0700, theirs)
 *   CACHE/envs/<uid>/<key>/      one environment (BRAMBLE_ENV_DIR); whole once it
 *                                holds .bramble-ready (setuprun.h)
 *   CACHE/envs/<uid>/<key>.setup the setup's text, for the runner
 *   CACHE/envs/<uid>/<key>.lock  held while it is built
 * The key is a hash of the uid, the setup's text, the image (none yet) and the
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
 * for a job of uid:gid whose code is in code_dir (NULL: none), under cache: its
 * directories made as above and the setup's text written for the runner. 0, or -1
 * with err naming what is wrong (a setup file not in the code dir, a full disk). */
int br_envcache_prepare(const char *cache, const json_t *setup, const char *code_dir,
                        uid_t uid, gid_t gid, br_envcache_env_t *env, br_err_t *err);

#endif
