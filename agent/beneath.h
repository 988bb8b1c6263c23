/* beneath.h - opening a file beneath a directory without following a symlink
 * anywhere on the way: each component is opened relative to its parent's
 * descriptor with O_NOFOLLOW, so a link planted in a checkpoint (by its job, or
 * by whoever can write there) never leads a reader outside it. */
#ifndef BRAMBLE_BENEATH_H
#define BRAMBLE_BENEATH_H

#include "err.h"

/* Open rel ("a/b/c", no "..", no leading "/": a manifest path already checked)
 * beneath the directory fd root, which is taken over (closed). The file is opened
 * O_RDONLY | O_NONBLOCK, never a terminal. Its fd, or -1 with err: EACCES "a
 * symlink on the way" when a component is a link, else the open's errno. */
int br_open_beneath(int root, const char *rel, br_err_t *err);

#endif
