/* dashboard.h - the web dashboard on the HTTP side (docs/dashboard.md): one-time
 * login links, sessions (an HttpOnly, SameSite=Strict cookie), CSRF tokens, the
 * built-in page and its assets, the JSON API and the server-sent event streams.
 *
 * This object is shared by libmicrohttpd's threads and the coordinator's loop, and
 * holds no coordinator state: a session is only a cookie's hash, the CURVE public
 * key of the user who asked for the login link, and an expiry. Every API request is
 * queued here (bounded) and handed to the loop through an eventfd (br_dash_fd); the
 * loop dispatches it as an ordinary request of that key (api_dash.c), through the
 * same handler table and rights checks as `bramble`, and its answer comes back
 * here. An event stream is a watcher of the loop (event.watch) whose news is marked
 * here (one flag: news not yet sent is told once), never waited for. */
#ifndef BRAMBLE_DASHBOARD_H
#define BRAMBLE_DASHBOARD_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

/* A login link lives a minute, a session twelve hours (for tests, the environment's
 * BRAMBLE_DASH_LOGIN_TTL and BRAMBLE_DASH_SESSION_TTL, durations, replace them). */
#define BR_DASH_LOGIN_TTL_MS 60000
#define BR_DASH_SESSION_TTL_MS (12 * 3600 * 1000)
#define BR_DASH_SESSIONS_MAX 256
#define BR_DASH_LOGINS_MAX 64
#define BR_DASH_QUEUE_MAX 32   /* API requests waiting for the loop */
#define BR_DASH_STREAMS_MAX 16 /* event streams at once */
#define BR_DASH_SECRET_HEX 64  /* a login secret, a session id: 32 random bytes */
#define BR_DASH_KEY_MAX 64     /* a Z85 public key and its NUL */
/* The routing id of the loop's messages for the dashboard. libzmq makes its own ids
 * 5 bytes long, but a peer may choose one (ZMQ_ROUTING_ID, even with a zero byte
 * first): the loop drops every message from its socket whose id has this form
 * (br_dash_posed, api.h), so the dashboard's answers reach only the dashboard. */
#define BR_DASH_ROUTE_PREFIX "\0dash:"
#define BR_DASH_ROUTE_PREFIX_LEN 6
#define BR_DASH_ROUTE_LEN (BR_DASH_ROUTE_PREFIX_LEN + 8)

typedef struct br_dash br_dash_t;

/* A dashboard whose login links point at http://ADDR (http_addr: "127.0.0.1:7780"),
 * or https://ADDR when tls (its session cookies are then Secure too). */
br_dash_t *br_dash_new(const char *http_addr, int tls);
/* Stop: every waiting request and stream ends at once (before the HTTP threads are
 * joined). br_dash_destroy stops first. */
void br_dash_stop(br_dash_t *d);
void br_dash_destroy(br_dash_t **d);

/* --- for the loop -------------------------------------------------------------- */

/* Readable when requests wait for the loop. */
int br_dash_fd(const br_dash_t *d);

/* A new one-time login link for the principal with this key (name and admin: for
 * the page's header): url gets "http(s)://ADDR/login?t=SECRET", expires_ms its end
 * (unix ms). The oldest link makes room when BR_DASH_LOGINS_MAX are waiting. */
int br_dash_login_new(br_dash_t *d, const char *key, const char *name, int admin,
                      char *url, size_t url_len, int64_t *expires_ms);

/* One request for the loop: what to send as whom. body and the request are the
 * loop's once taken; route (BR_DASH_ROUTE_LEN bytes) names it in the answer. */
typedef struct {
    unsigned char route[BR_DASH_ROUTE_LEN];
    char key[BR_DASH_KEY_MAX];
    char type[32];
    json_t *body;
} br_dash_req_t;
/* Take up to max waiting requests (the eventfd is emptied); returns how many. */
size_t br_dash_take(br_dash_t *d, br_dash_req_t *out, size_t max);

/* Whether route is one of the dashboard's (the loop then hands it here instead of
 * to its socket). */
int br_dash_is_route(const void *route, size_t len);
/* The answer to a request (body: the response's, copied; data: its data frame, or
 * NULL). An answer nobody waits for any more is dropped. */
void br_dash_answer(br_dash_t *d, const void *route, size_t len, const json_t *body,
                    const void *data, size_t data_len);
/* News of job (0: a node, or any; always the job the stream watches) for the
 * stream behind route: 0, or -1 when that stream is gone (the loop drops its
 * watcher). Never blocks. */
int br_dash_news(br_dash_t *d, const void *route, size_t len, int64_t job);

/* The last hour of each GPU's figures, for the sparklines (gpuhist.h): the
 * loop's alone, kept here because only the dashboard shows it. */
typedef struct br_gpuhist br_gpuhist_t;
br_gpuhist_t *br_dash_gpuhist(br_dash_t *d);

/* --- for the HTTP threads (http.c) --------------------------------------------- */

/* Answer a request for anything but /metrics. conn is a struct MHD_Connection.
 * Returns libmicrohttpd's MHD_YES/MHD_NO. */
int br_dash_handle(br_dash_t *d, void *conn, const char *url, const char *method,
                   size_t upload_size);

/* Counts, for tests and the log. */
typedef struct {
    size_t sessions, logins, streams, queued;
} br_dash_counts_t;
void br_dash_counts(br_dash_t *d, br_dash_counts_t *out);

#endif
