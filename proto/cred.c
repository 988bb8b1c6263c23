/* cred.c - CURVE key pairs and credential files. */
#include "cred.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zmq.h>

#include "conf.h"
#include "util.h"

int br_keypair(char *public_key, char *secret_key, br_err_t *err)
{
    if (zmq_curve_keypair(public_key, secret_key) < 0)
        return br_errf(err, errno, "cannot make a CURVE key pair: %s",
                       zmq_strerror(errno));
    return 0;
}

int br_key_valid(const char *s)
{
    uint8_t raw[32];
    return s && strlen(s) == BR_KEY_LEN && zmq_z85_decode(raw, s) != NULL;
}

static int take(const json_t *obj, const char *key, char *dst, size_t len,
                const char *path, br_err_t *err)
{
    const char *v = br_conf_str(obj, key);
    if (!v || !*v)
        return br_errf(err, EINVAL, "%s: missing '%s'", path, key);
    if (strlen(v) >= len)
        return br_errf(err, EINVAL, "%s: '%s' is too long", path, key);
    strcpy(dst, v);
    return 0;
}

static int check_keys(const json_t *obj, const char *path, br_err_t *err)
{
    static const char *known[] = {"endpoint", "server_public_key", "name", "public_key",
                                  "secret_key"};
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)obj, k, v) {
        size_t i;
        for (i = 0; i < sizeof(known) / sizeof(known[0]); i++)
            if (strcmp(k, known[i]) == 0)
                break;
        if (i == sizeof(known) / sizeof(known[0]))
            return br_errf(err, EINVAL, "%s: unknown key '%s'", path, k);
    }
    return 0;
}

int br_cred_load(const char *path, br_cred_t *c, br_err_t *err)
{
    struct stat st;
    if (stat(path, &st) < 0)
        return br_errf(err, errno, "credential %s: %s", path, strerror(errno));
    if (st.st_mode & (S_IRWXG | S_IRWXO))
        return br_errf(err, EPERM,
                       "credential %s is readable by others (mode %03o); "
                       "run chmod 600 %s",
                       path, (unsigned)(st.st_mode & 0777), path);
    json_t *obj = br_conf_load(path, err);
    if (!obj)
        return -1;
    memset(c, 0, sizeof(*c));
    int rc = -1;
    if (check_keys(obj, path, err) < 0 ||
        take(obj, "endpoint", c->endpoint, sizeof(c->endpoint), path, err) < 0 ||
        take(obj, "server_public_key", c->server_public_key,
             sizeof(c->server_public_key), path, err) < 0 ||
        take(obj, "name", c->name, sizeof(c->name), path, err) < 0 ||
        take(obj, "public_key", c->public_key, sizeof(c->public_key), path, err) < 0 ||
        take(obj, "secret_key", c->secret_key, sizeof(c->secret_key), path, err) < 0)
        goto done;
    const char *bad = !br_key_valid(c->server_public_key) ? "server_public_key"
                      : !br_key_valid(c->public_key)        ? "public_key"
                      : !br_key_valid(c->secret_key)        ? "secret_key"
                                                            : NULL;
    if (bad) {
        br_errf(err, EINVAL, "%s: '%s' is not 40 characters of Z85", path, bad);
        goto done;
    }
    rc = 0;
done:
    json_decref(obj);
    return rc;
}

int br_cred_save(const char *path, const br_cred_t *c, br_err_t *err)
{
    json_t *obj = json_pack("{s:s, s:s, s:s, s:s, s:s}", "endpoint", c->endpoint,
                            "server_public_key", c->server_public_key, "name", c->name,
                            "public_key", c->public_key, "secret_key", c->secret_key);
    if (!obj)
        return br_errf(err, ENOMEM, "out of memory");
    int rc = br_conf_save(path, obj, 0600, err);
    json_decref(obj);
    return rc;
}

const char *br_cred_path(const char *flag, char *buf, size_t len)
{
    if (flag && *flag)
        return br_strlcpy(buf, flag, len);
    const char *env = getenv("BRAMBLE_CREDENTIAL");
    if (env && *env)
        return br_strlcpy(buf, env, len);
    const char *home = getenv("HOME");
    snprintf(buf, len, "%s/.config/bramble/credential", home ? home : "");
    return buf;
}
