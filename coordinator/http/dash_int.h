/* dash_int.h - what dashboard.c (the object: secrets, sessions, the queue to the
 * loop) and dash_http.c (its answers to HTTP requests, in libmicrohttpd's threads)
 * share. Not for other files: they use dashboard.h. Everything in struct br_dash
 * but hist is under its lock. */
#ifndef BRAMBLE_DASH_INT_H
#define BRAMBLE_DASH_INT_H

#include <pthread.h>
#include <stdint.h>

#include "dashboard.h"
#include "gpuhist.h"

#define WAIT_MS 10000        /* an API request waits this long for the loop */
#define TICK_MS 5000         /* a stream says "tick" this often when idle */
#define RENEW_MS 10000       /* a stream renews its watch this often */
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
    int news; /* the loop told of news (of job: its one watcher's), not yet sent */
    int hello, failed;
    int64_t renewed, ticked; /* monotonic ms */
} stream_t;

struct br_dash {
    char addr[72];
    int tls; /* served over HTTPS: links say https, cookies are Secure */
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
    br_gpuhist_t *hist; /* the loop's alone (gpuhist.h): no lock */
};

/* dashboard.c, for dash_http.c; "under lock" ones expect d->lock held. */
void dash_req_free(req_t *r);
int dash_secret_hash(const char *text, unsigned char *hash);
/* Trade a login secret for a new session (single use): 0 with the session id in
 * id, or -1 with the reason in why. */
int dash_login_take(br_dash_t *d, const char *secret, char *id, const char **why);
/* Under lock: the session of a cookie's hash; NULL when none or expired. */
session_t *dash_session_at(br_dash_t *d, const unsigned char *hash);
/* A copy of the session of a cookie's hash (dash_secret_hash): 0, or -1 (forged,
 * expired). */
int dash_session_get(br_dash_t *d, const unsigned char *hash, session_t *out);
void dash_session_end(br_dash_t *d, const unsigned char *hash);
/* Under lock: queue a request (body stolen); NULL when the queue is full. */
req_t *dash_enqueue(br_dash_t *d, uint64_t id, const char *key, const char *type,
                    json_t *body, int nowait);
/* Under lock: take r off the queue. */
void dash_unlink_req(br_dash_t *d, req_t *r);

#endif
