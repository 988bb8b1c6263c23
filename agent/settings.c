/* settings.c - what an agent keeps in its data dir. */
#include "settings.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "announce.h"
#include "holder.h"
#include "conf.h"
#include "jobuser.h"
#include "probe.h"
#include "util.h"

void br_settings_init(br_settings_t *s)
{
    memset(s, 0, sizeof(*s));
    s->labels = json_object();
    s->discover_timeout_ms = 30000;
    s->discover_port = BR_ANNOUNCE_PORT;
    s->probe_port = PROBE_PORT_UNSET;
    s->replica_quota = s->replica_bandwidth = REPLICA_UNSET;
    s->cache_quota = REPLICA_UNSET;
    s->replica_port = REPLICA_UNSET;
    s->power_price = s->idle_watts = POWER_UNSET;
}

/* A plain decimal number, finite, 0 or more: no sign, hex, inf or nan spellings. */
static int parse_amount(const char *text, double *out, br_err_t *err)
{
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    int plain = (text[0] >= '0' && text[0] <= '9') || text[0] == '.';
    for (const char *p = text; plain && p < end; p++)
        plain = strchr("0123456789.eE+-", *p) != NULL;
    if (!plain || end == text || *end || errno || !isfinite(v) || v < 0)
        return br_errf(err, EINVAL, "'%s': expected a number, 0 or more", text);
    *out = v;
    return 0;
}

int br_settings_cost_per_hour(br_settings_t *s, const char *text, br_err_t *err)
{
    return parse_amount(text, &s->cost_per_hour, err);
}

int br_settings_power_price(br_settings_t *s, const char *text, br_err_t *err)
{
    return parse_amount(text, &s->power_price, err);
}

int br_settings_idle_watts(br_settings_t *s, const char *text, br_err_t *err)
{
    return parse_amount(text, &s->idle_watts, err);
}

int br_settings_replica_port(br_settings_t *s, const char *text, br_err_t *err)
{
    if (strcmp(text, "off") == 0) {
        s->replica_port = -1;
        return 0;
    }
    if (br_parse_port(text, 0, &s->replica_port, err) < 0)
        return br_errf(err, EINVAL, "'%s': expected 0..65535 or off", text);
    return 0;
}

int br_settings_replica_quota(br_settings_t *s, const char *text, br_err_t *err)
{
    uint64_t n;
    if (strcmp(text, "none") == 0) {
        s->replica_quota = -1;
        return 0;
    }
    if (br_parse_size(text, &n, err) < 0)
        return br_errf(err, EINVAL, "'%s': expected a size (200GiB), 0 or none", text);
    s->replica_quota = (int64_t)n;
    return 0;
}

int br_settings_cache_quota(br_settings_t *s, const char *text, br_err_t *err)
{
    uint64_t n;
    if (strcmp(text, "none") == 0) {
        s->cache_quota = -1;
        return 0;
    }
    if (br_parse_size(text, &n, err) < 0 || n == 0 || n > (1ULL << 60))
        return br_errf(err, EINVAL, "'%s': expected a size (20GiB) or none", text);
    s->cache_quota = (int64_t)n;
    return 0;
}

/* "40MB/s", "40MB", "0" -> bytes per second. */
int br_settings_replica_bandwidth(br_settings_t *s, const char *text, br_err_t *err)
{
    char buf[64];
    uint64_t n;
    br_strlcpy(buf, text, sizeof(buf));
    size_t len = strlen(buf);
    if (len > 2 && strcmp(buf + len - 2, "/s") == 0)
        buf[len - 2] = '\0';
    if (br_parse_size(buf, &n, err) < 0)
        return br_errf(err, EINVAL, "'%s': expected a rate (40MB/s) or 0", text);
    s->replica_bandwidth = (int64_t)n;
    return 0;
}

int br_settings_probe_port(br_settings_t *s, const char *text, br_err_t *err)
{
    if (strcmp(text, "off") == 0) {
        s->probe_port = -1;
        return 0;
    }
    if (br_parse_port(text, 0, &s->probe_port, err) < 0)
        return br_errf(err, EINVAL, "'%s': expected 0..65535 or off", text);
    return 0;
}

int br_settings_job_uids(br_settings_t *s, const char *text, br_err_t *err)
{
    return br_jobusers_parse_range(text, &s->job_uid_first, &s->job_uid_last, err);
}

/* The settings' job users (jobuser.h), or NULL when out of memory. */
static br_jobusers_t *job_users(const br_settings_t *s)
{
    br_jobusers_opts_t o = {.job_user = s->job_user,
                            .first = s->job_uid_first,
                            .last = s->job_uid_last,
                            .allow_root = s->allow_root_jobs,
                            .data_dir = s->data_dir,
                            .agent_uid = geteuid()};
    return br_jobusers_new(&o, NULL);
}

void br_settings_warn(const br_settings_t *s)
{
    br_jobusers_t *u = job_users(s);
    const char *warning = u ? br_jobusers_warning(u) : NULL;
    if (warning)
        fprintf(stderr, "bramble-agent: warning: %s\n", warning);
    br_jobusers_destroy(&u);
}

const char *br_settings_refuses_all(const br_settings_t *s)
{
    br_jobusers_t *u = job_users(s);
    const char *why = u ? br_jobusers_refuses_all(u) : NULL; /* (static text) */
    br_jobusers_destroy(&u);
    return why;
}

void br_settings_free(br_settings_t *s)
{
    json_decref(s->labels);
    s->labels = NULL;
    br_dirlock_destroy(&s->lock);
}

int br_settings_add_label(br_settings_t *s, const char *kv, br_err_t *err)
{
    const char *eq = strchr(kv, '=');
    if (!eq || eq == kv || strlen(eq + 1) == 0 || eq - kv > 63)
        return br_errf(err, EINVAL, "--label '%s': expected key=value", kv);
    char key[64];
    memcpy(key, kv, (size_t)(eq - kv));
    key[eq - kv] = '\0';
    json_object_set_new(s->labels, key, json_string(eq + 1));
    return 0;
}

static void path_of(const br_settings_t *s, const char *name, char *buf, size_t len)
{
    snprintf(buf, len, "%s/%s", s->data_dir, name);
}

static void take_str(json_t *obj, const char *key, char *dst, size_t len)
{
    const char *v = br_conf_str(obj, key);
    if (v && !dst[0])
        br_strlcpy(dst, v, len);
}

int br_settings_load(br_settings_t *s, int *joined, br_err_t *err)
{
    char path[1100];
    path_of(s, "agent.yaml", path, sizeof(path));
    *joined = 0;
    if (access(path, F_OK) < 0)
        return 0;
    json_t *obj = br_conf_load(path, err);
    if (!obj)
        return -1;
    take_str(obj, "gpus", s->gpus, sizeof(s->gpus));
    take_str(obj, "job_user", s->job_user, sizeof(s->job_user));
    const char *uids = br_conf_str(obj, "job_uids");
    if (uids && *uids && !s->job_uid_last && br_settings_job_uids(s, uids, err) < 0) {
        json_decref(obj);
        br_err_prefix(err, "%s: job_uids", path);
        return -1;
    }
    take_str(obj, "advertise_addr", s->advertise_addr, sizeof(s->advertise_addr));
    const char *probe = br_conf_str(obj, "probe_port");
    if (probe && s->probe_port == PROBE_PORT_UNSET &&
        br_settings_probe_port(s, probe, err) < 0) {
        json_decref(obj);
        br_err_prefix(err, "%s: probe_port", path);
        return -1;
    }
    take_str(obj, "replica_dir", s->replica_dir, sizeof(s->replica_dir));
    take_str(obj, "cache_dir", s->cache_dir, sizeof(s->cache_dir));
    struct {
        const char *key;
        int unset;
        int (*parse)(br_settings_t *, const char *, br_err_t *);
    } rep[] = {{"replica_port", s->replica_port == REPLICA_UNSET, br_settings_replica_port},
               {"replica_quota", s->replica_quota == REPLICA_UNSET,
                br_settings_replica_quota},
               {"replica_bandwidth", s->replica_bandwidth == REPLICA_UNSET,
                br_settings_replica_bandwidth},
               {"cache_quota", s->cache_quota == REPLICA_UNSET, br_settings_cache_quota}};
    for (size_t i = 0; i < sizeof(rep) / sizeof(rep[0]); i++) {
        const char *v = br_conf_str(obj, rep[i].key);
        if (v && rep[i].unset && rep[i].parse(s, v, err) < 0) {
            json_decref(obj);
            br_err_prefix(err, "%s: %s", path, rep[i].key);
            return -1;
        }
    }
    struct {
        const char *key;
        int unset;
        int (*parse)(br_settings_t *, const char *, br_err_t *);
    } money[] = {{"cost_per_hour", !s->cost_given, br_settings_cost_per_hour},
                 {"power_price", s->power_price < 0, br_settings_power_price},
                 {"idle_watts", s->idle_watts < 0, br_settings_idle_watts}};
    for (size_t i = 0; i < sizeof(money) / sizeof(money[0]); i++) {
        const char *v = br_conf_str(obj, money[i].key);
        if (v && money[i].unset && money[i].parse(s, v, err) < 0) {
            json_decref(obj);
            br_err_prefix(err, "%s: %s", path, money[i].key);
            return -1;
        }
    }
    json_t *labels = json_object_get(obj, "labels");
    if (json_object_size(s->labels) == 0 && json_is_object(labels))
        json_object_update(s->labels, labels);
    json_decref(obj);
    path_of(s, "credential", path, sizeof(path));
    if (br_cred_load(path, &s->cred, err) < 0)
        return -1;
    br_strlcpy(s->name, s->cred.name, sizeof(s->name));
    *joined = 1;
    return 0;
}

int br_settings_finish(br_settings_t *s)
{
    if (s->probe_port == PROBE_PORT_UNSET)
        s->probe_port = BR_PROBE_PORT;
    if (!s->replica_dir[0])
        snprintf(s->replica_dir, sizeof(s->replica_dir), "%s/replicas", s->data_dir);
    if (!s->cache_dir[0])
        snprintf(s->cache_dir, sizeof(s->cache_dir), "%s/cache", s->data_dir);
    if (s->replica_quota == REPLICA_UNSET)
        s->replica_quota = -1;
    if (s->cache_quota == REPLICA_UNSET)
        s->cache_quota = -1;
    if (s->replica_bandwidth == REPLICA_UNSET)
        s->replica_bandwidth = 0;
    if (s->replica_port == REPLICA_UNSET)
        s->replica_port = BR_REPLICA_PORT;
    if (s->power_price < 0)
        s->power_price = 0;
    if (s->idle_watts < 0)
        s->idle_watts = 0;
    return 0;
}

int br_settings_lock(br_settings_t *s, br_err_t *err)
{
    if (s->join_token[0] && br_mkdir_p(s->data_dir, 0700, err) < 0)
        return -1;
    if (!s->join_token[0] && access(s->data_dir, F_OK) < 0)
        return 0; /* no data dir: setup says it has not joined */
    s->lock = br_dirlock_new(s->data_dir, "agent.lock", "bramble-agent", err);
    return s->lock ? 0 : -1;
}

int br_settings_save(const br_settings_t *s, br_err_t *err)
{
    char path[1100], cost[64], probe[16];
    snprintf(cost, sizeof(cost), "%.15g", s->cost_per_hour);
    if (s->probe_port == -1)
        snprintf(probe, sizeof(probe), "off");
    else
        snprintf(probe, sizeof(probe), "%d",
                 s->probe_port == PROBE_PORT_UNSET ? BR_PROBE_PORT : s->probe_port);
    json_t *obj = json_pack("{s:s, s:O, s:s, s:s, s:s, s:s, s:s}", "name", s->name, "labels",
                            s->labels, "cost_per_hour", cost, "gpus", s->gpus, "job_user",
                            s->job_user, "advertise_addr", s->advertise_addr, "probe_port",
                            probe);
    char num[32];
    if (s->power_price >= 0) {
        snprintf(num, sizeof(num), "%.15g", s->power_price);
        json_object_set_new(obj, "power_price", json_string(num));
    }
    if (s->idle_watts >= 0) {
        snprintf(num, sizeof(num), "%.15g", s->idle_watts);
        json_object_set_new(obj, "idle_watts", json_string(num));
    }
    if (s->replica_dir[0])
        json_object_set_new(obj, "replica_dir", json_string(s->replica_dir));
    if (s->cache_dir[0])
        json_object_set_new(obj, "cache_dir", json_string(s->cache_dir));
    if (s->replica_port != REPLICA_UNSET) {
        if (s->replica_port < 0)
            snprintf(num, sizeof(num), "off");
        else
            snprintf(num, sizeof(num), "%d", s->replica_port);
        json_object_set_new(obj, "replica_port", json_string(num));
    }
    if (s->replica_quota != REPLICA_UNSET) {
        if (s->replica_quota < 0)
            snprintf(num, sizeof(num), "none");
        else
            snprintf(num, sizeof(num), "%lld", (long long)s->replica_quota);
        json_object_set_new(obj, "replica_quota", json_string(num));
    }
    if (s->cache_quota != REPLICA_UNSET) {
        if (s->cache_quota < 0)
            snprintf(num, sizeof(num), "none");
        else
            snprintf(num, sizeof(num), "%lld", (long long)s->cache_quota);
        json_object_set_new(obj, "cache_quota", json_string(num));
    }
    if (s->replica_bandwidth != REPLICA_UNSET) {
        snprintf(num, sizeof(num), "%lld", (long long)s->replica_bandwidth);
        json_object_set_new(obj, "replica_bandwidth", json_string(num));
    }
    if (s->job_uid_last) {
        char uids[32];
        snprintf(uids, sizeof(uids), "%u-%u", s->job_uid_first, s->job_uid_last);
        json_object_set_new(obj, "job_uids", json_string(uids));
    }
    path_of(s, "agent.yaml", path, sizeof(path));
    int rc = br_conf_save(path, obj, 0600, err);
    json_decref(obj);
    if (rc < 0)
        return -1;
    path_of(s, "credential", path, sizeof(path));
    return br_cred_save(path, &s->cred, err);
}
