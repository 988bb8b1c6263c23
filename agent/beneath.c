/* beneath.c - opening a file beneath a directory, one component at a time. */
#include "beneath.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <string.h>
#include <unistd.h>

int br_open_beneath(int root, const char *rel, br_err_t *err)
{
    char part[PATH_MAX];
    const char *c = rel;
    int dfd = root;
    for (;;) {
        size_t k = strcspn(c, "/");
        if (k >= sizeof(part)) {
            close(dfd);
            return br_errf(err, ENAMETOOLONG, "%s: a name too long", rel);
        }
        memcpy(part, c, k);
        part[k] = '\0';
        int last = c[k] == '\0';
        int fd = openat(dfd, part,
                        last ? O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC
                             : O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        int e = errno;
        close(dfd);
        if (fd < 0)
            return br_errf(err, e == ELOOP ? EACCES : e, "%s: %s", rel,
                           e == ELOOP ? "a symlink on the way" : strerror(e));
        if (last)
            return fd;
        dfd = fd;
        c += k + 1;
    }
}
