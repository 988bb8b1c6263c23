/* task.h - one job process on this node: started with sh -c in its own session and
 * process group as the job user, stdout and stderr captured through pipes, and the
 * whole process tree (children that changed their process group or session too)
 * found, frozen, thawed and killed. The agent reaps children itself (it is a child
 * subreaper, waitpid(-1)) and hands each leader's wait status to br_task_exited(). */
#ifndef BRAMBLE_TASK_H
#define BRAMBLE_TASK_H

#include <stddef.h>
#include <sys/types.h>

#include "err.h"

typedef struct br_task br_task_t;

typedef struct {
    const char *command;     /* run as /bin/sh -c COMMAND */
    const char *workdir;     /* NULL: the job user's home directory, else "/" */
    const char *const *env;  /* NULL-terminated "KEY=VALUE" entries (later entries
                                win), set on top of PATH, LANG, LANGUAGE, LC_*, TZ,
                                TERM, LD_LIBRARY_PATH and BRAMBLE_* (but no
                                credential, token, key or secret) from the agent's
                                environment, and HOME, USER, LOGNAME and SHELL of
                                the job user; nothing else of the agent's passes */
    const char *user;        /* NULL: the agent's own user; else a user name, or
                                "#UID:GID" for an account that may have no passwd
                                entry (then no supplementary groups, USER and
                                LOGNAME the uid's number, HOME from env); switching
                                needs a root agent */
    const char *tag;         /* unique per task: exported as BRAMBLE_TASK=tag so that
                                descendants that left the process group are found */
    const char *also;        /* NULL, or an entry of env ("KEY=VALUE") that such a
                                descendant must carry too: the same tag in another
                                cluster's job on this host is not ours */
} br_task_opts_t;

/* Start the task. Fails (no child left behind) with a clear reason when the user
 * does not exist, switching users needs root, or the workdir cannot be entered. */
br_task_t *br_task_start(const br_task_opts_t *opts, br_err_t *err);

/* Destroy the handle: closes the pipes; does not signal the processes. */
void br_task_destroy(br_task_t **task);

pid_t br_task_pid(const br_task_t *task);
const char *br_task_tag(const br_task_t *task);
/* The uid and gid the task runs as. */
uid_t br_task_uid(const br_task_t *task);
gid_t br_task_gid(const br_task_t *task);

/* The live task (started in this process, not destroyed, its leader not exited)
 * whose process tree holds pid: pid or one of its ancestors (up to 64 parent links)
 * is the task's leader, or in its process group or session. The kernel's view of
 * the process, never its environment, so a process cannot claim another job by
 * what it sets. NULL when none. */
br_task_t *br_task_of_pid(pid_t pid);

/* Read end of stdout (stream 1) or stderr (stream 2), non-blocking; -1 once closed. */
int br_task_fd(const br_task_t *task, int stream);

/* Read from a stream. Returns bytes read, 0 at EOF (the fd is then closed and
 * br_task_fd returns -1), -1 with errno EAGAIN when nothing is ready. */
ssize_t br_task_read(br_task_t *task, int stream, void *buf, size_t len);

/* Record the leader's wait status (from the agent's waitpid). */
void br_task_exited(br_task_t *task, int wait_status);

/* 1 once the leader has exited (exit_code, or signal when killed by one; the other
 * is -1), else 0. Either pointer may be NULL. */
int br_task_done(const br_task_t *task, int *exit_code, int *signal);

/* Send sig to every live process of the task: its process group and every process
 * carrying its tag. Returns the number of processes signalled. */
int br_task_signal(br_task_t *task, int sig);

/* Stop every process of the task for good: SIGSTOP the tree (so nothing forks
 * meanwhile), SIGKILL it, and repeat until no process carries the tag or timeout_ms
 * passes. Returns 0 when none is left, -1 (errno ETIMEDOUT) otherwise. */
int br_task_kill_tree(br_task_t *task, int timeout_ms);

/* Freeze (SIGSTOP) and thaw (SIGCONT) the whole tree. */
int br_task_freeze(br_task_t *task);
int br_task_thaw(br_task_t *task);

/* Kill every process whose tag starts with prefix and whose environment also holds
 * the entry also ("KEY=VALUE", NULL for none) - a previous agent's jobs, left behind
 * when it died - repeating until none is left or timeout_ms passes. Returns how
 * many were signalled, or -1. */
int br_task_kill_tag_prefix(const char *prefix, const char *also, int timeout_ms);

/* Number of live processes carrying tag (any task, including a previous agent's). */
int br_task_count_tagged(const char *tag);

#endif
