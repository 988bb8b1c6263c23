/* httptls.h - the certificate and key that make the HTTP side serve HTTPS
 * (`brambled --http-cert FILE --http-key FILE`, docs/metrics.md): both PEM files
 * read at start, with the checks that name the file at fault. The key file must
 * be readable by its owner only (as ssh asks of its keys); the key stays in
 * memory only until libmicrohttpd has taken it (br_http_new), then is wiped. */
#ifndef BRAMBLE_HTTPTLS_H
#define BRAMBLE_HTTPTLS_H

#include <stddef.h>

#include "err.h"

#define BR_HTTP_TLS_FILE_MAX (64 * 1024) /* a PEM file bigger than this is refused */

typedef struct br_http_tls br_http_tls_t;

/* Read cert_path (a PEM certificate, chain allowed) and key_path (a PEM private
 * key, unencrypted). NULL with words naming the file: missing, unreadable, not a
 * regular file, too big, not PEM of the right kind, or (the key) group or world
 * readable. Whether the two belong together is for libmicrohttpd to say. */
br_http_tls_t *br_http_tls_new(const char *cert_path, const char *key_path,
                               br_err_t *err);
/* Wipe the key and free (NULL is fine; keeps errno). */
void br_http_tls_destroy(br_http_tls_t **t);

/* NUL-terminated PEM texts, and the files they came from. */
const char *br_http_tls_cert(const br_http_tls_t *t);
const char *br_http_tls_key(const br_http_tls_t *t);
const char *br_http_tls_cert_path(const br_http_tls_t *t);
const char *br_http_tls_key_path(const br_http_tls_t *t);

#endif
