/* config.c - the coordinator's settings: init of a data dir, load at start. */
#include "config.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "announce.h"
#include "conf.h"
#include "http.h"
#include "httptls.h"
#include "store.h"
#include "util.h"

void br_config_defaults(br_config_t *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    const char *xdg = getenv("XDG_DATA_HOME"), *home = getenv("HOME");
    if (geteuid() == 0)
        snprintf(cfg->data_dir, sizeof(cfg->data_dir), "/var/lib/bramble");
    else if (xdg && *xdg)
        snprintf(cfg->data_dir, sizeof(cfg->data_dir), "%s/bramble", xdg);
    else
        snprintf(cfg->data_dir, sizeof(cfg->data_dir), "%s/.local/share/bramble",
                 home ? home : ".");
    cfg->heartbeat_ms = 1000;
    cfg->node_timeout_ms = 5000;
    br_strlcpy(cfg->overlay_net, "10.213.0.0/16", sizeof(cfg->overlay_net)); /* (overlaynet.h) */
    cfg->half_life_ms = BR_DEFAULT_HALF_LIFE_MS;
    cfg->kill_grace_ms = 30000;
    cfg->preempt_after_ms = 10 * 60 * 1000;
    cfg->preempt_min_run_ms = 5 * 60 * 1000;
    cfg->grace_ms = -1; /* derived from node_timeout when not set */
    cfg->announce = -1;
    cfg->announce_port = BR_ANNOUNCE_PORT;
    cfg->log_max_per_job = BR_DEFAULT_LOG_MAX_PER_JOB;
    cfg->log_retention_ms = BR_DEFAULT_LOG_RETENTION_MS;
    cfg->replica_retention_ms = BR_DEFAULT_REPLICA_RETENTION_MS;
}

const char *br_config_path(const br_config_t *cfg, const char *name, char *buf,
                           size_t len)
{
    snprintf(buf, len, "%s/%s", cfg->data_dir, name);
    return buf;
}

/* "tcp://0.0.0.0:7700" is where we listen, not where clients should dial. */
static void default_advertise(br_config_t *cfg)
{
    const char *any = "tcp://0.0.0.0:", *any6 = "tcp://*:";
    char host[256] = "127.0.0.1";
    if (strncmp(cfg->listen, any, strlen(any)) == 0) {
        if (gethostname(host, sizeof(host) - 1) < 0)
            strcpy(host, "127.0.0.1");
        snprintf(cfg->advertise, sizeof(cfg->advertise), "tcp://%s:%s", host,
                 cfg->listen + strlen(any));
    } else if (strncmp(cfg->listen, any6, strlen(any6)) == 0) {
        snprintf(cfg->advertise, sizeof(cfg->advertise), "tcp://127.0.0.1:%s",
                 cfg->listen + strlen(any6));
    } else {
        br_strlcpy(cfg->advertise, cfg->listen, sizeof(cfg->advertise));
    }
}

static int write_admin(const br_config_t *cfg, br_store_t *st, br_err_t *err)
{
    br_cred_t admin = {0};
    char path[1100];
    br_strlcpy(admin.endpoint, cfg->advertise, sizeof(admin.endpoint));
    br_strlcpy(admin.server_public_key, cfg->public_key,
               sizeof(admin.server_public_key));
    strcpy(admin.name, "admin");
    if (br_keypair(admin.public_key, admin.secret_key, err) < 0 ||
        br_store_key_add(st, admin.public_key, BR_PRINCIPAL_ADMIN, "admin", err) < 0)
        return -1;
    return br_cred_save(br_config_path(cfg, "admin.credential", path, sizeof(path)),
                        &admin, err);
}

/* `brambled init --http-cert F --http-key K`: both load now (so a mistake shows at
 * once), and are recorded with absolute paths (a later start may be elsewhere). */
static int init_tls(br_config_t *cfg, br_err_t *err)
{
    char cert[PATH_MAX], key[PATH_MAX];
    if (!cfg->http_cert[0])
        return 0;
    if (!cfg->http[0] || strcmp(cfg->http, "off") == 0)
        return br_errf(err, EINVAL, "--http-cert and --http-key need --http ADDR:PORT");
    br_http_tls_t *tls = br_http_tls_new(cfg->http_cert, cfg->http_key, err);
    if (!tls)
        return -1;
    br_http_tls_destroy(&tls);
    if (!realpath(cfg->http_cert, cert))
        return br_errf(err, errno, "%s: %s", cfg->http_cert, strerror(errno));
    if (!realpath(cfg->http_key, key))
        return br_errf(err, errno, "%s: %s", cfg->http_key, strerror(errno));
    if (strlen(cert) >= sizeof(cfg->http_cert) || strlen(key) >= sizeof(cfg->http_key))
        return br_errf(err, ENAMETOOLONG, "the certificate's or key's path is too long");
    strcpy(cfg->http_cert, cert);
    strcpy(cfg->http_key, key);
    return 0;
}

int br_config_init(br_config_t *cfg, br_err_t *err)
{
    char path[1100];
    if (access(br_config_path(cfg, "coordinator.yaml", path, sizeof(path)), F_OK) == 0)
        return br_errf(err, EEXIST, "%s already exists: this data dir is set up", path);
    if (init_tls(cfg, err) < 0)
        return -1;
    if (br_mkdir_p(cfg->data_dir, 0700, err) < 0)
        return -1;
    if (!cfg->listen[0])
        strcpy(cfg->listen, BR_DEFAULT_LISTEN);
    if (!cfg->advertise[0])
        default_advertise(cfg);
    if (br_keypair(cfg->public_key, cfg->secret_key, err) < 0)
        return -1;
    br_store_t *st = br_store_open(br_config_path(cfg, "bramble.db", path, sizeof(path)),
                                   err);
    if (!st)
        return -1;
    int rc = write_admin(cfg, st, err);
    br_store_destroy(&st);
    if (rc < 0)
        return -1;
    json_t *obj = json_pack("{s:s, s:s, s:s, s:s}", "listen", cfg->listen, "advertise",
                            cfg->advertise, "public_key", cfg->public_key,
                            "secret_key", cfg->secret_key);
    if (cfg->announce == 1) /* `brambled init --announce`: later starts announce */
        json_object_set_new(obj, "announce", json_true());
    br_http_addr_t addr;
    if (cfg->http[0] && strcmp(cfg->http, "off") != 0 && /* `brambled init --http A:P` */
        br_http_parse_addr(cfg->http, &addr, NULL) == 0) {
        br_strlcpy(cfg->http, addr.text, sizeof(cfg->http)); /* "7780": 127.0.0.1:7780 */
        json_object_set_new(obj, "http", json_string(cfg->http));
        if (cfg->http_cert[0]) { /* `brambled init --http-cert F --http-key K` */
            json_object_set_new(obj, "http_cert", json_string(cfg->http_cert));
            json_object_set_new(obj, "http_key", json_string(cfg->http_key));
        }
    }
    rc = br_conf_save(br_config_path(cfg, "coordinator.yaml", path, sizeof(path)), obj,
                      0600, err);
    json_decref(obj);
    return rc;
}

int br_config_load(br_config_t *cfg, br_err_t *err)
{
    char path[1100];
    br_config_path(cfg, "coordinator.yaml", path, sizeof(path));
    if (access(path, F_OK) < 0)
        return br_errf(err, ENOENT,
                       "%s not found: run 'brambled init --data-dir %s' first", path,
                       cfg->data_dir);
    json_t *obj = br_conf_load(path, err);
    if (!obj)
        return -1;
    const char *listen = br_conf_str(obj, "listen");
    const char *adv = br_conf_str(obj, "advertise");
    const char *pub = br_conf_str(obj, "public_key");
    const char *sec = br_conf_str(obj, "secret_key");
    const char *announce = br_conf_str(obj, "announce");
    const char *http = br_conf_str(obj, "http");
    const char *cert = br_conf_str(obj, "http_cert");
    const char *key = br_conf_str(obj, "http_key");
    br_http_addr_t addr;
    br_err_t herr;
    int rc = -1;
    if (!listen || !adv || !br_key_valid(pub) || !br_key_valid(sec)) {
        br_errf(err, EINVAL, "%s: incomplete (listen, advertise, public_key, secret_key)",
                path);
        goto done;
    }
    if (announce && strcmp(announce, "true") != 0 && strcmp(announce, "false") != 0) {
        br_errf(err, EINVAL, "%s: announce: expected true or false, not '%s'", path,
                announce);
        goto done;
    }
    if (http && strcmp(http, "off") != 0 && br_http_parse_addr(http, &addr, &herr) < 0) {
        br_errf(err, EINVAL, "%s: http: %s", path, herr.text);
        goto done;
    }
    if (!cert != !key || (cert && (!*cert || !*key))) {
        br_errf(err, EINVAL,
                "%s: http_cert and http_key go together: give both or neither", path);
        goto done;
    }
    if (cfg->announce < 0)
        cfg->announce = announce && strcmp(announce, "true") == 0;
    if (!cfg->http_cert[0] && !cfg->http_key[0] && cert) { /* flags win over the file */
        br_strlcpy(cfg->http_cert, cert, sizeof(cfg->http_cert));
        br_strlcpy(cfg->http_key, key, sizeof(cfg->http_key));
    }
    if (!cfg->http[0] && http) /* a --http flag wins over the file */
        br_strlcpy(cfg->http, http, sizeof(cfg->http));
    if (cfg->listen[0] && strcmp(cfg->listen, listen) != 0 && !cfg->advertise[0])
        /* tokens and credentials carry the advertised endpoint, which stays */
        fprintf(stderr,
                "brambled: warning: listening on %s, not on %s as init recorded; join "
                "tokens and credentials still carry %s. If that no longer reaches this "
                "coordinator, give --advertise ENDPOINT (new tokens and `user add` use "
                "it) and update the endpoint in existing credentials and agents' data "
                "dirs\n",
                cfg->listen, listen, adv);
    if (!cfg->listen[0])
        br_strlcpy(cfg->listen, listen, sizeof(cfg->listen));
    if (!cfg->advertise[0])
        br_strlcpy(cfg->advertise, adv, sizeof(cfg->advertise));
    strcpy(cfg->public_key, pub);
    strcpy(cfg->secret_key, sec);
    rc = 0;
done:
    json_decref(obj);
    return rc;
}
