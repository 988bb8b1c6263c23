/* test_config.c - the coordinator's settings (config.h): the defaults; `brambled
 * init` (the data dir, its key pair, coordinator.yaml, the store with the admin's
 * key and admin.credential; the advertised endpoint it derives; what it records of
 * --announce and --http; what it refuses); br_config_load (what it takes from
 * coordinator.yaml, what flags keep, and its refusals, each naming the file and the
 * field); and brambled's flags (main.c's parse_args, compiled in here: its
 * durations, sizes, ports and switches, and its refusals naming the flag). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <errno.h>
#include <fcntl.h>

#include "announce.h"
#include "config.h"
#include "cred.h"
#include "http.h"
#include "store.h"
#include "util.h"

/* brambled's own main.c, for its flags (parse_args is static there) */
#define main brambled_main
#if __has_include("../../coordinator/main.c")
#include "../../coordinator/main.c"
#else
#error "coordinator/main.c moved: include it from where it is now"
#endif
#undef main

typedef struct {
    char dir[64];
    char data[128]; /* dir/data/dir: init makes the parents too */
} world_t;

static int setup(void **state)
{
    world_t *w = calloc(1, sizeof(*w));
    if (!w)
        return -1;
    snprintf(w->dir, sizeof(w->dir), "/tmp/test_config.XXXXXX");
    if (!mkdtemp(w->dir))
        return -1;
    snprintf(w->data, sizeof(w->data), "%s/data/dir", w->dir);
    *state = w;
    return 0;
}

static int teardown(void **state)
{
    world_t *w = *state;
    br_rm_tree(AT_FDCWD, w->dir);
    free(w);
    return 0;
}

/* Defaults with w's data dir. */
static void cfg_for(const world_t *w, br_config_t *cfg)
{
    br_config_defaults(cfg);
    br_strlcpy(cfg->data_dir, w->data, sizeof(cfg->data_dir));
}

static void init_ok(br_config_t *cfg)
{
    br_err_t err = {0};
    if (br_config_init(cfg, &err) < 0)
        fail_msg("init %s: %s", cfg->data_dir, err.text);
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void assert_contains(const char *text, const char *want)
{
    if (!text || !strstr(text, want))
        fail_msg("'%s' does not say '%s'", text ? text : "(null)", want);
}

/* --- stderr, caught -------------------------------------------------------------- */

static int saved_stderr = -1;
static char caught_path[96];

static void catch_stderr(void)
{
    snprintf(caught_path, sizeof(caught_path), "/tmp/test_config.err.XXXXXX");
    int fd = mkstemp(caught_path);
    assert_true(fd >= 0);
    fflush(stderr);
    saved_stderr = dup(2);
    dup2(fd, 2);
    close(fd);
}

/* What was written to stderr since catch_stderr, into buf. */
static const char *release_stderr(char *buf, size_t len)
{
    fflush(stderr);
    dup2(saved_stderr, 2);
    close(saved_stderr);
    saved_stderr = -1;
    FILE *f = fopen(caught_path, "r");
    assert_non_null(f);
    size_t n = fread(buf, 1, len - 1, f);
    buf[n] = '\0';
    fclose(f);
    unlink(caught_path);
    return buf;
}

/* --- the defaults ---------------------------------------------------------------- */

static void test_defaults(void **state)
{
    (void)state;
    br_config_t cfg;
    memset(&cfg, 0x5a, sizeof(cfg)); /* whatever was there is gone */
    br_config_defaults(&cfg);
    assert_int_equal(cfg.heartbeat_ms, 1000);
    assert_int_equal(cfg.node_timeout_ms, 5000);
    assert_int_equal(cfg.grace_ms, -1); /* derived from the node timeout at start */
    assert_int_equal(cfg.kill_grace_ms, 30000);
    assert_int_equal(cfg.preempt_after_ms, 10 * 60 * 1000);
    assert_int_equal(cfg.preempt_min_run_ms, 5 * 60 * 1000);
    assert_int_equal(cfg.half_life_ms, 7LL * 24 * 3600 * 1000);
    assert_int_equal(cfg.log_max_per_job, 64LL << 20);
    assert_int_equal(cfg.log_retention_ms, 30LL * 24 * 3600 * 1000);
    assert_int_equal(cfg.replica_retention_ms, 7LL * 24 * 3600 * 1000);
    assert_int_equal(cfg.announce, -1); /* as recorded by init */
    assert_int_equal(cfg.announce_port, BR_ANNOUNCE_PORT);
    /* endpoints, keys and HTTP: empty until given or read from the data dir */
    assert_string_equal(cfg.listen, "");
    assert_string_equal(cfg.advertise, "");
    assert_string_equal(cfg.public_key, "");
    assert_string_equal(cfg.secret_key, "");
    assert_string_equal(cfg.http, "");
    assert_string_equal(cfg.http_cert, "");
    assert_string_equal(cfg.http_key, "");
}

/* The data dir: /var/lib/bramble for root, else under $XDG_DATA_HOME, else under
 * ~/.local/share. */
static void test_default_data_dir(void **state)
{
    (void)state;
    char *xdg = getenv("XDG_DATA_HOME") ? strdup(getenv("XDG_DATA_HOME")) : NULL;
    char *home = getenv("HOME") ? strdup(getenv("HOME")) : NULL;
    br_config_t cfg;
    setenv("XDG_DATA_HOME", "/x/data", 1);
    setenv("HOME", "/home/ann", 1);
    br_config_defaults(&cfg);
    if (geteuid() == 0)
        assert_string_equal(cfg.data_dir, "/var/lib/bramble");
    else
        assert_string_equal(cfg.data_dir, "/x/data/bramble");
    setenv("XDG_DATA_HOME", "", 1); /* empty: as if not set */
    br_config_defaults(&cfg);
    if (geteuid() == 0)
        assert_string_equal(cfg.data_dir, "/var/lib/bramble");
    else
        assert_string_equal(cfg.data_dir, "/home/ann/.local/share/bramble");
    char buf[64];
    br_strlcpy(cfg.data_dir, "/d", sizeof(cfg.data_dir));
    assert_string_equal(br_config_path(&cfg, "bramble.db", buf, sizeof(buf)),
                        "/d/bramble.db");
    if (xdg)
        setenv("XDG_DATA_HOME", xdg, 1);
    else
        unsetenv("XDG_DATA_HOME");
    if (home)
        setenv("HOME", home, 1);
    else
        unsetenv("HOME");
    free(xdg);
    free(home);
}

/* --- brambled init --------------------------------------------------------------- */

/* init makes the data dir (and its parents) for its owner only, a key pair, the
 * store with the admin's key, an admin credential that names this coordinator, and
 * coordinator.yaml that load reads back. */
static void test_init_makes_a_data_dir(void **state)
{
    world_t *w = *state;
    br_config_t cfg;
    cfg_for(w, &cfg);
    init_ok(&cfg);
    struct stat st;
    assert_int_equal(stat(w->data, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0700);
    char path[1100];
    assert_int_equal(
        stat(br_config_path(&cfg, "coordinator.yaml", path, sizeof(path)), &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600); /* it holds the secret key */
    assert_string_equal(cfg.listen, BR_DEFAULT_LISTEN);
    assert_true(br_key_valid(cfg.public_key));
    assert_true(br_key_valid(cfg.secret_key));
    /* 0.0.0.0 is where it listens, not where to dial: this host's name instead */
    char host[256] = "";
    assert_int_equal(gethostname(host, sizeof(host) - 1), 0);
    char want[300];
    snprintf(want, sizeof(want), "tcp://%s:7700", host);
    assert_string_equal(cfg.advertise, want);

    br_cred_t admin;
    br_err_t err = {0};
    assert_int_equal(
        br_cred_load(br_config_path(&cfg, "admin.credential", path, sizeof(path)),
                     &admin, &err),
        0);
    assert_string_equal(admin.endpoint, cfg.advertise);
    assert_string_equal(admin.server_public_key, cfg.public_key);
    assert_string_equal(admin.name, "admin");
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);

    br_store_t *s =
        br_store_open(br_config_path(&cfg, "bramble.db", path, sizeof(path)), &err);
    assert_non_null(s);
    br_principal_t kind;
    char name[64];
    assert_int_equal(
        br_store_key_lookup(s, admin.public_key, &kind, name, sizeof(name), &err), 0);
    assert_int_equal(kind, BR_PRINCIPAL_ADMIN);
    assert_string_equal(name, "admin");
    br_store_destroy(&s);

    /* what a start reads back */
    br_config_t again;
    cfg_for(w, &again);
    assert_int_equal(br_config_load(&again, &err), 0);
    assert_string_equal(again.listen, cfg.listen);
    assert_string_equal(again.advertise, cfg.advertise);
    assert_string_equal(again.public_key, cfg.public_key);
    assert_string_equal(again.secret_key, cfg.secret_key);
    assert_int_equal(again.announce, 0); /* not recorded: off */
    assert_string_equal(again.http, ""); /* not recorded: none */
}

/* The endpoint init records for clients: a wildcard v6 listen is dialled on
 * 127.0.0.1; a listen on one address is that address; --advertise is kept. */
static void test_init_advertise(void **state)
{
    world_t *w = *state;
    static const struct {
        const char *listen, *advertise, *want;
    } cases[] = {
        {"tcp://*:7711", "", "tcp://127.0.0.1:7711"},
        {"tcp://10.1.2.3:7712", "", "tcp://10.1.2.3:7712"},
        {"tcp://0.0.0.0:7713", "tcp://coord.example:7713", "tcp://coord.example:7713"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        br_config_t cfg;
        cfg_for(w, &cfg);
        snprintf(cfg.data_dir, sizeof(cfg.data_dir), "%s/adv%zu", w->dir, i);
        br_strlcpy(cfg.listen, cases[i].listen, sizeof(cfg.listen));
        br_strlcpy(cfg.advertise, cases[i].advertise, sizeof(cfg.advertise));
        init_ok(&cfg);
        assert_string_equal(cfg.advertise, cases[i].want);
        br_config_t back;
        br_config_defaults(&back);
        br_strlcpy(back.data_dir, cfg.data_dir, sizeof(back.data_dir));
        br_err_t err = {0};
        assert_int_equal(br_config_load(&back, &err), 0);
        assert_string_equal(back.listen, cases[i].listen);
        assert_string_equal(back.advertise, cases[i].want);
    }
}

/* A data dir set up already is refused (EEXIST, naming coordinator.yaml), and left
 * as it was: the keys every agent trusts are not replaced. */
static void test_init_refuses_a_set_up_dir(void **state)
{
    world_t *w = *state;
    br_config_t cfg, second;
    cfg_for(w, &cfg);
    init_ok(&cfg);
    cfg_for(w, &second);
    br_err_t err = {0};
    assert_int_equal(br_config_init(&second, &err), -1);
    assert_int_equal(err.errnum, EEXIST);
    assert_contains(err.text, "coordinator.yaml already exists");
    assert_contains(err.text, w->data);
    br_config_t back;
    cfg_for(w, &back);
    assert_int_equal(br_config_load(&back, &err), 0);
    assert_string_equal(back.public_key, cfg.public_key);
}

/* `brambled init --announce --http 7780`: both recorded, the bare port as the
 * loopback address it means; later starts take them unless a flag says otherwise. */
static void test_init_records_announce_and_http(void **state)
{
    world_t *w = *state;
    br_config_t cfg;
    cfg_for(w, &cfg);
    cfg.announce = 1;
    br_strlcpy(cfg.http, "7780", sizeof(cfg.http));
    init_ok(&cfg);
    assert_string_equal(cfg.http, "127.0.0.1:7780");

    br_config_t back;
    br_err_t err = {0};
    cfg_for(w, &back);
    assert_int_equal(br_config_load(&back, &err), 0);
    assert_int_equal(back.announce, 1);
    assert_string_equal(back.http, "127.0.0.1:7780");

    /* --no-announce and --http off win over what init recorded */
    cfg_for(w, &back);
    back.announce = 0;
    br_strlcpy(back.http, "off", sizeof(back.http));
    assert_int_equal(br_config_load(&back, &err), 0);
    assert_int_equal(back.announce, 0);
    assert_string_equal(back.http, "off");
}

/* --http-cert without --http is refused before anything is made; so is a
 * certificate that does not load (nothing is made either). */
static void test_init_tls_refusals(void **state)
{
    world_t *w = *state;
    br_config_t cfg;
    br_err_t err = {0};
    cfg_for(w, &cfg);
    br_strlcpy(cfg.http_cert, "/nonexistent/cert.pem", sizeof(cfg.http_cert));
    br_strlcpy(cfg.http_key, "/nonexistent/key.pem", sizeof(cfg.http_key));
    assert_int_equal(br_config_init(&cfg, &err), -1);
    assert_int_equal(err.errnum, EINVAL);
    assert_contains(err.text, "--http-cert and --http-key need --http");
    assert_int_equal(access(w->data, F_OK), -1);

    br_strlcpy(cfg.http, "7781", sizeof(cfg.http));
    memset(&err, 0, sizeof(err));
    assert_int_equal(br_config_init(&cfg, &err), -1);
    assert_true(err.text[0] != '\0');
    assert_int_equal(access(w->data, F_OK), -1); /* no half-made data dir */
}

/* --- br_config_load -------------------------------------------------------------- */

static void test_load_without_init(void **state)
{
    world_t *w = *state;
    br_config_t cfg;
    cfg_for(w, &cfg);
    br_err_t err = {0};
    assert_int_equal(br_config_load(&cfg, &err), -1);
    assert_int_equal(err.errnum, ENOENT);
    assert_contains(err.text, "coordinator.yaml not found");
    char want[256];
    snprintf(want, sizeof(want), "brambled init --data-dir %s", w->data);
    assert_contains(err.text, want);
}

/* What coordinator.yaml may not hold: each refused with EINVAL, the file named and
 * the field. */
static void test_load_refusals(void **state)
{
    world_t *w = *state;
    br_config_t cfg;
    cfg_for(w, &cfg);
    init_ok(&cfg);
    char keys[200];
    snprintf(keys, sizeof(keys), "public_key: '%s'\nsecret_key: '%s'\n", cfg.public_key,
             cfg.secret_key);
    static const char *const ends =
        "listen: 'tcp://0.0.0.0:7700'\n"
        "advertise: 'tcp://h:7700'\n";
    static const struct {
        const char *extra;
        int keys; /* with the key pair */
        const char *says;
    } cases[] = {
        {"", 0, "incomplete (listen, advertise, public_key, secret_key)"},
        {"public_key: 'short'\nsecret_key: 'short'\n", 0, "incomplete"},
        {"announce: 'yes'\n", 1, "announce: expected true or false, not 'yes'"},
        {"http: 'nowhere'\n", 1, "http: 'nowhere'"},
        {"http: '[::1'\n", 1, "http: "},
        {"http: '7780'\nhttp_cert: '/c.pem'\n", 1,
         "http_cert and http_key go together"},
        {"http: '7780'\nhttp_key: '/k.pem'\n", 1, "http_cert and http_key go together"},
        {"http: '7780'\nhttp_cert: ''\nhttp_key: '/k.pem'\n", 1,
         "http_cert and http_key go together"},
    };
    char path[1100], text[1024];
    br_config_path(&cfg, "coordinator.yaml", path, sizeof(path));
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        snprintf(text, sizeof(text), "%s%s%s", ends, cases[i].keys ? keys : "",
                 cases[i].extra);
        write_file(path, text);
        br_config_t back;
        cfg_for(w, &back);
        br_err_t err = {0};
        if (br_config_load(&back, &err) != -1)
            fail_msg("case %zu taken:\n%s", i, text);
        assert_int_equal(err.errnum, EINVAL);
        assert_contains(err.text, path);
        assert_contains(err.text, cases[i].says);
    }
    /* 'true', 'false' and 'off' are taken */
    snprintf(text, sizeof(text), "%s%sannounce: 'false'\nhttp: 'off'\n", ends, keys);
    write_file(path, text);
    br_config_t back;
    cfg_for(w, &back);
    br_err_t err = {0};
    assert_int_equal(br_config_load(&back, &err), 0);
    assert_int_equal(back.announce, 0);
    assert_string_equal(back.http, "off");
}

/* Flags win over the file: --listen and --advertise stay (a --listen other than
 * init's without --advertise says that tokens still carry the recorded endpoint);
 * --http-cert/--http-key win over recorded ones. */
static void test_load_flags_win(void **state)
{
    world_t *w = *state;
    br_config_t cfg;
    cfg_for(w, &cfg);
    br_strlcpy(cfg.listen, "tcp://0.0.0.0:7700", sizeof(cfg.listen));
    br_strlcpy(cfg.advertise, "tcp://coord:7700", sizeof(cfg.advertise));
    init_ok(&cfg);
    char path[1100], text[1024];
    br_config_path(&cfg, "coordinator.yaml", path, sizeof(path));
    snprintf(text, sizeof(text),
             "listen: 'tcp://0.0.0.0:7700'\nadvertise: 'tcp://coord:7700'\n"
             "public_key: '%s'\nsecret_key: '%s'\nhttp: '7780'\n"
             "http_cert: '/rec/cert.pem'\nhttp_key: '/rec/key.pem'\n",
             cfg.public_key, cfg.secret_key);
    write_file(path, text);

    br_config_t back;
    br_err_t err = {0};
    char said[4096];
    cfg_for(w, &back);
    br_strlcpy(back.listen, "tcp://0.0.0.0:7799", sizeof(back.listen));
    catch_stderr();
    int rc = br_config_load(&back, &err);
    release_stderr(said, sizeof(said));
    assert_int_equal(rc, 0);
    assert_string_equal(back.listen, "tcp://0.0.0.0:7799");
    assert_string_equal(back.advertise,
                        "tcp://coord:7700"); /* still the recorded one */
    assert_contains(said,
                    "warning: listening on tcp://0.0.0.0:7799, not on "
                    "tcp://0.0.0.0:7700 as init recorded");
    assert_contains(said, "--advertise");
    assert_string_equal(back.http_cert, "/rec/cert.pem"); /* recorded, no flags */
    assert_string_equal(back.http_key, "/rec/key.pem");

    /* with --advertise too: no warning, both kept */
    cfg_for(w, &back);
    br_strlcpy(back.listen, "tcp://0.0.0.0:7799", sizeof(back.listen));
    br_strlcpy(back.advertise, "tcp://new:7799", sizeof(back.advertise));
    br_strlcpy(back.http_cert, "/flag/cert.pem", sizeof(back.http_cert));
    br_strlcpy(back.http_key, "/flag/key.pem", sizeof(back.http_key));
    catch_stderr();
    rc = br_config_load(&back, &err);
    release_stderr(said, sizeof(said));
    assert_int_equal(rc, 0);
    assert_string_equal(said, "");
    assert_string_equal(back.advertise, "tcp://new:7799");
    assert_string_equal(back.http_cert, "/flag/cert.pem");
    assert_string_equal(back.http_key, "/flag/key.pem");
    assert_string_equal(back.public_key, cfg.public_key); /* keys: always the file's */
}

/* --- brambled's flags (main.c) --------------------------------------------------- */

/* parse_args over the words (NULL-terminated) from the defaults: its return, the
 * settings in *cfg and what it said in said. */
static int parse(br_config_t *cfg, char *said, size_t len, ...)
{
    char *argv[32];
    int argc = 0;
    argv[argc++] = "brambled";
    va_list ap;
    va_start(ap, len);
    for (const char *a; (a = va_arg(ap, const char *)) && argc < 31;)
        argv[argc++] = (char *)a;
    va_end(ap);
    argv[argc] = NULL;
    br_config_defaults(cfg);
    optind = 0; /* getopt starts over */
    catch_stderr();
    int rc = parse_args(argc, argv, cfg);
    release_stderr(said, len);
    return rc;
}

/* Durations take ms, s, m, h, d (a bare number is seconds); sizes binary or decimal
 * units; each flag sets its own setting. */
static void test_flags_set_settings(void **state)
{
    (void)state;
    br_config_t cfg;
    char said[4096];
    assert_int_equal(
        parse(&cfg, said, sizeof(said), "--heartbeat-interval", "250ms",
              "--node-timeout", "2", "--kill-grace", "1m", "--preempt-after", "0",
              "--preempt-min-run", "1.5h", "--log-retention", "0",
              "--replica-retention", "14d", "--fairshare-half-life", "12h",
              "--log-max-per-job", "16MiB", "--announce-port", "9000", "--data-dir",
              "/d", "--listen", "tcp://1.2.3.4:1", "--advertise", "tcp://x:1", NULL),
        0);
    assert_string_equal(said, "");
    assert_int_equal(cfg.heartbeat_ms, 250);
    assert_int_equal(cfg.node_timeout_ms, 2000);
    assert_int_equal(cfg.kill_grace_ms, 60000);
    assert_int_equal(cfg.preempt_after_ms, 0); /* never */
    assert_int_equal(cfg.preempt_min_run_ms, 5400000);
    assert_int_equal(cfg.log_retention_ms, 0); /* kept */
    assert_int_equal(cfg.replica_retention_ms, 14LL * 86400000);
    assert_int_equal(cfg.half_life_ms, 12LL * 3600000);
    assert_int_equal(cfg.log_max_per_job, 16LL << 20);
    assert_int_equal(cfg.announce_port, 9000);
    assert_string_equal(cfg.data_dir, "/d");
    assert_string_equal(cfg.listen, "tcp://1.2.3.4:1");
    assert_string_equal(cfg.advertise, "tcp://x:1");
    assert_int_equal(cfg.announce, -1); /* not said: as recorded */

    assert_int_equal(parse(&cfg, said, sizeof(said), "--log-max-per-job", "1TiB", NULL),
                     0);
    assert_int_equal(cfg.log_max_per_job, 1LL << 40); /* the most */
    assert_int_equal(parse(&cfg, said, sizeof(said), "--log-max-per-job", "0", NULL),
                     0);
    assert_int_equal(cfg.log_max_per_job, 0); /* no limit */
    assert_int_equal(
        parse(&cfg, said, sizeof(said), "--fairshare-half-life", "1s", NULL), 0);
    assert_int_equal(cfg.half_life_ms, 1000);

    /* the announcer: on, off; the last word wins; --teaching turns it on */
    assert_int_equal(parse(&cfg, said, sizeof(said), "--announce", NULL), 0);
    assert_int_equal(cfg.announce, 1);
    assert_int_equal(
        parse(&cfg, said, sizeof(said), "--announce", "--no-announce", NULL), 0);
    assert_int_equal(cfg.announce, 0);
    assert_int_equal(parse(&cfg, said, sizeof(said), "--teaching", NULL), 0);
    assert_int_equal(cfg.announce, 1);
    if (br_http_available()) {
        assert_int_equal(parse(&cfg, said, sizeof(said), "--http", "7780", NULL), 0);
        assert_string_equal(cfg.http, "7780");
    }
    assert_int_equal(parse(&cfg, said, sizeof(said), "--http", "off", NULL), 0);
    assert_string_equal(cfg.http, "off");
}

/* Each bad value is refused (2, the usage error) with words naming the flag or the
 * value, and why. */
static void test_flag_refusals(void **state)
{
    (void)state;
    br_config_t cfg;
    char said[8192];
    static const struct {
        const char *flag, *value, *says, *also;
    } cases[] = {
        {"--kill-grace", "soon", "--kill-grace bad duration 'soon'", "500ms"},
        {"--preempt-after", "-5m", "--preempt-after bad duration '-5m'", NULL},
        {"--preempt-min-run", "5x", "--preempt-min-run bad duration '5x'", NULL},
        {"--log-retention", "forever", "--log-retention bad duration 'forever'", NULL},
        {"--replica-retention", "1w", "--replica-retention bad duration '1w'", NULL},
        {"--fairshare-half-life", "500ms", "--fairshare-half-life 500ms: at least 1s",
         NULL},
        {"--fairshare-half-life", "often", "--fairshare-half-life often: bad duration",
         NULL},
        {"--log-max-per-job", "2TiB", "--log-max-per-job 2TiB: at most 1TiB", NULL},
        {"--log-max-per-job", "lots", "--log-max-per-job lots: ", NULL},
        {"--announce-port", "0", "--announce-port '0': expected 1..65535", NULL},
        {"--announce-port", "70000", "--announce-port '70000': expected 1..65535",
         NULL},
        {"--heartbeat-interval", "fast", "bad duration 'fast'", NULL},
        {"--node-timeout", "1e99d", "bad duration '1e99d': too long", NULL},
        {"--http-cert", "", "--http-cert: empty file name", NULL},
        {"--http-key", "", "--http-key: empty file name", NULL},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int rc = parse(&cfg, said, sizeof(said), cases[i].flag, cases[i].value, NULL);
        if (rc != 2)
            fail_msg("%s %s: %d", cases[i].flag, cases[i].value, rc);
        assert_contains(said, cases[i].says);
        if (cases[i].also)
            assert_contains(said, cases[i].also);
    }
    /* the node timeout must outlast the heartbeat, which is at least 10ms */
    assert_int_equal(parse(&cfg, said, sizeof(said), "--heartbeat-interval", "5s",
                           "--node-timeout", "5s", NULL),
                     2);
    assert_contains(said, "--node-timeout must be longer than --heartbeat-interval");
    assert_int_equal(parse(&cfg, said, sizeof(said), "--heartbeat-interval", "5ms",
                           "--node-timeout", "1s", NULL),
                     2);
    assert_contains(said, "(at least 10ms)");
    assert_int_equal(parse(&cfg, said, sizeof(said), "--heartbeat-interval", "10ms",
                           "--node-timeout", "11ms", NULL),
                     0);
    /* a bad --http address says why; a build without HTTP says that instead */
    assert_int_equal(parse(&cfg, said, sizeof(said), "--http", "nowhere", NULL), 2);
    assert_contains(said,
                    br_http_available() ? "--http 'nowhere'" : "built without HTTP");
    /* a certificate without its key (where HTTPS can be served at all) */
    assert_int_equal(parse(&cfg, said, sizeof(said), "--http-cert", "/c.pem", NULL), 2);
    assert_contains(said, br_http_tls_available()
                              ? "--http-cert and --http-key go together"
                              : "cannot serve HTTPS");
    /* a flag brambled does not know: the usage */
    assert_int_equal(parse(&cfg, said, sizeof(said), "--frobnicate", NULL), 2);
    assert_contains(said, "usage: brambled");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_default_data_dir),
        cmocka_unit_test_setup_teardown(test_init_makes_a_data_dir, setup, teardown),
        cmocka_unit_test_setup_teardown(test_init_advertise, setup, teardown),
        cmocka_unit_test_setup_teardown(test_init_refuses_a_set_up_dir, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_init_records_announce_and_http, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_init_tls_refusals, setup, teardown),
        cmocka_unit_test_setup_teardown(test_load_without_init, setup, teardown),
        cmocka_unit_test_setup_teardown(test_load_refusals, setup, teardown),
        cmocka_unit_test_setup_teardown(test_load_flags_win, setup, teardown),
        cmocka_unit_test(test_flags_set_settings),
        cmocka_unit_test(test_flag_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
