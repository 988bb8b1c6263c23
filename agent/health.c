/* health.c - non-blocking HTTP and TCP health checks of a service replica. */
#include "health.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "util.h"

enum { IDLE, CONNECTING, SENDING, READING };

struct br_health {
    int port;
    char path[256]; /* "" for TCP */
    int64_t interval_ms, grace_ms, timeout_ms, started, next, deadline;
    int quick; /* checks still to make in haste (br_health_suspect) */
    int phase, fd, fails;
    br_health_state_t state;
    char req[512];
    size_t req_len, sent;
    char resp[64]; /* the status line is all we read */
    size_t resp_len;
    char why[160];
};

br_health_t *br_health_new(int port, const char *http_path, int64_t interval_ms,
                           int64_t grace_ms, int64_t now, br_err_t *err)
{
    if (port < 1 || port > 65535 || interval_ms <= 0 || grace_ms < 0)
        return br_errp(err, EINVAL, "health check: bad port or interval");
    if (http_path && (http_path[0] != '/' || strlen(http_path) > 200 ||
                      strpbrk(http_path, " \r\n")))
        return br_errp(err, EINVAL, "health check: bad HTTP path");
    br_health_t *h = calloc(1, sizeof(*h));
    if (!h)
        return br_errp(err, ENOMEM, "out of memory");
    h->port = port;
    h->fd = -1;
    h->interval_ms = interval_ms;
    h->grace_ms = grace_ms;
    h->timeout_ms = interval_ms < BR_HEALTH_TIMEOUT_MS ? interval_ms : BR_HEALTH_TIMEOUT_MS;
    h->started = now;
    h->next = now + (interval_ms < 200 ? interval_ms : 200); /* first check soon */
    if (http_path) {
        br_strlcpy(h->path, http_path, sizeof(h->path));
        h->req_len = (size_t)snprintf(h->req, sizeof(h->req),
                                      "GET %s HTTP/1.0\r\nHost: 127.0.0.1:%d\r\n"
                                      "User-Agent: bramble-agent\r\nConnection: close\r\n\r\n",
                                      http_path, port);
    }
    return h;
}

static void close_check(br_health_t *h)
{
    if (h->fd >= 0)
        close(h->fd);
    h->fd = -1;
    h->phase = IDLE;
}

void br_health_destroy(br_health_t **hp)
{
    if (hp && *hp) {
        close_check(*hp);
        free(*hp);
        *hp = NULL;
    }
}

/* One check ended: ok, or failed saying why (printf-style). */
static void settle(br_health_t *h, int64_t now, int ok, const char *why)
{
    close_check(h);
    if (ok) {
        h->fails = 0;
        h->quick = 0;
        h->why[0] = '\0';
        h->state = BR_HEALTH_HEALTHY;
    } else {
        br_strlcpy(h->why, why, sizeof(h->why));
        /* failures in the start-up grace do not count while it never was healthy */
        if (!(h->state == BR_HEALTH_STARTING && now - h->started < h->grace_ms) &&
            ++h->fails >= BR_HEALTH_FAILURES)
            h->state = BR_HEALTH_UNHEALTHY;
    }
    int64_t every = h->interval_ms;
    if (h->state == BR_HEALTH_STARTING) {
        int64_t most = now - h->started < h->grace_ms ? BR_HEALTH_STARTING_MS : 1000;
        if (every > most)
            every = most;
    }
    if (h->quick > 0 && h->state != BR_HEALTH_UNHEALTHY) {
        h->quick--;
        if (every > BR_HEALTH_QUICK_MS)
            every = BR_HEALTH_QUICK_MS;
    }
    h->next = now + every;
}

void br_health_suspect(br_health_t *h, int64_t now)
{
    if (h->state != BR_HEALTH_HEALTHY)
        return; /* starting (its grace), or unhealthy already */
    h->quick = BR_HEALTH_FAILURES;
    if (h->next > now)
        h->next = now; /* (a check in flight goes on; the haste follows it) */
}

static void begin(br_health_t *h, int64_t now)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)h->port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    char why[160];
    h->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (h->fd < 0) {
        snprintf(why, sizeof(why), "socket: %s", strerror(errno));
        settle(h, now, 0, why);
        return;
    }
    h->deadline = now + h->timeout_ms;
    h->sent = h->resp_len = 0;
    h->phase = CONNECTING;
    if (connect(h->fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 && errno != EINPROGRESS) {
        snprintf(why, sizeof(why), "connect to port %d: %s", h->port, strerror(errno));
        settle(h, now, 0, why);
    }
}

/* The status line read so far: 1 healthy, 0 not, -1 not complete yet. */
static int status_ok(br_health_t *h, char *why, size_t len)
{
    char *eol = memchr(h->resp, '\n', h->resp_len);
    if (!eol && h->resp_len < sizeof(h->resp) - 1)
        return -1;
    h->resp[h->resp_len] = '\0';
    int code = 0;
    if (sscanf(h->resp, "HTTP/%*d.%*d %d", &code) != 1) {
        snprintf(why, len, "GET %s: not an HTTP answer", h->path);
        return 0;
    }
    snprintf(why, len, "GET %s: HTTP %d", h->path, code);
    return code >= 200 && code < 400;
}

static void advance(br_health_t *h, int64_t now)
{
    char why[200];
    struct pollfd p = {h->fd, h->phase == READING ? POLLIN : POLLOUT, 0};
    if (poll(&p, 1, 0) < 0)
        return;
    if (h->phase == CONNECTING && p.revents) {
        int e = 0;
        socklen_t el = sizeof(e);
        getsockopt(h->fd, SOL_SOCKET, SO_ERROR, &e, &el);
        if (e) {
            snprintf(why, sizeof(why), "connect to port %d: %s", h->port, strerror(e));
            settle(h, now, 0, why);
            return;
        }
        if (!h->path[0]) { /* TCP: connected is healthy */
            settle(h, now, 1, "");
            return;
        }
        h->phase = SENDING;
    }
    if (h->phase == SENDING) {
        ssize_t n = send(h->fd, h->req + h->sent, h->req_len - h->sent, MSG_NOSIGNAL);
        if (n < 0 && errno != EAGAIN) {
            snprintf(why, sizeof(why), "GET %s: %s", h->path, strerror(errno));
            settle(h, now, 0, why);
            return;
        }
        if (n > 0 && (h->sent += (size_t)n) == h->req_len)
            h->phase = READING;
    }
    if (h->phase == READING) {
        ssize_t n = recv(h->fd, h->resp + h->resp_len, sizeof(h->resp) - 1 - h->resp_len, 0);
        if (n > 0)
            h->resp_len += (size_t)n;
        int ok = status_ok(h, why, sizeof(why));
        if (ok >= 0) {
            settle(h, now, ok, why);
            return;
        }
        if (n == 0 || (n < 0 && errno != EAGAIN)) {
            snprintf(why, sizeof(why), "GET %s: closed without an answer", h->path);
            settle(h, now, 0, why);
            return;
        }
    }
    if (h->phase != IDLE && now >= h->deadline) {
        snprintf(why, sizeof(why), "%s: no answer within %lldms",
                 h->path[0] ? h->path : "connect", (long long)h->timeout_ms);
        settle(h, now, 0, why);
    }
}

br_health_state_t br_health_poll(br_health_t *h, int64_t now)
{
    if (h->phase == IDLE && now >= h->next)
        begin(h, now);
    if (h->phase != IDLE)
        advance(h, now);
    return h->state;
}

br_health_state_t br_health_state(const br_health_t *h)
{
    return h->state;
}

const char *br_health_state_name(br_health_state_t s)
{
    return s == BR_HEALTH_HEALTHY ? "healthy" : s == BR_HEALTH_UNHEALTHY ? "unhealthy"
                                                                         : "starting";
}

const char *br_health_why(const br_health_t *h)
{
    return h->why;
}
