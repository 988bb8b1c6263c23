/* gpuhist.h - the last hour of each GPU's utilisation and power, for the
 * dashboard's sparklines. The loop samples every GPU's live figures (gpulive.h)
 * into slots of BR_GPUHIST_STEP_MS, the last figure of a slot standing for it, and
 * attaches them to node.list's answers on their way to the dashboard. In memory
 * only (a restarted coordinator starts a new hour); one thread (the loop) uses it. */
#ifndef BRAMBLE_GPUHIST_H
#define BRAMBLE_GPUHIST_H

#include <jansson.h>
#include <stdint.h>

#define BR_GPUHIST_SLOTS 240     /* an hour */
#define BR_GPUHIST_STEP_MS 15000 /* of 15 s slots */
#define BR_GPUHIST_GPUS_MAX 1024 /* GPUs remembered at most; more are not */

typedef struct br_gpuhist br_gpuhist_t;

br_gpuhist_t *br_gpuhist_new(void);
void br_gpuhist_destroy(br_gpuhist_t **h);

/* 1 at most once a second (monotonic ms): time to sample every GPU again. */
int br_gpuhist_due(br_gpuhist_t *h, int64_t now_mono_ms);
/* GPU gpu of node: its figures at now_ms (unix ms); NAN when unknown. */
void br_gpuhist_sample(br_gpuhist_t *h, const char *node, int gpu, double util,
                       double power, int64_t now_ms);
/* Each GPU of a node.list answer ({"nodes": [{"name", "gpus": [{"index"}...]}]})
 * that has a history gains "history": {"step": s, "util": [...], "power": [...]},
 * BR_GPUHIST_SLOTS figures up to now_ms, oldest first, null where unknown. */
void br_gpuhist_attach(const br_gpuhist_t *h, json_t *answer, int64_t now_ms);

#endif
