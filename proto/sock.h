/* sock.h - libzmq sockets as bramble uses them: a CURVE ROUTER for the coordinator,
 * CURVE DEALERs for agents and the CLI, every one bounded (ZMQ_MAXMSGSIZE), with
 * linger 0, and a monitor so a client learns that its key was refused. */
#ifndef BRAMBLE_SOCK_H
#define BRAMBLE_SOCK_H

#include "err.h"

#define BR_ZAP_DOMAIN "bramble"

/* Messages queued for one peer of a server socket before sends to it are dropped. */
#define BR_SOCK_PEER_QUEUE 1000

/* Bind a ROUTER at endpoint as a CURVE server with secret_key (Z85). The ZAP
 * handler (zap.h) must exist before this is called. Sends on it never block: a
 * message to a peer whose queue is full fails with EAGAIN, to a peer that is gone
 * with EHOSTUNREACH. */
void *br_sock_server(void *ctx, const char *endpoint, const char *secret_key,
                     br_err_t *err);

/* Connect a DEALER to endpoint as a CURVE client. */
void *br_sock_client(void *ctx, const char *endpoint, const char *server_public_key,
                     const char *public_key, const char *secret_key, br_err_t *err);

/* An agent's connection to the coordinator: a PING this often, and the connection
 * made anew when nothing came back for BR_AGENT_DEAD_MS: one that died without a
 * word (a home router's mapping gone with its old address) is noticed, and the
 * next one comes from where the node is now. */
#define BR_AGENT_PING_MS 3000
#define BR_AGENT_DEAD_MS 9000

/* The same with ZMTP heartbeats: a PING every ivl_ms, and the connection dropped
 * (ZMQ_EVENT_DISCONNECTED, then a reconnect) when the peer has not answered for
 * timeout_ms, however busy or idle the peer's application is. */
void *br_sock_client_hb(void *ctx, const char *endpoint, const char *server_public_key,
                        const char *public_key, const char *secret_key, int ivl_ms,
                        int timeout_ms, br_err_t *err);

/* br_sock_client (ivl_ms 0), or br_sock_client_hb, with a monitor of events
 * (br_sock_monitor_events' PAIR socket, in *monitor; NULL when it could not be
 * made) that watches from before the connect, so that none of the first
 * connection's events (a refused handshake) is missed. */
void *br_sock_client_watched(void *ctx, const char *endpoint,
                             const char *server_public_key, const char *public_key,
                             const char *secret_key, int ivl_ms, int timeout_ms,
                             int events, void **monitor, br_err_t *err);

/* Sockets for streams (stream.h): the same, but with no queue bound, since each
 * stream's credit bounds what it may have in flight (a bound would drop frames
 * that the credit allowed), and no CURVE, since the ends seal their frames
 * themselves (streamseal.h) and the relay is not to open them. A ROUTER bound at
 * endpoint, and a DEALER connected, whose connection is kept and checked by ZMTP
 * heartbeats even while no stream is open (BR_SOCK_STREAM_HB_MS; a dead one is made
 * again, a NAT's mapping kept). */
#define BR_SOCK_STREAM_HB_MS 10000
#define BR_SOCK_STREAM_HB_TIMEOUT_MS 30000
/* The server's socket takes anyone's connection (the frames' seal is the ends'):
 * each may have this many messages queued in it (the relay reads them; a full
 * queue stops reading from that peer), none larger than BR_STREAM_CHUNK. */
#define BR_SOCK_STREAM_PEER_QUEUE 512
void *br_sock_stream_server(void *ctx, const char *endpoint, br_err_t *err);
void *br_sock_stream_client(void *ctx, const char *endpoint, br_err_t *err);

/* Start monitoring sock for handshake failures; returns a PAIR socket to poll, or
 * NULL. Each monitor needs a unique inproc name, made from sock's address. */
void *br_sock_monitor(void *ctx, void *sock);

/* The same for any set of ZMQ_EVENT_* bits. */
void *br_sock_monitor_events(void *ctx, void *sock, int events);

/* Read pending monitor events without blocking: the ZMQ_EVENT_* bits of those that
 * came (0 when none, or monitor is NULL). */
int br_sock_monitor_take(void *monitor);

/* Read pending monitor events without blocking. Returns 1 when one of them says the
 * server refused our key (or the handshake failed for a protocol reason), else 0. */
int br_sock_monitor_auth_failed(void *monitor);

/* Close a socket (linger 0) and set *sock to NULL; accepts NULL. */
void br_sock_close(void **sock);

#endif
