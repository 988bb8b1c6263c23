/* agent.h - the agent: joins once with a token, then keeps one CURVE DEALER to the
 * coordinator (it listens on nothing), says hello after each connect, heartbeats
 * with its tasks, runs and kills attempts on order, ships their output and reports
 * their exits until acknowledged. One thread, one zmq_poll loop over the socket, a
 * signalfd (SIGCHLD, SIGTERM) and the attempts' pipes. */
#ifndef BRAMBLE_AGENT_H
#define BRAMBLE_AGENT_H

#include <stddef.h>

#include "err.h"
#include "settings.h"

typedef struct br_agent br_agent_t;

/* Join with s->join_token: make a key pair, prove the token over CURVE, save the
 * credential and settings in the data dir. */
int br_agent_join(br_settings_t *s, br_err_t *err);

br_agent_t *br_agent_new(const br_settings_t *s, br_err_t *err);
void br_agent_destroy(br_agent_t **a);

/* Run until SIGTERM/SIGINT (0) or a fatal refusal such as a revoked key (-1). */
int br_agent_run(br_agent_t *a, br_err_t *err);

/* The orders the agent takes from the coordinator (proto/PROTOCOL.md section 6), in
 * table order: order i's message type (NULL past the last), and the kinds it is
 * taken as, a mask of (1 << br_msg_kind_t) (0 past the last). */
const char *br_agent_order_type(size_t i);
int br_agent_order_kinds(size_t i);

#endif
