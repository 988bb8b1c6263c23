/* ckpt.h - watches one attempt's checkpoint directory and says when a checkpoint is
 * complete: an entry matching the pattern whose name carries its step (the last
 * number in the name), complete when the marker file exists in it (complete_file),
 * or, without one, when it holds a known marker (trainer_state.json of Hugging Face
 * Trainer, .metadata of torch.distributed.checkpoint) or has stopped changing for
 * stable_ms; once any entry (this attempt's or an earlier one's) has shown a known
 * marker, an entry without one is never complete. inotify wakes it, on the directory
 * and inside each incomplete entry (a marker is acted on at once); a periodic rescan
 * is the fallback and catches files created deeper down. Entries complete before the
 * attempt started are not its own and are not reported. docs/checkpoints.md
 * describes the layouts. */
#ifndef BRAMBLE_CKPT_H
#define BRAMBLE_CKPT_H

#include <limits.h>
#include <stdint.h>
#include <sys/types.h>

#include "err.h"
#include "fsid.h"

typedef struct br_ckpt br_ckpt_t;

/* A complete checkpoint: its path, step, total size in bytes, newest mtime (unix ms). */
typedef void (*br_ckpt_fn)(void *arg, const char *path, int64_t step, int64_t size,
                           int64_t mtime_ms);

/* dir need not exist yet; /proc, /sys and /dev (or below) are refused, and a dir
 * that turns out to be in a kernel file system (a symlink into /proc) is not
 * scanned. Scans are spread over polls (a bounded amount of work per poll). pattern: fnmatch(3) glob (NULL = "*"); complete_file: a
 * plain file name or NULL. stable_ms: quiet time that makes an unmarked entry
 * complete. */
br_ckpt_t *br_ckpt_new(const char *dir, const char *pattern, const char *complete_file,
                       int64_t stable_ms, br_err_t *err);
void br_ckpt_destroy(br_ckpt_t **w);

/* inotify descriptor to poll for readability, or -1. */
int br_ckpt_fd(const br_ckpt_t *w);

/* Drain inotify events and rescan when due; calls fn once per newly complete
 * checkpoint. now_ms: monotonic milliseconds. */
void br_ckpt_poll(br_ckpt_t *w, int64_t now_ms, br_ckpt_fn fn, void *arg);

/* Once the attempt's processes have all ended, before its end is reported: the
 * first call makes a whole pass at once (ignoring the gap between scans), so a
 * checkpoint finished just before the exit is reported (fn) ahead of it. With clean
 * (every task exited 0), an entry without a marker that is still short of its quiet
 * time is waited for, up to stable_ms, as if the job were still running; after a
 * failure only what is complete now counts (a crash may have torn it). 1 when
 * nothing is left to wait for, 0 while something is: call again at the next tick.
 * Once it said 1 it says so again at once, looking at nothing (the caller may ask
 * at every tick while what it found is hashed). */
int br_ckpt_settle(br_ckpt_t *w, int64_t now_ms, int clean, br_ckpt_fn fn, void *arg);

/* Scan as this uid and gid from now on (fsid.h): the job's user. */
int br_ckpt_set_user(br_ckpt_t *w, uid_t uid, gid_t gid, br_err_t *err);

/* Whom it scans as (br_ckpt_set_user), or NULL: the agent itself. */
const br_fsid_t *br_ckpt_user(const br_ckpt_t *w);

/* The watched directory. */
const char *br_ckpt_dir(const br_ckpt_t *w);

/* A checkpoint a job reports itself: path (absolute, canonical) must be inside dir
 * (unless dir is NULL), reached without a symlink that leads out of it, and not in
 * /proc, /sys or /dev; everything is looked at as fsid (NULL: the agent itself), so
 * a path the job's user cannot reach is refused like one that does not exist. 0
 * with its size (bytes under it) and newest mtime, or -1 with err saying why. */
int br_ckpt_inspect(const char *dir, br_fsid_t *fsid, const char *path, int64_t *size,
                    int64_t *mtime_ms, br_err_t *err);

/* Open path with flags (O_CLOEXEC is added) under the same rules as
 * br_ckpt_inspect: inside dir (unless dir is NULL) without a symlink out of it, and
 * not in /proc, /sys or /dev. Run it as the job user (fsid.h). The fd, or -1 with
 * err. */
int br_ckpt_open(const char *dir, const char *path, int flags, br_err_t *err);

/* Total bytes of the files under path (bounded, as the watcher counts them). */
int64_t br_ckpt_size(const char *path);
/* What the watcher compares to see that an entry changed: total bytes, newest
 * mtime and number of files under path (bounded the same way). */
void br_ckpt_signature(const char *path, int64_t *size, int64_t *mtime_ms,
                       int64_t *files);

/* A checkpoint br_ckpt_newer found. */
typedef struct {
    char path[PATH_MAX]; /* dir/name */
    int64_t step, size, mtime_ms; /* as the watcher reports them */
} br_ckpt_found_t;

/* The newest checkpoint in dir that a resuming attempt may take instead of the one
 * it was given (docs/checkpoints.md, "Nothing newer is lost"): an entry matching
 * pattern (NULL = "*") whose step is above above_step, a directory complete by a
 * marker as the watcher judges it (complete_file when set, else a known marker;
 * stability alone never: without a marker a finished checkpoint cannot be told
 * from one whose writer died in the middle of it), whose marker was modified at or
 * after after_ms (unix ms). Looked at as fsid (NULL: the agent), reading the
 * directory's names and stat'ing the candidates, no more: cheap enough for the
 * agent's loop. 1 with *found, 0 when there is none (or dir is not there), -1 with
 * err for a bad dir. */
int br_ckpt_newer(const char *dir, const char *pattern, const char *complete_file,
                  int64_t above_step, int64_t after_ms, br_fsid_t *fsid,
                  br_ckpt_found_t *found, br_err_t *err);

/* The step of a name: its last run of digits, or -1 when it has none. */
int64_t br_ckpt_step(const char *name);

#endif
