/* msg.c - one bramble message and its wire codec (proto/PROTOCOL.md). */
#include "msg.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "jsontext.h"
#include "util.h"

#define MAGIC0 'B'
#define MAGIC1 'R'
#define FLAG_DATA 0x01

struct br_msg {
    br_msg_kind_t kind;
    uint32_t seq;
    char type[BR_MSG_TYPE_MAX + 1];
    json_t *body;
    unsigned char *data;
    size_t data_len;
    int has_data;
    unsigned char route[BR_MSG_ROUTE_MAX];
    size_t route_len;
    char user[64];
    char peer[64];
};

static int valid_type(const char *t, size_t n)
{
    if (n == 0 || n > BR_MSG_TYPE_MAX)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = t[i];
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' ||
              c == '_' || c == '-'))
            return 0;
    }
    return 1;
}

br_msg_t *br_msg_new(br_msg_kind_t kind, const char *type, uint32_t seq)
{
    if (kind < BR_MSG_REQUEST || kind > BR_MSG_EVENT || !type ||
        !valid_type(type, strlen(type))) {
        errno = EINVAL;
        return NULL;
    }
    br_msg_t *m = calloc(1, sizeof(*m));
    if (!m)
        return NULL;
    m->kind = kind;
    m->seq = seq;
    strcpy(m->type, type);
    m->body = json_object();
    if (!m->body) {
        free(m);
        errno = ENOMEM;
        return NULL;
    }
    return m;
}

void br_msg_destroy(br_msg_t **msg)
{
    if (msg && *msg) {
        int saved = errno;
        json_decref((*msg)->body);
        free((*msg)->data);
        free(*msg);
        *msg = NULL;
        errno = saved;
    }
}

br_msg_kind_t br_msg_kind(const br_msg_t *m)
{
    return m->kind;
}

const char *br_msg_type(const br_msg_t *m)
{
    return m->type;
}

uint32_t br_msg_seq(const br_msg_t *m)
{
    return m->seq;
}

json_t *br_msg_body(const br_msg_t *m)
{
    return m->body;
}

void br_msg_set_body(br_msg_t *m, json_t *body)
{
    json_decref(m->body);
    m->body = body ? body : json_object();
}

int br_msg_set_data(br_msg_t *m, const void *data, size_t len)
{
    if (len > BR_MSG_DATA_MAX) {
        errno = EMSGSIZE;
        return -1;
    }
    unsigned char *copy = malloc(len ? len : 1);
    if (!copy)
        return -1;
    if (len)
        memcpy(copy, data, len);
    free(m->data);
    m->data = copy;
    m->data_len = len;
    m->has_data = 1;
    return 0;
}

const void *br_msg_data(const br_msg_t *m, size_t *len)
{
    if (len)
        *len = m->has_data ? m->data_len : 0;
    return m->has_data ? m->data : NULL;
}

int br_msg_set_route(br_msg_t *m, const void *route, size_t len)
{
    if (len > BR_MSG_ROUTE_MAX) {
        errno = EMSGSIZE;
        return -1;
    }
    memcpy(m->route, route, len);
    m->route_len = len;
    return 0;
}

const void *br_msg_route(const br_msg_t *m, size_t *len)
{
    *len = m->route_len;
    return m->route;
}

const char *br_msg_user(const br_msg_t *m)
{
    return m->user;
}

void br_msg_set_user(br_msg_t *m, const char *user)
{
    br_strlcpy(m->user, user ? user : "", sizeof(m->user));
}

const char *br_msg_peer_addr(const br_msg_t *m)
{
    return m->peer;
}

size_t br_msg_encode_header(const br_msg_t *m, unsigned char *buf)
{
    size_t tlen = strlen(m->type);
    buf[0] = MAGIC0;
    buf[1] = MAGIC1;
    buf[2] = BR_PROTO_VERSION;
    buf[3] = (unsigned char)m->kind;
    buf[4] = (unsigned char)(m->seq >> 24);
    buf[5] = (unsigned char)(m->seq >> 16);
    buf[6] = (unsigned char)(m->seq >> 8);
    buf[7] = (unsigned char)m->seq;
    buf[8] = m->has_data ? FLAG_DATA : 0;
    buf[9] = (unsigned char)tlen;
    memcpy(buf + BR_MSG_HEADER_MIN, m->type, tlen);
    return BR_MSG_HEADER_MIN + tlen;
}

static int decode_header(br_msg_t *m, const unsigned char *h, size_t hlen, int *flags,
                         br_err_t *err)
{
    if (hlen < BR_MSG_HEADER_MIN || h[0] != MAGIC0 || h[1] != MAGIC1)
        return br_errf(err, EPROTO, "not a bramble message (bad header)");
    if (h[2] != BR_PROTO_VERSION)
        return br_errf(err, EPROTO, "protocol version %d not supported (this side: %d)",
                       h[2], BR_PROTO_VERSION);
    if (h[3] < BR_MSG_REQUEST || h[3] > BR_MSG_EVENT)
        return br_errf(err, EPROTO, "bad message kind %d", h[3]);
    size_t tlen = h[9];
    if (hlen != BR_MSG_HEADER_MIN + tlen || !valid_type((const char *)h + 10, tlen))
        return br_errf(err, EPROTO, "bad message type in header");
    if (h[8] & ~FLAG_DATA)
        return br_errf(err, EPROTO, "unknown header flags 0x%02x", h[8]);
    m->kind = (br_msg_kind_t)h[3];
    m->seq = (uint32_t)h[4] << 24 | (uint32_t)h[5] << 16 | (uint32_t)h[6] << 8 | h[7];
    memcpy(m->type, h + 10, tlen);
    m->type[tlen] = '\0';
    *flags = h[8];
    return 0;
}

static int decode_body(br_msg_t *m, const void *body, size_t blen, br_err_t *err)
{
    if (blen > BR_MSG_BODY_MAX)
        return br_errf(err, EMSGSIZE, "%s: body of %zu bytes exceeds %d", m->type, blen,
                       BR_MSG_BODY_MAX);
    json_error_t jerr;
    json_t *j = json_loadb(body, blen, JSON_REJECT_DUPLICATES, &jerr);
    if (!j)
        return br_errf(err, EPROTO, "%s: body is not valid JSON: %s", m->type,
                       jerr.text);
    if (!json_is_object(j)) {
        json_decref(j);
        return br_errf(err, EPROTO, "%s: body is not a JSON object", m->type);
    }
    br_msg_set_body(m, j);
    return 0;
}

br_msg_t *br_msg_decode(const void *hdr, size_t hlen, const void *body, size_t blen,
                        const void *data, size_t dlen, br_err_t *err)
{
    br_msg_t *m = br_msg_new(BR_MSG_EVENT, "x", 0);
    if (!m)
        return br_errp(err, ENOMEM, "out of memory");
    int flags = 0;
    if (decode_header(m, hdr, hlen, &flags, err) < 0 ||
        decode_body(m, body, blen, err) < 0)
        goto fail;
    if (!!(flags & FLAG_DATA) != (data != NULL)) {
        br_errf(err, EPROTO, "%s: data frame %s", m->type,
                data ? "not announced in header" : "missing");
        goto fail;
    }
    if (data && br_msg_set_data(m, data, dlen) < 0) {
        br_errf(err, EMSGSIZE, "%s: data frame of %zu bytes exceeds %d", m->type, dlen,
                BR_MSG_DATA_MAX);
        goto fail;
    }
    return m;
fail:
    br_msg_destroy(&m);
    return NULL;
}

/* Receive the frames of one message into parts[] (at most max); the rest of an
 * over-long message is read and dropped. Returns the number of frames or -1. */
static int recv_frames(void *sock, int flags, zmq_msg_t *parts, int max, int *total)
{
    int n = 0, more = 1;
    *total = 0;
    while (more) {
        zmq_msg_t tmp, *p = n < max ? &parts[n] : &tmp;
        zmq_msg_init(p);
        if (zmq_msg_recv(p, sock, *total == 0 ? flags : 0) < 0) {
            int e = errno;
            zmq_msg_close(p);
            for (int i = 0; i < n; i++)
                zmq_msg_close(&parts[i]);
            errno = e;
            return -1;
        }
        more = zmq_msg_more(p);
        (*total)++;
        if (p == &tmp)
            zmq_msg_close(&tmp);
        else
            n++;
    }
    return n;
}

static void copy_meta(br_msg_t *m, zmq_msg_t *part)
{
    const char *u = zmq_msg_gets(part, "User-Id");
    const char *a = zmq_msg_gets(part, "Peer-Address");
    br_strlcpy(m->user, u ? u : "", sizeof(m->user));
    br_strlcpy(m->peer, a ? a : "", sizeof(m->peer));
}

int br_msg_recv(void *sock, int router, int flags, br_msg_t **out, br_err_t *err)
{
    zmq_msg_t parts[5];
    int total;
    int n = recv_frames(sock, flags, parts, 5, &total);
    *out = NULL;
    if (n < 0) {
        int e = errno;
        return br_errf(err, e, "receive: %s", zmq_strerror(e));
    }
    int first = router ? 1 : 0;
    int nparts = total - first;
    br_msg_t *m = NULL;
    if (router && zmq_msg_size(&parts[0]) > BR_MSG_ROUTE_MAX) {
        br_errf(err, EPROTO, "bad routing id");
    } else if (nparts < 2 || nparts > 3) {
        br_errf(err, EPROTO, "malformed message: %d frames (expected 2 or 3)", nparts);
    } else {
        zmq_msg_t *h = &parts[first], *b = &parts[first + 1];
        zmq_msg_t *d = nparts == 3 ? &parts[first + 2] : NULL;
        m = br_msg_decode(zmq_msg_data(h), zmq_msg_size(h), zmq_msg_data(b),
                          zmq_msg_size(b), d ? zmq_msg_data(d) : NULL,
                          d ? zmq_msg_size(d) : 0, err);
    }
    if (!m && router && zmq_msg_size(&parts[0]) <= BR_MSG_ROUTE_MAX) {
        /* hand back a stub carrying the route, and the header's type and seq when
         * the header itself was sound, so the caller can answer the request */
        m = br_msg_new(BR_MSG_REQUEST, "invalid", 0);
        if (m && n > 1) {
            int hflags;
            decode_header(m, zmq_msg_data(&parts[1]), zmq_msg_size(&parts[1]), &hflags,
                          NULL);
        }
        if (m) {
            br_msg_set_route(m, zmq_msg_data(&parts[0]), zmq_msg_size(&parts[0]));
            copy_meta(m, &parts[n > 1 ? 1 : 0]); /* the routing id has no metadata */
            *out = m;
        }
        m = NULL;
    } else if (m) {
        if (router)
            br_msg_set_route(m, zmq_msg_data(&parts[0]), zmq_msg_size(&parts[0]));
        copy_meta(m, &parts[first < n ? first : 0]);
        *out = m;
    }
    int ok = m != NULL;
    for (int i = 0; i < n; i++)
        zmq_msg_close(&parts[i]);
    if (!ok) {
        errno = EPROTO;
        return -1;
    }
    return 0;
}

static int send_frame(void *sock, const void *data, size_t len, int more)
{
    return zmq_send(sock, data, len, more ? ZMQ_SNDMORE : 0) < 0 ? -1 : 0;
}

int br_msg_send(void *sock, const br_msg_t *m, br_err_t *err)
{
    unsigned char hdr[BR_MSG_HEADER_MIN + BR_MSG_TYPE_MAX];
    size_t hlen = br_msg_encode_header(m, hdr);
    size_t blen;
    char *body = br_jsontext(m->body, 0, &blen);
    if (!body)
        return br_errf(err, ENOMEM, "%s: cannot encode body", m->type);
    int rc = -1;
    if (blen > BR_MSG_BODY_MAX) {
        br_errf(err, EMSGSIZE, "%s: body too large (%zu bytes)", m->type, blen);
        goto done;
    }
    if ((m->route_len && send_frame(sock, m->route, m->route_len, 1) < 0) ||
        send_frame(sock, hdr, hlen, 1) < 0 ||
        send_frame(sock, body, blen, m->has_data) < 0 ||
        (m->has_data && send_frame(sock, m->data, m->data_len, 0) < 0)) {
        int e = errno;
        br_errf(err, e, "%s: send: %s", m->type, zmq_strerror(e));
        goto done;
    }
    rc = 0;
done:
    free(body);
    return rc;
}

br_msg_t *br_msg_reply(const br_msg_t *req)
{
    br_msg_t *r = br_msg_new(BR_MSG_RESPONSE, req->type, req->seq);
    if (r) {
        br_msg_set_route(r, req->route, req->route_len);
        memcpy(r->user, req->user, sizeof(r->user));
    }
    return r;
}

br_msg_t *br_msg_reply_error(const br_msg_t *req, int errnum, const char *fmt, ...)
{
    br_msg_t *r = br_msg_reply(req);
    if (!r)
        return NULL;
    char text[BR_ERR_TEXT];
    va_list ap;
    va_start(ap, fmt);
    if (vsnprintf(text, sizeof(text), fmt, ap) >= (int)sizeof(text))
        br_utf8_trim(text);
    va_end(ap);
    json_t *words = json_string(text);
    if (!words) { /* not UTF-8 even so: the bytes that are not ASCII as '?' */
        for (char *p = text; *p; p++)
            if ((unsigned char)*p >= 0x80)
                *p = '?';
        words = json_string(text);
    }
    json_object_set_new(r->body, "errnum", json_integer(errnum ? errnum : EINVAL));
    json_object_set_new(r->body, "error", words ? words : json_string("request failed"));
    return r;
}

int br_msg_check(const br_msg_t *resp, br_err_t *err)
{
    json_t *e = json_object_get(resp->body, "error");
    json_t *n = json_object_get(resp->body, "errnum");
    if (!e && !(json_is_integer(n) && json_integer_value(n) != 0))
        return 0; /* (an errnum alone is a refusal too) */
    int errnum = json_is_integer(n) ? (int)json_integer_value(n) : EPROTO;
    return br_errf(err, errnum > 0 ? errnum : EPROTO, "%s",
                   json_is_string(e) ? json_string_value(e) : "request failed");
}

/* The key of the flat "{s:X, s?X, ...}" entry that the format position pos falls in,
 * found by walking the arguments as jansson consumed them (each key, then one
 * pointer per value; "s%" takes two). NULL when the format is not that simple. */
static const char *key_at(const char *fmt, size_t pos, va_list ap)
{
    const char *key = NULL;
    int want_key = 1;
    for (size_t i = 0; fmt[i] && i <= pos; i++) {
        char ch = fmt[i];
        if (ch == '{' || ch == '}' || ch == ',' || ch == ':' || ch == ' ' || ch == '?' ||
            ch == '!' || ch == '*')
            continue;
        if (!strchr("sbiIfFoOn%", ch))
            return NULL; /* nested or unusual: give up naming */
        if (want_key && ch == 's') {
            key = va_arg(ap, const char *);
        } else if (ch == '%') {
            (void)va_arg(ap, void *);
        } else if (ch != 'n') {
            (void)va_arg(ap, void *);
        }
        want_key = !want_key;
        if (ch == '%')
            want_key = 1;
    }
    return key;
}

int br_msg_unpack(const br_msg_t *m, br_err_t *err, const char *fmt, ...)
{
    json_error_t jerr;
    va_list ap, again;
    va_start(ap, fmt);
    va_copy(again, ap);
    int rc = json_vunpack_ex(m->body, &jerr, JSON_STRICT, fmt, ap);
    va_end(ap);
    if (rc < 0) {
        const char *key = NULL;
        if (strncmp(jerr.text, "Expected", 8) == 0 && jerr.position > 0)
            key = key_at(fmt, (size_t)jerr.position - 1, again);
        if (key)
            br_errf(err, EPROTO, "%s: bad body: '%s': %s", m->type, key, jerr.text);
        else
            br_errf(err, EPROTO, "%s: bad body: %s", m->type, jerr.text);
    }
    va_end(again);
    return rc < 0 ? -1 : 0;
}
