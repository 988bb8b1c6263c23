/* test_httptls.c - the HTTP side's certificate and key files (coordinator/http/httptls.c),
 * table-driven: what loads, and what is refused with the file named. The files
 * hold PEM-shaped text only; whether libmicrohttpd takes a real pair is for the
 * integration test (tests/integration/test_tls.py). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "httptls.h"

#define CERT "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
#define KEY "-----BEGIN PRIVATE KEY-----\nMIIE\n-----END PRIVATE KEY-----\n"

static char dir[64];

static void put(const char *name, const char *text, size_t len, mode_t mode)
{
    char path[128];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    assert_int_equal(fwrite(text, 1, len, f), len);
    fclose(f);
    assert_int_equal(chmod(path, mode), 0);
}

static void test_files(void **state)
{
    (void)state;
    static char big[BR_HTTP_TLS_FILE_MAX + 2];
    memset(big, 'A', sizeof(big) - 1);
    memcpy(big, KEY, strlen(KEY));
    strcpy(dir, "/tmp/test_httptls.XXXXXX");
    assert_non_null(mkdtemp(dir));
    put("cert.pem", CERT, strlen(CERT), 0644);
    put("key.pem", KEY, strlen(KEY), 0600);
    static const char rsa[] =
        "-----BEGIN RSA PRIVATE KEY-----\nx\n-----END RSA PRIVATE KEY-----\n";
    static const char enc[] =
        "-----BEGIN ENCRYPTED PRIVATE KEY-----\nx\n-----END ENCRYPTED PRIVATE "
        "KEY-----\n";
    static const char pub[] =
        "-----BEGIN PUBLIC KEY-----\nx\n-----END PUBLIC KEY-----\n";
    put("rsa.key", rsa, strlen(rsa), 0400);
    put("open.key", KEY, strlen(KEY), 0644);
    put("group.key", KEY, strlen(KEY), 0640);
    put("empty.pem", "", 0, 0600);
    put("enc.key", enc, strlen(enc), 0600);
    put("nul.key", KEY "\0" KEY, 2 * strlen(KEY) + 1, 0600);
    put("big.key", big, sizeof(big) - 1, 0600);
    put("pub.key", pub, strlen(pub), 0600);
    static const struct {
        const char *cert, *key;
        int errnum;       /* 0: loads */
        const char *file; /* the file the words name */
        const char *words;
    } cases[] = {
        {"cert.pem", "key.pem", 0, NULL, NULL},
        {"cert.pem", "rsa.key", 0, NULL, NULL},
        {"cert.pem", "open.key", EACCES, "open.key", "permissions 0644 are too open"},
        {"cert.pem", "group.key", EACCES, "group.key", "permissions 0640 are too open"},
        {"missing.pem", "key.pem", ENOENT, "missing.pem", "No such file"},
        {"cert.pem", "missing.key", ENOENT, "missing.key", "No such file"},
        {"empty.pem", "key.pem", EINVAL, "empty.pem", "empty"},
        {"key.pem", "key.pem", EINVAL, "key.pem", "no PEM certificate"},
        {"cert.pem", "pub.key", EINVAL, "pub.key", "no PEM private key"},
        {"cert.pem", "enc.key", EINVAL, "enc.key", "encrypted"},
        {"cert.pem", "nul.key", EINVAL, "nul.key", "no PEM private key"},
        {"cert.pem", "big.key", EINVAL, "big.key", "too big"},
        {"cert.pem", ".", EINVAL, "/.", "not a regular file"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char cert[128], key[128];
        br_err_t err = {0};
        snprintf(cert, sizeof(cert), "%s/%s", dir, cases[i].cert);
        snprintf(key, sizeof(key), "%s/%s", dir, cases[i].key);
        br_http_tls_t *t = br_http_tls_new(cert, key, &err);
        if (!cases[i].errnum) {
            if (!t)
                fail_msg("%s %s: %s", cases[i].cert, cases[i].key, err.text);
            assert_int_equal(strncmp(br_http_tls_cert(t), "-----BEGIN CERTIFICATE", 22),
                             0);
            assert_non_null(strstr(br_http_tls_key(t), "PRIVATE KEY"));
            assert_string_equal(br_http_tls_cert_path(t), cert);
            assert_string_equal(br_http_tls_key_path(t), key);
            br_http_tls_destroy(&t);
            assert_null(t);
            continue;
        }
        if (t)
            fail_msg("%s %s: loaded", cases[i].cert, cases[i].key);
        if (err.errnum != cases[i].errnum || !strstr(err.text, cases[i].file) ||
            !strstr(err.text, cases[i].words))
            fail_msg("%s %s: %d '%s'", cases[i].cert, cases[i].key, err.errnum,
                     err.text);
    }
    if (geteuid() != 0) { /* an unreadable file (root reads it anyway) */
        char cert[128], key[128];
        br_err_t err = {0};
        snprintf(cert, sizeof(cert), "%s/cert.pem", dir);
        snprintf(key, sizeof(key), "%s/key.pem", dir);
        assert_int_equal(chmod(cert, 0), 0);
        assert_null(br_http_tls_new(cert, key, &err));
        assert_int_equal(err.errnum, EACCES);
        assert_non_null(strstr(err.text, "cert.pem: Permission denied"));
    }
    br_http_tls_destroy(NULL);
    static const char *const names[] = {"cert.pem",  "key.pem",   "rsa.key", "open.key",
                                        "group.key", "empty.pem", "enc.key", "nul.key",
                                        "big.key",   "pub.key"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        char path[128];
        snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
        unlink(path);
    }
    rmdir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_files),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
