/* jobsock.c - talking to the agent of this node from inside a job. */
#include "jobsock.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

/* "@name" -> abstract sockaddr; returns its length or -1. */
socklen_t br_local_addr(const char *address, struct sockaddr_un *sa)
{
    size_t n = strlen(address);
    if (n < 2 || address[0] != '@' || n > sizeof(sa->sun_path))
        return 0;
    memset(sa, 0, sizeof(*sa));
    sa->sun_family = AF_UNIX;
    memcpy(sa->sun_path + 1, address + 1, n - 1); /* sun_path[0] = 0: abstract */
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n);
}

json_t *br_local_request(const char *address, json_t *req, int timeout_ms,
                             br_err_t *err)
{
    struct sockaddr_un sa;
    socklen_t len = br_local_addr(address ? address : "", &sa);
    if (!len)
        return br_errp(err, EINVAL, "no agent socket (BRAMBLE_AGENT_SOCK is not set: run "
                                    "this inside a bramble job)");
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
    char *text = json_dumps(req, JSON_COMPACT);
    char buf[BR_LOCAL_MSG_MAX];
    json_t *reply = NULL;
    ssize_t n = -1;
    if (fd >= 0 && text && setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) == 0 &&
        connect(fd, (struct sockaddr *)&sa, len) == 0 &&
        send(fd, text, strlen(text), MSG_NOSIGNAL) >= 0)
        n = recv(fd, buf, sizeof(buf) - 1, 0);
    if (n <= 0)
        br_errf(err, errno ? errno : EPROTO, "agent at %s: %s", address,
                n == 0 ? "closed without an answer" : strerror(errno));
    else if (!(reply = json_loadb(buf, (size_t)n, 0, NULL)))
        br_errf(err, EPROTO, "agent at %s: unreadable answer", address);
    if (fd >= 0)
        close(fd);
    free(text);
    const char *e = json_string_value(json_object_get(reply, "error"));
    if (e) {
        br_errf(err, EINVAL, "%s", e);
        json_decref(reply);
        return NULL;
    }
    return reply;
}
