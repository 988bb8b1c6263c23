/* quietrun.h - a short command the agent runs and waits for (podman's checks,
 * `wg` and `ip` for the overlay): no input, its output kept (the end of it, for a
 * message) or dropped, bounded in time. Only for commands that take milliseconds:
 * the agent's loop waits. */
#ifndef BRAMBLE_QUIETRUN_H
#define BRAMBLE_QUIETRUN_H

#include <stddef.h>

/* Run argv (argv[0] found on PATH) with stdin /dev/null and its stdout and stderr
 * into out (the last len - 1 bytes, NUL-terminated, trailing newlines dropped;
 * out NULL: dropped), in a process group of its own that is killed once
 * timeout_ms have passed. Its exit status; -1 when it did not start, was killed
 * by a signal, or ran past timeout_ms (out then says so). */
int br_quietrun(char *const *argv, int timeout_ms, char *out, size_t len);

#endif
