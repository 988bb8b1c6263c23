/* server.c - the coordinator's loop: one ROUTER, the ZAP handler, a signalfd and
 * the HTTP side's eventfd in one zmq_poll; each wake drains waiting messages into
 * one store transaction, runs the failure detector and the scheduler, commits,
 * then sends what it queued, and hands the HTTP side what it asked for. */
#include <errno.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <unistd.h>
#include <sodium.h>
#include <zmq.h>

#include "api.h"
#include "audit.h"
#include "dashboard.h"
#include "coord.h"
#include "deps.h"
#include "httptls.h"
#include "jobs.h"
#include "nodelife.h"
#include "pace.h"
#include "replicas.h"
#include "replkeep.h"
#include "ckptpull.h"
#include "scheduler.h"
#include "services.h"
#include "sock.h"
#include "usage.h"
#include "util.h"
#include "hooks.h"
#include "jobtab.h"
#include "outbox.h"
#include "netmap.h"
#include "overlaylog.h"
#include "probeset.h"
#include "contentw.h"
#include "listcache.h"
#include "manifest_check.h"
#include "stages.h"
#include "uploads.h"
#include "routes.h"
#include "autoscale.h"
#include "devenv.h"
#include "gwload.h"
#include "watchers.h"
#include "stats.h"
#include "http.h"
#include "zap.h"
#include "relay.h"
#include "storemark.h"
#include "content.h"
#include "dirlock.h"

#define TRIM_MS 60000 /* the heap's free memory is given back this often */

#define BATCH_MAX BR_COORD_BATCH_MAX

/* Let go of the requests the last wake read. */
static void forget_wake(br_coord_t *c)
{
    for (size_t i = 0; i < c->wake_len; i++)
        br_msg_destroy(&c->wake_reqs[i]);
    c->wake_len = 0;
}

/* ZAP: the handshake admits the keys of the admin, users and nodes, and the join
 * key of a token (token.h); a revoked key and every other key are refused, so a
 * stranger's messages never reach the handlers. */
static int zap_check(void *arg, const char *key)
{
    br_coord_t *c = arg;
    br_principal_t kind;
    char name[64];
    int ok;
    if (br_store_key_lookup(c->store, key, &kind, name, sizeof(name), NULL) < 0)
        ok = 0;
    else if (kind == BR_PRINCIPAL_UNKNOWN)
        ok = br_store_token_join_key_known(c->store, key, br_now_ms(), NULL) == 1;
    else
        ok = kind != BR_PRINCIPAL_REVOKED;
    if (!ok)
        br_stats_handshake_refused(c->stats);
    return ok ? 0 : -1;
}

static int load_nodes(br_coord_t *c, br_err_t *err)
{
    json_t *list = br_store_node_list(c->store, err);
    if (!list)
        return -1;
    size_t i;
    json_t *n;
    json_array_foreach(list, i, n) {
        br_node_t *node = br_nodes_add(c->nodes, n);
        if (node)
            br_nodes_seen(c->nodes, node, c->started_mono); /* grace starts now */
    }
    json_decref(list);
    return br_jobs_restore(c, err);
}

/* The HTTP side, when --http (or the data dir) asks for it. */
static int open_http(br_coord_t *c, br_err_t *err)
{
    br_http_addr_t addr;
    if (!c->cfg.http[0] || strcmp(c->cfg.http, "off") == 0)
        return 0;
    if (br_http_parse_addr(c->cfg.http, &addr, err) < 0) {
        br_err_prefix(err, "http");
        return -1;
    }
    br_http_tls_t *tls = NULL; /* read now, wiped once libmicrohttpd has it */
    int https = c->cfg.http_cert[0] != 0;
    if (https && !(tls = br_http_tls_new(c->cfg.http_cert, c->cfg.http_key, err))) {
        br_err_prefix(err, "https");
        return -1;
    }
    c->http = br_http_new(&addr, tls, err);
    br_http_tls_destroy(&tls);
    if (!c->http)
        return -1;
    br_strlcpy(c->cfg.http, addr.text, sizeof(c->cfg.http)); /* "7780": 127.0.0.1:7780 */
    c->http_tokens_dirty = 1; /* answered 503 until the loop hands the tokens over */
    c->dash = br_dash_new(addr.text, https);
    if (!c->dash)
        return br_errf(err, ENOMEM, "http: dashboard: out of memory");
    br_http_attach_dash(c->http, c->dash);
    fprintf(stderr, "brambled: %s on %s: GET /metrics with a metrics token; the "
                    "dashboard with a link from 'bramble dashboard'\n",
            https ? "HTTPS" : "HTTP", addr.text);
    if (!addr.loopback && !https)
        fprintf(stderr, "brambled: warning: HTTP on %s is reachable from other machines "
                        "and has no TLS: a scraper's token crosses the network in clear "
                        "text; an SSH tunnel to a loopback address avoids that "
                        "(docs/metrics.md)\n", addr.text);
    return 0;
}

static int open_signals(br_coord_t *c)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGHUP);
    sigprocmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);
    c->sigfd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
    return c->sigfd < 0 ? -1 : 0;
}

int br_coord_wire(br_coord_t *c)
{
    c->replicas = br_replicas_new();
    c->replkeep = br_replkeep_new();
    c->ckptpull = br_ckptpull_new(c->ctx);
    c->pace = br_pace_new();
    c->uploads = br_uploads_new();
    c->stages = br_stages_new();
    c->listcache = br_listcache_new();
    c->routes = br_routes_new();
    c->gwload = br_gwload_new();
    c->overlay_log = br_overlay_log_new();
    if (!c->replicas || !c->replkeep || !c->ckptpull || !c->pace || !c->uploads ||
        !c->stages || !c->listcache || !c->routes || !c->gwload || !c->overlay_log)
        return -1;
    /* the modules hear of the core in this order: the core's own hooks first */
    if (br_jobs_init(c) < 0 || br_deps_init(c) < 0 || br_replicas_init(c) < 0 ||
        br_replkeep_init(c) < 0 || br_ckptpull_init(c) < 0)
        return -1;
    c->services = br_services_new(c);
    c->sched = br_sched_new(c);
    c->usage = br_usage_new(c, c->cfg.half_life_ms);
    c->autoscale = br_autoscale_new(c);
    c->devenv = br_devenv_new(c);
    return c->services && c->sched && c->usage && c->autoscale && c->devenv ? 0 : -1;
}

br_coord_t *br_coord_new(const br_config_t *cfg, br_err_t *err)
{
    char path[1100];
    br_coord_t *c = calloc(1, sizeof(*c));
    if (!c)
        return br_errp(err, ENOMEM, "out of memory");
    c->cfg = *cfg;
    c->sigfd = -1;
    c->started_mono = br_mono_ms();
    c->out = br_outbox_new();
    c->jobs = br_jobtab_new();
    c->hooks = br_hooks_new();
    c->netmap = br_netmap_new();
    c->probeset = br_probeset_new(cfg->secret_key);
    c->watchers = br_watchers_new();
    c->stats = br_stats_new();
    if (c->cfg.grace_ms < 0)
        c->cfg.grace_ms = c->cfg.node_timeout_ms * 2;
    if (open_signals(c) < 0) {
        br_errf(err, errno, "signalfd: %s", strerror(errno));
        goto fail;
    }
    c->lock = br_dirlock_new(cfg->data_dir, "brambled.lock", "brambled", err);
    if (!c->lock)
        goto fail;
    /* the data dir was initialised (coordinator.yaml was read): its store must be there */
    struct stat st;
    br_config_path(cfg, "bramble.db", path, sizeof(path));
    if (stat(path, &st) < 0 || st.st_size == 0) {
        br_errf(err, ENOENT, "%s is %s, but %s was initialised: restore the store from a "
                             "backup (brambled will not start over with an empty one)",
                path, stat(path, &st) < 0 ? "missing" : "empty", cfg->data_dir);
        goto fail;
    }
    c->store = br_store_open(path, err);
    c->nodes = br_nodes_new();
    if (!c->store)
        goto fail;
    if (!c->cfg.store_dir[0])
        br_config_path(cfg, "store", c->cfg.store_dir, sizeof(c->cfg.store_dir));
    c->content = br_content_open(c->cfg.store_dir, (uint64_t)c->cfg.store_quota, err);
    if (!c->content || !(c->contentw = br_contentw_new(c->content, err)))
        goto fail;
    int left = br_content_collect(c->content, c->store, 24 * 3600);
    if (left > 0)
        fprintf(stderr, "brambled: removed %d stored file(s) that uploads left a day ago or "
                        "more and nothing refers to\n", left);
    c->ctx = zmq_ctx_new();
    if (c->ctx)
        zmq_ctx_set(c->ctx, ZMQ_IO_THREADS, BR_COORD_IO_THREADS); /* before any socket */
    if (!c->out || !c->nodes || !c->jobs || !c->hooks || !c->netmap || !c->probeset ||
        !c->stats || !c->ctx || br_coord_wire(c) < 0) {
        br_errf(err, ENOMEM, "out of memory");
        goto fail;
    }
    c->mark = br_storemark_new(cfg->data_dir, c->store, err);
    if (!c->mark || load_nodes(c, err) < 0)
        goto fail;
    c->zap = br_zap_new(c->ctx, zap_check, c, err);
    if (!c->zap)
        goto fail;
    c->sock = br_sock_server(c->ctx, cfg->listen, cfg->secret_key, err);
    if (!c->sock || open_http(c, err) < 0)
        goto fail;
    /* shells and forwards: next to a TCP endpoint (an ipc:// one has no port) */
    if (strncmp(cfg->listen, "tcp://", 6) == 0 &&
        !(c->relay = br_relay_new(cfg->listen, BR_STREAMS_PER_USER, BR_STREAMS_MAX, err)))
        goto fail;
    return c;
fail:
    br_coord_destroy(&c);
    return NULL;
}

void br_coord_destroy(br_coord_t **cp)
{
    br_coord_t *c = cp ? *cp : NULL;
    if (!c)
        return;
    br_outbox_destroy(&c->out);
    forget_wake(c);
    br_http_destroy(&c->http); /* its threads stop before what they were given goes */
    br_dash_destroy(&c->dash);
    br_ckptpull_destroy(&c->ckptpull); /* its sockets close before the context ends */
    br_pace_destroy(&c->pace);
    br_uploads_destroy(&c->uploads);
    br_stages_destroy(&c->stages);
    br_listcache_destroy(&c->listcache);
    br_relay_destroy(&c->relay); /* its thread stops before the context ends */
    br_sock_close(&c->sock);
    br_zap_destroy(&c->zap);
    if (c->ctx)
        zmq_ctx_term(c->ctx);
    br_jobtab_destroy(&c->jobs);
    br_nodes_destroy(&c->nodes);
    br_netmap_destroy(&c->netmap);
    br_probeset_destroy(&c->probeset);
    br_watchers_destroy(&c->watchers);
    br_sched_destroy(&c->sched);
    br_usage_destroy(&c->usage);
    br_services_destroy(&c->services);
    br_autoscale_destroy(&c->autoscale);
    br_devenv_destroy(&c->devenv);
    br_routes_destroy(&c->routes);
    br_gwload_destroy(&c->gwload);
    br_overlay_log_destroy(&c->overlay_log);
    br_replicas_destroy(&c->replicas);
    br_replkeep_destroy(&c->replkeep);
    br_hooks_destroy(&c->hooks);
    br_storemark_destroy(&c->mark);
    br_store_destroy(&c->store);
    br_contentw_destroy(&c->contentw); /* (its thread writes into the store) */
    br_content_destroy(&c->content);
    br_dirlock_destroy(&c->lock);
    br_stats_destroy(&c->stats);
    if (c->sigfd >= 0)
        close(c->sigfd);
    free(c);
    *cp = NULL;
}

/* An event (body taken) to one client now, not after the wake: -1 when the client
 * is gone or does not read (its queue is full), the caller then drops its watch. */
static int send_event(br_coord_t *c, const void *route, size_t route_len, const char *type,
                      json_t *body)
{
    br_msg_t *m = br_msg_new(BR_MSG_EVENT, type, 0);
    br_err_t err;
    int rc = 0;
    if (!m || br_msg_set_route(m, route, route_len) < 0) {
        json_decref(body);
        br_msg_destroy(&m);
        return 0;
    }
    br_msg_set_body(m, body);
    if (br_msg_send(c->sock, m, &err) < 0) {
        if (errno == EAGAIN)
            br_stats_send_dropped(c->stats);
        rc = errno == EHOSTUNREACH || errno == EAGAIN ? -1 : 0;
    }
    br_msg_destroy(&m);
    return rc;
}

/* Tell a watcher there is news (watchers.h); -1 when its client is gone or does not
 * read (its queue is full): the watch is dropped, never waited for, and the
 * client's renewal brings it back. */
static int send_news(void *arg, const void *route, size_t route_len, int64_t job)
{
    br_coord_t *c = arg;
    if (br_dash_is_route(route, route_len)) /* a dashboard's event stream */
        return c->dash ? br_dash_news(c->dash, route, route_len, job) : -1;
    return send_event(c, route, route_len, "event.news",
                      json_pack("{s:I}", "job", (json_int_t)job));
}

/* Send a gateway the routing table (routes.h); -1 when it is gone or does not read. */
static int send_routes(void *arg, const void *route, size_t route_len, json_t *body)
{
    return send_event(arg, route, route_len, "gateway.news", json_incref(body));
}

/* Send what the wake queued. Nothing here blocks: a message to a peer that does
 * not read what it is sent (its queue is full) is dropped and counted, and the
 * count is logged at most once a second. */
static void send_one(void *arg, br_msg_t *m)
{
    br_coord_t *c = arg;
    br_err_t err;
    json_t *errnum = json_object_get(br_msg_body(m), "errnum");
    if (br_msg_kind(m) == BR_MSG_RESPONSE && json_is_integer(errnum))
        br_stats_refused(c->stats, (int)json_integer_value(errnum));
    if (!br_dash_catch(c, m) && /* (an answer to the dashboard stays) */
        br_msg_send(c->sock, m, &err) < 0) {
        if (errno == EAGAIN)
            br_stats_send_dropped(c->stats);
        else if (errno != EHOSTUNREACH)
            fprintf(stderr, "brambled: %s\n", err.text);
    }
    br_msg_destroy(&m);
}

static void flush_outbox(br_coord_t *c, int committed)
{
    br_outbox_end(c->out, committed, send_one, c);
    uint64_t dropped = br_stats_sends_dropped(c->stats);
    int64_t now = br_mono_ms();
    if (dropped > c->sends_dropped_logged && now - c->drops_logged_at >= 1000) {
        fprintf(stderr, "brambled: dropped %llu message(s) to peers that do not read "
                        "(queue of %d full); %llu in all\n",
                (unsigned long long)(dropped - c->sends_dropped_logged),
                BR_SOCK_PEER_QUEUE, (unsigned long long)dropped);
        c->sends_dropped_logged = dropped;
        c->drops_logged_at = now;
    }
}

/* The end of every wake: its log lines (when committed), its messages, news for the
 * clients waiting for it, and the requests it read let go. News goes even for an
 * undone wake: it only makes a client ask again. */
static void end_wake(br_coord_t *c, int committed)
{
    flush_outbox(c, committed);
    br_watchers_flush(c->watchers, br_mono_ms(), send_news, c);
    if (committed) /* (an undone wake's jobs in memory are read again first) */
        br_routes_flush(c, br_mono_ms(), send_routes, c);
    forget_wake(c);
    br_jobtab_sweep(c->jobs); /* the jobs that ended in it */
}

/* The current jobs and what nodes hold, read again from the store after a
 * rollback undid what the wake had changed in memory too. */
static void rehold(br_coord_t *c)
{
    br_err_t err;
    if (br_jobs_restore(c, &err) < 0)
        fprintf(stderr, "brambled: reading the current jobs again after a rollback: %s\n",
                err.text);
}

/* Undo a wake whose changes will not reach the disk: nothing it queued is sent,
 * and every request it read is told so instead of waiting out its timeout. */
static void abort_wake(br_coord_t *c, int errnum)
{
    br_store_rollback(c->store);
    rehold(c);
    br_outbox_undo(c->out, (br_outbox_mark_t){0, 0});
    for (size_t i = 0; i < c->wake_len; i++) {
        br_msg_t *req = c->wake_reqs[i];
        if (br_msg_kind(req) == BR_MSG_REQUEST && !c->wake_later[i]) /* (see handed) */
            br_coord_post(c, br_msg_reply_error(
                                 req, errnum, "%s: %s; nothing was changed, try again later",
                                 br_msg_type(req),
                                 errnum == ENOSPC ? "store full (the coordinator's disk "
                                                    "is full)"
                                                  : "store error (see brambled's log)"));
    }
    br_coord_changed(c); /* what the wake decided is undone: decide again */
}

/* Handle one request in its own savepoint; it is kept in wake_reqs. Returns 0, or
 * the errno of a store failure that rolled the whole transaction back. */
static int dispatch_one(br_coord_t *c, br_msg_t *m)
{
    br_err_t serr;
    if (br_store_savepoint(c->store, &serr) < 0) {
        fprintf(stderr, "brambled: %s\n", serr.text);
        c->wake_later[c->wake_len] = 0;
        c->wake_reqs[c->wake_len++] = m;
        return EIO;
    }
    br_outbox_mark_t from = br_outbox_mark(c->out);
    br_caller_t who;
    uint64_t handed = c->handed;
    br_api_dispatch(c, m, &who);
    br_audit_note(c, m, &who, from.msgs);
    /* (a chunk or a page handed to the content writer is answered by it, written or
     * not: an undone wake changes nothing of that, and does not answer it twice) */
    int later = c->handed != handed;
    c->wake_later[c->wake_len] = (unsigned char)later;
    c->wake_reqs[c->wake_len++] = m; /* kept until the wake's answers are sent */
    int failed = br_store_release(c->store);
    if (failed && !br_store_in_txn(c->store))
        return failed;
    if (failed) { /* its changes were undone: so is what it queued and logged */
        rehold(c);
        br_outbox_undo(c->out, from);
        if (br_msg_kind(m) == BR_MSG_REQUEST && !later)
            br_coord_post(c, br_msg_reply_error(
                                 m, failed, "%s: store %s; nothing was changed",
                                 br_msg_type(m),
                                 failed == ENOSPC ? "full (the coordinator's disk is full)"
                                                  : "error (see brambled's log)"));
        fprintf(stderr, "brambled: %s from %.8s...: store %s; its changes were undone\n",
                br_msg_type(m), br_msg_user(m), failed == ENOSPC ? "full" : "error");
    }
    return 0;
}

/* Read up to BATCH_MAX messages, each in its own savepoint. Returns 0, or the
 * errno of a store failure that rolled the whole transaction back. */
static int drain_messages(br_coord_t *c)
{
    int i;
    for (i = 0; i < BATCH_MAX; i++) {
        br_msg_t *m = NULL;
        br_err_t err;
        if (br_msg_recv(c->sock, 1, ZMQ_DONTWAIT, &m, &err) < 0) {
            if (errno == EAGAIN || errno == EINTR) {
                br_msg_destroy(&m);
                break;
            }
            if (m && br_msg_kind(m) == BR_MSG_REQUEST) /* malformed: say why */
                br_coord_post(c, br_msg_reply_error(m, EPROTO, "%s", err.text));
            fprintf(stderr, "brambled: dropped a message: %s\n", err.text);
            br_msg_destroy(&m);
            continue;
        }
        if (br_dash_posed(m)) { /* never answered: the answer would go to the dashboard */
            br_msg_destroy(&m);
            continue;
        }
        br_pace_count(c->pace, br_mono_us(), 1);
        int failed = dispatch_one(c, m);
        if (failed) {
            br_pace_woke(c->pace, i + 1);
            return failed;
        }
    }
    br_pace_woke(c->pace, i);
    return 0;
}

/* The dashboard's requests (dashboard.h), as many as the wake has room for, each
 * handled as a message of its session's key. Returns as drain_messages does. */
static int drain_dash(br_coord_t *c)
{
    br_dash_req_t reqs[BR_DASH_QUEUE_MAX];
    size_t room = BATCH_MAX - c->wake_len;
    size_t n = c->dash ? br_dash_take(c->dash, reqs, room < BR_DASH_QUEUE_MAX
                                                         ? room
                                                         : BR_DASH_QUEUE_MAX)
                       : 0;
    int failed = 0;
    for (size_t i = 0; i < n; i++) {
        br_msg_t *m = br_dash_msg(&reqs[i]);
        if (!m)
            continue;
        if (failed) { /* told by abort_wake that nothing was done */
            c->wake_later[c->wake_len] = 0;
            c->wake_reqs[c->wake_len++] = m;
        }
        else
            failed = dispatch_one(c, m);
    }
    return failed;
}

/* Hand the metrics tokens over to the HTTP side (they changed). */
static void give_tokens(br_coord_t *c)
{
    br_err_t err;
    json_t *list = br_store_token_list_metrics(c->store, &err);
    size_t n = json_array_size(list), i;
    br_http_token_t *t = n ? calloc(n, sizeof(*t)) : NULL;
    json_t *row;
    if (!list || (n && !t)) {
        fprintf(stderr, "brambled: metrics tokens not handed to the HTTP side: %s\n",
                list ? "out of memory" : err.text);
        json_decref(list);
        return; /* still dirty: tried again next wake */
    }
    json_array_foreach(list, i, row) {
        const char *id = json_string_value(json_object_get(row, "id"));
        const char *hash = json_string_value(json_object_get(row, "hash"));
        br_strlcpy(t[i].id, id ? id : "", sizeof(t[i].id));
        br_strlcpy(t[i].hash, hash ? hash : "", sizeof(t[i].hash));
        t[i].expires_ms = json_integer_value(json_object_get(row, "expires"));
        t[i].revoked = json_is_true(json_object_get(row, "revoked"));
    }
    if (br_http_set_tokens(c->http, t, n) == 0)
        c->http_tokens_dirty = 0;
    if (t)
        sodium_memzero(t, n * sizeof(*t));
    free(t);
    json_decref(list);
}

/* Whether node name is ready and connected (a stage's node, stages.h). */
static int node_ready(void *arg, const char *name)
{
    br_node_t *n = br_nodes_find(((br_coord_t *)arg)->nodes, name);
    return n && n->state == BR_NODE_READY && n->route_len > 0;
}

/* Uploads given up a day ago: no longer charged to their user, and out of the store
 * at this wake's sweep unless something refers to them by now (uploads.h). */
static void expire_uploads(br_coord_t *c, int64_t now)
{
    if (now - c->uploads_expired < 60000)
        return;
    c->uploads_expired = now;
    json_t *gone = br_uploads_expire(c->uploads, now);
    size_t i;
    json_t *h;
    json_array_foreach(gone, i, h)
        br_content_doubt(c->content, json_string_value(h), 0);
    json_decref(gone);
}

/* One wake: everything it changes is one transaction, committed before replies. */
static void wake(br_coord_t *c, int readable)
{
    br_err_t err;
    if (br_store_begin(c->store, &err) < 0) {
        fprintf(stderr, "brambled: %s\n", err.text);
        return;
    }
    int failed = readable ? drain_messages(c) : 0;
    if (!failed)
        failed = drain_dash(c);
    if (failed) {
        fprintf(stderr, "brambled: the store rolled the wake back (%s): %zu request(s) "
                        "refused\n", strerror(failed), c->wake_len);
        abort_wake(c, failed);
        end_wake(c, 0);
        return;
    }
    br_nodelife_check(c);
    int64_t now = br_mono_ms();
    if (now - c->ticked >= 1000) {
        c->ticked = now;
        br_hooks_run(c, c->hooks, BR_HOOK_TICK, NULL);
#ifdef __GLIBC__
        if (now - c->trimmed >= TRIM_MS) { /* what a burst (1,000 nodes joining, their
                                            * lists of peers queued) left goes back */
            c->trimmed = now;
            malloc_trim(0);
        }
#endif
        if (c->cfg.log_retention_ms > 0 && /* a bounded bite per second */
            br_store_log_expire(c->store, br_now_ms() - c->cfg.log_retention_ms, 2000,
                                &err) < 0)
            fprintf(stderr, "brambled: expiring old logs: %s\n", err.text);
        /* jobs' code outlives them as long as their output does */
        int64_t every = c->cfg.log_retention_ms / 2;
        every = every < 1000 ? 1000 : every > 60000 ? 60000 : every;
        if (c->cfg.log_retention_ms > 0 && now - c->code_expired >= every) {
            c->code_expired = now;
            br_api_code_expire(c, br_now_ms() - c->cfg.log_retention_ms);
        }
        expire_uploads(c, now);
        br_stages_expire(c->stages, now, node_ready, c);
        br_listcache_expire(c->listcache, now);
    }
    br_sched_wake(c);
    if (br_store_commit(c->store, &err) < 0) {
        /* nothing is on disk: no request is answered as done */
        fprintf(stderr, "brambled: commit failed: %s\n", err.text);
        abort_wake(c, err.errnum == ENOSPC ? ENOSPC : EIO);
        end_wake(c, 0);
        return;
    }
    br_storemark_update(c->mark, c->store);
    br_content_sweep(c->content, c->store); /* what the wake let go of, now that it is */
    if (c->http && c->http_tokens_dirty) /* before the answers: a revoke holds once told */
        give_tokens(c);
    end_wake(c, 1);
}

/* After a wake: what the HTTP side waits for (its threads never read our state). */
static void serve_http(br_coord_t *c)
{
    if (!c->http)
        return;
    if (br_http_wanted(c->http)) {
        size_t len = 0;
        const char *page = br_stats_page(c->stats, c, &len);
        if (!page)
            fprintf(stderr, "brambled: metrics: out of memory making the page\n");
        br_http_publish(c->http, page, len);
    }
    br_dash_loop_sample(c);
}

int br_coord_run(br_coord_t *c, br_err_t *err)
{
    fprintf(stderr, "brambled: listening on %s (heartbeat %lldms, node timeout %lldms)\n",
            c->cfg.listen, (long long)c->cfg.heartbeat_ms,
            (long long)c->cfg.node_timeout_ms);
    if (c->relay)
        fprintf(stderr, "brambled: shells and forwards relayed on port %d\n",
                br_relay_port(c->relay));
    int64_t tick = c->cfg.heartbeat_ms / 4;
    if (tick < 20)
        tick = 20;
    if (tick > 250)
        tick = 250;
    while (!c->stop) {
        zmq_pollitem_t items[6 + BR_CKPTPULL_MAX] = {
            {c->sock, 0, ZMQ_POLLIN, 0},
            {br_zap_socket(c->zap), 0, ZMQ_POLLIN, 0},
            {NULL, c->sigfd, ZMQ_POLLIN, 0},
            {NULL, br_contentw_fd(c->contentw), ZMQ_POLLIN, 0},
            {NULL, c->http ? br_http_fd(c->http) : -1, ZMQ_POLLIN, 0},
            {NULL, c->dash ? br_dash_fd(c->dash) : -1, ZMQ_POLLIN, 0}};
        int base = c->dash ? 6 : c->http ? 5 : 4; /* then the holders of users' pulls */
        int64_t paced = br_sched_wait_ms(c); /* a pass held back (scheduler.h) */
        int count = base + br_ckptpull_items(c->ckptpull, items + base, BR_CKPTPULL_MAX);
        int n = zmq_poll(items, count, paced >= 0 && paced < tick ? paced : tick);
        if (n < 0 && errno != EINTR)
            return br_errf(err, errno, "poll: %s", zmq_strerror(errno));
        if (n > 0 && (items[2].revents & ZMQ_POLLIN)) {
            struct signalfd_siginfo si;
            if (read(c->sigfd, &si, sizeof(si)) == sizeof(si))
                fprintf(stderr, "brambled: signal %d, stopping\n", (int)si.ssi_signo);
            c->stop = 1;
        }
        if (n > 0 && (items[1].revents & ZMQ_POLLIN))
            br_zap_handle(c->zap);
        br_ckptpull_answer(c);
        json_t *listing;
        char lhash[80];
        for (br_msg_t *done;
             (done = br_contentw_take(c->contentw, &listing, lhash, sizeof(lhash)));) {
            if (listing) { /* parsed there: the upload's content.lack finds it made */
                json_t *summary = br_manifest_summary(listing);
                br_listcache_put(c->listcache, lhash, summary, listing, br_mono_ms());
                json_decref(summary);
                json_decref(listing);
            }
            br_coord_post(c, done); /* chunks of uploads written, fsynced when whole */
        }
        flush_outbox(c, 1); /* what they queued leaves now, not with the next wake */
        int readable = n > 0 && (items[0].revents & ZMQ_POLLIN);
        int others = 0; /* anything but chunks written (answered above) */
        for (int i = 0; i < count; i++)
            others |= i != 3 && items[i].revents;
        int64_t now = br_mono_ms();
        if (n > 0 && !others && now - c->woke < tick)
            continue; /* no wake for each chunk an upload wrote: one per tick will do */
        c->woke = now;
        int64_t gather = readable ? br_pace_gather_us(c->pace, br_mono_us()) : 0;
        if (gather > 0 && !c->stop) /* busy: let more come, so that one wake reads many */
            usleep((useconds_t)gather);
        wake(c, readable);
        serve_http(c);
    }
    return 0;
}
