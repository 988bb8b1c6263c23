/* jsontext.c - compact JSON text of a jansson value, as json_dumps writes it
 * (jsontext.h). */
#include "jsontext.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "textbuf.h"

/* The text is written into a br_textbuf_t; its failed flag also stands for
 * invalid UTF-8 and for nesting too deep. */

/* The length of the valid UTF-8 sequence at s (of at most n bytes) whose first
 * byte is 0x80 or more; 0 when it is not one (overlong, a surrogate, above
 * U+10FFFF, cut short). */
static size_t utf8_len(const unsigned char *s, size_t n)
{
    unsigned char c = s[0];
    size_t len;
    uint32_t cp;
    if (c >= 0xC2 && c <= 0xDF) {
        len = 2;
        cp = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        cp = c & 0x0F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        cp = c & 0x07;
    } else {
        return 0;
    }
    if (len > n)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    if ((len == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) ||
        (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)))
        return 0;
    return len;
}

/* What each byte below 0x80 becomes in a string: 0 itself, else its escape's
 * second character ('u' for \u00XX). */
static const char escape[128] = {
    ['\b'] = 'b', ['\f'] = 'f', ['\n'] = 'n', ['\r'] = 'r', ['\t'] = 't',
    ['"'] = '"',  ['\\'] = '\\',
};

/* The bytes a string cannot copy as they are: escaped, or the start of UTF-8 to
 * check. */
#define SPECIAL(c) ((c) < 0x20 || (c) >= 0x80 || (c) == '"' || (c) == '\\')

static void put_string(br_textbuf_t *o, const char *str, size_t n)
{
    static const char hex[] = "0123456789ABCDEF";
    const unsigned char *s = (const unsigned char *)str;
    br_textbuf_putc(o, '"');
    size_t run = 0; /* the start of the bytes that go as they are */
    for (size_t i = 0;;) {
        while (i < n && !SPECIAL(s[i]))
            i++;
        if (i == n || o->failed)
            break;
        unsigned char c = s[i];
        if (c >= 0x80) {
            size_t k = utf8_len(s + i, n - i);
            if (!k) {
                o->failed = 1;
                break;
            }
            i += k;
            continue;
        }
        br_textbuf_put(o, str + run, i - run);
        char e = escape[c] ? escape[c] : 'u';
        if (e == 'u') {
            char seq[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 0xF]};
            br_textbuf_put(o, seq, sizeof(seq));
        } else {
            char seq[2] = {'\\', e};
            br_textbuf_put(o, seq, sizeof(seq));
        }
        run = ++i;
    }
    br_textbuf_put(o, str + run, n - run);
    br_textbuf_putc(o, '"');
}

static void put_integer(br_textbuf_t *o, json_int_t v)
{
    char buf[24], *p = buf + sizeof(buf);
    /* (through unsigned: the lowest value has no positive twin) */
    unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
    do {
        *--p = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0)
        *--p = '-';
    br_textbuf_put(o, p, (size_t)(buf + sizeof(buf) - p));
}

/* A real as jansson writes it (shortest digits that read back the same): rare in
 * what bramble keeps, so jansson's own writer does it. */
static void put_real(br_textbuf_t *o, const json_t *v)
{
    char *text = json_dumps(v, JSON_ENCODE_ANY);
    if (!text) {
        o->failed = 1;
        return;
    }
    br_textbuf_put(o, text, strlen(text));
    free(text);
}

typedef struct {
    const char *key;
    size_t len;
    json_t *value;
} member_t;

/* As jansson orders keys: by their bytes, a key before its longer extensions. */
static int by_key(const void *x, const void *y)
{
    const member_t *a = x, *b = y;
    int c = memcmp(a->key, b->key, a->len < b->len ? a->len : b->len);
    return c ? c : (a->len > b->len) - (a->len < b->len);
}

static void put_value(br_textbuf_t *o, const json_t *v, int flags, int depth);

static void put_object(br_textbuf_t *o, const json_t *v, int flags, int depth)
{
    size_t n = json_object_size(v), i = 0;
    br_textbuf_putc(o, '{');
    if (!(flags & BR_JSONTEXT_SORT_KEYS) || n < 2) {
        for (void *it = json_object_iter((json_t *)v); it && !o->failed;
             it = json_object_iter_next((json_t *)v, it)) {
            if (i++)
                br_textbuf_putc(o, ',');
            put_string(o, json_object_iter_key(it), json_object_iter_key_len(it));
            br_textbuf_putc(o, ':');
            put_value(o, json_object_iter_value(it), flags, depth + 1);
        }
    } else {
        member_t *m = malloc(n * sizeof(*m));
        if (!m) {
            o->failed = 1;
            return;
        }
        for (void *it = json_object_iter((json_t *)v); it && i < n;
             it = json_object_iter_next((json_t *)v, it))
            m[i++] = (member_t){json_object_iter_key(it), json_object_iter_key_len(it),
                                json_object_iter_value(it)};
        qsort(m, i, sizeof(*m), by_key);
        for (size_t k = 0; k < i && !o->failed; k++) {
            if (k)
                br_textbuf_putc(o, ',');
            put_string(o, m[k].key, m[k].len);
            br_textbuf_putc(o, ':');
            put_value(o, m[k].value, flags, depth + 1);
        }
        free(m);
    }
    br_textbuf_putc(o, '}');
}

static void put_value(br_textbuf_t *o, const json_t *v, int flags, int depth)
{
    if (o->failed)
        return;
    if (depth > BR_JSONTEXT_MAX_DEPTH) {
        o->failed = 1;
        return;
    }
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        put_object(o, v, flags, depth);
        break;
    case JSON_ARRAY: {
        size_t n = json_array_size(v);
        br_textbuf_putc(o, '[');
        for (size_t i = 0; i < n && !o->failed; i++) {
            if (i)
                br_textbuf_putc(o, ',');
            put_value(o, json_array_get(v, i), flags, depth + 1);
        }
        br_textbuf_putc(o, ']');
        break;
    }
    case JSON_STRING:
        put_string(o, json_string_value(v), json_string_length(v));
        break;
    case JSON_INTEGER:
        put_integer(o, json_integer_value(v));
        break;
    case JSON_REAL:
        put_real(o, v);
        break;
    case JSON_TRUE:
        br_textbuf_put(o, "true", 4);
        break;
    case JSON_FALSE:
        br_textbuf_put(o, "false", 5);
        break;
    case JSON_NULL:
        br_textbuf_put(o, "null", 4);
        break;
    }
}

char *br_jsontext(const json_t *v, int flags, size_t *len)
{
    if (!v)
        return NULL;
    br_textbuf_t o = {0};
    put_value(&o, v, flags, 0);
    if (!o.failed && o.p) { /* (NUL-terminated as it was written) */
        if (len)
            *len = o.len;
        return o.p;
    }
    br_textbuf_free(&o);
    return NULL;
}
