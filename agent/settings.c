/* settings.c - what an agent keeps in its data dir. */
#include "settings.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "announce.h"
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

void br_settings_warn(const br_settings_t *s)
{
    br_jobusers_opts_t o = {.job_user = s->job_user,
                            .first = s->job_uid_first,
                            .last = s->job_uid_last,
                            .allow_root = s->allow_root_jobs,
                            .data_dir = s->data_dir,
                            .agent_uid = geteuid()};
    br_jobusers_t *u = br_jobusers_new(&o, NULL);
    const char *warning = u ? br_jobusers_warning(u) : NULL;
    if (warning)
        fprintf(stderr, "bramble-agent: warning: %s\n", warning);
    br_jobusers_destroy(&u);
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
    const char *cost = br_conf_str(obj, "cost_per_hour");
    if (cost && !s->cost_given)
        s->cost_per_hour = strtod(cost, NULL);
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
    snprintf(cost, sizeof(cost), "%g", s->cost_per_hour);
    if (s->probe_port == -1)
        snprintf(probe, sizeof(probe), "off");
    else
        snprintf(probe, sizeof(probe), "%d",
                 s->probe_port == PROBE_PORT_UNSET ? BR_PROBE_PORT : s->probe_port);
    json_t *obj = json_pack("{s:s, s:O, s:s, s:s, s:s, s:s, s:s}", "name", s->name, "labels",
                            s->labels, "cost_per_hour", cost, "gpus", s->gpus, "job_user",
                            s->job_user, "advertise_addr", s->advertise_addr, "probe_port",
                            probe);
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
