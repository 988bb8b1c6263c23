/* gpuhist.c - the last hour of each GPU's figures (see gpuhist.h). */
#include "gpuhist.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

typedef struct {
    char node[64];
    int gpu;
    int64_t slot; /* the newest slot written: unix ms / BR_GPUHIST_STEP_MS */
    float util[BR_GPUHIST_SLOTS], power[BR_GPUHIST_SLOTS];
} gpu_t;

struct br_gpuhist {
    gpu_t *v; /* BR_GPUHIST_GPUS_MAX, made at the first sample */
    size_t n;
    int64_t sampled; /* monotonic ms */
};

br_gpuhist_t *br_gpuhist_new(void)
{
    return calloc(1, sizeof(br_gpuhist_t));
}

void br_gpuhist_destroy(br_gpuhist_t **hp)
{
    if (!hp || !*hp)
        return;
    free((*hp)->v);
    free(*hp);
    *hp = NULL;
}

int br_gpuhist_due(br_gpuhist_t *h, int64_t now_mono_ms)
{
    if (h->sampled && now_mono_ms - h->sampled < 1000)
        return 0;
    h->sampled = now_mono_ms;
    return 1;
}

static gpu_t *find(const br_gpuhist_t *h, const char *node, int gpu)
{
    for (size_t i = 0; i < h->n; i++)
        if (h->v[i].gpu == gpu && strcmp(h->v[i].node, node) == 0)
            return &h->v[i];
    return NULL;
}

void br_gpuhist_sample(br_gpuhist_t *h, const char *node, int gpu, double util,
                       double power, int64_t now_ms)
{
    int64_t slot = now_ms / BR_GPUHIST_STEP_MS;
    gpu_t *g = find(h, node, gpu);
    if (!g) {
        if (h->n == BR_GPUHIST_GPUS_MAX)
            return;
        if (!h->v && !(h->v = calloc(BR_GPUHIST_GPUS_MAX, sizeof(*h->v))))
            return;
        g = &h->v[h->n++];
        br_strlcpy(g->node, node, sizeof(g->node));
        g->gpu = gpu;
        g->slot = slot - BR_GPUHIST_SLOTS; /* all unknown */
    }
    for (int64_t s = g->slot + 1; s < slot && s <= g->slot + BR_GPUHIST_SLOTS; s++) {
        g->util[s % BR_GPUHIST_SLOTS] = NAN; /* slots nobody sampled */
        g->power[s % BR_GPUHIST_SLOTS] = NAN;
    }
    if (slot < g->slot)
        return; /* the clock went back: the slot is gone */
    g->slot = slot;
    g->util[slot % BR_GPUHIST_SLOTS] = (float)util;
    g->power[slot % BR_GPUHIST_SLOTS] = (float)power;
}

/* Oldest first, one figure per slot up to now (null: unknown). */
static json_t *figures(const float *v, int64_t newest, int64_t now_slot)
{
    json_t *a = json_array();
    for (int64_t s = now_slot - BR_GPUHIST_SLOTS + 1; s <= now_slot; s++) {
        float x = s <= newest && s > newest - BR_GPUHIST_SLOTS ? v[s % BR_GPUHIST_SLOTS]
                                                               : NAN;
        json_array_append_new(a, isnan(x) ? json_null() : json_real(x));
    }
    return a;
}

void br_gpuhist_attach(const br_gpuhist_t *h, json_t *answer, int64_t now_ms)
{
    int64_t now_slot = now_ms / BR_GPUHIST_STEP_MS;
    size_t i, k;
    json_t *n, *g;
    if (!h->n)
        return;
    json_array_foreach (json_object_get(answer, "nodes"), i, n) {
        const char *name = json_string_value(json_object_get(n, "name"));
        json_array_foreach (json_object_get(n, "gpus"), k, g) {
            json_t *idx = json_object_get(g, "index");
            const gpu_t *x = name && json_is_integer(idx)
                                 ? find(h, name, (int)json_integer_value(idx))
                                 : NULL;
            if (x && json_is_object(g))
                json_object_set_new(
                    g, "history",
                    json_pack("{s:i, s:o, s:o}", "step", BR_GPUHIST_STEP_MS / 1000,
                              "util", figures(x->util, x->slot, now_slot), "power",
                              figures(x->power, x->slot, now_slot)));
        }
    }
}
