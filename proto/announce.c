/* announce.c - the LAN announcement datagram: encode, strict decode, listen, receive.
 */
#include "announce.h"

#include <arpa/inet.h>
#include <errno.h>
#include <jansson.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "util.h"

#define MAGIC_LEN (sizeof(BR_ANNOUNCE_MAGIC) - 1)
#define MAGIC_NAME "bramble-announce/" /* the magic without its version */

static int endpoint_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n >= BR_ENDPOINT_MAX)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (s[i] < 0x21 || s[i] > 0x7e)
            return 0;
    return 1;
}

int br_announce_encode(const br_announce_t *a, char *buf, size_t len, size_t *outlen,
                       br_err_t *err)
{
    if (!br_key_valid(a->key) || a->port < 1 || a->port > 65535 ||
        !endpoint_ok(a->endpoint))
        return br_errf(err, EINVAL, "announcement: bad key, port or endpoint");
    json_t *j = json_pack("{s:s, s:i, s:s}", "key", a->key, "port", a->port, "endpoint",
                          a->endpoint);
    char *text = j ? json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(j);
    if (!text)
        return br_errf(err, ENOMEM, "out of memory");
    size_t n = strlen(text);
    int rc = 0;
    if (MAGIC_LEN + n > BR_ANNOUNCE_MAX || MAGIC_LEN + n > len) {
        rc = br_errf(err, EMSGSIZE, "announcement: %zu bytes, more than %d",
                     MAGIC_LEN + n, BR_ANNOUNCE_MAX);
    } else {
        memcpy(buf, BR_ANNOUNCE_MAGIC, MAGIC_LEN);
        memcpy(buf + MAGIC_LEN, text, n);
        *outlen = MAGIC_LEN + n;
    }
    free(text);
    return rc;
}

int br_announce_decode(const void *buf, size_t len, br_announce_t *a, br_err_t *err)
{
    const char *p = buf;
    if (len > BR_ANNOUNCE_MAX)
        return br_errf(err, EPROTO, "announcement of %zu bytes: more than %d", len,
                       BR_ANNOUNCE_MAX);
    if (len < sizeof(MAGIC_NAME) - 1 ||
        memcmp(p, MAGIC_NAME, sizeof(MAGIC_NAME) - 1) != 0)
        return br_errf(err, EPROTO, "not a bramble announcement (wrong magic)");
    if (len < MAGIC_LEN || memcmp(p, BR_ANNOUNCE_MAGIC, MAGIC_LEN) != 0)
        return br_errf(err, EPROTO,
                       "announcement of another version (this agent "
                       "reads '%.*s' only)",
                       (int)MAGIC_LEN - 1, BR_ANNOUNCE_MAGIC);
    json_error_t jerr;
    json_t *j =
        json_loadb(p + MAGIC_LEN, len - MAGIC_LEN, JSON_REJECT_DUPLICATES, &jerr);
    if (!j)
        return br_errf(err, EPROTO, "announcement: bad JSON: %s", jerr.text);
    const char *k, *key = NULL, *ep = NULL;
    json_t *v;
    json_int_t port = 0;
    int rc = -1;
    if (!json_is_object(j)) {
        br_errf(err, EPROTO, "announcement: not a JSON object");
        goto done;
    }
    json_object_foreach (j, k, v) {
        if (strcmp(k, "key") == 0 && json_is_string(v))
            key = json_string_value(v);
        else if (strcmp(k, "endpoint") == 0 && json_is_string(v))
            ep = json_string_value(v);
        else if (strcmp(k, "port") == 0 && json_is_integer(v))
            port = json_integer_value(v);
        else if (strcmp(k, "key") == 0 || strcmp(k, "endpoint") == 0 ||
                 strcmp(k, "port") == 0) {
            br_errf(err, EPROTO, "announcement: '%s' is not %s", k,
                    k[0] == 'p' ? "an integer" : "a string");
            goto done;
        } else {
            br_errf(err, EPROTO, "announcement: unknown field '%.40s'", k);
            goto done;
        }
    }
    if (!key || !ep || !json_object_get(j, "port"))
        br_errf(err, EPROTO, "announcement: '%s' is missing",
                !key  ? "key"
                : !ep ? "endpoint"
                      : "port");
    else if (!br_key_valid(key))
        br_errf(err, EPROTO, "announcement: 'key' is not a Z85 CURVE key");
    else if (port < 1 || port > 65535)
        br_errf(err, EPROTO, "announcement: 'port' %lld is not 1..65535",
                (long long)port);
    else if (!endpoint_ok(ep))
        br_errf(err, EPROTO,
                "announcement: 'endpoint' is empty, too long or not "
                "printable");
    else
        rc = 0;
    if (rc == 0) {
        memset(a, 0, sizeof(*a));
        strcpy(a->key, key);
        a->port = (int)port;
        strcpy(a->endpoint, ep);
    }
done:
    json_decref(j);
    return rc;
}

int br_announce_split_endpoint(const char *endpoint, char *host, size_t hostlen,
                               int *port, br_err_t *err)
{
    const char *tcp = "tcp://";
    if (strncmp(endpoint, tcp, strlen(tcp)) != 0)
        return br_errf(err, EINVAL, "endpoint '%s' is not tcp://HOST:PORT", endpoint);
    const char *h = endpoint + strlen(tcp), *colon = strrchr(h, ':');
    char *end;
    long p = colon ? strtol(colon + 1, &end, 10) : 0;
    if (!colon || colon == h || !colon[1] || *end || p < 1 || p > 65535)
        return br_errf(err, EINVAL, "endpoint '%s' is not tcp://HOST:PORT", endpoint);
    size_t n = (size_t)(colon - h);
    if (n >= 2 && h[0] == '[' && h[n - 1] == ']') {
        h++;
        n -= 2;
    }
    if (n == 0 || n >= hostlen)
        return br_errf(err, EINVAL, "endpoint '%s': bad host", endpoint);
    memcpy(host, h, n);
    host[n] = '\0';
    *port = (int)p;
    return 0;
}

int br_announce_listen(int port, br_err_t *err)
{
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return br_errf(err, errno, "UDP socket: %s", strerror(errno));
    int one = 1;
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(INADDR_ANY)};
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
        bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        int e = errno;
        close(fd);
        return br_errf(err, e, "cannot listen on UDP port %d: %s", port, strerror(e));
    }
    return fd;
}

int br_announce_recv(int fd, br_announce_t *a, char *src, size_t srclen, br_err_t *err)
{
    char buf[BR_ANNOUNCE_MAX + 1];
    struct sockaddr_in sa;
    socklen_t salen = sizeof(sa);
    if (srclen)
        src[0] = '\0';
    /* MSG_TRUNC: the real length, so an oversized datagram is told apart */
    ssize_t n =
        recvfrom(fd, buf, sizeof(buf), MSG_TRUNC, (struct sockaddr *)&sa, &salen);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return 0;
    if (n < 0)
        return br_errf(err, errno, "UDP receive: %s", strerror(errno));
    if (srclen && sa.sin_family == AF_INET &&
        !inet_ntop(AF_INET, &sa.sin_addr, src, (socklen_t)srclen))
        src[0] = '\0';
    if (br_announce_decode(buf, (size_t)n, a, err) < 0)
        return -1;
    return 1;
}
