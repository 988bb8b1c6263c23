/* dashboard.c - the web dashboard's object: login secrets, sessions, the queue of
 * API requests to the loop and the news of event streams (see dashboard.h). The
 * answers to HTTP requests are in dash_http.c. Everything shared is under one
 * lock. */
#include "dashboard.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>
#include <sodium.h>

#include "dash_int.h"
#include "util.h"

/* A lifetime from the environment (tests shorten them), else dflt. */
static int64_t env_ms(const char *name, int64_t dflt)
{
    const char *v = getenv(name);
    int64_t ms;
    return v && br_parse_duration(v, &ms, NULL) == 0 && ms > 0 ? ms : dflt;
}

/* --- making and ending -------------------------------------------------------- */

br_dash_t *br_dash_new(const char *http_addr, int tls)
{
    br_dash_t *d = calloc(1, sizeof(*d));
    if (!d)
        return NULL;
    br_strlcpy(d->addr, http_addr, sizeof(d->addr));
    d->tls = tls;
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
    d->hist = br_gpuhist_new();
    if (!d->hist) {
        close(d->efd);
        free(d);
        return NULL;
    }
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

void dash_req_free(req_t *r)
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
        dash_req_free(r);
    }
    while (d->streams) { /* (freed by libmicrohttpd's callback normally) */
        stream_t *s = d->streams;
        d->streams = s->next;
        free(s);
    }
    br_gpuhist_destroy(&d->hist);
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
int dash_secret_hash(const char *text, unsigned char *hash)
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
    dash_secret_hash(secret, slot->hash);
    br_strlcpy(slot->key, key, sizeof(slot->key));
    br_strlcpy(slot->name, name, sizeof(slot->name));
    slot->admin = admin;
    slot->expires_ms = now + d->login_ttl_ms;
    *expires_ms = slot->expires_ms;
    snprintf(url, url_len, "%s://%s/login?t=%s", d->tls ? "https" : "http", d->addr,
             secret);
    pthread_mutex_unlock(&d->lock);
    sodium_memzero(secret, sizeof(secret));
    return 0;
}

/* Trade a login secret for a new session (single use): 0 with the session id in
 * id, or -1 with the reason in why. */
int dash_login_take(br_dash_t *d, const char *secret, char *id, const char **why)
{
    unsigned char hash[HASH_LEN];
    int64_t now = br_now_ms();
    if (dash_secret_hash(secret, hash) < 0) {
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
    dash_secret_hash(id, s->hash);
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
session_t *dash_session_at(br_dash_t *d, const unsigned char *hash)
{
    int64_t now = br_now_ms();
    for (size_t i = 0; i < BR_DASH_SESSIONS_MAX; i++) {
        session_t *s = &d->sessions[i];
        if (s->expires_ms > now && sodium_memcmp(s->hash, hash, HASH_LEN) == 0)
            return s;
    }
    return NULL;
}

/* A copy of the session of a cookie's hash: 0, or -1 (forged, expired). */
int dash_session_get(br_dash_t *d, const unsigned char *hash, session_t *out)
{
    pthread_mutex_lock(&d->lock);
    session_t *s = dash_session_at(d, hash);
    if (s)
        *out = *s;
    pthread_mutex_unlock(&d->lock);
    return s ? 0 : -1;
}

void dash_session_end(br_dash_t *d, const unsigned char *hash)
{
    pthread_mutex_lock(&d->lock);
    session_t *s = dash_session_at(d, hash);
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
req_t *dash_enqueue(br_dash_t *d, uint64_t id, const char *key, const char *type,
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

void dash_unlink_req(br_dash_t *d, req_t *r)
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
            dash_req_free(r);
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

void br_dash_answer(br_dash_t *d, const void *route, size_t len, const json_t *body,
                    const void *data, size_t data_len)
{
    if (!br_dash_is_route(route, len))
        return;
    uint64_t id = id_of(route);
    /* the body as it is, or with the data frame as "text" added on top: a shallow
     * copy is enough for that (this runs on the loop, for every answer) */
    json_t *copy = data ? json_copy((json_t *)body) : NULL;
    if (copy)
        json_object_set_new(copy, "text", text_json(data, data_len));
    json_t *en = json_object_get(body, "errnum");
    char *text = !data  ? json_dumps(body, JSON_COMPACT)
                 : copy ? json_dumps(copy, JSON_COMPACT)
                        : NULL;
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
    (void)job; /* the stream's own: it has one watcher, of s->job */
    pthread_mutex_lock(&d->lock);
    stream_t *s = stream_find(d, id_of(route));
    int rc = s ? 0 : -1;
    if (s) {
        s->news = 1; /* news not yet sent is told once: nothing piles up */
        pthread_cond_broadcast(&d->news);
    }
    pthread_mutex_unlock(&d->lock); /* (s may be freed from here on) */
    return rc;
}

br_gpuhist_t *br_dash_gpuhist(br_dash_t *d)
{
    return d->hist;
}
