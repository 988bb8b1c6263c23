/* coordlink.h - the gateway's link to the coordinator: one CURVE DEALER with the
 * gateway's credential, a watch of the routing table (gateway.watch) renewed every
 * GW_WATCH_RENEW_MS, and the tables the coordinator pushes (gateway.news). The
 * link never blocks: the gateway's loop polls its fd and calls gw_link_run. */
#ifndef BRAMBLE_GW_COORDLINK_H
#define BRAMBLE_GW_COORDLINK_H

#include <jansson.h>
#include <stdint.h>

#include "cred.h"
#include "err.h"

#define GW_WATCH_RENEW_MS 5000
#define GW_LINK_AWAY_MS 12000 /* no answer this long: the coordinator is away */

typedef struct gw_link gw_link_t;

/* on_table(arg, version, table) for each new routing table (borrowed). */
typedef void (*gw_table_fn)(void *arg, int64_t version, json_t *table);
/* on_reported(arg, id): the coordinator took the report id (gateway.report). */
typedef void (*gw_reported_fn)(void *arg, const char *id);

gw_link_t *gw_link_new(const br_cred_t *cred, gw_table_fn on_table,
                       gw_reported_fn on_reported, void *arg, br_err_t *err);
void gw_link_destroy(gw_link_t **l);

/* The fd to poll for input (ZMQ_FD: edge-triggered, so gw_link_run drains). */
int gw_link_fd(const gw_link_t *l);
/* Read what came, renew the watch when due: call after every poll, with ready
 * when the poll said the fd has news (the socket is looked at then, after a
 * send, and every 100 ms anyway). Returns the ms until it wants to run again. */
int gw_link_run(gw_link_t *l, int64_t now_ms, int ready);
/* Send a report (gateway.report; body borrowed): what the gateway counted
 * (ledger.h). Its answer comes to on_reported; a report lost is sent again by the
 * caller. */
void gw_link_report(gw_link_t *l, const json_t *body);
/* Tell the coordinator that the replica job at port failed (why), so its agent
 * checks it now (gateway.suspect). */
void gw_link_suspect(gw_link_t *l, int64_t job, int port, const char *why);
/* Tell the coordinator what the gateway carries now (gateway.load; services
 * taken: table.h's gw_table_load), and the version of the table it routes by. Sent again by the caller each second, so a lost one
 * is not resent. */
void gw_link_load(gw_link_t *l, json_t *services, int64_t version);
/* Whether the coordinator answered lately (within GW_LINK_AWAY_MS). */
int gw_link_up(const gw_link_t *l, int64_t now_ms);

#endif
