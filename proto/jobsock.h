/* jobsock.h - talking to the agent of this node from inside a job (`bramble
 * checkpoint`, `bramble progress`): an abstract unix socket named "@bramble-agent/<node>/<pid>" (the
 * job's BRAMBLE_AGENT_SOCK), SOCK_SEQPACKET, one JSON request and one JSON reply. The
 * agent side is agent/localsock.c. */
#ifndef BRAMBLE_JOBSOCK_H
#define BRAMBLE_JOBSOCK_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "err.h"

#define BR_LOCAL_MSG_MAX 8192
#define BR_JOBSOCK_PATH_MAX 4096 /* bytes of a reported path, with its NUL */

/* One request a job may send: {"type": "checkpoint", "path": P, "step": N}, or
 * {"type": "progress", "step"?: N} (the job is alive: see agent/hang.h). */
typedef struct {
    char type[16];                  /* "checkpoint" or "progress" */
    char path[BR_JOBSOCK_PATH_MAX]; /* checkpoint: absolute and canonical: no "//",
                                       ".", "..", no trailing '/'; progress: "" */
    int64_t step;                   /* >= 0; progress: -1 when not given */
} br_jobsock_req_t;

/* Decode and validate one request as it came off the socket (len bytes, not
 * NUL-terminated). 0 and req filled, or -1 with err saying what is wrong. Pure: no
 * I/O, safe on any input. */
int br_jobsock_decode(const void *buf, size_t len, br_jobsock_req_t *req, br_err_t *err);

/* "@name" -> an abstract socket address; returns its length, 0 when malformed. */
socklen_t br_local_addr(const char *address, struct sockaddr_un *sa);

/* Send req to the agent at address, wait up to timeout_ms for the reply. Returns
 * the reply (new reference), or NULL with err; a reply {"error": text} comes back
 * as NULL with that text. */
json_t *br_local_request(const char *address, json_t *req, int timeout_ms,
                         br_err_t *err);

#endif
