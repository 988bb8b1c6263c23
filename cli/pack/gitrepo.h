/* gitrepo.h - what git says of a directory inside a work tree, read from its files
 * without running git: where the work tree's top is, the paths its index tracks
 * (index format 2, 3 or 4, SHA-1 or SHA-256 repositories), and where its excludes
 * are (.git/info/exclude, and core.excludesFile from the system, global and
 * repository config, or its default ~/.config/git/ignore). A worktree made by `git
 * worktree add` (a .git file naming its git dir) reads the same. The packer (pack.h)
 * uses it to send what `git ls-files --cached --others --exclude-standard` lists. */
#ifndef BRAMBLE_GITREPO_H
#define BRAMBLE_GITREPO_H

#include <stddef.h>

#include "err.h"

typedef struct br_gitrepo br_gitrepo_t;

/* The work tree that the directory dir (a real path, no trailing slash) is in: 1
 * with *repo, 0 when dir is in none (*repo NULL), -1 with err when its git files
 * cannot be read (an index that is damaged, or of a format this does not know). */
int br_gitrepo_open(const char *dir, br_gitrepo_t **repo, br_err_t *err);
void br_gitrepo_destroy(br_gitrepo_t **repo);

/* The work tree's top (a real path). */
const char *br_gitrepo_top(const br_gitrepo_t *r);
/* .git/info/exclude (it may not exist). */
const char *br_gitrepo_info_exclude(const br_gitrepo_t *r);
/* The user's excludes file (core.excludesFile, or its default), or NULL. */
const char *br_gitrepo_excludes_file(const br_gitrepo_t *r);

/* Paths the index tracks (relative to the top). */
size_t br_gitrepo_tracked(const br_gitrepo_t *r);
/* 1 when the index tracks path (a file, link or submodule) */
int br_gitrepo_tracks(const br_gitrepo_t *r, const char *path);
/* 1 when the index tracks a path below the directory dir ("" for the top) */
int br_gitrepo_tracks_below(const br_gitrepo_t *r, const char *dir);

#endif
