/* config.h - the coordinator's settings: what `brambled init` records in the data
 * dir (keys, endpoints, announce, http) and what flags override at start (timing). */
#ifndef BRAMBLE_COORD_CONFIG_H
#define BRAMBLE_COORD_CONFIG_H

#include <stdint.h>

#include "cred.h"
#include "err.h"

typedef struct {
    char data_dir[1024];
    char listen[BR_ENDPOINT_MAX];
    char advertise[BR_ENDPOINT_MAX];
    char public_key[BR_KEY_LEN + 1];
    char secret_key[BR_KEY_LEN + 1];
    int64_t heartbeat_ms;    /* pushed to agents */
    int64_t node_timeout_ms; /* silent this long: lost */
    int64_t grace_ms;        /* after start, no node is lost before this */
    int announce;            /* LAN announcer: -1 as recorded (default off), 0, 1 */
    int announce_port;       /* its UDP port (BR_ANNOUNCE_PORT) */
    int64_t log_max_per_job; /* bytes of output kept per job, newest (0: no limit) */
    int64_t log_retention_ms; /* ended jobs' logs are deleted after this (0: kept) */
    char http[64];            /* --http ADDR:PORT; "" as recorded, "off": none */
    int64_t half_life_ms;     /* fair share forgets half of what was used in this */
    int64_t kill_grace_ms;    /* asked to stop (time limit), SIGKILL after this */
    int64_t preempt_after_ms; /* a job waiting this long may preempt (0: never) */
    int64_t preempt_min_run_ms; /* a job runs this long before it can be preempted */
    int64_t replica_retention_ms; /* ended jobs' replicas are dropped after this (0:
                                   * kept until `bramble job purge`) */
    char http_cert[1024];       /* --http-cert FILE: serve HTTPS ("" as recorded) */
    char http_key[1024];        /* --http-key FILE: its private key */
    char store_dir[1024];       /* --store-dir: the content store ("": DATA_DIR/store) */
    int64_t store_quota;        /* --store-quota: bytes it may hold (0: no limit) */
    int64_t user_store_quota;   /* --user-store-quota: bytes each user's data may
                                 * take in it (0: no limit) */
    char overlay_net[64];       /* --overlay-net CIDR: the overlay's addresses
                                 * (overlaynet.h) */
} br_config_t;

#define BR_DEFAULT_LOG_MAX_PER_JOB (64LL << 20)
#define BR_DEFAULT_LOG_RETENTION_MS (30LL * 24 * 3600 * 1000)
#define BR_DEFAULT_HALF_LIFE_MS (7LL * 24 * 3600 * 1000)
#define BR_DEFAULT_REPLICA_RETENTION_MS (7LL * 24 * 3600 * 1000)

#define BR_DEFAULT_LISTEN "tcp://0.0.0.0:7700"

/* Fill defaults (data dir from $XDG_DATA_HOME or /var/lib/bramble for root). */
void br_config_defaults(br_config_t *cfg);

/* `brambled init`: create DIR, the key pair, DIR/coordinator.yaml, the store with the
 * admin key, and DIR/admin.credential. Refuses a data dir that is already set up,
 * and a certificate and key (recorded as absolute paths) that do not load. */
int br_config_init(br_config_t *cfg, br_err_t *err);

/* Read DIR/coordinator.yaml into cfg (keys; listen/advertise, announce and http
 * unless already set; http_cert and http_key unless either is set). */
int br_config_load(br_config_t *cfg, br_err_t *err);

/* DIR/name into buf. */
const char *br_config_path(const br_config_t *cfg, const char *name, char *buf,
                           size_t len);

#endif
