/* probe.c - round-trip probes between agents over one UDP port (see probe.h). */
#include "probe.h"

#include <arpa/inet.h>
#include <math.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <sodium.h>

#include "util.h"

#define SAMPLES 5
#define MAC_LEN 16
#define BODY_LEN (BR_PROBE_PACKET - MAC_LEN)
#define LOST_AFTER 3 /* intervals without an answer */

typedef struct {
    char node[64];
    struct sockaddr_in addr;
    uint32_t seq;         /* of the ping in flight */
    int64_t next_ms;      /* when the next ping is due */
    int64_t since_ms;     /* when this peer was added */
    int64_t answered_ms;  /* last answer, 0 none */
    double samples[SAMPLES];
    int nsamples, pos;
} peer_t;

struct br_probe {
    int fd, port;
    uint8_t key[BR_PROBE_KEY_LEN];
    int keyed;
    int64_t interval_ms;
    peer_t *peers;
    int npeers;
    uint32_t seq;
};

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void put32(uint8_t *b, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        b[i] = (uint8_t)(v >> (24 - 8 * i));
}

static uint32_t get32(const uint8_t *b)
{
    return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
}

int br_probe_pack(uint8_t *buf, size_t len, int type, uint32_t seq, uint64_t t_ns,
                  const uint8_t key[BR_PROBE_KEY_LEN])
{
    if (len < BR_PROBE_PACKET)
        return -1;
    memcpy(buf, "BRP1", 4);
    buf[4] = (uint8_t)type;
    buf[5] = buf[6] = buf[7] = 0;
    put32(buf + 8, seq);
    put32(buf + 12, (uint32_t)(t_ns >> 32));
    put32(buf + 16, (uint32_t)t_ns);
    crypto_generichash(buf + BODY_LEN, MAC_LEN, buf, BODY_LEN, key, BR_PROBE_KEY_LEN);
    return BR_PROBE_PACKET;
}

int br_probe_unpack(const uint8_t *buf, size_t len, const uint8_t key[BR_PROBE_KEY_LEN],
                    int *type, uint32_t *seq, uint64_t *t_ns)
{
    uint8_t mac[MAC_LEN];
    if (len != BR_PROBE_PACKET || memcmp(buf, "BRP1", 4) != 0 || (buf[4] != 1 && buf[4] != 2))
        return -1;
    crypto_generichash(mac, MAC_LEN, buf, BODY_LEN, key, BR_PROBE_KEY_LEN);
    if (sodium_memcmp(mac, buf + BODY_LEN, MAC_LEN) != 0)
        return -1;
    *type = buf[4];
    *seq = get32(buf + 8);
    *t_ns = (uint64_t)get32(buf + 12) << 32 | get32(buf + 16);
    return 0;
}

static int open_socket(int port, br_err_t *err)
{
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return br_errf(err, errno, "probe socket: %s", strerror(errno));
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        int e = errno;
        close(fd);
        return br_errf(err, e, "probe port %d: %s", port, strerror(e));
    }
    return fd;
}

br_probe_t *br_probe_new(int port, br_err_t *err)
{
    br_probe_t *p = calloc(1, sizeof(*p));
    if (!p)
        return br_errp(err, ENOMEM, "out of memory");
    p->interval_ms = 5000;
    p->seq = (uint32_t)randombytes_random();
    p->fd = open_socket(port, err);
    if (p->fd < 0 && port != 0 && err->errnum == EADDRINUSE) {
        fprintf(stderr, "bramble-agent: %s; probing from a port the kernel picks\n",
                err->text);
        p->fd = open_socket(0, err);
    }
    struct sockaddr_in sa;
    socklen_t len = sizeof(sa);
    if (p->fd < 0 || getsockname(p->fd, (struct sockaddr *)&sa, &len) < 0) {
        if (p->fd >= 0)
            br_errf(err, errno, "probe socket: %s", strerror(errno));
        br_probe_destroy(&p);
        return NULL;
    }
    p->port = ntohs(sa.sin_port);
    return p;
}

void br_probe_destroy(br_probe_t **pp)
{
    br_probe_t *p = pp ? *pp : NULL;
    if (!p)
        return;
    if (p->fd >= 0)
        close(p->fd);
    free(p->peers);
    sodium_memzero(p->key, sizeof(p->key));
    free(p);
    *pp = NULL;
}

int br_probe_fd(const br_probe_t *p)
{
    return p->fd;
}

int br_probe_port(const br_probe_t *p)
{
    return p->port;
}

int br_probe_set_key(br_probe_t *p, const char *hex, int64_t interval_ms, br_err_t *err)
{
    size_t n = 0;
    if (!hex || sodium_hex2bin(p->key, sizeof(p->key), hex, strlen(hex), NULL, &n, NULL) < 0 ||
        n != sizeof(p->key))
        return br_errf(err, EINVAL, "probe key: expected %d hex digits",
                       2 * BR_PROBE_KEY_LEN);
    p->keyed = 1;
    if (interval_ms >= 100)
        p->interval_ms = interval_ms;
    return 0;
}

void br_probe_set_peers(br_probe_t *p, json_t *peers)
{
    size_t n = json_array_size(peers), i;
    peer_t *next = calloc(n ? n : 1, sizeof(*next));
    json_t *v;
    int count = 0;
    int64_t now = br_mono_ms();
    if (!next)
        return;
    json_array_foreach(peers, i, v) {
        const char *node = json_string_value(json_object_get(v, "node"));
        const char *addr = json_string_value(json_object_get(v, "addr"));
        json_int_t port = json_integer_value(json_object_get(v, "port"));
        peer_t *q = &next[count];
        if (!node || !addr || port < 1 || port > 65535 ||
            inet_pton(AF_INET, addr, &q->addr.sin_addr) != 1)
            continue; /* IPv4 only; others stay unmeasured */
        q->addr.sin_family = AF_INET;
        q->addr.sin_port = htons((uint16_t)port);
        br_strlcpy(q->node, node, sizeof(q->node));
        q->since_ms = now;
        for (int k = 0; k < p->npeers; k++) { /* keep what we know of it */
            peer_t *old = &p->peers[k];
            if (strcmp(old->node, node) == 0 &&
                memcmp(&old->addr, &q->addr, sizeof(q->addr)) == 0)
                *q = *old;
        }
        count++;
    }
    free(p->peers);
    p->peers = next;
    p->npeers = count;
}

static peer_t *peer_at(br_probe_t *p, const struct sockaddr_in *from)
{
    for (int i = 0; i < p->npeers; i++)
        if (p->peers[i].addr.sin_addr.s_addr == from->sin_addr.s_addr &&
            p->peers[i].addr.sin_port == from->sin_port)
            return &p->peers[i];
    return NULL;
}

void br_probe_read(br_probe_t *p)
{
    uint8_t buf[BR_PROBE_PACKET + 1];
    struct sockaddr_in from;
    for (int i = 0; i < 256; i++) {
        socklen_t flen = sizeof(from);
        ssize_t n = recvfrom(p->fd, buf, sizeof(buf), 0, (struct sockaddr *)&from, &flen);
        if (n < 0)
            return;
        int type;
        uint32_t seq;
        uint64_t t;
        if (!p->keyed || flen != sizeof(from) ||
            br_probe_unpack(buf, (size_t)n, p->key, &type, &seq, &t) < 0)
            continue; /* not ours: dropped without a word */
        if (type == 1) {
            uint8_t out[BR_PROBE_PACKET];
            br_probe_pack(out, sizeof(out), 2, seq, t, p->key);
            sendto(p->fd, out, sizeof(out), 0, (struct sockaddr *)&from, sizeof(from));
            continue;
        }
        peer_t *q = peer_at(p, &from);
        uint64_t now = now_ns();
        if (!q || seq != q->seq || t > now)
            continue; /* late, replayed or unknown */
        q->samples[q->pos] = (double)(now - t) / 1e6;
        q->pos = (q->pos + 1) % SAMPLES;
        if (q->nsamples < SAMPLES)
            q->nsamples++;
        q->answered_ms = br_mono_ms();
        q->seq = 0; /* answered: a copy of the same pong counts no more */
    }
}

int64_t br_probe_tick(br_probe_t *p, int64_t now_ms)
{
    int64_t wait = -1;
    if (!p->keyed)
        return -1;
    for (int i = 0; i < p->npeers; i++) {
        peer_t *q = &p->peers[i];
        if (q->next_ms <= now_ms) {
            uint8_t out[BR_PROBE_PACKET];
            q->seq = ++p->seq ? p->seq : ++p->seq;
            br_probe_pack(out, sizeof(out), 1, q->seq, now_ns(), p->key);
            sendto(p->fd, out, sizeof(out), 0, (struct sockaddr *)&q->addr,
                   sizeof(q->addr));
            q->next_ms = now_ms + p->interval_ms;
        }
        if (wait < 0 || q->next_ms - now_ms < wait)
            wait = q->next_ms - now_ms;
    }
    return wait;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

json_t *br_probe_report(const br_probe_t *p, int64_t now_ms)
{
    json_t *o = json_object();
    for (int i = 0; i < p->npeers; i++) {
        const peer_t *q = &p->peers[i];
        int64_t last = q->answered_ms ? q->answered_ms : q->since_ms;
        if (q->nsamples == 0 && now_ms - q->since_ms < LOST_AFTER * p->interval_ms)
            continue; /* not measured yet */
        if (q->nsamples == 0 || now_ms - last > LOST_AFTER * p->interval_ms) {
            json_object_set_new(o, q->node, json_null());
            continue;
        }
        double s[SAMPLES];
        memcpy(s, q->samples, sizeof(s));
        qsort(s, (size_t)q->nsamples, sizeof(double), cmp_double);
        json_object_set_new(o, q->node, json_real(round(s[q->nsamples / 2] * 1000) / 1000));
    }
    return o;
}
