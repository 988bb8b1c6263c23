/* util.h - small shared helpers: units (durations, sizes, counts), clocks, files. */
#ifndef BRAMBLE_UTIL_H
#define BRAMBLE_UTIL_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "err.h"

/* "500ms", "1s", "1.5m", "12h", "2d"; a bare number is seconds. -> milliseconds.
 * Longer than BR_DURATION_MAX_MS: EINVAL, with the limit in the words. */
#define BR_DURATION_MAX_MS 1e15
int br_parse_duration(const char *s, int64_t *ms, br_err_t *err);

/* "24GiB", "512MiB", "16GB", "1024", "1.5TiB" -> bytes (binary and decimal units,
 * a bare number is bytes, case of the unit ignored). 2^63 bytes or more: EINVAL,
 * with the limit in the words. */
int br_parse_size(const char *s, uint64_t *bytes, br_err_t *err);

/* "8B", "70B", "1.5B", "350M", "7e9", "125K" -> a count (model parameters); more
 * than 1e16: EINVAL, with the limit in the words. */
int br_parse_count(const char *s, double *count, br_err_t *err);

/* A TCP or UDP port number from min to 65535 (EINVAL "'x': expected MIN..65535"). */
int br_parse_port(const char *s, int min, int *port, br_err_t *err);

/* Format bytes as "24.0GiB" style into buf. Returns buf. */
char *br_format_size(uint64_t bytes, char *buf, size_t len);

/* Format milliseconds as "1s", "250ms", "5m". Returns buf. */
char *br_format_duration(int64_t ms, char *buf, size_t len);

int64_t br_now_ms(void);  /* wall clock, unix milliseconds */
int64_t br_mono_ms(void); /* monotonic clock, milliseconds */
int64_t br_mono_us(void); /* monotonic clock, microseconds */

/* Raise RLIMIT_NOFILE soft limit to the hard limit (a ROUTER needs one fd per peer). */
void br_raise_nofile(void);

/* mkdir -p with mode for every created component. */
int br_mkdir_p(const char *path, mode_t mode, br_err_t *err);
/* Remove name in the directory dfd (AT_FDCWD: a path) and everything under it,
 * never following a symlink; what cannot be removed stays, silently. */
void br_rm_tree(int dfd, const char *name);
/* The same, stopping early (what is left stays) once *stop is set (NULL: never). */
void br_rm_tree_until(int dfd, const char *name, const atomic_int *stop);

/* Read a whole file (at most max bytes, else EFBIG). Returns malloc'd buffer with a
 * terminating NUL not counted in *len. */
char *br_read_file(const char *path, size_t max, size_t *len, br_err_t *err);

/* Whether prog is an executable in a directory of $PATH (/usr/bin:/bin without
 * one). */
int br_on_path(const char *prog);

/* Write a file atomically (temp file, fsync, rename) with the given mode. */
int br_write_file(const char *path, const void *data, size_t len, mode_t mode,
                  br_err_t *err);

/* Valid name for nodes, jobs and users: [a-z0-9-], 1..63 chars, not starting with '-'. */
int br_valid_name(const char *s);

/* Copy src into dst of size n, always terminated. Returns dst. */
char *br_strlcpy(char *dst, const char *src, size_t n);

/* Write all n bytes of b to fd, again after EINTR and short writes. 0, or -1 with
 * errno. */
int br_write_all(int fd, const void *b, size_t n);

/* Copy what is left of src (from its offset) to out: in the kernel where the file
 * systems can (copy_file_range, no bytes through here), else by read and write
 * through buf (len bytes). 0, or -1 with errno. */
int br_copy_all(int src, int out, void *buf, size_t len);

#endif
