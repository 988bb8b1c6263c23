/* container.h - jobs in OCI containers (the spec's image:, docs/containers.md)
 * through podman, when the node has it (--container-runtime auto|podman|none).
 *
 * A container job is an ordinary task (task.h) whose shell execs `podman run` in
 * the foreground: the task's process group, its tag (BRAMBLE_TASK, which podman
 * and conmon inherit and which is passed into the container) and its pipes are
 * the job's, so cancel, time limits, preemption signals, fencing (freeze), hang
 * detection and log shipping reach the container's processes as they reach a bare
 * job's. The container runs on the host's network (a gang's rendezvous and NCCL
 * work as on the host), as the job's uid:gid, with no capabilities and
 * no-new-privileges, the job's working directory, checkpoint dir and data sets
 * mounted at the same paths, and the job's variables passed by name. Its GPUs are
 * exactly the task's (CUDA_VISIBLE_DEVICES), given by CDI (`--device
 * nvidia.com/gpu=UUID`) and numbered from 0 inside; without a CDI spec on the
 * node, a task with GPUs does not start and says why.
 *
 * Limits: podman asks the runtime for its own default rlimits (1048576 open files
 * and processes), which some machines refuse (runc: "error setting rlimit type 6:
 * operation not permitted"), and what they take is not written anywhere podman
 * reads. So the agent's first container job tries them (br_container_calibrate),
 * with an empty image the agent makes (`podman import` of an empty tar, a tenth of
 * a second): the agent's own open-files limit, and the agent's process limit, else
 * 65536, 32768, 4096 or 1024, whichever the runtime takes first (it sets them
 * before it looks for the program to run, so no program is needed); the container
 * jobs after it get the same. Any image will do for that, the job's own need not
 * be on the node yet. */
#ifndef BRAMBLE_CONTAINER_H
#define BRAMBLE_CONTAINER_H

#include <jansson.h>
#include <sys/types.h>

#include "err.h"

typedef struct br_container br_container_t;

/* mode: "auto" (podman when it is on PATH), "podman" (required: an error when it
 * is not there) or "none". NULL with err. */
br_container_t *br_container_new(const char *mode, br_err_t *err);
void br_container_destroy(br_container_t **c);

/* "podman", or NULL when this node runs no containers. */
const char *br_container_runtime(const br_container_t *c);

typedef struct {
    const char *image;     /* br_spec_image_ok */
    const char *command;   /* run with the image's /bin/sh -c */
    const char *workdir;   /* NULL: the image's own */
    uid_t uid;
    gid_t gid;
    const json_t *env;     /* object: the names passed in (values from the task's) */
    const json_t *tasks;   /* NULL, or job.run's tasks: their env's names too */
    const char *const *rw; /* NULL-terminated directories mounted read-write */
    const char *const *ro; /* NULL, or NULL-terminated pairs from, to: read-only */
    const char *const *gpu_uuids; /* the node's GPUs by index (NVML's UUIDs; "" or
                                   * NULL entries unknown), ngpus of them */
    int ngpus;
    const char *name_suffix; /* NULL, or after the container's name ("-setup": the
                              * container the job's setup runs in, before its own) */
} br_container_run_t;

#define BR_CONTAINER_GPUS 64 /* GPUs of a node a container may be given, by index */

/* The container of the task tagged tag: "bramble-" and the tag, '/' as '_'. */
void br_container_name(const char *tag, char *out, size_t len);

/* After the task tagged tag ended: remove its containers should they be left (podman
 * stopped before the container started leaves it "Initialized", which --rm does
 * not remove), by `podman rm -f --ignore` run apart, not waited for. */
void br_container_forget(const char *tag);

/* `bramble shell` in a container job: `podman exec` into the container of the task
 * tagged tag, as uid:gid, in workdir (NULL: the image's), on a terminal (tty), cmd
 * (NULL-terminated; NULL or empty: the image's bash, else its sh), with the
 * environment entries env (KEY=VALUE, NULL-terminated; at most 4; NULL: none) added.
 * A new NULL-terminated argv (br_container_argv_free), or NULL when out of memory. */
char **br_container_exec_argv(const char *tag, uid_t uid, gid_t gid, const char *workdir,
                              int tty, const char *const *env, const char *const *cmd);
void br_container_argv_free(char **argv);

/* Where the CDI specs are that podman reads (nvidia-ctk cdi generate writes one). */
#define BR_CDI_DIRS "/etc/cdi", "/var/run/cdi"

/* Whether a CDI spec for NVIDIA GPUs (kind nvidia.com/gpu) is there. */
int br_container_cdi(void);

/* The image the limits are tried with: empty, made on the node by the agent. */
#define BR_CONTAINER_PROBE "localhost/bramble-limits-probe:1"

/* Find the limits containers may be given here (once: later calls return at once),
 * starting `podman run --pull never BR_CONTAINER_PROBE /nonexistent` with each
 * candidate, each try bounded to timeout_ms (the probe image is made first when
 * podman lacks it). Returns the tries made (0: none, or done already). */
int br_container_calibrate(br_container_t *c, int timeout_ms);
/* The process limit containers are given here (after br_container_calibrate). */
unsigned long long br_container_nproc(const br_container_t *c);

/* The shell command a task runs for r: malloc'd, or NULL with err. */
char *br_container_command(const br_container_t *c, const br_container_run_t *r,
                           br_err_t *err);

#endif
