/* sock.c - libzmq sockets as bramble uses them. */
#include "sock.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <zmq.h>

#include "msg.h"
#include "stream.h"

static int common_opts(void *s)
{
    int64_t max = BR_MSG_FRAME_MAX;
    int zero = 0;
    return zmq_setsockopt(s, ZMQ_MAXMSGSIZE, &max, sizeof(max)) < 0 ||
                   zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof(zero)) < 0
               ? -1
               : 0;
}

/* A ROUTER bound to endpoint: a daemon's, CURVE with secret_key; or, secret_key
 * NULL, a stream server (no CURVE, no bound on what it sends: stream credit bounds
 * it). */
static void *server(void *ctx, const char *endpoint, const char *secret_key, br_err_t *err)
{
    void *s = zmq_socket(ctx, ZMQ_ROUTER);
    if (!s)
        return br_errp(err, errno, "socket: %s", zmq_strerror(errno));
    int one = 1, zero = 0, rcv = BR_SOCK_STREAM_PEER_QUEUE;
    int hwm = secret_key ? BR_SOCK_PEER_QUEUE : 0;
    int64_t max = BR_STREAM_CHUNK;
    /* sends never block: a peer that does not read gets at most BR_SOCK_PEER_QUEUE
     * messages queued, and what overflows fails at once with EAGAIN */
    if (common_opts(s) < 0 ||
        zmq_setsockopt(s, ZMQ_SNDHWM, &hwm, sizeof(hwm)) < 0 ||
        (!secret_key && /* a stream server, which anyone may connect to (no CURVE):
                          * what one connection has queued here is bounded (a full
                          * queue stops reading it: TCP holds the rest, nothing is
                          * dropped), and a frame beyond a stream's largest drops it */
         (zmq_setsockopt(s, ZMQ_RCVHWM, &rcv, sizeof(rcv)) < 0 ||
          zmq_setsockopt(s, ZMQ_MAXMSGSIZE, &max, sizeof(max)) < 0)) ||
        zmq_setsockopt(s, ZMQ_SNDTIMEO, &zero, sizeof(zero)) < 0 ||
        (secret_key &&
         (zmq_setsockopt(s, ZMQ_CURVE_SERVER, &one, sizeof(one)) < 0 ||
          zmq_setsockopt(s, ZMQ_CURVE_SECRETKEY, secret_key, strlen(secret_key)) < 0 ||
          zmq_setsockopt(s, ZMQ_ZAP_DOMAIN, BR_ZAP_DOMAIN, strlen(BR_ZAP_DOMAIN)) < 0)) ||
        zmq_setsockopt(s, ZMQ_ROUTER_MANDATORY, &one, sizeof(one)) < 0) {
        int e = errno;
        zmq_close(s);
        return br_errp(err, e, "socket options: %s", zmq_strerror(e));
    }
    if (zmq_bind(s, endpoint) < 0) {
        int e = errno;
        zmq_close(s);
        return br_errp(err, e, "bind %s: %s", endpoint, zmq_strerror(e));
    }
    return s;
}

void *br_sock_server(void *ctx, const char *endpoint, const char *secret_key,
                     br_err_t *err)
{
    return server(ctx, endpoint, secret_key, err);
}

void *br_sock_stream_server(void *ctx, const char *endpoint, br_err_t *err)
{
    return server(ctx, endpoint, NULL, err);
}

void *br_sock_client(void *ctx, const char *endpoint, const char *server_public_key,
                     const char *public_key, const char *secret_key, br_err_t *err)
{
    return br_sock_client_hb(ctx, endpoint, server_public_key, public_key, secret_key, 0,
                             0, err);
}

/* A DEALER with its options (CURVE unless server_public_key is NULL), not connected
 * yet. */
static void *client_socket(void *ctx, const char *server_public_key,
                           const char *public_key, const char *secret_key, int ivl_ms,
                           int timeout_ms, br_err_t *err)
{
    void *s = zmq_socket(ctx, ZMQ_DEALER);
    if (!s)
        return br_errp(err, errno, "socket: %s", zmq_strerror(errno));
    int ivl = 100, ivl_max = 2000;
    if (common_opts(s) < 0 ||
        (server_public_key &&
         (zmq_setsockopt(s, ZMQ_CURVE_SERVERKEY, server_public_key,
                         strlen(server_public_key)) < 0 ||
          zmq_setsockopt(s, ZMQ_CURVE_PUBLICKEY, public_key, strlen(public_key)) < 0 ||
          zmq_setsockopt(s, ZMQ_CURVE_SECRETKEY, secret_key, strlen(secret_key)) < 0)) ||
        zmq_setsockopt(s, ZMQ_RECONNECT_IVL, &ivl, sizeof(ivl)) < 0 ||
        zmq_setsockopt(s, ZMQ_RECONNECT_IVL_MAX, &ivl_max, sizeof(ivl_max)) < 0 ||
        (ivl_ms > 0 &&
         (zmq_setsockopt(s, ZMQ_HEARTBEAT_IVL, &ivl_ms, sizeof(ivl_ms)) < 0 ||
          zmq_setsockopt(s, ZMQ_HEARTBEAT_TIMEOUT, &timeout_ms, sizeof(timeout_ms)) < 0))) {
        int e = errno;
        zmq_close(s);
        return br_errp(err, e, "socket options: %s", zmq_strerror(e));
    }
    return s;
}

/* Connect s to endpoint: s, or NULL (s closed) with err. */
static void *client_connect(void *s, const char *endpoint, br_err_t *err)
{
    if (zmq_connect(s, endpoint) < 0) {
        int e = errno;
        zmq_close(s);
        return br_errp(err, e, "connect %s: %s", endpoint, zmq_strerror(e));
    }
    return s;
}

void *br_sock_client_hb(void *ctx, const char *endpoint, const char *server_public_key,
                        const char *public_key, const char *secret_key, int ivl_ms,
                        int timeout_ms, br_err_t *err)
{
    void *s = client_socket(ctx, server_public_key, public_key, secret_key, ivl_ms,
                            timeout_ms, err);
    return s ? client_connect(s, endpoint, err) : NULL;
}

void *br_sock_stream_client(void *ctx, const char *endpoint, br_err_t *err)
{
    void *s = client_socket(ctx, NULL, NULL, NULL, BR_SOCK_STREAM_HB_MS,
                            BR_SOCK_STREAM_HB_TIMEOUT_MS, err);
    int zero = 0;
    if (s && (zmq_setsockopt(s, ZMQ_SNDHWM, &zero, sizeof(zero)) < 0 ||
              zmq_setsockopt(s, ZMQ_RCVHWM, &zero, sizeof(zero)) < 0)) {
        int e = errno;
        zmq_close(s);
        return br_errp(err, e, "socket options: %s", zmq_strerror(e));
    }
    return s ? client_connect(s, endpoint, err) : NULL;
}

void *br_sock_client_watched(void *ctx, const char *endpoint,
                             const char *server_public_key, const char *public_key,
                             const char *secret_key, int ivl_ms, int timeout_ms,
                             int events, void **monitor, br_err_t *err)
{
    *monitor = NULL;
    void *s = client_socket(ctx, server_public_key, public_key, secret_key, ivl_ms,
                            timeout_ms, err);
    if (!s)
        return NULL;
    *monitor = br_sock_monitor_events(ctx, s, events);
    s = client_connect(s, endpoint, err);
    if (!s)
        br_sock_close(monitor);
    return s;
}

void *br_sock_monitor(void *ctx, void *sock)
{
    return br_sock_monitor_events(ctx, sock, ZMQ_EVENT_HANDSHAKE_FAILED_AUTH |
                                                 ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL);
}

void *br_sock_monitor_events(void *ctx, void *sock, int events)
{
    char name[64];
    snprintf(name, sizeof(name), "inproc://bramble-monitor-%p", sock);
    if (zmq_socket_monitor(sock, name, events) < 0)
        return NULL;
    void *pair = zmq_socket(ctx, ZMQ_PAIR);
    if (!pair)
        return NULL;
    int zero = 0;
    zmq_setsockopt(pair, ZMQ_LINGER, &zero, sizeof(zero));
    if (zmq_connect(pair, name) < 0) {
        zmq_close(pair);
        return NULL;
    }
    return pair;
}

int br_sock_monitor_take(void *monitor)
{
    int ev = 0;
    for (;;) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (!monitor || zmq_msg_recv(&m, monitor, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&m);
            return ev;
        }
        if (zmq_msg_size(&m) >= 2) {
            uint16_t id;
            memcpy(&id, zmq_msg_data(&m), 2);
            ev |= id;
        }
        int more = zmq_msg_more(&m);
        zmq_msg_close(&m);
        if (more) { /* second frame: the endpoint */
            zmq_msg_init(&m);
            zmq_msg_recv(&m, monitor, 0);
            zmq_msg_close(&m);
        }
    }
}

int br_sock_monitor_auth_failed(void *monitor)
{
    return (br_sock_monitor_take(monitor) &
            (ZMQ_EVENT_HANDSHAKE_FAILED_AUTH | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL)) != 0;
}

void br_sock_close(void **sock)
{
    if (sock && *sock) {
        int zero = 0;
        zmq_setsockopt(*sock, ZMQ_LINGER, &zero, sizeof(zero));
        zmq_close(*sock);
        *sock = NULL;
    }
}
