/* ignore.h - git's ignore rules (gitignore(5)), read the way git reads them: a
 * pattern list per file, patterns with `*`, `?`, `[...]` and `**`, `!` negations,
 * a trailing `/` for directories only, a `/` at the start or inside anchoring the
 * pattern to its file's directory, the last matching pattern of a list deciding,
 * and lists nearer the path before those further up. The packer (pack.h) stacks
 * the lists of a walk: the user's global excludes, `.git/info/exclude`, then each
 * directory's `.gitignore` and `.brambleignore` (bramble's own rules, after git's,
 * so they win) as it goes down. Job outputs match paths with the same patterns. */
#ifndef BRAMBLE_IGNORE_H
#define BRAMBLE_IGNORE_H

#include <stddef.h>

#include "err.h"

/* git's wildmatch: 1 when text matches pattern. pathname: `*`, `?` and `[...]`
 * never match a `/`, and `**` between slashes (or at either end) matches any
 * number of directories; without it `*` matches anything. */
int br_wildmatch(const char *pattern, const char *text, int pathname);

typedef struct br_ignore br_ignore_t;

br_ignore_t *br_ignore_new(br_err_t *err);
void br_ignore_destroy(br_ignore_t **ig);

/* Push the patterns of text (len bytes: a file's contents) as a new list, read at
 * base ("" for the root, else a directory's path with no trailing slash, relative
 * to the root the paths asked about are relative to). bramble marks a list of
 * bramble's own rules (br_ignore_match's bramble_only). */
int br_ignore_push(br_ignore_t *ig, const char *base, const char *text, size_t len,
                   int bramble, br_err_t *err);
/* Push the patterns of the file at path; a file that is not there pushes an empty
 * list (so that every push can be popped alike). -1 with err when it cannot be read. */
int br_ignore_push_file(br_ignore_t *ig, const char *base, const char *path, int bramble,
                        br_err_t *err);
/* Lists pushed so far; pop back to n of them (leaving a directory). */
size_t br_ignore_depth(const br_ignore_t *ig);
void br_ignore_pop_to(br_ignore_t *ig, size_t n);

/* Whether path (relative to the root; is_dir: a directory) is ignored by the lists
 * pushed: 1 ignored, 0 not (no pattern matches, or the deciding one is a negation).
 * bramble_only: consult only the lists pushed with bramble set. Only lists whose
 * base is path's directory or above it count. Parents are not looked at: a walk
 * asks of a directory before it goes in. */
int br_ignore_match(const br_ignore_t *ig, const char *path, int is_dir,
                    int bramble_only);

#endif
