/* msg.h - one bramble message and its wire codec (proto/PROTOCOL.md):
 *   [routing id, ROUTER side only] [header] [JSON body] [optional data frame]
 * The header is small, binary and versioned; the body is a JSON object; the data
 * frame carries raw bytes (log output). Decoding is strict and bounded: anything
 * malformed is an error with a reason, never an assert or a crash. */
#ifndef BRAMBLE_MSG_H
#define BRAMBLE_MSG_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "err.h"

#define BR_PROTO_VERSION 1
#define BR_MSG_HEADER_MIN 10        /* fixed part of the header frame */
#define BR_MSG_TYPE_MAX 32          /* longest message type name */
#define BR_MSG_BODY_MAX (1 << 20)   /* JSON body bytes */
#define BR_MSG_DATA_MAX (1 << 20)   /* data frame bytes */
#define BR_NODE_MAX_ATTEMPTS 256    /* ranks one agent runs at once; the scheduler knows */
#define BR_MSG_FRAME_MAX (1 << 21)  /* ZMQ_MAXMSGSIZE: larger frames drop the peer */
#define BR_MSG_ROUTE_MAX 256        /* routing id bytes */
/* checkpoint files read in chunks (ckpt.read, checkpoint.read: section 11) */
#define BR_XFER_CHUNK (256 * 1024) /* the most bytes one answer carries */
#define BR_XFER_WINDOW 8           /* requests a puller keeps in flight: 2 MiB */

typedef enum {
    BR_MSG_REQUEST = 1,  /* expects a response with the same seq */
    BR_MSG_RESPONSE = 2, /* answers a request; body has "errnum"/"error" on failure */
    BR_MSG_EVENT = 3,    /* one-way notice, no response */
} br_msg_kind_t;

typedef struct br_msg br_msg_t;

/* A new message with an empty JSON object body. type: [a-z0-9._-], 1..32 chars. */
br_msg_t *br_msg_new(br_msg_kind_t kind, const char *type, uint32_t seq);
void br_msg_destroy(br_msg_t **msg);

br_msg_kind_t br_msg_kind(const br_msg_t *msg);
const char *br_msg_type(const br_msg_t *msg);
uint32_t br_msg_seq(const br_msg_t *msg);

/* The body (borrowed; the message owns it). set_body steals the reference. */
json_t *br_msg_body(const br_msg_t *msg);
void br_msg_set_body(br_msg_t *msg, json_t *body);

/* Optional raw data frame. set_data copies. data returns NULL when none. */
int br_msg_set_data(br_msg_t *msg, const void *data, size_t len);
const void *br_msg_data(const br_msg_t *msg, size_t *len);

/* ROUTER routing id of the peer (received messages; copied to replies). */
int br_msg_set_route(br_msg_t *msg, const void *route, size_t len);
const void *br_msg_route(const br_msg_t *msg, size_t *len);

/* Metadata of the connection the message came in on (ZAP's User-Id: the peer's
 * proven CURVE public key; Peer-Address: its IP). "" when not known. */
const char *br_msg_user(const br_msg_t *msg);
const char *br_msg_peer_addr(const br_msg_t *msg);
/* For a request made inside the coordinator on a client's behalf (the dashboard,
 * coordinator/http/dashboard.h): the key it acts as, as if ZAP had proved it. */
void br_msg_set_user(br_msg_t *msg, const char *user);

/* Decode one message from its frames (no routing id). Pure: used by br_msg_recv and
 * the fuzzer. data may be NULL (no data frame). */
br_msg_t *br_msg_decode(const void *hdr, size_t hlen, const void *body, size_t blen,
                        const void *data, size_t dlen, br_err_t *err);

/* Encode the header frame into buf (at least BR_MSG_HEADER_MIN + BR_MSG_TYPE_MAX
 * bytes). Returns its length. */
size_t br_msg_encode_header(const br_msg_t *msg, unsigned char *buf);

/* Receive one whole message (all its frames) from a socket. router: 1 when the
 * socket is a ROUTER (first frame is the routing id). A malformed message is read to
 * its end and returned as -1 with err (EPROTO); on a ROUTER *out is then a stub
 * request with the sender's route and metadata, and the header's type and seq when
 * the header was sound (else type "invalid", seq 0), so the caller can answer it
 * with an error. Returns -1 with errno EAGAIN
 * when nothing is waiting and flags has ZMQ_DONTWAIT. */
int br_msg_recv(void *sock, int router, int flags, br_msg_t **out, br_err_t *err);

/* Send a message; on a ROUTER its route goes first. */
int br_msg_send(void *sock, const br_msg_t *msg, br_err_t *err);

/* A response to req (same type, seq and route) with an empty body. */
br_msg_t *br_msg_reply(const br_msg_t *req);
/* An error response: body {"errnum": errnum, "error": text}. */
br_msg_t *br_msg_reply_error(const br_msg_t *req, int errnum, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* For a response: -1 with err filled from its "errnum"/"error" when it reports
 * failure, else 0. */
int br_msg_check(const br_msg_t *resp, br_err_t *err);

/* Strict body access: jansson's json_unpack_ex with JSON_STRICT, turning its error
 * into "TYPE: bad body: ..." in err. Unknown keys in the body are errors. */
int br_msg_unpack(const br_msg_t *msg, br_err_t *err, const char *fmt, ...);

#endif
