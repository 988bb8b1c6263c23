/* localsock.h - the socket jobs use to talk to their own agent (`bramble checkpoint`
 * inside a job): an abstract unix socket "@bramble-agent/<node>/<pid>", SOCK_SEQPACKET,
 * one JSON request and one JSON reply per connection. The caller is identified by
 * the kernel (SO_PEERCRED) and its process's BRAMBLE_TASK tag, never by the body. */
#ifndef BRAMBLE_LOCALSOCK_H
#define BRAMBLE_LOCALSOCK_H

#include <jansson.h>

#include "err.h"
#include "jobsock.h"

typedef struct br_localsock br_localsock_t;

/* Handle one request from the attempt whose task tag is tag. Returns a reply body
 * (new reference), or NULL with err for an error reply. */
typedef json_t *(*br_localsock_fn)(void *arg, const char *tag, json_t *req,
                                   br_err_t *err);

br_localsock_t *br_localsock_new(const char *node, br_err_t *err);
void br_localsock_destroy(br_localsock_t **l);

int br_localsock_fd(const br_localsock_t *l);
/* What jobs get as BRAMBLE_AGENT_SOCK: "@bramble-agent/<node>/<agent pid>". */
const char *br_localsock_address(const br_localsock_t *l);

/* Accept and answer the waiting connections (non-blocking). */
void br_localsock_serve(br_localsock_t *l, br_localsock_fn fn, void *arg);

#endif
