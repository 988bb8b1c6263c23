/* table.h - the gateway's routing table: the services behind it, by model name,
 * and their replicas with what the gateway knows of each (requests in flight, a
 * failure seen). Made from the coordinator's table (routes.h there) and updated in
 * place when a new one comes: a replica is known by its job, host and port, so
 * its count of requests in flight survives a new table, and one that left the
 * table stays until its last request ends. */
#ifndef BRAMBLE_GW_TABLE_H
#define BRAMBLE_GW_TABLE_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#define GW_DOWN_MS 2000      /* a replica that failed is left alone this long, */
#define GW_DOWN_MAX_MS 30000 /* doubling with each failure in a row, up to this */

typedef struct gw_service gw_service_t;

typedef struct gw_replica {
    int64_t id;         /* its job */
    int replica;        /* its number in the service */
    char host[256];
    int port;
    char node[64];
    char base[300];     /* "http://HOST:PORT" */
    gw_service_t *svc;
    int inflight;       /* requests sent to it and not ended */
    int64_t down_until; /* monotonic ms; 0: up */
    int fails;          /* failures in a row (then one request at a time once back) */
    int trial;          /* it closed connections kept to it: one request at a time
                           until one is answered (gw_replica_suspect) */
    int opening;        /* while in doubt (trial, or fails): a try is opening a new
                           connection to it, and no other may meanwhile (gateway.c) */
    int64_t suspected;  /* monotonic ms it was last reported to the coordinator */
    int present;        /* in the current table */
} gw_replica_t;

#define GW_WINDOW_S 10 /* rate and latency are over this many seconds */

/* A service's answers in one second (monotonic s). */
typedef struct {
    int64_t sec;
    int count, errors; /* answered; of them 5xx, or the client gone (499) */
    double ms;         /* their time, summed */
} gw_second_t;

struct gw_service {
    int64_t id;
    char name[96];
    char owner[64];
    int64_t owner_id;
    char model[129];
    json_t *names;     /* the model, its aliases and adapters (strings) */
    json_t *aliases;   /* its aliases alone */
    int max_inflight;  /* per replica; 0: no cap */
    int is_public;
    int64_t cold_start_ms; /* autoscaled: at 0 replicas a request waits this long */
    gw_replica_t **replicas;
    size_t nreplicas;
    int present;
    int waiting;       /* requests queued for it */
    size_t next;       /* where the next tie between replicas is broken */
    gw_second_t win[GW_WINDOW_S]; /* its answers over the last seconds */
};

typedef struct gw_table {
    gw_service_t **services;
    size_t nservices;
    int64_t version;
} gw_table_t;

gw_table_t *gw_table_new(void);
void gw_table_destroy(gw_table_t **t);

/* Take the coordinator's table (its "services"). 0, or -1 when it is malformed
 * (the table stays as it was). */
int gw_table_update(gw_table_t *t, int64_t version, const json_t *table);

/* Whether svc answers to model name; whether name is one of its aliases (a request
 * for it goes to the replicas with the model's own name). */
int gw_service_serves(const gw_service_t *svc, const char *model);
int gw_service_alias(const gw_service_t *svc, const char *name);

/* The replica of svc to send a request to now: up, under max_inflight, with the
 * fewest in flight (ties taken in turn); NULL when none. */
gw_replica_t *gw_service_pick(gw_service_t *svc, int64_t now_ms);
/* Whether svc has a replica that is up (maybe busy). */
int gw_service_has_up(const gw_service_t *svc, int64_t now_ms);
/* Whether svc has a replica in the table (up or not). */
int gw_service_has_present(const gw_service_t *svc);

/* Service id answered a request in ms with status, at now_ms: counted in its
 * window (nothing when the service is gone). */
void gw_table_answered(gw_table_t *t, int64_t id, int status, double ms, int64_t now_ms);

/* What the gateway carries, for the coordinator (gateway.load): [{"id", "inflight",
 * "waiting", "rate", "errors", "latency_ms", "replicas": [{"id", "inflight",
 * "routed"}]}] over the services it knows; rate and errors a second over the last
 * GW_WINDOW_S s, latency_ms the mean time of those answers (0: none). New
 * reference. */
json_t *gw_table_load(const gw_table_t *t, int64_t now_ms);

/* A request to r ended: ok, or failed (the replica is left alone a while). */
void gw_replica_done(gw_replica_t *r, int ok, int64_t now_ms);
/* A request to r ended telling nothing of it (called off by its client, or held
 * back before it reached r): neither a failure nor the end of a trial. */
void gw_replica_release(gw_replica_t *r);

/* The replica whose job is id, at port (present or still used); NULL when none. */
gw_replica_t *gw_table_replica(const gw_table_t *t, int64_t id, int port);

/* r closed a connection the gateway kept to it while no request was on it: the
 * way a dead process's connections end (or an idle time out's). r gets one request
 * at a time until one is answered, so a burst routed to it meanwhile cannot all
 * fail. */
void gw_replica_suspect(gw_replica_t *r);
/* r refused a new connection at now_ms: out for its first failure's time at once
 * (the failure itself is counted when its try ends, gw_replica_done). */
void gw_replica_refused(gw_replica_t *r, int64_t now_ms);

/* A try routed to r is about to open a new connection to it at now_ms (*opened:
 * whether this try holds r's one already). 1 when it may: always, unless r is out
 * (a connection to it was refused a moment ago: never, until its time out ends) or
 * in doubt (on trial, or failing), where one try at a time may (it holds it then,
 * *opened set, until gw_replica_opened_done); 0: hold this one back (a burst routed
 * before the doubt began need not each find a dead port). */
int gw_replica_may_open(gw_replica_t *r, int *opened, int64_t now_ms);
/* The try that held r's one new connection (opened set) let go of it. */
void gw_replica_opened_done(gw_replica_t *r, int *opened);
/* r answered a try (its final status, one not retried elsewhere): it lives. Its
 * trial and failures end now, not when the answer ends (a long stream would hold
 * every other request to it back meanwhile), and the try lets go of r's one new
 * connection (opened). */
void gw_replica_answered(gw_replica_t *r, int *opened);

/* Drop what left the table and is no longer used. */
void gw_table_sweep(gw_table_t *t);

#endif
