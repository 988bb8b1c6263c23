/* net_probe.c - bramble-net-probe: TCP throughput and round trip between every
 * ordered pair of nodes of a gang job (one process per node), for `bramble probe
 * --bandwidth`. The plain-TCP sibling of nccl_probe.c; docs/probe-nccl.md says what
 * it measures and how to run it.
 *
 * Reading order: options and environment, socket helpers, addresses and the
 * control messages, the bootstrap (every rank connects to rank 0 on MASTER_PORT and
 * learns the others' data addresses), one transfer (the sender's and the
 * receiver's side), rank 0's orchestration and output, the other ranks' loop, main.
 *
 * Protocol, all integers big endian. Control connections (rank r <-> rank 0, kept
 * open for the whole run):
 *   r -> 0  hello: HELLO_MAGIC, rank u32, world u32, data port u16, 0 u16
 *   0 -> r  table: `world` entries of ADDR_BYTES (address as IPv6, IPv4 mapped;
 *           scope id u32; port u16; 0 u16); entry 0 is rank 0 as r reached it
 *   then MSG_BYTES messages (type, peer u32; x, y u64), see msg_type_t.
 * Data connections (sender -> receiver's data listener, one per transfer):
 *   DATA_MAGIC, sender rank u32, 0 u32; `pings` 1-byte round trips (the sender
 *   writes, the receiver echoes); `bytes` of data; the sender shuts down its side,
 *   the receiver closes after the end of stream.
 *
 * Exit status: 0 measured, 1 failed at run time (bootstrap, a transfer, a peer
 * lost), 2 bad usage or missing environment. */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "probe_boot.h"

#define PROG "bramble-net-probe"
#define HELLO_MAGIC "BRNETP01" /* first 8 bytes a rank sends to rank 0 */
#define HELLO_BYTES 20         /* magic, rank, world, data port, 0 */
#define DATA_MAGIC "BRNETD01"  /* first 8 bytes on a data connection */
#define DATA_HELLO_BYTES 16    /* magic, sender rank, 0 */
#define ADDR_BYTES 24          /* one table entry */
#define MSG_BYTES 24           /* one control message */
#define MAX_NODES 1024         /* N(N-1) transfers: far more is not a probe */
#define MAX_PINGS 1000
#define GRACE_MS 2000        /* rank 0 waits this much longer than the ranks */
#define PROGRESS_MS 1000     /* a receiver tells rank 0 it is alive this often */
#define BUF_BYTES (1u << 20) /* what one send or recv moves at most */

typedef struct {
    uint64_t bytes;
    int pings, timeout_s, human;
} opts_t;

typedef struct {
    int rank, world;
    const char *master_addr, *master_port;
    char **names;  /* world names: BRAMBLE_NODELIST, else "rank<R>" */
    char *namebuf; /* what names point into */
} env_t;

/* A rank's data listener, as the table carries it. */
typedef struct {
    struct sockaddr_storage sa; /* port included */
    socklen_t len;
} addr_t;

typedef enum {
    MSG_RECV = 1, /* 0 -> receiver: peer = sender, x = bytes, y = pings */
    MSG_SEND,     /* 0 -> sender: peer = receiver, x = bytes, y = pings */
    MSG_PROGRESS, /* receiver -> 0: peer = sender, x = bytes so far */
    MSG_RECVD,    /* receiver -> 0: peer = sender, x = bytes, y = nanoseconds */
    MSG_SENT,     /* sender -> 0: peer = receiver, x = bytes, y = median rtt ns */
    MSG_FAILED,   /* either -> 0: peer = the other side, x = errno, y = stage */
    MSG_DONE,     /* 0 -> everyone: the end, exit 0 */
} msg_type_t;

typedef struct {
    uint32_t type, peer;
    uint64_t x, y;
} msg_t;

/* Where a transfer failed, for messages (MSG_FAILED carries it). */
typedef enum {
    ST_CONNECT = 1,
    ST_ACCEPT,
    ST_HANDSHAKE,
    ST_PING,
    ST_DATA,
    ST_SHORT, /* the data ended before `bytes` */
    ST_END,
    ST_REPORT, /* telling rank 0 */
} stage_t;

#define NO_RTT UINT64_MAX /* MSG_SENT's y without pings */

/* the data buffer: senders write it over and over, receivers read into it */
static char buf[BUF_BYTES];

/* ---- options and environment */

static void usage(FILE *f)
{
    fprintf(
        f,
        "usage: " PROG
        " [--bytes N] [--pings N] [--timeout SECONDS] [--human]\n"
        "\n"
        "Measures TCP throughput between every ordered pair of the nodes of a gang\n"
        "job (one process per node): for each pair, one at a time, the sender\n"
        "writes --bytes over a fresh connection as fast as it can and the receiver\n"
        "times them from the first byte to the end of the stream. Before the data,\n"
        "--pings 1-byte round trips on the same connection give the pair's TCP\n"
        "round trip (the median).\n"
        "\n"
        "  --bytes N        bytes per transfer (default 64M; K, M, G: powers of 1024)\n"
        "  --pings N        round trips per pair before the data (default 5; 0: none)\n"
        "  --timeout S      how long ranks wait for each other at start, and for any\n"
        "                   progress during a transfer (default 60)\n"
        "  --human          a table instead of JSON lines\n"
        "  --help           this text\n"
        "\n"
        "Environment (bramble sets it for a gang job):\n"
        "  NODE_RANK, NNODES         required: this node's rank and the gang size\n"
        "  MASTER_ADDR, MASTER_PORT  required when NNODES > 1: rank 0 listens on\n"
        "                            MASTER_PORT, the others connect there\n"
        "  BRAMBLE_NODELIST          node names in rank order, comma-separated, for\n"
        "                            the output (default rank0, rank1, ...)\n"
        "\n"
        "Output (rank 0): one JSON line per ordered pair, in the order measured\n"
        "  {\"from\":\"a\",\"to\":\"b\",\"bytes\":..,\"seconds\":..,\"gbit_s\":..,"
        "\"rtt_ms\":..}\n"
        "then {\"result\":\"ok\",\"nodes\":[..],\"bytes\":..,\"gbit_s\":[[..]..],"
        "\"rtt_ms\":[[..]..]},\n"
        "the matrices in rank order, a row per sender, null on the diagonal.\n"
        "Gbit/s are 1e9 bits per second; rtt_ms is null with --pings 0.\n"
        "\n"
        "Exit status: 0 measured; 1 failed (rank 0 unreachable, a transfer failed, a\n"
        "peer lost); 2 bad usage or missing environment.\n");
}

enum { O_BYTES = 256, O_PINGS, O_TIMEOUT, O_HUMAN };

/* One option for probe_getopt; nonzero for a bad value. */
static int take_opt(void *ctx, int c, const char *arg)
{
    opts_t *o = ctx;
    switch (c) {
    case O_BYTES:
        return probe_parse_size(arg, UINT64_MAX >> 2, &o->bytes) < 0 || !o->bytes;
    case O_PINGS:
        return probe_parse_count(arg, 0, MAX_PINGS, &o->pings);
    case O_TIMEOUT:
        return probe_parse_count(arg, 1, 86400, &o->timeout_s);
    case O_HUMAN:
        o->human = 1;
        break;
    }
    return 0;
}

/* 0: run; 1: --help printed; -1: usage error printed. */
static int parse_args(int argc, char **argv, opts_t *o)
{
    static const struct option longopts[] = {
        {"bytes", required_argument, NULL, O_BYTES},
        {"pings", required_argument, NULL, O_PINGS},
        {"timeout", required_argument, NULL, O_TIMEOUT},
        {"human", no_argument, NULL, O_HUMAN},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    *o = (opts_t){.bytes = 64u << 20, .pings = 5, .timeout_s = 60};
    return probe_getopt(argc, argv, longopts, take_opt, o, usage);
}

static void env_free(env_t *e)
{
    free(e->names);
    free(e->namebuf);
    e->names = NULL;
    e->namebuf = NULL;
}

/* The node names: BRAMBLE_NODELIST split at commas (exactly NNODES non-empty
 * names), else "rank0", "rank1", ... */
static int read_names(env_t *e)
{
    const char *list = getenv("BRAMBLE_NODELIST");
    size_t len = list && *list ? strlen(list) + 1 : (size_t)e->world * 16;
    e->names = calloc((size_t)e->world, sizeof(*e->names));
    e->namebuf = malloc(len);
    if (!e->names || !e->namebuf)
        return probe_errf("out of memory");
    if (!list || !*list) {
        char *p = e->namebuf;
        for (int r = 0; r < e->world; r++) {
            e->names[r] = p;
            p += snprintf(p, 16, "rank%d", r) + 1;
        }
        return 0;
    }
    memcpy(e->namebuf, list, len);
    int n = 0;
    for (char *p = e->namebuf, *comma; p; p = comma ? comma + 1 : NULL) {
        comma = strchr(p, ',');
        if (comma)
            *comma = '\0';
        if (!*p || n == e->world) {
            n = -1;
            break;
        }
        e->names[n++] = p;
    }
    if (n != e->world)
        return probe_errf(
            "BRAMBLE_NODELIST='%s' is not NNODES=%d non-empty names, "
            "comma-separated",
            list, e->world);
    return 0;
}

static int read_env(env_t *e)
{
    *e = (env_t){0};
    if (probe_env_int("NNODES", 1, 0, 1, MAX_NODES, &e->world) < 0 ||
        probe_env_int("NODE_RANK", 1, 0, 0, e->world - 1, &e->rank) < 0)
        return -1;
    probe_log_rank(e->rank);
    if (read_names(e) < 0)
        return -1;
    /* with NNODES 1, nobody to measure */
    return probe_env_master(e->world, &e->master_addr, &e->master_port);
}

/* ---- sockets (more in probe_boot.h) */

static int set_int_opt(int fd, int level, int name, int value)
{
    return setsockopt(fd, level, name, &value, sizeof(value));
}

/* Control connections: small messages at once, and a host that vanishes while a
 * rank waits for its next order is noticed (~25 s) rather than waited for. */
static int ctl_opts(int fd)
{
    if (set_int_opt(fd, IPPROTO_TCP, TCP_NODELAY, 1) < 0 ||
        set_int_opt(fd, SOL_SOCKET, SO_KEEPALIVE, 1) < 0 ||
        set_int_opt(fd, IPPROTO_TCP, TCP_KEEPIDLE, 10) < 0 ||
        set_int_opt(fd, IPPROTO_TCP, TCP_KEEPINTVL, 5) < 0 ||
        set_int_opt(fd, IPPROTO_TCP, TCP_KEEPCNT, 3) < 0)
        return probe_errf("setsockopt on a control connection: %s", strerror(errno));
    return 0;
}

/* The port a socket is bound to; -1 with errno. */
static int local_port(int fd)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) < 0)
        return -1;
    if (ss.ss_family == AF_INET6)
        return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
    return ntohs(((struct sockaddr_in *)&ss)->sin_port);
}

/* ---- addresses and messages on the wire */

/* "10.0.0.2:4567", "[fe80::1%2]:4567": for messages. */
static const char *addr_str(const addr_t *a, char *out, size_t len)
{
    char host[INET6_ADDRSTRLEN + 16] = "?";
    int port = 0;
    if (a->sa.ss_family == AF_INET) {
        const struct sockaddr_in *s = (const struct sockaddr_in *)&a->sa;
        inet_ntop(AF_INET, &s->sin_addr, host, sizeof(host));
        port = ntohs(s->sin_port);
        snprintf(out, len, "%s:%d", host, port);
    } else {
        const struct sockaddr_in6 *s = (const struct sockaddr_in6 *)&a->sa;
        inet_ntop(AF_INET6, &s->sin6_addr, host, sizeof(host));
        port = ntohs(s->sin6_port);
        if (s->sin6_scope_id)
            snprintf(out, len, "[%s%%%" PRIu32 "]:%d", host, s->sin6_scope_id, port);
        else
            snprintf(out, len, "[%s]:%d", host, port);
    }
    return out;
}

static int addr_port(const addr_t *a)
{
    if (a->sa.ss_family == AF_INET)
        return ntohs(((const struct sockaddr_in *)&a->sa)->sin_port);
    return ntohs(((const struct sockaddr_in6 *)&a->sa)->sin6_port);
}

/* An address as a table entry: IPv4 as v4-mapped IPv6, with `port`. */
static void addr_pack(const struct sockaddr_storage *ss, int port, unsigned char *p)
{
    memset(p, 0, ADDR_BYTES);
    if (ss->ss_family == AF_INET) {
        p[10] = p[11] = 0xff;
        memcpy(p + 12, &((const struct sockaddr_in *)ss)->sin_addr, 4);
    } else {
        const struct sockaddr_in6 *s = (const struct sockaddr_in6 *)ss;
        memcpy(p, &s->sin6_addr, 16);
        probe_put32(p + 16, s->sin6_scope_id);
    }
    p[20] = (unsigned char)(port >> 8);
    p[21] = (unsigned char)port;
}

/* A table entry back to a socket address (v4-mapped ones as plain IPv4, so that
 * an IPv4-only host can connect). */
static void addr_unpack(const unsigned char *p, addr_t *a)
{
    static const unsigned char mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    uint16_t port = (uint16_t)(p[20] << 8 | p[21]);
    memset(a, 0, sizeof(*a));
    if (memcmp(p, mapped, 12) == 0) {
        struct sockaddr_in *s = (struct sockaddr_in *)&a->sa;
        s->sin_family = AF_INET;
        memcpy(&s->sin_addr, p + 12, 4);
        s->sin_port = htons(port);
        a->len = sizeof(*s);
    } else {
        struct sockaddr_in6 *s = (struct sockaddr_in6 *)&a->sa;
        s->sin6_family = AF_INET6;
        memcpy(&s->sin6_addr, p, 16);
        s->sin6_scope_id = probe_get32(p + 16);
        s->sin6_port = htons(port);
        a->len = sizeof(*s);
    }
}

static int msg_send(int fd, msg_type_t type, int peer, uint64_t x, uint64_t y,
                    int64_t deadline)
{
    unsigned char b[MSG_BYTES];
    probe_put32(b, (uint32_t)type);
    probe_put32(b + 4, (uint32_t)peer);
    probe_put64(b + 8, x);
    probe_put64(b + 16, y);
    return probe_sock_xfer(fd, b, sizeof(b), 1, deadline);
}

/* One whole message; 1 at a clean end of stream before it, 0, or -1 with errno. */
static int msg_recv(int fd, msg_t *m, int64_t deadline)
{
    unsigned char b[MSG_BYTES];
    ssize_t n;
    for (;;) { /* the first byte apart, to tell a clean end from a cut message */
        n = recv(fd, b, 1, 0);
        if (n >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
            break;
        if (errno != EINTR && probe_sock_wait(fd, POLLIN, deadline) < 0)
            return -1;
    }
    if (n == 0)
        return 1;
    if (n < 0 || probe_sock_xfer(fd, b + 1, sizeof(b) - 1, 0, deadline) < 0)
        return -1;
    *m = (msg_t){.type = probe_get32(b),
                 .peer = probe_get32(b + 4),
                 .x = probe_get64(b + 8),
                 .y = probe_get64(b + 16)};
    return 0;
}

/* ---- one transfer */

static const char *stage_str(uint64_t st)
{
    switch (st) {
    case ST_CONNECT:
        return "connect";
    case ST_ACCEPT:
        return "waiting for the connection";
    case ST_HANDSHAKE:
        return "handshake";
    case ST_PING:
        return "round trips";
    case ST_DATA:
        return "data";
    case ST_SHORT:
        return "the data stream ended early";
    case ST_END:
        return "end of transfer";
    case ST_REPORT:
        return "reporting to rank 0";
    }
    return "transfer";
}

typedef struct {
    uint64_t bytes;
    int pings;
    int64_t idle_ms; /* longest wait for any progress */
} xfer_t;

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* 1-byte round trips on a fresh connection; the median in *rtt_ns. */
static int send_pings(int fd, int pings, int64_t idle_ms, uint64_t *rtt_ns)
{
    int64_t t[MAX_PINGS];
    for (int k = 0; k < pings; k++) {
        char c = (char)k;
        int64_t t0 = probe_now_ns();
        if (probe_sock_xfer(fd, &c, 1, 1, probe_now_ms() + idle_ms) < 0 ||
            probe_sock_xfer(fd, &c, 1, 0, probe_now_ms() + idle_ms) < 0)
            return -1;
        t[k] = probe_now_ns() - t0;
    }
    qsort(t, (size_t)pings, sizeof(t[0]), cmp_i64);
    *rtt_ns = pings ? (uint64_t)(pings % 2 ? t[pings / 2]
                                           : (t[pings / 2 - 1] + t[pings / 2]) / 2)
                    : NO_RTT;
    return 0;
}

/* The bulk: x->bytes from the static buffer, then our side shut down. */
static int send_data(int fd, const xfer_t *x)
{
    uint64_t left = x->bytes;
    while (left > 0) {
        ssize_t n =
            send(fd, buf, left < BUF_BYTES ? (size_t)left : BUF_BYTES, MSG_NOSIGNAL);
        if (n > 0) {
            left -= (uint64_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
            return -1;
        if (probe_sock_wait(fd, POLLOUT, probe_now_ms() + x->idle_ms) < 0)
            return -1;
    }
    return shutdown(fd, SHUT_WR);
}

/* The receiver closes once it has read everything: wait for that, so that the next
 * transfer does not overlap this one's tail. */
static int wait_close(int fd, int64_t idle_ms)
{
    char c;
    for (;;) {
        ssize_t n = recv(fd, &c, 1, 0);
        if (n == 0)
            return 0;
        if (n > 0) {
            errno = EPROTO;
            return -1;
        }
        if (errno == EINTR)
            continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK)
            return -1;
        if (probe_sock_wait(fd, POLLIN, probe_now_ms() + idle_ms) < 0)
            return -1;
    }
}

/* The sender's side, to the data listener at `to`: 0 with the median round trip,
 * or -1 with errno and *stage. */
static int xfer_send(int rank, const addr_t *to, const xfer_t *x, uint64_t *rtt_ns,
                     stage_t *stage)
{
    unsigned char hello[DATA_HELLO_BYTES] = {0};
    memcpy(hello, DATA_MAGIC, 8);
    probe_put32(hello + 8, (uint32_t)rank);
    *stage = ST_CONNECT;
    int fd = probe_connect((const struct sockaddr *)&to->sa, to->len,
                           probe_now_ms() + x->idle_ms),
        rc = -1;
    if (fd < 0)
        return -1;
    if (set_int_opt(fd, IPPROTO_TCP, TCP_NODELAY, 1) < 0)
        goto done;
    *stage = ST_HANDSHAKE;
    if (probe_sock_xfer(fd, hello, sizeof(hello), 1, probe_now_ms() + x->idle_ms) < 0)
        goto done;
    *stage = ST_PING;
    if (send_pings(fd, x->pings, x->idle_ms, rtt_ns) < 0)
        goto done;
    *stage = ST_DATA;
    if (send_data(fd, x) < 0)
        goto done;
    *stage = ST_END;
    rc = wait_close(fd, x->idle_ms);
done:;
    int saved = errno;
    probe_sock_close(fd);
    errno = saved;
    return rc;
}

/* Accept the sender's connection on the data listener: the first one that says
 * it is rank `from` (anything else is closed and ignored). */
static int accept_from(int lfd, int from, int64_t idle_ms)
{
    int64_t deadline = probe_now_ms() + idle_ms;
    for (;;) {
        if (probe_sock_wait(lfd, POLLIN, deadline) < 0)
            return -1;
        int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ||
                errno == ECONNABORTED)
                continue;
            return -1;
        }
        unsigned char hello[DATA_HELLO_BYTES];
        int64_t d = probe_now_ms() + PROBE_PEER_TIMEOUT_MS;
        if (probe_sock_xfer(fd, hello, sizeof(hello), 0, d < deadline ? d : deadline) ==
                0 &&
            memcmp(hello, DATA_MAGIC, 8) == 0 &&
            probe_get32(hello + 8) == (uint32_t)from)
            return fd;
        probe_errf("ignored a data connection that is not from rank %d", from);
        probe_sock_close(fd);
    }
}

/* Echo the sender's round trips. */
static int echo_pings(int fd, int pings, int64_t idle_ms)
{
    for (int k = 0; k < pings; k++) {
        char c;
        if (probe_sock_xfer(fd, &c, 1, 0, probe_now_ms() + idle_ms) < 0 ||
            probe_sock_xfer(fd, &c, 1, 1, probe_now_ms() + idle_ms) < 0)
            return -1;
    }
    return 0;
}

/* Read to the end of stream; the time from the first byte's arrival to the end in
 * *ns. Every PROGRESS_MS a MSG_PROGRESS on ctl (when >= 0) keeps rank 0 waiting. */
static int recv_data(int fd, int from, const xfer_t *x, int ctl, uint64_t *got,
                     int64_t *ns, stage_t *stage)
{
    int64_t t0 = -1, last = probe_now_ms();
    *got = 0;
    for (;;) {
        if (probe_sock_wait(fd, POLLIN, probe_now_ms() + x->idle_ms) < 0)
            return -1;
        if (t0 < 0)
            t0 = probe_now_ns();
        ssize_t n = recv(fd, buf, BUF_BYTES, 0);
        if (n == 0)
            break;
        if (n < 0) {
            if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)
                continue;
            return -1;
        }
        *got += (uint64_t)n;
        if (*got > x->bytes) {
            errno = EPROTO;
            return -1;
        }
        if (ctl >= 0 && probe_now_ms() - last >= PROGRESS_MS) {
            last = probe_now_ms();
            *stage = ST_REPORT;
            if (msg_send(ctl, MSG_PROGRESS, from, *got, 0, last + x->idle_ms) < 0)
                return -1;
            *stage = ST_DATA;
        }
    }
    *ns = probe_now_ns() - t0;
    if (*ns <= 0)
        *ns = 1;
    if (*got < x->bytes) {
        *stage = ST_SHORT;
        errno = ECONNRESET;
        return -1;
    }
    return 0;
}

/* The receiver's side, from rank `from` through the data listener lfd: 0 with the
 * bytes and the time, or -1 with errno and *stage. */
static int xfer_recv(int lfd, int from, const xfer_t *x, int ctl, uint64_t *got,
                     int64_t *ns, stage_t *stage)
{
    *stage = ST_ACCEPT;
    int fd = accept_from(lfd, from, x->idle_ms), rc = -1;
    if (fd < 0)
        return -1;
    *stage = ST_HANDSHAKE;
    if (set_int_opt(fd, IPPROTO_TCP, TCP_NODELAY, 1) < 0)
        goto done;
    *stage = ST_PING;
    if (echo_pings(fd, x->pings, x->idle_ms) < 0)
        goto done;
    *stage = ST_DATA;
    rc = recv_data(fd, from, x, ctl, got, ns, stage);
done:;
    int saved = errno;
    probe_sock_close(fd);
    errno = saved;
    return rc;
}

/* ---- the run's state */

typedef struct {
    const opts_t *o;
    const env_t *e;
    xfer_t x;
    int dfd;            /* this rank's data listener */
    int dport;          /* its port */
    int *ctl;           /* rank 0: ctl[r] to rank r > 0; the others: ctl[0] only */
    addr_t *addr;       /* data listeners: the table (rank 0: r > 0 only) */
    double *gbit, *rtt; /* rank 0: world x world results, row = sender */
    struct pollfd *pfd; /* rank 0: one per control connection */
} run_t;

static void run_free(run_t *R)
{
    if (R->ctl)
        for (int r = 0; r < R->e->world; r++)
            probe_sock_close(R->ctl[r]);
    probe_sock_close(R->dfd);
    free(R->ctl);
    free(R->addr);
    free(R->gbit);
    free(R->rtt);
    free(R->pfd);
}

static int run_init(run_t *R, const opts_t *o, const env_t *e)
{
    size_t w = (size_t)e->world;
    *R = (run_t){.o = o,
                 .e = e,
                 .dfd = -1,
                 .x = {.bytes = o->bytes,
                       .pings = o->pings,
                       .idle_ms = (int64_t)o->timeout_s * 1000}};
    R->ctl = malloc(w * sizeof(*R->ctl));
    R->addr = calloc(w, sizeof(*R->addr));
    if (e->rank == 0) {
        R->gbit = malloc(w * w * sizeof(*R->gbit));
        R->rtt = malloc(w * w * sizeof(*R->rtt));
        R->pfd = malloc(w * sizeof(*R->pfd));
    }
    if (!R->ctl || !R->addr || (e->rank == 0 && (!R->gbit || !R->rtt || !R->pfd)))
        return probe_errf("out of memory");
    for (size_t r = 0; r < w; r++)
        R->ctl[r] = -1;
    if (e->world == 1)
        return 0;
    if ((R->dfd = probe_listen(0, 8)) < 0 || (R->dport = local_port(R->dfd)) < 0)
        return probe_errf("cannot open the data listener: %s", strerror(errno));
    return 0;
}

/* "rank 2 (node-c)" for rank 0's messages. */
static const char *who(const run_t *R, int r, char *out, size_t len)
{
    snprintf(out, len, "rank %d (%s)", r, R->e->names[r]);
    return out;
}

/* ---- bootstrap */

/* One rank's hello (data port u16 after rank 0's checks): keep its connection as
 * ctl[r] with r's data address. 0 when taken. */
static int boot_take(run_t *R, int fd, const unsigned char *hello, uint32_t r,
                     const struct sockaddr_storage *peer)
{
    int port = hello[16] << 8 | hello[17];
    if (port == 0)
        return probe_errf("refused rank %" PRIu32 ": no data port", r);
    unsigned char entry[ADDR_BYTES];
    addr_pack(peer, port, entry);
    addr_unpack(entry, &R->addr[r]);
    R->ctl[r] = fd;
    return 0;
}

/* Rank 0, step 2: send each rank the table; entry 0 is rank 0's address as that
 * rank reached it (the local end of its connection). */
static int boot_table(run_t *R, int64_t deadline)
{
    int world = R->e->world;
    size_t len = (size_t)world * ADDR_BYTES;
    unsigned char *t = malloc(len);
    if (!t)
        return probe_errf("out of memory");
    int rc = 0;
    for (int r = 1; r < world && rc == 0; r++)
        addr_pack(&R->addr[r].sa, addr_port(&R->addr[r]), t + (size_t)r * ADDR_BYTES);
    for (int r = 1; r < world && rc == 0; r++) {
        struct sockaddr_storage me;
        socklen_t sl = sizeof(me);
        char name[96];
        if (getsockname(R->ctl[r], (struct sockaddr *)&me, &sl) < 0)
            rc = probe_errf("getsockname: %s", strerror(errno));
        else {
            addr_pack(&me, R->dport, t);
            if (probe_sock_xfer(R->ctl[r], t, len, 1, deadline) < 0)
                rc = probe_errf("sending the address table to %s: %s",
                                who(R, r, name, sizeof(name)), strerror(errno));
        }
    }
    free(t);
    return rc;
}

/* Rank 0: take the world - 1 other ranks' hellos before the deadline, then send
 * them the table. */
static int boot_serve(run_t *R, int64_t deadline)
{
    int world = R->e->world, rc = -1;
    probe_boot_cfg_t cfg = {.port = atoi(R->e->master_port),
                            .world = world,
                            .timeout_s = R->o->timeout_s,
                            .magic = HELLO_MAGIC,
                            .hello_bytes = HELLO_BYTES,
                            .done_what = "connected",
                            .names = (const char *const *)R->e->names,
                            .nodes = 1};
    probe_boot_t *b = probe_boot_new(&cfg);
    if (!b)
        return -1;
    while (probe_boot_taken(b) < world - 1) {
        unsigned char hello[HELLO_BYTES];
        struct sockaddr_storage peer;
        uint32_t r;
        int c = probe_boot_accept(b, deadline, hello, &peer, &r);
        if (c < 0)
            goto done;
        if (boot_take(R, c, hello, r, &peer) == 0)
            probe_boot_take(b, r);
        else
            probe_sock_close(c);
    }
    for (int r = 1; r < world; r++)
        if (ctl_opts(R->ctl[r]) < 0)
            goto done;
    rc = boot_table(R, deadline);
done:
    probe_boot_destroy(&b);
    return rc;
}

/* Ranks > 0: connect to rank 0 (retrying until the deadline: it may start later),
 * send the hello, read the table. */
static int boot_join(run_t *R, int64_t deadline)
{
    const env_t *e = R->e;
    int fd = probe_join(e->master_addr, e->master_port, deadline, R->o->timeout_s);
    if (fd < 0)
        return -1;
    R->ctl[0] = fd;
    if (ctl_opts(fd) < 0)
        return -1;
    unsigned char hello[HELLO_BYTES] = {0};
    memcpy(hello, HELLO_MAGIC, 8);
    probe_put32(hello + 8, (uint32_t)e->rank);
    probe_put32(hello + 12, (uint32_t)e->world);
    hello[16] = (unsigned char)(R->dport >> 8);
    hello[17] = (unsigned char)R->dport;
    size_t len = (size_t)e->world * ADDR_BYTES;
    unsigned char *t = malloc(len);
    if (!t)
        return probe_errf("out of memory");
    /* rank 0 answers once every rank is in, within its own timeout: at most
     * --timeout from now */
    int64_t table_deadline =
        probe_now_ms() + (int64_t)R->o->timeout_s * 1000 + GRACE_MS;
    int rc = 0;
    if (probe_sock_xfer(fd, hello, sizeof(hello), 1, deadline) < 0 ||
        probe_sock_xfer(fd, t, len, 0, table_deadline) < 0)
        rc = probe_errf(
            "joining rank 0 at %s:%s: %s (rank 0 refuses a wrong NNODES or a "
            "duplicate NODE_RANK, and gives up when a rank is missing: see its output)",
            e->master_addr, e->master_port, strerror(errno));
    for (int r = 0; r < e->world && rc == 0; r++)
        addr_unpack(t + (size_t)r * ADDR_BYTES, &R->addr[r]);
    free(t);
    return rc;
}

/* ---- rank 0: the measurements */

/* A failure report or a lost connection from rank r as the text of an error. */
static int peer_failed(const run_t *R, int r, int sender, int other, const msg_t *m)
{
    char a[96], b[96], at[96];
    who(R, r, a, sizeof(a));
    who(R, other, b, sizeof(b));
    if (sender)
        return probe_errf("%s could not send to %s at %s: %s: %s", a, b,
                          addr_str(&R->addr[other], at, sizeof(at)), stage_str(m->y),
                          strerror((int)m->x));
    return probe_errf("%s could not receive from %s at %s: %s: %s", a, b,
                      addr_str(&R->addr[other], at, sizeof(at)), stage_str(m->y),
                      strerror((int)m->x));
}

/* A control connection that ended or failed, or a message out of turn. */
static int peer_lost(const run_t *R, int r, int got)
{
    char a[96], at[96];
    who(R, r, a, sizeof(a));
    if (got > 0 || (got < 0 && errno == ECONNRESET))
        return probe_errf(
            "lost %s at %s: it closed the connection (exited or was killed: "
            "see its output)",
            a, addr_str(&R->addr[r], at, sizeof(at)));
    if (got < 0)
        return probe_errf("waiting for %s: %s", a, strerror(errno));
    return probe_errf("%s sent a message out of turn", a);
}

/* One message from rank r about its transfer with `other` (as sender when
 * `sender`): 0 for its report (MSG_SENT or MSG_RECVD in *m), 1 for progress; a
 * failure report or a lost peer is an error. */
static int take_report(run_t *R, int r, int sender, int other, msg_t *m)
{
    int got = msg_recv(R->ctl[r], m, probe_now_ms() + R->x.idle_ms + GRACE_MS);
    if (got != 0)
        return peer_lost(R, r, got);
    if (m->type == MSG_PROGRESS && !sender && m->peer == (uint32_t)other)
        return 1;
    if (m->type == MSG_FAILED)
        return peer_failed(R, r, sender, other, m);
    if (m->type != (sender ? MSG_SENT : MSG_RECVD) || m->peer != (uint32_t)other)
        return peer_lost(R, r, 0);
    return 0;
}

/* Wait for the reports of a transfer i -> j: those of the ranks other than 0 (rank
 * 0's own part is done), whichever comes first, so that a failure or a lost peer
 * on either side ends the wait at once. Any message renews the wait for the next:
 * the receiver sends progress every PROGRESS_MS while data flows. The idle ranks
 * are watched too: one that ends (or speaks) ends the run. */
static int wait_reports(run_t *R, int i, int j, msg_t *sent, msg_t *recvd)
{
    int need_i = i != 0, need_j = j != 0, w = R->e->world;
    int64_t deadline = probe_now_ms() + R->x.idle_ms + GRACE_MS;
    struct pollfd *p = R->pfd;
    for (int r = 0; r < w; r++)
        p[r] = (struct pollfd){.fd = R->ctl[r], .events = POLLIN};
    while (need_i || need_j) {
        int64_t left = deadline - probe_now_ms();
        if (left <= 0) {
            char a[96];
            return probe_errf(
                "%s made no progress in %d s (sending from rank %d to rank %d)",
                who(R, need_j ? j : i, a, sizeof(a)),
                (int)((R->x.idle_ms + GRACE_MS) / 1000), i, j);
        }
        int n = poll(p, (nfds_t)w, left > INT_MAX ? INT_MAX : (int)left);
        if (n < 0 && errno != EINTR)
            return probe_errf("poll: %s", strerror(errno));
        for (int r = 1; r < w && n > 0; r++) {
            if (!p[r].revents)
                continue;
            int got;
            msg_t m;
            if (r == i && need_i)
                need_i = (got = take_report(R, i, 1, j, sent)) != 0;
            else if (r == j && need_j)
                need_j = (got = take_report(R, j, 0, i, recvd)) != 0;
            else
                got =
                    peer_lost(R, r, msg_recv(R->ctl[r], &m, probe_now_ms() + GRACE_MS));
            if (got < 0)
                return -1;
            deadline = probe_now_ms() + R->x.idle_ms + GRACE_MS;
        }
    }
    return 0;
}

/* Tell rank r to take its part in a transfer with `other`. */
static int order(run_t *R, int r, msg_type_t type, int other)
{
    char a[96];
    if (msg_send(R->ctl[r], type, other, R->x.bytes, (uint64_t)R->x.pings,
                 probe_now_ms() + R->x.idle_ms) < 0)
        return probe_errf("sending an order to %s: %s", who(R, r, a, sizeof(a)),
                          strerror(errno));
    return 0;
}

/* One ordered pair i -> j; the receiver's bytes and nanoseconds and the sender's
 * round trip in *sent / *recvd (as the reports carry them). */
static int measure(run_t *R, int i, int j, msg_t *sent, msg_t *recvd)
{
    char a[96], at[96];
    stage_t st;
    if (i == 0) {
        uint64_t rtt = NO_RTT;
        if (order(R, j, MSG_RECV, 0) < 0)
            return -1;
        if (xfer_send(0, &R->addr[j], &R->x, &rtt, &st) < 0)
            return probe_errf("sending to %s at %s: %s: %s", who(R, j, a, sizeof(a)),
                              addr_str(&R->addr[j], at, sizeof(at)), stage_str(st),
                              strerror(errno));
        *sent =
            (msg_t){.type = MSG_SENT, .peer = (uint32_t)j, .x = R->x.bytes, .y = rtt};
        return wait_reports(R, 0, j, sent, recvd);
    }
    if (j == 0) {
        uint64_t got = 0;
        int64_t ns = 0;
        if (order(R, i, MSG_SEND, 0) < 0)
            return -1;
        if (xfer_recv(R->dfd, i, &R->x, -1, &got, &ns, &st) < 0)
            return probe_errf(
                "receiving from %s at %s: %s: %s", who(R, i, a, sizeof(a)),
                addr_str(&R->addr[i], at, sizeof(at)), stage_str(st), strerror(errno));
        *recvd = (msg_t){
            .type = MSG_RECVD, .peer = (uint32_t)i, .x = got, .y = (uint64_t)ns};
        return wait_reports(R, i, 0, sent, recvd);
    }
    if (order(R, j, MSG_RECV, i) < 0 || order(R, i, MSG_SEND, j) < 0)
        return -1;
    return wait_reports(R, i, j, sent, recvd);
}

/* A JSON string (names are [a-z0-9-] in bramble, but hand-run ones may not be). */
static void json_str(const char *s)
{
    putchar('"');
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            printf("\\%c", c);
        else if (c < 0x20)
            printf("\\u%04x", c);
        else
            putchar(c);
    }
    putchar('"');
}

static void json_num(double v, const char *fmt)
{
    if (v < 0)
        printf("null");
    else
        printf(fmt, v);
}

static void print_pair(const run_t *R, int i, int j, double secs)
{
    const char **n = (const char **)R->e->names;
    size_t k = (size_t)i * (size_t)R->e->world + (size_t)j;
    if (R->o->human) {
        printf("  %-16s -> %-16s %8.3f s  %10.3f Gbit/s", n[i], n[j], secs, R->gbit[k]);
        if (R->rtt[k] >= 0)
            printf("  rtt %.4f ms", R->rtt[k]);
        putchar('\n');
    } else {
        printf("{\"from\":");
        json_str(n[i]);
        printf(",\"to\":");
        json_str(n[j]);
        printf(",\"bytes\":%" PRIu64 ",\"seconds\":%.6f,\"gbit_s\":", R->x.bytes, secs);
        json_num(R->gbit[k], "%.3f");
        printf(",\"rtt_ms\":");
        json_num(R->rtt[k], "%.4f");
        printf("}\n");
    }
    fflush(stdout);
}

static void print_matrix_json(const run_t *R, const double *m, const char *fmt)
{
    int w = R->e->world;
    putchar('[');
    for (int i = 0; i < w; i++) {
        printf(i ? ",[" : "[");
        for (int j = 0; j < w; j++) {
            if (j)
                putchar(',');
            json_num(m[(size_t)i * (size_t)w + (size_t)j], fmt);
        }
        putchar(']');
    }
    putchar(']');
}

static void print_matrix_human(const run_t *R, const double *m, const char *title,
                               const char *fmt)
{
    int w = R->e->world;
    int width = (int)strlen(title);
    for (int r = 0; r < w; r++)
        if ((int)strlen(R->e->names[r]) > width)
            width = (int)strlen(R->e->names[r]);
    printf("%-*s", width, title);
    for (int j = 0; j < w; j++)
        printf("  %10s", R->e->names[j]);
    putchar('\n');
    for (int i = 0; i < w; i++) {
        printf("%-*s", width, R->e->names[i]);
        for (int j = 0; j < w; j++) {
            double v = m[(size_t)i * (size_t)w + (size_t)j];
            if (v < 0)
                printf("  %10s", ".");
            else
                printf(fmt, v);
        }
        putchar('\n');
    }
}

static int print_result(const run_t *R)
{
    if (R->o->human) {
        print_matrix_human(R, R->gbit, "FROM \\ TO (Gbit/s)", "  %10.3f");
        if (R->o->pings) {
            putchar('\n');
            print_matrix_human(R, R->rtt, "FROM \\ TO (rtt ms)", "  %10.4f");
        }
    } else {
        printf("{\"result\":\"ok\",\"nodes\":[");
        for (int r = 0; r < R->e->world; r++) {
            if (r)
                putchar(',');
            json_str(R->e->names[r]);
        }
        printf("],\"bytes\":%" PRIu64 ",\"gbit_s\":", R->x.bytes);
        print_matrix_json(R, R->gbit, "%.3f");
        printf(",\"rtt_ms\":");
        print_matrix_json(R, R->rtt, "%.4f");
        printf("}\n");
    }
    if (fflush(stdout) != 0 || ferror(stdout))
        return probe_errf("writing the result: %s", strerror(errno));
    return 0;
}

/* Rank 0: every ordered pair, one at a time, then the end for everyone. */
static int lead(run_t *R)
{
    int w = R->e->world;
    for (size_t k = 0; k < (size_t)w * (size_t)w; k++)
        R->gbit[k] = R->rtt[k] = -1;
    if (R->o->human)
        printf("# " PROG ": %d nodes, %" PRIu64 " bytes per transfer, one at a time\n",
               w, R->x.bytes);
    for (int i = 0; i < w; i++)
        for (int j = 0; j < w; j++) {
            msg_t sent, recvd;
            if (i == j)
                continue;
            if (measure(R, i, j, &sent, &recvd) < 0)
                return -1;
            double secs = (double)recvd.y / 1e9;
            size_t k = (size_t)i * (size_t)w + (size_t)j;
            R->gbit[k] = (double)recvd.x * 8 / secs / 1e9;
            R->rtt[k] = sent.y == NO_RTT ? -1 : (double)sent.y / 1e6;
            print_pair(R, i, j, secs);
        }
    for (int r = 1; r < w; r++) {
        char a[96];
        if (msg_send(R->ctl[r], MSG_DONE, 0, 0, 0, probe_now_ms() + R->x.idle_ms) < 0)
            return probe_errf("telling %s the end: %s", who(R, r, a, sizeof(a)),
                              strerror(errno));
    }
    return print_result(R);
}

/* ---- the other ranks: do what rank 0 says until it says the end */

static int follow(run_t *R)
{
    int ctl = R->ctl[0];
    for (;;) {
        msg_t m;
        int got = msg_recv(ctl, &m, INT64_MAX);
        if (got > 0 || (got < 0 && errno == ECONNRESET))
            return probe_errf(
                "rank 0 at %s:%s closed the connection before the end (it "
                "failed or was stopped: see its output)",
                R->e->master_addr, R->e->master_port);
        if (got < 0)
            return probe_errf("waiting for rank 0: %s", strerror(errno));
        if (m.type == MSG_DONE)
            return 0;
        if ((m.type != MSG_SEND && m.type != MSG_RECV) ||
            m.peer >= (uint32_t)R->e->world || m.peer == (uint32_t)R->e->rank ||
            m.x == 0 || m.y > MAX_PINGS)
            return probe_errf("rank 0 sent an unexpected message (type %" PRIu32 ")",
                              m.type);
        int peer = (int)m.peer, rc;
        xfer_t x = R->x;
        x.bytes = m.x; /* rank 0's options rule */
        x.pings = (int)m.y;
        stage_t st;
        char at[96];
        uint64_t rtt = NO_RTT;
        uint64_t bytes = 0;
        int64_t ns = 0;
        if (m.type == MSG_SEND) {
            rc = xfer_send(R->e->rank, &R->addr[peer], &x, &rtt, &st);
            if (rc < 0)
                probe_errf("sending to rank %d at %s: %s: %s", peer,
                           addr_str(&R->addr[peer], at, sizeof(at)), stage_str(st),
                           strerror(errno));
        } else {
            rc = xfer_recv(R->dfd, peer, &x, ctl, &bytes, &ns, &st);
            if (rc < 0)
                probe_errf("receiving from rank %d at %s: %s: %s", peer,
                           addr_str(&R->addr[peer], at, sizeof(at)), stage_str(st),
                           strerror(errno));
        }
        if (rc < 0) {
            /* tell rank 0 why; it ends the run (and says so) */
            uint64_t err = (uint64_t)errno;
            msg_send(ctl, MSG_FAILED, peer, err, st, probe_now_ms() + x.idle_ms);
            return -1;
        }
        int64_t d = probe_now_ms() + x.idle_ms;
        if (m.type == MSG_SEND ? msg_send(ctl, MSG_SENT, peer, x.bytes, rtt, d)
                               : msg_send(ctl, MSG_RECVD, peer, bytes, (uint64_t)ns, d))
            return probe_errf("reporting to rank 0: %s", strerror(errno));
    }
}

int main(int argc, char **argv)
{
    opts_t o;
    env_t e;
    run_t R;
    probe_log_init(PROG, "a gang job");
    int r = parse_args(argc, argv, &o);
    if (r != 0)
        return r > 0 ? 0 : PROBE_EXIT_USAGE;
    if (read_env(&e) < 0) {
        env_free(&e);
        return PROBE_EXIT_USAGE;
    }
    int rc = -1;
    if (run_init(&R, &o, &e) < 0)
        goto done;
    int64_t deadline = probe_now_ms() + (int64_t)o.timeout_s * 1000;
    if (e.rank == 0)
        rc = (e.world == 1 || boot_serve(&R, deadline) == 0) ? lead(&R) : -1;
    else
        rc = boot_join(&R, deadline) == 0 ? follow(&R) : -1;
done:
    run_free(&R);
    env_free(&e);
    return rc == 0 ? 0 : 1;
}
