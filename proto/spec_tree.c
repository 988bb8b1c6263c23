/* spec_tree.c - inside the job spec parser: YAML text -> a tree of nodes that
 * remember their lines, and error texts that name those lines. */
#include "spec_tree.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "util.h"

/* ---- the tree of YAML nodes ---------------------------------------------------- */

node_t *spec_node_new(int type, int line)
{
    node_t *n = calloc(1, sizeof(*n));
    if (n) {
        n->type = type;
        n->line = line;
    }
    return n;
}

void spec_node_free(node_t *n)
{
    if (!n)
        return;
    for (size_t i = 0; i < n->n; i++)
        spec_node_free(n->kids[i]);
    free(n->kids);
    free(n->text);
    free(n->key);
    free(n);
}

/* Append kid to a collection; frees kid on failure. */
int spec_node_push(node_t *n, node_t *kid)
{
    if (n->n == n->cap) {
        size_t cap = n->cap ? n->cap * 2 : 4;
        node_t **kids = realloc(n->kids, cap * sizeof(*kids));
        if (!kids) {
            spec_node_free(kid);
            return -1;
        }
        n->kids = kids;
        n->cap = cap;
    }
    n->kids[n->n++] = kid;
    return 0;
}

node_t *spec_find(const node_t *map, const char *key)
{
    if (!map || map->type != N_MAP)
        return NULL;
    for (size_t i = 0; i < map->n; i++)
        if (strcmp(map->kids[i]->key, key) == 0)
            return map->kids[i];
    return NULL;
}

int spec_in_list(const char *s, const char *const *list)
{
    for (int i = 0; list[i]; i++)
        if (strcmp(s, list[i]) == 0)
            return i;
    return -1;
}

int spec_is_null(const node_t *n)
{
    static const char *const nulls[] = {"", "~", "null", "Null", "NULL", NULL};
    return n->type == N_SCALAR && n->plain && spec_in_list(n->text, nulls) >= 0;
}

/* Mark a tree as coming from --set (no line of the spec text). */
void spec_mark_set(node_t *n)
{
    n->line = 0;
    n->key_line = 0;
    for (size_t i = 0; i < n->n; i++)
        spec_mark_set(n->kids[i]);
}

const char *spec_type_name(const node_t *n)
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
const char *spec_show(const char *s, char *buf)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t o = 0;
    while (*p) {
        size_t n = utf8_len(p);
        if (o + (n ? n : 1) > SPEC_SHOW_LEN - 4) {
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

/* "line 7: msg" for spec text, "--set: msg" for --set values, else just msg. */
int spec_fail_at(br_err_t *err, int line, const char *fmt, ...)
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

int spec_oom(br_err_t *err)
{
    return br_errf(err, ENOMEM, "spec: out of memory");
}

/* ---- YAML text -> tree --------------------------------------------------------- */

#define SPEC_YAML_KEY_MAX 1024 /* libyaml: a simple key fits on 1024 characters */

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
    char msg[BR_ERR_TEXT], b[SPEC_SHOW_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (r->set_path)
        return br_errf(r->err, EINVAL, "--set %s: %s", spec_show(r->set_path, b), msg);
    return br_errf(r->err, EINVAL, "line %d: %s", line, msg);
}

/* 1 when the line holding byte offset off of the input is longer than libyaml's
 * limit for a simple key (1024 characters). */
static int long_line(const reader_t *r, size_t off)
{
    if (!r->text || off > r->len)
        return 0;
    size_t start = off, end = off;
    while (start > 0 && r->text[start - 1] != '\n')
        start--;
    while (end < r->len && r->text[end] != '\n')
        end++;
    return end - start > SPEC_YAML_KEY_MAX;
}

static int yaml_fail(reader_t *r)
{
    yaml_parser_t *p = &r->p;
    const char *what = p->problem ? p->problem : "syntax error";
    if (p->error == YAML_MEMORY_ERROR)
        return spec_oom(r->err);
    if (p->error == YAML_READER_ERROR) {
        int line = 1;
        for (size_t i = 0; i < p->problem_offset && i < r->len; i++)
            line += r->text[i] == '\n';
        return rd_fail(r, line, "invalid YAML: %s", what);
    }
    int line = (int)p->problem_mark.line + 1;
    /* libyaml gives up on a plain key longer than 1024 characters with a puzzling
     * scanner error: name the limit when the line is that long */
    const char *hint = long_line(r, p->problem_mark.index) ||
                               long_line(r, p->context_mark.index)
                           ? "; keys are at most 1024 characters, and this line is longer"
                           : "";
    if (p->context)
        return rd_fail(r, line, "invalid YAML: %s (%s)%s", what, p->context, hint);
    return rd_fail(r, line, "invalid YAML: %s%s", what, hint);
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
    return *out ? 0 : spec_oom(r->err);
}

static int parse_node(reader_t *r, yaml_event_t *ev, int depth, node_t **out);

static int add_kid(reader_t *r, node_t *n, node_t *kid, int line)
{
    if (n->n >= SPEC_MAX_ENTRIES) {
        spec_node_free(kid);
        return rd_fail(r, line, "more than %d entries", SPEC_MAX_ENTRIES);
    }
    return spec_node_push(n, kid) < 0 ? spec_oom(r->err) : 0;
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
    if (rc == 0 && spec_find(n, *key)) {
        char b[SPEC_SHOW_LEN];
        rc = rd_fail(r, *line, "duplicate key '%s'", spec_show(*key, b));
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
    if (depth >= SPEC_MAX_DEPTH)
        return rd_fail(r, line, "nesting deeper than %d levels", SPEC_MAX_DEPTH);
    node_t *n = spec_node_new(type, line);
    if (!n)
        return spec_oom(r->err);
    int rc = type == N_SEQ ? parse_seq(r, n, depth + 1) : parse_map(r, n, depth + 1);
    if (rc < 0) {
        spec_node_free(n);
        return -1;
    }
    *out = n;
    return 0;
}

static int parse_scalar(reader_t *r, yaml_event_t *ev, int line, node_t **out)
{
    node_t *n = spec_node_new(N_SCALAR, line);
    int rc = n ? scalar_text(r, ev, &n->text) : spec_oom(r->err);
    if (rc == 0) {
        n->plain = ev->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
        *out = n;
    } else {
        spec_node_free(n);
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
        spec_node_free(*root);
        *root = NULL;
        return -1;
    }
    return 0;
}

/* Parse YAML text; set_path names the --set being read (NULL for the spec). */
int spec_parse_text(const char *text, size_t len, const char *set_path, node_t **root,
                    br_err_t *err)
{
    reader_t r = {.text = text ? text : "",
                  .len = text ? len : 0,
                  .set_path = set_path,
                  .err = err};
    if (!yaml_parser_initialize(&r.p))
        return spec_oom(err);
    yaml_parser_set_input_string(&r.p, (const unsigned char *)r.text, r.len);
    int rc = parse_stream(&r, root);
    yaml_parser_delete(&r.p);
    return rc;
}
