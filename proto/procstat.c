/* procstat.c - reading /proc/PID/stat. */
#include "procstat.h"

#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int br_procstat_read(int dirfd, pid_t pid, br_procstat_t *out)
{
    char path[64], buf[1024];
    int fd;
    if (dirfd >= 0) {
        fd = openat(dirfd, "stat", O_RDONLY | O_CLOEXEC);
    } else {
        snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
        fd = open(path, O_RDONLY | O_CLOEXEC);
    }
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return -1;
    buf[n] = '\0';
    char *open_paren = strchr(buf, '('), *p = strrchr(buf, ')');
    if (!open_paren || !p || p < open_paren)
        return -1;
    size_t len = (size_t)(p - open_paren - 1);
    if (len >= sizeof(out->comm))
        len = sizeof(out->comm) - 1;
    memcpy(out->comm, open_paren + 1, len);
    out->comm[len] = '\0';
    int ppid, pgrp, sid;
    if (sscanf(p + 1, " %c %d %d %d", &out->state, &ppid, &pgrp, &sid) != 4)
        return -1;
    out->ppid = ppid;
    out->pgrp = pgrp;
    out->sid = sid;
    /* after ") ": the state is field 3, the start time field 22 */
    p += 2;
    for (int field = 3; field < 22 && p; field++) {
        p = strchr(p, ' ');
        if (p)
            p++;
    }
    unsigned long long v;
    if (!p || sscanf(p, "%llu", &v) != 1)
        return -1;
    out->start = v;
    return 0;
}
