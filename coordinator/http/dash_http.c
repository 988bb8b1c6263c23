/* dash_http.c - the dashboard's answers to HTTP requests, in libmicrohttpd's
 * threads (see dashboard.h): the login, the page and its assets, the API (each
 * call queued for the loop as the session's key) and the event streams. */
#include "dashboard.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sodium.h>
#ifdef BRAMBLE_HAVE_MHD
#include <microhttpd.h>
#endif

#include "dash_assets.h"
#include "dash_int.h"
#include "util.h"

#ifdef BRAMBLE_HAVE_MHD

typedef struct MHD_Connection conn_t;

/* Headers every answer carries: nothing is cached, framed, sniffed or referred. */
static void secure(struct MHD_Response *r)
{
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(r, "X-Frame-Options", "DENY");
    MHD_add_response_header(r, "Referrer-Policy", "no-referrer");
    MHD_add_response_header(
        r, "Content-Security-Policy",
        "default-src 'none'; script-src 'self'; style-src 'self'; "
        "img-src 'self' data:; connect-src 'self'; "
        "frame-ancestors 'none'; base-uri 'none'; form-action 'self'");
}

/* Queue an answer (body copied); hname/hvalue an extra header (may be NULL). */
static int reply(conn_t *conn, unsigned status, const char *type, const char *body,
                 size_t len, const char *hname, const char *hvalue)
{
    struct MHD_Response *r =
        MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
    if (!r)
        return MHD_NO;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    secure(r);
    if (hname)
        MHD_add_response_header(r, hname, hvalue);
    int ret = MHD_queue_response(conn, status, r);
    MHD_destroy_response(r);
    return ret;
}

/* A JSON error {"error": text}. */
static int reply_error(conn_t *conn, unsigned status, const char *text)
{
    json_t *o = json_pack("{s:s, s:i}", "error", text, "status", (int)status);
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    int ret = reply(conn, status, "application/json", s ? s : "{}", s ? strlen(s) : 2,
                    NULL, NULL);
    free(s);
    return ret;
}

static const char page_401[] =
    "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">"
    "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
    "<title>bramble: log in</title><link rel=\"stylesheet\" href=\"/static/app.css\">"
    "</head><body><main class=\"login\"><h1>bramble</h1><p>%s</p>"
    "<p>Run <code>bramble dashboard</code> and open the link it prints "
    "(it works once, within a minute).</p></main></body></html>\n";

static int reply_page_error(conn_t *conn, unsigned status, const char *why)
{
    char body[1200];
    int n = snprintf(body, sizeof(body), page_401, why);
    return reply(conn, status, "text/html; charset=utf-8", body,
                 n < 0                      ? 0
                 : (size_t)n < sizeof(body) ? (size_t)n
                                            : sizeof(body) - 1,
                 NULL, NULL);
}

static const br_dash_asset_t *asset(const char *path)
{
    for (size_t i = 0; br_dash_assets[i].path; i++)
        if (strcmp(br_dash_assets[i].path, path) == 0)
            return &br_dash_assets[i];
    return NULL;
}

/* The page, with the session's CSRF token in its <meta name="csrf">. */
static int reply_index(conn_t *conn, const session_t *s)
{
    const br_dash_asset_t *a = asset("/index.html");
    static const char mark[] = "{{csrf}}";
    const char *text = (const char *)a->data;
    const char *at = strstr(text, mark);
    if (!at)
        return reply_error(conn, 500, "the page has no place for its CSRF token");
    size_t head = (size_t)(at - text), tail = a->len - head - strlen(mark);
    size_t len = head + strlen(s->csrf) + tail;
    char *body = malloc(len + 1);
    if (!body)
        return reply_error(conn, 503, "out of memory");
    memcpy(body, text, head);
    memcpy(body + head, s->csrf, strlen(s->csrf));
    memcpy(body + head + strlen(s->csrf), at + strlen(mark), tail);
    int ret = reply(conn, 200, "text/html; charset=utf-8", body, len, NULL, NULL);
    free(body);
    return ret;
}

/* A decimal id of 1..18 digits: 0, or -1. */
static int parse_id(const char *s, size_t n, int64_t *out)
{
    int64_t v = 0;
    if (n == 0 || n > 18)
        return -1;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        v = v * 10 + (s[i] - '0');
    }
    *out = v;
    return 0;
}

static int64_t arg_id(conn_t *conn, const char *name, int64_t dflt, int *bad)
{
    const char *v = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, name);
    int64_t id;
    if (!v)
        return dflt;
    if (parse_id(v, strlen(v), &id) < 0) {
        *bad = 1;
        return dflt;
    }
    return id;
}

/* HTTP status of a coordinator's errnum. */
static unsigned status_of(int errnum)
{
    switch (errnum) {
    case 0:
        return 200;
    case EACCES:
    case EPERM:
        return 403;
    case ENOENT:
        return 404;
    case EINVAL:
    case EPROTO:
        return 400;
    case EBUSY:
    case EEXIST:
    case EALREADY:
    case ENOTCONN:
        return 409;
    case ENOSPC:
    case EIO:
    case EAGAIN:
        return 503;
    default:
        return 500;
    }
}

/* Send type/body (stolen) to the loop as key, with the id id (0: a new one), and
 * wait up to WAIT_MS for its answer: the request, answered or not (r->answered),
 * for the caller to free; NULL with *why when it could not be queued. */
static req_t *ask(br_dash_t *d, const char *key, uint64_t id, const char *type,
                  json_t *body, const char **why)
{
    if (!body) {
        *why = "out of memory";
        return NULL;
    }
    pthread_mutex_lock(&d->lock);
    req_t *r = d->stopping
                   ? NULL
                   : dash_enqueue(d, id ? id : d->next_id++, key, type, body, 0);
    if (!r) {
        *why = d->stopping ? "the coordinator is stopping"
                           : "the coordinator is busy; try again";
        if (d->stopping)
            json_decref(body);
        pthread_mutex_unlock(&d->lock);
        return NULL;
    }
    struct timespec dl;
    clock_gettime(CLOCK_MONOTONIC, &dl);
    dl.tv_sec += WAIT_MS / 1000;
    while (!r->answered && !d->stopping)
        if (pthread_cond_timedwait(&d->answered, &d->lock, &dl) == ETIMEDOUT)
            break;
    dash_unlink_req(d, r);
    pthread_mutex_unlock(&d->lock);
    return r;
}

/* Answer with what the loop said to r (freed), or why it said nothing. */
static int reply_answer(conn_t *conn, req_t *r, const char *why)
{
    int ret;
    if (!r)
        ret = reply_error(conn, 503, why);
    else if (!r->answered || !r->answer)
        ret = reply_error(conn, 503,
                          r->answered
                              ? "out of memory"
                              : "the coordinator did not answer in time; try again");
    else
        ret = reply(conn, status_of(r->errnum), "application/json", r->answer,
                    r->answer_len, NULL, NULL);
    dash_req_free(r);
    return ret;
}

/* Send type/body to the loop as the session's principal and answer with what it
 * says. */
static int call_loop(br_dash_t *d, conn_t *conn, const session_t *s, const char *type,
                     json_t *body)
{
    const char *why = NULL;
    req_t *r = ask(d, s->key, 0, type, body, &why);
    return reply_answer(conn, r, why);
}

/* --- event streams --------------------------------------------------------------- */

/* Under lock: whether the stream's session still holds. */
static int stream_live(br_dash_t *d, stream_t *s)
{
    return !d->stopping && !s->failed && dash_session_at(d, s->session);
}

static json_t *watch_body(const stream_t *s)
{
    json_t *body = json_pack("{s:I, s:b}", "job", (json_int_t)s->job, "logs", s->logs);
    if (body && !s->logs)
        json_object_del(body, "logs");
    return body;
}

/* Renew the stream's watch (under lock; its answer is not waited for). */
static void watch(br_dash_t *d, stream_t *s)
{
    json_t *body = watch_body(s);
    if (body && dash_enqueue(d, s->id, s->key, "event.watch", body, 1))
        s->renewed = br_mono_ms();
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    stream_t *s = cls;
    br_dash_t *d = s->d;
    (void)pos;
    pthread_mutex_lock(&d->lock);
    for (;;) {
        if (!stream_live(d, s)) {
            pthread_mutex_unlock(&d->lock);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
        int64_t now = br_mono_ms();
        size_t n = 0;
        if (!s->hello) {
            s->hello = 1;
            s->ticked = now;
            n = (size_t)snprintf(buf, max, "retry: 2000\nevent: hello\ndata: {}\n\n");
        }
        if (now - s->renewed >= RENEW_MS)
            watch(d, s);
        if (s->news && n + 64 < max) {
            n += (size_t)snprintf(buf + n, max - n,
                                  "event: news\ndata: {\"job\":%lld}\n\n",
                                  (long long)s->job);
            s->news = 0;
        }
        if (!n && now - s->ticked >= TICK_MS)
            n = (size_t)snprintf(buf, max, "event: tick\ndata: {}\n\n");
        if (n) {
            s->ticked = now;
            pthread_mutex_unlock(&d->lock);
            return (ssize_t)n;
        }
        int64_t wait = TICK_MS - (now - s->ticked);
        struct timespec dl;
        clock_gettime(CLOCK_MONOTONIC, &dl);
        dl.tv_sec += wait / 1000;
        dl.tv_nsec += (wait % 1000) * 1000000;
        if (dl.tv_nsec >= 1000000000) {
            dl.tv_sec++;
            dl.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&d->news, &d->lock, &dl);
    }
}

static void stream_free(void *cls)
{
    stream_t *s = cls;
    br_dash_t *d = s->d;
    pthread_mutex_lock(&d->lock);
    for (stream_t **p = &d->streams; *p; p = &(*p)->next)
        if (*p == s) {
            *p = s->next;
            d->nstreams--;
            break;
        }
    pthread_mutex_unlock(&d->lock);
    free(s);
}

static int open_stream(br_dash_t *d, conn_t *conn, const session_t *sess,
                       const unsigned char *hash)
{
    int bad = 0;
    int64_t job = arg_id(conn, "job", 0, &bad);
    const char *logs = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "logs");
    if (bad || (logs && strcmp(logs, "1") != 0 && strcmp(logs, "0") != 0))
        return reply_error(conn, 400,
                           "expected /api/events?job=ID&logs=1 (both optional)");
    stream_t *s = calloc(1, sizeof(*s));
    if (!s)
        return reply_error(conn, 503, "out of memory");
    s->d = d;
    memcpy(s->session, hash, HASH_LEN);
    br_strlcpy(s->key, sess->key, sizeof(s->key));
    s->job = job;
    s->logs = job > 0 && logs && strcmp(logs, "1") == 0;
    pthread_mutex_lock(&d->lock);
    if (d->nstreams >= BR_DASH_STREAMS_MAX || d->stopping) {
        pthread_mutex_unlock(&d->lock);
        free(s);
        return reply_error(conn, 503, "too many event streams are open; close a tab");
    }
    s->id = d->next_id++;
    s->next = d->streams;
    d->streams = s;
    d->nstreams++;
    s->renewed = br_mono_ms();
    pthread_mutex_unlock(&d->lock);
    /* the first watch is waited for: a job this principal may not see is refused */
    const char *why = NULL;
    req_t *w = ask(d, s->key, s->id, "event.watch", watch_body(s), &why);
    if (!w || !w->answered || w->errnum) {
        stream_free(s);
        return reply_answer(conn, w, why);
    }
    dash_req_free(w);
    struct MHD_Response *r = MHD_create_response_from_callback(
        MHD_SIZE_UNKNOWN, 2048, stream_read, s, stream_free);
    if (!r) {
        stream_free(s);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
    secure(r);
    int ret = MHD_queue_response(conn, 200, r);
    MHD_destroy_response(r);
    return ret;
}

/* --- routes ---------------------------------------------------------------------- */

/* GET /login?t=SECRET: a session cookie, and off to the page. */
static int login(br_dash_t *d, conn_t *conn)
{
    const char *t = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "t");
    const char *site =
        MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Sec-Fetch-Site");
    const char *why = NULL;
    char id[BR_DASH_SECRET_HEX + 1], cookie[200];
    if (site && strcmp(site, "cross-site") == 0) /* another site may not log you in */
        return reply_page_error(conn, 403,
                                "A login link works only when you open it "
                                "yourself, not from another site.");
    if (dash_login_take(d, t, id, &why) < 0)
        return reply_page_error(conn, 401, why);
    snprintf(cookie, sizeof(cookie),
             COOKIE "=%s; Path=/; HttpOnly; SameSite=Strict; Max-Age=%lld%s", id,
             (long long)(d->session_ttl_ms + 999) / 1000, d->tls ? "; Secure" : "");
    sodium_memzero(id, sizeof(id));
    struct MHD_Response *r =
        MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    if (!r)
        return MHD_NO;
    secure(r);
    MHD_add_response_header(r, MHD_HTTP_HEADER_SET_COOKIE, cookie);
    MHD_add_response_header(r, MHD_HTTP_HEADER_LOCATION, "/");
    int ret = MHD_queue_response(conn, 303, r);
    MHD_destroy_response(r);
    sodium_memzero(cookie, sizeof(cookie));
    return ret;
}

/* A POST must come from the page itself: its CSRF token in X-CSRF-Token, and no
 * other site's Origin or Sec-Fetch-Site. NULL when it does, else why not. */
static const char *cross_site(const br_dash_t *d, conn_t *conn, const session_t *s)
{
    const char *scheme = d->tls ? "https://" : "http://"; /* the page's own origin */
    const char *tok =
        MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "X-CSRF-Token");
    const char *origin = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Origin");
    const char *host = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Host");
    const char *site =
        MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Sec-Fetch-Site");
    if (!tok || strlen(tok) != strlen(s->csrf) ||
        sodium_memcmp(tok, s->csrf, strlen(s->csrf)) != 0)
        return "missing or wrong CSRF token (X-CSRF-Token)";
    if (site && strcmp(site, "same-origin") != 0)
        return "a request from another site (Sec-Fetch-Site)";
    if (origin) {
        if (!host || strncmp(origin, scheme, strlen(scheme)) != 0 ||
            strcmp(origin + strlen(scheme), host) != 0)
            return "a request from another origin (Origin)";
    }
    return NULL;
}

/* A node's name in a path: a valid one (br_valid_name, as a joining agent's is
 * checked), copied to out (64 bytes); 0, or -1. */
static int node_name(const char *s, size_t n, char *out)
{
    if (n == 0 || n > 63)
        return -1;
    memcpy(out, s, n);
    out[n] = '\0';
    return br_valid_name(out) ? 0 : -1;
}

/* POST /api/jobs/ID/cancel, /api/nodes/NAME/drain|undrain. */
static int post_api(br_dash_t *d, conn_t *conn, const session_t *s, const char *path)
{
    const char *slash = strrchr(path, '/');
    int64_t id;
    char name[64];
    if (strncmp(path, "jobs/", 5) == 0 && slash && strcmp(slash, "/cancel") == 0 &&
        parse_id(path + 5, (size_t)(slash - path - 5), &id) == 0)
        return call_loop(d, conn, s, "job.cancel",
                         json_pack("{s:I}", "id", (json_int_t)id));
    if (strncmp(path, "nodes/", 6) == 0 && slash &&
        (strcmp(slash, "/drain") == 0 || strcmp(slash, "/undrain") == 0) &&
        node_name(path + 6, (size_t)(slash - path - 6), name) == 0)
        return call_loop(d, conn, s,
                         strcmp(slash, "/drain") == 0 ? "node.drain" : "node.undrain",
                         json_pack("{s:s}", "name", name));
    return reply_error(conn, 404, "no such action");
}

/* GET /api/...: the principal's view, through the loop. */
static int get_api(br_dash_t *d, conn_t *conn, const session_t *s, const char *path,
                   const unsigned char *hash)
{
    int bad = 0;
    int64_t id;
    if (strcmp(path, "whoami") == 0) {
        json_t *o = json_pack("{s:s, s:b}", "name", s->name, "admin", s->admin);
        char *text = o ? json_dumps(o, JSON_COMPACT) : NULL;
        json_decref(o);
        int ret =
            text ? reply(conn, 200, "application/json", text, strlen(text), NULL, NULL)
                 : reply_error(conn, 503, "out of memory");
        free(text);
        return ret;
    }
    if (strcmp(path, "events") == 0)
        return open_stream(d, conn, s, hash);
    if (strcmp(path, "nodes") == 0)
        return call_loop(d, conn, s, "node.list", json_object());
    if (strcmp(path, "services") == 0)
        return call_loop(d, conn, s, "service.list", json_object());
    if (strcmp(path, "jobs") == 0) {
        int64_t all = arg_id(conn, "all", 0, &bad);
        return bad ? reply_error(conn, 400, "expected /api/jobs?all=1")
                   : call_loop(d, conn, s, "job.list",
                               json_pack("{s:b}", "all", all != 0));
    }
    if (strcmp(path, "event-list") == 0) {
        int64_t after = arg_id(conn, "after", 0, &bad),
                job = arg_id(conn, "job", 0, &bad);
        int64_t limit = arg_id(conn, "limit", 1000, &bad);
        return bad || limit < 1 || limit > 1000
                   ? reply_error(
                         conn, 400,
                         "expected /api/event-list?after=ID&job=ID&limit=1..1000")
                   : call_loop(d, conn, s, "event.list",
                               json_pack("{s:I, s:I, s:i}", "after", (json_int_t)after,
                                         "job", (json_int_t)job, "limit", (int)limit));
    }
    if (strncmp(path, "jobs/", 5) == 0) {
        const char *rest = strchr(path + 5, '/');
        size_t n = rest ? (size_t)(rest - path - 5) : strlen(path + 5);
        if (parse_id(path + 5, n, &id) == 0) {
            if (!rest)
                return call_loop(d, conn, s, "job.show",
                                 json_pack("{s:I}", "id", (json_int_t)id));
            if (strcmp(rest, "/logs") == 0) {
                int64_t after = arg_id(conn, "after", 0, &bad);
                return bad ? reply_error(conn, 400,
                                         "expected /api/jobs/ID/logs?after=CURSOR")
                           : call_loop(
                                 d, conn, s, "job.logs",
                                 json_pack("{s:I, s:I, s:i}", "id", (json_int_t)id,
                                           "after", (json_int_t)after, "rank", -1));
            }
        }
    }
    return reply_error(conn, 404, "no such API path");
}

/* The page's own paths: "/", "/job/ID". */
static int is_page(const char *url)
{
    int64_t id;
    return strcmp(url, "/") == 0 || (strncmp(url, "/job/", 5) == 0 &&
                                     parse_id(url + 5, strlen(url + 5), &id) == 0);
}

int br_dash_handle(br_dash_t *d, void *connp, const char *url, const char *method,
                   size_t upload_size)
{
    conn_t *conn = connp;
    int get = strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0;
    int post = strcmp(method, "POST") == 0;
    int api = strncmp(url, "/api/", 5) == 0;
    const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                                 MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (upload_size > BODY_MAX || (cl && strtoull(cl, NULL, 10) > BODY_MAX) ||
        (cl && strlen(cl) > 12))
        return reply_error(conn, 413,
                           "request too large: the dashboard reads no bodies");
    if (!get && !post)
        return reply_error(conn, 405, "the dashboard answers GET and POST only");
    if (strcmp(url, "/login") == 0) /* (not HEAD: a probe must not use up a link) */
        return strcmp(method, "GET") == 0
                   ? login(d, conn)
                   : reply_error(conn, 405, "open the login link with GET");
    if (get && strncmp(url, "/static/", 8) == 0) {
        const br_dash_asset_t *a = asset(url + 7);
        if (!a || strcmp(url, "/static/index.html") == 0)
            return reply_error(conn, 404, "no such file");
        return reply(conn, 200, a->type, (const char *)a->data, a->len, NULL, NULL);
    }
    if (!api && !is_page(url) && strcmp(url, "/logout") != 0)
        return reply_error(conn, 404, "not found");
    const char *cookie = MHD_lookup_connection_value(conn, MHD_COOKIE_KIND, COOKIE);
    unsigned char hash[HASH_LEN];
    session_t s;
    if (!cookie || dash_secret_hash(cookie, hash) < 0 ||
        dash_session_get(d, hash, &s) < 0) {
        const char *why = cookie ? "Your session has expired or is not known here."
                                 : "You are not logged in.";
        int ret = api || post ? reply_error(conn, 401, why)
                              : reply_page_error(conn, 401, why);
        sodium_memzero(&s, sizeof(s));
        return ret;
    }
    int ret;
    if (post) {
        const char *why = cross_site(d, conn, &s);
        if (why)
            ret = reply_error(conn, 403, why);
        else if (strcmp(url, "/logout") == 0) {
            dash_session_end(d, hash);
            ret = reply(conn, 200, "application/json", "{}", 2,
                        MHD_HTTP_HEADER_SET_COOKIE,
                        d->tls ? COOKIE "=; Path=/; HttpOnly; SameSite=Strict; "
                                        "Max-Age=0; Secure"
                               : COOKIE "=; Path=/; HttpOnly; SameSite=Strict; "
                                        "Max-Age=0");
        } else if (api)
            ret = post_api(d, conn, &s, url + 5);
        else
            ret = reply_error(conn, 405, "this page answers GET");
    } else if (api)
        ret = get_api(d, conn, &s, url + 5, hash);
    else if (strcmp(url, "/logout") == 0)
        ret = reply_error(conn, 405, "log out with POST");
    else
        ret = reply_index(conn, &s);
    sodium_memzero(&s, sizeof(s));
    return ret;
}

#else /* built without libmicrohttpd: br_http_new refuses, nothing calls this */

int br_dash_handle(br_dash_t *d, void *conn, const char *url, const char *method,
                   size_t upload_size)
{
    (void)d, (void)conn, (void)url, (void)method, (void)upload_size;
    return 0;
}

#endif
