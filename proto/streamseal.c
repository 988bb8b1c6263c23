/* streamseal.c - sealing a stream's frames end to end (streamseal.h). */
#include "streamseal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sodium.h>
#include <zmq.h>

void br_streamseal_key(char out[BR_STREAM_KEY_HEX + 1])
{
    unsigned char raw[BR_STREAM_KEY];
    randombytes_buf(raw, sizeof(raw));
    sodium_bin2hex(out, BR_STREAM_KEY_HEX + 1, raw, sizeof(raw));
    sodium_memzero(raw, sizeof(raw));
}

static int unhex(const char *hex, unsigned char out[BR_STREAM_KEY])
{
    size_t got = 0;
    return hex && strlen(hex) == BR_STREAM_KEY_HEX &&
                   sodium_hex2bin(out, BR_STREAM_KEY, hex, BR_STREAM_KEY_HEX, NULL, &got,
                                  NULL) == 0 &&
                   got == BR_STREAM_KEY
               ? 0
               : -1;
}

int br_streamseal_key_ok(const char *hex)
{
    unsigned char raw[BR_STREAM_KEY];
    int ok = unhex(hex, raw) == 0;
    sodium_memzero(raw, sizeof(raw));
    return ok;
}

int br_streamseal_init(br_streamseal_t *s, const char *hex, br_stream_side_t side,
                       br_err_t *err)
{
    memset(s, 0, sizeof(*s));
    s->side = (uint8_t)side;
    if (unhex(hex, s->key) < 0)
        return br_errf(err, EINVAL, "a stream key must be %d hex characters",
                       BR_STREAM_KEY_HEX);
    return 0;
}

void br_streamseal_fini(br_streamseal_t *s)
{
    sodium_memzero(s, sizeof(*s));
}

/* The nonce of frame n of direction side. */
static void nonce(unsigned char out[crypto_aead_chacha20poly1305_ietf_NPUBBYTES],
                  uint8_t side, uint64_t n)
{
    memset(out, 0, crypto_aead_chacha20poly1305_ietf_NPUBBYTES);
    out[0] = side;
    for (int i = 11; i >= 4; i--, n >>= 8)
        out[i] = (unsigned char)(n & 0xff);
}

void br_streamseal_seal(br_streamseal_t *s, unsigned char hdr[BR_STREAM_HEADER], uint8_t type,
                        uint8_t channel, uint32_t stream, uint64_t arg, void *buf, size_t len)
{
    unsigned char n[crypto_aead_chacha20poly1305_ietf_NPUBBYTES];
    br_stream_hdr_t h = {type, channel, stream, arg, BR_STREAM_SEALED};
    br_stream_hdr_encode(&h, hdr);
    nonce(n, s->side, s->sent++);
    crypto_aead_chacha20poly1305_ietf_encrypt(buf, NULL, buf, len, hdr, BR_STREAM_HEADER,
                                              NULL, n, s->key);
}

int br_streamseal_send_buf(br_streamseal_t *s, void *sock, uint8_t type, uint8_t channel,
                           uint32_t stream, uint64_t arg, void *buf, size_t len)
{
    unsigned char hdr[BR_STREAM_HEADER];
    br_streamseal_seal(s, hdr, type, channel, stream, arg, buf, len);
    if (zmq_send(sock, hdr, sizeof(hdr), ZMQ_SNDMORE) < 0)
        return -1;
    return zmq_send(sock, buf, len + BR_STREAM_SEAL, 0) < 0 ? -1 : 0;
}

static void free_buf(void *data, void *hint)
{
    (void)hint;
    free(data);
}

int br_streamseal_send_owned(br_streamseal_t *s, void *sock, uint8_t type, uint8_t channel,
                             uint32_t stream, uint64_t arg, void *buf, size_t len)
{
    unsigned char hdr[BR_STREAM_HEADER];
    zmq_msg_t m;
    br_streamseal_seal(s, hdr, type, channel, stream, arg, buf, len);
    if (zmq_msg_init_data(&m, buf, len + BR_STREAM_SEAL, free_buf, NULL) < 0) {
        free(buf);
        return -1;
    }
    if (zmq_send(sock, hdr, sizeof(hdr), ZMQ_SNDMORE) < 0 || zmq_msg_send(&m, sock, 0) < 0) {
        int e = errno;
        zmq_msg_close(&m);
        errno = e;
        return -1;
    }
    return 0;
}

int br_streamseal_send(br_streamseal_t *s, void *sock, uint8_t type, uint8_t channel,
                       uint32_t stream, uint64_t arg, const void *payload, size_t len)
{
    unsigned char buf[BR_STREAM_REASON_MAX + BR_STREAM_SEAL];
    if (len > BR_STREAM_REASON_MAX)
        len = BR_STREAM_REASON_MAX;
    if (len)
        memcpy(buf, payload, len);
    return br_streamseal_send_buf(s, sock, type, channel, stream, arg, buf, len);
}

static const char *type_name(uint8_t type)
{
    static const char *const names[BR_STREAM_TYPE_MAX] = {
        "?", "ATTACH", "ATTACHED", "DATA", "CREDIT", "EOF", "WINCH", "EXIT", "CLOSE", "PING"};
    return type < BR_STREAM_TYPE_MAX ? names[type] : "?";
}

int br_streamseal_open(br_streamseal_t *s, const br_stream_hdr_t *h, void *buf, size_t *len,
                       br_err_t *err)
{
    if (!(h->flags & BR_STREAM_SEALED)) {
        if (h->type == BR_STREAM_ATTACHED || h->type == BR_STREAM_PING ||
            h->type == BR_STREAM_CLOSE)
            return 0;
        return br_errf(err, EPROTO, "an unsealed %s frame (only the relay's ATTACHED, "
                                    "PING and CLOSE may be)", type_name(h->type));
    }
    unsigned char hdr[BR_STREAM_HEADER], n[crypto_aead_chacha20poly1305_ietf_NPUBBYTES];
    unsigned long long plen = 0;
    br_stream_hdr_encode(h, hdr);
    nonce(n, (uint8_t)!s->side, s->got);
    if (!buf || *len < BR_STREAM_SEAL ||
        crypto_aead_chacha20poly1305_ietf_decrypt(buf, &plen, NULL, buf, *len, hdr,
                                                  sizeof(hdr), n, s->key) != 0)
        return br_errf(err, EPROTO, "a %s frame failed its check (changed, replayed, out "
                                    "of order, or not sealed with this stream's key)",
                       type_name(h->type));
    s->got++;
    *len = (size_t)plen;
    return 0;
}
