/* gwload.h - what the gateways say they carry (gateway.load, about every second):
 * for each service behind them, its requests in flight and those waiting for a
 * replica; for each replica they know, its requests in flight and whether they
 * still send it new ones ("routed"). The autoscaler reads the load of a service
 * (autoscale.h); a draining replica is stopped once no gateway holds a request on
 * it (services.h). Only the last report of each gateway is kept, and a gateway
 * that has not reported for BR_GWLOAD_FRESH_MS is not counted: it is gone or cut
 * off, and nothing done here would reach its requests. */
#ifndef BRAMBLE_GWLOAD_H
#define BRAMBLE_GWLOAD_H

#include <jansson.h>
#include <stdint.h>

#include "err.h"

#define BR_GWLOAD_FRESH_MS 3000
#define BR_GWLOAD_MAX 64            /* gateways at once (routes.h watches as many) */
#define BR_GWLOAD_SERVICES_MAX 4096 /* services in one report */
#define BR_GWLOAD_REPLICAS_MAX 1000 /* replicas of one service in one report */

typedef struct br_gwload br_gwload_t;

br_gwload_t *br_gwload_new(void);
void br_gwload_destroy(br_gwload_t **l);

/* Gateway's report at now_ms: services is [{"id", "inflight", "waiting", "rate"?,
 * "errors"?, "latency_ms"?, "replicas": [{"id", "inflight", "routed"}]}] (rate and
 * errors: answers a second lately; latency_ms: their mean time); it replaces the
 * gateway's last one; version is the routing table's the gateway had when it
 * made the report (routes.h; 0: unknown). 0, or -1
 * with err (EPROTO: malformed, naming what; EBUSY: BR_GWLOAD_MAX other gateways
 * report already). */
int br_gwload_take(br_gwload_t *l, const char *gateway, const json_t *services,
                   int64_t version, int64_t now_ms, br_err_t *err);

/* The routing table was made again with this version (routes.h tells each one;
 * it grows, also across restarts), and the version as last told: a replica that
 * begins to drain now is out of the next table, whose version is higher. */
void br_gwload_table_made(br_gwload_t *l, int64_t version);
int64_t br_gwload_table_version(const br_gwload_t *l);

/* The gateway was removed: its reports go. */
void br_gwload_forget(br_gwload_t *l, const char *gateway);

/* How many gateways reported within BR_GWLOAD_FRESH_MS of now_ms. */
int br_gwload_fresh(const br_gwload_t *l, int64_t now_ms);

/* Service's requests in flight and waiting, summed over the fresh gateways. */
void br_gwload_service(const br_gwload_t *l, int64_t service, int64_t now_ms, int *inflight,
                       int *waiting);

/* Service's answers a second (rate), of them failed (errors), and their mean time
 * (latency_ms; 0 when none), over the fresh gateways. */
void br_gwload_service_rates(const br_gwload_t *l, int64_t service, int64_t now_ms,
                             double *rate, double *errors, double *latency_ms);

/* Whether replica may stop now without cutting a request: a fresh gateway has
 * heard that it drains (it reported after since_ms, from a table newer than
 * version: the routes' version when the drain began, so the table it had was made
 * without the replica), every fresh gateway has, and none routes to it or holds a
 * request on it. 1 yes, 0 not yet (also while no fresh gateway has heard: one
 * that went quiet may still hold requests); *inflight (may be NULL): its requests
 * in flight over the fresh gateways. */
int br_gwload_replica_idle(const br_gwload_t *l, int64_t replica, int64_t since_ms,
                           int64_t version, int64_t now_ms, int *inflight);

#endif
