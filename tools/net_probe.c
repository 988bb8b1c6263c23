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
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define PROG "bramble-net-probe"
#define EXIT_USAGE 2
#define HELLO_MAGIC "BRNETP01" /* first 8 bytes a rank sends to rank 0 */
#define HELLO_BYTES 20         /* magic, rank, world, data port, 0 */
#define DATA_MAGIC "BRNETD01"  /* first 8 bytes on a data connection */
#define DATA_HELLO_BYTES 16    /* magic, sender rank, 0 */
#define ADDR_BYTES 24          /* one table entry */
#define MSG_BYTES 24           /* one control message */
#define MAX_NODES 1024         /* N(N-1) transfers: far more is not a probe */
#define MAX_PINGS 1000
#define PEER_TIMEOUT_MS 5000 /* one peer's hello or connect attempt at start */
#define RETRY_MS 250         /* between connect attempts to rank 0 */
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

/* rank for messages; -1 until known */
static int log_rank = -1;

/* the data buffer: senders write it over and over, receivers read into it */
static char buf[BUF_BYTES];

static int errf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* "bramble-net-probe: rank R: ..." on stderr; always returns -1. */
static int errf(const char *fmt, ...)
{
    int saved = errno;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (log_rank >= 0)
        fprintf(stderr, PROG ": rank %d: %s\n", log_rank, msg);
    else
        fprintf(stderr, PROG ": %s\n", msg);
    errno = saved;
    return -1;
}

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int64_t now_ms(void)
{
    return now_ns() / 1000000;
}

static void sleep_ms(int64_t ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

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

/* "64M", "1G", "4096" -> bytes; -1 when malformed. */
static int parse_size(const char *s, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || s[0] == '-')
        return -1;
    unsigned shift = 0;
    if (*end == 'K' || *end == 'k')
        shift = 10;
    else if (*end == 'M' || *end == 'm')
        shift = 20;
    else if (*end == 'G' || *end == 'g')
        shift = 30;
    if (shift) {
        end++;
        if (*end == 'i' && end[1] == 'B')
            end += 2;
        else if (*end == 'B')
            end++;
    }
    if (*end || v > (UINT64_MAX >> 2) >> shift)
        return -1;
    *out = (uint64_t)v << shift;
    return 0;
}

static int parse_count(const char *s, int min, int max, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < min || v > max)
        return -1;
    *out = (int)v;
    return 0;
}

/* 0: run; 1: --help printed; -1: usage error printed. */
static int parse_args(int argc, char **argv, opts_t *o)
{
    enum { O_BYTES = 256, O_PINGS, O_TIMEOUT, O_HUMAN, O_HELP };
    static const struct option longopts[] = {
        {"bytes", required_argument, NULL, O_BYTES},
        {"pings", required_argument, NULL, O_PINGS},
        {"timeout", required_argument, NULL, O_TIMEOUT},
        {"human", no_argument, NULL, O_HUMAN},
        {"help", no_argument, NULL, O_HELP},
        {NULL, 0, NULL, 0},
    };
    *o = (opts_t){.bytes = 64u << 20, .pings = 5, .timeout_s = 60};
    int c, idx = 0;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "h", longopts, &idx)) != -1) {
        int bad = 0;
        switch (c) {
        case O_BYTES:
            bad = parse_size(optarg, &o->bytes) < 0 || o->bytes == 0;
            break;
        case O_PINGS:
            bad = parse_count(optarg, 0, MAX_PINGS, &o->pings);
            break;
        case O_TIMEOUT:
            bad = parse_count(optarg, 1, 86400, &o->timeout_s);
            break;
        case O_HUMAN:
            o->human = 1;
            break;
        case 'h':
        case O_HELP:
            usage(stdout);
            return 1;
        default:
            errf("unknown option or missing value: '%s' (see --help)",
                 argv[optind - 1]);
            return -1;
        }
        if (bad)
            return errf("bad value for --%s: '%s' (see --help)", longopts[idx].name,
                        optarg);
    }
    if (optind < argc)
        return errf("unexpected argument '%s' (see --help)", argv[optind]);
    return 0;
}

/* An integer environment variable in [min, max]; -1 with a message naming it. */
static int env_int(const char *name, int min, int max, int *out)
{
    const char *s = getenv(name);
    if (!s || !*s)
        return errf("%s is not set (bramble sets it for a gang job; see --help)", name);
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < min || v > max)
        return errf("%s='%s' is not an integer in [%d, %d]", name, s, min, max);
    *out = (int)v;
    return 0;
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
        return errf("out of memory");
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
        return errf(
            "BRAMBLE_NODELIST='%s' is not NNODES=%d non-empty names, "
            "comma-separated",
            list, e->world);
    return 0;
}

static int read_env(env_t *e)
{
    *e = (env_t){0};
    if (env_int("NNODES", 1, MAX_NODES, &e->world) < 0 ||
        env_int("NODE_RANK", 0, e->world - 1, &e->rank) < 0)
        return -1;
    log_rank = e->rank;
    e->master_addr = getenv("MASTER_ADDR");
    e->master_port = getenv("MASTER_PORT");
    if (read_names(e) < 0)
        return -1;
    if (e->world == 1)
        return 0; /* nobody to measure */
    int port;
    if (!e->master_addr || !*e->master_addr)
        return errf("MASTER_ADDR is not set (the address of rank 0's node)");
    if (env_int("MASTER_PORT", 1, 65535, &port) < 0)
        return -1;
    return 0;
}

/* ---- sockets */

/* Wait for fd to be ready for `events`: 0, or -1 with errno (ETIMEDOUT at the
 * deadline). POLLERR/POLLHUP count as ready: the next call says why. */
static int sock_wait(int fd, short events, int64_t deadline)
{
    for (;;) {
        int64_t left = deadline - now_ms();
        if (left <= 0) {
            errno = ETIMEDOUT;
            return -1;
        }
        struct pollfd p = {.fd = fd, .events = events};
        int n = poll(&p, 1, left > INT_MAX ? INT_MAX : (int)left);
        if (n > 0)
            return 0;
        if (n < 0 && errno != EINTR)
            return -1;
    }
}

/* All of len bytes to or from a non-blocking socket before the deadline; -1 with
 * errno (ECONNRESET for an early end of stream). */
static int sock_xfer(int fd, void *p, size_t len, int writing, int64_t deadline)
{
    char *c = p;
    size_t done = 0;
    while (done < len) {
        ssize_t n = writing ? send(fd, c + done, len - done, MSG_NOSIGNAL)
                            : recv(fd, c + done, len - done, 0);
        if (n > 0) {
            done += (size_t)n;
            continue;
        }
        if (n == 0) {
            errno = ECONNRESET;
            return -1;
        }
        if (errno == EINTR)
            continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK)
            return -1;
        if (sock_wait(fd, writing ? POLLOUT : POLLIN, deadline) < 0)
            return -1;
    }
    return 0;
}

static void sock_close(int fd)
{
    if (fd >= 0 && close(fd) < 0)
        errf("close: %s", strerror(errno));
}

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
        return errf("setsockopt on a control connection: %s", strerror(errno));
    return 0;
}

/* A non-blocking listening socket on every address of this host: IPv6 with
 * v4-mapped addresses where the kernel has IPv6, else IPv4. Port 0: any. */
static int listen_family(int family, int port, int backlog)
{
    int fd = socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_storage ss = {0};
    socklen_t sl;
    if (family == AF_INET6) {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
        a->sin6_family = AF_INET6;
        a->sin6_addr = in6addr_any;
        a->sin6_port = htons((uint16_t)port);
        sl = sizeof(*a);
        if (set_int_opt(fd, IPPROTO_IPV6, IPV6_V6ONLY, 0) < 0)
            goto fail;
    } else {
        struct sockaddr_in *a = (struct sockaddr_in *)&ss;
        a->sin_family = AF_INET;
        a->sin_addr.s_addr = htonl(INADDR_ANY);
        a->sin_port = htons((uint16_t)port);
        sl = sizeof(*a);
    }
    if (set_int_opt(fd, SOL_SOCKET, SO_REUSEADDR, 1) < 0 ||
        bind(fd, (struct sockaddr *)&ss, sl) < 0 || listen(fd, backlog) < 0)
        goto fail;
    return fd;
fail:;
    int saved = errno;
    sock_close(fd);
    errno = saved;
    return -1;
}

static int listen_any(int port, int backlog)
{
    int fd = listen_family(AF_INET6, port, backlog);
    if (fd < 0 && (errno == EAFNOSUPPORT || errno == EADDRNOTAVAIL))
        fd = listen_family(AF_INET, port, backlog);
    return fd;
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

static void put32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (24 - 8 * i));
}

static void put64(unsigned char *p, uint64_t v)
{
    put32(p, (uint32_t)(v >> 32));
    put32(p + 4, (uint32_t)v);
}

static uint32_t get32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static uint64_t get64(const unsigned char *p)
{
    return (uint64_t)get32(p) << 32 | get32(p + 4);
}

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
        put32(p + 16, s->sin6_scope_id);
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
        s->sin6_scope_id = get32(p + 16);
        s->sin6_port = htons(port);
        a->len = sizeof(*s);
    }
}

static int msg_send(int fd, msg_type_t type, int peer, uint64_t x, uint64_t y,
                    int64_t deadline)
{
    unsigned char b[MSG_BYTES];
    put32(b, (uint32_t)type);
    put32(b + 4, (uint32_t)peer);
    put64(b + 8, x);
    put64(b + 16, y);
    return sock_xfer(fd, b, sizeof(b), 1, deadline);
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
        if (errno != EINTR && sock_wait(fd, POLLIN, deadline) < 0)
            return -1;
    }
    if (n == 0)
        return 1;
    if (n < 0 || sock_xfer(fd, b + 1, sizeof(b) - 1, 0, deadline) < 0)
        return -1;
    *m = (msg_t){
        .type = get32(b), .peer = get32(b + 4), .x = get64(b + 8), .y = get64(b + 16)};
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

/* One non-blocking connect attempt to a before the deadline; the socket, or -1
 * with errno. */
static int connect_to(const addr_t *a, int64_t deadline)
{
    int fd = socket(a->sa.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    int err = 0;
    socklen_t el = sizeof(err);
    if (connect(fd, (const struct sockaddr *)&a->sa, a->len) < 0) {
        err = errno;
        if (err == EINPROGRESS) {
            if (sock_wait(fd, POLLOUT, deadline) < 0)
                err = errno;
            else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) < 0)
                err = errno;
        }
    }
    if (err) {
        sock_close(fd);
        errno = err;
        return -1;
    }
    return fd;
}

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
        int64_t t0 = now_ns();
        if (sock_xfer(fd, &c, 1, 1, now_ms() + idle_ms) < 0 ||
            sock_xfer(fd, &c, 1, 0, now_ms() + idle_ms) < 0)
            return -1;
        t[k] = now_ns() - t0;
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
        if (sock_wait(fd, POLLOUT, now_ms() + x->idle_ms) < 0)
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
        if (sock_wait(fd, POLLIN, now_ms() + idle_ms) < 0)
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
    put32(hello + 8, (uint32_t)rank);
    *stage = ST_CONNECT;
    int fd = connect_to(to, now_ms() + x->idle_ms), rc = -1;
    if (fd < 0)
        return -1;
    if (set_int_opt(fd, IPPROTO_TCP, TCP_NODELAY, 1) < 0)
        goto done;
    *stage = ST_HANDSHAKE;
    if (sock_xfer(fd, hello, sizeof(hello), 1, now_ms() + x->idle_ms) < 0)
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
    sock_close(fd);
    errno = saved;
    return rc;
}

/* Accept the sender's connection on the data listener: the first one that says
 * it is rank `from` (anything else is closed and ignored). */
static int accept_from(int lfd, int from, int64_t idle_ms)
{
    int64_t deadline = now_ms() + idle_ms;
    for (;;) {
        if (sock_wait(lfd, POLLIN, deadline) < 0)
            return -1;
        int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ||
                errno == ECONNABORTED)
                continue;
            return -1;
        }
        unsigned char hello[DATA_HELLO_BYTES];
        int64_t d = now_ms() + PEER_TIMEOUT_MS;
        if (sock_xfer(fd, hello, sizeof(hello), 0, d < deadline ? d : deadline) == 0 &&
            memcmp(hello, DATA_MAGIC, 8) == 0 && get32(hello + 8) == (uint32_t)from)
            return fd;
        errf("ignored a data connection that is not from rank %d", from);
        sock_close(fd);
    }
}

/* Echo the sender's round trips. */
static int echo_pings(int fd, int pings, int64_t idle_ms)
{
    for (int k = 0; k < pings; k++) {
        char c;
        if (sock_xfer(fd, &c, 1, 0, now_ms() + idle_ms) < 0 ||
            sock_xfer(fd, &c, 1, 1, now_ms() + idle_ms) < 0)
            return -1;
    }
    return 0;
}

/* Read to the end of stream; the time from the first byte's arrival to the end in
 * *ns. Every PROGRESS_MS a MSG_PROGRESS on ctl (when >= 0) keeps rank 0 waiting. */
static int recv_data(int fd, int from, const xfer_t *x, int ctl, uint64_t *got,
                     int64_t *ns, stage_t *stage)
{
    int64_t t0 = -1, last = now_ms();
    *got = 0;
    for (;;) {
        if (sock_wait(fd, POLLIN, now_ms() + x->idle_ms) < 0)
            return -1;
        if (t0 < 0)
            t0 = now_ns();
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
        if (ctl >= 0 && now_ms() - last >= PROGRESS_MS) {
            last = now_ms();
            *stage = ST_REPORT;
            if (msg_send(ctl, MSG_PROGRESS, from, *got, 0, last + x->idle_ms) < 0)
                return -1;
            *stage = ST_DATA;
        }
    }
    *ns = now_ns() - t0;
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
    sock_close(fd);
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
            sock_close(R->ctl[r]);
    sock_close(R->dfd);
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
        return errf("out of memory");
    for (size_t r = 0; r < w; r++)
        R->ctl[r] = -1;
    if (e->world == 1)
        return 0;
    if ((R->dfd = listen_any(0, 8)) < 0 || (R->dport = local_port(R->dfd)) < 0)
        return errf("cannot open the data listener: %s", strerror(errno));
    return 0;
}

/* "rank 2 (node-c)" for rank 0's messages. */
static const char *who(const run_t *R, int r, char *out, size_t len)
{
    snprintf(out, len, "rank %d (%s)", r, R->e->names[r]);
    return out;
}

/* ---- bootstrap */

/* One accepted connection: check its hello, keep it as ctl[r] with r's data
 * address. 0 when taken. */
static int boot_take(run_t *R, int fd, const struct sockaddr_storage *peer,
                     int64_t deadline)
{
    unsigned char hello[HELLO_BYTES];
    int world = R->e->world;
    int64_t peer_deadline = now_ms() + PEER_TIMEOUT_MS;
    if (peer_deadline > deadline)
        peer_deadline = deadline;
    if (sock_xfer(fd, hello, sizeof(hello), 0, peer_deadline) < 0)
        return errf("a peer sent no hello: %s (ignored)", strerror(errno));
    uint32_t r = get32(hello + 8), w = get32(hello + 12);
    int port = hello[16] << 8 | hello[17];
    if (memcmp(hello, HELLO_MAGIC, 8) != 0)
        return errf("a peer that is not " PROG " connected (ignored)");
    if (w != (uint32_t)world || r == 0 || r >= (uint32_t)world)
        return errf("refused rank %" PRIu32 " of %" PRIu32
                    " nodes: this job's NNODES is %d",
                    r, w, world);
    if (R->ctl[r] >= 0)
        return errf("refused a second rank %" PRIu32, r);
    if (port == 0)
        return errf("refused rank %" PRIu32 ": no data port", r);
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
        return errf("out of memory");
    int rc = 0;
    for (int r = 1; r < world && rc == 0; r++)
        addr_pack(&R->addr[r].sa, addr_port(&R->addr[r]), t + (size_t)r * ADDR_BYTES);
    for (int r = 1; r < world && rc == 0; r++) {
        struct sockaddr_storage me;
        socklen_t sl = sizeof(me);
        char name[96];
        if (getsockname(R->ctl[r], (struct sockaddr *)&me, &sl) < 0)
            rc = errf("getsockname: %s", strerror(errno));
        else {
            addr_pack(&me, R->dport, t);
            if (sock_xfer(R->ctl[r], t, len, 1, deadline) < 0)
                rc = errf("sending the address table to %s: %s",
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
    int world = R->e->world, taken = 0, rc = -1, port = atoi(R->e->master_port);
    int backlog = world < SOMAXCONN ? world : SOMAXCONN;
    int lfd = listen_any(port, backlog);
    if (lfd < 0)
        return errf("cannot listen on MASTER_PORT=%d: %s", port, strerror(errno));
    while (taken < world - 1) {
        if (sock_wait(lfd, POLLIN, deadline) < 0) {
            int missing = 1;
            while (missing < world && R->ctl[missing] >= 0)
                missing++;
            char name[96];
            errf("%d of %d ranks connected within %d s (first missing: %s): %s", taken,
                 world - 1, R->o->timeout_s, who(R, missing, name, sizeof(name)),
                 strerror(errno));
            goto done;
        }
        struct sockaddr_storage peer;
        socklen_t pl = sizeof(peer);
        int c =
            accept4(lfd, (struct sockaddr *)&peer, &pl, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (c < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ||
                errno == ECONNABORTED)
                continue;
            errf("accept: %s", strerror(errno));
            goto done;
        }
        if (boot_take(R, c, &peer, deadline) == 0)
            taken++;
        else
            sock_close(c);
    }
    for (int r = 1; r < world; r++)
        if (ctl_opts(R->ctl[r]) < 0)
            goto done;
    rc = boot_table(R, deadline);
done:
    sock_close(lfd);
    return rc;
}

/* One connect attempt to every address of host:port; the socket, or -1 with a
 * reason in why. */
static int boot_connect(const char *host, const char *port, int64_t deadline, char *why,
                        size_t why_len)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    struct addrinfo *res;
    int g = getaddrinfo(host, port, &hints, &res);
    if (g != 0) {
        snprintf(why, why_len, "%s",
                 g == EAI_SYSTEM ? strerror(errno) : gai_strerror(g));
        return -1;
    }
    int fd = -1;
    for (struct addrinfo *ai = res; ai && fd < 0; ai = ai->ai_next) {
        /* this attempt: up to PEER_TIMEOUT_MS, within the deadline, but long
         * enough that a refusal is seen as one rather than as a time-out */
        int64_t now = now_ms(), d = now + PEER_TIMEOUT_MS;
        if (d > deadline)
            d = deadline > now + RETRY_MS ? deadline : now + RETRY_MS;
        addr_t a = {.len = ai->ai_addrlen};
        memcpy(&a.sa, ai->ai_addr, ai->ai_addrlen);
        fd = connect_to(&a, d);
        if (fd < 0)
            snprintf(why, why_len, "%s", strerror(errno));
    }
    freeaddrinfo(res);
    return fd;
}

/* Ranks > 0: connect to rank 0 (retrying until the deadline: it may start later),
 * send the hello, read the table. */
static int boot_join(run_t *R, int64_t deadline)
{
    const env_t *e = R->e;
    char why[160] = "timed out";
    int fd;
    while ((fd = boot_connect(e->master_addr, e->master_port, deadline, why,
                              sizeof(why))) < 0) {
        int64_t left = deadline - now_ms();
        if (left <= 0)
            return errf(
                "cannot reach rank 0 at MASTER_ADDR=%s MASTER_PORT=%s within "
                "%d s: %s",
                e->master_addr, e->master_port, R->o->timeout_s, why);
        sleep_ms(left < RETRY_MS ? left : RETRY_MS);
    }
    R->ctl[0] = fd;
    if (ctl_opts(fd) < 0)
        return -1;
    unsigned char hello[HELLO_BYTES] = {0};
    memcpy(hello, HELLO_MAGIC, 8);
    put32(hello + 8, (uint32_t)e->rank);
    put32(hello + 12, (uint32_t)e->world);
    hello[16] = (unsigned char)(R->dport >> 8);
    hello[17] = (unsigned char)R->dport;
    size_t len = (size_t)e->world * ADDR_BYTES;
    unsigned char *t = malloc(len);
    if (!t)
        return errf("out of memory");
    /* rank 0 answers once every rank is in, within its own timeout: at most
     * --timeout from now */
    int64_t table_deadline = now_ms() + (int64_t)R->o->timeout_s * 1000 + GRACE_MS;
    int rc = 0;
    if (sock_xfer(fd, hello, sizeof(hello), 1, deadline) < 0 ||
        sock_xfer(fd, t, len, 0, table_deadline) < 0)
        rc = errf(
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
        return errf("%s could not send to %s at %s: %s: %s", a, b,
                    addr_str(&R->addr[other], at, sizeof(at)), stage_str(m->y),
                    strerror((int)m->x));
    return errf("%s could not receive from %s at %s: %s: %s", a, b,
                addr_str(&R->addr[other], at, sizeof(at)), stage_str(m->y),
                strerror((int)m->x));
}

/* A control connection that ended or failed, or a message out of turn. */
static int peer_lost(const run_t *R, int r, int got)
{
    char a[96], at[96];
    who(R, r, a, sizeof(a));
    if (got > 0 || (got < 0 && errno == ECONNRESET))
        return errf(
            "lost %s at %s: it closed the connection (exited or was killed: "
            "see its output)",
            a, addr_str(&R->addr[r], at, sizeof(at)));
    if (got < 0)
        return errf("waiting for %s: %s", a, strerror(errno));
    return errf("%s sent a message out of turn", a);
}

/* One message from rank r about its transfer with `other` (as sender when
 * `sender`): 0 for its report (MSG_SENT or MSG_RECVD in *m), 1 for progress; a
 * failure report or a lost peer is an error. */
static int take_report(run_t *R, int r, int sender, int other, msg_t *m)
{
    int got = msg_recv(R->ctl[r], m, now_ms() + R->x.idle_ms + GRACE_MS);
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
    int64_t deadline = now_ms() + R->x.idle_ms + GRACE_MS;
    struct pollfd *p = R->pfd;
    for (int r = 0; r < w; r++)
        p[r] = (struct pollfd){.fd = R->ctl[r], .events = POLLIN};
    while (need_i || need_j) {
        int64_t left = deadline - now_ms();
        if (left <= 0) {
            char a[96];
            return errf("%s made no progress in %d s (sending from rank %d to rank %d)",
                        who(R, need_j ? j : i, a, sizeof(a)),
                        (int)((R->x.idle_ms + GRACE_MS) / 1000), i, j);
        }
        int n = poll(p, (nfds_t)w, left > INT_MAX ? INT_MAX : (int)left);
        if (n < 0 && errno != EINTR)
            return errf("poll: %s", strerror(errno));
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
                got = peer_lost(R, r, msg_recv(R->ctl[r], &m, now_ms() + GRACE_MS));
            if (got < 0)
                return -1;
            deadline = now_ms() + R->x.idle_ms + GRACE_MS;
        }
    }
    return 0;
}

/* Tell rank r to take its part in a transfer with `other`. */
static int order(run_t *R, int r, msg_type_t type, int other)
{
    char a[96];
    if (msg_send(R->ctl[r], type, other, R->x.bytes, (uint64_t)R->x.pings,
                 now_ms() + R->x.idle_ms) < 0)
        return errf("sending an order to %s: %s", who(R, r, a, sizeof(a)),
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
            return errf("sending to %s at %s: %s: %s", who(R, j, a, sizeof(a)),
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
            return errf("receiving from %s at %s: %s: %s", who(R, i, a, sizeof(a)),
                        addr_str(&R->addr[i], at, sizeof(at)), stage_str(st),
                        strerror(errno));
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
        return errf("writing the result: %s", strerror(errno));
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
        if (msg_send(R->ctl[r], MSG_DONE, 0, 0, 0, now_ms() + R->x.idle_ms) < 0)
            return errf("telling %s the end: %s", who(R, r, a, sizeof(a)),
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
            return errf(
                "rank 0 at %s:%s closed the connection before the end (it "
                "failed or was stopped: see its output)",
                R->e->master_addr, R->e->master_port);
        if (got < 0)
            return errf("waiting for rank 0: %s", strerror(errno));
        if (m.type == MSG_DONE)
            return 0;
        if ((m.type != MSG_SEND && m.type != MSG_RECV) ||
            m.peer >= (uint32_t)R->e->world || m.peer == (uint32_t)R->e->rank ||
            m.x == 0 || m.y > MAX_PINGS)
            return errf("rank 0 sent an unexpected message (type %" PRIu32 ")", m.type);
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
                errf("sending to rank %d at %s: %s: %s", peer,
                     addr_str(&R->addr[peer], at, sizeof(at)), stage_str(st),
                     strerror(errno));
        } else {
            rc = xfer_recv(R->dfd, peer, &x, ctl, &bytes, &ns, &st);
            if (rc < 0)
                errf("receiving from rank %d at %s: %s: %s", peer,
                     addr_str(&R->addr[peer], at, sizeof(at)), stage_str(st),
                     strerror(errno));
        }
        if (rc < 0) {
            /* tell rank 0 why; it ends the run (and says so) */
            uint64_t err = (uint64_t)errno;
            msg_send(ctl, MSG_FAILED, peer, err, st, now_ms() + x.idle_ms);
            return -1;
        }
        int64_t d = now_ms() + x.idle_ms;
        if (m.type == MSG_SEND ? msg_send(ctl, MSG_SENT, peer, x.bytes, rtt, d)
                               : msg_send(ctl, MSG_RECVD, peer, bytes, (uint64_t)ns, d))
            return errf("reporting to rank 0: %s", strerror(errno));
    }
}

int main(int argc, char **argv)
{
    opts_t o;
    env_t e;
    run_t R;
    int r = parse_args(argc, argv, &o);
    if (r != 0)
        return r > 0 ? 0 : EXIT_USAGE;
    if (read_env(&e) < 0) {
        env_free(&e);
        return EXIT_USAGE;
    }
    int rc = -1;
    if (run_init(&R, &o, &e) < 0)
        goto done;
    int64_t deadline = now_ms() + (int64_t)o.timeout_s * 1000;
    if (e.rank == 0)
        rc = (e.world == 1 || boot_serve(&R, deadline) == 0) ? lead(&R) : -1;
    else
        rc = boot_join(&R, deadline) == 0 ? follow(&R) : -1;
done:
    run_free(&R);
    env_free(&e);
    return rc == 0 ? 0 : 1;
}
