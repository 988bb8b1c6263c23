/* steprun.h - one step run inside a job's own task before its command (its setup,
 * setuprun.h; its image, imagefetch.h): a child whose stdout and stderr are passed
 * on to the job's own line by line, each line marked ("[setup] "), whose output's
 * end is kept for the note the agent reads when the step fails, and which a stop
 * signal (SIGTERM, SIGHUP, SIGINT: cancel, time limit, the node going away) ends.
 *
 * The child runs in a process group of its own; when the runner is asked to stop it
 * sends the same signal to that group, and SIGKILL BR_STEP_GRACE_MS later if the
 * group is still there. (The agent finds the child anyway: it carries the task's
 * tag in its environment, task.c.) Also here: the helpers the runners share to
 * write their lines and notes, and to quote what they put in a shell line. */
#ifndef BRAMBLE_STEPRUN_H
#define BRAMBLE_STEPRUN_H

#include <stddef.h>

#define BR_STEP_TAIL 600      /* bytes of the output's end kept for the reason */
#define BR_STEP_GRACE_MS 5000 /* after the stop signal, before SIGKILL */

/* The output's end (both streams as they came), kept for a failure's reason. */
typedef struct {
    char buf[BR_STEP_TAIL];
    size_t len;
} br_steprun_tail_t;

/* Catch SIGTERM, SIGHUP and SIGINT: each only notes which came
 * (br_steprun_stopped), no SA_RESTART, so a blocking call returns EINTR. */
void br_steprun_catch_stop(void);

/* The stop signal that came since br_steprun_catch_stop, or 0. */
int br_steprun_stopped(void);

/* Run argv[0] (found on PATH unless it names a path) with argv, env_name=env_value
 * in its environment when env_name is set; each line of its stdout and stderr is
 * passed on to ours, starting with mark, or to nobody when mark is NULL; what came
 * is added to tail (not emptied first). Returns when the child has ended and both
 * its streams are closed, or at once when a stop signal came and the child has
 * ended (its group is signalled, see above). Its wait status, or -1 with errno
 * when it could not be started (EINTR: a stop signal had come already). A child
 * that cannot exec says why on its stderr and exits 127. */
int br_steprun_run(const char *const *argv, const char *mark, const char *env_name,
                   const char *env_value, br_steprun_tail_t *tail);

/* The tail as one line of at most len - 1 bytes: its last lines (whole where they
 * fit), newlines as " / ", control characters as '?'; "(no output)" when empty. */
void br_steprun_tail_line(const br_steprun_tail_t *t, char *out, size_t len);

/* Write the formatted text to fd (at most 599 bytes of it), again after EINTR. */
void br_steprun_say(int fd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Append s to out at *at, quoted for sh ('...', a ' as '\''), and a '\0'; *at moves
 * to that '\0'. -1 (out as it was up to *at) when it would leave fewer than 2 bytes
 * free in len. */
int br_steprun_quote(const char *s, char *out, size_t len, size_t *at);

/* The line a runner is put before a job's command with: exe (the agent's program),
 * flag ("--setup-run"), then the n args, each quoted for sh, and " || exit $?\n"
 * (so that a failed step ends the task with its status). 0, or -1 when it does not
 * fit len. */
int br_steprun_line(const char *exe, const char *flag, const char *const *args, size_t n,
                    char *out, size_t len);

#endif
