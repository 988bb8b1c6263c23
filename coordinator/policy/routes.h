/* routes.h - the gateways' routing table (docs/gateway.md): which services answer
 * to which model names, and where their healthy replicas are.
 *
 * A bramble-gateway watches the table (gateway.watch, renewed every few seconds,
 * like event.watch); after each wake that changed it, every watching gateway is
 * sent the whole table at once ("gateway.news", with a version that grows by one
 * with each change, from the wall clock's ms when the coordinator started, so
 * that it grows across restarts too), so a gateway never asks twice and keeps serving from the last
 * table it heard while the coordinator is away. The table is made from the jobs in
 * memory, at most once per BR_ROUTES_EVERY_MS.
 *
 * The table also carries the users' API keys (hashes only, with the models each
 * may be used for and its user's limit of requests a minute): read from the store
 * again only after br_routes_keys_changed, and sent to a gateway only when they
 * changed since it last heard them (a table without "keys" leaves its keys as they
 * were). */
#ifndef BRAMBLE_ROUTES_H
#define BRAMBLE_ROUTES_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "coord.h"

#define BR_ROUTES_MAX 64          /* gateways watching at once */
#define BR_ROUTES_TTL_MS 30000    /* a watch not renewed this long ends */
#define BR_ROUTES_EVERY_MS 20     /* the table is made again at most this often */
#define BR_ROUTES_ROUTE_MAX 256
#define BR_ROUTES_REPORTS 256     /* gateway reports whose ids are remembered */

typedef struct br_routes br_routes_t;

br_routes_t *br_routes_new(void);
void br_routes_destroy(br_routes_t **r);

/* The keys, or what a user may do through them (a limit, the user removed), may
 * have changed: read them again before the table is next sent. */
void br_routes_keys_changed(br_routes_t *r);

/* The table now: {"services": [{"id", "name", "owner", "owner_id", "model",
 * "aliases", "adapters", "max_inflight", "public", "cold_start_ms" (autoscale's
 * cold_start_timeout; 0: not autoscaled), "replicas": [{"id", "replica", "host",
 * "port", "node"}]}]}, every running service with a service.model (with no
 * replica too: its requests wait for one), its healthy replicas that do not drain
 * only. New reference (NULL: out of memory). */
json_t *br_routes_table(br_coord_t *c);

/* Add or renew gateway name's watch from route (its ROUTER id); the answer to
 * gateway.watch, {"ttl_ms", "version", "table"} (the table with "keys": [{"hash",
 * "user", "user_id", "models", "rpm"}]), or NULL with err (EBUSY: too many
 * gateways watch). */
json_t *br_routes_watch(br_coord_t *c, const void *route, size_t route_len,
                        const char *name, int64_t now_ms, br_err_t *err);

/* A gateway removed: its watches end. */
void br_routes_forget(br_routes_t *r, const char *name);

/* Gateway reports (gateway.report) are taken once each: whether the report id was
 * taken lately (one of the last BR_ROUTES_REPORTS; a report sent again because its
 * answer was lost), and remember that it was. */
int br_routes_report_seen(const br_routes_t *r, const char *id);
void br_routes_report_took(br_routes_t *r, const char *id);

/* The gateways that watch now: [{"name", "seen" (unix s of the last renewal)}]. */
json_t *br_routes_watching(br_routes_t *r);

/* After a committed wake: when gateways watch and the table changed since they
 * were last told, fn(arg, route, route_len, body) sends each one body
 * ({"version", "table"}, the table with "keys" when they changed since that gateway
 * last heard them; fn does not take it); fn returns -1 when the route is gone
 * (the watch ends). */
typedef int (*br_routes_send_fn)(void *arg, const void *route, size_t route_len,
                                 json_t *body);
void br_routes_flush(br_coord_t *c, int64_t now_ms, br_routes_send_fn fn, void *arg);

#endif
