/* cache.h - the node's cache of the trees jobs bring (--cache-dir, docs/files.md):
 * a job's code, pulled once from the coordinator's content store (pull.h, with the
 * coordinator as the holder) and kept by its manifest hash, and the working
 * directories of attempts built from it. The layout:
 *   DIR/trees/<manifest hash>/   a whole tree, verified file by file (0700)
 *   DIR/.by-hash/<file hash>     each file once, shared by the trees (0700)
 *   DIR/.by-hash-seals/<hash>    its seal when last verified (pull.h: not hashed again)
 *   DIR/work/<job>.<attempt>/    an attempt's own copy, the job user's (0700)
 * DIR and DIR/work are searchable but not listable (0711), so a job reaches its own
 * working directory and nothing else: it can neither change the cache nor see
 * another job's files. A tree is renamed into place only once all of it is there
 * (pull.h), so a tree that is present is whole. */
#ifndef BRAMBLE_CACHE_H
#define BRAMBLE_CACHE_H

#include <jansson.h>
#include <stdint.h>
#include <sys/types.h>

#include "err.h"

typedef struct br_cache br_cache_t;

/* The cache at dir (made when missing); listings: where the node keeps whole
 * manifests (listing.h), where a pulled tree's listing is. data_dir: the agent's
 * data dir, made searchable when dir is in it and a job user must reach its work. */
br_cache_t *br_cache_new(const char *dir, const char *listings, const char *data_dir,
                         br_err_t *err);
void br_cache_destroy(br_cache_t **c);

const char *br_cache_dir(const br_cache_t *c);
/* DIR/trees/<mhash> into buf. */
void br_cache_tree_path(const br_cache_t *c, const char *mhash, char *buf, size_t len);
/* DIR/work/spare-<mhash> into buf: the working dir a pull of the code mhash builds
 * as it goes (pull.h), which br_cache_workdir hands to the first attempt whole. */
void br_cache_spare_path(const br_cache_t *c, const char *mhash, char *buf, size_t len);
/* DIR/work: where attempts' working dirs (DIR/work/JOB.ATTEMPT) are made. */
void br_cache_work_path(const br_cache_t *c, char *buf, size_t len);
/* 1 when the tree of the manifest hash mhash is here, whole; 0 when not. */
int br_cache_has(const br_cache_t *c, const char *mhash);

/* Build the working directory of attempt `attempt` of job `job` from the cached
 * tree that summary (the job.run order's code manifest) names: a fresh copy of every
 * file and link, owned by uid:gid, at DIR/work/<job>.<attempt> (an old one there is
 * removed first); its path into out. The spare copy a pull made as it went
 * (br_cache_spare_path), when there is one, becomes it (made uid:gid's), and no
 * file is copied; else each file is hashed as it is copied, unless
 * it is sealed as verified and unchanged since (br_cache_seal): one that is not
 * what the manifest says (a damaged cache) fails with EBADMSG, and the tree and that
 * file leave the cache, to be fetched again. 0, or -1 with err. */
int br_cache_workdir(br_cache_t *c, int64_t job, int attempt, const json_t *summary,
                     uid_t uid, gid_t gid, char *out, size_t len, br_err_t *err);

/* The tree that summary (a manifest's summary) names was verified file by file just
 * now (a pull put it in place): remember each file's seal (its inode, size and
 * times), so that br_cache_workdir copies a file whose seal is unchanged without
 * hashing it again, in the kernel. A file written to or replaced since has another
 * seal and is hashed as it is copied. Seals are kept in DIR/seals (the newest few
 * trees' in memory too). */
void br_cache_seal(br_cache_t *c, const json_t *summary);

/* The cached tree that summary (a manifest's summary) names, checked and made
 * readable to every user inside (its directories 0755, its files a+r: DIR/trees
 * itself stays closed, so only a mount reaches it) to be mounted read-only in a job
 * (a data set, an image's archive), its path into out and marked used now. Each
 * file whose seal changed since it was last verified (br_cache_seal; seals are kept
 * in DIR/seals across restarts) is hashed first: one that is not what the manifest
 * says fails with EBADMSG, and the tree and that file leave the cache, to be fetched
 * again. 0, or -1 with err (ENOENT: it is not here). */
int br_cache_mount_path(br_cache_t *c, const json_t *summary, char *out, size_t len,
                        br_err_t *err);
#define BR_CACHE_TREES_TOLD 4096 /* trees a heartbeat names at most */

/* The manifest hashes of the trees here, whole: a new array. */
json_t *br_cache_trees(const br_cache_t *c);
/* A stamp of DIR/trees (its inode and modification time): a stamp other than the
 * last one told means a tree came or went, by a pull or by hand (a cache emptied
 * with rm). 0 when it cannot be read. */
int64_t br_cache_trees_stamp(const br_cache_t *c);

/* Bytes the cache holds: its files by hash, each counted once. */
int64_t br_cache_used(const br_cache_t *c);
/* Room for a tree of need bytes within quota (< 0: no cap): the trees used longest
 * ago leave the cache first (with the files no other tree holds; the attempts'
 * own copies and the trees keep names as keys, mounted in running jobs, are never
 * touched), until need fits or none is left. *limit gets
 * the bytes a pull may then write (-1: no cap). 0, or -1 with err (ENOSPC: the
 * tree is bigger than the quota). */
int br_cache_room(br_cache_t *c, int64_t quota, int64_t need, const json_t *keep,
                  int64_t *limit, br_err_t *err);

/* Drop the tree of manifest hash mhash from the cache. */
void br_cache_forget(br_cache_t *c, const char *mhash);
/* Remove the damaged trees set aside (a tree found damaged as a job was to mount it
 * is set aside, not removed: a running job may mount it) but those whose manifest
 * hash keep names as a key (mounted in running jobs). How many went. */
int br_cache_sweep_gone(br_cache_t *c, const json_t *keep);

/* At a start, before any pull: remove what pulls cut short left in trees/ (their
 * staging), what a stop left set aside in work/ (trash.h: an ended attempt's dir is
 * removed at its end), and the working directories not touched for max_age_s (of
 * attempts that ended while no agent ran) but those of the
 * attempts in keep (an array of {"job", "attempt"}: still running, to be taken
 * over; NULL: none), whose top directory may be older than that while they run.
 * How many working directories went. */
int br_cache_sweep_work(br_cache_t *c, int64_t max_age_s, const json_t *keep);

#endif
