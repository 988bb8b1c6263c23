/* http.c - the coordinator's HTTP side on libmicrohttpd (see http.h). Built
 * without libmicrohttpd, br_http_new says so and everything else still works. */
#include "http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>
#include <sodium.h>
#ifdef BRAMBLE_HAVE_MHD
#include <microhttpd.h>
#endif

#include "dashboard.h"
#include "httptls.h"
#include "token.h"
#include "util.h"

#define FRESH_MS 1000           /* a page this young is served as it is */
#define WAIT_MS 5000            /* how long a request waits for the loop's new page */
#define CONN_MAX 40             /* connections at once (the dashboard's event
                                   streams among them, BR_DASH_STREAMS_MAX) */
#define CONN_IDLE_S 10          /* a connection silent this long is closed */
#define CONN_MEMORY (16 * 1024) /* request line and headers of one connection */
#define LOG_BURST 10            /* libmicrohttpd's messages logged per minute at most */
#define FORMS "expected [ADDRESS:]PORT (7780, 127.0.0.1:7780, 0.0.0.0:7780, [::1]:7780)"

struct br_http {
    br_http_addr_t addr;
    int efd; /* eventfd: written by a request that wants a new page, read by the loop */
    pthread_mutex_t lock;
    pthread_cond_t cond; /* a new page (or the stop) */
    /* everything below is under lock */
    char *page; /* NULL: none yet, or the loop could not make the last one */
    size_t page_len;
    int64_t page_made; /* monotonic ms */
    uint64_t page_gen; /* grows with each publish */
    int asked;         /* efd written, not yet read by the loop */
    br_http_token_t *tokens;
    size_t ntokens;
    int tokens_set;
    br_http_counts_t counts;
    int stopping;
    br_dash_t *dash; /* the dashboard (dashboard.h), NULL until attached */
    /* libmicrohttpd's messages, limited so that a client cannot flood the log */
    pthread_mutex_t log_lock;
    int64_t log_window;   /* monotonic ms the current minute began */
    int log_lines;        /* lines logged in it */
    uint64_t log_skipped; /* lines left out since the last one logged */
#ifdef BRAMBLE_HAVE_MHD
    struct MHD_Daemon *mhd;
#endif
};

static const int codes[BR_HTTP_CODES] = {200, 401, 404, 405, 503};
static const char *const reasons[BR_HTTP_REASONS] = {
    "no_token", "not_bearer", "unknown_token", "revoked_token", "expired_token"};

int br_http_code(int i)
{
    return i >= 0 && i < BR_HTTP_CODES ? codes[i] : 0;
}

const char *br_http_reason(int i)
{
    return i >= 0 && i < BR_HTTP_REASONS ? reasons[i] : "";
}

int br_http_available(void)
{
#ifdef BRAMBLE_HAVE_MHD
    return 1;
#else
    return 0;
#endif
}

int br_http_tls_available(void)
{
#ifdef BRAMBLE_HAVE_MHD
    return MHD_is_feature_supported(MHD_FEATURE_TLS) == MHD_YES;
#else
    return 0;
#endif
}

/* --- addresses ------------------------------------------------------------------ */

int br_http_parse_addr(const char *s, br_http_addr_t *a, br_err_t *err)
{
    char host[BR_HTTP_ADDR_MAX] = "";
    const char *port;
    int v6 = 0;
    memset(a, 0, sizeof(*a));
    if (!s || !*s)
        return br_errf(err, EINVAL, "empty: " FORMS);
    if (strlen(s) >= BR_HTTP_ADDR_MAX)
        return br_errf(err, EINVAL, "'%.20s...' is too long: " FORMS, s);
    if (s[0] == '[') {
        const char *close = strchr(s, ']');
        if (!close || close[1] != ':')
            return br_errf(err, EINVAL, "'%s': " FORMS, s);
        memcpy(host, s + 1, (size_t)(close - s - 1));
        host[close - s - 1] = '\0';
        port = close + 2;
        v6 = 1;
    } else {
        const char *colon = strrchr(s, ':');
        if (colon && strchr(s, ':') != colon)
            return br_errf(err, EINVAL,
                           "'%s': an IPv6 address goes in brackets, as in "
                           "[::1]:7780",
                           s);
        if (colon) {
            memcpy(host, s, (size_t)(colon - s));
            host[colon - s] = '\0';
        }
        port = colon ? colon + 1 : s;
    }
    int p;
    if (br_parse_port(port, 1, &p, NULL) < 0)
        return br_errf(err, EINVAL, "'%s': '%s' is not a port (1..65535); " FORMS, s,
                       port);
    if (!v6 && (!host[0] || strcmp(host, "localhost") == 0))
        strcpy(host, "127.0.0.1");
    if (v6) {
        struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&a->ss;
        if (inet_pton(AF_INET6, host, &in6->sin6_addr) != 1)
            return br_errf(err, EINVAL, "'%s': '%s' is not an IPv6 address", s, host);
        in6->sin6_family = AF_INET6;
        in6->sin6_port = htons((uint16_t)p);
        a->len = sizeof(*in6);
        a->loopback = IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr);
        snprintf(a->text, sizeof(a->text), "[%s]:%d", host, p);
    } else {
        struct sockaddr_in *in4 = (struct sockaddr_in *)&a->ss;
        if (inet_pton(AF_INET, host, &in4->sin_addr) != 1)
            return br_errf(err, EINVAL, "'%s': '%s' is not an IP address; " FORMS, s,
                           host);
        in4->sin_family = AF_INET;
        in4->sin_port = htons((uint16_t)p);
        a->len = sizeof(*in4);
        a->loopback = (ntohl(in4->sin_addr.s_addr) >> 24) == 127;
        snprintf(a->text, sizeof(a->text), "%s:%d", host, p);
    }
    return 0;
}

/* --- metrics tokens ------------------------------------------------------------- */

void br_http_token_make(char *text, char *hash, char *id)
{
    unsigned char raw[BR_TOKEN_SECRET_HEX / 2];
    char secret[BR_TOKEN_SECRET_HEX + 1];
    randombytes_buf(raw, sizeof(raw));
    sodium_bin2hex(secret, sizeof(secret), raw, sizeof(raw));
    snprintf(text, BR_HTTP_TOKEN_MAX, "%s%s", BR_HTTP_TOKEN_PREFIX, secret);
    br_token_hash(secret, hash, id);
    sodium_memzero(raw, sizeof(raw));
    sodium_memzero(secret, sizeof(secret));
}

int br_http_token_hash(const char *text, char *hash)
{
    size_t plen = strlen(BR_HTTP_TOKEN_PREFIX);
    if (!text || strncmp(text, BR_HTTP_TOKEN_PREFIX, plen) != 0 ||
        strlen(text + plen) != BR_TOKEN_SECRET_HEX)
        return -1;
    for (const char *p = text + plen; *p; p++)
        if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
            return -1;
    br_token_hash(text + plen, hash, NULL);
    return 0;
}

/* --- what the loop hands over ---------------------------------------------------- */

int br_http_fd(const br_http_t *h)
{
    return h->efd;
}

int br_http_wanted(br_http_t *h)
{
    uint64_t n = 0;
    if (read(h->efd, &n, sizeof(n)) != sizeof(n))
        n = 0;
    pthread_mutex_lock(&h->lock);
    int asked = h->asked || n > 0;
    h->asked = 0; /* a request from now on asks again */
    pthread_mutex_unlock(&h->lock);
    return asked;
}

void br_http_publish(br_http_t *h, const char *page, size_t len)
{
    char *copy = page ? malloc(len + 1) : NULL;
    if (copy) {
        memcpy(copy, page, len);
        copy[len] = '\0';
    }
    pthread_mutex_lock(&h->lock);
    free(h->page);
    h->page = copy;
    h->page_len = copy ? len : 0;
    h->page_made = br_mono_ms();
    h->page_gen++;
    pthread_cond_broadcast(&h->cond);
    pthread_mutex_unlock(&h->lock);
}

int br_http_set_tokens(br_http_t *h, const br_http_token_t *tokens, size_t n)
{
    br_http_token_t *copy = n ? calloc(n, sizeof(*copy)) : NULL;
    if (n && !copy)
        return -1;
    if (n)
        memcpy(copy, tokens, n * sizeof(*copy));
    pthread_mutex_lock(&h->lock);
    if (h->tokens)
        sodium_memzero(h->tokens, h->ntokens * sizeof(*h->tokens));
    free(h->tokens);
    h->tokens = copy;
    h->ntokens = n;
    h->tokens_set = 1;
    pthread_mutex_unlock(&h->lock);
    return 0;
}

void br_http_attach_dash(br_http_t *h, br_dash_t *dash)
{
    pthread_mutex_lock(&h->lock);
    h->dash = dash;
    pthread_mutex_unlock(&h->lock);
}

void br_http_counts(br_http_t *h, br_http_counts_t *out)
{
    pthread_mutex_lock(&h->lock);
    *out = h->counts;
    pthread_mutex_unlock(&h->lock);
}

/* --- serving (libmicrohttpd's threads) ------------------------------------------ */

#ifdef BRAMBLE_HAVE_MHD

/* Whether the request may read /metrics: -1 when it may, else the reason (counted)
 * with its words in why. Called under lock. */
static int authorize(br_http_t *h, const char *header, char *why, size_t len)
{
    char text[BR_HTTP_TOKEN_MAX + 8], hash[BR_TOKEN_HASH_HEX + 1];
    if (!header || !*header) {
        snprintf(why, len,
                 "no bearer token: send 'Authorization: Bearer TOKEN' with a "
                 "token from 'bramble token create --metrics'");
        return BR_HTTP_NO_TOKEN;
    }
    if (strncasecmp(header, "Bearer ", 7) != 0) {
        snprintf(why, len, "the Authorization header is not 'Bearer TOKEN'");
        return BR_HTTP_NOT_BEARER;
    }
    const char *t = header + 7;
    while (*t == ' ')
        t++;
    size_t n = strlen(t);
    while (n && (t[n - 1] == ' ' || t[n - 1] == '\t'))
        n--;
    if (n >= sizeof(text))
        n = 0; /* too long to be one: "" is not one either */
    memcpy(text, t, n);
    text[n] = '\0';
    if (br_http_token_hash(text, hash) < 0) {
        snprintf(why, len,
                 "this is not a metrics token (one begins '%s'; create one "
                 "with 'bramble token create --metrics')",
                 BR_HTTP_TOKEN_PREFIX);
        return BR_HTTP_UNKNOWN_TOKEN;
    }
    for (size_t i = 0; i < h->ntokens; i++) {
        const br_http_token_t *k = &h->tokens[i];
        if (strlen(k->hash) != BR_TOKEN_HASH_HEX ||
            sodium_memcmp(k->hash, hash, BR_TOKEN_HASH_HEX) != 0)
            continue;
        if (k->revoked) {
            snprintf(why, len, "metrics token %s has been revoked", k->id);
            return BR_HTTP_REVOKED;
        }
        if (k->expires_ms && k->expires_ms <= br_now_ms()) {
            snprintf(why, len, "metrics token %s has expired", k->id);
            return BR_HTTP_EXPIRED;
        }
        return -1;
    }
    snprintf(why, len, "this metrics token is not known to this coordinator");
    return BR_HTTP_UNKNOWN_TOKEN;
}

/* A page no older than FRESH_MS, waiting up to WAIT_MS for the loop to make one.
 * Called and returns under lock; 0 with the page in *page (malloc'd), or -1 with
 * the reason in why. */
static int fresh_page(br_http_t *h, char **page, size_t *len, char *why, size_t wlen)
{
    if (!h->page || br_mono_ms() - h->page_made > FRESH_MS) {
        uint64_t gen = h->page_gen, one = 1;
        if (!h->asked && write(h->efd, &one, sizeof(one)) == sizeof(one))
            h->asked = 1;
        struct timespec dl;
        clock_gettime(CLOCK_MONOTONIC, &dl);
        dl.tv_sec += WAIT_MS / 1000;
        while (h->page_gen == gen && !h->stopping)
            if (pthread_cond_timedwait(&h->cond, &h->lock, &dl) == ETIMEDOUT)
                break;
        if (h->stopping || h->page_gen == gen || !h->page) {
            snprintf(why, wlen, "%s",
                     h->stopping ? "the coordinator is stopping"
                     : h->page_gen == gen
                         ? "the coordinator did not make its metrics in "
                           "time (busy?); try again"
                         : "the coordinator could not make its metrics "
                           "(see its log)");
            return -1;
        }
    }
    *page = malloc(h->page_len + 1);
    if (!*page) {
        snprintf(why, wlen, "out of memory");
        return -1;
    }
    memcpy(*page, h->page, h->page_len + 1);
    *len = h->page_len;
    return 0;
}

/* Queue an answer (body copied) and count it. */
static enum MHD_Result answer(br_http_t *h, struct MHD_Connection *conn, int which,
                              const char *type, const char *body, size_t len,
                              const char *hname, const char *hvalue)
{
    struct MHD_Response *r =
        MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
    if (!r)
        return MHD_NO;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    if (hname)
        MHD_add_response_header(r, hname, hvalue);
    enum MHD_Result ret = MHD_queue_response(conn, (unsigned)codes[which], r);
    MHD_destroy_response(r);
    pthread_mutex_lock(&h->lock);
    h->counts.answers[which]++;
    pthread_mutex_unlock(&h->lock);
    return ret;
}

static enum MHD_Result say(br_http_t *h, struct MHD_Connection *conn, int which,
                           const char *text, const char *hname, const char *hvalue)
{
    char body[400];
    int n = snprintf(body, sizeof(body), "%d %s\n", codes[which], text);
    size_t len = n < 0 ? 0 : (size_t)n < sizeof(body) ? (size_t)n : sizeof(body) - 1;
    return answer(h, conn, which, "text/plain; charset=utf-8", body, len, hname,
                  hvalue);
}

/* Every request, on the first call (its headers are in): the answer is queued at
 * once, so a request body is never read. */
static enum MHD_Result handle(void *cls, struct MHD_Connection *conn, const char *url,
                              const char *method, const char *version,
                              const char *upload_data, size_t *upload_data_size,
                              void **con_cls)
{
    br_http_t *h = cls;
    char why[240];
    pthread_mutex_lock(&h->lock);
    br_dash_t *dash = h->stopping ? NULL : h->dash;
    pthread_mutex_unlock(&h->lock);
    if (dash && strcmp(url, "/metrics") != 0)
        return (enum MHD_Result)br_dash_handle(dash, conn, url, method, *upload_data_size);
    if (strcmp(url, "/metrics") != 0)
        return say(h, conn, BR_HTTP_NOT_FOUND,
                   "not found: this coordinator serves /metrics only", NULL, NULL);
    if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0)
        return say(h, conn, BR_HTTP_BAD_METHOD,
                   "method not allowed: /metrics answers GET and HEAD", "Allow",
                   "GET, HEAD");
    const char *auth = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                                   MHD_HTTP_HEADER_AUTHORIZATION);
    pthread_mutex_lock(&h->lock);
    if (!h->tokens_set || h->stopping) {
        pthread_mutex_unlock(&h->lock);
        return say(
            h, conn, BR_HTTP_UNAVAILABLE,
            h->stopping ? "the coordinator is stopping" : "the coordinator is starting",
            "Retry-After", "1");
    }
    int reason = authorize(h, auth, why, sizeof(why));
    if (reason >= 0) {
        h->counts.unauthorized[reason]++;
        pthread_mutex_unlock(&h->lock);
        char text[300];
        snprintf(text, sizeof(text), "unauthorized: %s", why);
        return say(h, conn, BR_HTTP_UNAUTHORIZED, text,
                   MHD_HTTP_HEADER_WWW_AUTHENTICATE,
                   reason == BR_HTTP_NO_TOKEN ? "Bearer realm=\"bramble metrics\""
                                              : "Bearer realm=\"bramble metrics\", "
                                                "error=\"invalid_token\"");
    }
    char *page = NULL;
    size_t len = 0;
    int rc = fresh_page(h, &page, &len, why, sizeof(why));
    pthread_mutex_unlock(&h->lock);
    if (rc < 0)
        return say(h, conn, BR_HTTP_UNAVAILABLE, why, "Retry-After", "1");
    enum MHD_Result ret =
        answer(h, conn, BR_HTTP_OK, "text/plain; version=0.0.4; charset=utf-8", page,
               len, NULL, NULL);
    free(page);
    return ret;
}

/* libmicrohttpd's messages (a client that hangs up, the connection limit), at most
 * LOG_BURST a minute, with a count of those left out. */
static void log_cb(void *cls, const char *fmt, va_list ap)
{
    br_http_t *h = cls;
    char text[300];
    int64_t now = br_mono_ms();
    pthread_mutex_lock(&h->log_lock);
    if (now - h->log_window >= 60000) {
        h->log_window = now;
        h->log_lines = 0;
    }
    if (h->log_lines >= LOG_BURST) {
        h->log_skipped++;
        pthread_mutex_unlock(&h->log_lock);
        return;
    }
    h->log_lines++;
    uint64_t skipped = h->log_skipped;
    h->log_skipped = 0;
    pthread_mutex_unlock(&h->log_lock);
    vsnprintf(text, sizeof(text), fmt, ap);
    size_t n = strlen(text);
    while (n && text[n - 1] == '\n')
        text[--n] = '\0';
    if (skipped)
        fprintf(stderr,
                "brambled: http: %s (and %llu message(s) before it not shown)\n", text,
                (unsigned long long)skipped);
    else
        fprintf(stderr, "brambled: http: %s\n", text);
}

/* A listening socket on a, so that a failure names its reason. */
static int listen_on(const br_http_addr_t *a, br_err_t *err)
{
    int fd = socket(a->ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0),
        on = 1;
    if (fd < 0)
        return br_errf(err, errno, "http: socket: %s", strerror(errno));
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
    if (a->ss.ss_family == AF_INET6)
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &on, sizeof(on));
    if (bind(fd, (const struct sockaddr *)&a->ss, a->len) < 0 || listen(fd, 64) < 0) {
        int e = errno;
        close(fd);
        return br_errf(err, e, "cannot listen for HTTP on %s: %s%s", a->text,
                       strerror(e),
                       e == EADDRNOTAVAIL ? " (not an address of this machine)" : "");
    }
    return fd;
}

static int start(br_http_t *h, const br_http_tls_t *tls, br_err_t *err)
{
    if (tls && !br_http_tls_available())
        return br_errf(err, ENOTSUP,
                       "cannot serve HTTPS: this libmicrohttpd was built without "
                       "TLS (GnuTLS); use an SSH tunnel, or a libmicrohttpd with TLS");
    int fd = listen_on(&h->addr, err);
    if (fd < 0)
        return -1;
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
                     MHD_USE_AUTO | MHD_USE_ERROR_LOG;
    if (h->addr.ss.ss_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    if (tls)
        flags |= MHD_USE_TLS;
    /* libmicrohttpd reads the certificate and key while it starts (GnuTLS keeps
     * its own parsed copy), never after: the caller wipes them once we return */
    h->mhd = MHD_start_daemon(
        flags, 0, NULL, NULL, handle, h, MHD_OPTION_EXTERNAL_LOGGER, log_cb, h,
        MHD_OPTION_LISTEN_SOCKET, fd, MHD_OPTION_CONNECTION_LIMIT, (unsigned)CONN_MAX,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)CONN_IDLE_S,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)CONN_MEMORY,
        tls ? MHD_OPTION_HTTPS_MEM_CERT : MHD_OPTION_END,
        tls ? br_http_tls_cert(tls) : NULL, MHD_OPTION_HTTPS_MEM_KEY,
        tls ? br_http_tls_key(tls) : NULL, MHD_OPTION_END);
    if (!h->mhd) {
        close(fd);
        if (tls) { /* both names in full: they may not fit in err */
            fprintf(stderr,
                    "brambled: https: libmicrohttpd refused the certificate %s with "
                    "the key %s\n",
                    br_http_tls_cert_path(tls), br_http_tls_key_path(tls));
            return br_errf(err, EINVAL,
                           "https: the certificate and key were refused (see above): "
                           "is the key the certificate's own, both PEM?");
        }
        return br_errf(err, EIO,
                       "cannot serve HTTP on %s: libmicrohttpd did not start "
                       "(see the lines above)",
                       h->addr.text);
    }
    return 0;
}

#else /* built without libmicrohttpd */

static int start(br_http_t *h, const br_http_tls_t *tls, br_err_t *err)
{
    (void)h, (void)tls;
    return br_errf(err, ENOTSUP,
                   "this brambled was built without HTTP (libmicrohttpd-dev "
                   "was missing when it was built): install it and rebuild "
                   "to use --http");
}

#endif

br_http_t *br_http_new(const br_http_addr_t *a, const br_http_tls_t *tls,
                       br_err_t *err)
{
    br_http_t *h = calloc(1, sizeof(*h));
    if (!h)
        return br_errp(err, ENOMEM, "out of memory");
    h->addr = *a;
    pthread_mutex_init(&h->lock, NULL);
    pthread_mutex_init(&h->log_lock, NULL);
    h->log_window = br_mono_ms();
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&h->cond, &ca);
    pthread_condattr_destroy(&ca);
    h->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (h->efd < 0) {
        br_errf(err, errno, "http: eventfd: %s", strerror(errno));
        br_http_destroy(&h);
        return NULL;
    }
    if (start(h, tls, err) < 0)
        br_http_destroy(&h);
    return h;
}

void br_http_destroy(br_http_t **hp)
{
    br_http_t *h = hp ? *hp : NULL;
    if (!h)
        return;
    int saved = errno;
    pthread_mutex_lock(&h->lock);
    h->stopping = 1; /* a request waiting for a page gives up now */
    pthread_cond_broadcast(&h->cond);
    br_dash_t *dash = h->dash;
    pthread_mutex_unlock(&h->lock);
    br_dash_stop(dash); /* its waiting requests and streams end, so threads join */
#ifdef BRAMBLE_HAVE_MHD
    if (h->mhd)
        MHD_stop_daemon(h->mhd); /* joins its threads, closes the listening socket */
#endif
    if (h->efd >= 0)
        close(h->efd);
    pthread_cond_destroy(&h->cond);
    pthread_mutex_destroy(&h->lock);
    pthread_mutex_destroy(&h->log_lock);
    free(h->page);
    if (h->tokens)
        sodium_memzero(h->tokens, h->ntokens * sizeof(*h->tokens));
    free(h->tokens);
    free(h);
    *hp = NULL;
    errno = saved;
}
