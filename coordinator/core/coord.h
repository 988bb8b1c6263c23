/* coord.h - the coordinator object, and what every module uses of it (coord.c).
 * Calls go one way: the loop (server.c) -> the handler table and handlers (api*.c)
 * -> the modules (node life, services, placement, usage, replicas...) -> the job
 * core (jobs.c, over the jobs in memory of jobtab.c) -> this file's functions ->
 * the outbox (outbox.h), the hooks and the store. tests/layers/check_layers.py
 * holds the objects to it: no call circle between files, and nothing calls up into
 * the loop. The core tells the modules what happened through hooks (hooks.h), and
 * each module keeps its own state. One thread (the HTTP side's threads, http.h,
 * get only copies of what it publishes); every wake of the loop runs in one store
 * transaction, and replies and orders to agents leave only after it commits. */
#ifndef BRAMBLE_COORD_H
#define BRAMBLE_COORD_H

#include <jansson.h>
#include <stdint.h>

#include "config.h" /* (the configuration is kept by value) */
#include "msg.h"
#include "nodes.h"
#include "store.h" /* (br_principal_t, and what nearly every module calls) */

#define BR_COORD_BATCH_MAX 512 /* messages read in one wake (one transaction) */
/* ZeroMQ I/O threads: each connection's CURVE work (handshake, every message's
 * box and unbox) runs on one of them, so with one the joins of many agents at
 * once queue behind a single thread while the loop waits for their messages */
#define BR_COORD_IO_THREADS 2
#define BR_STREAMS_PER_USER 32 /* shells and forward connections one user has open */
#define BR_STREAMS_MAX 512     /* ... and all users (each holds at most 2 windows) */

typedef struct br_coord {
    br_config_t cfg;
    struct br_dirlock *lock; /* DIR/brambled.lock: one coordinator per data dir */
    void *ctx;
    void *sock;
    struct br_zap *zap;
    br_store_t *store;
    struct br_content *content; /* files by hash: data sets' (content.h, --store-dir) */
    struct br_contentw *contentw; /* writes content.put's chunks off the loop (or NULL:
                                     here, as they come) */
    struct br_uploads *uploads; /* stored files no job of their user's refers to yet */
    struct br_stages *stages;   /* code fetched by a node while it is uploaded */
    struct br_listcache *listcache; /* the last few manifests made from listings */
    struct br_storemark *mark; /* DIR/store.mark: refuses a store that lost commits */
    br_nodes_t *nodes;
    struct br_jobtab *jobs; /* the current jobs in memory (jobtab.h), kept by jobs.c */
    int sigfd;
    int64_t started_mono;
    struct br_outbox *out; /* what this wake sends and logs, once committed (outbox.h) */
    br_msg_t *wake_reqs[BR_COORD_BATCH_MAX]; /* what this wake read: told if undone */
    unsigned char wake_later[BR_COORD_BATCH_MAX]; /* ... unless answered by a helper
                                                   * thread, its answer still to come */
    size_t wake_len;
    uint64_t handed; /* requests handed to a helper thread (the content writer), whose
                      * answer it sends: counted so a wake undone does not tell them */
    struct br_hooks *hooks;      /* what the modules hear of the core (hooks.h) */
    struct br_sched *sched; /* the scheduler's own state (scheduler.h) */
    struct br_services *services; /* the services' own state (services.h) */
    struct br_routes *routes;     /* the gateways' routing table (routes.h) */
    struct br_gwload *gwload;     /* what the gateways carry (gwload.h) */
    struct br_autoscale *autoscale; /* services scaled by their load (autoscale.h) */
    struct br_devenv *devenv;       /* dev environments stopped when idle (devenv.h) */
    struct br_replicas *replicas; /* pulls of checkpoints in flight (replicas.h) */
    struct br_replkeep *replkeep; /* how long ended jobs' replicas stay (replkeep.h) */
    struct br_usage *usage;       /* what users used, and their limits (usage.h) */
    struct br_ckptpull *ckptpull; /* checkpoints pulled to users' machines (ckptpull.h) */
    struct br_pace *pace;         /* messages gather before a wake when busy (pace.h) */
    int64_t ticked;         /* monotonic ms of the last BR_HOOK_TICK */
    int64_t trimmed;        /* ... and of the heap's free memory last given back */
    int64_t woke;           /* monotonic ms the loop last ran a wake (server.c) */
    int64_t code_expired;   /* monotonic ms code no job needs was last let go */
    int64_t uploads_expired; /* monotonic ms uploads given up were last let go */
    struct br_netmap *netmap;    /* round trips between nodes, from their heartbeats */
    struct br_probeset *probeset; /* who probes whom, and the probes' key (probeset.h) */
    struct br_overlay_log *overlay_log; /* what changed in the overlay, by version:
                                         * a node's place, a node gone, a pair's
                                         * relay (overlaylog.h) */
    struct br_watchers *watchers; /* clients waiting for news (event.watch) */
    uint64_t sends_dropped_logged; /* messages dropped (stats.h counts them) of which
                                    * the log has told */
    int64_t drops_logged_at;       /* monotonic ms of that log line */
    struct br_stats *stats;             /* what /metrics shows (stats.h) */
    struct br_http *http;               /* the HTTP side, NULL when off (http.h) */
    int http_tokens_dirty;         /* the metrics tokens changed: hand them over */
    struct br_dash *dash;          /* the dashboard, with the HTTP side (dashboard.h) */
    struct br_relay *relay;        /* shells' and forwards' bytes (relay.h); NULL: none */
    int stop;
} br_coord_t;

br_coord_t *br_coord_new(const br_config_t *cfg, br_err_t *err);
/* Make the modules and wire them to c (its store, nodes, jobs, hooks and ctx made;
 * ctx may be NULL where nothing is pulled): each registers its hooks, in the order
 * they run. The daemon and the unit tests' fixture both use it (server.c). 0, or
 * -1 (out of memory). */
int br_coord_wire(br_coord_t *c);
void br_coord_destroy(br_coord_t **c);
/* Serve until SIGTERM/SIGINT. */
int br_coord_run(br_coord_t *c, br_err_t *err);

/* Who sent a message: the principal its CURVE key belongs to (api.c finds it). */
typedef struct {
    br_principal_t kind;
    char name[64];
    int64_t id; /* the principal's id: never reused, so jobs belong to it, not the name */
} br_caller_t;

/* Whether who may see job (a store row): the admin every job, a user their own. */
int br_coord_may_see(const br_caller_t *who, const json_t *job);

/* Queue a message to send after the current transaction commits (takes it). */
void br_coord_post(br_coord_t *c, br_msg_t *m);
/* Answer m with body (taken), or with an error (EINVAL when err has none); an
 * event gets no answer. */
void br_reply_ok(br_coord_t *c, br_msg_t *m, json_t *body);
void br_reply_fail(br_coord_t *c, br_msg_t *m, const br_err_t *err);
/* Queue a request to a node's agent (body stolen). No-op if it is not connected. */
void br_coord_send_node(br_coord_t *c, br_node_t *n, const char *type, json_t *body);
/* Record an event (store + daemon log). */
void br_coord_event(br_coord_t *c, int64_t job, const char *node, const char *state,
                    const char *fmt, ...) __attribute__((format(printf, 5, 6)));
/* Something happened to job (0: a node) that clients may wait for: an event, or
 * (is_log) output. br_coord_event calls it; watchers hear of it after the wake. */
void br_coord_news(br_coord_t *c, int64_t job, int is_log);
/* Something changed that may let a pending job start (a node freed, a job
 * waits): runs BR_HOOK_CHANGED, so a scheduling pass ends the wake. */
void br_coord_changed(br_coord_t *c);
/* Persist a node's info. */
void br_coord_save_node(br_coord_t *c, br_node_t *n);

/* Unix ms -> unix seconds as a JSON real (null for 0/null). */
json_t *br_time_json(json_t *ms);

#endif
