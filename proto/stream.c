/* stream.c - a stream's frames and credit (stream.h). */
#include "stream.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sodium.h>
#include <zmq.h>

static void put64(unsigned char *p, uint64_t v)
{
    for (int i = 7; i >= 0; i--) {
        p[i] = (unsigned char)(v & 0xff);
        v >>= 8;
    }
}

static uint64_t get64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | p[i];
    return v;
}

void br_stream_hdr_encode(const br_stream_hdr_t *h, unsigned char *buf)
{
    buf[0] = BR_STREAM_VERSION;
    buf[1] = h->type;
    buf[2] = h->channel;
    buf[3] = h->flags;
    buf[4] = (unsigned char)(h->stream >> 24);
    buf[5] = (unsigned char)(h->stream >> 16);
    buf[6] = (unsigned char)(h->stream >> 8);
    buf[7] = (unsigned char)h->stream;
    put64(buf + 8, h->arg);
}

int br_stream_hdr_decode(const void *buf, size_t len, br_stream_hdr_t *h, br_err_t *err)
{
    const unsigned char *p = buf;
    if (len != BR_STREAM_HEADER)
        return br_errf(err, EPROTO, "a stream header of %zu bytes (not %d)", len,
                       BR_STREAM_HEADER);
    if (p[0] != BR_STREAM_VERSION)
        return br_errf(err, EPROTO, "stream version %u (this side speaks %d)", p[0],
                       BR_STREAM_VERSION);
    if (p[1] < BR_STREAM_ATTACH || p[1] >= BR_STREAM_TYPE_MAX)
        return br_errf(err, EPROTO, "unknown stream frame type %u", p[1]);
    if (p[2] > 2)
        return br_errf(err, EPROTO, "stream channel %u (0 to 2)", p[2]);
    if (p[3] & ~BR_STREAM_SEALED)
        return br_errf(err, EPROTO, "stream header flags %#x", p[3]);
    h->type = p[1];
    h->channel = p[2];
    h->stream = (uint32_t)p[4] << 24 | (uint32_t)p[5] << 16 | (uint32_t)p[6] << 8 | p[7];
    h->arg = get64(p + 8);
    h->flags = p[3];
    return 0;
}

int br_stream_send(void *sock, const void *route, size_t route_len, uint8_t type,
                   uint8_t channel, uint32_t stream, uint64_t arg, const void *payload,
                   size_t len, int flags)
{
    unsigned char hdr[BR_STREAM_HEADER];
    br_stream_hdr_t h = {type, channel, stream, arg, 0};
    br_stream_hdr_encode(&h, hdr);
    if (route && zmq_send(sock, route, route_len, flags | ZMQ_SNDMORE) < 0)
        return -1;
    if (zmq_send(sock, hdr, sizeof(hdr), flags | (payload ? ZMQ_SNDMORE : 0)) < 0)
        return -1;
    if (payload && zmq_send(sock, payload, len, flags) < 0)
        return -1;
    return 0;
}

void br_stream_disown(void *sock, const br_stream_hdr_t *h, const char *why, int flags)
{
    if (h->stream && h->type != BR_STREAM_CLOSE && h->type != BR_STREAM_EXIT)
        br_stream_send(sock, NULL, 0, BR_STREAM_CLOSE, 0, h->stream, 0, why, strlen(why),
                       flags);
}

int br_stream_recv(void *sock, br_stream_hdr_t *h, void *buf, size_t cap, size_t *len,
                   int *has)
{
    unsigned char hdr[BR_STREAM_HEADER + 1];
    int n = zmq_recv(sock, hdr, sizeof(hdr), ZMQ_DONTWAIT);
    if (n < 0)
        return 0;
    int more = 0, frames = 1, ok = 1;
    size_t ml = sizeof(more);
    *len = 0;
    *has = 0;
    zmq_getsockopt(sock, ZMQ_RCVMORE, &more, &ml);
    while (more) { /* the payload, and whatever else came (dropped) */
        int got = zmq_recv(sock, buf, cap, 0);
        if (got < 0)
            return -1;
        if (frames++ == 1) {
            ok = (size_t)got <= cap;
            *len = ok ? (size_t)got : 0;
            *has = 1;
        } else {
            ok = 0;
        }
        zmq_getsockopt(sock, ZMQ_RCVMORE, &more, &ml);
    }
    br_err_t err;
    if (!ok || n != BR_STREAM_HEADER || br_stream_hdr_decode(hdr, (size_t)n, h, &err) < 0)
        return -1;
    return 1;
}

void br_stream_ticket(char out[BR_STREAM_TICKET + 1])
{
    unsigned char raw[BR_STREAM_TICKET / 2];
    randombytes_buf(raw, sizeof(raw));
    sodium_bin2hex(out, BR_STREAM_TICKET + 1, raw, sizeof(raw));
}

void br_credit_init(br_credit_t *c)
{
    c->sent = 0;
    c->granted = BR_STREAM_WINDOW;
}

int64_t br_stream_cost(size_t len)
{
    return len < BR_STREAM_FRAME_COST ? BR_STREAM_FRAME_COST : (int64_t)len;
}

int64_t br_credit_room(const br_credit_t *c)
{
    int64_t room = c->granted - c->sent;
    return room > 0 ? room : 0;
}

int64_t br_owed_take(br_owed_t *o, int64_t n)
{
    o->taken += n;
    if (o->taken < BR_STREAM_WINDOW / 4)
        return 0;
    int64_t give = o->taken;
    o->taken = 0;
    return give;
}

int br_stream_endpoint(const char *endpoint, int port, char *out, size_t len)
{
    const char *colon = strrchr(endpoint, ':');
    if (!colon || colon[1] < '0' || colon[1] > '9' || strncmp(endpoint, "tcp://", 6) != 0)
        return -1;
    int n = snprintf(out, len, "%.*s:%d", (int)(colon - endpoint), endpoint, port);
    return n < 0 || (size_t)n >= len ? -1 : 0;
}
