/* spec.h - the job spec: parse, validate and normalise a YAML job spec
 * (ARCHITECTURE.md, "The job spec"). Shared by the CLI (early errors) and the
 * coordinator (the authority). Every error names the field and, where the text came
 * from YAML, its line: "line 4: unknown key 'resorces'". */
#ifndef BRAMBLE_SPEC_H
#define BRAMBLE_SPEC_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "array.h"
#include "err.h"

#define BR_SPEC_MAX_BYTES (256 * 1024) /* larger spec texts are refused */
#define BR_SPEC_MAX_REPLICAS 16 /* checkpoint.replicas at most */
#define BR_SPEC_MAX_LIST 32 /* arch, gpu_model, nodelist, restart.on entries */
#define BR_SPEC_MAX_AFTER 64 /* after: entries (jobs this one waits for) */

/* after: when a job this one waits for must have got to: ended with exit 0,
 * ended otherwise (failed or cancelled), ended at all, or started running. */
typedef enum { BR_AFTER_OK, BR_AFTER_FAILED, BR_AFTER_ENDED, BR_AFTER_STARTED } br_after_on_t;
/* "ok", "failed", "ended", "started"; the value of a name (-1: none such). */
const char *br_after_on_name(br_after_on_t on);
/* What the awaited job must do, in words: "end ok", "end failed", "end", "start". */
const char *br_after_goal(br_after_on_t on);
int br_after_on_parse(const char *name);
/* The longest command (and env NAME=value): one argument to execve may hold at most
 * MAX_ARG_STRLEN (32 pages of 4 KiB) bytes with its NUL; longer is refused at
 * submit, not at start. */
#define BR_SPEC_MAX_COMMAND (32 * 4096 - 1)
#define BR_SPEC_MAX_PATH 4096 /* code: DIR, files' from */
#define BR_SPEC_MAX_FILES 64  /* files: entries */
#define BR_SPEC_MAX_OUTPUTS 64 /* outputs: patterns */
#define BR_SPEC_MAX_DATA 16    /* data: data sets */
#define BR_SPEC_MAX_MOUNT 1024 /* data: a mount path */
#define BR_SPEC_MAX_SETUP 65535 /* setup: its text */
#define BR_SPEC_MAX_SETUP_FILES 16 /* setup_files: entries */
#define BR_SPEC_SETUP_FILE_MAX (16 << 20) /* setup_files: the largest file (its node
                                           * hashes it before the job starts) */
#define BR_SPEC_SETUP_ROOM 4096 /* what the node puts before a command with a setup */

typedef enum { BR_JOB_TRAIN = 0, BR_JOB_SERVICE = 1, BR_JOB_DEV = 2 } br_job_kind_t;

#define BR_TASKS_GPUS 0 /* tasks_per_node: gpus (one process per GPU) */
#define BR_MAX_TASKS_PER_NODE 64
#define BR_PORT_AUTO 0  /* service.port: auto */
#define BR_SPEC_MODEL_MAX 128 /* service.model, aliases and adapters: the longest name */
#define BR_SPEC_PREEMPT_GRACE_MAX_MS 3600000
#define BR_SPEC_PROGRESS_MIN_MS 1000 /* the shortest progress.timeout */
#define BR_SPEC_IDLE_STOP_MS (2 * 3600 * 1000) /* idle_stop when not given (kind: dev) */
#define BR_SPEC_IDLE_STOP_MIN_MS 1000           /* the shortest idle_stop */

/* service.autoscale: the replica count follows the gateways' load (docs/gateway.md) */
typedef struct {
    int on;                /* 0: the count is replicas, changed by hand alone */
    int min, max;          /* max required; min default 0 */
    int target_inflight;   /* requests per replica it aims at (default 4) */
    int64_t up_after_ms;   /* wanted more this long: add (default 15 s) */
    int64_t down_after_ms; /* wanted fewer this long: drain (default 5 min) */
    int64_t cold_start_ms; /* cold_start_timeout: at 0, a request waits this long
                            * (default 5 min) */
} br_autoscale_spec_t;

typedef struct {
    char *name;          /* required; br_valid_name() */
    br_job_kind_t kind;  /* default train */
    char *command;       /* required, non-empty */
    char *workdir;       /* NULL when not given */
    char *code;          /* code: DIR (local to the submitter), NULL when not given */
    json_t *files;       /* files: [{"from", "to"}], NULL when not given */
    json_t *outputs;     /* outputs: [pattern...], NULL when not given */
    char *setup;         /* setup: run before command on each node, cached there by
                            its text (and setup_files); NULL when not given */
    char *image;         /* image: the OCI image the job runs in (br_spec_image_ok),
                            NULL when not given */
    json_t *setup_files; /* setup_files: [relative path in the code dir...], NULL when
                            not given (needs setup and code or files) */
    json_t *data;        /* data: {"[OWNER/]NAME[:TAG]": "/mount/path"}, NULL when not
                            given (br_spec_mount_ok: each path) */
    json_t *env;         /* object of string -> string; never NULL (maybe empty) */
    struct {
        int nodes;          /* default 1, 1..1024 */
        int tasks_per_node; /* default 1; BR_TASKS_GPUS for "gpus"; else
                                 1..BR_MAX_TASKS_PER_NODE */
        int gpus;           /* per node, default 0 */
        uint64_t vram;      /* bytes, minimum free per GPU, default 0 */
        int cpus;           /* default 1; 0 allowed (no reservation) */
        uint64_t memory;    /* bytes, default 0 */
        char *arch[BR_SPEC_MAX_LIST];
        int n_arch;
        char *gpu_model[BR_SPEC_MAX_LIST];
        int n_gpu_model;
        json_t *labels; /* object string -> string; never NULL */
        int spread_any; /* resources.spread: any (default same-site) */
        int network;    /* resources.network: BR_NETWORK_AUTO, _DIRECT or _OVERLAY */
        char *nodelist[BR_SPEC_MAX_LIST]; /* only these nodes (names), when given */
        int n_nodelist;
    } resources;
    struct {
        int given;     /* 1 when a model: section was present */
        double params; /* parameter count, e.g. 8e9 */
        char *mode;    /* inference | lora | qlora | full (default inference) */
        char *dtype;   /* fp32 | fp16 | bf16 | int8 | int4 (default bf16) */
    } model;
    struct {
        char *dir;           /* NULL when no checkpoint section */
        char *pattern;       /* default "*" when dir is given */
        char *complete_file; /* NULL when not given */
        int replicas;        /* copies on other nodes, 0..16; -1 (not given): 1 when
                              * the cluster has two or more nodes, else 0 */
        int keep;            /* newest verified checkpoints held as replicas (2) */
    } checkpoint;
    struct {
        int max;             /* default 3 */
        int on_node_lost;    /* default 1 */
        int on_nonzero_exit; /* default 0 */
        int on_hung;         /* default 1 when progress.timeout is set, else 0 */
    } restart;
    int64_t progress_timeout_ms; /* progress: {timeout}; 0 = no hang detection */
    int preemptible;             /* may be asked to make room (docs/sharing.md) */
    int preempt_signal;          /* preempt.signal: what it is sent first (SIGUSR1) */
    int64_t preempt_grace_ms;    /* preempt.grace: then this long to checkpoint */
    struct {
        int64_t job;       /* a job id, >= 1 */
        br_after_on_t on;  /* default ok */
    } after[BR_SPEC_MAX_AFTER];
    int n_after;
    br_array_t array;      /* array: one task per index; count 0: not an array */
    int priority;          /* default 0, -1000..1000 */
    int64_t time_limit_ms; /* 0 = none */
    int64_t idle_stop_ms;  /* kind: dev: stopped after this long unused (default 2 h);
                            * 0 for other kinds */
    struct {
        int replicas;          /* default 1 */
        int port;              /* BR_PORT_AUTO or 1..65535 */
        char *health_http;     /* path starting with '/', or NULL */
        int health_tcp;        /* 1 for {tcp: true} */
        int64_t health_interval_ms; /* default 5000 */
        int64_t health_grace_ms;    /* default 30000 */
        /* what the gateway routes to it (docs/gateway.md): NULL when not given (the
         * service is then not behind the gateway) */
        char *model;
        char *aliases[BR_SPEC_MAX_LIST]; /* other names of the same model */
        int n_aliases;
        char *adapters[BR_SPEC_MAX_LIST]; /* LoRA adapters its replicas serve too */
        int n_adapters;
        int max_inflight; /* requests at once per replica; 0: no cap */
        int is_public;    /* public: true: the gateway asks for no key */
        br_autoscale_spec_t autoscale;
    } service;
} br_spec_t;

/* Parse and validate a YAML spec. sets[] are "dotted.key=value" overrides applied
 * before validation (the value is read as a YAML scalar or flow collection). Unknown
 * keys, wrong types, bad units and missing required fields are errors. Returns NULL
 * with err filled on failure. */
br_spec_t *br_spec_parse(const char *yaml, size_t len, const char *const *sets,
                         int nsets, br_err_t *err);

void br_spec_destroy(br_spec_t **spec);

/* The normalised spec as JSON, every default filled in, sizes in bytes, durations in
 * milliseconds (keys as in the YAML: name, kind, command, workdir, env, resources,
 * model, checkpoint, restart, progress ({"timeout": ms} or null), after, array
 * ({"range", "count", "max"}; absent when not an array), priority, time_limit, service). New
 * reference. */
json_t *br_spec_to_json(const br_spec_t *spec);

const char *br_job_kind_name(br_job_kind_t kind);

#define BR_SPEC_IMAGE_MAX 255 /* image: the longest name */
/* resources.network: how a gang's ranks reach each other (docs/overlay.md) */
enum { BR_NETWORK_AUTO, BR_NETWORK_DIRECT, BR_NETWORK_OVERLAY };
/* Whether name may be an image's name: 1..BR_SPEC_IMAGE_MAX of [A-Za-z0-9._/:@-], not
 * starting with '-' ("localhost/train:1", "docker.io/library/python:3.11",
 * "name@sha256:..."), so that nothing in it means anything to a shell or to podman's
 * options. */
int br_spec_image_ok(const char *name);

/* Whether name may be a model's name (service.model, aliases, adapters): 1 to
 * BR_SPEC_MODEL_MAX characters of letters, digits and . _ - / : @ + */
int br_spec_model_name_ok(const char *name);

/* The spec's matching rules, one for the scheduler and for submit's warning. An
 * empty or absent list takes anything; else s must be one of its strings, or with
 * substring hold one of them, case ignored (gpu_model). */
int br_spec_match_list(const json_t *list, const char *s, int substring);
/* The first label of want (an object of strings) that have lacks or holds with
 * another value; NULL when have carries them all. */
const char *br_spec_label_missing(const json_t *want, const json_t *have);

/* Whether path is where a data set may be mounted read-only in a job: absolute,
 * normalised (no '.', '..' or empty part, no trailing '/'), at most
 * BR_SPEC_MAX_MOUNT bytes, and outside the system's own directories (/, /bin,
 * /boot, /dev, /etc, /lib*, /proc, /run, /sbin, /sys, /usr, /var/lib, /var/run):
 * 1, or 0 with
 * why (a phrase) in *why. */
int br_spec_mount_ok(const char *path, const char **why);

#endif
