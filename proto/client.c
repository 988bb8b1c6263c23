/* client.c - a request/response client over one CURVE DEALER. */
#include "client.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "sock.h"
#include "util.h"

struct br_client {
    void *ctx;
    void *sock;
    void *monitor;
    uint32_t seq;
    char endpoint[BR_ENDPOINT_MAX];
};

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
        c->sock = br_sock_client(c->ctx, endpoint, server_public_key, public_key,
                                 secret_key, err);
    if (!c->sock) {
        br_client_destroy(&c);
        return NULL;
    }
    c->monitor = br_sock_monitor(c->ctx, c->sock);
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
        br_sock_close(&(*c)->monitor);
        br_sock_close(&(*c)->sock);
        if ((*c)->ctx)
            zmq_ctx_term((*c)->ctx);
        free(*c);
        *c = NULL;
        errno = saved;
    }
}

static int wait_response(br_client_t *c, uint32_t seq, int timeout_ms, br_msg_t **out,
                         br_err_t *err)
{
    int64_t deadline = br_mono_ms() + timeout_ms;
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
        if (c->monitor && br_sock_monitor_auth_failed(c->monitor))
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
        br_msg_destroy(&m);
    }
    return br_errf(err, ETIMEDOUT,
                   "no answer from the coordinator at %s within %.1fs (is brambled "
                   "running there?)",
                   c->endpoint, timeout_ms / 1000.0);
}

int br_client_rpc(br_client_t *c, const char *type, json_t *body, int timeout_ms,
                  br_msg_t **resp, br_err_t *err)
{
    uint32_t seq = ++c->seq;
    br_msg_t *req = br_msg_new(BR_MSG_REQUEST, type, seq);
    if (!req) {
        json_decref(body);
        return br_errf(err, EINVAL, "bad request type '%s'", type);
    }
    if (body)
        br_msg_set_body(req, body);
    int rc = br_msg_send(c->sock, req, err);
    br_msg_destroy(&req);
    if (rc < 0)
        return -1;
    br_msg_t *m = NULL;
    if (wait_response(c, seq, timeout_ms, &m, err) < 0)
        return -1;
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
