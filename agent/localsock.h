/* localsock.h - the socket jobs use to talk to their own agent (`bramble checkpoint`
 * inside a job): an abstract unix socket "@bramble-agent/<node>/<pid>", SOCK_SEQPACKET,
 * one JSON request and one JSON reply per connection (proto/jobsock.h).
 *
 * Who asks is the kernel's word, never the request's: SO_PEERCRED gives the
 * connecting process and its uid; the process must be inside a running task's
 * process tree (task.h: br_task_of_pid, by parent links, process group and session,
 * not by its environment) and run as that task's uid, or be inside the container
 * podman runs for that task (br_task_of_container: its conmon, run by the agent's
 * user, names the container after the task's tag). Anything else is refused with
 * a reason.
 *
 * Served without blocking the agent's loop: accepted connections are non-blocking
 * and kept in a table of at most BR_LOCALSOCK_MAX_CONNS (when full, the oldest is
 * dropped for a new one); each is read when it has data, and closed after
 * BR_LOCALSOCK_DEADLINE_MS without a request. */
#ifndef BRAMBLE_LOCALSOCK_H
#define BRAMBLE_LOCALSOCK_H

#include <jansson.h>

#include "err.h"
#include "jobsock.h"
#include "task.h"

#define BR_LOCALSOCK_MAX_CONNS 32
#define BR_LOCALSOCK_DEADLINE_MS 5000
#define BR_LOCALSOCK_FDS_MAX (1 + BR_LOCALSOCK_MAX_CONNS)

typedef struct br_localsock br_localsock_t;

/* Handle one request from a process of task (already checked: inside its tree, as
 * its uid). Returns a reply body (new reference), or NULL with err for an error
 * reply. */
typedef json_t *(*br_localsock_fn)(void *arg, br_task_t *task,
                                   const br_jobsock_req_t *req, br_err_t *err);

br_localsock_t *br_localsock_new(const char *node, br_err_t *err);
void br_localsock_destroy(br_localsock_t **l);

int br_localsock_fd(const br_localsock_t *l);
/* What jobs get as BRAMBLE_AGENT_SOCK: "@bramble-agent/<node>/<agent pid>". */
const char *br_localsock_address(const br_localsock_t *l);

/* Every descriptor to wait on for readability (the listening socket first, then
 * the open connections), at most max; returns how many. */
int br_localsock_fds(const br_localsock_t *l, int *fds, int max);

/* Accept what waits, answer the connections whose request came, close those past
 * their deadline. Never blocks; call at every wake of the loop. */
void br_localsock_serve(br_localsock_t *l, br_localsock_fn fn, void *arg);

/* Connections open now. */
int br_localsock_nconns(const br_localsock_t *l);

#endif
