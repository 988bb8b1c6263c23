/* gateway.h - bramble-gateway: the one OpenAI-compatible endpoint in front of every
 * service with a service.model (docs/gateway.md). One thread runs it all: the
 * HTTP side toward clients (libmicrohttpd, driven from outside through its epoll
 * fd), the requests to replicas (libcurl's multi interface, which keeps their
 * connections for reuse), and the link to the coordinator (coordlink.h), in one
 * poll. */
#ifndef BRAMBLE_GW_GATEWAY_H
#define BRAMBLE_GW_GATEWAY_H

#include <stddef.h>
#include <stdint.h>

#include "cred.h"
#include "err.h"

typedef struct {
    br_cred_t cred;
    char listen[300];      /* ADDR:PORT (PORT 0: any free one) */
    const char *tls_cert;  /* PEM files; both or neither */
    const char *tls_key;
    size_t max_body;       /* bytes of a request's body (413 past it) */
    int queue_max;         /* requests waiting per service (429 past it) */
    int64_t wait_ms;       /* how long a request waits for a replica (503 after) */
    int64_t client_ms;     /* a client must send its whole request within this */
    int64_t upstream_ms;   /* a replica silent this long is given up */
    int max_conns;         /* client connections at once */
} gw_config_t;

void gw_config_defaults(gw_config_t *cfg);

typedef struct gw gw_t;

gw_t *gw_new(const gw_config_t *cfg, br_err_t *err);
void gw_destroy(gw_t **g);
/* The port it listens on (the one chosen, for PORT 0). */
int gw_port(const gw_t *g);
/* Serve until SIGTERM or SIGINT. 0, or -1 with err. */
int gw_run(gw_t *g, br_err_t *err);

#endif
