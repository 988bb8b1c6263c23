/* exchange.h - one request through the gateway: the client's request as it comes
 * in (its body kept whole, at most the gateway's limit), then each try on a
 * replica (a libcurl easy handle), and the replica's answer passed back to the
 * client as it comes (a libmicrohttpd response read from a callback).
 *
 * While it waits (for a replica, for the replica's headers, for more of its body)
 * the client's connection is suspended; the curl callbacks resume it when there
 * is something to send. A replica's answer is buffered only up to
 * GW_EXCHANGE_BUFFER: past it the replica is paused until the client reads. */
#ifndef BRAMBLE_GW_EXCHANGE_H
#define BRAMBLE_GW_EXCHANGE_H

#include <curl/curl.h>
#include <jansson.h>
#include <microhttpd.h>
#include <stddef.h>
#include <stdint.h>

#include "table.h"

#define GW_EXCHANGE_BUFFER (1 << 20)
#define GW_PATH_MAX 512
#define GW_EXCHANGE_TAIL 4096 /* the end of an answer kept to read its "usage" */

typedef enum {
    GW_X_RECEIVING, /* the client's body comes */
    GW_X_WAITING,   /* queued for a replica */
    GW_X_UPSTREAM,  /* sent to a replica; its headers not here yet */
    GW_X_ANSWER,    /* the status to answer with is known (a replica's, or ours) */
    GW_X_RESPONDING /* the answer is queued: its body goes as it comes */
} gw_xstate_t;

typedef struct gw_exchange {
    struct MHD_Connection *conn;
    gw_xstate_t state;
    int suspended;   /* the connection is (MHD_suspend_connection) */
    int client_gone; /* the client hung up: end it */
    char path[GW_PATH_MAX];
    char *body;
    size_t body_len, body_max;
    int too_big;
    char model[132];
    char sent_as[132];  /* the model name the body holds now, once renamed ("": as sent) */
    int64_t wait_until; /* monotonic ms a queued request gives up */
    int64_t wait_ms;    /* ... after waiting this long */
    int64_t svc_id;     /* the service it was last sent to (0: none) */
    gw_service_t *wait_svc; /* the service it is queued for (counted there) */
    struct gw_exchange *wnext, *wprev;
    gw_replica_t *rep; /* the replica of the current try; NULL once it ended */
    char who[160];     /* SERVICE/REPLICA of the last try (X-Bramble-Replica) */
    int tries;
    int64_t tried_ms;   /* wall-clock unix ms the current try began (said in the log) */
    void *owner;        /* the gateway serving it (libcurl's socket callbacks are given
                         * the exchange) */
    int opened;         /* this try opens connections to a replica in doubt (its one) */
    int held_back;      /* ... or was refused one by the gateway: sent elsewhere, and
                         * not counted as a try */
    CURL *easy;
    struct gw_easypool *pool; /* where easy came from, and goes back */
    int status;         /* the answer's */
    char ctype[128];    /* the replica's Content-Type */
    int retry_wanted;   /* a 502/503 before any byte (that code): try another replica */
    int upstream_done;  /* the try ended */
    CURLcode rc;
    char cerr[CURL_ERROR_SIZE];
    char *out;          /* the answer's bytes not yet sent */
    size_t out_len, out_off, out_cap;
    int paused;         /* the replica is paused (the buffer is full) */
    int sse_error_sent; /* a stream cut off got its error event */
    char *own;          /* our own answer's body (an error), when not the replica's */
    int retry_after;    /* seconds for Retry-After (0: the status's default) */
    /* whose request it is (keys.h): key_state 1 with a key the gateway knows, -1
     * with a key it does not (revoked, or never made), 0 with none */
    int key_state;
    int64_t user_id;    /* the key's user (0: none) */
    json_t *key_models; /* the names the key may be used for ([]: every one) */
    int known;          /* its model is a name of the routing table */
    /* for the ledger (ledger.h): monotonic seconds the request came whole and the
     * first byte of a replica's answer came (0: none yet); the answer's last bytes,
     * where its "usage" is (the end of a JSON answer, the last events of a stream) */
    double began, first;
    size_t tail_len;
    char tail[GW_EXCHANGE_TAIL]; /* (last: not zeroed when made, only tail_len bytes
                                  * are ever read) */
} gw_exchange_t;

gw_exchange_t *gw_exchange_new(struct MHD_Connection *conn, const char *path,
                               size_t body_max);
/* Free x: its curl handle must be out of the multi handle already. */
void gw_exchange_free(gw_exchange_t *x);

/* The body's "model" becomes name (an alias asked for: the replicas know the
 * model by its own name). 0, or -1 (out of memory, or the body is not JSON). */
int gw_exchange_rename(gw_exchange_t *x, const char *name);

/* Add len bytes of the client's body (past body_max: too_big, the rest dropped). */
void gw_exchange_take(gw_exchange_t *x, const char *data, size_t len);

/* Suspend or resume the client's connection (once each). gw_exchange_resumed
 * counts the resumes so far: libmicrohttpd handles a resumed connection in its
 * next run, so the loop runs it again while the count moves. */
void gw_exchange_suspend(gw_exchange_t *x);
void gw_exchange_resume(gw_exchange_t *x);
uint64_t gw_exchange_resumed(void);

/* A new try on replica r: an easy handle that POSTs the body to r's base + path
 * (the caller adds it to the multi handle). 0, or -1 (out of memory). */
int gw_exchange_try(gw_exchange_t *x, gw_replica_t *r, long timeout_ms,
                    struct gw_easypool *pool);
/* Let the try's easy handle go (already out of the multi handle). */
void gw_exchange_end_try(gw_exchange_t *x);

/* An error in the OpenAI shape, {"error": {"message", "type", "param": null,
 * "code"}}, as compact JSON text (malloc'd; NULL when out of memory). */
char *gw_error_text(int status, const char *type, const char *msg);

/* Answer with our own error in the OpenAI shape: {"error": {"message", "type",
 * "param": null, "code"}}; state GW_X_ANSWER. */
void gw_exchange_fail(gw_exchange_t *x, int status, const char *type, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Queue the answer on the connection (state GW_X_ANSWER -> GW_X_RESPONDING):
 * MHD_YES, or MHD_NO. retry_after (seconds, 0: none) adds Retry-After. */
enum MHD_Result gw_exchange_respond(gw_exchange_t *x, int retry_after);

/* Whether the answer is a stream of server-sent events. */
int gw_exchange_is_sse(const gw_exchange_t *x);

/* Monotonic seconds, finer than ms (for the ledger's latencies). */
double gw_exchange_now(void);

/* The tokens the replica's answer says it used: the last "usage" object in the
 * end of its answer (a JSON answer's, or a stream's last events when the client
 * asked for stream_options.include_usage). 0 each when there is none. */
void gw_exchange_usage(const gw_exchange_t *x, int64_t *prompt, int64_t *completion);

#endif
