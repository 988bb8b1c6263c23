/* setuprun.h - a job's setup step (the spec's setup:, docs/files.md, "Setup"), run
 * inside the job's own task before its command, so that whatever stops, freezes or
 * limits the job stops, freezes and limits its setup too, and its output goes
 * where the job's goes.
 *
 * The agent starts a job whose environment is not built yet with its command
 * preceded by `bramble-agent --setup-run DIR FAILED [VIA] || exit $?`
 * (br_setuprun_line),
 * DIR being the environment's directory in the node's cache (BRAMBLE_ENV_DIR) and
 * DIR.setup holding the setup's text. There, as the job's user, the runner:
 *   - takes DIR.lock (another job building the same environment is waited for);
 *   - finds DIR/.bramble-ready (built meanwhile) and is done; or
 *   - empties DIR, runs `/bin/sh -c SETUP` in it with BRAMBLE_ENV_DIR=DIR, each line
 *     of its stdout and stderr passed on to the job's own, marked "[setup] "
 *     (steprun.h); with VIA (a job in a container: the `podman run` of a container
 *     of the job's image, DIR mounted, that runs DIR.setup), `/bin/sh -c VIA`
 *     instead, so that the setup runs in the image, with the image's tools;
 *   - on success writes DIR/.bramble-ready ({"seconds", "bytes", "built"}: how long
 *     it took, what it holds on disk, when) and exits 0 (the command runs);
 *   - on failure removes DIR, writes "exit N: LAST LINES" to FAILED and exits
 *     BR_SETUP_FAILED, which the shell passes on; the agent reads FAILED for the
 *     attempt's reason. SIGTERM or SIGHUP while the setup runs ends it the same way. */
#ifndef BRAMBLE_SETUPRUN_H
#define BRAMBLE_SETUPRUN_H

#include <stddef.h>

#include "steprun.h"

#define BR_SETUP_FAILED 86            /* the runner's exit status when the setup failed */
#define BR_SETUP_READY ".bramble-ready" /* in DIR: the environment is whole */
#define BR_SETUP_TAIL BR_STEP_TAIL    /* bytes of the output's end kept for the reason */

/* The runner: argv is DIR FAILED [VIA] (after "--setup-run"). Its exit status. */
int br_setuprun_main(int argc, char **argv);

/* The line put before the job's command: exe (this agent's program) run on dir,
 * failed and via (NULL: none), each quoted for sh. 0, or -1 when it does not fit
 * len. */
int br_setuprun_line(const char *exe, const char *dir, const char *failed, const char *via,
                     char *out, size_t len);

#endif
