/* zap.h - the ZAP handler (ZeroMQ RFC 27) run inside a daemon's poll loop: it learns
 * each connecting peer's proven CURVE public key, asks the daemon whether that key
 * may connect at all, and sets the connection's User-Id to the key (Z85), which the
 * daemon then uses to authorize every message. A ROUTER cannot drop one peer later,
 * so per-message checks, not this handler, enforce revocation on live connections. */
#ifndef BRAMBLE_ZAP_H
#define BRAMBLE_ZAP_H

#include "err.h"

typedef struct br_zap br_zap_t;

/* Returns 0 to let the key connect, -1 to refuse it. */
typedef int (*br_zap_check_fn)(void *arg, const char *public_key);

br_zap_t *br_zap_new(void *ctx, br_zap_check_fn check, void *arg, br_err_t *err);
void br_zap_destroy(br_zap_t **zap);

/* The REP socket to poll for ZMQ_POLLIN. */
void *br_zap_socket(br_zap_t *zap);

/* Answer every waiting request without blocking. */
void br_zap_handle(br_zap_t *zap);

#endif
