/* gateway.c - bramble-gateway's loop, its HTTP side and its routing (gateway.h). */
#include "gateway.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <errno.h>
#include <jansson.h>
#include <microhttpd.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "coordlink.h"
#include "easypool.h"
#include "exchange.h"
#include "keys.h"
#include "ledger.h"
#include "metrics.h"
#include "ratelimit.h"
#include "table.h"
#include "util.h"

#define SWEEP_MS 100 /* clients that hung up, requests waited out, slow clients */
#define REPORT_MS 5000 /* what was counted goes to the coordinator this often */
#define LOAD_MS 1000   /* what the gateway carries (gateway.load), this often, */
#define LOAD_SOON_MS 50 /* ... or after this when a request waits at 0 replicas */
#define GW_SUSPECT_MS 10000 /* a failed replica is told to the coordinator this often */

/* One client connection: when it began its current request, and whether that
 * request is whole (then the client has sent what it had to). */
typedef struct conn {
    struct MHD_Connection *mhd;
    int64_t since; /* monotonic ms: connected, or its last request ended */
    int busy;      /* its request came whole and is being answered */
    gw_exchange_t *x; /* its request through the gateway, when one is */
    struct conn *next, *prev;
} conn_t;

struct gw {
    gw_config_t cfg;
    struct MHD_Daemon *mhd;
    CURLM *multi;
    gw_link_t *link;
    gw_table_t *table;
    gw_keys_t *keys;        /* the users' API keys (keys.h) */
    gw_ratelimit_t *limits; /* their requests a minute (ratelimit.h) */
    int sigfd;
    int ep;          /* epoll: the client side's, the link's, the signals' and libcurl's fds */
    int64_t curl_at; /* monotonic ms libcurl wants its timeout acted on; -1: not */
    struct kept {    /* by fd: libcurl's sockets */
        int64_t id;  /* the replica of a connection libcurl keeps, idle (0: none) */
        int port;
        uint32_t ev; /* the events it is watched for in the epoll (0: not there) */
        int conn;    /* a connection of libcurl's (not its resolver's socketpair) */
        int watched; /* libcurl asked for it to be watched (it got past its connect) */
        int64_t to_id; /* the replica it was opened to (0: none) */
        int to_port;
    } *kept;
    int nkept;
    int nidle;       /* of them, kept now */
    int port;
    char *tls_cert, *tls_key;
    gw_exchange_t *whead, *wtail; /* requests waiting for a replica, oldest first */
    conn_t *conns;
    gw_ledger_t *ledger; /* what was answered, counted (ledger.h) */
    gw_easypool_t *easies; /* easy handles for the tries, reused (easypool.h) */
    int64_t swept, reported;
    int64_t loaded;    /* monotonic ms the load was last told */
    int load_now;      /* tell the load at the next turn of the loop */
    int reaped;        /* the idle connections were looked at in this turn of the loop */
    int stop;
};

/* ---- libcurl's sockets in the loop's epoll -------------------------------------
 * libcurl says which of its sockets to watch for what (CURLMOPT_SOCKETFUNCTION)
 * and when to call it anyway (CURLMOPT_TIMERFUNCTION); the loop then drives only
 * the transfers whose socket is ready, not every transfer at every turn. */

/* The slot of libcurl's socket fd (NULL: out of memory). */
static struct kept *slot(gw_t *g, int fd)
{
    if (fd < 0)
        return NULL;
    if (fd >= g->nkept) {
        int n = fd + 64;
        struct kept *k = realloc(g->kept, (size_t)n * sizeof(*k));
        if (!k)
            return NULL;
        memset(k + g->nkept, 0, (size_t)(n - g->nkept) * sizeof(*k));
        g->kept = k, g->nkept = n;
    }
    return &g->kept[fd];
}

/* The idle connection fd is kept to replica r (r NULL: no longer idle). */
static void keep_idle(gw_t *g, int fd, const gw_replica_t *r)
{
    struct kept *k = fd < g->nkept || r ? slot(g, fd) : NULL;
    if (!k)
        return; /* (then only not watched) */
    g->nidle += (r != NULL) - (k->id != 0);
    k->id = r ? r->id : 0;
    k->port = r ? r->port : 0;
}

/* Watch fd for want (0: not at all), with an epoll call only when that changes. */
static int watch_for(gw_t *g, int fd, uint32_t want)
{
    struct kept *k = slot(g, fd);
    if (!k)
        return -1;
    if (k->ev == want)
        return 0;
    struct epoll_event ev = {.events = want, .data.fd = fd};
    int rc = epoll_ctl(g->ep, !want ? EPOLL_CTL_DEL : k->ev ? EPOLL_CTL_MOD : EPOLL_CTL_ADD,
                       fd, want ? &ev : NULL);
    if (rc < 0 && want && (errno == EEXIST || errno == ENOENT)) /* (a number reused) */
        rc = epoll_ctl(g->ep, errno == EEXIST ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, fd, &ev);
    k->ev = rc == 0 ? want : 0;
    return want && rc < 0 ? -1 : 0;
}

/* Every socket of libcurl's is watched for its peer's end too (EPOLLRDHUP), and
 * an idle one kept to its replica stays watched as it was, for that end
 * (gw_replica_suspect): a connection taken from idle to a transfer and back
 * costs no epoll call. */
static int on_curl_socket(CURL *e, curl_socket_t fd, int what, void *gp, void *known)
{
    (void)known;
    gw_t *g = gp;
    if (what == CURL_POLL_REMOVE) {
        gw_exchange_t *x = NULL;
        curl_easy_getinfo(e, CURLINFO_PRIVATE, (char **)&x);
        /* (a paused transfer lets go of its connection too, and libcurl's resolver of
         * its socketpair: neither is a connection kept idle) */
        if (x && x->rep && !x->paused && fd < g->nkept && g->kept[fd].conn &&
            watch_for(g, fd, EPOLLIN | EPOLLRDHUP) == 0)
            keep_idle(g, fd, x->rep);
        else {
            keep_idle(g, fd, NULL);
            watch_for(g, fd, 0); /* (fails harmlessly once closed) */
        }
        return 0;
    }
    keep_idle(g, fd, NULL);
    if (fd < g->nkept)
        g->kept[fd].watched = 1;
    if (watch_for(g, fd, EPOLLRDHUP | (what & CURL_POLL_IN ? EPOLLIN : 0u) |
                             (what & CURL_POLL_OUT ? EPOLLOUT : 0u)) < 0)
        /* (-1 to libcurl would end every transfer of the multi handle for good: this
         * one only stalls, until its time outs end it) */
        fprintf(stderr, "bramble-gateway: cannot watch a replica's connection: %s\n",
                strerror(errno));
    return 0;
}

/* libcurl opens a connection for exchange xp's try (CURLOPT_OPENSOCKETFUNCTION):
 * marked as one. A replica in doubt (on trial, or failing) gets one new connection
 * at a time: the tries routed to it before the doubt began (a burst of one turn,
 * each finding its kept connection dead) are held back but the first, and sent
 * elsewhere (try_ended), rather than each trying a dead port. */
static curl_socket_t on_curl_open(void *xp, curlsocktype purpose, struct curl_sockaddr *a)
{
    (void)purpose;
    gw_exchange_t *x = xp;
    gw_t *g = x->owner;
    /* (nor does one refused a moment ago: on_curl_close, for the tries routed to it
     * in the same turn) */
    if (x->rep && !gw_replica_may_open(x->rep, &x->opened, br_mono_ms())) {
        x->held_back = 1;
        return CURL_SOCKET_BAD;
    }
    x->held_back = 0; /* (a later address of the same try got it) */
    curl_socket_t fd = socket(a->family, a->socktype, a->protocol);
    struct kept *k = fd >= 0 ? slot(g, fd) : NULL;
    if (k) {
        k->conn = 1;
        k->watched = 0;
        k->to_id = x->rep ? x->rep->id : 0;
        k->to_port = x->rep ? x->rep->port : 0;
    }
    return fd;
}

/* Whether idle connection fd is no longer one to keep: its peer closed it, it broke,
 * or bytes came on it unasked (0 when nothing is there: an event that was its
 * transfer's, just ended). What waits on it is only looked at, not taken. */
static int peer_closed(int fd)
{
    char b;
    ssize_t k = recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    return k >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK);
}

/* Events on an idle connection kept to a replica (fd): when the replica closed it
 * (peer_closed: not an event of its transfer, just ended), the replica is put on
 * trial. libcurl finds the connection closed itself when it next takes it. */
static void idle_closed(gw_t *g, int fd)
{
    if (!peer_closed(fd))
        return;
    watch_for(g, fd, 0);
    gw_replica_t *r = gw_table_replica(g->table, g->kept[fd].id, g->kept[fd].port);
    keep_idle(g, fd, NULL);
    if (r)
        gw_replica_suspect(r);
}

/* libcurl closes a connection of its own: forgotten here (CURLOPT_CLOSESOCKETFUNCTION),
 * so that a later socket of that number starts afresh. */
static int on_curl_close(void *gp, curl_socket_t fd)
{
    gw_t *g = gp;
    /* a connection kept idle, let go by libcurl because its replica closed it (found
     * as libcurl takes one for a request, often before the loop saw the end): closed
     * by the replica as idle_closed has it, before the try that found it opens
     * another. (Not while the gateway is destroyed: its table is gone.) */
    if (fd >= 0 && fd < g->nkept && g->kept[fd].id && g->table)
        idle_closed(g, fd);
    /* a new connection closed before libcurl ever asked to watch it, never connected:
     * its connect failed at once (refused). The replica is out now, before the tries
     * routed to it in the same turn each open one (on_curl_open holds them back); the
     * try itself fails it as any other (try_ended). */
    struct sockaddr_storage peer;
    socklen_t pl = sizeof(peer);
    if (fd >= 0 && fd < g->nkept && g->kept[fd].conn && !g->kept[fd].watched &&
        g->kept[fd].to_id && g->table &&
        getpeername(fd, (struct sockaddr *)&peer, &pl) < 0 && errno == ENOTCONN) {
        gw_replica_t *r = gw_table_replica(g->table, g->kept[fd].to_id, g->kept[fd].to_port);
        if (r)
            gw_replica_refused(r, br_mono_ms());
    }
    keep_idle(g, fd, NULL);
    if (fd >= 0 && fd < g->nkept) /* (closing takes it out of the epoll) */
        g->kept[fd].ev = 0, g->kept[fd].conn = 0, g->kept[fd].to_id = 0;
    return close(fd);
}

/* The idle connections closed by their replicas since the loop last looked, taken
 * now: a replica that died is on trial before a request is routed to it. (The
 * other events stay for the loop: every fd is watched level-triggered.) */
static void reap_closed(gw_t *g)
{
    if (!g->nidle)
        return;
    struct epoll_event evs[64];
    int n = epoll_wait(g->ep, evs, 64, 0);
    for (int i = 0; i < n; i++) {
        int fd = evs[i].data.fd;
        if (fd >= 0 && fd < g->nkept && g->kept[fd].id)
            idle_closed(g, fd);
    }
}

static int on_curl_timer(CURLM *m, long ms, void *gp)
{
    (void)m;
    gw_t *g = gp;
    g->curl_at = ms < 0 ? -1 : br_mono_ms() + ms;
    return 0;
}

/* libcurl's timeout, when it is due (new transfers start through it). */
static void curl_due(gw_t *g)
{
    if (g->curl_at < 0 || br_mono_ms() < g->curl_at)
        return;
    g->curl_at = -1;
    int running = 0;
    curl_multi_socket_action(g->multi, CURL_SOCKET_TIMEOUT, 0, &running);
}

void gw_config_defaults(gw_config_t *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    snprintf(cfg->listen, sizeof(cfg->listen), "127.0.0.1:7780");
    cfg->max_body = 32u << 20;
    cfg->queue_max = 256;
    cfg->wait_ms = 300000;
    cfg->client_ms = 60000;
    cfg->upstream_ms = 600000;
    cfg->max_conns = 10000;
}

/* ---- answers of our own ---------------------------------------------------- */

/* Answer text (taken: malloc'd JSON; NULL when out of memory) at once. */
static enum MHD_Result answer_text(struct MHD_Connection *conn, int status, char *text)
{
    if (!text)
        return MHD_NO;
    struct MHD_Response *r =
        MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(text);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", "application/json");
    enum MHD_Result rc = MHD_queue_response(conn, (unsigned)status, r);
    MHD_destroy_response(r);
    return rc;
}

/* An error in the OpenAI shape, answered at once (no exchange). */
static enum MHD_Result answer_error(struct MHD_Connection *conn, int status,
                                    const char *type, const char *msg)
{
    return answer_text(conn, status, gw_error_text(status, type, msg));
}

/* Answer body (taken) at once, as JSON. */
static enum MHD_Result answer_json(struct MHD_Connection *conn, int status, json_t *body)
{
    char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
    json_decref(body);
    return answer_text(conn, status, text);
}

/* ---- /metrics ------------------------------------------------------------- */

/* x ended: count it (a request that never came whole is not counted). */
static void count_answer(gw_t *g, const gw_exchange_t *x)
{
    if (!x->began)
        return;
    double now = gw_exchange_now();
    gw_answer_t a = {.model = x->known ? x->model : "", .user_id = x->user_id,
                     .status = x->status ? x->status : 499, .seconds = now - x->began,
                     .ttft = x->first ? x->first - x->began : -1};
    if (x->status == 200)
        gw_exchange_usage(x, &a.prompt_tokens, &a.completion_tokens);
    gw_ledger_add(g->ledger, &a);
    if (x->svc_id)
        gw_table_answered(g->table, x->svc_id, a.status, a.seconds * 1000, br_mono_ms());
}

/* Replicas of s in flight, up (sent requests) and out (taken out after a failure). */
static void replica_counts(const gw_service_t *s, int64_t now, int *inflight, int *up,
                           int *out)
{
    *inflight = *up = *out = 0;
    for (size_t k = 0; k < s->nreplicas; k++) {
        const gw_replica_t *r = s->replicas[k];
        *inflight += r->inflight;
        if (r->present && now >= r->down_until)
            (*up)++;
        else if (r->present)
            (*out)++;
    }
}

static enum MHD_Result answer_metrics(gw_t *g, struct MHD_Connection *conn)
{
    br_metrics_t *m = br_metrics_new();
    if (!m)
        return MHD_NO;
    int64_t now = br_mono_ms();
    gw_ledger_metrics(g->ledger, m);
    static const struct {
        const char *name, *help;
    } gauges[] = {
        {"bramble_gateway_inflight", "Requests at a replica now, by service."},
        {"bramble_gateway_waiting", "Requests waiting for a replica, by service."},
        {"bramble_gateway_replicas", "Replicas in the routing table, by service and "
                                     "whether the gateway sends them requests."},
    };
    for (int f = 0; f < 3; f++) { /* each family's samples together */
        br_metrics_family(m, gauges[f].name, "gauge", gauges[f].help);
        for (size_t i = 0; i < g->table->nservices; i++) {
            gw_service_t *s = g->table->services[i];
            int inflight, up, out;
            replica_counts(s, now, &inflight, &up, &out);
            if (f < 2) {
                const char *labels[] = {"service", s->name, "model", s->model, NULL};
                br_metrics_sample(m, gauges[f].name, labels, f ? s->waiting : inflight);
                continue;
            }
            const char *ups[] = {"service", s->name, "state", "up", NULL};
            const char *outs[] = {"service", s->name, "state", "out", NULL};
            br_metrics_sample(m, gauges[f].name, ups, up);
            br_metrics_sample(m, gauges[f].name, outs, out);
        }
    }
    br_metrics_family(m, "bramble_gateway_table_version", "gauge",
                      "The routing table's version.");
    br_metrics_sample(m, "bramble_gateway_table_version", NULL, (double)g->table->version);
    br_metrics_family(m, "bramble_gateway_coordinator_up", "gauge",
                      "Whether the coordinator answers.");
    br_metrics_sample(m, "bramble_gateway_coordinator_up", NULL, gw_link_up(g->link, now));
    size_t len = 0;
    const char *text = br_metrics_text(m, &len);
    struct MHD_Response *r =
        text ? MHD_create_response_from_buffer(len, (void *)text, MHD_RESPMEM_MUST_COPY)
             : NULL;
    br_metrics_destroy(&m);
    if (!r)
        return MHD_NO;
    MHD_add_response_header(r, "Content-Type", "text/plain; version=0.0.4");
    enum MHD_Result rc = MHD_queue_response(conn, 200, r);
    MHD_destroy_response(r);
    return rc;
}

/* ---- routing ------------------------------------------------------------- */

/* Whether a key limited to models ([]: none) may be used for name at svc: name
 * itself is among them, or it is an alias of a model that is. */
static int key_allows(const json_t *models, const gw_service_t *svc, const char *name)
{
    if (!json_array_size(models))
        return 1;
    size_t i;
    json_t *m;
    json_array_foreach(models, i, m) {
        const char *v = json_string_value(m);
        if (strcmp(v, name) == 0 || (gw_service_alias(svc, name) && strcmp(v, svc->model) == 0))
            return 1;
    }
    return 0;
}

/* Whether a caller (key_state as in exchange.h, with the key's models) may use
 * name at svc: a public service anyone may; any other, a key of a user limited to
 * no models or to name. */
static int may_use(const gw_service_t *svc, int key_state, const json_t *models,
                   const char *name)
{
    return svc->is_public || (key_state > 0 && key_allows(models, svc, name));
}

/* The caller's key, from the Authorization header of conn: its state (exchange.h);
 * *k the key when known. */
static int caller_key(gw_t *g, struct MHD_Connection *conn, const gw_key_t **k)
{
    const char *bearer = gw_keys_bearer(
        MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION));
    *k = gw_keys_find(g->keys, bearer);
    return *k ? 1 : bearer ? -1 : 0;
}

static enum MHD_Result answer_models(gw_t *g, struct MHD_Connection *conn)
{
    const gw_key_t *key;
    int state = caller_key(g, conn, &key);
    json_t *data = json_array();
    for (size_t i = 0; i < g->table->nservices; i++) {
        gw_service_t *s = g->table->services[i];
        if (!s->present)
            continue;
        size_t k;
        json_t *name;
        json_array_foreach(s->names, k, name)
            if (may_use(s, state, key ? key->models : NULL, json_string_value(name)))
                json_array_append_new(data, json_pack("{s:O, s:s, s:i, s:s, s:s}", "id", name,
                                                  "object", "model", "created", 0,
                                                  "owned_by", s->owner, "root", s->model));
    }
    return answer_json(conn, 200, json_pack("{s:s, s:o}", "object", "list", "data", data));
}

/* The replica to send x to now, over every service that serves its model and the
 * caller may use; NULL when none is free. *first: the first such service (NULL:
 * there is none). */
static gw_replica_t *pick(gw_t *g, const gw_exchange_t *x, int64_t now, gw_service_t **first)
{
    if (!g->reaped) { /* (once a turn of the loop: the turn's requests routed in a
                       * burst need not each make the same look) */
        g->reaped = 1;
        reap_closed(g);
    }
    gw_replica_t *best = NULL;
    *first = NULL;
    for (size_t i = 0; i < g->table->nservices; i++) {
        gw_service_t *s = g->table->services[i];
        if (!s->present || !gw_service_serves(s, x->model) ||
            !may_use(s, x->key_state, x->key_models, x->model))
            continue;
        if (!*first)
            *first = s;
        gw_replica_t *r = gw_service_pick(s, now);
        if (r && (!best || r->inflight < best->inflight))
            best = r;
    }
    return best;
}

static void start(gw_t *g, gw_exchange_t *x, gw_replica_t *r)
{
    /* an alias goes as the model's own name (once: a retry sends the body as is) */
    if (gw_service_alias(r->svc, x->model) && strcmp(x->sent_as, r->svc->model) != 0 &&
        gw_exchange_rename(x, r->svc->model) < 0) {
        gw_exchange_fail(x, 500, "server_error", "the gateway is out of memory");
        gw_exchange_resume(x);
        return;
    }
    x->owner = g;
    if (gw_exchange_try(x, r, (long)g->cfg.upstream_ms, g->easies) < 0 ||
        curl_easy_setopt(x->easy, CURLOPT_CLOSESOCKETFUNCTION, on_curl_close) != CURLE_OK ||
        curl_easy_setopt(x->easy, CURLOPT_CLOSESOCKETDATA, g) != CURLE_OK ||
        curl_easy_setopt(x->easy, CURLOPT_OPENSOCKETFUNCTION, on_curl_open) != CURLE_OK ||
        curl_easy_setopt(x->easy, CURLOPT_OPENSOCKETDATA, x) != CURLE_OK ||
        curl_multi_add_handle(g->multi, x->easy) != CURLM_OK) {
        gw_exchange_end_try(x);
        gw_exchange_fail(x, 500, "server_error", "the gateway is out of memory");
        gw_exchange_resume(x);
        return;
    }
    r->inflight++;
    x->svc_id = r->svc->id;
    gw_exchange_suspend(x);
}

static void unqueue(gw_t *g, gw_exchange_t *x)
{
    if (!x->wait_svc)
        return;
    if (x->wprev)
        x->wprev->wnext = x->wnext;
    else
        g->whead = x->wnext;
    if (x->wnext)
        x->wnext->wprev = x->wprev;
    else
        g->wtail = x->wprev;
    x->wnext = x->wprev = NULL;
    x->wait_svc->waiting--;
    x->wait_svc = NULL;
}

static void report_load(gw_t *g, int64_t now);

/* Send x on, queue it, or answer why not. */
static void route(gw_t *g, gw_exchange_t *x)
{
    int64_t now = br_mono_ms();
    gw_service_t *svc;
    gw_replica_t *r = pick(g, x, now, &svc);
    if (r) {
        start(g, x, r);
        return;
    }
    if (!svc) {
        gw_exchange_fail(x, 404, "invalid_request_error",
                         "The model '%s' does not exist or you do not have access to it "
                         "(GET /v1/models lists the models you may use)",
                         x->model);
        return;
    }
    if (svc->waiting >= g->cfg.queue_max) {
        gw_exchange_fail(x, 429, "rate_limit_error",
                         "model '%s' is busy: %d requests wait for it already; try again",
                         x->model, svc->waiting);
        return;
    }
    x->state = GW_X_WAITING;
    x->wait_svc = svc;
    x->svc_id = svc->id; /* (its answer, maybe a 503, is the service's) */
    int none = !gw_service_has_present(svc); /* one may be starting for it */
    if (svc->waiting++ == 0 && none)
        g->load_now = 1; /* the coordinator starts one when it hears */
    if (!x->wait_until) {
        x->wait_ms = svc->cold_start_ms && none ? svc->cold_start_ms : g->cfg.wait_ms;
        x->wait_until = now + x->wait_ms;
    }
    x->wprev = g->wtail;
    if (g->wtail)
        g->wtail->wnext = x;
    else
        g->whead = x;
    g->wtail = x;
    gw_exchange_suspend(x);
    if (g->load_now)
        report_load(g, now); /* (or at the next sweep, within 0.1 s) */
}

/* Requests that waited: those that can go now, in order; those that waited out. */
static void dispatch(gw_t *g)
{
    int64_t now = br_mono_ms();
    for (gw_exchange_t *x = g->whead, *next; x; x = next) {
        next = x->wnext;
        gw_service_t *svc;
        gw_replica_t *r = pick(g, x, now, &svc);
        if (r) {
            unqueue(g, x);
            start(g, x, r);
        } else if (!svc || now >= x->wait_until) {
            unqueue(g, x);
            if (!svc)
                gw_exchange_fail(x, 404, "invalid_request_error",
                                 "The model '%s' is served no more", x->model);
            else
                gw_exchange_fail(x, 503, "service_unavailable",
                                 "no replica of model '%s' answered within %llds",
                                 x->model, (long long)(x->wait_ms / 1000));
            gw_exchange_resume(x);
        }
    }
}

/* ---- the replicas' answers --------------------------------------------------- */

/* A failure to reach a replica that another replica may not share: nothing of the
 * request was answered, so it may go elsewhere. */
static int retryable(CURLcode rc)
{
    return rc == CURLE_COULDNT_CONNECT || rc == CURLE_SEND_ERROR ||
           rc == CURLE_RECV_ERROR || rc == CURLE_GOT_NOTHING;
}

/* Replica r failed x (why) and is taken out: said in the log, and told to the
 * coordinator (at most every GW_SUSPECT_MS a replica), whose agent checks it. */
static void taken_out(gw_t *g, const gw_exchange_t *x, gw_replica_t *r, const char *why)
{
    /* (when its try began: one begun before a death is not one sent after it) */
    time_t sec = (time_t)(x->tried_ms / 1000);
    struct tm tm;
    gmtime_r(&sec, &tm);
    fprintf(stderr, "bramble-gateway: replica %s (%s:%d) failed: %s; taken out (the try "
                    "began %02d:%02d:%02d.%03d UTC)\n", x->who, r->host, r->port, why,
            tm.tm_hour, tm.tm_min, tm.tm_sec, (int)(x->tried_ms % 1000));
    int64_t now = br_mono_ms();
    if (!r->suspected || now - r->suspected >= GW_SUSPECT_MS) {
        r->suspected = now;
        gw_link_suspect(g->link, r->id, r->port, why);
    }
}

static void try_ended(gw_t *g, gw_exchange_t *x, CURLcode rc)
{
    int64_t now = br_mono_ms();
    gw_replica_opened_done(x->rep, &x->opened); /* (another try may open one) */
    gw_replica_t *r = x->rep;
    x->rep = NULL;
    if (x->held_back && x->state == GW_X_UPSTREAM) {
        /* held back from a replica in doubt by the gateway itself: nothing reached it,
         * and it is not this request's try; it goes to another replica (or waits) */
        gw_replica_release(r);
        x->held_back = 0;
        x->tries--;
        gw_exchange_end_try(x);
        route(g, x);
        if (x->state == GW_X_ANSWER)
            gw_exchange_resume(x);
        return;
    }
    int before_answer = x->state == GW_X_UPSTREAM;
    int answered = x->retry_wanted; /* (its 502 or 503) */
    long sent = 0;
    if (x->easy)
        curl_easy_getinfo(x->easy, CURLINFO_REQUEST_SIZE, &sent);
    /* (a connect that timed out, to a node gone silent, sent nothing: as refused) */
    int unsent = rc == CURLE_OPERATION_TIMEDOUT && sent == 0;
    if (before_answer && (answered || retryable(rc) || unsent)) {
        char why[300];
        if (answered)
            snprintf(why, sizeof(why), "it answered %d", answered);
        else
            snprintf(why, sizeof(why), "%s", x->cerr[0] ? x->cerr : curl_easy_strerror(rc));
        gw_replica_done(r, 0, now); /* out at once; the table may bring it back */
        taken_out(g, x, r, why);
        gw_exchange_end_try(x);
        if (x->tries < 3) {
            route(g, x); /* another replica, or the queue */
            if (x->state == GW_X_ANSWER)
                gw_exchange_resume(x);
            return;
        }
        gw_exchange_fail(x, 502, "upstream_error",
                         "model '%s': %d replicas failed to answer; the last: %s", x->model,
                         x->tries, why);
        gw_exchange_resume(x);
        return;
    }
    if (before_answer) { /* garbage, or silence: this replica is at fault */
        gw_replica_done(r, 0, now);
        taken_out(g, x, r, x->cerr[0] ? x->cerr : curl_easy_strerror(rc));
        gw_exchange_end_try(x);
        if (rc == CURLE_OPERATION_TIMEDOUT)
            gw_exchange_fail(x, 504, "upstream_error", "replica %s sent nothing for %llds",
                             x->who, (long long)(g->cfg.upstream_ms / 1000));
        else
            gw_exchange_fail(x, 502, "upstream_error", "replica %s answered badly: %s",
                             x->who, x->cerr[0] ? x->cerr : curl_easy_strerror(rc));
        gw_exchange_resume(x);
        return;
    }
    gw_replica_done(r, rc == CURLE_OK, now); /* the answer ended, whole or cut off */
    x->upstream_done = 1;
    x->rc = rc;
    x->paused = 0;
    gw_exchange_resume(x);
}

static void finished(gw_t *g)
{
    CURLMsg *msg;
    int left, any = 0;
    while ((msg = curl_multi_info_read(g->multi, &left))) {
        if (msg->msg != CURLMSG_DONE)
            continue;
        gw_exchange_t *x = NULL;
        CURL *e = msg->easy_handle;
        CURLcode rc = msg->data.result;
        curl_easy_getinfo(e, CURLINFO_PRIVATE, (char **)&x);
        curl_multi_remove_handle(g->multi, e);
        if (x)
            try_ended(g, x, rc);
        any = 1;
    }
    if (any)
        dispatch(g); /* (what left the table goes at the next sweep, not per request) */
}

/* x's try, or its place in a queue, is given up (not the replica's fault, nor a
 * sign it is well: a trial goes on). */
static void give_up(gw_t *g, gw_exchange_t *x)
{
    unqueue(g, x);
    if (x->easy) {
        curl_multi_remove_handle(g->multi, x->easy);
        gw_replica_opened_done(x->rep, &x->opened);
        if (x->rep)
            gw_replica_release(x->rep);
        x->rep = NULL;
        gw_exchange_end_try(x);
    }
}

/* The client of x hung up (or x must end): its try is called off. */
static void call_off(gw_t *g, gw_exchange_t *x)
{
    x->client_gone = 1;
    give_up(g, x);
}

/* ---- the HTTP side ------------------------------------------------------- */

static conn_t *conn_of(struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *i =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return i ? i->socket_context : NULL;
}

static void on_connection(void *arg, struct MHD_Connection *c, void **ctx,
                          enum MHD_ConnectionNotificationCode what)
{
    gw_t *g = arg;
    conn_t *k = *ctx;
    if (what == MHD_CONNECTION_NOTIFY_STARTED) {
        if (!(k = calloc(1, sizeof(*k))))
            return;
        k->mhd = c;
        k->since = br_mono_ms();
        k->next = g->conns;
        if (g->conns)
            g->conns->prev = k;
        g->conns = k;
        *ctx = k;
    } else if (k) {
        if (k->prev)
            k->prev->next = k->next;
        else
            g->conns = k->next;
        if (k->next)
            k->next->prev = k->prev;
        free(k);
        *ctx = NULL;
    }
}

static void on_completed(void *arg, struct MHD_Connection *c, void **req,
                         enum MHD_RequestTerminationCode why)
{
    gw_t *g = arg;
    gw_exchange_t *x = *req;
    conn_t *k = conn_of(c);
    if (k) {
        k->busy = 0;
        k->since = br_mono_ms();
        if (k->x == x)
            k->x = NULL;
    }
    if (!x)
        return;
    call_off(g, x);
    count_answer(g, x);
    gw_exchange_free(x);
    *req = NULL;
}

/* Whose request x is, and whether they may send it: 0, or -1 with x answered (401
 * without a key the gateway knows, 403 with one that may not be used for the
 * model, 429 past its user's requests a minute). A model nobody serves is
 * route's to answer (404). */
static int authorize(gw_t *g, gw_exchange_t *x)
{
    const gw_key_t *k;
    x->key_state = caller_key(g, x->conn, &k);
    if (k) {
        x->user_id = k->user_id;
        x->key_models = json_incref(k->models);
    }
    int serves = 0, usable = 0;
    x->known = 0;
    for (size_t i = 0; i < g->table->nservices && !usable; i++) {
        gw_service_t *s = g->table->services[i];
        if (!s->present || !gw_service_serves(s, x->model))
            continue;
        serves = x->known = 1;
        usable = may_use(s, x->key_state, x->key_models, x->model);
    }
    if (serves && !usable) {
        if (x->key_state == 0)
            gw_exchange_fail(x, 401, "invalid_request_error",
                             "model '%s' needs an API key: send 'Authorization: Bearer KEY' "
                             "('bramble key create' makes one)", x->model);
        else if (x->key_state < 0)
            gw_exchange_fail(x, 401, "invalid_request_error",
                             "the API key is not valid: it was revoked, or never made "
                             "('bramble key list' shows yours)");
        else
            gw_exchange_fail(x, 403, "permission_error",
                             "your API key may not be used for model '%s' (it was made "
                             "for other models: 'bramble key list' shows them)", x->model);
        return -1;
    }
    int wait_s;
    if (k && k->rpm > 0 && !gw_ratelimit_take(g->limits, k->user_id, k->rpm, br_mono_ms(),
                                              &wait_s)) {
        gw_exchange_fail(x, 429, "rate_limit_error",
                         "user %s may send %d requests a minute; try again in %ds", k->user,
                         k->rpm, wait_s);
        x->retry_after = wait_s;
        return -1;
    }
    return 0;
}

/* The request is whole: read its model, and send it on. */
static void begin(gw_t *g, gw_exchange_t *x)
{
    x->began = gw_exchange_now();
    if (x->too_big) {
        gw_exchange_fail(x, 413, "invalid_request_error",
                         "the request body is larger than %zu bytes", g->cfg.max_body);
        return;
    }
    json_error_t jerr;
    json_t *body = json_loadb(x->body ? x->body : "", x->body_len, 0, &jerr);
    json_t *model = json_object_get(body, "model");
    if (!json_is_object(body))
        gw_exchange_fail(x, 400, "invalid_request_error",
                         "the request body is not a JSON object: %s", jerr.text);
    else if (!json_is_string(model) || !json_string_length(model))
        gw_exchange_fail(x, 400, "invalid_request_error",
                         "the request names no model (a string field \"model\")");
    else if (json_string_length(model) >= sizeof(x->model))
        gw_exchange_fail(x, 404, "invalid_request_error", "no model has so long a name");
    if (x->state == GW_X_ANSWER) {
        json_decref(body);
        return;
    }
    snprintf(x->model, sizeof(x->model), "%s", json_string_value(model));
    json_decref(body);
    if (authorize(g, x) == 0)
        route(g, x);
}

static enum MHD_Result on_request(void *arg, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version,
                                  const char *upload, size_t *upload_size, void **req)
{
    gw_t *g = arg;
    gw_exchange_t *x = *req;
    if (!x) {
        if (strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0) {
            if (strcmp(url, "/health") == 0)
                return answer_json(conn, 200, json_pack("{s:s}", "status", "ok"));
            if (strcmp(url, "/v1/models") == 0)
                return answer_models(g, conn);
            if (strcmp(url, "/metrics") == 0)
                return answer_metrics(g, conn);
            return answer_error(conn, 404, "invalid_request_error",
                                "no such path (the gateway serves POST /v1/... with a JSON "
                                "\"model\", and GET /v1/models)");
        }
        if (strcmp(method, "POST") != 0)
            return answer_error(conn, 405, "invalid_request_error",
                                "the gateway takes POST /v1/... and GET /v1/models");
        if (strncmp(url, "/v1/", 4) != 0 || strlen(url) >= GW_PATH_MAX)
            return answer_error(conn, 404, "invalid_request_error",
                                "no such path (the gateway serves POST /v1/...)");
        const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                                     MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl && strtoull(cl, NULL, 10) > g->cfg.max_body) {
            char msg[128];
            snprintf(msg, sizeof(msg), "the request body is larger than %zu bytes",
                     g->cfg.max_body);
            return answer_error(conn, 413, "invalid_request_error", msg);
        }
        if (!(x = gw_exchange_new(conn, url, g->cfg.max_body)))
            return MHD_NO;
        *req = x;
        conn_t *k = conn_of(conn);
        if (k)
            k->x = x;
        return MHD_YES;
    }
    if (x->client_gone)
        return MHD_NO;
    if (x->state == GW_X_RECEIVING) {
        if (*upload_size) {
            gw_exchange_take(x, upload, *upload_size);
            *upload_size = 0;
            return MHD_YES;
        }
        conn_t *k = conn_of(conn);
        if (k)
            k->busy = 1; /* whole: the client's part is done */
        begin(g, x);
    }
    if (x->state == GW_X_ANSWER) {
        return gw_exchange_respond(x, x->retry_after ? x->retry_after
                                      : x->status == 429 ? 1
                                      : x->status == 503 ? 5
                                                         : 0);
    }
    if (x->state != GW_X_RESPONDING)
        gw_exchange_suspend(x); /* (resumed for nothing: wait on) */
    return MHD_YES;
}

/* ---- the loop ------------------------------------------------------------- */

/* Clients too slow to send their request; clients that hung up while their
 * request waited (libmicrohttpd does not watch a suspended connection); requests
 * that waited out. */
static void sweep(gw_t *g, int64_t now)
{
    for (conn_t *k = g->conns; k; k = k->next) {
        const union MHD_ConnectionInfo *i =
            MHD_get_connection_info(k->mhd, MHD_CONNECTION_INFO_CONNECTION_FD);
        if (!i)
            continue;
        if (!k->busy && now - k->since >= g->cfg.client_ms) {
            shutdown(i->connect_fd, SHUT_RDWR); /* (libmicrohttpd then closes it) */
            k->since = now;
            continue;
        }
        gw_exchange_t *x = k->x;
        if (!x || !x->suspended || x->client_gone)
            continue;
        struct pollfd p = {i->connect_fd, POLLRDHUP, 0};
        if (poll(&p, 1, 0) == 1 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR))) {
            call_off(g, x); /* its replica's request ends with it */
            gw_exchange_resume(x); /* libmicrohttpd then closes the connection */
        }
    }
    gw_table_sweep(g->table);
    dispatch(g);
}

static void on_table(void *arg, int64_t version, json_t *table)
{
    gw_t *g = arg;
    json_t *keys = json_object_get(table, "keys"); /* (absent: they did not change) */
    if ((keys && gw_keys_update(g->keys, keys) < 0) ||
        gw_table_update(g->table, version, table) < 0) {
        fprintf(stderr, "bramble-gateway: routing table version %lld is malformed; "
                        "kept the one before\n", (long long)version);
        return;
    }
    dispatch(g); /* a replica came: the requests that wait for one go */
}

static void on_reported(void *arg, const char *id)
{
    gw_t *g = arg;
    gw_ledger_reported(g->ledger, id);
}

/* What the gateway carries, to the coordinator every LOAD_MS, and at once when a
 * request waits for a service at 0 replicas (autoscale starts one). */
static void report_load(gw_t *g, int64_t now)
{
    if (now - g->loaded < (g->load_now ? LOAD_SOON_MS : LOAD_MS) || !gw_link_up(g->link, now))
        return;
    g->loaded = now;
    g->load_now = 0;
    gw_link_load(g->link, gw_table_load(g->table, now), g->table->version);
}

/* What was counted since the last report (or the report not yet taken) to the
 * coordinator, while it answers. */
static void report(gw_t *g, int64_t now)
{
    if (now - g->reported < REPORT_MS || !gw_link_up(g->link, now))
        return;
    g->reported = now;
    const json_t *r = gw_ledger_report(g->ledger);
    if (r)
        gw_link_report(g->link, r);
}

static int open_signals(gw_t *g)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigprocmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);
    g->sigfd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
    return g->sigfd < 0 ? -1 : 0;
}

/* ADDR:PORT ([V6]:PORT) into a socket address. */
static int parse_listen(const char *listen, struct sockaddr_storage *ss, int *v6,
                        br_err_t *err)
{
    char host[256];
    const char *colon = strrchr(listen, ':');
    if (!colon || colon == listen || !colon[1] || (size_t)(colon - listen) >= sizeof(host))
        return br_errf(err, EINVAL, "--listen %s: expected ADDR:PORT", listen);
    snprintf(host, sizeof(host), "%.*s", (int)(colon - listen), listen);
    if (host[0] == '[' && host[strlen(host) - 1] == ']') {
        memmove(host, host + 1, strlen(host));
        host[strlen(host) - 1] = '\0';
    }
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV}, *ai = NULL;
    int rc = getaddrinfo(host, colon + 1, &hints, &ai);
    if (rc != 0)
        return br_errf(err, EINVAL, "--listen %s: %s", listen, gai_strerror(rc));
    memcpy(ss, ai->ai_addr, ai->ai_addrlen);
    *v6 = ai->ai_family == AF_INET6;
    freeaddrinfo(ai);
    return 0;
}

static void log_mhd(void *arg, const char *fmt, va_list ap)
{
    fprintf(stderr, "bramble-gateway: http: ");
    vfprintf(stderr, fmt, ap);
}

/* Room for every connection allowed: the soft limit of open files raised. */
static void raise_nofile(gw_t *g)
{
    struct rlimit rl;
    br_raise_nofile();
    if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
        return;
    if (rl.rlim_cur != RLIM_INFINITY && (rlim_t)g->cfg.max_conns + 128 > rl.rlim_cur)
        g->cfg.max_conns = rl.rlim_cur > 256 ? (int)(rl.rlim_cur - 128) : 128;
}

gw_t *gw_new(const gw_config_t *cfg, br_err_t *err)
{
    gw_t *g = calloc(1, sizeof(*g));
    if (!g)
        return br_errp(err, ENOMEM, "out of memory");
    g->cfg = *cfg;
    g->sigfd = -1;
    g->curl_at = -1;
    if ((g->ep = epoll_create1(EPOLL_CLOEXEC)) < 0) {
        br_errf(err, errno, "epoll: %s", strerror(errno));
        goto fail;
    }
    struct sockaddr_storage ss;
    int v6 = 0;
    if (parse_listen(cfg->listen, &ss, &v6, err) < 0)
        goto fail;
    if ((cfg->tls_cert != NULL) != (cfg->tls_key != NULL)) {
        br_errf(err, EINVAL, "--tls-cert and --tls-key go together");
        goto fail;
    }
    if (cfg->tls_cert &&
        (!(g->tls_cert = br_read_file(cfg->tls_cert, 1 << 20, NULL, err)) ||
         !(g->tls_key = br_read_file(cfg->tls_key, 1 << 20, NULL, err))))
        goto fail;
    if (open_signals(g) < 0) {
        br_errf(err, errno, "signalfd: %s", strerror(errno));
        goto fail;
    }
    raise_nofile(g);
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK || !(g->multi = curl_multi_init())) {
        br_errf(err, ENOMEM, "libcurl could not start");
        goto fail;
    }
    curl_multi_setopt(g->multi, CURLMOPT_MAXCONNECTS, 1024L); /* kept for reuse */
    curl_multi_setopt(g->multi, CURLMOPT_SOCKETFUNCTION, on_curl_socket);
    curl_multi_setopt(g->multi, CURLMOPT_SOCKETDATA, g);
    curl_multi_setopt(g->multi, CURLMOPT_TIMERFUNCTION, on_curl_timer);
    curl_multi_setopt(g->multi, CURLMOPT_TIMERDATA, g);
    if (!(g->ledger = gw_ledger_new()) || !(g->table = gw_table_new()) ||
        !(g->easies = gw_easypool_new(256)) ||
        !(g->keys = gw_keys_new()) || !(g->limits = gw_ratelimit_new()) ||
        !(g->link = gw_link_new(&cfg->cred, on_table, on_reported, g, err)))
        goto fail;
    unsigned flags = MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG |
                     (v6 ? MHD_USE_IPv6 : 0) | (g->tls_cert ? MHD_USE_TLS : 0);
    unsigned timeout_s = (unsigned)(cfg->client_ms / 1000 ? cfg->client_ms / 1000 : 1);
    struct MHD_OptionItem tls[] = {
        {g->tls_cert ? MHD_OPTION_HTTPS_MEM_CERT : MHD_OPTION_END, 0, g->tls_cert},
        {MHD_OPTION_HTTPS_MEM_KEY, 0, g->tls_key},
        {MHD_OPTION_END, 0, NULL}};
    g->mhd = MHD_start_daemon(
        flags, 0, NULL, NULL, on_request, g, MHD_OPTION_EXTERNAL_LOGGER, log_mhd, NULL,
        MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, g, MHD_OPTION_NOTIFY_CONNECTION,
        on_connection, g, MHD_OPTION_CONNECTION_LIMIT, (unsigned)g->cfg.max_conns,
        MHD_OPTION_CONNECTION_TIMEOUT, timeout_s, MHD_OPTION_CONNECTION_MEMORY_LIMIT,
        (size_t)16384, MHD_OPTION_LISTENING_ADDRESS_REUSE,
        1u, MHD_OPTION_ARRAY, tls, MHD_OPTION_END);
    if (!g->mhd) {
        br_errf(err, EADDRINUSE, "could not listen on %s (in use, or not an address of "
                                 "this machine%s)",
                cfg->listen, g->tls_cert ? ", or the TLS certificate or key is bad" : "");
        goto fail;
    }
    const union MHD_DaemonInfo *pi = MHD_get_daemon_info(g->mhd, MHD_DAEMON_INFO_BIND_PORT);
    g->port = pi ? pi->port : 0;
    return g;
fail:
    gw_destroy(&g);
    return NULL;
}

static void let_go(gw_t *g);

void gw_destroy(gw_t **gp)
{
    gw_t *g = gp ? *gp : NULL;
    if (!g)
        return;
    if (g->mhd) {
        let_go(g);
        MHD_stop_daemon(g->mhd); /* (its requests end: their tries are called off) */
    }
    gw_link_destroy(&g->link);
    gw_table_destroy(&g->table);
    gw_keys_destroy(&g->keys);
    gw_ratelimit_destroy(&g->limits);
    gw_ledger_destroy(&g->ledger);
    gw_easypool_destroy(&g->easies); /* (after the daemon: its requests gave theirs back) */
    if (g->multi) {
        curl_multi_cleanup(g->multi);
        curl_global_cleanup();
    }
    if (g->sigfd >= 0)
        close(g->sigfd);
    if (g->ep >= 0)
        close(g->ep);
    free(g->kept);
    free(g->tls_cert);
    free(g->tls_key);
    free(g);
    *gp = NULL;
}

int gw_port(const gw_t *g)
{
    return g->port;
}

/* Watch fd for input in the loop's epoll. */
static int watch(gw_t *g, int fd)
{
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = fd};
    return epoll_ctl(g->ep, EPOLL_CTL_ADD, fd, &ev);
}

/* Stopping: a request still waiting for its answer gets one (503: send it again,
 * to another gateway or once this one is back), an answer still coming is cut off;
 * libmicrohttpd must find no connection suspended when it stops (it aborts). */
static void let_go(gw_t *g)
{
    int left = 0;
    g->reaped = 0; /* (a turn of its own) */
    for (conn_t *k = g->conns; k; k = k->next) {
        gw_exchange_t *x = k->x;
        if (!x || !x->suspended)
            continue;
        if (x->state == GW_X_RESPONDING) {
            call_off(g, x);
        } else if (x->state != GW_X_ANSWER) {
            give_up(g, x);
            gw_exchange_fail(x, 503, "service_unavailable",
                             "the gateway is stopping: send the request again");
        }
        gw_exchange_resume(x);
        left++;
    }
    for (int pass = 0; left && pass < 8; pass++) { /* (each resumed one is answered) */
        MHD_run(g->mhd);
        left = 0;
        for (conn_t *k = g->conns; k; k = k->next)
            left += k->x && k->x->suspended;
    }
}

int gw_run(gw_t *g, br_err_t *err)
{
    const union MHD_DaemonInfo *ei = MHD_get_daemon_info(g->mhd, MHD_DAEMON_INFO_EPOLL_FD);
    if (!ei)
        return br_errf(err, EINVAL, "libmicrohttpd gives no epoll fd");
    if (watch(g, ei->epoll_fd) < 0 || watch(g, gw_link_fd(g->link)) < 0 ||
        watch(g, g->sigfd) < 0)
        return br_errf(err, errno, "epoll: %s", strerror(errno));
    struct epoll_event evs[64];
    int link_fd = gw_link_fd(g->link), link_ready = 1;
    while (!g->stop) {
        g->reaped = 0;
        int64_t now = br_mono_ms();
        int wait = gw_link_run(g->link, now, link_ready);
        link_ready = 0;
        MHD_UNSIGNED_LONG_LONG mt;
        if (MHD_get_timeout(g->mhd, &mt) == MHD_YES && mt < (MHD_UNSIGNED_LONG_LONG)wait)
            wait = (int)mt;
        if (g->curl_at >= 0 && g->curl_at - now < wait)
            wait = g->curl_at > now ? (int)(g->curl_at - now) : 0;
        if (wait > SWEEP_MS)
            wait = SWEEP_MS;
        int n = epoll_wait(g->ep, evs, 64, wait);
        if (n < 0 && errno != EINTR)
            return br_errf(err, errno, "epoll_wait: %s", strerror(errno));
        for (int i = 0; i < n; i++) {
            int fd = evs[i].data.fd;
            if (fd == g->sigfd) {
                struct signalfd_siginfo si;
                if (read(g->sigfd, &si, sizeof(si)) == sizeof(si))
                    fprintf(stderr, "bramble-gateway: signal %d, stopping\n",
                            (int)si.ssi_signo);
                g->stop = 1;
            } else if (fd == link_fd) {
                link_ready = 1;
            } else if (fd < g->nkept && g->kept[fd].id) {
                idle_closed(g, fd);
            } else if (fd != ei->epoll_fd) {
                uint32_t e = evs[i].events;
                int running = 0;
                curl_multi_socket_action(g->multi, fd,
                                         (e & (EPOLLIN | EPOLLRDHUP) ? CURL_CSELECT_IN : 0) |
                                             (e & EPOLLOUT ? CURL_CSELECT_OUT : 0) |
                                             (e & (EPOLLERR | EPOLLHUP) ? CURL_CSELECT_ERR : 0),
                                         &running);
            } /* (the client side runs below at every turn; the link at the top) */
        }
        curl_due(g);
        finished(g);
        /* the client side, again while connections were resumed (libmicrohttpd
         * takes a resumed one in its next run, and a replica's answer that came
         * whole resumes one at once), and the replicas' side after it */
        for (int pass = 0; pass < 8; pass++) {
            uint64_t resumed = gw_exchange_resumed();
            MHD_run(g->mhd);
            curl_due(g); /* (the transfers the client side started) */
            finished(g);
            if (gw_exchange_resumed() == resumed)
                break; /* (what libmicrohttpd left to do shows in its timeout) */
        }
        now = br_mono_ms();
        if (now - g->swept >= SWEEP_MS) {
            g->swept = now;
            sweep(g, now);
            report(g, now);
            report_load(g, now);
        }
    }
    return 0;
}
