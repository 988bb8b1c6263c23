/* output.c - how the CLI speaks: error lines, usage errors, JSON, times, sizes and
 * aligned tables. */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "util.h"

static void __attribute__((format(printf, 2, 0)))
vsay(const cli_t *cli, const char *fmt, va_list ap)
{
    fflush(stdout);
    fprintf(stderr, "bramble: ");
    if (cli && cli->cmd)
        fprintf(stderr, "%s: ", cli->cmd);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
}

void cli_err(const cli_t *cli, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsay(cli, fmt, ap);
    va_end(ap);
}

int cli_fail(const cli_t *cli, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsay(cli, fmt, ap);
    va_end(ap);
    return CLI_FAIL;
}

int cli_usage(const cli_t *cli, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsay(cli, fmt, ap);
    va_end(ap);
    if (cli && cli->cmd)
        fprintf(stderr, "Try 'bramble %s --help'.\n", cli->cmd);
    else
        fprintf(stderr, "Try 'bramble --help'.\n");
    return CLI_USAGE;
}

int cli_bad_option(const cli_t *cli, int c, char **argv)
{
    const char *arg = optind > 0 ? argv[optind - 1] : "";
    char shortopt[3] = {'-', (char)optopt, 0};
    /* A long option is named by its argument; a short one by optopt. */
    const char *name = (strncmp(arg, "--", 2) == 0 || !optopt) ? arg : shortopt;
    if (c == ':')
        return cli_usage(cli, "option '%s' needs a value", name);
    return cli_usage(cli, "unknown or misused option '%s'", name);
}

int cli_positional(const cli_t *cli, int argc, char **argv, int npos,
                   const char *const *names, const char **pos)
{
    int have = argc - optind;
    if (have < npos)
        return cli_usage(cli, "missing %s", names[have]);
    if (have > npos)
        return cli_usage(cli, "unexpected argument '%s'", argv[optind + npos]);
    for (int i = 0; i < npos; i++)
        pos[i] = argv[optind + i];
    return 0;
}

int cli_args(const cli_t *cli, int argc, char **argv, int *json, int npos,
             const char *const *names, const char **pos)
{
    static const struct option opts[] = {{"json", no_argument, NULL, 'j'}, {0}};
    int c;
    while ((c = getopt_long(argc, argv, ":", json ? opts : opts + 1, NULL)) != -1) {
        if (c == 'j')
            *json = 1;
        else
            return cli_bad_option(cli, c, argv);
    }
    return cli_positional(cli, argc, argv, npos, names, pos);
}

int cli_parse_long(const cli_t *cli, const char *what, const char *s, long min,
                   long max, long *out)
{
    char *end = NULL;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (*s && !*end && !errno && v >= min && v <= max) {
        *out = v;
        return 0;
    }
    if (max == LONG_MAX)
        return cli_usage(cli, "bad %s '%s' (a whole number, at least %ld)", what, s,
                         min);
    return cli_usage(cli, "bad %s '%s' (a number from %ld to %ld)", what, s, min, max);
}

int cli_parse_ms(const cli_t *cli, const char *what, const char *s, int64_t *ms)
{
    br_err_t err = {0};
    if (br_parse_duration(s, ms, &err) == 0 && *ms > INT_MAX)
        return cli_usage(cli, "%s: '%s' is too long (at most %dms, about 24 days)", what,
                         s, INT_MAX);
    if (err.errnum && strstr(err.text, "too long"))
        return cli_usage(cli, "%s: %s", what, err.text);
    if (err.errnum || *ms < 0)
        return cli_usage(cli, "%s: bad duration '%s' (use e.g. 500ms, 5s, 10m, 12h)",
                         what, s);
    return 0;
}

void cli_print_json(const json_t *v)
{
    json_dumpf(v, stdout, JSON_INDENT(2) | JSON_ENCODE_ANY);
    fputc('\n', stdout);
}

void cli_print_json_line(const json_t *v)
{
    json_dumpf(v, stdout, JSON_COMPACT | JSON_ENCODE_ANY);
    fputc('\n', stdout);
}

char *cli_fmt_time(const json_t *t, char *buf, size_t len)
{
    if (!json_is_number(t)) {
        br_strlcpy(buf, "-", len);
        return buf;
    }
    time_t secs = (time_t)json_number_value(t);
    struct tm tm;
    if (!localtime_r(&secs, &tm) || !strftime(buf, len, "%Y-%m-%d %H:%M:%S", &tm))
        br_strlcpy(buf, "-", len);
    return buf;
}

char *cli_fmt_ago(const json_t *t, char *buf, size_t len)
{
    if (!json_is_number(t)) {
        br_strlcpy(buf, "-", len);
        return buf;
    }
    double diff = br_now_ms() / 1000.0 - json_number_value(t);
    int future = diff < 0;
    long s = (long)(future ? -diff : diff);
    char n[32];
    if (s < 60)
        snprintf(n, sizeof(n), "%lds", s);
    else if (s < 3600)
        snprintf(n, sizeof(n), "%ldm", s / 60);
    else if (s < 86400)
        snprintf(n, sizeof(n), "%ldh", s / 3600);
    else
        snprintf(n, sizeof(n), "%ldd", s / 86400);
    snprintf(buf, len, future ? "in %s" : "%s ago", n);
    return buf;
}

char *cli_fmt_size(const json_t *bytes, char *buf, size_t len)
{
    if (!json_is_number(bytes) || json_number_value(bytes) < 0) {
        br_strlcpy(buf, "-", len);
        return buf;
    }
    return br_format_size((uint64_t)json_number_value(bytes), buf, len);
}

char *cli_fmt_value(const json_t *v, char *buf, size_t len)
{
    if (json_is_string(v))
        br_strlcpy(buf, json_string_value(v), len);
    else if (json_is_integer(v))
        snprintf(buf, len, "%lld", (long long)json_integer_value(v));
    else if (json_is_real(v))
        snprintf(buf, len, "%g", json_real_value(v));
    else if (json_is_boolean(v))
        br_strlcpy(buf, json_is_true(v) ? "yes" : "no", len);
    else
        br_strlcpy(buf, "-", len);
    return buf;
}

char *cli_fmt_list(const json_t *arr, const char *sep, char *buf, size_t len)
{
    size_t i, used = 0;
    json_t *v;
    buf[0] = 0;
    json_array_foreach(arr, i, v) {
        char one[256];
        cli_fmt_value(v, one, sizeof(one));
        int n = snprintf(buf + used, len - used, "%s%s", i ? sep : "", one);
        if (n < 0 || (size_t)n >= len - used)
            break;
        used += (size_t)n;
    }
    if (!buf[0])
        br_strlcpy(buf, "-", len);
    return buf;
}

void cli_sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

/* ---- tables */

struct cli_table {
    int ncols;
    size_t nrows, cap; /* rows, header included */
    char **cells;      /* nrows * ncols */
};

cli_table_t *cli_table_new(int ncols, const char *const *headers)
{
    cli_table_t *t = calloc(1, sizeof(*t));
    if (!t)
        return NULL;
    t->ncols = ncols;
    if (cli_table_add(t, headers) < 0)
        cli_table_destroy(&t);
    return t;
}

void cli_table_destroy(cli_table_t **t)
{
    if (!t || !*t)
        return;
    for (size_t i = 0; i < (*t)->nrows * (size_t)(*t)->ncols; i++)
        free((*t)->cells[i]);
    free((*t)->cells);
    free(*t);
    *t = NULL;
}

char *cli_escape(const char *s, size_t n)
{
    size_t cap = n * 4 + 1, o = 0; /* every byte at most 4: \xNN */
    char *out = malloc(cap);
    if (!out)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == 0xC2 && i + 1 < n && (unsigned char)s[i + 1] >= 0x80 &&
            (unsigned char)s[i + 1] <= 0x9F) { /* a C1 control (U+0080..U+009F) */
            o += (size_t)snprintf(out + o, cap - o, "\\x%02x", (unsigned char)s[++i]);
        } else if (ch < 0x20 || ch == 0x7F) {
            const char *named = ch == '\n'   ? "\\n"
                                : ch == '\t' ? "\\t"
                                : ch == '\r' ? "\\r"
                                              : NULL;
            o += named ? (size_t)snprintf(out + o, cap - o, "%s", named)
                       : (size_t)snprintf(out + o, cap - o, "\\x%02x", ch);
        } else {
            out[o++] = (char)ch;
        }
    }
    out[o] = '\0';
    return out;
}

void cli_put_text(FILE *out, const char *s, size_t n)
{
    char *safe = cli_escape(s, n);
    fputs(safe ? safe : "?", out);
    free(safe);
}

int cli_table_add(cli_table_t *t, const char *const *cells)
{
    if (t->nrows == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 16;
        char **c = realloc(t->cells, cap * (size_t)t->ncols * sizeof(*c));
        if (!c)
            return -1;
        t->cells = c;
        t->cap = cap;
    }
    char **row = t->cells + t->nrows * (size_t)t->ncols;
    for (int i = 0; i < t->ncols; i++) { /* (no cell writes escapes on the terminal) */
        const char *cell = cells[i] ? cells[i] : "-";
        row[i] = cli_escape(cell, strlen(cell));
        if (!row[i]) {
            while (i-- > 0)
                free(row[i]);
            return -1;
        }
    }
    t->nrows++;
    return 0;
}

/* Display width of UTF-8 text: one column per code point (good enough here). */
static size_t text_width(const char *s)
{
    size_t w = 0;
    for (; *s; s++)
        if (((unsigned char)*s & 0xC0) != 0x80)
            w++;
    return w;
}

void cli_table_print(const cli_table_t *t, FILE *out)
{
    size_t width[32] = {0};
    int ncols = t->ncols < 32 ? t->ncols : 32;
    for (size_t r = 0; r < t->nrows; r++)
        for (int c = 0; c < ncols; c++) {
            size_t w = text_width(t->cells[r * (size_t)t->ncols + (size_t)c]);
            if (w > width[c])
                width[c] = w;
        }
    for (size_t r = 0; r < t->nrows; r++) {
        for (int c = 0; c < ncols; c++) {
            const char *cell = t->cells[r * (size_t)t->ncols + (size_t)c];
            if (c == ncols - 1) {
                fprintf(out, "%s\n", cell);
                break;
            }
            fprintf(out, "%s%*s", cell, (int)(width[c] - text_width(cell) + 2), "");
        }
    }
}

void cli_field(int width, const char *name, const char *value)
{
    const char *v = value && *value ? value : "-";
    printf("%-*s ", width, name);
    cli_put_text(stdout, v, strlen(v));
    putchar('\n');
}

void cli_field_json(int width, const json_t *obj, const char *key, const char *name)
{
    char buf[512];
    cli_field(width, name, cli_fmt_value(json_object_get(obj, key), buf, sizeof(buf)));
}

void cli_field_time(int width, const json_t *obj, const char *key, const char *name)
{
    char when[32], ago[32], buf[80];
    const json_t *t = json_object_get(obj, key);
    cli_fmt_time(t, when, sizeof(when));
    cli_fmt_ago(t, ago, sizeof(ago));
    snprintf(buf, sizeof(buf), json_is_number(t) ? "%s (%s)" : "%s", when, ago);
    cli_field(width, name, buf);
}

void cli_print_rows(const json_t *items, int ncols, const char *const *head,
                    cli_row_fn row)
{
    cli_table_t *t = cli_table_new(ncols, head);
    size_t i;
    json_t *item;
    json_array_foreach(items, i, item) {
        row(t, item);
    }
    cli_table_print(t, stdout);
    cli_table_destroy(&t);
}

void cli_print_list(const json_t *items, int json, int ncols, const char *const *head,
                    cli_row_fn row)
{
    if (!json) {
        cli_print_rows(items, ncols, head, row);
    } else if (items) {
        cli_print_json(items);
    } else {
        json_t *none = json_array();
        cli_print_json(none);
        json_decref(none);
    }
}
