/* stream.h - the frames of a stream (a shell or a forward) between the CLI and
 * an agent, through the coordinator's relay (proto/PROTOCOL.md, section 13), and
 * the credit each side keeps of the other.
 *
 * A frame is one or two ZeroMQ frames: a 16-byte header (version, type, channel,
 * flags, stream id, a 64-bit argument; network byte order) and, for some types, a
 * payload. What one end sends the other is sealed end to end (streamseal.h). Data flows in one direction only within the credit the receiver has
 * granted: BR_STREAM_WINDOW bytes at the start, and each CREDIT's argument more.
 * The relay counts both and closes a stream whose sender goes beyond, so no side
 * buffers more than a window per stream and direction. */
#ifndef BRAMBLE_STREAM_H
#define BRAMBLE_STREAM_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"

#define BR_STREAM_VERSION 2
#define BR_STREAM_SEALED 1 /* a header flag: the frame is sealed (streamseal.h) */
#define BR_STREAM_HEADER 16
#define BR_STREAM_WINDOW (512 * 1024) /* bytes in flight per stream and direction */
#define BR_STREAM_CHUNK (128 * 1024)  /* the most bytes one frame carries (its seal included) */
#define BR_STREAM_TICKET 32           /* hex characters of a ticket */
#define BR_STREAM_PING_MS 1000        /* each end says it is there this often... */
#define BR_STREAM_GONE_MS 3500        /* ... and is taken for gone after this silence */
#define BR_STREAM_REASON_MAX 512      /* bytes of a CLOSE's reason */

typedef enum {
    BR_STREAM_ATTACH = 1, /* payload: the ticket; the relay answers ATTACHED or CLOSE */
    BR_STREAM_ATTACHED,   /* both ends are there: data may flow */
    BR_STREAM_DATA,       /* payload: bytes; channel: 0 stdin, 1 stdout, 2 stderr */
    BR_STREAM_CREDIT,     /* arg: bytes more the sender of this frame will take */
    BR_STREAM_EOF,        /* channel: no more data on it (a half close) */
    BR_STREAM_WINCH,      /* arg: rows << 16 | cols of the client's terminal */
    BR_STREAM_EXIT,       /* arg: the exit status (128 + signal when killed); last */
    BR_STREAM_CLOSE,      /* payload: why (text); last */
    BR_STREAM_PING,       /* an end is still there (stream 0: the whole connection) */
    BR_STREAM_TYPE_MAX
} br_stream_type_t;

typedef struct {
    uint8_t type, channel;
    uint32_t stream;
    uint64_t arg;
    uint8_t flags; /* BR_STREAM_SEALED or 0 */
} br_stream_hdr_t;

/* Write h into buf (BR_STREAM_HEADER bytes). */
void br_stream_hdr_encode(const br_stream_hdr_t *h, unsigned char *buf);
/* Read a header: 0, or -1 with err (a wrong length, version or type). */
int br_stream_hdr_decode(const void *buf, size_t len, br_stream_hdr_t *h, br_err_t *err);

/* Send one frame on a ZeroMQ socket (payload may be NULL); route, when not NULL,
 * goes first (a ROUTER's peer). flags: ZMQ_DONTWAIT or 0. 0, or -1 with errno. */
int br_stream_send(void *sock, const void *route, size_t route_len, uint8_t type,
                   uint8_t channel, uint32_t stream, uint64_t arg, const void *payload,
                   size_t len, int flags);

/* A frame h of a stream this end no longer has (it let go of it and could not say
 * so): answered CLOSE, why, so that the relay lets go too rather than keep it
 * pinged against the user's bound. Nothing for stream 0, nor for a CLOSE or an
 * EXIT (the stream ends anyway). */
void br_stream_disown(void *sock, const br_stream_hdr_t *h, const char *why, int flags);

/* Receive one frame from a DEALER without waiting: 1 with its header in h and its
 * payload copied into buf (cap bytes at least BR_STREAM_CHUNK; *len its length, 0
 * and *has 0 when it had none), 0 when nothing waits, -1 when what came was not a
 * frame (read to its end and dropped). */
int br_stream_recv(void *sock, br_stream_hdr_t *h, void *buf, size_t cap, size_t *len,
                   int *has);

/* A ticket: BR_STREAM_TICKET hex characters of random bytes, and a NUL. */
void br_stream_ticket(char out[BR_STREAM_TICKET + 1]);

/* Credit, as one direction's sender keeps it: what it may still send. */
typedef struct {
    int64_t sent;    /* bytes sent */
    int64_t granted; /* bytes the receiver allowed in all (the window included) */
} br_credit_t;

void br_credit_init(br_credit_t *c);
/* What a DATA frame of len bytes costs of the credit: at least BR_STREAM_FRAME_COST,
 * so that a window holds a bounded number of frames however small they are. */
#define BR_STREAM_FRAME_COST 256
int64_t br_stream_cost(size_t len);
/* Bytes the sender may send now (0 when it must wait for credit). */
int64_t br_credit_room(const br_credit_t *c);

/* What a receiver owes back: it grants again once it has taken a quarter window. */
typedef struct {
    int64_t taken; /* consumed and not granted back yet */
} br_owed_t;
/* n more bytes were consumed: the credit to grant now, or 0 to wait for more. */
int64_t br_owed_take(br_owed_t *o, int64_t n);

/* endpoint "tcp://HOST:PORT" with PORT replaced by port, into out. 0, or -1 when
 * endpoint has no port or out is too small. */
int br_stream_endpoint(const char *endpoint, int port, char *out, size_t len);

#endif
