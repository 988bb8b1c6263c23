/* conf.c - small YAML files of our own, read into and written from JSON objects. */
#include "conf.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <yaml.h>

#include "util.h"

#define MAX_DEPTH 8

static json_t *parse_node(yaml_parser_t *p, yaml_event_t *ev, int depth, br_err_t *err);

static int next_event(yaml_parser_t *p, yaml_event_t *ev, br_err_t *err)
{
    if (!yaml_parser_parse(p, ev))
        return br_errf(err, EINVAL, "line %zu: %s", p->problem_mark.line + 1,
                       p->problem ? p->problem : "YAML syntax error");
    return 0;
}

static json_t *parse_mapping(yaml_parser_t *p, int depth, br_err_t *err)
{
    json_t *obj = json_object();
    for (;;) {
        yaml_event_t k;
        if (next_event(p, &k, err) < 0)
            goto fail;
        if (k.type == YAML_MAPPING_END_EVENT) {
            yaml_event_delete(&k);
            return obj;
        }
        if (k.type != YAML_SCALAR_EVENT) {
            br_errf(err, EINVAL, "line %zu: keys must be plain words",
                    k.start_mark.line + 1);
            yaml_event_delete(&k);
            goto fail;
        }
        char *key = strdup((const char *)k.data.scalar.value);
        size_t line = k.start_mark.line + 1;
        yaml_event_delete(&k);
        yaml_event_t v;
        if (next_event(p, &v, err) < 0) {
            free(key);
            goto fail;
        }
        json_t *val = parse_node(p, &v, depth + 1, err);
        yaml_event_delete(&v);
        if (!val || json_object_get(obj, key)) {
            if (val)
                br_errf(err, EINVAL, "line %zu: duplicate key '%s'", line, key);
            json_decref(val);
            free(key);
            goto fail;
        }
        json_object_set_new(obj, key, val);
        free(key);
    }
fail:
    json_decref(obj);
    return NULL;
}

static json_t *parse_sequence(yaml_parser_t *p, int depth, br_err_t *err)
{
    json_t *arr = json_array();
    for (;;) {
        yaml_event_t v;
        if (next_event(p, &v, err) < 0)
            break;
        if (v.type == YAML_SEQUENCE_END_EVENT) {
            yaml_event_delete(&v);
            return arr;
        }
        json_t *val = parse_node(p, &v, depth + 1, err);
        yaml_event_delete(&v);
        if (!val)
            break;
        json_array_append_new(arr, val);
    }
    json_decref(arr);
    return NULL;
}

static json_t *parse_node(yaml_parser_t *p, yaml_event_t *ev, int depth, br_err_t *err)
{
    if (depth > MAX_DEPTH)
        return br_errp(err, EINVAL, "line %zu: nested too deeply",
                       ev->start_mark.line + 1);
    switch (ev->type) {
    case YAML_SCALAR_EVENT:
        return json_stringn((const char *)ev->data.scalar.value, ev->data.scalar.length);
    case YAML_MAPPING_START_EVENT:
        return parse_mapping(p, depth, err);
    case YAML_SEQUENCE_START_EVENT:
        return parse_sequence(p, depth, err);
    default:
        return br_errp(err, EINVAL, "line %zu: unsupported YAML (aliases or tags)",
                       ev->start_mark.line + 1);
    }
}

json_t *br_conf_parse(const char *text, size_t len, br_err_t *err)
{
    if (len > BR_CONF_MAX_BYTES)
        return br_errp(err, EFBIG, "larger than %d bytes", BR_CONF_MAX_BYTES);
    yaml_parser_t p;
    yaml_event_t ev;
    json_t *root = NULL;
    yaml_parser_initialize(&p);
    yaml_parser_set_input_string(&p, (const unsigned char *)text, len);
    /* stream start, document start, then the root node */
    for (int i = 0; i < 2; i++) {
        if (next_event(&p, &ev, err) < 0)
            goto done;
        int ok = ev.type == (i == 0 ? YAML_STREAM_START_EVENT : YAML_DOCUMENT_START_EVENT);
        yaml_event_delete(&ev);
        if (!ok) {
            br_errf(err, EINVAL, "empty document");
            goto done;
        }
    }
    if (next_event(&p, &ev, err) < 0)
        goto done;
    if (ev.type != YAML_MAPPING_START_EVENT) {
        yaml_event_delete(&ev);
        br_errf(err, EINVAL, "expected a mapping of key: value lines");
        goto done;
    }
    root = parse_node(&p, &ev, 0, err);
    yaml_event_delete(&ev);
done:
    yaml_parser_delete(&p);
    return root;
}

json_t *br_conf_load(const char *path, br_err_t *err)
{
    size_t len;
    char *text = br_read_file(path, BR_CONF_MAX_BYTES, &len, err);
    if (!text)
        return NULL;
    json_t *obj = br_conf_parse(text, len, err);
    free(text);
    if (!obj)
        br_err_prefix(err, "%s", path);
    return obj;
}

/* A string as a YAML scalar: single-quoted (quotes doubled) when it holds no control
 * characters, else double-quoted with escapes, so line breaks survive. */
static void put_string(FILE *f, const char *s)
{
    int plain = 1;
    for (const char *p = s; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f)
            plain = 0;
    fputc(plain ? '\'' : '"', f);
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (plain && ch == '\'')
            fputs("''", f);
        else if (plain)
            fputc(ch, f);
        else if (ch == '"' || ch == '\\')
            fprintf(f, "\\%c", ch);
        else if (ch == '\n')
            fputs("\\n", f);
        else if (ch == '\t')
            fputs("\\t", f);
        else if (ch < 0x20 || ch == 0x7f)
            fprintf(f, "\\x%02x", ch);
        else
            fputc(ch, f);
    }
    fputc(plain ? '\'' : '"', f);
}

static void put_scalar(FILE *f, const json_t *v)
{
    if (json_is_string(v))
        put_string(f, json_string_value(v));
    else if (json_is_integer(v))
        fprintf(f, "%lld", (long long)json_integer_value(v));
    else if (json_is_real(v))
        fprintf(f, "%.17g", json_real_value(v));
    else if (json_is_boolean(v))
        fputs(json_is_true(v) ? "true" : "false", f);
    else
        fputs("null", f);
}

/* Keys of plain words are written bare, anything else quoted. */
static void put_key(FILE *f, const char *k, int indent)
{
    int bare = *k != '\0' && *k != '-';
    for (const char *p = k; *p && bare; p++)
        bare = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
               (*p >= '0' && *p <= '9') || *p == '_' || *p == '-' || *p == '.';
    if (bare && (strcmp(k, "true") == 0 || strcmp(k, "false") == 0 ||
                 strcmp(k, "null") == 0 || strcmp(k, "yes") == 0 || strcmp(k, "no") == 0))
        bare = 0;
    fprintf(f, "%*s", indent, "");
    if (bare)
        fputs(k, f);
    else
        put_string(f, k);
    fputc(':', f);
}

static void put_value(FILE *f, const json_t *v, int indent)
{
    if (json_is_object(v)) {
        const char *k;
        json_t *x;
        if (json_object_size(v) == 0) {
            fputs(" {}\n", f);
            return;
        }
        fputc('\n', f);
        json_object_foreach((json_t *)v, k, x) {
            put_key(f, k, indent);
            put_value(f, x, indent + 2);
        }
    } else if (json_is_array(v)) {
        size_t i;
        json_t *x;
        if (json_array_size(v) == 0) {
            fputs(" []\n", f);
            return;
        }
        fputc('\n', f);
        json_array_foreach(v, i, x) {
            fprintf(f, "%*s-", indent, "");
            put_value(f, x, indent + 2);
        }
    } else {
        fputc(' ', f);
        put_scalar(f, v);
        fputc('\n', f);
    }
}

int br_conf_save(const char *path, const json_t *obj, mode_t mode, br_err_t *err)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f)
        return br_errf(err, errno, "%s: %s", path, strerror(errno));
    const char *k;
    json_t *x;
    json_object_foreach((json_t *)obj, k, x) {
        put_key(f, k, 0);
        put_value(f, x, 2);
    }
    fclose(f);
    int rc = br_write_file(path, buf, len, mode, err);
    free(buf);
    return rc;
}

const char *br_conf_str(const json_t *obj, const char *key)
{
    json_t *v = json_object_get(obj, key);
    return json_is_string(v) ? json_string_value(v) : NULL;
}
