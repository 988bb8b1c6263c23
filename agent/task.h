/* task.h - one job process on this node: started with sh -c in its own session and
 * process group as the job user, stdout and stderr captured through pipes, and the
 * whole process tree (children that changed their process group or session too)
 * found, frozen, thawed and killed.
 *
 * Between the agent and the job sits a waiter, a small forked process (comm
 * "bramble-wait") that outlives the agent: it keeps a read end of the job's pipes
 * (so the job does not die of SIGPIPE when the agent does), reaps the job, writes
 * its wait status to a file and then ends the same way. The agent reaps its
 * waiters itself (waitpid(-1); br_task_reaped). An agent started again finds a
 * previous agent's tasks by what it saved of them (br_task_adopt): it reopens the
 * pipes through /proc/WAITER/fd and learns of the end through the waiter's pidfd
 * and the status file. */
#ifndef BRAMBLE_TASK_H
#define BRAMBLE_TASK_H

#include <stddef.h>
#include <stdint.h>
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
    const char *exit_path;   /* NULL, or the file the waiter writes the job's wait
                                status to ("%d\n"), for an agent started again */
    const char *const *mounts; /* NULL, or NULL-terminated pairs "from", "to": each
                                directory from shown read-only at to (made when
                                missing), in a mount namespace of the task's own;
                                the task can then gain no privileges (no setuid),
                                so a tree it is shown cannot lend it any. Needs a
                                root agent */
} br_task_opts_t;

/* Start the task. Fails (no child left behind) with a clear reason when the user
 * does not exist, switching users needs root, or the workdir cannot be entered. */
br_task_t *br_task_start(const br_task_opts_t *opts, br_err_t *err);

/* A process started inside a running task's tree (`bramble shell`): as the task's
 * user, with its leader's environment as it was started (BRAMBLE_*, the GPUs, its
 * tag, so that the task's kill, freeze and end reach it too), in the leader's
 * working directory and mount namespace, in a session of its own. */
typedef struct {
    const char *const *argv; /* NULL: the job user's shell ($SHELL, else /bin/sh);
                                else found on the job's PATH and run as given */
    int tty;                 /* on a new terminal (its controlling one), else pipes */
    unsigned short rows, cols; /* the terminal's size */
    const char *term;        /* NULL, or TERM for it */
    const char *mark;        /* NULL, or an entry KEY=VALUE added to its environment,
                              * which what it starts inherits (br_task_signal_marked) */
} br_task_join_opts_t;
/* Start it: its pid (the caller's child, to reap), with fds[0] the terminal's master
 * (tty; fds[1] and fds[2] -1), or the write end of its stdin and the read ends of its
 * stdout and stderr, all non-blocking. -1 with err when the task has ended or the
 * process could not start (nothing is left behind). */
pid_t br_task_join(br_task_t *task, const br_task_join_opts_t *o, int fds[3], br_err_t *err);
/* Destroy the handle: closes the pipes; does not signal the processes. */
void br_task_destroy(br_task_t **task);

pid_t br_task_pid(const br_task_t *task);
const char *br_task_tag(const br_task_t *task);
const char *br_task_also(const br_task_t *task);      /* NULL when none */
const char *br_task_exit_path(const br_task_t *task); /* NULL when none */
/* The uid and gid the task runs as. */
uid_t br_task_uid(const br_task_t *task);
gid_t br_task_gid(const br_task_t *task);

/* The live task (started in this process, not destroyed, its leader not exited)
 * whose process tree holds pid: pid or one of its ancestors (up to 64 parent links)
 * is the task's leader, or in its process group or session. The kernel's view of
 * the process, never its environment, so a process cannot claim another job by
 * what it sets. NULL when none. */
br_task_t *br_task_of_pid(pid_t pid);
/* The live task whose container holds pid: pid's ancestors reach a conmon (podman's
 * monitor of one container, whose children the container's processes are, outside
 * the task's tree) run by this agent's user, whose container's name (its -n) is
 * what name_of makes of the task's tag (container.h). NULL when none. A job's
 * process cannot pass for another's: it cannot start a process as the agent's user,
 * nor rename a container podman started. */
br_task_t *br_task_of_container(pid_t pid, void (*name_of)(const char *tag, char *out,
                                                           size_t len));

/* Read end of stdout (stream 1) or stderr (stream 2), non-blocking; -1 once closed. */
int br_task_fd(const br_task_t *task, int stream);

/* Read from a stream. Returns bytes read, 0 at EOF (the fd is then closed and
 * br_task_fd returns -1), -1 with errno EAGAIN when nothing is ready. */
ssize_t br_task_read(br_task_t *task, int stream, void *buf, size_t len);

/* pid, reaped by the agent with wait_status, was this task's waiter: 1 (the job's
 * end is recorded: the waiter ends as the job did), else 0. */
int br_task_reaped(br_task_t *task, pid_t pid, int wait_status);

/* The waiter's pid and its start time (clock ticks since boot, /proc/PID/stat), to
 * save for an agent started again; 0 when it cannot be read. */
pid_t br_task_waiter(const br_task_t *task);
uint64_t br_task_waiter_start(const br_task_t *task);

/* Start time (clock ticks since boot) and comm (NULL: not wanted) of any process,
 * from /proc/PID/stat: 0, or -1 when it is gone. Start time and pid together name a
 * process; a pid alone may have been reused. */
int br_proc_start(pid_t pid, uint64_t *start, char *comm, size_t commlen);

/* What an agent saved of a task, to adopt it. */
typedef struct {
    const char *tag, *also, *exit_path;
    pid_t pid, waiter;
    uint64_t waiter_start; /* against a reused pid */
    uid_t uid;
    gid_t gid;
} br_task_saved_t;

/* Take over a task a previous agent started: its waiter still runs (the same
 * process: its comm and start time match), and the job's pipes are opened again
 * through it; or the waiter is gone and left the job's status in exit_path, and the
 * task is done (what the job printed meanwhile is lost). NULL with err otherwise.
 * The agent is not the waiter's parent: br_task_wait_fd and br_task_check_adopted
 * say when it ends. */
br_task_t *br_task_adopt(const br_task_saved_t *saved, br_err_t *err);

/* An adopted task's waiter pidfd, readable once the waiter is gone; -1 for a task
 * this agent started (its waiter is reaped) or one that is done. */
int br_task_wait_fd(const br_task_t *task);
/* An adopted task whose waiter is gone: records the job's end from the exit file (a
 * missing one counts as SIGKILL) and returns 1; else 0. */
int br_task_check_adopted(br_task_t *task);

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
/* How many live processes the task's tree holds now (its leader included while it
 * runs), or -1 when /proc cannot be read. */
int br_task_tree_count(br_task_t *task);

/* Freeze (SIGSTOP) and thaw (SIGCONT) the whole tree. */
int br_task_freeze(br_task_t *task);
int br_task_thaw(br_task_t *task);

/* Kill every process whose tag starts with prefix and whose environment also holds
 * the entry also ("KEY=VALUE", NULL for none) - a previous agent's jobs, left behind
 * when it died - but none whose tag is in keep (NULL-terminated, or NULL: the tasks
 * adopted), repeating until none is left or timeout_ms passes. Returns how many were
 * signalled, or -1. */
int br_task_kill_tag_prefix(const char *prefix, const char *also, const char *const *keep,
                            int timeout_ms);

/* Number of live processes carrying tag (any task, including a previous agent's). */
int br_task_count_tagged(const char *tag);

/* Send sig to every live process whose environment holds the entry mark (KEY=VALUE)
 * exactly: what a joined process (its opts' mark) started, those that left its
 * process group or run in a container (podman exec's, not the client's children)
 * too. How many were signalled, or -1. */
int br_task_signal_marked(const char *mark, int sig);

#endif
