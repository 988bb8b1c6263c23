/* power.h - what this node draws and what it costs per hour now: the GPUs' draw
 * (read from NVML every second or so) averaged over each heartbeat interval, plus
 * the node's baseline draw without GPUs working (--idle-watts), priced at
 * --power-price per kWh on top of the fixed --cost-per-hour. */
#ifndef BRAMBLE_POWER_H
#define BRAMBLE_POWER_H

#include <stdint.h>

typedef struct br_power br_power_t;

/* idle_w: the baseline draw in watts (0 or more), added to every mean. */
br_power_t *br_power_new(double idle_w);
void br_power_destroy(br_power_t **p);

/* One reading of the GPUs' total draw (watts) at now_ms (monotonic ms): it stands
 * for the time since the reading (or the take) before it, and after it until the
 * next one. */
void br_power_sample(br_power_t *p, int64_t now_ms, double gpu_w);

/* The mean draw in watts over the interval that ends at now_ms (the GPUs',
 * weighted by time, plus idle_w), and start the next interval there. The interval
 * begins at the previous take, or at the first reading; before any reading the
 * GPUs count as 0 W. */
double br_power_take(br_power_t *p, int64_t now_ms);

/* What a node costs per hour drawing watts: fixed + price_kwh * watts / 1000. */
double br_power_cost(double fixed_per_hour, double price_kwh, double watts);

#endif
