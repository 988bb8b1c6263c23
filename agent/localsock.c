/* localsock.c - the socket jobs use to talk to their own agent. */
#include "localsock.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "jobsock.h"
#include "task.h"
#include "util.h"

struct br_localsock {
    int fd;
    char address[108];
};

br_localsock_t *br_localsock_new(const char *node, br_err_t *err)
{
    br_localsock_t *l = calloc(1, sizeof(*l));
    if (!l)
        return br_errp(err, ENOMEM, "out of memory");
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

void br_localsock_destroy(br_localsock_t **l)
{
    if (l && *l) {
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

static void send_json(int fd, json_t *reply)
{
    char *text = json_dumps(reply, JSON_COMPACT);
    if (text && strlen(text) < BR_LOCAL_MSG_MAX)
        (void)send(fd, text, strlen(text), MSG_NOSIGNAL);
    free(text);
    json_decref(reply);
}

static void serve_one(int fd, br_localsock_fn fn, void *arg)
{
    struct timeval tv = {0, 200000}; /* a job's request is sent at once */
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    char buf[BR_LOCAL_MSG_MAX], tag[160];
    struct ucred cred;
    socklen_t clen = sizeof(cred);
    br_err_t err = {0};
    json_t *reply = NULL;
    ssize_t n = recv(fd, buf, sizeof(buf) - 1, 0);
    json_t *req = n > 0 ? json_loadb(buf, (size_t)n, JSON_REJECT_DUPLICATES, NULL) : NULL;
    if (!json_is_object(req))
        br_errf(&err, EPROTO, "bad request: expected one JSON object");
    else if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &clen) < 0 ||
             br_task_tag_of(cred.pid, tag, sizeof(tag)) < 0)
        br_errf(&err, EACCES, "not inside a running job of this node");
    else
        reply = fn(arg, tag, req, &err);
    if (!reply)
        reply = json_pack("{s:s}", "error", err.text[0] ? err.text : "refused");
    send_json(fd, reply);
    json_decref(req);
}

void br_localsock_serve(br_localsock_t *l, br_localsock_fn fn, void *arg)
{
    for (int i = 0; i < 16; i++) {
        int fd = accept4(l->fd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0)
            return;
        serve_one(fd, fn, arg);
        close(fd);
    }
}
