/* probe_boot.c - the rank bootstrap and helpers shared by the probe programs: see
 * probe_boot.h. Reading order: messages and time, options and environment, the
 * wire integers, sockets, joining rank 0, rank 0's listener. */
#include "probe_boot.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char *log_prog = "probe";
static const char *log_gang_job = "a gang job";
static int log_rank = -1; /* rank for messages; -1 until known */

void probe_log_init(const char *prog, const char *gang_job)
{
    log_prog = prog;
    log_gang_job = gang_job;
}

void probe_log_rank(int rank)
{
    log_rank = rank;
}

/* "PROG: rank R: ..." on stderr; always returns -1. */
int probe_errf(const char *fmt, ...)
{
    int saved = errno;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (log_rank >= 0)
        fprintf(stderr, "%s: rank %d: %s\n", log_prog, log_rank, msg);
    else
        fprintf(stderr, "%s: %s\n", log_prog, msg);
    errno = saved;
    return -1;
}

int64_t probe_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int64_t probe_now_ms(void)
{
    return probe_now_ns() / 1000000;
}

void probe_sleep_us(int64_t us)
{
    struct timespec ts = {.tv_sec = us / 1000000, .tv_nsec = (us % 1000000) * 1000};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

/* ---- options and environment */

int probe_getopt(int argc, char **argv, const struct option *longopts,
                 int (*take)(void *ctx, int opt, const char *arg), void *ctx,
                 void (*usage)(FILE *))
{
    int c, idx = 0;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "h", longopts, &idx)) != -1) {
        if (c == 'h') {
            usage(stdout);
            return 1;
        }
        if (c == '?')
            return probe_errf("unknown option or missing value: '%s' (see --help)",
                              argv[optind - 1]);
        if (take(ctx, c, optarg))
            return probe_errf("bad value for --%s: '%s' (see --help)",
                              longopts[idx].name, optarg);
    }
    if (optind < argc)
        return probe_errf("unexpected argument '%s' (see --help)", argv[optind]);
    return 0;
}

int probe_parse_size(const char *s, uint64_t limit, uint64_t *out)
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
    if (*end || v > limit >> shift)
        return -1;
    *out = (uint64_t)v << shift;
    return 0;
}

int probe_parse_count(const char *s, int min, int max, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < min || v > max)
        return -1;
    *out = (int)v;
    return 0;
}

int probe_env_int(const char *name, int required, int dflt, int min, int max, int *out)
{
    const char *s = getenv(name);
    if (!s || !*s) {
        if (required)
            return probe_errf("%s is not set (bramble sets it for %s; see --help)",
                              name, log_gang_job);
        *out = dflt;
        return 0;
    }
    if (probe_parse_count(s, min, max, out) < 0)
        return probe_errf("%s='%s' is not an integer in [%d, %d]", name, s, min, max);
    return 0;
}

int probe_env_master(int world, const char **addr, const char **port)
{
    *addr = getenv("MASTER_ADDR");
    *port = getenv("MASTER_PORT");
    if (world == 1)
        return 0; /* nobody to talk to */
    int p;
    if (!*addr || !**addr)
        return probe_errf("MASTER_ADDR is not set (the address of rank 0's node)");
    return probe_env_int("MASTER_PORT", 1, 0, 1, 65535, &p);
}

/* ---- big-endian integers */

void probe_put32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (24 - 8 * i));
}

void probe_put64(unsigned char *p, uint64_t v)
{
    probe_put32(p, (uint32_t)(v >> 32));
    probe_put32(p + 4, (uint32_t)v);
}

uint32_t probe_get32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

uint64_t probe_get64(const unsigned char *p)
{
    return (uint64_t)probe_get32(p) << 32 | probe_get32(p + 4);
}

/* ---- sockets */

/* POLLERR/POLLHUP count as ready: the next call says why. */
int probe_sock_wait(int fd, short events, int64_t deadline)
{
    for (;;) {
        int64_t left = deadline - probe_now_ms();
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

int probe_sock_xfer(int fd, void *buf, size_t len, int writing, int64_t deadline)
{
    char *c = buf;
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
        if (probe_sock_wait(fd, writing ? POLLOUT : POLLIN, deadline) < 0)
            return -1;
    }
    return 0;
}

void probe_sock_close(int fd)
{
    if (fd >= 0 && close(fd) < 0)
        probe_errf("close: %s", strerror(errno));
}

static int listen_family(int family, int port, int backlog)
{
    int fd = socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    int one = 1, zero = 0;
    struct sockaddr_storage ss = {0};
    socklen_t sl;
    if (family == AF_INET6) {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
        a->sin6_family = AF_INET6;
        a->sin6_addr = in6addr_any;
        a->sin6_port = htons((uint16_t)port);
        sl = sizeof(*a);
        if (setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero)) < 0)
            goto fail;
    } else {
        struct sockaddr_in *a = (struct sockaddr_in *)&ss;
        a->sin_family = AF_INET;
        a->sin_addr.s_addr = htonl(INADDR_ANY);
        a->sin_port = htons((uint16_t)port);
        sl = sizeof(*a);
    }
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
        bind(fd, (struct sockaddr *)&ss, sl) < 0 || listen(fd, backlog) < 0)
        goto fail;
    return fd;
fail:;
    int saved = errno;
    probe_sock_close(fd);
    errno = saved;
    return -1;
}

int probe_listen(int port, int backlog)
{
    int fd = listen_family(AF_INET6, port, backlog);
    if (fd < 0 && (errno == EAFNOSUPPORT || errno == EADDRNOTAVAIL))
        fd = listen_family(AF_INET, port, backlog);
    return fd;
}

/* *at_socket says whether socket() itself failed. */
static int connect_one(const struct sockaddr *sa, socklen_t len, int64_t deadline,
                       int *at_socket)
{
    int fd = socket(sa->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    *at_socket = fd < 0;
    if (fd < 0)
        return -1;
    int err = 0;
    socklen_t el = sizeof(err);
    if (connect(fd, sa, len) < 0) {
        err = errno;
        if (err == EINPROGRESS) {
            if (probe_sock_wait(fd, POLLOUT, deadline) < 0)
                err = errno;
            else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) < 0)
                err = errno;
        }
    }
    if (err) {
        probe_sock_close(fd);
        errno = err;
        return -1;
    }
    return fd;
}

int probe_connect(const struct sockaddr *sa, socklen_t len, int64_t deadline)
{
    int at_socket;
    return connect_one(sa, len, deadline, &at_socket);
}

/* ---- joining rank 0 */

/* One connect attempt to every address of host:port; the socket, or -1 with a
 * reason in why. */
static int join_once(const char *host, const char *port, int64_t deadline, char *why,
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
        /* this attempt: up to PROBE_PEER_TIMEOUT_MS, within the deadline, but long
         * enough that a refusal is seen as one rather than as a time-out */
        int64_t now = probe_now_ms(), d = now + PROBE_PEER_TIMEOUT_MS;
        if (d > deadline)
            d = deadline > now + PROBE_RETRY_MS ? deadline : now + PROBE_RETRY_MS;
        int at_socket;
        fd = connect_one(ai->ai_addr, ai->ai_addrlen, d, &at_socket);
        if (fd < 0)
            snprintf(why, why_len, "%s%s", at_socket ? "socket: " : "",
                     strerror(errno));
    }
    freeaddrinfo(res);
    return fd;
}

int probe_join(const char *host, const char *port, int64_t deadline, int timeout_s)
{
    char why[160] = "timed out";
    int fd;
    while ((fd = join_once(host, port, deadline, why, sizeof(why))) < 0) {
        int64_t left = deadline - probe_now_ms();
        if (left <= 0)
            return probe_errf(
                "cannot reach rank 0 at MASTER_ADDR=%s MASTER_PORT=%s within "
                "%d s: %s",
                host, port, timeout_s, why);
        probe_sleep_us((left < PROBE_RETRY_MS ? left : PROBE_RETRY_MS) * 1000);
    }
    return fd;
}

/* ---- rank 0's listener */

struct probe_boot {
    probe_boot_cfg_t cfg;
    int lfd;
    int taken;
    unsigned char *seen; /* world flags: rank r taken */
};

probe_boot_t *probe_boot_new(const probe_boot_cfg_t *cfg)
{
    probe_boot_t *b = calloc(1, sizeof(*b));
    unsigned char *seen = calloc((size_t)cfg->world, 1);
    if (!b || !seen) {
        free(b);
        free(seen);
        probe_errf("out of memory");
        return NULL;
    }
    *b = (probe_boot_t){.cfg = *cfg, .seen = seen};
    int backlog = cfg->world < SOMAXCONN ? cfg->world : SOMAXCONN;
    b->lfd = probe_listen(cfg->port, backlog);
    if (b->lfd < 0) {
        probe_errf("cannot listen on MASTER_PORT=%d: %s", cfg->port, strerror(errno));
        probe_boot_destroy(&b);
    }
    return b;
}

void probe_boot_destroy(probe_boot_t **bp)
{
    if (!bp || !*bp)
        return;
    int saved = errno;
    probe_sock_close((*bp)->lfd);
    free((*bp)->seen);
    free(*bp);
    *bp = NULL;
    errno = saved;
}

void probe_boot_take(probe_boot_t *b, uint32_t rank)
{
    if (!b->seen[rank]) {
        b->seen[rank] = 1;
        b->taken++;
    }
}

int probe_boot_taken(const probe_boot_t *b)
{
    return b->taken;
}

/* Nobody came in time: who is missing, with the wait's errno. */
static int boot_missing(const probe_boot_t *b)
{
    int saved = errno, world = b->cfg.world, missing = 1;
    while (missing < world && b->seen[missing])
        missing++;
    char who[96];
    if (b->cfg.names)
        snprintf(who, sizeof(who), "rank %d (%s)", missing, b->cfg.names[missing]);
    else
        snprintf(who, sizeof(who), "rank %d", missing);
    return probe_errf("%d of %d ranks %s within %d s (first missing: %s): %s", b->taken,
                      world - 1, b->cfg.done_what, b->cfg.timeout_s, who,
                      strerror(saved));
}

/* One accepted connection's hello: 0 when good, else -1 with the reason said. */
static int boot_hello(const probe_boot_t *b, int fd, unsigned char *hello,
                      int64_t deadline, uint32_t *rank)
{
    int64_t peer_deadline = probe_now_ms() + PROBE_PEER_TIMEOUT_MS;
    if (peer_deadline > deadline)
        peer_deadline = deadline;
    if (probe_sock_xfer(fd, hello, b->cfg.hello_bytes, 0, peer_deadline) < 0)
        return probe_errf("a peer sent no hello: %s (ignored)", strerror(errno));
    uint32_t r = probe_get32(hello + 8), w = probe_get32(hello + 12);
    uint32_t world = (uint32_t)b->cfg.world;
    if (memcmp(hello, b->cfg.magic, 8) != 0)
        return probe_errf("a peer that is not %s connected (ignored)", log_prog);
    if (w != world || r == 0 || r >= world) {
        if (b->cfg.nodes)
            return probe_errf("refused rank %" PRIu32 " of %" PRIu32
                              " nodes: this job's NNODES is %d",
                              r, w, b->cfg.world);
        return probe_errf("refused rank %" PRIu32 " of world size %" PRIu32
                          ": this job's WORLD_SIZE is %d",
                          r, w, b->cfg.world);
    }
    if (b->seen[r])
        return probe_errf("refused a second rank %" PRIu32, r);
    *rank = r;
    return 0;
}

int probe_boot_accept(probe_boot_t *b, int64_t deadline, unsigned char *hello,
                      struct sockaddr_storage *peer, uint32_t *rank)
{
    struct sockaddr_storage any;
    if (!peer)
        peer = &any;
    for (;;) {
        if (probe_sock_wait(b->lfd, POLLIN, deadline) < 0)
            return boot_missing(b);
        socklen_t pl = sizeof(*peer);
        int c =
            accept4(b->lfd, (struct sockaddr *)peer, &pl, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (c < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ||
                errno == ECONNABORTED)
                continue;
            return probe_errf("accept: %s", strerror(errno));
        }
        if (boot_hello(b, c, hello, deadline, rank) == 0)
            return c;
        probe_sock_close(c);
    }
}
