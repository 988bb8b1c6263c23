/* procstat.h - one reading of /proc/PID/stat: a process's state, its parent,
 * group and session, its start time and its command name. The command name may
 * hold spaces and parentheses, so the fields are read after the LAST ')'. */
#ifndef BRAMBLE_PROCSTAT_H
#define BRAMBLE_PROCSTAT_H

#include <stdint.h>
#include <sys/types.h>

typedef struct {
    char state;     /* 'R', 'S', 'Z', ... */
    pid_t ppid, pgrp, sid;
    uint64_t start; /* clock ticks after boot: with the pid, names one process */
    char comm[64];  /* the command name (the kernel keeps 15 bytes) */
} br_procstat_t;

/* Read the stat of pid (dirfd < 0), or of the /proc/PID directory open at dirfd.
 * 0, or -1 when the process is gone or its stat does not read as one. */
int br_procstat_read(int dirfd, pid_t pid, br_procstat_t *out);

#endif
