/* imagefetch.h - a container job's image made sure of in the node's podman storage,
 * inside the job's own task, before `exec podman run ... REF ...`.
 *
 * Why in the task and not in the agent: loading an image takes seconds for each GiB
 * and a pull as long as the registry makes it, while the agent's loop answers the
 * coordinator and sends heartbeats, which must never wait on it. Run as the first
 * step of the job's command (`bramble-agent --image-fetch FAILED REF [ARCHIVE] ||
 * exit $?`, br_imagefetch_line), the pull or load is part of the job: cancel, the
 * time limit and freeze reach it like the job's command, and its output goes to the
 * job's log, so a user sees the registry's answer where they look for their job's.
 *
 * The runner, as the job's user:
 *   - removes FAILED; when `podman image exists REF` says so, exits 0 at once, with
 *     no output at all (the common case: the image is there);
 *   - with ARCHIVE (a docker-archive or oci-archive in the node's cache; REF is then
 *     the image's ID, 64 hex digits) says "[image] loading the image from the node's
 *     cache (SIZE)", runs `podman load -i ARCHIVE` and checks that REF is there now
 *     (an archive can hold another image): "[image] loaded in X.X s", exit 0; else
 *     FAILED gets "loading image: exit N after X.X s: LAST LINES";
 *   - without ARCHIVE (REF a registry's name) says "[image] pulling REF", runs
 *     `podman pull REF`: "[image] pulled in X.X s", exit 0; else FAILED gets
 *     "pulling REF: exit N after X.X s: LAST LINES" (the registry's answer, which
 *     podman prints, among them);
 *   - podman's lines are passed on to the job's stdout and stderr marked "[image] "
 *     (steprun.h); podman is run with its arguments as they are, never through a
 *     shell; a REF starting with '-' (an option to podman) is refused;
 *   - a failure exits BR_IMAGE_FAILED, which the shell passes on and the agent reads
 *     FAILED for; SIGTERM, SIGHUP or SIGINT while podman runs ends it (its process
 *     group) and the runner exits 128 + the signal, FAILED saying
 *     "stopped by signal N". */
#ifndef BRAMBLE_IMAGEFETCH_H
#define BRAMBLE_IMAGEFETCH_H

#include <stddef.h>

#define BR_IMAGE_FAILED 87 /* the runner's exit status: the image could not be had */

/* The runner: argv is FAILED REF [ARCHIVE] (after "--image-fetch"). Its exit status
 * (2 for a wrong call). */
int br_imagefetch_main(int argc, char **argv);

/* The line put before the job's command: exe (this agent's program) run on failed,
 * ref and archive (NULL: pull ref), each quoted for sh, and "|| exit $?\n". 0, or -1
 * when it does not fit len. */
int br_imagefetch_line(const char *exe, const char *failed, const char *ref,
                       const char *archive, char *out, size_t len);

#endif
