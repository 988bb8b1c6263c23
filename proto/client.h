/* client.h - a request/response client over one CURVE DEALER, with its own ZeroMQ
 * context: what the CLI (and an agent's join) use to talk to the coordinator. */
#ifndef BRAMBLE_CLIENT_H
#define BRAMBLE_CLIENT_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "cred.h"
#include "err.h"
#include "msg.h"

typedef struct br_client br_client_t;

br_client_t *br_client_new(const char *endpoint, const char *server_public_key,
                           const char *public_key, const char *secret_key,
                           br_err_t *err);
br_client_t *br_client_new_cred(const br_cred_t *cred, br_err_t *err);
void br_client_destroy(br_client_t **client);

/* The host of a "tcp://HOST:PORT" endpoint must resolve, else libzmq retries in
 * silence and a request waits out its timeout: 0 when it resolves (or the endpoint
 * is not tcp://, or the resolver fails in another way), else -1 with EHOSTUNREACH
 * "cannot resolve HOST (the host of ENDPOINT): why" (no such name, or no answer
 * from the resolver now). */
int br_client_check_host(const char *endpoint, br_err_t *err);

/* Send a request of this type (body is stolen; NULL sends {}), wait up to
 * timeout_ms for its response. On success *resp (may be NULL if not wanted) is the
 * response, which the caller destroys. A refusal from the coordinator returns -1 with
 * its errnum and reason in err; so do a refused key and a coordinator that does not
 * answer, each with words saying which. */
int br_client_rpc(br_client_t *c, const char *type, json_t *body, int timeout_ms,
                  br_msg_t **resp, br_err_t *err);

/* The same in two halves, so that several requests can be in flight on the one
 * connection (the coordinator answers them in order, often after one commit):
 * br_client_send sends (body stolen) and gives the request's seq; br_client_recv
 * waits up to timeout_ms for the answer to seq, keeping the answers to other
 * requests still in flight that come first. At most BR_CLIENT_PENDING requests are
 * in flight (EBUSY beyond); one whose br_client_recv failed is forgotten, and its
 * answer dropped if it comes later. */
#define BR_CLIENT_PENDING 8
int br_client_send(br_client_t *c, const char *type, json_t *body, uint32_t *seq,
                   br_err_t *err);
int br_client_recv(br_client_t *c, uint32_t seq, int timeout_ms, br_msg_t **resp,
                   br_err_t *err);
/* br_client_recv without waiting, for a caller whose own loop polls
 * br_client_socket: 1 with *resp (as br_client_recv) when the answer to seq has
 * come, 0 when it has not (seq stays in flight; others that came are kept), -1 with
 * err when it was a refusal (seq forgotten). Give up on one with br_client_recv(c,
 * seq, 0, ...). */
int br_client_try(br_client_t *c, uint32_t seq, br_msg_t **resp, br_err_t *err);
/* The connection's ZeroMQ socket, to poll for ZMQ_POLLIN (answers came). */
void *br_client_socket(br_client_t *c);
/* br_client_send with a data frame of len bytes (copied; data NULL: none). */
int br_client_send_data(br_client_t *c, const char *type, json_t *body, const void *data,
                        size_t len, uint32_t *seq, br_err_t *err);

/* Like br_client_rpc, but the response body is returned (new reference) and the
 * message dropped. */
json_t *br_client_call(br_client_t *c, const char *type, json_t *body, int timeout_ms,
                       br_err_t *err);

/* After an event.watch request (PROTOCOL.md): wait up to timeout_ms for the
 * coordinator's "event.news". 1 when news came (now, or while a request waited for
 * its answer), 0 when none came in time, -1 on a socket error. */
int br_client_wait_news(br_client_t *c, int timeout_ms, br_err_t *err);

#endif
