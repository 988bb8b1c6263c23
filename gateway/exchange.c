/* exchange.c - one request through the gateway (see exchange.h). */
#include "exchange.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <strings.h>

#include <jansson.h>

#include "easypool.h"
#include "util.h"


gw_exchange_t *gw_exchange_new(struct MHD_Connection *conn, const char *path,
                               size_t body_max)
{
    gw_exchange_t *x = malloc(sizeof(*x));
    if (!x)
        return NULL;
    memset(x, 0, offsetof(gw_exchange_t, tail));
    x->conn = conn;
    x->body_max = body_max;
    snprintf(x->path, sizeof(x->path), "%s", path);
    return x;
}

void gw_exchange_free(gw_exchange_t *x)
{
    if (!x)
        return;
    gw_exchange_end_try(x);
    free(x->body);
    free(x->out);
    free(x->own);
    json_decref(x->key_models);
    free(x);
}

void gw_exchange_take(gw_exchange_t *x, const char *data, size_t len)
{
    if (x->too_big || x->body_len + len > x->body_max) {
        x->too_big = 1;
        return;
    }
    char *b = realloc(x->body, x->body_len + len + 1);
    if (!b) {
        x->too_big = 1;
        return;
    }
    memcpy(b + x->body_len, data, len);
    x->body_len += len;
    b[x->body_len] = '\0';
    x->body = b;
}

int gw_exchange_rename(gw_exchange_t *x, const char *name)
{
    json_t *body = json_loadb(x->body ? x->body : "", x->body_len, 0, NULL);
    if (!json_is_object(body) || json_object_set_new(body, "model", json_string(name)) < 0) {
        json_decref(body);
        return -1;
    }
    char *text = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    if (!text)
        return -1;
    free(x->body);
    x->body = text;
    x->body_len = strlen(text);
    snprintf(x->sent_as, sizeof(x->sent_as), "%s", name);
    return 0;
}

void gw_exchange_suspend(gw_exchange_t *x)
{
    if (!x->suspended) {
        MHD_suspend_connection(x->conn);
        x->suspended = 1;
    }
}

static uint64_t resumes; /* (one loop, one thread) */

void gw_exchange_resume(gw_exchange_t *x)
{
    if (x->suspended) {
        x->suspended = 0;
        resumes++;
        MHD_resume_connection(x->conn);
    }
}

uint64_t gw_exchange_resumed(void)
{
    return resumes;
}

/* Keep len bytes of the answer to send; -1 when out of memory. */
static int out_add(gw_exchange_t *x, const char *data, size_t len)
{
    if (x->out_off && x->out_off == x->out_len)
        x->out_off = x->out_len = 0;
    if (x->out_len + len > x->out_cap) {
        if (x->out_off) { /* what was sent makes room first */
            memmove(x->out, x->out + x->out_off, x->out_len - x->out_off);
            x->out_len -= x->out_off;
            x->out_off = 0;
        }
        size_t cap = x->out_cap ? x->out_cap : 16384;
        while (cap < x->out_len + len)
            cap *= 2;
        char *o = cap != x->out_cap ? realloc(x->out, cap) : x->out;
        if (!o)
            return -1;
        x->out = o;
        x->out_cap = cap;
    }
    memcpy(x->out + x->out_len, data, len);
    x->out_len += len;
    return 0;
}

static size_t on_header(char *buf, size_t size, size_t n, void *arg)
{
    gw_exchange_t *x = arg;
    size_t len = size * n;
    if (len >= 13 && strncasecmp(buf, "Content-Type:", 13) == 0) {
        const char *v = buf + 13;
        size_t vl = len - 13;
        while (vl && (*v == ' ' || *v == '\t'))
            v++, vl--;
        while (vl && (v[vl - 1] == '\r' || v[vl - 1] == '\n' || v[vl - 1] == ' '))
            vl--;
        snprintf(x->ctype, sizeof(x->ctype), "%.*s", (int)vl, v);
    } else if (len >= 5 && strncmp(buf, "HTTP/", 5) == 0) {
        x->ctype[0] = '\0'; /* (a new status line: an interim answer came before) */
    } else if ((len == 2 && buf[0] == '\r') || (len == 1 && buf[0] == '\n')) {
        long code = 0;
        curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &code);
        if (code < 200)
            return len; /* an interim answer: the real one follows */
        if (code == 502 || code == 503) {
            /* nothing reached the client: another replica, or after the third the
             * gateway's own 502 (the replica taken out and reported all the same) */
            x->retry_wanted = (int)code;
            return 0;
        }
        x->status = (int)code;
        x->state = GW_X_ANSWER;
        if (x->rep) /* it lives: the others need not wait for this answer's end */
            gw_replica_answered(x->rep, &x->opened);
        gw_exchange_resume(x);
    }
    return len;
}

/* Keep the end of the answer (its last GW_EXCHANGE_TAIL bytes). */
static void tail_add(gw_exchange_t *x, const char *data, size_t len)
{
    if (len >= GW_EXCHANGE_TAIL) {
        memcpy(x->tail, data + len - GW_EXCHANGE_TAIL, GW_EXCHANGE_TAIL);
        x->tail_len = GW_EXCHANGE_TAIL;
        return;
    }
    if (x->tail_len + len > GW_EXCHANGE_TAIL) {
        size_t drop = x->tail_len + len - GW_EXCHANGE_TAIL;
        memmove(x->tail, x->tail + drop, x->tail_len - drop);
        x->tail_len -= drop;
    }
    memcpy(x->tail + x->tail_len, data, len);
    x->tail_len += len;
}

double gw_exchange_now(void)
{
    return (double)br_mono_us() / 1e6;
}

/* The integer after "key": in o's text (at most end), or 0. */
static int64_t usage_field(const char *o, const char *end, const char *key)
{
    size_t kl = strlen(key);
    for (const char *p = o; p + kl + 2 < end; p++)
        if (*p == '"' && strncmp(p + 1, key, kl) == 0 && p[kl + 1] == '"') {
            p += kl + 2;
            while (p < end && (*p == ' ' || *p == ':'))
                p++;
            int64_t v = 0;
            while (p < end && *p >= '0' && *p <= '9' && v < (INT64_C(1) << 50))
                v = v * 10 + (*p++ - '0');
            return v;
        }
    return 0;
}

void gw_exchange_usage(const gw_exchange_t *x, int64_t *prompt, int64_t *completion)
{
    *prompt = *completion = 0;
    const char *t = x->tail, *end = x->tail + x->tail_len;
    for (const char *p = end - 7; p >= t; p--) { /* the last "usage": {...} */
        if (memcmp(p, "\"usage\"", 7) != 0)
            continue;
        const char *o = p + 7;
        while (o < end && (*o == ' ' || *o == ':'))
            o++;
        if (o >= end || *o != '{')
            continue; /* ("usage": null, in a stream's earlier events) */
        const char *close = o;
        for (int depth = 0; close < end; close++) /* (its own details nest in it) */
            if (*close == '{')
                depth++;
            else if (*close == '}' && --depth == 0)
                break;
        if (close >= end)
            return;
        *prompt = usage_field(o, close, "prompt_tokens");
        *completion = usage_field(o, close, "completion_tokens");
        return;
    }
}

static size_t on_body(char *data, size_t size, size_t n, void *arg)
{
    gw_exchange_t *x = arg;
    size_t len = size * n;
    if (x->client_gone)
        return 0; /* ends the try */
    if (x->out_len - x->out_off >= GW_EXCHANGE_BUFFER) {
        x->paused = 1; /* the client reads slower than the replica writes */
        return CURL_WRITEFUNC_PAUSE;
    }
    if (out_add(x, data, len) < 0)
        return 0;
    if (!x->first)
        x->first = gw_exchange_now();
    tail_add(x, data, len);
    gw_exchange_resume(x);
    return len;
}

int gw_exchange_try(gw_exchange_t *x, gw_replica_t *r, long timeout_ms,
                    gw_easypool_t *pool)
{
    char url[GW_PATH_MAX + 320];
    gw_exchange_end_try(x);
    x->pool = pool;
    x->easy = gw_easypool_get(pool);
    if (!x->easy)
        return -1;
    x->rep = r;
    snprintf(x->who, sizeof(x->who), "%s/%d", r->svc->name, r->replica);
    x->tries++;
    x->tried_ms = br_now_ms();
    x->retry_wanted = x->upstream_done = 0;
    x->opened = x->held_back = 0;
    x->rc = CURLE_OK;
    x->cerr[0] = '\0';
    x->state = GW_X_UPSTREAM;
    snprintf(url, sizeof(url), "%s%s", r->base, x->path);
    CURL *e = x->easy;
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_PRIVATE, x);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    /* straight to the replica: an http_proxy in the gateway's environment is not for
     * its replicas (and each try no longer reads the environment) */
    curl_easy_setopt(e, CURLOPT_PROXY, "");
    curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
    curl_easy_setopt(e, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
    curl_easy_setopt(e, CURLOPT_POSTFIELDS, x->body ? x->body : "");
    curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)x->body_len);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, gw_easypool_headers(pool));
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, x);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, x);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, x->cerr);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, 5000L);
    /* a replica that sends nothing for this long is given up (a stream's tokens
     * keep it going however long it runs) */
    curl_easy_setopt(e, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(e, CURLOPT_LOW_SPEED_TIME, (long)(timeout_ms / 1000 ? timeout_ms / 1000 : 1));
    return 0;
}

void gw_exchange_end_try(gw_exchange_t *x)
{
    if (x->easy)
        gw_easypool_put(x->pool, x->easy);
    x->easy = NULL;
    x->paused = 0;
}

char *gw_error_text(int status, const char *type, const char *msg)
{
    json_t *e = json_pack("{s:{s:s, s:s, s:n, s:i}}", "error", "message", msg, "type", type,
                          "param", "code", status);
    char *text = e ? json_dumps(e, JSON_COMPACT) : NULL;
    json_decref(e);
    return text;
}

void gw_exchange_fail(gw_exchange_t *x, int status, const char *type, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    free(x->own);
    x->own = gw_error_text(status, type, msg);
    x->status = status;
    x->state = GW_X_ANSWER;
}

int gw_exchange_is_sse(const gw_exchange_t *x)
{
    return strncasecmp(x->ctype, "text/event-stream", 17) == 0;
}

/* The replica's answer as it comes (libmicrohttpd's content reader). */
static ssize_t read_answer(void *arg, uint64_t pos, char *buf, size_t max)
{
    gw_exchange_t *x = arg;
    if (x->client_gone)
        return MHD_CONTENT_READER_END_WITH_ERROR;
    if (x->out_off == x->out_len && x->upstream_done && x->rc != CURLE_OK &&
        gw_exchange_is_sse(x) && !x->sse_error_sent) {
        /* a stream cut off: the client hears why, as an event, never a hang */
        char ev[1200];
        char *t = gw_error_text(502, "upstream_error",
                                x->cerr[0] ? x->cerr : curl_easy_strerror(x->rc));
        snprintf(ev, sizeof(ev), "data: %s\n\n", t ? t : "{}");
        free(t);
        x->sse_error_sent = 1;
        if (out_add(x, ev, strlen(ev)) < 0)
            return MHD_CONTENT_READER_END_WITH_ERROR;
    }
    size_t have = x->out_len - x->out_off;
    if (have) {
        size_t n = have < max ? have : max;
        memcpy(buf, x->out + x->out_off, n);
        x->out_off += n;
        if (x->paused && x->easy && x->out_len - x->out_off < GW_EXCHANGE_BUFFER / 2) {
            x->paused = 0;
            curl_easy_pause(x->easy, CURLPAUSE_CONT); /* (may call on_body at once) */
        }
        return (ssize_t)n;
    }
    if (x->upstream_done)
        return x->rc == CURLE_OK || x->sse_error_sent ? MHD_CONTENT_READER_END_OF_STREAM
                                                      : MHD_CONTENT_READER_END_WITH_ERROR;
    gw_exchange_suspend(x); /* resumed when more comes */
    return 0;
}

enum MHD_Result gw_exchange_respond(gw_exchange_t *x, int retry_after)
{
    struct MHD_Response *resp;
    if (x->own) {
        resp = MHD_create_response_from_buffer(strlen(x->own), x->own, MHD_RESPMEM_MUST_COPY);
        if (resp)
            MHD_add_response_header(resp, "Content-Type", "application/json");
    } else if (x->upstream_done && x->rc == CURLE_OK && !gw_exchange_is_sse(x)) {
        /* the whole answer is here: its head and body go out in one write */
        resp = MHD_create_response_from_buffer(x->out_len - x->out_off,
                                               x->out ? x->out + x->out_off : (char *)"",
                                               MHD_RESPMEM_MUST_COPY);
        x->out_off = x->out_len;
        if (resp && x->ctype[0])
            MHD_add_response_header(resp, "Content-Type", x->ctype);
    } else {
        curl_off_t len = -1;
        if (x->easy && !gw_exchange_is_sse(x))
            curl_easy_getinfo(x->easy, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &len);
        resp = MHD_create_response_from_callback(len >= 0 ? (uint64_t)len : MHD_SIZE_UNKNOWN,
                                                 16384, read_answer, x, NULL);
        if (resp && x->ctype[0])
            MHD_add_response_header(resp, "Content-Type", x->ctype);
        if (resp && gw_exchange_is_sse(x))
            MHD_add_response_header(resp, "Cache-Control", "no-cache");
    }
    if (!resp)
        return MHD_NO;
    if (x->who[0])
        MHD_add_response_header(resp, "X-Bramble-Replica", x->who);
    if (retry_after > 0) {
        char ra[16];
        snprintf(ra, sizeof(ra), "%d", retry_after);
        MHD_add_response_header(resp, "Retry-After", ra);
    }
    x->state = GW_X_RESPONDING;
    enum MHD_Result r = MHD_queue_response(x->conn, (unsigned)x->status, resp);
    MHD_destroy_response(resp);
    return r;
}
