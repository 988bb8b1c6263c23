/* gpulive.c - the GPUs' live figures from heartbeats, and their gauges (gpulive.h). */
#include "gpulive.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#define BAD "node.heartbeat: bad body: 'gpus'"

/* The figures an entry may carry besides "index", and what each must be. */
typedef enum { BYTES, PERCENT, WATTS, CELSIUS, COUNT } kind_t;
static const struct {
    const char *key;
    kind_t kind;
} figures[] = {
    {"vram_free", BYTES}, {"vram_used", BYTES}, {"util", PERCENT},
    {"power_w", WATTS},   {"temp_c", CELSIUS},  {"ecc_uncorrected", COUNT},
    {"xid_count", COUNT}, {"xid_last", COUNT},
};
#define NFIGURES ((int)(sizeof(figures) / sizeof(figures[0])))

static int figure_ok(kind_t kind, json_t *v)
{
    switch (kind) {
    case BYTES:
    case COUNT:
        return json_is_integer(v) && json_integer_value(v) >= 0;
    case PERCENT:
        return json_is_integer(v) && json_integer_value(v) >= 0 &&
               json_integer_value(v) <= 100;
    case WATTS:
        return json_is_number(v) && json_number_value(v) >= 0;
    case CELSIUS:
        return json_is_integer(v) && json_integer_value(v) > -274 &&
               json_integer_value(v) < 1000;
    }
    return 0;
}

static int entry_check(size_t i, json_t *e, br_err_t *err)
{
    const char *k;
    json_t *v;
    if (!json_is_object(e))
        return br_errf(err, EPROTO, BAD "[%zu] must be an object", i);
    json_t *index = json_object_get(e, "index");
    if (!json_is_integer(index) || json_integer_value(index) < 0 ||
        json_integer_value(index) >= BR_NODE_MAX_GPUS)
        return br_errf(err, EPROTO, BAD "[%zu]: 'index' must be 0..%d", i,
                       BR_NODE_MAX_GPUS - 1);
    json_object_foreach(e, k, v) {
        int f = 0;
        while (f < NFIGURES && strcmp(k, figures[f].key) != 0)
            f++;
        if (strcmp(k, "index") == 0)
            continue;
        if (f == NFIGURES)
            return br_errf(err, EPROTO, BAD "[%zu]: unknown key '%.40s'", i, k);
        if (!figure_ok(figures[f].kind, v))
            return br_errf(err, EPROTO, BAD "[%zu]: '%s' out of range or not a number",
                           i, k);
    }
    return 0;
}

int br_gpulive_check(json_t *gpus, br_err_t *err)
{
    size_t i;
    json_t *e;
    if (!json_is_array(gpus))
        return br_errf(err, EPROTO, BAD " must be an array");
    if (json_array_size(gpus) > BR_NODE_MAX_GPUS)
        return br_errf(err, EPROTO, BAD ": more than %d GPUs", BR_NODE_MAX_GPUS);
    json_array_foreach(gpus, i, e) {
        if (entry_check(i, e, err) < 0)
            return -1;
    }
    return 0;
}

static json_int_t int_of(json_t *o, const char *key)
{
    return json_integer_value(json_object_get(o, key));
}

/* XIDs that a program's own fault causes (a bad memory access, an exception, a
 * kernel it stopped): the GPU is fine, the node stays healthy. */
static int program_xid(json_int_t xid)
{
    static const json_int_t xids[] = {13, 31, 43, 45, 68, 69};
    for (size_t i = 0; i < sizeof(xids) / sizeof(xids[0]); i++)
        if (xid == xids[i])
            return 1;
    return 0;
}

/* A new hardware fault in e, against what g (the node's info) had: an XID since
 * the last one known (one that is not a program's own fault), or more uncorrected
 * ECC errors. Said in fault (empty when none). */
static void fault_of(json_t *g, json_t *e, int index, char *fault, size_t len)
{
    json_int_t xids = int_of(e, "xid_count"), last = int_of(e, "xid_last");
    json_int_t ecc = int_of(e, "ecc_uncorrected");
    if (xids > 0 && (xids != int_of(g, "xid_count") || last != int_of(g, "xid_last")) &&
        !program_xid(last) && !fault[0])
        snprintf(fault, len, "GPU %d: XID %lld (%lld since its agent started)", index,
                 (long long)last, (long long)xids);
    else if (ecc > int_of(g, "ecc_uncorrected") && !fault[0])
        snprintf(fault, len, "GPU %d: %lld uncorrected ECC error%s", index, (long long)ecc,
                 ecc == 1 ? "" : "s");
}

/* Set one GPU's figures from entry e; 1 when its VRAM to spare grew enough. */
static int take_one(br_node_t *n, int pos, json_t *g, json_t *e, char *fault, size_t len)
{
    fault_of(g, e, pos, fault, len);
    for (int f = 1; f < NFIGURES; f++) { /* all but vram_free, which follows */
        json_t *v = json_object_get(e, figures[f].key);
        if (v)
            json_object_set(g, figures[f].key, v);
        else
            json_object_del(g, figures[f].key);
    }
    json_t *fv = json_object_get(e, "vram_free");
    if (!fv)
        return 0; /* NVML could not say: the last figure stands */
    uint64_t total = (uint64_t)json_integer_value(json_object_get(g, "vram_total"));
    json_t *was = json_object_get(g, "vram_free");
    uint64_t old = json_is_integer(was) ? (uint64_t)json_integer_value(was) : total;
    uint64_t free_now = (uint64_t)json_integer_value(fv) + n->gpu_vram_used[pos];
    if (free_now > total)
        free_now = total;
    json_object_set_new(g, "vram_free", json_integer((json_int_t)free_now));
    /* what bramble's jobs hold on it (a whole GPU, or their VRAM), for the dashboard */
    json_object_set_new(g, "vram_held", json_integer((json_int_t)(
                                            n->gpu_whole[pos] > 0 ? total
                                                                  : n->gpu_vram_used[pos])));
    return free_now >= old + BR_GPULIVE_RESCHED;
}

int br_gpulive_take(br_node_t *n, json_t *gpus, char *fault, size_t len)
{
    size_t i;
    json_t *e;
    int rose = 0;
    fault[0] = '\0';
    json_array_foreach(gpus, i, e) {
        json_int_t index = json_integer_value(json_object_get(e, "index"));
        json_t *g = br_node_gpu(n, (int)index); /* GPU i is at position i (hello) */
        if (index < 0 || index >= BR_NODE_MAX_GPUS || !json_is_object(g) ||
            json_integer_value(json_object_get(g, "index")) != index)
            continue;
        rose |= take_one(n, (int)index, g, e, fault, len);
    }
    return (rose ? BR_GPULIVE_ROSE : 0) | (fault[0] ? BR_GPULIVE_FAULT : 0);
}

/* --- /metrics --------------------------------------------------------------------- */

static const struct {
    const char *name, *key, *help;
    double per; /* the figure is in 1/per of the gauge's unit */
} gauges[] = {
    {"bramble_gpu_memory_total_bytes", "vram_total", "Each GPU's memory (VRAM).", 1},
    {"bramble_gpu_memory_used_bytes", "vram_used",
     "VRAM in use on each GPU, by any process (NVML).", 1},
    {"bramble_gpu_utilization_ratio", "util",
     "Share of the last sample period each GPU was busy (NVML), 0 to 1.", 100},
    {"bramble_gpu_power_watts", "power_w", "Each GPU's power draw (NVML).", 1},
    {"bramble_gpu_temperature_celsius", "temp_c", "Each GPU's temperature (NVML).", 1},
    {"bramble_gpu_xid_errors", "xid_count",
     "XID errors each GPU reported since its agent started (NVML events).", 1},
    {"bramble_gpu_ecc_uncorrected_errors", "ecc_uncorrected",
     "Uncorrected ECC errors on each GPU since its driver loaded (NVML, volatile).", 1},
};

static int connected(const br_node_t *n)
{
    return n->route_len > 0 && n->state != BR_NODE_LOST;
}

void br_gpulive_page(br_metrics_t *m, br_nodes_t *nodes)
{
    for (size_t f = 0; f < sizeof(gauges) / sizeof(gauges[0]); f++) {
        br_metrics_family(m, gauges[f].name, "gauge", gauges[f].help);
        for (br_node_t *n = br_nodes_first(nodes); n; n = n->next) {
            for (int i = 0; connected(n) && i < br_node_gpu_count(n); i++) {
                json_t *g = br_node_gpu(n, i);
                json_t *v = json_object_get(g, gauges[f].key);
                if (!json_is_number(v))
                    continue;
                char index[16];
                const char *model = json_string_value(json_object_get(g, "model"));
                snprintf(index, sizeof(index), "%lld",
                         (long long)json_integer_value(json_object_get(g, "index")));
                const char *labels[] = {
                    "node", n->name, "gpu", index, "model", model ? model : "", NULL};
                br_metrics_sample(m, gauges[f].name, labels,
                                  json_number_value(v) / gauges[f].per);
            }
        }
    }
}
