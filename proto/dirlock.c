/* dirlock.c - one daemon per data dir (see dirlock.h). */
#include "dirlock.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

struct br_dirlock {
    int fd;
};

br_dirlock_t *br_dirlock_new(const char *dir, const char *name, const char *who,
                             br_err_t *err)
{
    char path[1100], pid[32] = "";
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
        return br_errp(err, errno, "%s: %s", path, strerror(errno));
    if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
        int e = errno;
        ssize_t n = pread(fd, pid, sizeof(pid) - 1, 0);
        close(fd);
        pid[n > 0 ? n : 0] = '\0';
        pid[strcspn(pid, "\n")] = '\0';
        if (e != EWOULDBLOCK)
            return br_errp(err, e, "%s: lock: %s", path, strerror(e));
        /* the pid and the file first: a long path must not cut them off */
        return br_errp(err, EBUSY, "pid %s holds %s: another %s runs on this data dir",
                       pid[0] ? pid : "(unknown)", path, who);
    }
    int len = snprintf(pid, sizeof(pid), "%d\n", (int)getpid());
    br_dirlock_t *l = malloc(sizeof(*l));
    if (!l || ftruncate(fd, 0) < 0 || pwrite(fd, pid, (size_t)len, 0) != len) {
        int e = l ? errno : ENOMEM;
        close(fd);
        free(l);
        return br_errp(err, e, "%s: %s", path, strerror(e));
    }
    l->fd = fd;
    return l;
}

void br_dirlock_destroy(br_dirlock_t **lock)
{
    if (lock && *lock) {
        close((*lock)->fd);
        free(*lock);
        *lock = NULL;
    }
}
