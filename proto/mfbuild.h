/* mfbuild.h - a manifest (docs/checkpoints.md, "The manifest") built entry by
 * entry: each regular file hashed from an open descriptor (BLAKE2b-256, refused when
 * it changes while it is read), each symlink recorded by its target text, and the
 * whole turned into the manifest's JSON and hash. The agent builds checkpoint
 * manifests with it (agent/manifest.h) and the CLI the manifests of the code and data
 * sets it packs (pack.h), so both agree on every byte. */
#ifndef BRAMBLE_MFBUILD_H
#define BRAMBLE_MFBUILD_H

#include <jansson.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#include "err.h"
#include "manifest_check.h"

#define BR_MANIFEST_BUF (1 << 20)    /* bytes read and hashed at a time */
#define BR_MANIFEST_MAX_FILES 100000 /* files and links in one manifest */
#define BR_MANIFEST_MAX_DEPTH 64     /* directory levels below its root */

typedef struct br_mfbuild br_mfbuild_t;

/* An empty manifest; cancel (may be NULL): hashing stops with ECANCELED once it is
 * non-zero. */
br_mfbuild_t *br_mfbuild_new(const atomic_int *cancel, br_err_t *err);
void br_mfbuild_destroy(br_mfbuild_t **b);

/* Add the regular file open at fd (st: what fstat said of it before) as rel,
 * hashed here; src (may be NULL) is kept with it (br_mfbuild_src). -1 with err
 * naming rel when it cannot be read, changed while it was read (EAGAIN), is not
 * UTF-8 (EILSEQ), or would be the BR_MANIFEST_MAX_FILES + 1st. */
int br_mfbuild_file(br_mfbuild_t *b, int fd, const struct stat *st, const char *rel,
                    const char *src, br_err_t *err);
/* Add a symlink rel whose target text is target (st: its lstat). */
int br_mfbuild_link(br_mfbuild_t *b, const char *rel, const char *target,
                    const struct stat *st, const char *src, br_err_t *err);

/* Files and links added, and the bytes of the files. */
size_t br_mfbuild_count(const br_mfbuild_t *b);
int64_t br_mfbuild_bytes(const br_mfbuild_t *b);

/* The manifest of what was added, root "dir" or "file": {"hash", "root", "files",
 * "bytes", "entries": [...]} with every entry, in byte order of their paths. A path
 * added twice is refused (EEXIST, naming it). A new reference, or NULL with err. */
json_t *br_mfbuild_json(br_mfbuild_t *b, const char *root, br_err_t *err);

/* After br_mfbuild_json: the src given with the entry at path, or NULL. */
const char *br_mfbuild_src(const br_mfbuild_t *b, const char *path);

/* The n largest files added (n at most 16): paths and sizes, largest first, into
 * path[] (borrowed) and size[]; the count filled. */
size_t br_mfbuild_largest(const br_mfbuild_t *b, size_t n, const char **path,
                          int64_t *size);

#endif
