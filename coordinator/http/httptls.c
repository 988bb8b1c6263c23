/* httptls.c - the HTTP side's certificate and key, read from PEM files (see
 * httptls.h). */
#include "httptls.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <sodium.h>

struct br_http_tls {
    char *cert;
    char *key;
    size_t key_cap; /* bytes of key to wipe */
    char *cert_path;
    char *key_path;
};

/* The whole of path (what: "certificate" or "key", for the words), NUL-terminated,
 * in *out (malloc'd, *cap bytes). A key file open to group or others is refused. */
static int read_pem(const char *what, const char *path, int secret, char **out,
                    size_t *cap, br_err_t *err)
{
    struct stat st;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return br_errf(err, errno, "%s file %s: %s", what, path, strerror(errno));
    if (fstat(fd, &st) < 0) {
        int e = errno;
        close(fd);
        return br_errf(err, e, "%s file %s: %s", what, path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return br_errf(err, EINVAL, "%s file %s: not a regular file", what, path);
    }
    if (secret && (st.st_mode & 077)) {
        close(fd);
        return br_errf(err, EACCES,
                       "%s file %s: permissions %04o are too open (chmod 600 it)", what,
                       path, (unsigned)(st.st_mode & 07777));
    }
    if (st.st_size <= 0 || st.st_size > BR_HTTP_TLS_FILE_MAX) {
        close(fd);
        return br_errf(err, EINVAL, "%s file %s: %s", what, path,
                       st.st_size <= 0 ? "empty" : "too big for a PEM file (64KiB)");
    }
    *cap = (size_t)st.st_size + 1;
    char *buf = malloc(*cap);
    if (!buf) {
        close(fd);
        return br_errf(err, ENOMEM, "out of memory");
    }
    size_t got = 0;
    while (got < *cap - 1) {
        ssize_t n = read(fd, buf + got, *cap - 1 - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            int e = n < 0 ? errno : EIO;
            close(fd);
            sodium_memzero(buf, *cap);
            free(buf);
            return br_errf(err, e, "%s file %s: %s", what, path,
                           n < 0 ? strerror(e) : "shorter than its size");
        }
        got += (size_t)n;
    }
    close(fd);
    buf[got] = '\0';
    *out = buf;
    return 0;
}

/* Whether text holds a PEM block whose label ends in label ("CERTIFICATE",
 * "PRIVATE KEY": RSA, EC and PKCS#8 keys alike), and no NUL before its end. */
static int has_pem(const char *text, size_t cap, const char *label)
{
    if (strlen(text) != cap - 1)
        return 0;
    for (const char *p = strstr(text, "-----BEGIN "); p;
         p = strstr(p + 1, "-----BEGIN ")) {
        const char *end = strstr(p + 11, "-----");
        size_t l = strlen(label);
        if (end && (size_t)(end - (p + 11)) >= l && strncmp(end - l, label, l) == 0)
            return 1;
    }
    return 0;
}

br_http_tls_t *br_http_tls_new(const char *cert_path, const char *key_path,
                               br_err_t *err)
{
    size_t cert_cap = 0;
    br_http_tls_t *t = calloc(1, sizeof(*t));
    if (!t)
        return br_errp(err, ENOMEM, "out of memory");
    t->cert_path = strdup(cert_path);
    t->key_path = strdup(key_path);
    if (!t->cert_path || !t->key_path) {
        br_errf(err, ENOMEM, "out of memory");
        goto fail;
    }
    if (read_pem("certificate", cert_path, 0, &t->cert, &cert_cap, err) < 0 ||
        read_pem("key", key_path, 1, &t->key, &t->key_cap, err) < 0)
        goto fail;
    if (!has_pem(t->cert, cert_cap, "CERTIFICATE")) {
        br_errf(err, EINVAL, "certificate file %s: no PEM certificate in it",
                cert_path);
        goto fail;
    }
    if (!has_pem(t->key, t->key_cap, "PRIVATE KEY")) {
        br_errf(err, EINVAL, "key file %s: no PEM private key in it", key_path);
        goto fail;
    }
    if (strstr(t->key, "ENCRYPTED")) {
        br_errf(err, EINVAL, "key file %s: encrypted; give it without a passphrase",
                key_path);
        goto fail;
    }
    return t;
fail:
    br_http_tls_destroy(&t);
    return NULL;
}

void br_http_tls_destroy(br_http_tls_t **tp)
{
    br_http_tls_t *t = tp ? *tp : NULL;
    if (!t)
        return;
    int saved = errno;
    if (t->key)
        sodium_memzero(t->key, t->key_cap);
    free(t->key);
    free(t->cert);
    free(t->cert_path);
    free(t->key_path);
    free(t);
    *tp = NULL;
    errno = saved;
}

const char *br_http_tls_cert(const br_http_tls_t *t)
{
    return t->cert;
}

const char *br_http_tls_key(const br_http_tls_t *t)
{
    return t->key;
}

const char *br_http_tls_cert_path(const br_http_tls_t *t)
{
    return t->cert_path;
}

const char *br_http_tls_key_path(const br_http_tls_t *t)
{
    return t->key_path;
}
