/* pack.h - the packer: what of a local directory travels with a job (`code: DIR`,
 * `files:`) or makes a data set (`bramble data push`), decided the way git decides
 * what a work tree holds, and hashed into a manifest (mfbuild.h) that names every
 * file by its BLAKE2b-256.
 *
 * What is sent (docs/files.md): in a git work tree, exactly what `git ls-files
 * --cached --others --exclude-standard` lists (tracked files, and untracked ones
 * that no .gitignore, .git/info/exclude or core.excludesFile ignores), less what
 * a .brambleignore ignores; outside one, what the .gitignore and .brambleignore
 * files in the tree leave. A .brambleignore (at any level, git's syntax) is read
 * after the .gitignore beside it, so its rules win both ways: `!data/` sends a
 * git-ignored data/. `.git` is never sent. A symlink is kept as a link when it
 * stays inside the tree; one that points outside (or is absolute) is refused, and
 * so are sockets, fifos, devices and files that cannot be read, each named. A tree
 * holding another repository (a submodule, a clone) sends that one's files too. */
#ifndef BRAMBLE_PACK_H
#define BRAMBLE_PACK_H

#include <jansson.h>
#include <stdatomic.h>
#include <stddef.h>

#include "err.h"

#define BR_PACK_LEFT_OUT 8 /* left-out paths remembered for the user */

typedef struct br_pack br_pack_t;

/* An empty pack; cancel (may be NULL) stops hashing with ECANCELED. */
br_pack_t *br_pack_new(const atomic_int *cancel, br_err_t *err);
void br_pack_destroy(br_pack_t **p);

/* Add what of the directory dir is to be sent, at to ("" for the root of the
 * manifest, else a relative path). -1 with err naming the path that is wrong. */
int br_pack_dir(br_pack_t *p, const char *dir, const char *to, br_err_t *err);

/* Add the regular file file (a link to one is followed: it was named) as to. */
int br_pack_file(br_pack_t *p, const char *file, const char *to, br_err_t *err);

/* The manifest of everything added (mfbuild.h's JSON, root "dir"); the pack keeps
 * it (borrowed). NULL with err (a path added twice). */
const json_t *br_pack_manifest(br_pack_t *p, br_err_t *err);

/* After br_pack_manifest: the local file behind the manifest's path, or NULL. */
const char *br_pack_source(const br_pack_t *p, const char *path);

/* Paths the rules left out (a directory ends in `/`; one inside a left-out
 * directory is not counted): how many, and the first BR_PACK_LEFT_OUT of them. */
size_t br_pack_left_out(const br_pack_t *p, const char *const **names);

/* Whether the last directory added was in a git work tree. */
int br_pack_in_git(const br_pack_t *p);

/* The n (at most 16) largest files, largest first: for a refusal over quota. */
size_t br_pack_largest(const br_pack_t *p, size_t n, const char **path, int64_t *size);

#endif
