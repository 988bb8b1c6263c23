/* client.c - a request/response client over one CURVE DEALER. A monitor on the
 * socket follows each connection's life, so that a request that got no answer can
 * say why: a refused key; a coordinator that went away (a connection lost, or
 * connections refused where one was made before); a server that hangs up in each
 * handshake while it keeps taking connections (a wrong server key: it cannot read
 * our hello); a connection whose handshake hangs (a stopped coordinator); or
 * nothing that answers at all. */
#include "client.h"

#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <zmq.h>

#include "sock.h"
#include "util.h"

struct br_client {
    void *ctx;
    void *sock;
    void *monitor;
    uint32_t seq;
    int connected;   /* a TCP connection was made at least once */
    int handshaked;  /* a CURVE handshake completed at least once */
    int auth_failed; /* the server refused our key */
    /* the latest connection: up now; its handshake completed. hs_dropped: one was
     * dropped in its handshake since the last that completed. refused: the latest
     * try made no connection */
    int up, ready, hs_dropped, refused;
    unsigned lost;   /* connections lost after their handshake completed */
    int news;        /* an "event.news" came (event.watch) and was not waited for */
    /* requests sent and not yet received (br_client_send), and the answers to them
     * that came while another was waited for */
    uint32_t pending[BR_CLIENT_PENDING];
    unsigned pending_lost[BR_CLIENT_PENDING]; /* lost when each was sent */
    size_t npending;
    br_msg_t *kept[BR_CLIENT_PENDING];
    size_t nkept;
    char endpoint[BR_ENDPOINT_MAX];
};

static int is_pending(const br_client_t *c, uint32_t seq)
{
    for (size_t i = 0; i < c->npending; i++)
        if (c->pending[i] == seq)
            return 1;
    return 0;
}

/* seq is no longer waited for: its answer, if one comes later, is dropped. */
static void forget_seq(br_client_t *c, uint32_t seq)
{
    for (size_t i = 0; i < c->npending; i++)
        if (c->pending[i] == seq) {
            c->npending--;
            c->pending[i] = c->pending[c->npending];
            c->pending_lost[i] = c->pending_lost[c->npending];
            return;
        }
}

/* The kept answer to seq (taken out), or NULL. */
static br_msg_t *take_kept(br_client_t *c, uint32_t seq)
{
    for (size_t i = 0; i < c->nkept; i++)
        if (br_msg_seq(c->kept[i]) == seq) {
            br_msg_t *m = c->kept[i];
            memmove(&c->kept[i], &c->kept[i + 1], (c->nkept - i - 1) * sizeof(c->kept[0]));
            c->nkept--;
            return m;
        }
    return NULL;
}

/* A message that is not the answer waited for: the answer to another request still
 * pending is kept for its own br_client_recv, news for a watch is remembered,
 * anything else dropped. */
static void unasked(br_client_t *c, br_msg_t *m)
{
    if (br_msg_kind(m) == BR_MSG_RESPONSE && is_pending(c, br_msg_seq(m)) &&
        c->nkept < BR_CLIENT_PENDING) {
        c->kept[c->nkept++] = m;
        return;
    }
    if (br_msg_kind(m) == BR_MSG_EVENT && strcmp(br_msg_type(m), "event.news") == 0)
        c->news = 1;
    br_msg_destroy(&m);
}

int br_client_check_host(const char *endpoint, br_err_t *err)
{
    char host[BR_ENDPOINT_MAX];
    if (strncmp(endpoint, "tcp://", 6) != 0)
        return 0;
    br_strlcpy(host, endpoint + 6, sizeof(host));
    char *colon = strrchr(host, ':');
    if (!colon)
        return 0;
    *colon = '\0';
    char *h = host;
    if (*h == '[') { /* [v6 address] */
        h++;
        char *close = strchr(h, ']');
        if (close)
            *close = '\0';
    }
    char *semi = strchr(h, ';'); /* "source;dest" form: check the destination */
    if (semi)
        h = semi + 1;
    if (!*h || strcmp(h, "*") == 0)
        return 0;
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res = NULL;
    int rc = getaddrinfo(h, NULL, &hints, &res);
    if (res)
        freeaddrinfo(res);
    if (rc == 0)
        return 0;
    /* EAI_AGAIN too: libzmq would only retry in silence until the timeout */
    if (rc == EAI_NONAME || rc == EAI_NODATA || rc == EAI_FAIL || rc == EAI_AGAIN)
        return br_errf(err, EHOSTUNREACH, "cannot resolve %s (the host of %s): %s", h,
                       endpoint, gai_strerror(rc));
    return 0; /* anything else: let libzmq try */
}

/* What the monitor watches: a connection made, its handshake done or failed, a
 * connection lost, or a try that made no connection (libzmq closes its socket:
 * CLOSED, with no CONNECTED before). */
#define WATCHED                                                              \
    (ZMQ_EVENT_CONNECTED | ZMQ_EVENT_HANDSHAKE_SUCCEEDED |                   \
     ZMQ_EVENT_HANDSHAKE_FAILED_AUTH | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | \
     ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL | ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_CLOSED)

/* One monitor event into c's flags. */
static void took_event(br_client_t *c, uint16_t id)
{
    switch (id) {
    case ZMQ_EVENT_CONNECTED:
        c->connected = c->up = 1;
        c->ready = c->refused = 0;
        break;
    case ZMQ_EVENT_HANDSHAKE_SUCCEEDED:
        c->handshaked = c->ready = 1;
        c->hs_dropped = 0;
        break;
    case ZMQ_EVENT_HANDSHAKE_FAILED_AUTH:
    case ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL:
        c->auth_failed = c->connected = 1;
        break;
    case ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL: /* hung up on, or reset, mid-handshake */
        c->hs_dropped = 1;
        break;
    case ZMQ_EVENT_DISCONNECTED:
        c->lost += c->ready;
        c->up = c->ready = 0;
        break;
    case ZMQ_EVENT_CLOSED:
        if (!c->up)
            c->refused = 1;
        break;
    default:
        break;
    }
}

/* Read the monitor's queued events into c's flags. */
static void read_monitor(br_client_t *c)
{
    for (;;) {
        zmq_msg_t ev;
        zmq_msg_init(&ev);
        if (zmq_msg_recv(&ev, c->monitor, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&ev);
            return;
        }
        if (zmq_msg_size(&ev) >= 2) {
            uint16_t id;
            memcpy(&id, zmq_msg_data(&ev), 2);
            took_event(c, id);
        }
        int more = zmq_msg_more(&ev);
        zmq_msg_close(&ev);
        if (more) { /* second frame: the endpoint */
            zmq_msg_init(&ev);
            zmq_msg_recv(&ev, c->monitor, 0);
            zmq_msg_close(&ev);
        }
    }
}

br_client_t *br_client_new(const char *endpoint, const char *server_public_key,
                           const char *public_key, const char *secret_key,
                           br_err_t *err)
{
    br_client_t *c = calloc(1, sizeof(*c));
    if (!c)
        return br_errp(err, ENOMEM, "out of memory");
    br_strlcpy(c->endpoint, endpoint, sizeof(c->endpoint));
    c->ctx = zmq_ctx_new();
    if (c->ctx)
        c->sock =
            br_sock_client_watched(c->ctx, endpoint, server_public_key, public_key,
                                   secret_key, 0, 0, WATCHED, &c->monitor, err);
    if (!c->sock) {
        br_client_destroy(&c);
        return NULL;
    }
    c->seq = (uint32_t)br_mono_ms();
    return c;
}

br_client_t *br_client_new_cred(const br_cred_t *cred, br_err_t *err)
{
    return br_client_new(cred->endpoint, cred->server_public_key, cred->public_key,
                         cred->secret_key, err);
}

void br_client_destroy(br_client_t **c)
{
    if (c && *c) {
        int saved = errno;
        for (size_t i = 0; i < (*c)->nkept; i++)
            br_msg_destroy(&(*c)->kept[i]);
        br_sock_close(&(*c)->monitor);
        br_sock_close(&(*c)->sock);
        if ((*c)->ctx)
            zmq_ctx_term((*c)->ctx);
        free(*c);
        *c = NULL;
        errno = saved;
    }
}

/* c->lost when seq was sent (now, for a seq not pending). */
static unsigned lost_at_send(const br_client_t *c, uint32_t seq)
{
    for (size_t i = 0; i < c->npending; i++)
        if (c->pending[i] == seq)
            return c->pending_lost[i];
    return c->lost;
}

/* Why no answer came within timeout_ms, from what the monitor saw; lost_before: c->lost
 * when the request was sent. Always ETIMEDOUT (a caller may ride out an outage). */
static int no_answer(br_client_t *c, unsigned lost_before, int timeout_ms,
                     br_err_t *err)
{
    double s = timeout_ms / 1000.0;
    if (c->lost != lost_before || (c->refused && c->connected))
        return br_errf(err, ETIMEDOUT,
                       "the coordinator at %s went away before answering (is brambled "
                       "still running?)",
                       c->endpoint);
    if (c->hs_dropped && !c->handshaked)
        return br_errf(err, ETIMEDOUT,
                       "no answer from the coordinator at %s within %.1fs: it takes "
                       "connections but hangs up in the encrypted handshake (is "
                       "server_public_key in the credential this coordinator's key? a "
                       "wrong server key looks like this)",
                       c->endpoint, s);
    if (c->up && !c->ready)
        return br_errf(err, ETIMEDOUT,
                       "no answer from the coordinator at %s within %.1fs: it took the "
                       "connection but did not complete the handshake (is brambled "
                       "stopped, or too busy to answer?)",
                       c->endpoint, s);
    if (c->up)
        return br_errf(
            err, ETIMEDOUT,
            "no answer from the coordinator at %s within %.1fs: connected, but "
            "it did not answer in time (busy? --timeout waits longer)",
            c->endpoint, s);
    return br_errf(err, ETIMEDOUT, "nothing answers at %s (is brambled running?)",
                   c->endpoint);
}

static int wait_response(br_client_t *c, uint32_t seq, int timeout_ms, br_msg_t **out,
                         br_err_t *err)
{
    int64_t deadline = br_mono_ms() + timeout_ms;
    unsigned lost_before = lost_at_send(c, seq);
    for (;;) {
        int64_t left = deadline - br_mono_ms();
        if (left <= 0)
            break;
        zmq_pollitem_t items[] = {{c->sock, 0, ZMQ_POLLIN, 0},
                                  {c->monitor, 0, ZMQ_POLLIN, 0}};
        int n = zmq_poll(items, c->monitor ? 2 : 1, left > 200 ? 200 : (long)left);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return br_errf(err, errno, "poll: %s", zmq_strerror(errno));
        if (c->monitor)
            read_monitor(c);
        if (c->auth_failed)
            return br_errf(err, EACCES,
                           "the coordinator at %s refused this key (unknown, removed "
                           "or revoked credential)",
                           c->endpoint);
        if (!(items[0].revents & ZMQ_POLLIN))
            continue;
        br_msg_t *m = NULL;
        if (br_msg_recv(c->sock, 0, ZMQ_DONTWAIT, &m, NULL) < 0) {
            br_msg_destroy(&m);
            continue;
        }
        if (br_msg_kind(m) == BR_MSG_RESPONSE && br_msg_seq(m) == seq) {
            *out = m;
            return 0;
        }
        unasked(c, m);
    }
    if (c->monitor)
        read_monitor(c);
    return no_answer(c, lost_before, timeout_ms, err);
}

int br_client_send(br_client_t *c, const char *type, json_t *body, uint32_t *seq,
                   br_err_t *err)
{
    return br_client_send_data(c, type, body, NULL, 0, seq, err);
}

int br_client_send_data(br_client_t *c, const char *type, json_t *body, const void *data,
                        size_t len, uint32_t *seq, br_err_t *err)
{
    if (c->npending == BR_CLIENT_PENDING) {
        json_decref(body);
        return br_errf(err, EBUSY, "too many requests in flight (at most %d)",
                       BR_CLIENT_PENDING);
    }
    uint32_t s = ++c->seq;
    br_msg_t *req = br_msg_new(BR_MSG_REQUEST, type, s);
    if (!req) {
        json_decref(body);
        return br_errf(err, EINVAL, "bad request type '%s'", type);
    }
    if (body)
        br_msg_set_body(req, body);
    if (data && br_msg_set_data(req, data, len) < 0) {
        br_msg_destroy(&req);
        return br_errf(err, ENOMEM, "out of memory");
    }
    if (c->monitor) /* what happened before it was sent is not about it */
        read_monitor(c);
    unsigned lost = c->lost;
    int rc = br_msg_send(c->sock, req, err);
    br_msg_destroy(&req);
    if (rc < 0)
        return -1;
    c->pending_lost[c->npending] = lost;
    c->pending[c->npending++] = s;
    *seq = s;
    return 0;
}

/* seq's answer m came (taken): seq forgotten, m checked and handed over. 0, or -1
 * with err (a refusal). */
static int answered(br_client_t *c, uint32_t seq, br_msg_t *m, br_msg_t **resp, br_err_t *err)
{
    forget_seq(c, seq);
    if (br_msg_check(m, err) < 0) {
        br_msg_destroy(&m);
        return -1;
    }
    if (resp)
        *resp = m;
    else
        br_msg_destroy(&m);
    return 0;
}

int br_client_recv(br_client_t *c, uint32_t seq, int timeout_ms, br_msg_t **resp,
                   br_err_t *err)
{
    br_msg_t *m = take_kept(c, seq);
    if (!m && wait_response(c, seq, timeout_ms, &m, err) < 0) {
        forget_seq(c, seq);
        return -1;
    }
    return answered(c, seq, m, resp, err);
}

int br_client_try(br_client_t *c, uint32_t seq, br_msg_t **resp, br_err_t *err)
{
    br_msg_t *m = take_kept(c, seq);
    while (!m) {
        if (c->monitor)
            read_monitor(c);
        if (c->auth_failed) {
            forget_seq(c, seq);
            return br_errf(err, EACCES,
                           "the coordinator at %s refused this key (unknown, removed "
                           "or revoked credential)",
                           c->endpoint);
        }
        br_msg_t *got = NULL;
        if (br_msg_recv(c->sock, 0, ZMQ_DONTWAIT, &got, NULL) < 0) {
            br_msg_destroy(&got);
            return 0; /* (nothing more has come: still in flight) */
        }
        if (br_msg_kind(got) == BR_MSG_RESPONSE && br_msg_seq(got) == seq)
            m = got;
        else
            unasked(c, got);
    }
    return answered(c, seq, m, resp, err) < 0 ? -1 : 1;
}

void *br_client_socket(br_client_t *c)
{
    return c->sock;
}

int br_client_rpc(br_client_t *c, const char *type, json_t *body, int timeout_ms,
                  br_msg_t **resp, br_err_t *err)
{
    uint32_t seq = 0;
    if (br_client_send(c, type, body, &seq, err) < 0)
        return -1;
    return br_client_recv(c, seq, timeout_ms, resp, err);
}

json_t *br_client_call(br_client_t *c, const char *type, json_t *body, int timeout_ms,
                       br_err_t *err)
{
    br_msg_t *m = NULL;
    if (br_client_rpc(c, type, body, timeout_ms, &m, err) < 0)
        return NULL;
    json_t *b = json_incref(br_msg_body(m));
    br_msg_destroy(&m);
    return b;
}

int br_client_wait_news(br_client_t *c, int timeout_ms, br_err_t *err)
{
    int64_t deadline = br_mono_ms() + (timeout_ms > 0 ? timeout_ms : 0);
    for (;;) {
        for (;;) { /* what is queued first: several news count once */
            br_msg_t *m = NULL;
            if (br_msg_recv(c->sock, 0, ZMQ_DONTWAIT, &m, NULL) < 0) {
                br_msg_destroy(&m);
                if (errno == EAGAIN)
                    break;
                continue;
            }
            unasked(c, m);
        }
        if (c->news) {
            c->news = 0;
            return 1;
        }
        int64_t left = deadline - br_mono_ms();
        if (left <= 0)
            return 0;
        zmq_pollitem_t item = {c->sock, 0, ZMQ_POLLIN, 0};
        if (zmq_poll(&item, 1, (long)left) < 0 && errno != EINTR)
            return br_errf(err, errno, "poll: %s", zmq_strerror(errno));
    }
}
