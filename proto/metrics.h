/* metrics.h - a page in Prometheus's text exposition format (version 0.0.4):
 * families with their HELP and TYPE lines, samples with escaped label values, and
 * histograms with cumulative buckets, _sum and _count. Knows nothing of bramble:
 * the coordinator's stats.c (docs/metrics.md) and the gateway (docs/gateway.md)
 * each fill a page from their own state. */
#ifndef BRAMBLE_METRICS_H
#define BRAMBLE_METRICS_H

#include <stddef.h>
#include <stdint.h>

#define BR_HISTOGRAM_MAX 16 /* finite bucket bounds of one histogram */

/* A histogram as Prometheus wants it: counts per bucket (upper bounds ascending,
 * +Inf implied), the sum and the number of observations. A plain value: embed it. */
typedef struct {
    int n;                                 /* finite bounds in use */
    double bounds[BR_HISTOGRAM_MAX];       /* le of each bucket, ascending */
    uint64_t counts[BR_HISTOGRAM_MAX + 1]; /* per bucket, not cumulative; [n]: +Inf */
    uint64_t count;
    double sum;
} br_histogram_t;

/* Take bounds[0..n-1] (ascending; at most BR_HISTOGRAM_MAX are kept), no samples. */
void br_histogram_init(br_histogram_t *h, const double *bounds, int n);
/* Count one observation (NaN is ignored; negative values count as 0). */
void br_histogram_observe(br_histogram_t *h, double v);

typedef struct br_metrics br_metrics_t;

br_metrics_t *br_metrics_new(void);
void br_metrics_destroy(br_metrics_t **m);

/* Start a family: "# HELP name help" and "# TYPE name type" (type: counter, gauge,
 * histogram). Its samples follow; a family is written once per page. */
void br_metrics_family(br_metrics_t *m, const char *name, const char *type,
                       const char *help);
/* One sample line: name{k1="v1",...} value. labels: NULL, or key and value pairs
 * ending with a NULL key. Values are escaped (\\, \", \n). */
void br_metrics_sample(br_metrics_t *m, const char *name, const char *const *labels,
                       double value);
/* name_bucket{...,le="b"} (cumulative, +Inf last), name_sum and name_count. */
void br_metrics_histogram(br_metrics_t *m, const char *name, const char *const *labels,
                          const br_histogram_t *h);

/* The page so far (NUL-terminated) and its length; NULL when memory ran out while
 * writing it (a partial page is never handed out). */
const char *br_metrics_text(const br_metrics_t *m, size_t *len);
/* Empty the page to write another (the buffer is kept). */
void br_metrics_reset(br_metrics_t *m);

/* A number as Prometheus reads it: the shortest text that reads back the same,
 * "+Inf", "-Inf" or "NaN". Returns buf. */
char *br_metrics_number(double v, char *buf, size_t len);

#endif
