/* streams.h - the shells and forwards running on this node (`bramble shell`,
 * `bramble forward`), on a thread of their own with a connection of their own to
 * the coordinator's relay (proto/stream.h), so that a 2 GB forward never delays
 * the agent's heartbeats. The agent's loop starts each process (task.h's
 * br_task_join) or connection and hands it over; this thread attaches it with
 * its ticket, passes its bytes, tells its end (EXIT with the status, or CLOSE
 * with why), and hangs it up (SIGHUP to its process group and to every process
 * that carries its mark, BR_STREAMS_MARK) when the client goes away, the relay
 * falls silent, or its job ends. */
#ifndef BRAMBLE_STREAMS_H
#define BRAMBLE_STREAMS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "err.h"
#include "stream.h"
#include "streamseal.h"

#define BR_STREAMS_ATTACH_MS 20000 /* a session the relay never attached is dropped */
#define BR_STREAMS_CONNECT_MS 10000 /* a forward's connect, waited for this long: a
                                     * listener whose queue was full takes it at the
                                     * kernel's SYN retries (1, 3, 7 s); the relay
                                     * waits 15 s for the node to attach */
#define BR_STREAMS_MARK "BRAMBLE_SHELL" /* a shell's processes carry BRAMBLE_SHELL=ID
                                        * (the stream's), in a container too */

/* The entry that marks the processes of shell stream: "BRAMBLE_SHELL=ID". */
void br_streams_mark(uint32_t stream, char *out, size_t len);

typedef struct br_streams br_streams_t;

br_streams_t *br_streams_new(br_err_t *err);
/* Stops the thread; every session left is hung up. */
void br_streams_destroy(br_streams_t **s);

typedef struct {
    uint32_t stream;
    char ticket[BR_STREAM_TICKET + 1];
    char key[BR_STREAM_KEY_HEX + 1]; /* what seals its frames (streamseal.h) */
    char endpoint[300]; /* the relay: tcp://COORDINATOR-HOST:RELAY-PORT */
    int64_t job;
    int attempt;
    int rank;     /* the job's rank it is joined into */
    pid_t pid;    /* a shell's process (the agent's child), or 0 */
    int tty;      /* fds[0] is a terminal's master, both ways */
    int fds[3];   /* br_task_join's; a forward's TCP connection in fds[0]; -1: none */
    int is_socket;
    int port;        /* a forward: the port of the node's loopback it connects to, on
                      * the thread (127.0.0.1, or ::1 where that refuses: a server may
                      * listen on IPv6's alone), waiting up to BR_STREAMS_CONNECT_MS;
                      * attached once it is made, or told why not */
    char target[96]; /* a forward's "port P of node N", for what it says */
    const char *error; /* not NULL: nothing started; the client is told this */
} br_streams_session_t;

/* Hand a session over (its descriptors are taken). 0, or -1 with err (out of
 * memory: the descriptors are closed and the process hung up). */
int br_streams_add(br_streams_t *s, const br_streams_session_t *ss, br_err_t *err);

/* pid, reaped by the agent with status: 1 when it was a session's process. */
int br_streams_reaped(br_streams_t *s, pid_t pid, int status);

/* The job's attempt ended: its sessions are closed, saying so, and killed. */
void br_streams_job_ended(br_streams_t *s, int64_t job, int attempt);
/* The same for the sessions joined into one rank, whose leader ended (what was left
 * in its tree was killed with it: its shells are told the job ended, not that a
 * signal killed their command). */
void br_streams_rank_ended(br_streams_t *s, int64_t job, int attempt, int rank);

/* The job's attempt is being stopped (SIGTERM or SIGKILL, as ordered): its sessions
 * are closed, saying so, and their processes hung up (SIGHUP, as a terminal's
 * hang-up, which an interactive shell heeds where it ignores SIGTERM), so that an
 * open shell does not hold the stop for the whole grace. */
void br_streams_job_stopping(br_streams_t *s, int64_t job, int attempt);

#endif
