/* http.h - the coordinator's HTTP side (`brambled --http ADDR:PORT`), on
 * libmicrohttpd: GET /metrics with a metrics token as its bearer token
 * (docs/metrics.md). Its threads never touch the coordinator's state. They serve
 * the last page the loop published and check tokens against the last token list
 * the loop published; a request that finds the page older than a second asks the
 * loop for a new one through an eventfd (br_http_fd, polled by the loop) and waits
 * for it, with a deadline. Bounded, so that a slow or hostile client costs the
 * coordinator nothing: a few connections at once, each with an idle timeout and a
 * small request buffer; a request body is never read. Every other path goes to the
 * dashboard once one is attached (dashboard.h). */
#ifndef BRAMBLE_HTTP_H
#define BRAMBLE_HTTP_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "err.h"

#define BR_HTTP_ADDR_MAX 64          /* "[v6 address]:port" */
#define BR_HTTP_TOKEN_PREFIX "brm1." /* a metrics token: prefix + 48 hex digits */
#define BR_HTTP_TOKEN_MAX 64         /* its text and NUL fit in this */

/* Where the HTTP side listens. */
typedef struct {
    struct sockaddr_storage ss;
    socklen_t len;
    char text[BR_HTTP_ADDR_MAX]; /* "127.0.0.1:7780", "[::1]:7780" */
    int loopback;                /* 127.0.0.0/8 or ::1 */
} br_http_addr_t;

/* "7780" or ":7780" (loopback), "127.0.0.1:7780", "0.0.0.0:7780", "[::1]:7780",
 * "localhost:7780". EINVAL with the accepted forms in the words otherwise. */
int br_http_parse_addr(const char *s, br_http_addr_t *a, br_err_t *err);

/* 1 when this build has the HTTP side (libmicrohttpd was found), else 0. */
int br_http_available(void);
/* 1 when its libmicrohttpd can serve HTTPS (MHD_FEATURE_TLS: Debian's is built with
 * GnuTLS), else 0. */
int br_http_tls_available(void);

/* A fresh metrics token: text (BR_HTTP_TOKEN_MAX bytes), the hex hash the store
 * keeps (65 bytes) and the token's id (13 bytes), as for join tokens (token.h). */
void br_http_token_make(char *text, char *hash, char *id);
/* The hash of a metrics token's text: 0, or -1 when the text has not its form. */
int br_http_token_hash(const char *text, char *hash);

/* Answers counted by the HTTP side (bramble_http_requests_total{code}). */
enum {
    BR_HTTP_OK,
    BR_HTTP_UNAUTHORIZED,
    BR_HTTP_NOT_FOUND,
    BR_HTTP_BAD_METHOD,
    BR_HTTP_UNAVAILABLE,
    BR_HTTP_CODES
};
/* Why a request was unauthorized (bramble_http_unauthorized_total{reason}). */
enum {
    BR_HTTP_NO_TOKEN,
    BR_HTTP_NOT_BEARER,
    BR_HTTP_UNKNOWN_TOKEN,
    BR_HTTP_REVOKED,
    BR_HTTP_EXPIRED,
    BR_HTTP_REASONS
};
typedef struct {
    uint64_t answers[BR_HTTP_CODES];
    uint64_t unauthorized[BR_HTTP_REASONS];
} br_http_counts_t;
/* The HTTP status of answer i, the label of reason i. */
int br_http_code(int i);
const char *br_http_reason(int i);

/* A metrics token as the loop hands it over (from br_store_token_list_metrics). */
typedef struct {
    char id[16];
    char hash[65];
    int64_t expires_ms; /* 0: never */
    int revoked;
} br_http_token_t;

typedef struct br_http br_http_t;
typedef struct br_http_tls br_http_tls_t; /* httptls.h */

/* Bind a (the errno's words when that fails: "address already in use") and serve
 * in libmicrohttpd's threads: HTTPS only with tls's certificate and key (the
 * caller may wipe them once this returns; a pair libmicrohttpd refuses fails here,
 * naming both files), plain HTTP when tls is NULL. Until the first
 * br_http_set_tokens every request is answered 503. */
br_http_t *br_http_new(const br_http_addr_t *a, const br_http_tls_t *tls,
                       br_err_t *err);
/* Stop serving (waiting requests are answered 503 at once), join the threads. */
void br_http_destroy(br_http_t **h);

/* For the loop: readable when a request waits for a new page. */
int br_http_fd(const br_http_t *h);
/* Empty that fd: 1 when a request asked for a new page since the last call. */
int br_http_wanted(br_http_t *h);
/* Hand over a new page (copied); NULL: the loop could not make one (waiting
 * requests get 503). */
void br_http_publish(br_http_t *h, const char *page, size_t len);
/* Replace the metrics tokens (copied). */
int br_http_set_tokens(br_http_t *h, const br_http_token_t *tokens, size_t n);
/* Serve the dashboard (its object outlives h) on every path but /metrics; before
 * this they are 404. br_http_destroy stops it before joining the threads. */
typedef struct br_dash br_dash_t;
void br_http_attach_dash(br_http_t *h, br_dash_t *dash);
/* A copy of the counts, for the page. */
void br_http_counts(br_http_t *h, br_http_counts_t *out);

#endif
