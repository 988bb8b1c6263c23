/* settings.h - what an agent keeps in its data dir: its credential (DIR/credential,
 * the same file format as a user's) and its settings (DIR/agent.yaml: labels, cost,
 * power price, GPUs, job user, advertised address), so that after joining once it
 * restarts with `bramble-agent --data-dir DIR` alone. Flags given at a restart override and are
 * saved. */
#ifndef BRAMBLE_SETTINGS_H
#define BRAMBLE_SETTINGS_H

#include <jansson.h>
#include <stdint.h>

#include "cred.h"
#include "dirlock.h"
#include "err.h"

typedef struct {
    char data_dir[1024];
    char join_token[1100]; /* --join, "" when not joining */
    char name[64];
    json_t *labels;        /* object of strings */
    double cost_per_hour;
    int cost_given;
    double power_price;    /* --power-price: currency per kWh (POWER_UNSET until set) */
    double idle_watts;     /* --idle-watts: the node's draw without GPUs working */
    char gpus[1024];       /* auto | none | LIST */
    char job_user[64];     /* "" = the agent's own user */
    uint32_t job_uid_first, job_uid_last; /* --job-uids FIRST-LAST; 0 0 = none */
    int allow_root_jobs;   /* --allow-root-jobs: a root agent may run jobs as root;
                              not saved, so it is given at every start */
    char container_runtime[16]; /* --container-runtime auto|podman|none ("": auto);
                                   not saved (container.h) */
    char overlay[16];      /* --overlay auto|kernel|userspace|off ("": auto); not saved
                              (overlay.h) */
    int relay;             /* --relay: forwards overlay traffic for nodes that cannot
                              reach each other; not saved */
    char advertise_addr[256];
    int64_t discover_timeout_ms; /* join: listen this long for the coordinator's LAN
                                    announcement when the token endpoint is silent
                                    (0: never); not saved */
    int discover_port;           /* its UDP port (BR_ANNOUNCE_PORT); not saved */
    int probe_port;              /* UDP port answering round-trip probes from other
                                    nodes (BR_PROBE_PORT), 0 any free one, -1 off */
    char cache_dir[1024];        /* --cache-dir: jobs' code ("" until finished:
                                    DATA_DIR/cache; cache.h) */
    int64_t cache_quota;         /* --cache-quota: bytes the cache keeps, -1 no cap */
    char replica_dir[1024];      /* --replica-dir: the replica store ("" until
                                    finished: DATA_DIR/replicas) */
    int64_t replica_quota;       /* --replica-quota: bytes of replicas held, 0 none
                                    (opted out), -1 as many as the disk takes */
    int64_t replica_bandwidth;   /* --replica-bandwidth: bytes/s sent, 0 no cap */
    int replica_port;            /* --replica-port: TCP port serving checkpoint
                                    files to other nodes, 0 any free one, -1 off */
    br_cred_t cred;
    br_dirlock_t *lock;          /* DIR/agent.lock, held while this agent runs */
} br_settings_t;

void br_settings_init(br_settings_t *s);
void br_settings_free(br_settings_t *s);

#define PROBE_PORT_UNSET (-2)
#define REPLICA_UNSET (-2) /* replica_quota, replica_bandwidth, replica_port */

/* Parse --replica-port N|off, --replica-quota SIZE|none, --replica-bandwidth RATE. */
int br_settings_replica_port(br_settings_t *s, const char *text, br_err_t *err);
int br_settings_replica_quota(br_settings_t *s, const char *text, br_err_t *err);
/* "20GiB" or "none" -> cache_quota. */
int br_settings_cache_quota(br_settings_t *s, const char *text, br_err_t *err);
int br_settings_replica_bandwidth(br_settings_t *s, const char *text, br_err_t *err);

#define POWER_UNSET (-1.0) /* power_price, idle_watts */

/* Parse --cost-per-hour X, --power-price P, --idle-watts W: a plain number, 0 or
 * more (EINVAL "'x': expected a number, 0 or more" otherwise). */
int br_settings_cost_per_hour(br_settings_t *s, const char *text, br_err_t *err);
int br_settings_power_price(br_settings_t *s, const char *text, br_err_t *err);
int br_settings_idle_watts(br_settings_t *s, const char *text, br_err_t *err);

/* Parse --probe-port N|off into s->probe_port. */
int br_settings_probe_port(br_settings_t *s, const char *text, br_err_t *err);

/* After load: defaults for what neither a flag nor agent.yaml set. */
int br_settings_finish(br_settings_t *s);

/* Parse --job-uids FIRST-LAST into s. */
int br_settings_job_uids(br_settings_t *s, const char *text, br_err_t *err);

/* Say on stderr when the job user settings leave jobs nobody but root to run as. */
void br_settings_warn(const br_settings_t *s);
/* Why these settings refuse every job (a root agent with no one else to run them
 * as), or NULL: sent in the hello's inventory as "refuses". */
const char *br_settings_refuses_all(const br_settings_t *s);

/* Parse --label k=v into s->labels. */
int br_settings_add_label(br_settings_t *s, const char *kv, br_err_t *err);

/* Merge DIR/agent.yaml under what flags already set (flags win). 0 when the file
 * does not exist (never joined). */
int br_settings_load(br_settings_t *s, int *joined, br_err_t *err);
/* Take DIR/agent.lock (dirlock.h) for the process lifetime, creating DIR when
 * joining. Fails (EBUSY) naming the lock file and the pid holding it when another
 * agent runs on DIR. */
int br_settings_lock(br_settings_t *s, br_err_t *err);

/* Write DIR/agent.yaml and DIR/credential. */
int br_settings_save(const br_settings_t *s, br_err_t *err);

#endif
