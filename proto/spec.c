/* spec.c - the job spec: YAML text (plus --set overrides) -> checked br_spec_t. */
#include "spec.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "util.h"

#define MAX_DEPTH 16           /* nested collections in one document */
#define MAX_ENTRIES 1024       /* entries in one mapping or list */
#define MAX_SET_PARTS 8        /* components of a --set path */
#define MAX_BYTES (1ULL << 60) /* largest vram / memory */
#define NO_LINE (-1)           /* an error that belongs to no line */
#define SHOW_LEN 48            /* room for a value quoted in an error */
#define FIELD_LEN 96           /* room for a dotted field name */

/* ---- the tree of YAML nodes ---------------------------------------------------- */

enum { N_SCALAR, N_SEQ, N_MAP };

typedef struct node {
    int type;
    int line;     /* 1-based line in the spec; 0 when it came from --set */
    int plain;    /* scalar written without quotes */
    char *text;   /* scalar text */
    char *key;    /* its key, when this is a mapping value */
    int key_line; /* line of that key; 0 from --set */
    struct node **kids;
    size_t n, cap;
} node_t;

static node_t *node_new(int type, int line)
{
    node_t *n = calloc(1, sizeof(*n));
    if (n) {
        n->type = type;
        n->line = line;
    }
    return n;
}

static void node_free(node_t *n)
{
    if (!n)
        return;
    for (size_t i = 0; i < n->n; i++)
        node_free(n->kids[i]);
    free(n->kids);
    free(n->text);
    free(n->key);
    free(n);
}

/* Append kid to a collection; frees kid on failure. */
static int node_push(node_t *n, node_t *kid)
{
    if (n->n == n->cap) {
        size_t cap = n->cap ? n->cap * 2 : 4;
        node_t **kids = realloc(n->kids, cap * sizeof(*kids));
        if (!kids) {
            node_free(kid);
            return -1;
        }
        n->kids = kids;
        n->cap = cap;
    }
    n->kids[n->n++] = kid;
    return 0;
}

static node_t *find(const node_t *map, const char *key)
{
    if (!map || map->type != N_MAP)
        return NULL;
    for (size_t i = 0; i < map->n; i++)
        if (strcmp(map->kids[i]->key, key) == 0)
            return map->kids[i];
    return NULL;
}

static int in_list(const char *s, const char *const *list)
{
    for (int i = 0; list[i]; i++)
        if (strcmp(s, list[i]) == 0)
            return i;
    return -1;
}

static int is_null(const node_t *n)
{
    static const char *const nulls[] = {"", "~", "null", "Null", "NULL", NULL};
    return n->type == N_SCALAR && n->plain && in_list(n->text, nulls) >= 0;
}

/* Mark a tree as coming from --set (no line of the spec text). */
static void mark_set(node_t *n)
{
    n->line = 0;
    n->key_line = 0;
    for (size_t i = 0; i < n->n; i++)
        mark_set(n->kids[i]);
}

static const char *type_name(const node_t *n)
{
    return n->type == N_SEQ ? "a list" : n->type == N_MAP ? "a mapping" : "a scalar";
}

/* ---- error text ---------------------------------------------------------------- */

/* Length of the valid UTF-8 character at s, 0 when there is none. */
static size_t utf8_len(const unsigned char *s)
{
    unsigned c = s[0];
    size_t n = c < 0x80                 ? 1
               : c >= 0xc2 && c <= 0xdf ? 2
               : c >= 0xe0 && c <= 0xef ? 3
               : c >= 0xf0 && c <= 0xf4 ? 4
                                        : 0;
    for (size_t i = 1; i < n; i++)
        if ((s[i] & 0xc0) != 0x80)
            return 0;
    if (n == 3 && ((c == 0xe0 && s[1] < 0xa0) || (c == 0xed && s[1] > 0x9f)))
        return 0;
    if (n == 4 && ((c == 0xf0 && s[1] < 0x90) || (c == 0xf4 && s[1] > 0x8f)))
        return 0;
    return n;
}

/* A value made safe to quote in an error: short, printable, valid UTF-8. */
static const char *show(const char *s, char *buf)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t o = 0;
    while (*p) {
        size_t n = utf8_len(p);
        if (o + (n ? n : 1) > SHOW_LEN - 4) {
            memcpy(buf + o, "...", 3);
            o += 3;
            break;
        }
        if (n <= 1) {
            buf[o++] = (*p < 0x20 || *p >= 0x7f) ? '?' : (char)*p;
            p++;
        } else {
            memcpy(buf + o, p, n);
            o += n;
            p += n;
        }
    }
    buf[o] = '\0';
    return buf;
}

/* Cut a character that the length limit of err->text split at its end. */
static void trim_utf8(char *text)
{
    for (unsigned char *p = (unsigned char *)text; *p;) {
        size_t n = utf8_len(p);
        if (n == 0 && strlen((char *)p) < 4) {
            *p = '\0';
            break;
        }
        p += n ? n : 1;
    }
}

static int fail_at(br_err_t *err, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* "line 7: msg" for spec text, "--set: msg" for --set values, else just msg. */
static int fail_at(br_err_t *err, int line, const char *fmt, ...)
{
    char msg[BR_ERR_TEXT];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (line > 0)
        return br_errf(err, EINVAL, "line %d: %s", line, msg);
    if (line == 0)
        return br_errf(err, EINVAL, "--set: %s", msg);
    return br_errf(err, EINVAL, "%s", msg);
}

static int oom(br_err_t *err)
{
    return br_errf(err, ENOMEM, "spec: out of memory");
}

/* ---- YAML text -> tree --------------------------------------------------------- */

typedef struct {
    yaml_parser_t p;
    const char *text; /* the input, to find the line of a byte offset */
    size_t len;
    const char *set_path; /* the --set path when reading its value, else NULL */
    br_err_t *err;
} reader_t;

static int rd_fail(reader_t *r, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* "line 7: msg" while reading the spec, "--set a.b: msg" while reading a value. */
static int rd_fail(reader_t *r, int line, const char *fmt, ...)
{
    char msg[BR_ERR_TEXT], b[SHOW_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (r->set_path)
        return br_errf(r->err, EINVAL, "--set %s: %s", show(r->set_path, b), msg);
    return br_errf(r->err, EINVAL, "line %d: %s", line, msg);
}

static int yaml_fail(reader_t *r)
{
    yaml_parser_t *p = &r->p;
    const char *what = p->problem ? p->problem : "syntax error";
    if (p->error == YAML_MEMORY_ERROR)
        return oom(r->err);
    if (p->error == YAML_READER_ERROR) {
        int line = 1;
        for (size_t i = 0; i < p->problem_offset && i < r->len; i++)
            line += r->text[i] == '\n';
        return rd_fail(r, line, "invalid YAML: %s", what);
    }
    int line = (int)p->problem_mark.line + 1;
    if (p->context)
        return rd_fail(r, line, "invalid YAML: %s (%s)", what, p->context);
    return rd_fail(r, line, "invalid YAML: %s", what);
}

static int next_event(reader_t *r, yaml_event_t *ev)
{
    return yaml_parser_parse(&r->p, ev) ? 0 : yaml_fail(r);
}

static int ev_line(const yaml_event_t *ev)
{
    return (int)ev->start_mark.line + 1;
}

static int scalar_text(reader_t *r, const yaml_event_t *ev, char **out)
{
    const char *v = (const char *)ev->data.scalar.value;
    size_t len = ev->data.scalar.length;
    if (memchr(v, '\0', len))
        return rd_fail(r, ev_line(ev), "NUL characters are not allowed");
    *out = strndup(v, len);
    return *out ? 0 : oom(r->err);
}

static int parse_node(reader_t *r, yaml_event_t *ev, int depth, node_t **out);

static int add_kid(reader_t *r, node_t *n, node_t *kid, int line)
{
    if (n->n >= MAX_ENTRIES) {
        node_free(kid);
        return rd_fail(r, line, "more than %d entries", MAX_ENTRIES);
    }
    return node_push(n, kid) < 0 ? oom(r->err) : 0;
}

static int parse_seq(reader_t *r, node_t *n, int depth)
{
    for (;;) {
        yaml_event_t ev;
        node_t *kid;
        if (next_event(r, &ev) < 0)
            return -1;
        if (ev.type == YAML_SEQUENCE_END_EVENT) {
            yaml_event_delete(&ev);
            return 0;
        }
        int line = ev_line(&ev);
        if (parse_node(r, &ev, depth, &kid) < 0 || add_kid(r, n, kid, line) < 0)
            return -1;
    }
}

/* Read one key of a mapping; 1 when the mapping ended instead. */
static int parse_key(reader_t *r, const node_t *n, char **key, int *line)
{
    yaml_event_t ev;
    int rc = 0;
    if (next_event(r, &ev) < 0)
        return -1;
    *line = ev_line(&ev);
    if (ev.type == YAML_MAPPING_END_EVENT)
        rc = 1;
    else if (ev.type == YAML_ALIAS_EVENT)
        rc = rd_fail(r, *line, "aliases are not supported");
    else if (ev.type != YAML_SCALAR_EVENT)
        rc = rd_fail(r, *line, "mapping keys must be plain strings");
    else
        rc = scalar_text(r, &ev, key);
    yaml_event_delete(&ev);
    if (rc == 0 && find(n, *key)) {
        char b[SHOW_LEN];
        rc = rd_fail(r, *line, "duplicate key '%s'", show(*key, b));
        free(*key);
    }
    return rc;
}

static int parse_map(reader_t *r, node_t *n, int depth)
{
    for (;;) {
        char *key;
        int key_line, rc = parse_key(r, n, &key, &key_line);
        if (rc)
            return rc > 0 ? 0 : -1;
        yaml_event_t ev;
        node_t *val;
        if (next_event(r, &ev) < 0 || parse_node(r, &ev, depth, &val) < 0) {
            free(key);
            return -1;
        }
        val->key = key;
        val->key_line = key_line;
        if (add_kid(r, n, val, key_line) < 0)
            return -1;
    }
}

static int parse_collection(reader_t *r, int type, int line, int depth, node_t **out)
{
    if (depth >= MAX_DEPTH)
        return rd_fail(r, line, "nesting deeper than %d levels", MAX_DEPTH);
    node_t *n = node_new(type, line);
    if (!n)
        return oom(r->err);
    int rc = type == N_SEQ ? parse_seq(r, n, depth + 1) : parse_map(r, n, depth + 1);
    if (rc < 0) {
        node_free(n);
        return -1;
    }
    *out = n;
    return 0;
}

static int parse_scalar(reader_t *r, yaml_event_t *ev, int line, node_t **out)
{
    node_t *n = node_new(N_SCALAR, line);
    int rc = n ? scalar_text(r, ev, &n->text) : oom(r->err);
    if (rc == 0) {
        n->plain = ev->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
        *out = n;
    } else {
        node_free(n);
    }
    yaml_event_delete(ev);
    return rc;
}

/* Build the node that starts with ev (which this deletes) and everything inside. */
static int parse_node(reader_t *r, yaml_event_t *ev, int depth, node_t **out)
{
    int line = ev_line(ev);
    yaml_event_type_t type = ev->type;
    if (type == YAML_SCALAR_EVENT)
        return parse_scalar(r, ev, line, out);
    yaml_event_delete(ev);
    if (type == YAML_SEQUENCE_START_EVENT)
        return parse_collection(r, N_SEQ, line, depth, out);
    if (type == YAML_MAPPING_START_EVENT)
        return parse_collection(r, N_MAP, line, depth, out);
    if (type == YAML_ALIAS_EVENT)
        return rd_fail(r, line, "aliases are not supported");
    return rd_fail(r, line, "unexpected YAML structure");
}

/* Expect an event of the given type and drop it; *line gets its line. */
static int expect(reader_t *r, yaml_event_type_t type, int *line)
{
    yaml_event_t ev;
    if (next_event(r, &ev) < 0)
        return -1;
    yaml_event_type_t got = ev.type;
    *line = ev_line(&ev);
    yaml_event_delete(&ev);
    if (got == type)
        return 0;
    if (type == YAML_STREAM_END_EVENT && got == YAML_DOCUMENT_START_EVENT)
        return rd_fail(r, *line, "only one YAML document is allowed");
    return rd_fail(r, *line, "unexpected YAML structure");
}

/* The one document of the stream; *root = NULL when there is none. */
static int parse_stream(reader_t *r, node_t **root)
{
    yaml_event_t ev;
    int line;
    *root = NULL;
    if (expect(r, YAML_STREAM_START_EVENT, &line) < 0 || next_event(r, &ev) < 0)
        return -1;
    if (ev.type == YAML_STREAM_END_EVENT) {
        yaml_event_delete(&ev);
        return 0;
    }
    yaml_event_type_t type = ev.type;
    line = ev_line(&ev);
    yaml_event_delete(&ev);
    if (type != YAML_DOCUMENT_START_EVENT)
        return rd_fail(r, line, "unexpected YAML structure");
    if (next_event(r, &ev) < 0 || parse_node(r, &ev, 0, root) < 0)
        return -1;
    if (expect(r, YAML_DOCUMENT_END_EVENT, &line) < 0 ||
        expect(r, YAML_STREAM_END_EVENT, &line) < 0) {
        node_free(*root);
        *root = NULL;
        return -1;
    }
    return 0;
}

/* Parse YAML text; set_path names the --set being read (NULL for the spec). */
static int parse_text(const char *text, size_t len, const char *set_path, node_t **root,
                      br_err_t *err)
{
    reader_t r = {.text = text ? text : "",
                  .len = text ? len : 0,
                  .set_path = set_path,
                  .err = err};
    if (!yaml_parser_initialize(&r.p))
        return oom(err);
    yaml_parser_set_input_string(&r.p, (const unsigned char *)r.text, r.len);
    int rc = parse_stream(&r, root);
    yaml_parser_delete(&r.p);
    return rc;
}

/* ---- the schema ---------------------------------------------------------------- */

static const char *const top_keys[] = {
    "name",       "kind",    "command",  "workdir",    "env",     "resources", "model",
    "checkpoint", "restart", "priority", "time_limit", "service", NULL};
static const char *const resources_keys[] = {
    "nodes", "tasks_per_node", "gpus",   "vram",   "cpus", "memory",
    "arch",  "gpu_model",      "labels", "spread", NULL};
static const char *const model_keys[] = {"params", "mode", "dtype", NULL};
static const char *const checkpoint_keys[] = {"dir", "pattern", "complete_file", NULL};
static const char *const restart_keys[] = {"max", "on", NULL};
static const char *const service_keys[] = {"replicas", "port", "health", NULL};
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
    {"service", service_keys},
    {"service.health", health_keys},
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
    char parent[FIELD_LEN] = "", b[SHOW_LEN], k[SHOW_LEN], pb[SHOW_LEN];
    int n = 0;
    for (char *p = path, *dot; p; p = dot ? dot + 1 : NULL) {
        dot = strchr(p, '.');
        if (dot)
            *dot = '\0';
        const char *const *keys = section_keys(parent);
        if (!*p)
            return br_errf(err, EINVAL, "--set %s: empty key", show(shown, b));
        if (!keys || n == MAX_SET_PARTS || (keys != free_keys && in_list(p, keys) < 0))
            return br_errf(err, EINVAL, "--set %s: unknown key '%s'%s%s",
                           show(shown, b), show(p, k), parent[0] ? " in " : "",
                           show(parent, pb));
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
    char b[SHOW_LEN], k[SHOW_LEN];
    node_t *n = find(map, key);
    if (n && n->type == N_MAP)
        return n;
    if (n && !is_null(n))
        return br_errp(err, EINVAL, "--set %s: '%s' is not a mapping", show(shown, b),
                       show(key, k));
    if (n) { /* a null value: a mapping takes its place */
        free(n->text);
        n->text = NULL;
        n->type = N_MAP;
        n->plain = n->line = n->key_line = 0;
        return n;
    }
    node_t *m = node_new(N_MAP, 0);
    if (!m || !(m->key = strdup(key)) || node_push(map, m) < 0) {
        if (m && !m->key) /* (node_push frees m itself when it fails) */
            node_free(m);
        return br_errp(err, ENOMEM, "spec: out of memory");
    }
    return m;
}

/* Put val under key in map, replacing what was there. Takes val. */
static int put_value(node_t *map, const char *key, node_t *val, br_err_t *err)
{
    val->key = strdup(key);
    if (!val->key) {
        node_free(val);
        return oom(err);
    }
    for (size_t i = 0; i < map->n; i++) {
        if (strcmp(map->kids[i]->key, key) == 0) {
            node_free(map->kids[i]);
            map->kids[i] = val;
            return 0;
        }
    }
    return node_push(map, val) < 0 ? oom(err) : 0;
}

/* Parse the value of a --set: a YAML scalar or flow collection; empty is null. */
static int set_value(const char *path, const char *text, node_t **out, br_err_t *err)
{
    size_t len = strlen(text);
    char b[SHOW_LEN];
    if (len > BR_SPEC_MAX_BYTES)
        return br_errf(err, EINVAL, "--set %s: value too long", show(path, b));
    if (parse_text(text, len, path, out, err) < 0)
        return -1;
    if (!*out) { /* "key=": null */
        if (!(*out = node_new(N_SCALAR, 0)) || !((*out)->text = strdup("")))
            return oom(err);
        (*out)->plain = 1;
    }
    mark_set(*out);
    return 0;
}

static int apply_set(node_t *root, const char *set, br_err_t *err)
{
    char b[SHOW_LEN], *parts[MAX_SET_PARTS];
    const char *eq = strchr(set, '=');
    if (!eq)
        return br_errf(err, EINVAL, "--set %s: expected key=value", show(set, b));
    char *shown = strndup(set, (size_t)(eq - set)), *path = strdup(shown ? shown : "");
    node_t *val = NULL, *map = root;
    int n = 0, rc = shown && path ? 0 : oom(err);
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
    node_free(val);
    free(path);
    free(shown);
    return rc;
}

/* ---- tree -> br_spec_t: typed getters ------------------------------------------ */

typedef struct {
    const node_t *map; /* NULL when the section is absent */
    const char *name;  /* dotted path of the section, "" at the top level */
    int line;          /* line of the section's key, NO_LINE at the top */
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
    const node_t *n = find(s->map, key);
    return n && !is_null(n) ? n : NULL;
}

/* Every key of the section must be in allowed. */
static int check_keys(const sect_t *s, const char *const *allowed)
{
    char b[SHOW_LEN];
    for (size_t i = 0; s->map && i < s->map->n; i++) {
        const node_t *k = s->map->kids[i];
        if (in_list(k->key, allowed) >= 0)
            continue;
        if (s->name[0])
            return fail_at(s->err, k->key_line, "unknown key '%s' in %s",
                           show(k->key, b), s->name);
        return fail_at(s->err, k->key_line, "unknown key '%s'", show(k->key, b));
    }
    return 0;
}

/* The mapping under key as a section (map NULL when absent); 1 when present. */
static int get_section(const sect_t *s, const char *key, const char *name, sect_t *out)
{
    const node_t *n = get(s, key);
    char f[FIELD_LEN];
    *out = (sect_t){.map = n, .name = name, .line = NO_LINE, .err = s->err};
    if (!n)
        return 0;
    out->line = n->key_line;
    if (n->type != N_MAP)
        return fail_at(s->err, n->line, "%s: expected a mapping, got %s",
                       field(s, key, f), type_name(n));
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
        return fail_at(s->err, n->line, "%s: expected %s, got %s", field(s, key, f),
                       what, type_name(n));
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
    return *out ? 1 : oom(s->err);
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
    char f[FIELD_LEN], b[SHOW_LEN];
    long long v;
    if (parse_int(n->text, &v) < 0)
        return fail_at(s->err, n->line, "%s: expected %s, got '%s'", field(s, key, f),
                       what, show(n->text, b));
    if (v < lo || v > hi)
        return fail_at(s->err, n->line, "%s: %lld is out of range (%ld..%ld)",
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
    char f[FIELD_LEN], b[SHOW_LEN];
    int rc = get_scalar(s, key, "a size", &n);
    if (rc <= 0)
        return rc;
    if (br_parse_size(n->text, out, NULL) < 0 || *out > MAX_BYTES)
        return fail_at(s->err, n->line, "%s: bad size '%s' (use e.g. 512MiB, 24GiB)",
                       field(s, key, f), show(n->text, b));
    return 1;
}

static int get_duration(const sect_t *s, const char *key, int64_t *out)
{
    const node_t *n;
    char f[FIELD_LEN], b[SHOW_LEN];
    int rc = get_scalar(s, key, "a duration", &n);
    if (rc <= 0)
        return rc;
    if (br_parse_duration(n->text, out, NULL) < 0)
        return fail_at(s->err, n->line,
                       "%s: bad duration '%s' (use e.g. 500ms, 5s, 10m, 12h)",
                       field(s, key, f), show(n->text, b));
    return 1;
}

/* One of choices (a NULL-terminated list; spelled out in words for errors). */
static int get_enum(const sect_t *s, const char *key, const char *const *choices,
                    const char *words, int *out)
{
    const node_t *n;
    char f[FIELD_LEN], b[SHOW_LEN];
    int rc = get_scalar(s, key, words, &n);
    if (rc <= 0)
        return rc;
    int i = in_list(n->text, choices);
    if (i < 0)
        return fail_at(s->err, n->line, "%s: expected %s, got '%s'", field(s, key, f),
                       words, show(n->text, b));
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
    if (n->type != N_SCALAR || is_null(n) || !n->text[0])
        return fail_at(s->err, n->line, "%s: entries must be non-empty strings",
                       field(s, key, f));
    *out = strdup(n->text);
    return *out ? 0 : oom(s->err);
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
        return fail_at(s->err, n->line, "%s: expected a string or a list, got %s",
                       field(s, key, f), type_name(n));
    if (n->n > BR_SPEC_MAX_LIST)
        return fail_at(s->err, n->line, "%s: at most %d entries", field(s, key, f),
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
    char f[FIELD_LEN], b[SHOW_LEN];
    if (env && !valid_env_name(kid->key))
        return fail_at(s->err, kid->key_line, "%s: '%s' is not a valid variable name",
                       field(s, key, f), show(kid->key, b));
    if (!kid->key[0])
        return fail_at(s->err, kid->key_line, "%s: keys must not be empty",
                       field(s, key, f));
    if (kid->type != N_SCALAR)
        return fail_at(s->err, kid->line, "%s.%s: expected a string, got %s",
                       field(s, key, f), show(kid->key, b), type_name(kid));
    if (json_object_set_new(obj, kid->key, json_string(kid->text)) < 0)
        return fail_at(s->err, kid->line, "%s.%s: not valid UTF-8", field(s, key, f),
                       show(kid->key, b));
    return 0;
}

/* A mapping of string -> string into *out (always an object, maybe empty). */
static int get_strmap(const sect_t *s, const char *key, int env, json_t **out)
{
    const node_t *n = get(s, key);
    char f[FIELD_LEN];
    if (!*out && !(*out = json_object()))
        return oom(s->err);
    if (!n)
        return 0;
    if (n->type != N_MAP)
        return fail_at(s->err, n->line, "%s: expected a mapping, got %s",
                       field(s, key, f), type_name(n));
    for (size_t i = 0; i < n->n; i++)
        if (map_entry(s, key, n->kids[i], env, *out) < 0)
            return -1;
    return 1;
}

static int value_line(const sect_t *s, const char *key)
{
    const node_t *n = find(s->map, key);
    return n ? n->line : NO_LINE;
}

/* ---- tree -> br_spec_t: the sections ------------------------------------------- */

static int check_name(const sect_t *top, br_spec_t *spec)
{
    char b[SHOW_LEN];
    int rc = get_str(top, "name", &spec->name);
    if (rc < 0)
        return -1;
    if (rc == 0)
        return fail_at(top->err, NO_LINE, "name: required");
    if (!br_valid_name(spec->name))
        return fail_at(
            top->err, value_line(top, "name"),
            "name: '%s' must be lowercase letters, digits and '-' (1-63 chars)",
            show(spec->name, b));
    return 0;
}

static int check_command(const sect_t *top, br_spec_t *spec)
{
    int rc = get_str(top, "command", &spec->command);
    if (rc < 0)
        return -1;
    if (rc == 0)
        return fail_at(top->err, NO_LINE, "command: required");
    if (strspn(spec->command, " \t\r\n") == strlen(spec->command))
        return fail_at(top->err, value_line(top, "command"),
                       "command: must not be empty");
    return 0;
}

static int check_workdir(const sect_t *top, br_spec_t *spec)
{
    char b[SHOW_LEN];
    int rc = get_str(top, "workdir", &spec->workdir);
    if (rc > 0 && spec->workdir[0] != '/')
        return fail_at(top->err, value_line(top, "workdir"),
                       "workdir: must be an absolute path, got '%s'",
                       show(spec->workdir, b));
    return rc < 0 ? -1 : 0;
}

static int check_tasks(const sect_t *r, br_spec_t *spec)
{
    const char *what = "a positive integer or 'gpus'";
    const node_t *n;
    int rc = get_scalar(r, "tasks_per_node", what, &n);
    if (rc <= 0)
        return rc;
    if (strcmp(n->text, "gpus") != 0) {
        rc = int_value(r, "tasks_per_node", n, 1, 1024, what,
                       &spec->resources.tasks_per_node);
        return rc < 0 ? -1 : 0;
    }
    spec->resources.tasks_per_node = BR_TASKS_GPUS;
    if (spec->resources.gpus < 1)
        return fail_at(r->err, n->line,
                       "resources.tasks_per_node: gpus needs resources.gpus >= 1");
    return 0;
}

static int check_resources(const sect_t *top, br_spec_t *spec)
{
    static const char *const spreads[] = {"site", "any", NULL};
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
        get_enum(&r, "spread", spreads, "site or any", &res->spread_any) < 0)
        return -1;
    return 0;
}

static int check_model(const sect_t *top, br_spec_t *spec)
{
    static const char *const modes[] = {"inference", "lora", "qlora", "full", NULL};
    static const char *const dtypes[] = {"fp32", "fp16", "bf16", "int8", "int4", NULL};
    sect_t m, r;
    int mode = 0, dtype = 2;
    char b[SHOW_LEN];
    int rc = get_section(top, "model", "model", &m);
    if (rc <= 0)
        return rc;
    spec->model.given = 1;
    get_section(top, "resources", "resources", &r);
    if (get(&r, "vram"))
        return fail_at(top->err, m.line,
                       "model: give either model or resources.vram, not both");
    const node_t *p;
    if (check_keys(&m, model_keys) < 0 ||
        (rc = get_scalar(&m, "params", "a count", &p)) < 0)
        return -1;
    if (rc == 0)
        return fail_at(top->err, m.line, "model.params: required");
    if (br_parse_count(p->text, &spec->model.params, NULL) < 0 ||
        !(spec->model.params > 0))
        return fail_at(top->err, p->line,
                       "model.params: bad count '%s' (use e.g. 8B, 70B)",
                       show(p->text, b));
    if (get_enum(&m, "mode", modes, "inference, lora, qlora or full", &mode) < 0 ||
        get_enum(&m, "dtype", dtypes, "fp32, fp16, bf16, int8 or int4", &dtype) < 0)
        return -1;
    free(spec->model.mode);
    free(spec->model.dtype);
    spec->model.mode = strdup(modes[mode]);
    spec->model.dtype = strdup(dtypes[dtype]);
    return spec->model.mode && spec->model.dtype ? 0 : oom(top->err);
}

static int check_complete_file(const sect_t *c, const char *f)
{
    char b[SHOW_LEN];
    if (!f[0] || strchr(f, '/') || strcmp(f, ".") == 0 || strcmp(f, "..") == 0)
        return fail_at(c->err, value_line(c, "complete_file"),
                       "checkpoint.complete_file: must be a plain file name, got '%s'",
                       show(f, b));
    return 0;
}

static int check_checkpoint(const sect_t *top, br_spec_t *spec)
{
    sect_t c;
    char b[SHOW_LEN];
    int rc = get_section(top, "checkpoint", "checkpoint", &c);
    if (rc <= 0)
        return rc;
    if (check_keys(&c, checkpoint_keys) < 0 ||
        (rc = get_str(&c, "dir", &spec->checkpoint.dir)) < 0)
        return -1;
    if (rc == 0)
        return fail_at(c.err, c.line, "checkpoint.dir: required");
    if (spec->checkpoint.dir[0] != '/')
        return fail_at(c.err, value_line(&c, "dir"),
                       "checkpoint.dir: must be an absolute path, got '%s'",
                       show(spec->checkpoint.dir, b));
    if ((rc = get_str(&c, "pattern", &spec->checkpoint.pattern)) < 0)
        return -1;
    if (rc == 0 && !(spec->checkpoint.pattern = strdup("*")))
        return oom(c.err);
    if (!spec->checkpoint.pattern[0])
        return fail_at(c.err, value_line(&c, "pattern"),
                       "checkpoint.pattern: must not be empty");
    if ((rc = get_str(&c, "complete_file", &spec->checkpoint.complete_file)) < 0)
        return -1;
    return rc > 0 ? check_complete_file(&c, spec->checkpoint.complete_file) : 0;
}

static int check_restart(const sect_t *top, br_spec_t *spec)
{
    static const char *const reasons[] = {"node_lost", "nonzero_exit", NULL};
    char *on[BR_SPEC_MAX_LIST] = {0}, b[SHOW_LEN];
    int n = 0, rc;
    sect_t r;
    if (get_section(top, "restart", "restart", &r) < 0 ||
        check_keys(&r, restart_keys) < 0 ||
        get_int(&r, "max", 0, 1000, &spec->restart.max) < 0)
        return -1;
    rc = get_list(&r, "on", on, &n);
    if (rc > 0)
        spec->restart.on_node_lost = spec->restart.on_nonzero_exit = 0;
    for (int i = 0; rc > 0 && i < n; i++) {
        int which = in_list(on[i], reasons);
        if (which < 0)
            rc = fail_at(r.err, value_line(&r, "on"),
                         "restart.on: expected node_lost or nonzero_exit, got '%s'",
                         show(on[i], b));
        else if (which == 0)
            spec->restart.on_node_lost = 1;
        else
            spec->restart.on_nonzero_exit = 1;
    }
    for (int i = 0; i < n; i++)
        free(on[i]);
    return rc < 0 ? -1 : 0;
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
    char b[SHOW_LEN];
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
        return fail_at(
            h.err, value_line(&h, "http"),
            "service.health.http: must be a path starting with '/', got '%s'",
            show(http, b));
    if (http && spec->service.health_tcp)
        return fail_at(h.err, h.line,
                       "service.health: give either http or tcp, not both");
    if (!http && !spec->service.health_tcp)
        return fail_at(h.err, h.line, "service.health: give http: /path or tcp: true");
    if (spec->service.health_interval_ms <= 0)
        return fail_at(h.err, value_line(&h, "interval"),
                       "service.health.interval: must be positive");
    return 0;
}

static int check_service(const sect_t *top, br_spec_t *spec)
{
    sect_t sv;
    int rc = get_section(top, "service", "service", &sv);
    if (rc < 0)
        return -1;
    if (rc > 0 && spec->kind != BR_JOB_SERVICE)
        return fail_at(top->err, sv.line, "service: only for kind: service");
    if (check_keys(&sv, service_keys) < 0 ||
        get_int(&sv, "replicas", 1, 1000, &spec->service.replicas) < 0 ||
        check_port(&sv, spec) < 0 || check_health(&sv, spec) < 0)
        return -1;
    return 0;
}

static int check_top(const node_t *root, br_spec_t *spec, br_err_t *err)
{
    static const char *const kinds[] = {"train", "service", NULL};
    sect_t top = {.map = root, .name = "", .line = NO_LINE, .err = err};
    int kind = 0;
    if (check_keys(&top, top_keys) < 0 || check_name(&top, spec) < 0 ||
        get_enum(&top, "kind", kinds, "train or service", &kind) < 0)
        return -1;
    spec->kind = kind ? BR_JOB_SERVICE : BR_JOB_TRAIN;
    if (check_command(&top, spec) < 0 || check_workdir(&top, spec) < 0 ||
        get_strmap(&top, "env", 1, &spec->env) < 0 || check_resources(&top, spec) < 0 ||
        check_model(&top, spec) < 0 || check_checkpoint(&top, spec) < 0 ||
        check_restart(&top, spec) < 0 ||
        get_int(&top, "priority", -1000, 1000, &spec->priority) < 0 ||
        get_duration(&top, "time_limit", &spec->time_limit_ms) < 0 ||
        check_service(&top, spec) < 0)
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
    s->restart.max = 3;
    s->restart.on_node_lost = 1;
    s->service.replicas = 1;
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
    if (parse_text(yaml, len, NULL, root, err) < 0)
        return -1;
    if (!*root)
        return br_errf(err, EINVAL, "spec: empty");
    if ((*root)->type != N_MAP)
        return fail_at(err, (*root)->line,
                       "spec: expected a mapping at the top, got %s", type_name(*root));
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
            oom(err);
        else if (check_top(root, spec, err) < 0)
            br_spec_destroy(&spec);
    }
    if (!spec && err)
        trim_utf8(err->text);
    node_free(root);
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
    json_decref(s->env);
    for (int i = 0; i < s->resources.n_arch; i++)
        free(s->resources.arch[i]);
    for (int i = 0; i < s->resources.n_gpu_model; i++)
        free(s->resources.gpu_model[i]);
    json_decref(s->resources.labels);
    free(s->model.mode);
    free(s->model.dtype);
    free(s->checkpoint.dir);
    free(s->checkpoint.pattern);
    free(s->checkpoint.complete_file);
    free(s->service.health_http);
    free(s);
    *spec = NULL;
}

const char *br_job_kind_name(br_job_kind_t kind)
{
    return kind == BR_JOB_SERVICE ? "service" : "train";
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
    json_object_set_new(r, "gpu_model",
                        list_json(s->resources.gpu_model, s->resources.n_gpu_model));
    json_object_set_new(r, "labels", json_deep_copy(s->resources.labels));
    json_object_set_new(r, "spread",
                        json_string(s->resources.spread_any ? "any" : "site"));
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
    json_object_set_new(j, "env", s->env ? json_deep_copy(s->env) : json_object());
    json_object_set_new(j, "resources", resources_json(s));
    json_object_set_new(j, "model", model_json(s));
    json_object_set_new(j, "checkpoint", checkpoint_json(s));
    json_object_set_new(j, "restart", restart_json(s));
    json_object_set_new(j, "priority", json_integer(s->priority));
    json_object_set_new(j, "time_limit", json_integer(s->time_limit_ms));
    json_object_set_new(j, "service", service_json(s));
    return j;
}
