/* power.c - a node's mean draw over each heartbeat interval, and its cost per hour. */
#include "power.h"

#include <errno.h>
#include <stdlib.h>

struct br_power {
    double idle_w;
    int have;        /* a reading came */
    double last_w;   /* the last reading, standing until the next */
    int64_t start;   /* the interval's start (ms) */
    int64_t covered; /* the interval is accounted for up to here (ms) */
    double acc;      /* watt-milliseconds since start */
};

br_power_t *br_power_new(double idle_w)
{
    br_power_t *p = calloc(1, sizeof(*p));
    if (p)
        p->idle_w = idle_w > 0 ? idle_w : 0;
    return p;
}

void br_power_destroy(br_power_t **p)
{
    if (!p || !*p)
        return;
    int saved = errno;
    free(*p);
    *p = NULL;
    errno = saved;
}

void br_power_sample(br_power_t *p, int64_t now_ms, double gpu_w)
{
    if (!p)
        return;
    if (!(gpu_w >= 0)) /* NaN too */
        gpu_w = 0;
    if (!p->have) {
        p->start = p->covered = now_ms;
    } else if (now_ms > p->covered) {
        p->acc += gpu_w * (double)(now_ms - p->covered);
        p->covered = now_ms;
    }
    p->last_w = gpu_w;
    p->have = 1;
}

double br_power_take(br_power_t *p, int64_t now_ms)
{
    if (!p)
        return 0;
    if (!p->have)
        return p->idle_w;
    if (now_ms > p->covered) {
        p->acc += p->last_w * (double)(now_ms - p->covered);
        p->covered = now_ms;
    }
    int64_t span = p->covered - p->start;
    double mean = span > 0 ? p->acc / (double)span : p->last_w;
    p->start = p->covered;
    p->acc = 0;
    return mean + p->idle_w;
}

double br_power_cost(double fixed_per_hour, double price_kwh, double watts)
{
    return fixed_per_hour + price_kwh * watts / 1000.0;
}
