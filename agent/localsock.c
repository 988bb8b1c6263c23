/* localsock.c - the socket jobs use to talk to their own agent. */
#include "localsock.h"
#include "container.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include "util.h"

#define ACCEPT_PER_WAKE 64 /* more wait in the backlog until the next wake */
#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD 77 /* Linux 6.5 */
#endif

typedef struct {
    int fd;          /* -1: free slot */
    int64_t opened;  /* monotonic ms */
} conn_t;

struct br_localsock {
    int fd;
    char address[108];
    conn_t conns[BR_LOCALSOCK_MAX_CONNS];
    int dropped_full, dropped_late; /* counted, said once */
};

br_localsock_t *br_localsock_new(const char *node, br_err_t *err)
{
    br_localsock_t *l = calloc(1, sizeof(*l));
    if (!l)
        return br_errp(err, ENOMEM, "out of memory");
    for (int i = 0; i < BR_LOCALSOCK_MAX_CONNS; i++)
        l->conns[i].fd = -1;
    snprintf(l->address, sizeof(l->address), "@bramble-agent/%s/%d", node, (int)getpid());
    struct sockaddr_un sa;
    socklen_t len = br_local_addr(l->address, &sa);
    l->fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (l->fd < 0 || !len || bind(l->fd, (struct sockaddr *)&sa, len) < 0 ||
        listen(l->fd, 64) < 0) {
        int e = errno;
        if (l->fd >= 0)
            close(l->fd);
        free(l);
        return br_errp(err, e, "local socket for %s: %s", node, strerror(e));
    }
    return l;
}

static void conn_close(conn_t *c)
{
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
}

void br_localsock_destroy(br_localsock_t **l)
{
    if (l && *l) {
        for (int i = 0; i < BR_LOCALSOCK_MAX_CONNS; i++)
            conn_close(&(*l)->conns[i]);
        close((*l)->fd);
        free(*l);
        *l = NULL;
    }
}

int br_localsock_fd(const br_localsock_t *l)
{
    return l->fd;
}

const char *br_localsock_address(const br_localsock_t *l)
{
    return l->address;
}

int br_localsock_fds(const br_localsock_t *l, int *fds, int max)
{
    int n = 0;
    if (n < max)
        fds[n++] = l->fd;
    for (int i = 0; i < BR_LOCALSOCK_MAX_CONNS && n < max; i++)
        if (l->conns[i].fd >= 0)
            fds[n++] = l->conns[i].fd;
    return n;
}

int br_localsock_nconns(const br_localsock_t *l)
{
    int n = 0;
    for (int i = 0; i < BR_LOCALSOCK_MAX_CONNS; i++)
        n += l->conns[i].fd >= 0;
    return n;
}

static void send_json(int fd, json_t *reply)
{
    char *text = json_dumps(reply, JSON_COMPACT);
    if (text && strlen(text) < BR_LOCAL_MSG_MAX) /* the peer's buffer is empty: */
        (void)send(fd, text, strlen(text), MSG_NOSIGNAL | MSG_DONTWAIT); /* fits */
    free(text);
    json_decref(reply);
}

/* Which task the peer belongs to, checked: inside its tree and as its uid. */
static br_task_t *peer_task(int fd, br_err_t *err)
{
    struct ucred cred;
    socklen_t clen = sizeof(cred);
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &clen) < 0 || cred.pid <= 0)
        return br_errp(err, EACCES, "refused: the kernel does not say who is asking");
    /* The pid could be reused between the connect and this look at /proc: hold the
     * peer by a pidfd, where the kernel has one, and make sure afterwards that the
     * process looked at is still that peer (a live process keeps its pid). */
    socklen_t plen = sizeof(int);
    int pidfd = -1;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERPIDFD, &pidfd, &plen) < 0) {
        if (errno != ENOPROTOOPT && errno != EINVAL)
            return br_errp(err, EACCES, "refused: the asking process is gone");
        pidfd = -1;
    }
    br_task_t *t = br_task_of_pid(cred.pid), *in = NULL;
    if (!t) /* a container's process: conmon's child, not the task's; it runs as the
             * job's uid (--user) while the task that runs podman may be root's */
        t = in = br_task_of_container(cred.pid, br_container_name);
    if (pidfd >= 0) {
        int alive = syscall(SYS_pidfd_send_signal, pidfd, 0, NULL, 0) == 0;
        close(pidfd);
        if (!alive)
            return br_errp(err, EACCES, "refused: the asking process is gone");
    }
    if (!t)
        return br_errp(err, EACCES,
                       "refused: not inside a running job of this node (process %d, uid "
                       "%u, is in no job's process tree)",
                       (int)cred.pid, (unsigned)cred.uid);
    if (!in && cred.uid != br_task_uid(t))
        return br_errp(err, EACCES,
                       "refused: process %d runs as uid %u, not as its job's uid %u",
                       (int)cred.pid, (unsigned)cred.uid, (unsigned)br_task_uid(t));
    return t;
}

/* The request on c came (or the peer left): answer it and close. 0 when nothing was
 * there yet. */
static int conn_read(conn_t *c, br_localsock_fn fn, void *arg)
{
    char buf[BR_LOCAL_MSG_MAX];
    ssize_t n = recv(c->fd, buf, sizeof(buf), MSG_DONTWAIT | MSG_TRUNC);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return 0;
    if (n <= 0) { /* gone without asking */
        conn_close(c);
        return 1;
    }
    br_err_t err = {0};
    br_jobsock_req_t *req = malloc(sizeof(*req));
    json_t *reply = NULL;
    br_task_t *t = NULL;
    if (!req)
        br_errf(&err, ENOMEM, "out of memory");
    else if ((size_t)n > sizeof(buf))
        br_errf(&err, EMSGSIZE, "bad request: longer than %d bytes", BR_LOCAL_MSG_MAX - 1);
    else if ((t = peer_task(c->fd, &err)) && br_jobsock_decode(buf, (size_t)n, req, &err) == 0)
        reply = fn(arg, t, req, &err);
    if (!reply)
        reply = json_pack("{s:s}", "error", err.text[0] ? err.text : "refused");
    send_json(c->fd, reply);
    free(req);
    conn_close(c);
    return 1;
}

/* A free slot; when all are taken, the oldest connection is dropped for it. */
static conn_t *conn_slot(br_localsock_t *l)
{
    conn_t *oldest = NULL;
    for (int i = 0; i < BR_LOCALSOCK_MAX_CONNS; i++) {
        conn_t *c = &l->conns[i];
        if (c->fd < 0)
            return c;
        if (!oldest || c->opened < oldest->opened)
            oldest = c;
    }
    if (!l->dropped_full++)
        fprintf(stderr, "bramble-agent: job socket: %d connections open without a request; "
                        "dropping the oldest for each new one\n", BR_LOCALSOCK_MAX_CONNS);
    conn_close(oldest);
    return oldest;
}

void br_localsock_serve(br_localsock_t *l, br_localsock_fn fn, void *arg)
{
    int64_t now = br_mono_ms();
    for (int i = 0; i < BR_LOCALSOCK_MAX_CONNS; i++) {
        conn_t *c = &l->conns[i];
        if (c->fd >= 0 && !conn_read(c, fn, arg) && now - c->opened > BR_LOCALSOCK_DEADLINE_MS) {
            if (!l->dropped_late++)
                fprintf(stderr, "bramble-agent: job socket: closed a connection that sent "
                                "no request within %d ms\n", BR_LOCALSOCK_DEADLINE_MS);
            conn_close(c);
        }
    }
    for (int i = 0; i < ACCEPT_PER_WAKE; i++) {
        int fd = accept4(l->fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0)
            return;
        conn_t *c = conn_slot(l);
        c->fd = fd;
        c->opened = now;
        conn_read(c, fn, arg); /* a job sends at once: often there already */
    }
}
