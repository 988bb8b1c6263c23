/* dashboard.c - the web dashboard's sessions, routes, API queue and event streams
 * (see dashboard.h). Runs in libmicrohttpd's threads, except the functions marked
 * "for the loop" in dashboard.h; everything shared is under one lock. */
#include "dashboard.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>
#include <sodium.h>
#ifdef BRAMBLE_HAVE_MHD
#include <microhttpd.h>
#endif

#include "dash_assets.h"
#include "util.h"

#define WAIT_MS 10000        /* an API request waits this long for the loop */
#define TICK_MS 5000         /* a stream says "tick" this often when idle */
#define RENEW_MS 10000       /* a stream renews its watch this often */
#define NEWS_MAX 64          /* news a stream may have unsent before it is dropped */
#define BODY_MAX (64 * 1024) /* a request body is never read; this big is refused */
#define COOKIE "bramble_session"
#define HASH_LEN 32

typedef struct {
    unsigned char hash[HASH_LEN]; /* of the secret */
    char key[BR_DASH_KEY_MAX];
    char name[64];
    int admin;
    int64_t expires_ms; /* wall clock */
} login_t;

typedef struct {
    unsigned char hash[HASH_LEN]; /* of the cookie's session id */
    char key[BR_DASH_KEY_MAX];
    char name[64];
    int admin;
    char csrf[BR_DASH_SECRET_HEX + 1];
    int64_t expires_ms; /* 0: free slot */
} session_t;

/* An API request: queued, taken by the loop, answered. Owned by its HTTP thread,
 * unless nowait (a stream's watch): then freed when taken. */
typedef struct req {
    struct req *next;
    uint64_t id;
    char key[BR_DASH_KEY_MAX];
    char type[32];
    json_t *body;
    int nowait, taken, answered;
    int errnum;
    char *answer; /* JSON text */
    size_t answer_len;
} req_t;

typedef struct stream {
    struct stream *next;
    br_dash_t *d;
    uint64_t id;
    unsigned char session[HASH_LEN];
    char key[BR_DASH_KEY_MAX];
    int64_t job;
    int logs;
    int64_t news[NEWS_MAX];
    size_t nnews;
    int hello, dropped, failed;
    int64_t renewed, ticked; /* monotonic ms */
} stream_t;

/* One GPU's last hour (dashboard.h); the loop's alone. */
typedef struct {
    char node[64];
    int gpu;
    int64_t slot; /* the newest slot written: now_ms / BR_DASH_HISTORY_STEP_MS */
    float util[BR_DASH_HISTORY], power[BR_DASH_HISTORY];
} gpu_hist_t;

struct br_dash {
    char addr[72];
    int efd;
    pthread_mutex_t lock;
    pthread_cond_t answered; /* an answer came, or the stop */
    pthread_cond_t news;     /* news for a stream, or the stop */
    login_t logins[BR_DASH_LOGINS_MAX];
    session_t sessions[BR_DASH_SESSIONS_MAX];
    req_t *reqs;
    size_t nreqs; /* queued, not yet taken */
    stream_t *streams;
    size_t nstreams;
    uint64_t next_id;
    int64_t login_ttl_ms, session_ttl_ms;
    int stopping;
    gpu_hist_t *hist; /* the loop's alone: no lock */
    size_t nhist;
    int64_t hist_sampled; /* monotonic ms */
};

/* A lifetime from the environment (tests shorten them), else dflt. */
static int64_t env_ms(const char *name, int64_t dflt)
{
    const char *v = getenv(name);
    int64_t ms;
    return v && br_parse_duration(v, &ms, NULL) == 0 && ms > 0 ? ms : dflt;
}

/* --- making and ending -------------------------------------------------------- */

br_dash_t *br_dash_new(const char *http_addr)
{
    br_dash_t *d = calloc(1, sizeof(*d));
    if (!d)
        return NULL;
    br_strlcpy(d->addr, http_addr, sizeof(d->addr));
    d->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (d->efd < 0) {
        free(d);
        return NULL;
    }
    pthread_mutex_init(&d->lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&d->answered, &ca);
    pthread_cond_init(&d->news, &ca);
    pthread_condattr_destroy(&ca);
    d->next_id = 1;
    d->login_ttl_ms = env_ms("BRAMBLE_DASH_LOGIN_TTL", BR_DASH_LOGIN_TTL_MS);
    d->session_ttl_ms = env_ms("BRAMBLE_DASH_SESSION_TTL", BR_DASH_SESSION_TTL_MS);
    return d;
}

void br_dash_stop(br_dash_t *d)
{
    if (!d)
        return;
    pthread_mutex_lock(&d->lock);
    d->stopping = 1;
    pthread_cond_broadcast(&d->answered);
    pthread_cond_broadcast(&d->news);
    pthread_mutex_unlock(&d->lock);
}

static void req_free(req_t *r)
{
    if (!r)
        return;
    json_decref(r->body);
    free(r->answer);
    free(r);
}

void br_dash_destroy(br_dash_t **dp)
{
    br_dash_t *d = dp ? *dp : NULL;
    if (!d)
        return;
    int saved = errno;
    br_dash_stop(d);
    /* the HTTP threads are joined by now: what is left is nobody's */
    while (d->reqs) {
        req_t *r = d->reqs;
        d->reqs = r->next;
        req_free(r);
    }
    while (d->streams) { /* (freed by libmicrohttpd's callback normally) */
        stream_t *s = d->streams;
        d->streams = s->next;
        free(s);
    }
    free(d->hist);
    sodium_memzero(d->logins, sizeof(d->logins));
    sodium_memzero(d->sessions, sizeof(d->sessions));
    close(d->efd);
    pthread_cond_destroy(&d->answered);
    pthread_cond_destroy(&d->news);
    pthread_mutex_destroy(&d->lock);
    free(d);
    *dp = NULL;
    errno = saved;
}

int br_dash_fd(const br_dash_t *d)
{
    return d->efd;
}

void br_dash_counts(br_dash_t *d, br_dash_counts_t *out)
{
    int64_t now = br_now_ms();
    memset(out, 0, sizeof(*out));
    pthread_mutex_lock(&d->lock);
    for (size_t i = 0; i < BR_DASH_SESSIONS_MAX; i++)
        out->sessions += d->sessions[i].expires_ms > now;
    for (size_t i = 0; i < BR_DASH_LOGINS_MAX; i++)
        out->logins += d->logins[i].expires_ms > now;
    out->streams = d->nstreams;
    out->queued = d->nreqs;
    pthread_mutex_unlock(&d->lock);
}

/* --- secrets ------------------------------------------------------------------- */

static void random_hex(char *out) /* BR_DASH_SECRET_HEX + 1 bytes */
{
    unsigned char raw[BR_DASH_SECRET_HEX / 2];
    randombytes_buf(raw, sizeof(raw));
    sodium_bin2hex(out, BR_DASH_SECRET_HEX + 1, raw, sizeof(raw));
    sodium_memzero(raw, sizeof(raw));
}

/* The hash of a secret in its text form: 0, or -1 when it has not that form. */
static int secret_hash(const char *text, unsigned char *hash)
{
    if (!text || strlen(text) != BR_DASH_SECRET_HEX)
        return -1;
    for (const char *p = text; *p; p++)
        if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
            return -1;
    crypto_generichash(hash, HASH_LEN, (const unsigned char *)text, BR_DASH_SECRET_HEX,
                       NULL, 0);
    return 0;
}

int br_dash_login_new(br_dash_t *d, const char *key, const char *name, int admin,
                      char *url, size_t url_len, int64_t *expires_ms)
{
    char secret[BR_DASH_SECRET_HEX + 1];
    int64_t now = br_now_ms();
    random_hex(secret);
    pthread_mutex_lock(&d->lock);
    login_t *slot = &d->logins[0];
    for (size_t i = 0; i < BR_DASH_LOGINS_MAX; i++) /* a free one, else the oldest */
        if (d->logins[i].expires_ms < slot->expires_ms)
            slot = &d->logins[i];
    secret_hash(secret, slot->hash);
    br_strlcpy(slot->key, key, sizeof(slot->key));
    br_strlcpy(slot->name, name, sizeof(slot->name));
    slot->admin = admin;
    slot->expires_ms = now + d->login_ttl_ms;
    *expires_ms = slot->expires_ms;
    snprintf(url, url_len, "http://%s/login?t=%s", d->addr, secret);
    pthread_mutex_unlock(&d->lock);
    sodium_memzero(secret, sizeof(secret));
    return 0;
}

/* Trade a login secret for a new session (single use): 0 with the session id in
 * id, or -1 with the reason in why. */
static int login_take(br_dash_t *d, const char *secret, char *id, const char **why)
{
    unsigned char hash[HASH_LEN];
    int64_t now = br_now_ms();
    if (secret_hash(secret, hash) < 0) {
        *why = "this is not a login link of this coordinator";
        return -1;
    }
    pthread_mutex_lock(&d->lock);
    login_t *l = NULL;
    for (size_t i = 0; i < BR_DASH_LOGINS_MAX && !l; i++)
        if (d->logins[i].expires_ms &&
            sodium_memcmp(d->logins[i].hash, hash, HASH_LEN) == 0)
            l = &d->logins[i];
    if (!l || l->expires_ms <= now) {
        if (l)
            sodium_memzero(l, sizeof(*l));
        pthread_mutex_unlock(&d->lock);
        *why = l ? "this login link has expired"
                 : "this login link was used already, "
                   "or is not one of this coordinator's";
        return -1;
    }
    session_t *s = &d->sessions[0];
    for (size_t i = 0; i < BR_DASH_SESSIONS_MAX; i++) /* a free one, else the oldest */
        if (d->sessions[i].expires_ms < s->expires_ms)
            s = &d->sessions[i];
    random_hex(id);
    secret_hash(id, s->hash);
    br_strlcpy(s->key, l->key, sizeof(s->key));
    br_strlcpy(s->name, l->name, sizeof(s->name));
    s->admin = l->admin;
    random_hex(s->csrf);
    s->expires_ms = now + d->session_ttl_ms;
    char name[sizeof(l->name)];
    br_strlcpy(name, l->name, sizeof(name));
    sodium_memzero(l, sizeof(*l)); /* used */
    pthread_mutex_unlock(&d->lock);
    fprintf(stderr, "brambled: dashboard: %s logged in (a session of %llds)\n", name,
            (long long)(d->session_ttl_ms / 1000));
    return 0;
}

/* The session of a cookie's hash, under lock; NULL when none or expired. */
static session_t *session_at(br_dash_t *d, const unsigned char *hash)
{
    int64_t now = br_now_ms();
    for (size_t i = 0; i < BR_DASH_SESSIONS_MAX; i++) {
        session_t *s = &d->sessions[i];
        if (s->expires_ms > now && sodium_memcmp(s->hash, hash, HASH_LEN) == 0)
            return s;
    }
    return NULL;
}

/* A copy of the session of the cookie's id: 0, or -1 (no cookie, forged, expired). */
static int session_get(br_dash_t *d, const char *cookie, session_t *out)
{
    unsigned char hash[HASH_LEN];
    if (secret_hash(cookie, hash) < 0)
        return -1;
    pthread_mutex_lock(&d->lock);
    session_t *s = session_at(d, hash);
    if (s)
        *out = *s;
    pthread_mutex_unlock(&d->lock);
    return s ? 0 : -1;
}

static void session_end(br_dash_t *d, const unsigned char *hash)
{
    pthread_mutex_lock(&d->lock);
    session_t *s = session_at(d, hash);
    if (s)
        sodium_memzero(s, sizeof(*s));
    pthread_cond_broadcast(&d->news); /* its streams end */
    pthread_mutex_unlock(&d->lock);
}

/* --- the loop's side of the queue ------------------------------------------------ */

static void route_of(uint64_t id, unsigned char *route)
{
    memcpy(route, BR_DASH_ROUTE_PREFIX, BR_DASH_ROUTE_PREFIX_LEN);
    for (int i = 0; i < 8; i++)
        route[BR_DASH_ROUTE_PREFIX_LEN + i] = (unsigned char)(id >> (56 - 8 * i));
}

int br_dash_is_route(const void *route, size_t len)
{
    return route && len == BR_DASH_ROUTE_LEN &&
           memcmp(route, BR_DASH_ROUTE_PREFIX, BR_DASH_ROUTE_PREFIX_LEN) == 0;
}

static uint64_t id_of(const void *route)
{
    const unsigned char *p = (const unsigned char *)route + BR_DASH_ROUTE_PREFIX_LEN;
    uint64_t id = 0;
    for (int i = 0; i < 8; i++)
        id = id << 8 | p[i];
    return id;
}

/* Queue a request (body stolen), under lock; NULL when the queue is full. */
static req_t *enqueue(br_dash_t *d, uint64_t id, const char *key, const char *type,
                      json_t *body, int nowait)
{
    req_t *r = d->nreqs < BR_DASH_QUEUE_MAX ? calloc(1, sizeof(*r)) : NULL;
    if (!r) {
        json_decref(body);
        return NULL;
    }
    r->id = id;
    br_strlcpy(r->key, key, sizeof(r->key));
    br_strlcpy(r->type, type, sizeof(r->type));
    r->body = body;
    r->nowait = nowait;
    r->next = d->reqs;
    d->reqs = r;
    d->nreqs++;
    uint64_t one = 1;
    if (write(d->efd, &one, sizeof(one)) != sizeof(one)) {
        /* the counter is full: the loop has plenty to read already */
    }
    return r;
}

static void unlink_req(br_dash_t *d, req_t *r)
{
    for (req_t **p = &d->reqs; *p; p = &(*p)->next)
        if (*p == r) {
            *p = r->next;
            if (!r->taken)
                d->nreqs--;
            return;
        }
}

size_t br_dash_take(br_dash_t *d, br_dash_req_t *out, size_t max)
{
    uint64_t n;
    if (read(d->efd, &n, sizeof(n)) != sizeof(n)) {
        /* nothing was written since: the queue may still hold what max left */
    }
    size_t got = 0;
    pthread_mutex_lock(&d->lock);
    req_t **p = &d->reqs;
    while (*p && got < max) {
        req_t *r = *p;
        if (r->taken) {
            p = &r->next;
            continue;
        }
        route_of(r->id, out[got].route);
        br_strlcpy(out[got].key, r->key, sizeof(out[got].key));
        br_strlcpy(out[got].type, r->type, sizeof(out[got].type));
        out[got].body = r->body;
        r->body = NULL;
        r->taken = 1;
        d->nreqs--;
        got++;
        if (r->nowait) {
            *p = r->next;
            req_free(r);
        } else {
            p = &r->next;
        }
    }
    if (d->nreqs) { /* more than max: wake the loop again */
        uint64_t one = 1;
        if (write(d->efd, &one, sizeof(one)) != sizeof(one)) {
        }
    }
    pthread_mutex_unlock(&d->lock);
    return got;
}

static stream_t *stream_find(br_dash_t *d, uint64_t id)
{
    for (stream_t *s = d->streams; s; s = s->next)
        if (s->id == id)
            return s;
    return NULL;
}

/* Log output as JSON text: invalid UTF-8 bytes become U+FFFD. */
static json_t *text_json(const char *data, size_t len)
{
    json_t *t = json_stringn(data, len);
    if (t)
        return t;
    char *buf = malloc(len * 3 + 1);
    size_t o = 0;
    if (!buf)
        return json_string("");
    for (size_t i = 0; i < len;) {
        unsigned char ch = (unsigned char)data[i];
        size_t n = ch < 0x80         ? 1
                   : (ch >> 5) == 6  ? 2
                   : (ch >> 4) == 14 ? 3
                   : (ch >> 3) == 30 ? 4
                                     : 0;
        json_t *one = n && i + n <= len ? json_stringn(data + i, n) : NULL;
        if (one) {
            memcpy(buf + o, data + i, n);
            o += n;
            i += n;
            json_decref(one);
        } else {
            memcpy(buf + o, "\xef\xbf\xbd", 3);
            o += 3;
            i++;
        }
    }
    t = json_stringn(buf, o);
    free(buf);
    return t ? t : json_string("");
}

/* --- GPU history (the loop's) --------------------------------------------------- */

static gpu_hist_t *hist_find(br_dash_t *d, const char *node, int gpu)
{
    for (size_t i = 0; i < d->nhist; i++)
        if (d->hist[i].gpu == gpu && strcmp(d->hist[i].node, node) == 0)
            return &d->hist[i];
    return NULL;
}

int br_dash_gpu_due(br_dash_t *d, int64_t now_ms)
{
    if (now_ms - d->hist_sampled < 1000)
        return 0;
    d->hist_sampled = now_ms;
    return 1;
}

void br_dash_gpu_sample(br_dash_t *d, const char *node, int gpu, double util,
                        double power, int64_t now_ms)
{
    int64_t slot = now_ms / BR_DASH_HISTORY_STEP_MS;
    gpu_hist_t *h = hist_find(d, node, gpu);
    if (!h) {
        if (d->nhist == BR_DASH_HISTORY_GPUS)
            return;
        if (!d->hist && !(d->hist = calloc(BR_DASH_HISTORY_GPUS, sizeof(*d->hist))))
            return;
        h = &d->hist[d->nhist++];
        br_strlcpy(h->node, node, sizeof(h->node));
        h->gpu = gpu;
        h->slot = slot - BR_DASH_HISTORY; /* all unknown */
    }
    for (int64_t s = h->slot + 1; s <= slot && s <= h->slot + BR_DASH_HISTORY; s++) {
        h->util[s % BR_DASH_HISTORY] = NAN; /* slots nobody sampled */
        h->power[s % BR_DASH_HISTORY] = NAN;
    }
    if (slot > h->slot)
        h->slot = slot;
    h->util[slot % BR_DASH_HISTORY] = (float)util;
    h->power[slot % BR_DASH_HISTORY] = (float)power;
}

/* Oldest first, one figure per slot up to now (null: unknown). */
static json_t *hist_json(const float *v, int64_t newest, int64_t now_slot)
{
    json_t *a = json_array();
    for (int64_t s = now_slot - BR_DASH_HISTORY + 1; s <= now_slot; s++) {
        float x = s <= newest && s > newest - BR_DASH_HISTORY ? v[s % BR_DASH_HISTORY] : NAN;
        json_array_append_new(a, isnan(x) ? json_null() : json_real(x));
    }
    return a;
}

/* node.list's answer gains each GPU's "history": {"step": s, "util": [...],
 * "power": [...]}, the last hour oldest first. */
static void attach_history(br_dash_t *d, json_t *answer)
{
    int64_t now_slot = br_now_ms() / BR_DASH_HISTORY_STEP_MS;
    size_t i, k;
    json_t *n, *g;
    json_array_foreach(json_object_get(answer, "nodes"), i, n) {
        const char *name = json_string_value(json_object_get(n, "name"));
        json_array_foreach(json_object_get(n, "gpus"), k, g) {
            json_t *idx = json_object_get(g, "index");
            gpu_hist_t *h = name && json_is_integer(idx)
                                ? hist_find(d, name, (int)json_integer_value(idx))
                                : NULL;
            if (h && json_is_object(g))
                json_object_set_new(
                    g, "history",
                    json_pack("{s:i, s:o, s:o}", "step", BR_DASH_HISTORY_STEP_MS / 1000,
                              "util", hist_json(h->util, h->slot, now_slot), "power",
                              hist_json(h->power, h->slot, now_slot)));
        }
    }
}

void br_dash_answer(br_dash_t *d, const void *route, size_t len, const json_t *body,
                    const void *data, size_t data_len)
{
    if (!br_dash_is_route(route, len))
        return;
    uint64_t id = id_of(route);
    json_t *copy = json_deep_copy(body);
    if (copy && data)
        json_object_set_new(copy, "text", text_json(data, data_len));
    if (copy && json_is_array(json_object_get(copy, "nodes")) && d->nhist)
        attach_history(d, copy); /* (node.list's: the only answer with "nodes") */
    json_t *en = json_object_get(body, "errnum");
    char *text = copy ? json_dumps(copy, JSON_COMPACT) : NULL;
    json_decref(copy);
    pthread_mutex_lock(&d->lock);
    req_t *r = d->reqs;
    while (r && !(r->id == id && r->taken && !r->answered))
        r = r->next;
    if (r) {
        r->answer = text;
        r->answer_len = text ? strlen(text) : 0;
        r->errnum = json_is_integer(en) ? (int)json_integer_value(en) : 0;
        r->answered = 1;
        text = NULL;
        pthread_cond_broadcast(&d->answered);
    } else {
        stream_t *s = stream_find(d, id); /* its watch: refused ends it */
        if (s && json_is_integer(en)) {
            s->failed = 1;
            pthread_cond_broadcast(&d->news);
        }
    }
    pthread_mutex_unlock(&d->lock);
    free(text);
}

int br_dash_news(br_dash_t *d, const void *route, size_t len, int64_t job)
{
    if (!br_dash_is_route(route, len))
        return -1;
    pthread_mutex_lock(&d->lock);
    stream_t *s = stream_find(d, id_of(route));
    int rc = s && !s->dropped ? 0 : -1;
    if (rc == 0) {
        size_t i = 0;
        while (i < s->nnews && s->news[i] != job)
            i++;
        if (i == s->nnews) { /* not told yet */
            if (s->nnews == NEWS_MAX)
                s->dropped = 1; /* it does not keep up: dropped, never waited for */
            else
                s->news[s->nnews++] = job;
        }
        pthread_cond_broadcast(&d->news);
    }
    pthread_mutex_unlock(&d->lock);
    return s && !s->dropped ? 0 : -1;
}

/* --- serving (libmicrohttpd's threads) ------------------------------------------ */

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
    req_t *r =
        d->stopping ? NULL : enqueue(d, id ? id : d->next_id++, key, type, body, 0);
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
    unlink_req(d, r);
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
    req_free(r);
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
    return !d->stopping && !s->dropped && !s->failed && session_at(d, s->session);
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
    if (body && enqueue(d, s->id, s->key, "event.watch", body, 1))
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
        while (s->nnews && n + 64 < max) {
            n += (size_t)snprintf(buf + n, max - n,
                                  "event: news\ndata: {\"job\":%lld}\n\n",
                                  (long long)s->news[0]);
            memmove(s->news, s->news + 1, --s->nnews * sizeof(s->news[0]));
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
    req_free(w);
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
    if (login_take(d, t, id, &why) < 0)
        return reply_page_error(conn, 401, why);
    snprintf(cookie, sizeof(cookie),
             COOKIE "=%s; Path=/; HttpOnly; SameSite=Strict; Max-Age=%lld", id,
             (long long)(d->session_ttl_ms + 999) / 1000);
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
static const char *cross_site(conn_t *conn, const session_t *s)
{
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
        if (!host || strncmp(origin, "http://", 7) != 0 ||
            strcmp(origin + 7, host) != 0)
            return "a request from another origin (Origin)";
    }
    return NULL;
}

/* A node's name in a path: [A-Za-z0-9._-], 1..63. */
static int node_name(const char *s, size_t n, char *out)
{
    if (n == 0 || n > 63)
        return -1;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
              (s[i] >= '0' && s[i] <= '9') || s[i] == '.' || s[i] == '_' ||
              s[i] == '-'))
            return -1;
    memcpy(out, s, n);
    out[n] = '\0';
    return 0;
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
    if (get && strcmp(url, "/login") == 0)
        return login(d, conn);
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
    if (!cookie || secret_hash(cookie, hash) < 0 || session_get(d, cookie, &s) < 0) {
        const char *why = cookie ? "Your session has expired or is not known here."
                                 : "You are not logged in.";
        int ret = api || post ? reply_error(conn, 401, why)
                              : reply_page_error(conn, 401, why);
        sodium_memzero(&s, sizeof(s));
        return ret;
    }
    int ret;
    if (post) {
        const char *why = cross_site(conn, &s);
        if (why)
            ret = reply_error(conn, 403, why);
        else if (strcmp(url, "/logout") == 0) {
            session_end(d, hash);
            ret = reply(conn, 200, "application/json", "{}", 2,
                        MHD_HTTP_HEADER_SET_COOKIE,
                        COOKIE "=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0");
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
