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

/* Absolute, no empty, "." or ".." component, no trailing '/' (what realpath(3)
 * gives), so that "inside the checkpoint dir" can be decided on the text alone. */
static const char *path_problem(const char *p)
{
    if (p[0] != '/')
        return "must be an absolute path";
    if (p[1] == '\0')
        return "must not be /";
    for (const char *c = p + 1;; ) {
        const char *end = strchr(c, '/');
        size_t n = end ? (size_t)(end - c) : strlen(c);
        if (n == 0)
            return end ? "must not hold \"//\"" : "must not end in '/'";
        if ((n == 1 && c[0] == '.') || (n == 2 && c[0] == '.' && c[1] == '.'))
            return "must not hold \".\" or \"..\" components";
        if (!end)
            return NULL;
        c = end + 1;
    }
}

int br_jobsock_decode(const void *buf, size_t len, br_jobsock_req_t *req, br_err_t *err)
{
    memset(req, 0, sizeof(*req));
    if (!buf || len == 0)
        return br_errf(err, EPROTO, "bad request: empty");
    if (len >= BR_LOCAL_MSG_MAX)
        return br_errf(err, EMSGSIZE, "bad request: longer than %d bytes",
                       BR_LOCAL_MSG_MAX - 1);
    json_error_t jerr;
    json_t *obj = json_loadb(buf, len, JSON_REJECT_DUPLICATES,
                             &jerr);
    const char *type = NULL, *path = NULL;
    size_t plen = 0;
    json_int_t step = -1;
    int rc = -1;
    if (!json_is_object(obj)) {
        br_errf(err, EPROTO, "bad request: expected one JSON object%s%s%s",
                obj ? "" : " (", obj ? "" : jerr.text, obj ? "" : ")");
        goto out;
    }
    type = json_string_value(json_object_get(obj, "type"));
    if (!type) {
        br_errf(err, EPROTO, "bad request: \"type\" must be a string");
        goto out;
    }
    if (strcmp(type, "progress") == 0) {
        if (json_unpack_ex(obj, &jerr, JSON_STRICT, "{s:s, s?I}", "type", &type, "step",
                           &step) < 0) {
            br_errf(err, EPROTO, "bad request: %s", jerr.text);
            goto out;
        }
        if (json_object_get(obj, "step") && step < 0) {
            br_errf(err, EINVAL, "progress: the step must be >= 0");
            goto out;
        }
        memcpy(req->type, "progress", sizeof("progress"));
        req->step = step;
        rc = 0;
        goto out;
    }
    if (strcmp(type, "checkpoint") != 0) {
        br_errf(err, EPROTO,
                "bad request: unknown type (only \"checkpoint\" and \"progress\")");
        goto out;
    }
    if (json_unpack_ex(obj, &jerr, JSON_STRICT, "{s:s, s:s%, s:I}", "type", &type, "path",
                       &path, &plen, "step", &step) < 0) {
        br_errf(err, EPROTO, "bad request: %s", jerr.text);
        goto out;
    }
    if (step < 0) {
        br_errf(err, EINVAL, "checkpoint: the step must be >= 0");
        goto out;
    }
    if (plen != strlen(path) || plen >= sizeof(req->path)) {
        br_errf(err, EINVAL, "checkpoint: the path %s",
                plen != strlen(path) ? "holds a NUL byte" : "is too long");
        goto out;
    }
    const char *why = path_problem(path);
    if (why) {
        br_errf(err, EINVAL, "checkpoint: the path %s", why);
        goto out;
    }
    memcpy(req->type, "checkpoint", sizeof("checkpoint"));
    memcpy(req->path, path, plen + 1);
    req->step = step;
    rc = 0;
out:
    json_decref(obj);
    return rc;
}
