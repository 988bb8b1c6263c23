/* metrics.c - a page in Prometheus's text exposition format (see metrics.h). */
#include "metrics.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "textbuf.h"

struct br_metrics {
    br_textbuf_t text; /* the page (failed: out of memory while writing it) */
};

void br_histogram_init(br_histogram_t *h, const double *bounds, int n)
{
    memset(h, 0, sizeof(*h));
    if (n > BR_HISTOGRAM_MAX)
        n = BR_HISTOGRAM_MAX;
    for (int i = 0; i < n; i++)
        h->bounds[i] = bounds[i];
    h->n = n < 0 ? 0 : n;
}

void br_histogram_observe(br_histogram_t *h, double v)
{
    if (isnan(v))
        return;
    if (v < 0)
        v = 0;
    int i = 0;
    while (i < h->n && v > h->bounds[i])
        i++;
    h->counts[i]++;
    h->count++;
    h->sum += v;
}

br_metrics_t *br_metrics_new(void)
{
    return calloc(1, sizeof(br_metrics_t));
}

void br_metrics_destroy(br_metrics_t **mp)
{
    if (!mp || !*mp)
        return;
    br_textbuf_free(&(*mp)->text);
    free(*mp);
    *mp = NULL;
}

void br_metrics_reset(br_metrics_t *m)
{
    br_textbuf_reset(&m->text);
}

const char *br_metrics_text(const br_metrics_t *m, size_t *len)
{
    if (m->text.failed)
        return NULL;
    if (len)
        *len = m->text.len;
    return m->text.p ? m->text.p : "";
}

static void put(br_metrics_t *m, const char *s, size_t n)
{
    br_textbuf_put(&m->text, s, n);
}

static void puts_(br_metrics_t *m, const char *s)
{
    put(m, s, strlen(s));
}

/* s with \ and newline escaped (and " too when quoted: label values). */
static void put_escaped(br_metrics_t *m, const char *s, int quoted)
{
    for (; *s; s++) {
        if (*s == '\\')
            puts_(m, "\\\\");
        else if (*s == '\n')
            puts_(m, "\\n");
        else if (*s == '"' && quoted)
            puts_(m, "\\\"");
        else
            put(m, s, 1);
    }
}

char *br_metrics_number(double v, char *buf, size_t len)
{
    if (isnan(v))
        snprintf(buf, len, "NaN");
    else if (isinf(v))
        snprintf(buf, len, v > 0 ? "+Inf" : "-Inf");
    else if (fabs(v) < 1e15 && v == (double)(int64_t)v) /* a whole number */
        snprintf(buf, len, "%.0f", v);
    else {
        for (int prec = 6; prec <= 17; prec++) { /* the shortest that reads back */
            snprintf(buf, len, "%.*g", prec, v);
            if (strtod(buf, NULL) == v)
                break;
        }
    }
    return buf;
}

void br_metrics_family(br_metrics_t *m, const char *name, const char *type,
                       const char *help)
{
    puts_(m, "# HELP ");
    puts_(m, name);
    puts_(m, " ");
    put_escaped(m, help, 0);
    puts_(m, "\n# TYPE ");
    puts_(m, name);
    puts_(m, " ");
    puts_(m, type);
    puts_(m, "\n");
}

/* name{labels[,extra="value"]} value\n */
static void line(br_metrics_t *m, const char *name, const char *suffix,
                 const char *const *labels, const char *extra, const char *extra_value,
                 double value)
{
    char num[64];
    int first = 1;
    puts_(m, name);
    puts_(m, suffix);
    for (int i = 0; labels && labels[i]; i += 2) {
        puts_(m, first ? "{" : ",");
        first = 0;
        puts_(m, labels[i]);
        puts_(m, "=\"");
        put_escaped(m, labels[i + 1] ? labels[i + 1] : "", 1);
        puts_(m, "\"");
    }
    if (extra) {
        puts_(m, first ? "{" : ",");
        first = 0;
        puts_(m, extra);
        puts_(m, "=\"");
        puts_(m, extra_value);
        puts_(m, "\"");
    }
    if (!first)
        puts_(m, "}");
    puts_(m, " ");
    puts_(m, br_metrics_number(value, num, sizeof(num)));
    puts_(m, "\n");
}

void br_metrics_sample(br_metrics_t *m, const char *name, const char *const *labels,
                       double value)
{
    line(m, name, "", labels, NULL, NULL, value);
}

void br_metrics_histogram(br_metrics_t *m, const char *name, const char *const *labels,
                          const br_histogram_t *h)
{
    char le[64];
    uint64_t cum = 0;
    for (int i = 0; i < h->n; i++) {
        cum += h->counts[i];
        line(m, name, "_bucket", labels, "le",
             br_metrics_number(h->bounds[i], le, sizeof(le)), (double)cum);
    }
    line(m, name, "_bucket", labels, "le", "+Inf", (double)h->count);
    line(m, name, "_sum", labels, NULL, NULL, h->sum);
    line(m, name, "_count", labels, NULL, NULL, (double)h->count);
}
