/* local.h - the processes of a local cluster (bramble up/down): finding the
 * binaries, starting daemons with their logs, pid files, stopping them. */
#ifndef BRAMBLE_CLI_LOCAL_H
#define BRAMBLE_CLI_LOCAL_H

#include <stddef.h>
#include <sys/types.h>

#include "err.h"

/* dir + "/" + name into out; -1 (ENAMETOOLONG) when it does not fit. */
int local_path(char *out, size_t len, const char *dir, const char *name, br_err_t *err);

/* A program next to this executable (/proc/self/exe), else on $PATH. */
int local_find_bin(const char *name, char *out, size_t len, br_err_t *err);

/* Start argv[0] as a daemon: own session, stdin /dev/null, stdout and stderr
 * appended to log. Returns its pid (our child). */
pid_t local_spawn(char *const argv[], const char *log, br_err_t *err);

/* Run argv[0] to its end with output appended to log; returns its exit status
 * (128 + signal when killed), or -1 when it could not be started. */
int local_run(char *const argv[], const char *log, br_err_t *err);

/* Pid files: one decimal pid and a newline. read returns 0 when none or bad. */
int local_write_pid(const char *path, pid_t pid, br_err_t *err);
pid_t local_read_pid(const char *path);

/* 1 when pid is a live bramble process (brambled, bramble-agent): reaps it first
 * when it is our exited child; a zombie or another program is not alive. */
int local_alive(pid_t pid);

/* SIGTERM each pid, wait up to timeout_ms for all to go, SIGKILL what is left.
 * killed[i] is set to 1 for those that needed SIGKILL (killed may be NULL). */
void local_stop(const pid_t *pids, int n, int timeout_ms, int *killed);

/* Print the last lines of a log file to stderr. */
void local_log_tail(const char *path, int lines);

/* A TCP port that was free on 127.0.0.1 a moment ago. */
int local_free_port(br_err_t *err);

#endif
