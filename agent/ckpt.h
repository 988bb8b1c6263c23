/* ckpt.h - watches one attempt's checkpoint directory and says when a checkpoint is
 * complete: an entry matching the pattern whose name carries its step (the last
 * number in the name), complete when the marker file exists in it (complete_file),
 * or, without one, when it holds a known marker (trainer_state.json of Hugging Face
 * Trainer, .metadata of torch.distributed.checkpoint) or has stopped changing for
 * stable_ms. inotify wakes it; a periodic rescan is the fallback and catches files
 * created deeper down. Entries complete before the attempt started are not its own
 * and are not reported. docs/checkpoints.md describes the layouts. */
#ifndef BRAMBLE_CKPT_H
#define BRAMBLE_CKPT_H

#include <stdint.h>

#include "err.h"

typedef struct br_ckpt br_ckpt_t;

/* A complete checkpoint: its path, step, total size in bytes, newest mtime (unix ms). */
typedef void (*br_ckpt_fn)(void *arg, const char *path, int64_t step, int64_t size,
                           int64_t mtime_ms);

/* dir need not exist yet. pattern: fnmatch(3) glob (NULL = "*"); complete_file: a
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

/* Total bytes of the files under path (bounded, as the watcher counts them). */
int64_t br_ckpt_size(const char *path);

/* The step of a name: its last run of digits, or -1 when it has none. */
int64_t br_ckpt_step(const char *name);

#endif
