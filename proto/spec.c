/* spec.c - the job spec: YAML text (plus --set overrides) -> checked br_spec_t. The
 * text is first read into a tree of nodes with lines (spec_tree.c). */
#include "spec.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "manifest_check.h"
#include "spec_tree.h"
#include "util.h"

#define MAX_SET_PARTS 8        /* components of a --set path */
#define MAX_BYTES (1ULL << 60) /* largest vram / memory */
#define FIELD_LEN 96           /* room for a dotted field name */

/* ---- the schema ---------------------------------------------------------------- */

static const char *const top_keys[] = {
    "name",    "kind",     "command",    "workdir", "env",   "resources", "model", "checkpoint",
    "restart", "priority", "time_limit", "service", "after", "progress", "array",
    "preemptible", "preempt", "code", "files", "outputs", "data", "idle_stop", "setup",
    "setup_files", "image", NULL};
static const char *const files_keys[] = {"from", "to", NULL};
static const char *const after_keys[] = {"job", "on", NULL};
static const char *const after_names[] = {"ok", "failed", "ended", "started", NULL};
static const char *const resources_keys[] = {
    "nodes", "tasks_per_node", "gpus",   "vram",   "cpus", "memory",
    "arch",  "gpu_model",      "labels", "spread", "nodelist", "network", NULL};
static const char *const model_keys[] = {"params", "mode", "dtype", NULL};
static const char *const checkpoint_keys[] = {"dir",      "pattern", "complete_file",
                                               "replicas", "keep",    NULL};
static const char *const restart_keys[] = {"max", "on", NULL};
static const char *const progress_keys[] = {"timeout", NULL};
static const char *const preempt_keys[] = {"signal", "grace", NULL};
static const char *const service_keys[] = {"replicas", "port",     "health",       "model",
                                           "aliases",  "adapters", "max_inflight", "public",
                                           "autoscale", NULL};
static const char *const autoscale_keys[] = {"min",        "max",       "target_inflight",
                                             "up_after",   "down_after", "cold_start_timeout",
                                             NULL};
static const char *const health_keys[] = {"http", "tcp", "interval", "grace", NULL};
static const char *const free_keys[] = {NULL}; /* any key (env, labels) */

static const struct {
    const char *path;
    const char *const *keys;
} sections[] = {
    {"", top_keys},
    {"resources", resources_keys},
    {"model", model_keys},
    {"checkpoint", checkpoint_keys},
    {"restart", restart_keys},
    {"progress", progress_keys},
    {"preempt", preempt_keys},
    {"service", service_keys},
    {"service.health", health_keys},
    {"service.autoscale", autoscale_keys},
    {"env", free_keys},
    {"resources.labels", free_keys},
};

static const char *const *section_keys(const char *path)
{
    for (size_t i = 0; i < sizeof(sections) / sizeof(sections[0]); i++)
        if (strcmp(sections[i].path, path) == 0)
            return sections[i].keys;
    return NULL;
}

/* ---- --set overrides ----------------------------------------------------------- */

/* Split path "a.b.c" (modified) into parts checked against the schema; shown is
 * the path as given, for errors. */
static int split_set_path(char *path, const char *shown, char **parts, int *nparts,
                          br_err_t *err)
{
    char parent[FIELD_LEN] = "", b[SPEC_SHOW_LEN], k[SPEC_SHOW_LEN], pb[SPEC_SHOW_LEN];
    int n = 0;
    for (char *p = path, *dot; p; p = dot ? dot + 1 : NULL) {
        dot = strchr(p, '.');
        if (dot)
            *dot = '\0';
        const char *const *keys = section_keys(parent);
        if (!*p)
            return br_errf(err, EINVAL, "--set %s: empty key", spec_show(shown, b));
        if (!keys || n == MAX_SET_PARTS ||
            (keys != free_keys && spec_in_list(p, keys) < 0))
            return br_errf(err, EINVAL, "--set %s: unknown key '%s'%s%s",
                           spec_show(shown, b), spec_show(p, k),
                           parent[0] ? " in " : "", spec_show(parent, pb));
        size_t used = strlen(parent);
        snprintf(parent + used, sizeof(parent) - used, "%s%s", used ? "." : "", p);
        parts[n++] = p;
    }
    *nparts = n;
    return 0;
}

/* The mapping under key in map, created (or put in place of a null) when missing. */
static node_t *child_map(node_t *map, const char *key, const char *shown, br_err_t *err)
{
    char b[SPEC_SHOW_LEN], k[SPEC_SHOW_LEN];
    node_t *n = spec_find(map, key);
    if (n && n->type == N_MAP)
        return n;
    if (n && !spec_is_null(n))
        return br_errp(err, EINVAL, "--set %s: '%s' is not a mapping",
                       spec_show(shown, b), spec_show(key, k));
    if (n) { /* a null value: a mapping takes its place */
        free(n->text);
        n->text = NULL;
        n->type = N_MAP;
        n->plain = n->line = n->key_line = 0;
        return n;
    }
    node_t *m = spec_node_new(N_MAP, 0);
    if (!m || !(m->key = strdup(key)) || spec_node_push(map, m) < 0) {
        if (m && !m->key) /* (node_push frees m itself when it fails) */
            spec_node_free(m);
        return br_errp(err, ENOMEM, "spec: out of memory");
    }
    return m;
}

/* Put val under key in map, replacing what was there. Takes val. */
static int put_value(node_t *map, const char *key, node_t *val, br_err_t *err)
{
    val->key = strdup(key);
    if (!val->key) {
        spec_node_free(val);
        return spec_oom(err);
    }
    for (size_t i = 0; i < map->n; i++) {
        if (strcmp(map->kids[i]->key, key) == 0) {
            spec_node_free(map->kids[i]);
            map->kids[i] = val;
            return 0;
        }
    }
    return spec_node_push(map, val) < 0 ? spec_oom(err) : 0;
}

/* Parse the value of a --set: a YAML scalar or flow collection; empty is null. */
static int set_value(const char *path, const char *text, node_t **out, br_err_t *err)
{
    size_t len = strlen(text);
    char b[SPEC_SHOW_LEN];
    if (len > BR_SPEC_MAX_BYTES)
        return br_errf(err, EINVAL, "--set %s: value too long", spec_show(path, b));
    if (spec_parse_text(text, len, path, out, err) < 0)
        return -1;
    if (!*out) { /* "key=": null */
        if (!(*out = spec_node_new(N_SCALAR, 0)) || !((*out)->text = strdup("")))
            return spec_oom(err);
        (*out)->plain = 1;
    }
    spec_mark_set(*out);
    return 0;
}

static int apply_set(node_t *root, const char *set, br_err_t *err)
{
    char b[SPEC_SHOW_LEN], *parts[MAX_SET_PARTS];
    const char *eq = strchr(set, '=');
    if (!eq)
        return br_errf(err, EINVAL, "--set %s: expected key=value", spec_show(set, b));
    char *shown = strndup(set, (size_t)(eq - set)), *path = strdup(shown ? shown : "");
    node_t *val = NULL, *map = root;
    int n = 0, rc = shown && path ? 0 : spec_oom(err);
    if (rc == 0)
        rc = split_set_path(path, shown, parts, &n, err);
    if (rc == 0)
        rc = set_value(shown, eq + 1, &val, err);
    for (int i = 0; rc == 0 && i < n - 1; i++)
        if (!(map = child_map(map, parts[i], shown, err)))
            rc = -1;
    if (rc == 0) {
        rc = put_value(map, parts[n - 1], val, err);
        val = NULL;
    }
    spec_node_free(val);
    free(path);
    free(shown);
    return rc;
}

/* ---- tree -> br_spec_t: typed getters ------------------------------------------ */

typedef struct {
    const node_t *map; /* NULL when the section is absent */
    const char *name;  /* dotted path of the section, "" at the top level */
    int line;          /* line of the section's key, SPEC_NO_LINE at the top */
    br_err_t *err;
} sect_t;

static const char *field(const sect_t *s, const char *key, char *buf)
{
    if (!s->name[0])
        return key;
    snprintf(buf, FIELD_LEN, "%s.%s", s->name, key);
    return buf;
}

/* The value of key, NULL when absent or null. */
static const node_t *get(const sect_t *s, const char *key)
{
    const node_t *n = spec_find(s->map, key);
    return n && !spec_is_null(n) ? n : NULL;
}

/* Every key of the section must be in allowed. */
static int check_keys(const sect_t *s, const char *const *allowed)
{
    char b[SPEC_SHOW_LEN];
    for (size_t i = 0; s->map && i < s->map->n; i++) {
        const node_t *k = s->map->kids[i];
        if (spec_in_list(k->key, allowed) >= 0)
            continue;
        if (s->name[0])
            return spec_fail_at(s->err, k->key_line, "unknown key '%s' in %s",
                                spec_show(k->key, b), s->name);
        return spec_fail_at(s->err, k->key_line, "unknown key '%s'",
                            spec_show(k->key, b));
    }
    return 0;
}

/* The mapping under key as a section (map NULL when absent); 1 when present. */
static int get_section(const sect_t *s, const char *key, const char *name, sect_t *out)
{
    const node_t *n = get(s, key);
    char f[FIELD_LEN];
    *out = (sect_t){.map = n, .name = name, .line = SPEC_NO_LINE, .err = s->err};
    if (!n)
        return 0;
    out->line = n->key_line;
    if (n->type != N_MAP)
        return spec_fail_at(s->err, n->line, "%s: expected a mapping, got %s",
                            field(s, key, f), spec_type_name(n));
    return 1;
}

/* The scalar under key: 0 when absent, 1 with *out set, -1 when not a scalar. */
static int get_scalar(const sect_t *s, const char *key, const char *what,
                      const node_t **out)
{
    const node_t *n = get(s, key);
    char f[FIELD_LEN];
    *out = n;
    if (!n)
        return 0;
    if (n->type != N_SCALAR)
        return spec_fail_at(s->err, n->line, "%s: expected %s, got %s",
                            field(s, key, f), what, spec_type_name(n));
    return 1;
}

static int get_str(const sect_t *s, const char *key, char **out)
{
    const node_t *n;
    int rc = get_scalar(s, key, "a string", &n);
    if (rc <= 0)
        return rc;
    free(*out);
    *out = strdup(n->text);
    return *out ? 1 : spec_oom(s->err);
}

static int parse_int(const char *t, long long *v)
{
    const char *p = t + (*t == '-');
    size_t len = strlen(p);
    if (len == 0 || len > 18 || strspn(p, "0123456789") != len)
        return -1;
    *v = strtoll(t, NULL, 10);
    return 0;
}

static int int_value(const sect_t *s, const char *key, const node_t *n, long lo,
                     long hi, const char *what, int *out)
{
    char f[FIELD_LEN], b[SPEC_SHOW_LEN];
    long long v;
    const char *t = n->text + (n->text[0] == '-');
    if (parse_int(n->text, &v) < 0 && *t && strspn(t, "0123456789") == strlen(t))
        return spec_fail_at(s->err, n->line, "%s: %s is out of range (%ld..%ld)",
                            field(s, key, f), spec_show(n->text, b), lo, hi);
    if (parse_int(n->text, &v) < 0)
        return spec_fail_at(s->err, n->line, "%s: expected %s, got '%s'",
                            field(s, key, f), what, spec_show(n->text, b));
    if (v < lo || v > hi)
        return spec_fail_at(s->err, n->line, "%s: %lld is out of range (%ld..%ld)",
                            field(s, key, f), v, lo, hi);
    *out = (int)v;
    return 1;
}

static int get_int(const sect_t *s, const char *key, long lo, long hi, int *out)
{
    const char *what = lo > 0    ? "a positive integer"
                       : lo == 0 ? "a non-negative integer"
                                 : "an integer";
    const node_t *n;
    int rc = get_scalar(s, key, what, &n);
    return rc <= 0 ? rc : int_value(s, key, n, lo, hi, what, out);
}

static int get_size(const sect_t *s, const char *key, uint64_t *out)
{
    const node_t *n;
    char f[FIELD_LEN], b[SPEC_SHOW_LEN];
    int rc = get_scalar(s, key, "a size", &n);
    if (rc <= 0)
        return rc;
    br_err_t perr = {0};
    if (br_parse_size(n->text, out, &perr) < 0 && strstr(perr.text, "too large"))
        *out = MAX_BYTES + 1;
    else if (perr.errnum && strstr(perr.text, "less than a byte")) /* 0.5: no size */
        return spec_fail_at(s->err, n->line,
                            "%s: size '%s' is less than a byte (give whole bytes or a "
                            "unit, e.g. 512MiB)",
                            field(s, key, f), spec_show(n->text, b));
    else if (perr.errnum)
        return spec_fail_at(s->err, n->line,
                            "%s: bad size '%s' (use e.g. 512MiB, 24GiB)",
                            field(s, key, f), spec_show(n->text, b));
    if (*out > MAX_BYTES)
        return spec_fail_at(s->err, n->line, "%s: size '%s' is too large (at most 1EiB)",
                            field(s, key, f), spec_show(n->text, b));
    return 1;
}

static int get_duration(const sect_t *s, const char *key, int64_t *out)
{
    const node_t *n;
    char f[FIELD_LEN], b[SPEC_SHOW_LEN];
    int rc = get_scalar(s, key, "a duration", &n);
    if (rc <= 0)
        return rc;
    br_err_t perr = {0};
    if (br_parse_duration(n->text, out, &perr) < 0 && strstr(perr.text, "too long"))
        return spec_fail_at(s->err, n->line,
                            "%s: duration '%s' is too long (at most %.0f days)",
                            field(s, key, f), spec_show(n->text, b),
                            BR_DURATION_MAX_MS / 86400000.0);
    if (perr.errnum)
        return spec_fail_at(s->err, n->line,
                            "%s: bad duration '%s' (use e.g. 500ms, 5s, 10m, 12h)",
                            field(s, key, f), spec_show(n->text, b));
    return 1;
}

/* A duration where 0 means "none": a value that is not 0 but rounds to 0 ms is
 * refused rather than read as none. */
static int get_duration_or_none(const sect_t *s, const char *key, int64_t *out)
{
    char f[FIELD_LEN], b[SPEC_SHOW_LEN];
    int rc = get_duration(s, key, out);
    const node_t *n = rc > 0 ? get(s, key) : NULL;
    /* the number (before its exponent or unit) has a digit other than 0 */
    if (n && *out == 0 && strcspn(n->text, "123456789") < strcspn(n->text, "eEmshd"))
        return spec_fail_at(s->err, n->line,
                            "%s: '%s' rounds to 0, which means no limit (the least is "
                            "1ms; leave it out for none)",
                            field(s, key, f), spec_show(n->text, b));
    return rc;
}

/* One of choices (a NULL-terminated list; spelled out in words for errors). */
static int get_enum(const sect_t *s, const char *key, const char *const *choices,
                    const char *words, int *out)
{
    const node_t *n;
    char f[FIELD_LEN], b[SPEC_SHOW_LEN];
    int rc = get_scalar(s, key, words, &n);
    if (rc <= 0)
        return rc;
    int i = spec_in_list(n->text, choices);
    if (i < 0)
        return spec_fail_at(s->err, n->line, "%s: expected %s, got '%s'",
                            field(s, key, f), words, spec_show(n->text, b));
    *out = i;
    return 1;
}

static int get_bool(const sect_t *s, const char *key, int *out)
{
    static const char *const bools[] = {"false", "False", "FALSE", "true",
                                        "True",  "TRUE",  NULL};
    int i, rc = get_enum(s, key, bools, "true or false", &i);
    if (rc > 0)
        *out = i >= 3;
    return rc;
}

static int list_entry(const sect_t *s, const char *key, const node_t *n, char **out)
{
    char f[FIELD_LEN];
    if (n->type != N_SCALAR || spec_is_null(n) || !n->text[0])
        return spec_fail_at(s->err, n->line, "%s: entries must be non-empty strings",
                            field(s, key, f));
    *out = strdup(n->text);
    return *out ? 0 : spec_oom(s->err);
}

/* A string or a list of strings (at most BR_SPEC_MAX_LIST). */
static int get_list(const sect_t *s, const char *key, char **out, int *count)
{
    const node_t *n = get(s, key);
    char f[FIELD_LEN];
    if (!n)
        return 0;
    if (n->type == N_SCALAR)
        return list_entry(s, key, n, &out[(*count)++]) < 0 ? -1 : 1;
    if (n->type != N_SEQ)
        return spec_fail_at(s->err, n->line, "%s: expected a string or a list, got %s",
                            field(s, key, f), spec_type_name(n));
    if (n->n > BR_SPEC_MAX_LIST)
        return spec_fail_at(s->err, n->line, "%s: at most %d entries", field(s, key, f),
                            BR_SPEC_MAX_LIST);
    for (size_t i = 0; i < n->n; i++)
        if (list_entry(s, key, n->kids[i], &out[(*count)++]) < 0)
            return -1;
    return 1;
}

static int valid_env_name(const char *k)
{
    if (!((*k >= 'A' && *k <= 'Z') || (*k >= 'a' && *k <= 'z') || *k == '_'))
        return 0;
    size_t len = strlen(k);
    return strspn(k,
                  "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_") ==
           len;
}

static int map_entry(const sect_t *s, const char *key, const node_t *kid, int env,
                     json_t *obj)
{
    char f[FIELD_LEN], b[SPEC_SHOW_LEN];
    if (env && !valid_env_name(kid->key))
        return spec_fail_at(s->err, kid->key_line,
                            "%s: '%s' is not a valid variable name", field(s, key, f),
                            spec_show(kid->key, b));
    if (!kid->key[0])
        return spec_fail_at(s->err, kid->key_line, "%s: keys must not be empty",
                            field(s, key, f));
    if (kid->type != N_SCALAR)
        return spec_fail_at(s->err, kid->line, "%s.%s: expected a string, got %s",
                            field(s, key, f), spec_show(kid->key, b),
                            spec_type_name(kid));
    if (env && strlen(kid->key) + 1 + strlen(kid->text) > BR_SPEC_MAX_COMMAND)
        return spec_fail_at(s->err, kid->line,
                            "%s.%s: longer than the kernel's limit for one variable (%d "
                            "bytes with its name)",
                            field(s, key, f), spec_show(kid->key, b), BR_SPEC_MAX_COMMAND);
    if (json_object_set_new(obj, kid->key, json_string(kid->text)) < 0)
        return spec_fail_at(s->err, kid->line, "%s.%s: not valid UTF-8",
                            field(s, key, f), spec_show(kid->key, b));
    return 0;
}

/* A mapping of string -> string into *out (always an object, maybe empty). */
static int get_strmap(const sect_t *s, const char *key, int env, json_t **out)
{
    const node_t *n = get(s, key);
    char f[FIELD_LEN];
    if (!*out && !(*out = json_object()))
        return spec_oom(s->err);
    if (!n)
        return 0;
    if (n->type != N_MAP)
        return spec_fail_at(s->err, n->line, "%s: expected a mapping, got %s",
                            field(s, key, f), spec_type_name(n));
    for (size_t i = 0; i < n->n; i++)
        if (map_entry(s, key, n->kids[i], env, *out) < 0)
            return -1;
    return 1;
}

static int value_line(const sect_t *s, const char *key)
{
    const node_t *n = spec_find(s->map, key);
    return n ? n->line : SPEC_NO_LINE;
}

/* ---- tree -> br_spec_t: the sections ------------------------------------------- */

static int check_name(const sect_t *top, br_spec_t *spec)
{
    char b[SPEC_SHOW_LEN];
    int rc = get_str(top, "name", &spec->name);
    if (rc < 0)
        return -1;
    if (rc == 0)
        return spec_fail_at(top->err, SPEC_NO_LINE, "name: required");
    if (!br_valid_name(spec->name))
        return spec_fail_at(
            top->err, value_line(top, "name"),
            "name: '%s' must be lowercase letters, digits and '-' (1-63 chars)",
            spec_show(spec->name, b));
    return 0;
}

static int check_command(const sect_t *top, br_spec_t *spec)
{
    int rc = get_str(top, "command", &spec->command);
    if (rc < 0)
        return -1;
    if (rc == 0)
        return spec_fail_at(top->err, SPEC_NO_LINE, "command: required");
    if (strspn(spec->command, " \t\r\n") == strlen(spec->command))
        return spec_fail_at(top->err, value_line(top, "command"),
                            "command: must not be empty");
    if (strlen(spec->command) > BR_SPEC_MAX_COMMAND) /* one argument of sh -c */
        return spec_fail_at(top->err, value_line(top, "command"),
                            "command: %zu bytes, longer than the kernel's limit for one "
                            "argument (%d bytes); put it in a script",
                            strlen(spec->command), BR_SPEC_MAX_COMMAND);
    return 0;
}

/* setup: COMMAND (run before command once per node and cached, docs/files.md) and
 * setup_files: [PATH...] (files of the code dir whose contents make part of the
 * cache's key). Checked after command, code and files. */
static int check_setup(const sect_t *top, br_spec_t *spec)
{
    char b[SPEC_SHOW_LEN];
    int rc = get_str(top, "setup", &spec->setup);
    if (rc < 0)
        return -1;
    if (rc > 0 && strspn(spec->setup, " \t\r\n") == strlen(spec->setup))
        return spec_fail_at(top->err, value_line(top, "setup"), "setup: must not be empty "
                                                                "(leave it out for none)");
    if (rc > 0 && strlen(spec->setup) > BR_SPEC_MAX_SETUP)
        return spec_fail_at(top->err, value_line(top, "setup"),
                            "setup: %zu bytes, more than %d; put it in a script of the code "
                            "dir",
                            strlen(spec->setup), BR_SPEC_MAX_SETUP);
    if (rc > 0 && strlen(spec->command) > BR_SPEC_MAX_COMMAND - BR_SPEC_SETUP_ROOM)
        return spec_fail_at(top->err, value_line(top, "command"),
                            "command: %zu bytes; with a setup, at most %d; put it in a "
                            "script",
                            strlen(spec->command), BR_SPEC_MAX_COMMAND - BR_SPEC_SETUP_ROOM);
    const node_t *n = get(top, "setup_files");
    if (!n)
        return 0;
    if (!spec->setup)
        return spec_fail_at(top->err, n->line, "setup_files: only with setup");
    if (!spec->code && !spec->files)
        return spec_fail_at(top->err, n->line,
                            "setup_files: name files of the code dir, and there is none "
                            "(give code: or files:)");
    if (n->type != N_SEQ)
        return spec_fail_at(top->err, n->line,
                            "setup_files: expected a list like [requirements.txt], got %s",
                            spec_type_name(n));
    if (n->n > BR_SPEC_MAX_SETUP_FILES)
        return spec_fail_at(top->err, n->line, "setup_files: at most %d files, got %zu",
                            BR_SPEC_MAX_SETUP_FILES, n->n);
    if (!(spec->setup_files = json_array()))
        return spec_oom(top->err);
    for (size_t i = 0; i < n->n; i++) {
        const node_t *e = n->kids[i];
        if (e->type != N_SCALAR || !e->text[0] || strlen(e->text) > BR_SPEC_MAX_PATH ||
            !br_manifest_path_ok(e->text))
            return spec_fail_at(top->err, e->line,
                                "setup_files[%zu]: expected a path inside the code dir "
                                "(relative, without '..', '.' or empty parts), got %s",
                                i, e->type == N_SCALAR ? spec_show(e->text, b)
                                                       : spec_type_name(e));
        if (json_array_append_new(spec->setup_files, json_string(e->text)) < 0)
            return spec_oom(top->err);
    }
    return 0;
}

int br_spec_image_ok(const char *name)
{
    size_t n = name ? strlen(name) : 0;
    return n > 0 && n <= BR_SPEC_IMAGE_MAX && name[0] != '-' &&
           strspn(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._/:@-") ==
               n;
}

/* image: NAME (the job runs in an OCI container, docs/containers.md). */
static int check_image(const sect_t *top, br_spec_t *spec)
{
    char b[SPEC_SHOW_LEN];
    int rc = get_str(top, "image", &spec->image);
    if (rc <= 0)
        return rc;
    if (!br_spec_image_ok(spec->image))
        return spec_fail_at(top->err, value_line(top, "image"),
                            "image: '%s' is not an image name (letters, digits and . _ / : "
                            "@ - only, at most %d, not starting with '-')",
                            spec_show(spec->image, b), BR_SPEC_IMAGE_MAX);
    return 0;
}

static int check_workdir(const sect_t *top, br_spec_t *spec)
{
    char b[SPEC_SHOW_LEN];
    int rc = get_str(top, "workdir", &spec->workdir);
    if (rc > 0 && spec->workdir[0] != '/')
        return spec_fail_at(top->err, value_line(top, "workdir"),
                            "workdir: must be an absolute path, got '%s'",
                            spec_show(spec->workdir, b));
    return rc < 0 ? -1 : 0;
}

/* code: DIR, a local directory (relative to the spec file) that bramble submit
 * packs and sends; the node unpacks it as the job's working directory. */
static int check_code(const sect_t *top, br_spec_t *spec)
{
    int rc = get_str(top, "code", &spec->code);
    if (rc > 0 && (!spec->code[0] || strlen(spec->code) >= BR_SPEC_MAX_PATH))
        return spec_fail_at(top->err, value_line(top, "code"),
                            "code: %s", spec->code[0] ? "too long a path"
                                                      : "must name a directory");
    return rc < 0 ? -1 : 0;
}

/* files: [{from: LOCAL, to: RELATIVE}]: more local paths put into the code dir. */
static int check_files(const sect_t *top, br_spec_t *spec)
{
    const node_t *n = get(top, "files");
    char b[SPEC_SHOW_LEN];
    if (!n)
        return 0;
    if (n->type != N_SEQ)
        return spec_fail_at(top->err, n->line,
                            "files: expected a list like [{from: ../data, to: data}], got %s",
                            spec_type_name(n));
    if (n->n > BR_SPEC_MAX_FILES)
        return spec_fail_at(top->err, n->line, "files: at most %d entries, got %zu",
                            BR_SPEC_MAX_FILES, n->n);
    if (!(spec->files = json_array()))
        return spec_oom(top->err);
    for (size_t i = 0; i < n->n; i++) {
        const node_t *e = n->kids[i];
        char name[32];
        snprintf(name, sizeof(name), "files[%zu]", i);
        if (e->type != N_MAP)
            return spec_fail_at(top->err, e->line,
                                "%s: expected a mapping like {from: ../data, to: data}, got %s",
                                name, spec_type_name(e));
        sect_t f = {.map = e, .name = name, .line = e->line, .err = top->err};
        char *from = NULL, *to = NULL;
        int rc = check_keys(&f, files_keys);
        if (rc == 0 && get_str(&f, "from", &from) < 0)
            rc = -1;
        if (rc == 0 && get_str(&f, "to", &to) < 0)
            rc = -1;
        if (rc == 0 && (!from || !*from || strlen(from) >= BR_SPEC_MAX_PATH))
            rc = spec_fail_at(top->err, e->line, "%s.from: %s", name,
                              from && *from ? "too long a path" : "required: a local path");
        else if (rc == 0 && (!to || !br_manifest_path_ok(to)))
            rc = spec_fail_at(top->err, e->line,
                              "%s.to: '%s' is not a path inside the code dir (relative, no "
                              "'..', '.' or empty part)",
                              name, spec_show(to ? to : "", b));
        if (rc == 0 && json_array_append_new(spec->files,
                                             json_pack("{s:s, s:s}", "from", from, "to", to)) < 0)
            rc = spec_oom(top->err);
        free(from);
        free(to);
        if (rc < 0)
            return -1;
    }
    return 0;
}

/* outputs: [PATTERN, ...]: files of the attempt's working dir kept at its end,
 * matched as .gitignore lines match (`results/`, `*.json`, `!tmp.json`). */
static int check_outputs(const sect_t *top, br_spec_t *spec)
{
    const node_t *n = get(top, "outputs");
    char b[SPEC_SHOW_LEN];
    if (!n)
        return 0;
    if (n->type != N_SEQ)
        return spec_fail_at(top->err, n->line,
                            "outputs: expected a list like [results/, \"*.json\"], got %s",
                            spec_type_name(n));
    if (n->n > BR_SPEC_MAX_OUTPUTS)
        return spec_fail_at(top->err, n->line, "outputs: at most %d patterns, got %zu",
                            BR_SPEC_MAX_OUTPUTS, n->n);
    if (!(spec->outputs = json_array()))
        return spec_oom(top->err);
    for (size_t i = 0; i < n->n; i++) {
        const node_t *e = n->kids[i];
        if (e->type != N_SCALAR || !e->text[0] || strlen(e->text) > 256 ||
            strchr(e->text, '\n'))
            return spec_fail_at(top->err, e->line,
                                "outputs[%zu]: expected a pattern (a path or a glob, at most "
                                "256 bytes), got %s",
                                i, e->type == N_SCALAR ? spec_show(e->text, b)
                                                       : spec_type_name(e));
        if (json_array_append_new(spec->outputs, json_string(e->text)) < 0)
            return spec_oom(top->err);
    }
    return 0;
}

int br_spec_mount_ok(const char *path, const char **why)
{
    static const char *const system[] = {"/bin", "/boot", "/dev", "/etc", "/lib",
                                         "/proc", "/run", "/sbin", "/sys", "/usr",
                                         "/var/lib", "/var/run", NULL};
    size_t n = path ? strlen(path) : 0;
    *why = NULL;
    if (!n || path[0] != '/')
        *why = "not an absolute path";
    else if (n > BR_SPEC_MAX_MOUNT)
        *why = "too long a path";
    else if (n == 1)
        *why = "the root directory";
    else if (path[n - 1] == '/' || !br_manifest_path_ok(path + 1))
        *why = "not a plain path (a '.', '..' or empty part, or a trailing '/')";
    for (int i = 0; !*why && system[i]; i++) {
        size_t k = strlen(system[i]);
        /* /lib covers /lib32, /lib64 and /libx32 too */
        if (strncmp(path, system[i], k) == 0 &&
            (!path[k] || path[k] == '/' || strcmp(system[i], "/lib") == 0))
            *why = "inside a directory of the system's own";
    }
    return *why == NULL;
}

/* [a-z0-9][a-z0-9._-]*: a data set's name, its owner's or a tag (the coordinator
 * checks the rest: lengths, and that it exists). */
static int data_word(const char *s, size_t n)
{
    if (!n || !((s[0] >= 'a' && s[0] <= 'z') || (s[0] >= '0' && s[0] <= '9')))
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '.' ||
              s[i] == '_' || s[i] == '-'))
            return 0;
    return 1;
}

/* data: {[OWNER/]NAME[:TAG]: /mount/path}: named data sets, read-only in the job. */
static int check_data(const sect_t *top, br_spec_t *spec)
{
    const node_t *n = get(top, "data");
    char b[SPEC_SHOW_LEN];
    if (!n)
        return 0;
    if (n->type != N_MAP)
        return spec_fail_at(top->err, n->line,
                            "data: expected a mapping like {llama-8b: /models/llama}, got %s",
                            spec_type_name(n));
    if (n->n > BR_SPEC_MAX_DATA)
        return spec_fail_at(top->err, n->line, "data: at most %d data sets, got %zu",
                            BR_SPEC_MAX_DATA, n->n);
    if (!(spec->data = json_object()))
        return spec_oom(top->err);
    for (size_t i = 0; i < n->n; i++) {
        const node_t *e = n->kids[i];
        const char *key = e->key, *slash = strchr(key, '/');
        const char *name = slash ? slash + 1 : key, *colon = strchr(name, ':');
        size_t nlen = colon ? (size_t)(colon - name) : strlen(name);
        if ((slash && !data_word(key, (size_t)(slash - key))) || !data_word(name, nlen) ||
            (colon && !data_word(colon + 1, strlen(colon + 1))))
            return spec_fail_at(top->err, e->key_line,
                                "data: '%s' is not a data set: [OWNER/]NAME[:TAG], each of "
                                "lowercase letters, digits, '.', '_' and '-'",
                                spec_show(key, b));
        const char *why;
        if (e->type != N_SCALAR)
            return spec_fail_at(top->err, e->line,
                                "data.%s: expected the path to mount it at, got %s",
                                spec_show(key, b), spec_type_name(e));
        if (!br_spec_mount_ok(e->text, &why))
            return spec_fail_at(top->err, e->line, "data.%s: '%s' is %s", spec_show(key, b),
                                e->text, why);
        const char *k2;
        json_t *other;
        json_object_foreach(spec->data, k2, other) {
            const char *p = json_string_value(other), *q = e->text;
            size_t lp = strlen(p), lq = strlen(q);
            size_t m = lp < lq ? lp : lq;
            if (strncmp(p, q, m) == 0 && (lp == lq || (lp < lq ? q : p)[m] == '/'))
                return spec_fail_at(top->err, e->line, "data.%s: %s and %s's %s overlap",
                                    spec_show(key, b), q, k2, p);
        }
        if (json_object_get(spec->data, key))
            return spec_fail_at(top->err, e->key_line, "data: %s is named twice",
                                spec_show(key, b));
        if (json_object_set_new(spec->data, key, json_string(e->text)) < 0)
            return spec_oom(top->err);
    }
    return 0;
}

static int check_tasks(const sect_t *r, br_spec_t *spec)
{
    const char *what = "a positive integer or 'gpus'";
    const node_t *n;
    int rc = get_scalar(r, "tasks_per_node", what, &n);
    if (rc <= 0)
        return rc;
    int gpus = spec->resources.gpus;
    if (strcmp(n->text, "gpus") != 0) {
        int per;
        rc = int_value(r, "tasks_per_node", n, 1, BR_MAX_TASKS_PER_NODE, what, &per);
        if (rc < 0)
            return -1;
        if (gpus > 0 && gpus % per != 0) /* each task gets an equal share of GPUs */
            return spec_fail_at(r->err, n->line,
                                "resources.tasks_per_node: %d tasks cannot share %d GPUs "
                                "equally",
                                per, gpus);
        spec->resources.tasks_per_node = per;
        return 0;
    }
    spec->resources.tasks_per_node = BR_TASKS_GPUS;
    if (gpus < 1 || gpus > BR_MAX_TASKS_PER_NODE)
        return spec_fail_at(r->err, n->line,
                            "resources.tasks_per_node: gpus needs resources.gpus from 1 to "
                            "%d",
                            BR_MAX_TASKS_PER_NODE);
    return 0;
}

static int check_resources(const sect_t *top, br_spec_t *spec)
{
    static const char *const spreads[] = {"site", "any", NULL};
    static const char *const networks[] = {"auto", "direct", "overlay", NULL};
    sect_t r;
    typeof(spec->resources) *res = &spec->resources;
    if (get_section(top, "resources", "resources", &r) < 0 ||
        check_keys(&r, resources_keys) < 0 ||
        get_int(&r, "nodes", 1, 1024, &res->nodes) < 0 ||
        get_int(&r, "gpus", 0, 1024, &res->gpus) < 0 || check_tasks(&r, spec) < 0 ||
        get_size(&r, "vram", &res->vram) < 0 ||
        get_int(&r, "cpus", 0, 100000, &res->cpus) < 0 ||
        get_size(&r, "memory", &res->memory) < 0 ||
        get_list(&r, "arch", res->arch, &res->n_arch) < 0 ||
        get_list(&r, "gpu_model", res->gpu_model, &res->n_gpu_model) < 0 ||
        get_strmap(&r, "labels", 0, &res->labels) < 0 ||
        get_enum(&r, "spread", spreads, "site or any", &res->spread_any) < 0 ||
        get_enum(&r, "network", networks, "auto, direct or overlay", &res->network) < 0 ||
        get_list(&r, "nodelist", res->nodelist, &res->n_nodelist) < 0)
        return -1;
    const node_t *nl = get(&r, "nodelist");
    for (int i = 0; i < res->n_nodelist; i++)
        if (!br_valid_name(res->nodelist[i]))
            return spec_fail_at(r.err, nl->line,
                                "resources.nodelist: '%s' is not a node name (lowercase "
                                "letters, digits and '-')",
                                res->nodelist[i]);
    if (res->n_nodelist && res->nodes > res->n_nodelist)
        return spec_fail_at(r.err, nl->line,
                            "resources.nodelist: names %d node%s, fewer than "
                            "resources.nodes (%d)",
                            res->n_nodelist, res->n_nodelist == 1 ? "" : "s", res->nodes);
    return 0;
}

static int check_model(const sect_t *top, br_spec_t *spec)
{
    static const char *const modes[] = {"inference", "lora", "qlora", "full", NULL};
    static const char *const dtypes[] = {"fp32", "fp16", "bf16", "int8", "int4", NULL};
    sect_t m, r;
    int mode = 0, dtype = 2;
    char b[SPEC_SHOW_LEN];
    int rc = get_section(top, "model", "model", &m);
    if (rc <= 0)
        return rc;
    spec->model.given = 1;
    get_section(top, "resources", "resources", &r);
    if (get(&r, "vram"))
        return spec_fail_at(top->err, m.line,
                            "model: give either model or resources.vram, not both");
    const node_t *p;
    if (check_keys(&m, model_keys) < 0 ||
        (rc = get_scalar(&m, "params", "a count", &p)) < 0)
        return -1;
    if (rc == 0)
        return spec_fail_at(top->err, m.line, "model.params: required");
    if (br_parse_count(p->text, &spec->model.params, NULL) < 0 ||
        !(spec->model.params > 0))
        return spec_fail_at(top->err, p->line,
                            "model.params: bad count '%s' (use e.g. 8B, 70B)",
                            spec_show(p->text, b));
    if (get_enum(&m, "mode", modes, "inference, lora, qlora or full", &mode) < 0 ||
        get_enum(&m, "dtype", dtypes, "fp32, fp16, bf16, int8 or int4", &dtype) < 0)
        return -1;
    free(spec->model.mode);
    free(spec->model.dtype);
    spec->model.mode = strdup(modes[mode]);
    spec->model.dtype = strdup(dtypes[dtype]);
    return spec->model.mode && spec->model.dtype ? 0 : spec_oom(top->err);
}

static int check_complete_file(const sect_t *c, const char *f)
{
    char b[SPEC_SHOW_LEN];
    if (!f[0] || strchr(f, '/') || strcmp(f, ".") == 0 || strcmp(f, "..") == 0)
        return spec_fail_at(
            c->err, value_line(c, "complete_file"),
            "checkpoint.complete_file: must be a plain file name, got '%s'",
            spec_show(f, b));
    return 0;
}

static int check_checkpoint(const sect_t *top, br_spec_t *spec)
{
    sect_t c;
    char b[SPEC_SHOW_LEN];
    int rc = get_section(top, "checkpoint", "checkpoint", &c);
    if (rc <= 0)
        return rc;
    if (check_keys(&c, checkpoint_keys) < 0 ||
        (rc = get_str(&c, "dir", &spec->checkpoint.dir)) < 0)
        return -1;
    if (rc == 0)
        return spec_fail_at(c.err, c.line, "checkpoint.dir: required");
    if (spec->checkpoint.dir[0] != '/')
        return spec_fail_at(c.err, value_line(&c, "dir"),
                            "checkpoint.dir: must be an absolute path, got '%s'",
                            spec_show(spec->checkpoint.dir, b));
    if ((rc = get_str(&c, "pattern", &spec->checkpoint.pattern)) < 0)
        return -1;
    if (rc == 0 && !(spec->checkpoint.pattern = strdup("*")))
        return spec_oom(c.err);
    if (!spec->checkpoint.pattern[0])
        return spec_fail_at(c.err, value_line(&c, "pattern"),
                            "checkpoint.pattern: must not be empty");
    if ((rc = get_str(&c, "complete_file", &spec->checkpoint.complete_file)) < 0)
        return -1;
    if (rc > 0 && check_complete_file(&c, spec->checkpoint.complete_file) < 0)
        return -1;
    if (get_int(&c, "replicas", 0, BR_SPEC_MAX_REPLICAS, &spec->checkpoint.replicas) < 0 ||
        get_int(&c, "keep", 1, 100, &spec->checkpoint.keep) < 0)
        return -1;
    return 0;
}

static int check_restart(const sect_t *top, br_spec_t *spec)
{
    static const char *const reasons[] = {"node_lost", "nonzero_exit", "hung", NULL};
    char *on[BR_SPEC_MAX_LIST] = {0}, b[SPEC_SHOW_LEN];
    int n = 0, rc;
    sect_t r;
    if (get_section(top, "restart", "restart", &r) < 0 ||
        check_keys(&r, restart_keys) < 0 ||
        get_int(&r, "max", 0, 1000, &spec->restart.max) < 0)
        return -1;
    rc = get_list(&r, "on", on, &n);
    if (rc > 0)
        spec->restart.on_node_lost = spec->restart.on_nonzero_exit =
            spec->restart.on_hung = 0;
    for (int i = 0; rc > 0 && i < n; i++) {
        int which = spec_in_list(on[i], reasons);
        if (which < 0)
            rc =
                spec_fail_at(r.err, value_line(&r, "on"),
                             "restart.on: expected node_lost, nonzero_exit or hung, got "
                             "'%s'",
                             spec_show(on[i], b));
        else if (which == 0)
            spec->restart.on_node_lost = 1;
        else if (which == 1)
            spec->restart.on_nonzero_exit = 1;
        else
            spec->restart.on_hung = 1;
    }
    for (int i = 0; i < n; i++)
        free(on[i]);
    return rc < 0 ? -1 : 0;
}

/* progress: {timeout: T}: hang detection (agent/hang.h). With it, restart.on
 * takes hung by default. */
static int check_progress(const sect_t *top, br_spec_t *spec)
{
    sect_t p;
    char t[32];
    int rc = get_section(top, "progress", "progress", &p);
    if (rc < 0)
        return -1;
    if (rc > 0) {
        if (check_keys(&p, progress_keys) < 0 ||
            (rc = get_duration(&p, "timeout", &spec->progress_timeout_ms)) < 0)
            return -1;
        if (rc == 0)
            return spec_fail_at(p.err, p.line, "progress.timeout: required");
        if (spec->progress_timeout_ms < BR_SPEC_PROGRESS_MIN_MS)
            return spec_fail_at(p.err, value_line(&p, "timeout"),
                                "progress.timeout: must be at least %s",
                                br_format_duration(BR_SPEC_PROGRESS_MIN_MS, t, sizeof(t)));
        if (spec->kind != BR_JOB_TRAIN)
            return spec_fail_at(p.err, p.line, "progress: only for kind: train (%s)",
                                spec->kind == BR_JOB_SERVICE ? "a service has health checks"
                                                             : "a dev environment waits for you");
    }
    if (spec->restart.on_hung < 0) /* restart.on not given */
        spec->restart.on_hung = spec->progress_timeout_ms > 0;
    return 0;
}

/* preemptible: bool (default: true when bramble watches the job's checkpoints) and
 * preempt: {signal: USR1, grace: 120s}: how a job asked to make room saves its work
 * first (docs/sharing.md). */
static int check_preempt(const sect_t *top, br_spec_t *spec)
{
    static const char *const names[] = {"HUP", "INT", "QUIT", "USR1", "USR2", "TERM", NULL};
    static const int numbers[] = {SIGHUP, SIGINT, SIGQUIT, SIGUSR1, SIGUSR2, SIGTERM};
    int v = -1, rc = get_bool(top, "preemptible", &v);
    if (rc < 0)
        return -1;
    spec->preemptible = rc > 0 ? v : spec->checkpoint.dir != NULL && spec->kind == BR_JOB_TRAIN;
    if (spec->preemptible && spec->kind != BR_JOB_TRAIN)
        return spec_fail_at(top->err, value_line(top, "preemptible"),
                            "preemptible: only for kind: train");
    sect_t p;
    if ((rc = get_section(top, "preempt", "preempt", &p)) <= 0)
        return rc;
    const node_t *n;
    if (check_keys(&p, preempt_keys) < 0 || (rc = get_scalar(&p, "signal", "a signal", &n)) < 0)
        return -1;
    if (rc > 0) {
        const char *t = n->text + (strncmp(n->text, "SIG", 3) == 0 ? 3 : 0);
        int i = spec_in_list(t, names);
        if (i < 0)
            return spec_fail_at(p.err, n->line, "preempt.signal: expected one of HUP, INT, "
                                                "QUIT, USR1, USR2, TERM, got '%.40s'",
                                n->text);
        spec->preempt_signal = numbers[i];
    }
    if ((rc = get_duration(&p, "grace", &spec->preempt_grace_ms)) < 0)
        return -1;
    if (rc > 0 && spec->preempt_grace_ms > BR_SPEC_PREEMPT_GRACE_MAX_MS)
        return spec_fail_at(p.err, value_line(&p, "grace"),
                            "preempt.grace: at most 1h (it holds what a waiting job needs)");
    return 0;
}

static int check_port(const sect_t *sv, br_spec_t *spec)
{
    const char *what = "'auto' or a port number";
    const node_t *n;
    int rc = get_scalar(sv, "port", what, &n);
    if (rc <= 0)
        return rc;
    if (strcmp(n->text, "auto") == 0) {
        spec->service.port = BR_PORT_AUTO;
        return 0;
    }
    return int_value(sv, "port", n, 1, 65535, what, &spec->service.port) < 0 ? -1 : 0;
}

static int check_health(const sect_t *sv, br_spec_t *spec)
{
    sect_t h;
    char b[SPEC_SHOW_LEN];
    int rc = get_section(sv, "health", "service.health", &h);
    if (rc <= 0)
        return rc;
    if (check_keys(&h, health_keys) < 0 ||
        get_str(&h, "http", &spec->service.health_http) < 0 ||
        get_bool(&h, "tcp", &spec->service.health_tcp) < 0 ||
        get_duration(&h, "interval", &spec->service.health_interval_ms) < 0 ||
        get_duration(&h, "grace", &spec->service.health_grace_ms) < 0)
        return -1;
    const char *http = spec->service.health_http;
    if (http && http[0] != '/')
        return spec_fail_at(
            h.err, value_line(&h, "http"),
            "service.health.http: must be a path starting with '/', got '%s'",
            spec_show(http, b));
    if (http && spec->service.health_tcp)
        return spec_fail_at(h.err, h.line,
                            "service.health: give either http or tcp, not both");
    if (!http && !spec->service.health_tcp)
        return spec_fail_at(h.err, h.line,
                            "service.health: give http: /path or tcp: true");
    if (spec->service.health_interval_ms <= 0)
        return spec_fail_at(h.err, value_line(&h, "interval"),
                            "service.health.interval: must be positive");
    return 0;
}

int br_spec_model_name_ok(const char *name)
{
    size_t len = name ? strlen(name) : 0;
    return len >= 1 && len <= BR_SPEC_MODEL_MAX &&
           strspn(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                        "0123456789._-/:@+") == len;
}

/* service.model, aliases and adapters: valid names, each once over the three. */
static int check_models(const sect_t *sv, br_spec_t *spec)
{
    char b[SPEC_SHOW_LEN];
    if (get_str(sv, "model", &spec->service.model) < 0 ||
        get_list(sv, "aliases", spec->service.aliases, &spec->service.n_aliases) < 0 ||
        get_list(sv, "adapters", spec->service.adapters, &spec->service.n_adapters) < 0)
        return -1;
    const char *names[1 + 2 * BR_SPEC_MAX_LIST], *keys[1 + 2 * BR_SPEC_MAX_LIST];
    int n = 0;
    if (spec->service.model)
        keys[n] = "model", names[n++] = spec->service.model;
    for (int i = 0; i < spec->service.n_aliases; i++)
        keys[n] = "aliases", names[n++] = spec->service.aliases[i];
    for (int i = 0; i < spec->service.n_adapters; i++)
        keys[n] = "adapters", names[n++] = spec->service.adapters[i];
    if (n && !spec->service.model)
        return spec_fail_at(sv->err, value_line(sv, keys[0]),
                            "service.%s: needs service.model (the name requests use)",
                            keys[0]);
    for (int i = 0; i < n; i++) {
        if (!br_spec_model_name_ok(names[i]))
            return spec_fail_at(sv->err, value_line(sv, keys[i]),
                                "service.%s: '%s' is not a model name (1 to %d letters, "
                                "digits and . _ - / : @ +)",
                                keys[i], spec_show(names[i], b), BR_SPEC_MODEL_MAX);
        for (int k = 0; k < i; k++)
            if (strcmp(names[k], names[i]) == 0)
                return spec_fail_at(sv->err, value_line(sv, keys[i]),
                                    "service.%s: '%s' is named twice", keys[i],
                                    spec_show(names[i], b));
    }
    return 0;
}

/* service.autoscale: the replica count follows the gateways' load, between min and
 * max (docs/gateway.md, "Autoscaling"). It needs service.model (only the gateway
 * sees the load); replicas, when given, is where it starts. */
static int check_autoscale(const sect_t *sv, br_spec_t *spec)
{
    sect_t a;
    int rc = get_section(sv, "autoscale", "service.autoscale", &a);
    if (rc <= 0)
        return rc;
    br_autoscale_spec_t *as = &spec->service.autoscale;
    if (check_keys(&a, autoscale_keys) < 0 || get_int(&a, "min", 0, 1000, &as->min) < 0 ||
        get_int(&a, "max", 1, 1000, &as->max) < 0 ||
        get_int(&a, "target_inflight", 1, 100000, &as->target_inflight) < 0 ||
        get_duration(&a, "up_after", &as->up_after_ms) < 0 ||
        get_duration(&a, "down_after", &as->down_after_ms) < 0 ||
        get_duration(&a, "cold_start_timeout", &as->cold_start_ms) < 0)
        return -1;
    if (!get(&a, "max"))
        return spec_fail_at(a.err, a.line,
                            "service.autoscale: needs max (the most replicas it may have)");
    if (as->min > as->max)
        return spec_fail_at(a.err, value_line(&a, "min"),
                            "service.autoscale: min (%d) is more than max (%d)", as->min,
                            as->max);
    if (!spec->service.model)
        return spec_fail_at(a.err, a.line,
                            "service.autoscale: needs service.model (the load it follows "
                            "is the gateway's requests for that model)");
    if (!get(&a, "target_inflight") && spec->service.max_inflight &&
        as->target_inflight > spec->service.max_inflight)
        as->target_inflight = spec->service.max_inflight; /* (4 unless capped lower) */
    if (spec->service.max_inflight && as->target_inflight > spec->service.max_inflight)
        return spec_fail_at(a.err, value_line(&a, "target_inflight"),
                            "service.autoscale.target_inflight: %d is more than "
                            "service.max_inflight (%d), which no replica may exceed",
                            as->target_inflight, spec->service.max_inflight);
    if (as->cold_start_ms <= 0)
        return spec_fail_at(a.err, value_line(&a, "cold_start_timeout"),
                            "service.autoscale.cold_start_timeout: must be positive");
    as->on = 1;
    if (!get(sv, "replicas"))
        spec->service.replicas = as->min; /* it starts at its least */
    else if (spec->service.replicas < as->min || spec->service.replicas > as->max)
        return spec_fail_at(sv->err, value_line(sv, "replicas"),
                            "service.replicas: %d is outside autoscale's %d..%d",
                            spec->service.replicas, as->min, as->max);
    return 0;
}

static int check_service(const sect_t *top, br_spec_t *spec)
{
    sect_t sv;
    int rc = get_section(top, "service", "service", &sv);
    if (rc < 0)
        return -1;
    if (rc > 0 && spec->kind != BR_JOB_SERVICE)
        return spec_fail_at(top->err, sv.line, "service: only for kind: service");
    if (check_keys(&sv, service_keys) < 0 ||
        get_int(&sv, "replicas", 1, 1000, &spec->service.replicas) < 0 ||
        check_port(&sv, spec) < 0 || check_health(&sv, spec) < 0 ||
        check_models(&sv, spec) < 0 ||
        get_int(&sv, "max_inflight", 0, 100000, &spec->service.max_inflight) < 0 ||
        get_bool(&sv, "public", &spec->service.is_public) < 0 ||
        check_autoscale(&sv, spec) < 0)
        return -1;
    return 0;
}

const char *br_after_on_name(br_after_on_t on)
{
    return (unsigned)on < 4 ? after_names[on] : "?";
}

const char *br_after_goal(br_after_on_t on)
{
    static const char *const goals[] = {"end ok", "end failed", "end", "start"};
    return (unsigned)on < 4 ? goals[on] : "?";
}

int br_after_on_parse(const char *name)
{
    return name ? spec_in_list(name, after_names) : -1;
}

/* after: [{job: 12, on: ok}, ...]: the jobs this one waits for. */
static int check_after(const sect_t *top, br_spec_t *spec)
{
    const node_t *n = get(top, "after");
    if (!n)
        return 0;
    if (n->type != N_SEQ)
        return spec_fail_at(top->err, n->line,
                            "after: expected a list like [{job: 12, on: ok}], got %s",
                            spec_type_name(n));
    if (n->n > BR_SPEC_MAX_AFTER)
        return spec_fail_at(top->err, n->line, "after: at most %d jobs, got %zu",
                            BR_SPEC_MAX_AFTER, n->n);
    for (size_t i = 0; i < n->n; i++) {
        const node_t *e = n->kids[i];
        char name[32];
        snprintf(name, sizeof(name), "after[%zu]", i);
        if (e->type != N_MAP)
            return spec_fail_at(top->err, e->line,
                                "%s: expected a mapping like {job: 12, on: ok}, got %s", name,
                                spec_type_name(e));
        sect_t a = {.map = e, .name = name, .line = e->line, .err = top->err};
        int job = 0, on = BR_AFTER_OK;
        if (check_keys(&a, after_keys) < 0 ||
            get_int(&a, "job", 1, 2147483647, &job) < 0 ||
            get_enum(&a, "on", after_names, "ok, failed, ended or started", &on) < 0)
            return -1;
        if (job == 0)
            return spec_fail_at(top->err, e->line, "%s.job: missing (the job to wait for)",
                                name);
        for (int k = 0; k < spec->n_after; k++)
            if (spec->after[k].job == job)
                return spec_fail_at(top->err, e->line, "%s: job %d is listed twice", name,
                                    job);
        spec->after[spec->n_after].job = job;
        spec->after[spec->n_after++].on = (br_after_on_t)on;
    }
    return 0;
}

/* array: "0-99%8": one task per index (array.h). */
static int check_array(const sect_t *top, br_spec_t *spec)
{
    const node_t *n;
    br_err_t aerr = {0};
    int rc = get_scalar(top, "array", "a range like 0-99%8", &n);
    if (rc <= 0)
        return rc;
    if (br_array_parse(n->text, &spec->array, &aerr) < 0)
        return spec_fail_at(top->err, n->line, "array: %s", aerr.text);
    if (spec->kind != BR_JOB_TRAIN) {
        spec->array.count = 0;
        return spec_fail_at(top->err, n->line, "array: only for kind: train%s",
                            spec->kind == BR_JOB_SERVICE ? " (a service has replicas)" : "");
    }
    return 0;
}

/* idle_stop: DURATION (kind: dev alone; default 2 h, at least 1 s): how long a dev
 * environment may go with no shell, no forward connection and no output. */
static int check_idle_stop(const sect_t *top, br_spec_t *spec)
{
    char t[32];
    int64_t v = 0;
    int rc = get_duration(top, "idle_stop", &v);
    if (rc < 0)
        return -1;
    if (rc > 0 && spec->kind != BR_JOB_DEV)
        return spec_fail_at(top->err, value_line(top, "idle_stop"),
                            "idle_stop: only for kind: dev");
    if (rc > 0 && v < BR_SPEC_IDLE_STOP_MIN_MS)
        return spec_fail_at(top->err, value_line(top, "idle_stop"),
                            "idle_stop: must be at least %s",
                            br_format_duration(BR_SPEC_IDLE_STOP_MIN_MS, t, sizeof(t)));
    spec->idle_stop_ms = spec->kind != BR_JOB_DEV ? 0 : rc > 0 ? v : BR_SPEC_IDLE_STOP_MS;
    return 0;
}

static int check_top(const node_t *root, br_spec_t *spec, br_err_t *err)
{
    static const char *const kinds[] = {"train", "service", "dev", NULL};
    sect_t top = {.map = root, .name = "", .line = SPEC_NO_LINE, .err = err};
    int kind = 0;
    if (check_keys(&top, top_keys) < 0 || check_name(&top, spec) < 0 ||
        get_enum(&top, "kind", kinds, "train, service or dev", &kind) < 0)
        return -1;
    spec->kind = kind == 1 ? BR_JOB_SERVICE : kind == 2 ? BR_JOB_DEV : BR_JOB_TRAIN;
    if (check_command(&top, spec) < 0 || check_workdir(&top, spec) < 0 ||
        check_code(&top, spec) < 0 || check_files(&top, spec) < 0 ||
        check_outputs(&top, spec) < 0 || check_setup(&top, spec) < 0 ||
        check_image(&top, spec) < 0 ||
        check_data(&top, spec) < 0 || get_strmap(&top, "env", 1, &spec->env) < 0 || check_resources(&top, spec) < 0 ||
        check_model(&top, spec) < 0 || check_checkpoint(&top, spec) < 0 ||
        check_restart(&top, spec) < 0 || check_progress(&top, spec) < 0 ||
        get_int(&top, "priority", -1000, 1000, &spec->priority) < 0 ||
        get_duration_or_none(&top, "time_limit", &spec->time_limit_ms) < 0 ||
        check_service(&top, spec) < 0 || check_after(&top, spec) < 0 ||
        check_array(&top, spec) < 0 || check_preempt(&top, spec) < 0 ||
        check_idle_stop(&top, spec) < 0)
        return -1;
    return 0;
}

/* ---- public -------------------------------------------------------------------- */

static br_spec_t *spec_new(void)
{
    br_spec_t *s = calloc(1, sizeof(*s));
    if (!s)
        return NULL;
    s->resources.nodes = 1;
    s->resources.tasks_per_node = 1;
    s->resources.cpus = 1;
    s->model.mode = strdup("inference");
    s->model.dtype = strdup("bf16");
    s->checkpoint.replicas = -1;
    s->checkpoint.keep = 2;
    s->restart.max = 3;
    s->restart.on_node_lost = 1;
    s->restart.on_hung = -1; /* until check_progress decides */
    s->preempt_signal = SIGUSR1;
    s->preempt_grace_ms = 120000;
    s->service.replicas = 1;
    s->service.autoscale.target_inflight = 4;
    s->service.autoscale.up_after_ms = 15000;
    s->service.autoscale.down_after_ms = 300000;
    s->service.autoscale.cold_start_ms = 300000;
    s->service.port = BR_PORT_AUTO;
    s->service.health_interval_ms = 5000;
    s->service.health_grace_ms = 30000;
    s->env = json_object();
    s->resources.labels = json_object();
    if (!s->model.mode || !s->model.dtype || !s->env || !s->resources.labels)
        br_spec_destroy(&s);
    return s;
}

static int read_tree(const char *yaml, size_t len, const char *const *sets, int nsets,
                     node_t **root, br_err_t *err)
{
    if (len > BR_SPEC_MAX_BYTES)
        return br_errf(err, EFBIG, "spec: larger than %d bytes", BR_SPEC_MAX_BYTES);
    if (spec_parse_text(yaml, len, NULL, root, err) < 0)
        return -1;
    if (!*root)
        return br_errf(err, EINVAL, "spec: empty");
    if ((*root)->type != N_MAP)
        return spec_fail_at(err, (*root)->line,
                            "spec: expected a mapping at the top, got %s",
                            spec_type_name(*root));
    for (int i = 0; sets && i < nsets; i++) {
        if (!sets[i])
            return br_errf(err, EINVAL, "--set: missing");
        if (apply_set(*root, sets[i], err) < 0)
            return -1;
    }
    return 0;
}

br_spec_t *br_spec_parse(const char *yaml, size_t len, const char *const *sets,
                         int nsets, br_err_t *err)
{
    node_t *root = NULL;
    br_spec_t *spec = NULL;
    if (read_tree(yaml, len, sets, nsets, &root, err) == 0) {
        spec = spec_new();
        if (!spec)
            spec_oom(err);
        else if (check_top(root, spec, err) < 0)
            br_spec_destroy(&spec);
    }
    if (!spec && err)
        br_utf8_trim(err->text); /* (a character the length limit split) */
    spec_node_free(root);
    return spec;
}

void br_spec_destroy(br_spec_t **spec)
{
    if (!spec || !*spec)
        return;
    br_spec_t *s = *spec;
    free(s->name);
    free(s->command);
    free(s->workdir);
    free(s->code);
    json_decref(s->files);
    json_decref(s->outputs);
    free(s->setup);
    free(s->image);
    json_decref(s->setup_files);
    json_decref(s->data);
    json_decref(s->env);
    for (int i = 0; i < s->resources.n_arch; i++)
        free(s->resources.arch[i]);
    for (int i = 0; i < s->resources.n_nodelist; i++)
        free(s->resources.nodelist[i]);
    for (int i = 0; i < s->resources.n_gpu_model; i++)
        free(s->resources.gpu_model[i]);
    json_decref(s->resources.labels);
    free(s->model.mode);
    free(s->model.dtype);
    free(s->checkpoint.dir);
    free(s->checkpoint.pattern);
    free(s->checkpoint.complete_file);
    free(s->service.health_http);
    free(s->service.model);
    for (int i = 0; i < s->service.n_aliases; i++)
        free(s->service.aliases[i]);
    for (int i = 0; i < s->service.n_adapters; i++)
        free(s->service.adapters[i]);
    free(s);
    *spec = NULL;
}

const char *br_job_kind_name(br_job_kind_t kind)
{
    return kind == BR_JOB_SERVICE ? "service" : kind == BR_JOB_DEV ? "dev" : "train";
}

/* ---- br_spec_t -> JSON --------------------------------------------------------- */

static json_t *str_or_null(const char *s)
{
    return s ? json_string(s) : json_null();
}

static json_t *list_json(char *const *items, int n)
{
    json_t *a = json_array();
    for (int i = 0; a && i < n; i++)
        json_array_append_new(a, json_string(items[i]));
    return a;
}

static json_t *resources_json(const br_spec_t *s)
{
    json_t *r = json_object();
    if (!r)
        return NULL;
    json_object_set_new(r, "nodes", json_integer(s->resources.nodes));
    json_object_set_new(r, "tasks_per_node",
                        s->resources.tasks_per_node == BR_TASKS_GPUS
                            ? json_string("gpus")
                            : json_integer(s->resources.tasks_per_node));
    json_object_set_new(r, "gpus", json_integer(s->resources.gpus));
    json_object_set_new(r, "vram", json_integer((json_int_t)s->resources.vram));
    json_object_set_new(r, "cpus", json_integer(s->resources.cpus));
    json_object_set_new(r, "memory", json_integer((json_int_t)s->resources.memory));
    json_object_set_new(r, "arch", list_json(s->resources.arch, s->resources.n_arch));
    if (s->resources.n_nodelist)
        json_object_set_new(r, "nodelist",
                            list_json(s->resources.nodelist, s->resources.n_nodelist));
    json_object_set_new(r, "gpu_model",
                        list_json(s->resources.gpu_model, s->resources.n_gpu_model));
    json_object_set_new(r, "labels", json_deep_copy(s->resources.labels));
    json_object_set_new(r, "spread",
                        json_string(s->resources.spread_any ? "any" : "site"));
    if (s->resources.network) /* (auto, the default, is left out) */
        json_object_set_new(r, "network", json_string(s->resources.network ==
                                                              BR_NETWORK_OVERLAY
                                                          ? "overlay"
                                                          : "direct"));
    return r;
}

static json_t *model_json(const br_spec_t *s)
{
    if (!s->model.given)
        return json_null();
    json_t *m = json_object();
    if (!m)
        return NULL;
    double p = s->model.params;
    json_object_set_new(
        m, "params",
        p == floor(p) && p < 9e15 ? json_integer((json_int_t)p) : json_real(p));
    json_object_set_new(m, "mode", str_or_null(s->model.mode));
    json_object_set_new(m, "dtype", str_or_null(s->model.dtype));
    return m;
}

static json_t *checkpoint_json(const br_spec_t *s)
{
    if (!s->checkpoint.dir)
        return json_null();
    json_t *c = json_object();
    if (!c)
        return NULL;
    json_object_set_new(c, "dir", json_string(s->checkpoint.dir));
    json_object_set_new(c, "pattern", str_or_null(s->checkpoint.pattern));
    json_object_set_new(c, "complete_file", str_or_null(s->checkpoint.complete_file));
    json_object_set_new(c, "replicas", s->checkpoint.replicas < 0
                                           ? json_null()
                                           : json_integer(s->checkpoint.replicas));
    json_object_set_new(c, "keep", json_integer(s->checkpoint.keep));
    return c;
}

static json_t *restart_json(const br_spec_t *s)
{
    json_t *r = json_object(), *on = json_array();
    if (!r || !on) {
        json_decref(r);
        json_decref(on);
        return NULL;
    }
    if (s->restart.on_node_lost)
        json_array_append_new(on, json_string("node_lost"));
    if (s->restart.on_nonzero_exit)
        json_array_append_new(on, json_string("nonzero_exit"));
    if (s->restart.on_hung > 0)
        json_array_append_new(on, json_string("hung"));
    json_object_set_new(r, "max", json_integer(s->restart.max));
    json_object_set_new(r, "on", on);
    return r;
}

static json_t *health_json(const br_spec_t *s)
{
    if (s->service.health_http)
        return json_pack("{s:s}", "http", s->service.health_http);
    if (s->service.health_tcp)
        return json_pack("{s:b}", "tcp", 1);
    return json_null();
}

static json_t *service_json(const br_spec_t *s)
{
    if (s->kind != BR_JOB_SERVICE)
        return json_null();
    json_t *v = json_object();
    if (!v)
        return NULL;
    json_object_set_new(v, "replicas", json_integer(s->service.replicas));
    json_object_set_new(v, "port",
                        s->service.port == BR_PORT_AUTO
                            ? json_string("auto")
                            : json_integer(s->service.port));
    json_object_set_new(v, "health", health_json(s));
    json_object_set_new(v, "interval", json_integer(s->service.health_interval_ms));
    json_object_set_new(v, "grace", json_integer(s->service.health_grace_ms));
    json_object_set_new(v, "model", s->service.model ? json_string(s->service.model)
                                                     : json_null());
    json_t *aliases = json_array(), *adapters = json_array();
    for (int i = 0; i < s->service.n_aliases; i++)
        json_array_append_new(aliases, json_string(s->service.aliases[i]));
    for (int i = 0; i < s->service.n_adapters; i++)
        json_array_append_new(adapters, json_string(s->service.adapters[i]));
    json_object_set_new(v, "aliases", aliases);
    json_object_set_new(v, "adapters", adapters);
    json_object_set_new(v, "max_inflight", json_integer(s->service.max_inflight));
    json_object_set_new(v, "public", json_boolean(s->service.is_public));
    const br_autoscale_spec_t *as = &s->service.autoscale;
    json_object_set_new(v, "autoscale",
                        as->on ? json_pack("{s:i, s:i, s:i, s:I, s:I, s:I}", "min", as->min,
                                           "max", as->max, "target_inflight",
                                           as->target_inflight, "up_after",
                                           (json_int_t)as->up_after_ms, "down_after",
                                           (json_int_t)as->down_after_ms,
                                           "cold_start_timeout",
                                           (json_int_t)as->cold_start_ms)
                               : json_null());
    return v;
}

json_t *br_spec_to_json(const br_spec_t *s)
{
    if (!s)
        return NULL;
    json_t *j = json_object();
    if (!j)
        return NULL;
    json_object_set_new(j, "name", str_or_null(s->name));
    json_object_set_new(j, "kind", json_string(br_job_kind_name(s->kind)));
    json_object_set_new(j, "command", str_or_null(s->command));
    json_object_set_new(j, "workdir", str_or_null(s->workdir));
    if (s->code) /* bramble submit's upload (the coordinator puts its tree here) */
        json_object_set_new(j, "code", json_string(s->code));
    if (s->files) /* (sent in the same tree) */
        json_object_set_new(j, "files", json_deep_copy(s->files));
    if (s->outputs)
        json_object_set_new(j, "outputs", json_deep_copy(s->outputs));
    if (s->setup)
        json_object_set_new(j, "setup", json_string(s->setup));
    if (s->image)
        json_object_set_new(j, "image", json_string(s->image));
    if (s->setup_files)
        json_object_set_new(j, "setup_files", json_deep_copy(s->setup_files));
    if (s->data) /* (the coordinator names the versions: api_data.c) */
        json_object_set_new(j, "data", json_deep_copy(s->data));
    json_object_set_new(j, "env", s->env ? json_deep_copy(s->env) : json_object());
    json_object_set_new(j, "resources", resources_json(s));
    json_object_set_new(j, "model", model_json(s));
    json_object_set_new(j, "checkpoint", checkpoint_json(s));
    json_object_set_new(j, "restart", restart_json(s));
    json_object_set_new(j, "progress",
                        s->progress_timeout_ms > 0
                            ? json_pack("{s:I}", "timeout", (json_int_t)s->progress_timeout_ms)
                            : json_null());
    json_object_set_new(j, "priority", json_integer(s->priority));
    json_object_set_new(j, "time_limit", json_integer(s->time_limit_ms));
    if (s->kind == BR_JOB_DEV)
        json_object_set_new(j, "idle_stop", json_integer(s->idle_stop_ms));
    json_object_set_new(j, "preemptible", json_boolean(s->preemptible));
    json_object_set_new(j, "preempt", json_pack("{s:i, s:I}", "signal", s->preempt_signal,
                                                "grace", (json_int_t)s->preempt_grace_ms));
    json_t *after = json_array();
    for (int i = 0; i < s->n_after; i++)
        json_array_append_new(after, json_pack("{s:I, s:s}", "job", (json_int_t)s->after[i].job,
                                               "on", br_after_on_name(s->after[i].on)));
    json_object_set_new(j, "after", after);
    char range[BR_ARRAY_TEXT_MAX];
    if (s->array.count) /* (absent when not an array) */
        json_object_set_new(j, "array",
                            json_pack("{s:s, s:i, s:i}", "range",
                                      br_array_range_text(&s->array, range, sizeof(range)),
                                      "count", s->array.count, "max", s->array.max));
    json_object_set_new(j, "service", service_json(s));
    return j;
}

int br_spec_match_list(const json_t *list, const char *s, int substring)
{
    if (json_array_size(list) == 0)
        return 1;
    size_t i;
    json_t *v;
    json_array_foreach(list, i, v) {
        const char *x = json_string_value(v);
        if (x && s && (substring ? strcasestr(s, x) != NULL : strcmp(s, x) == 0))
            return 1;
    }
    return 0;
}

const char *br_spec_label_missing(const json_t *want, const json_t *have)
{
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)want, k, v) {
        json_t *h = json_object_get(have, k);
        if (!json_is_string(h) || !json_equal(h, v))
            return k;
    }
    return NULL;
}
