/* ledger.c - what the gateway answered, counted (see ledger.h). */
#include "ledger.h"

#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Request seconds and time to first token: from 5 ms to 5 minutes. */
static const double bounds[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                                1,     2.5,  5,     10,   30,  60,  300};
#define NBOUNDS ((int)(sizeof(bounds) / sizeof(bounds[0])))

typedef struct {
    char *name;
    json_t *codes; /* {"200": n, ...} */
    br_histogram_t seconds, ttft;
    int64_t prompt, completion;
} model_t;

struct gw_ledger {
    model_t *models; /* for /metrics, in the order first seen */
    size_t nmodels;
    json_t *rows;   /* "USER_ID\tMODEL" -> the report's row for them (ledger.h) */
    json_t *report; /* the report sent and not yet taken */
};

gw_ledger_t *gw_ledger_new(void)
{
    gw_ledger_t *l = calloc(1, sizeof(*l));
    if (l && !(l->rows = json_object())) {
        free(l);
        return NULL;
    }
    return l;
}

void gw_ledger_destroy(gw_ledger_t **lp)
{
    gw_ledger_t *l = lp ? *lp : NULL;
    if (!l)
        return;
    for (size_t i = 0; i < l->nmodels; i++) {
        free(l->models[i].name);
        json_decref(l->models[i].codes);
    }
    free(l->models);
    json_decref(l->rows);
    json_decref(l->report);
    free(l);
    *lp = NULL;
}

static model_t *model_of(gw_ledger_t *l, const char *name)
{
    for (size_t i = 0; i < l->nmodels; i++)
        if (strcmp(l->models[i].name, name) == 0)
            return &l->models[i];
    if (l->nmodels >= GW_LEDGER_MODELS_MAX && *name)
        return model_of(l, "");
    model_t *v = realloc(l->models, (l->nmodels + 1) * sizeof(*v));
    if (!v)
        return NULL;
    l->models = v;
    model_t *m = &v[l->nmodels];
    memset(m, 0, sizeof(*m));
    if (!(m->name = strdup(name)) || !(m->codes = json_object())) {
        free(m->name);
        return NULL;
    }
    br_histogram_init(&m->seconds, bounds, NBOUNDS);
    br_histogram_init(&m->ttft, bounds, NBOUNDS);
    l->nmodels++;
    return m;
}

static void bump(json_t *o, const char *key, int64_t by)
{
    json_t *n = json_object_get(o, key);
    json_object_set_new(o, key, json_integer((n ? json_integer_value(n) : 0) + by));
}

void gw_ledger_add(gw_ledger_t *l, const gw_answer_t *a)
{
    const char *name = a->model ? a->model : "";
    model_t *m = model_of(l, name);
    if (m) {
        char code[16];
        snprintf(code, sizeof(code), "%d", a->status);
        bump(m->codes, code, 1);
        br_histogram_observe(&m->seconds, a->seconds);
        if (a->ttft >= 0)
            br_histogram_observe(&m->ttft, a->ttft);
        m->prompt += a->prompt_tokens;
        m->completion += a->completion_tokens;
    }
    if (!*name)
        return; /* (no model: nothing for a user's usage) */
    char key[200];
    snprintf(key, sizeof(key), "%lld\t%s", (long long)a->user_id, name);
    json_t *row = json_object_get(l->rows, key);
    if (!row) {
        if (json_object_size(l->rows) >= GW_LEDGER_ROWS_MAX)
            return;
        row = json_pack("{s:I, s:s, s:i, s:i, s:i, s:i, s:i}", "user_id",
                        (json_int_t)a->user_id, "model", name, "requests", 0, "errors", 0,
                        "prompt_tokens", 0, "completion_tokens", 0, "ms", 0);
        if (!row || json_object_set_new(l->rows, key, row) < 0)
            return;
    }
    bump(row, "requests", 1);
    bump(row, "errors", a->status >= 400);
    bump(row, "prompt_tokens", a->prompt_tokens);
    bump(row, "completion_tokens", a->completion_tokens);
    bump(row, "ms", (int64_t)(a->seconds * 1000 + 0.5));
}

void gw_ledger_metrics(const gw_ledger_t *l, br_metrics_t *m)
{
    br_metrics_family(m, "bramble_gateway_requests_total", "counter",
                      "Requests answered, by model and status.");
    for (size_t i = 0; i < l->nmodels; i++) {
        const char *code;
        json_t *n;
        json_object_foreach(l->models[i].codes, code, n) {
            const char *labels[] = {"model", l->models[i].name, "code", code, NULL};
            br_metrics_sample(m, "bramble_gateway_requests_total", labels,
                              (double)json_integer_value(n));
        }
    }
    br_metrics_family(m, "bramble_gateway_request_seconds", "histogram",
                      "From a whole request to the end of its answer, by model.");
    for (size_t i = 0; i < l->nmodels; i++) {
        const char *labels[] = {"model", l->models[i].name, NULL};
        br_metrics_histogram(m, "bramble_gateway_request_seconds", labels,
                             &l->models[i].seconds);
    }
    br_metrics_family(m, "bramble_gateway_ttft_seconds", "histogram",
                      "From a whole request to the first byte of a replica's answer (the "
                      "first token of a stream), by model.");
    for (size_t i = 0; i < l->nmodels; i++) {
        const char *labels[] = {"model", l->models[i].name, NULL};
        br_metrics_histogram(m, "bramble_gateway_ttft_seconds", labels, &l->models[i].ttft);
    }
    br_metrics_family(m, "bramble_gateway_tokens_total", "counter",
                      "Tokens the replicas' answers said they used (their \"usage\"), by "
                      "model and kind.");
    for (size_t i = 0; i < l->nmodels; i++) {
        const char *p[] = {"model", l->models[i].name, "kind", "prompt", NULL};
        const char *c[] = {"model", l->models[i].name, "kind", "completion", NULL};
        br_metrics_sample(m, "bramble_gateway_tokens_total", p, (double)l->models[i].prompt);
        br_metrics_sample(m, "bramble_gateway_tokens_total", c,
                          (double)l->models[i].completion);
    }
}

const json_t *gw_ledger_report(gw_ledger_t *l)
{
    if (l->report)
        return l->report;
    if (!json_object_size(l->rows))
        return NULL;
    json_t *usage = json_array();
    const char *key;
    json_t *row;
    json_object_foreach(l->rows, key, row)
        json_array_append(usage, row);
    unsigned char raw[12];
    char id[sizeof(raw) * 2 + 1];
    randombytes_buf(raw, sizeof(raw));
    sodium_bin2hex(id, sizeof(id), raw, sizeof(raw));
    l->report = json_pack("{s:s, s:o}", "id", id, "usage", usage);
    if (l->report)
        json_object_clear(l->rows); /* (counted from here into the next) */
    return l->report;
}

void gw_ledger_reported(gw_ledger_t *l, const char *id)
{
    if (l->report && id && strcmp(json_string_value(json_object_get(l->report, "id")), id) == 0) {
        json_decref(l->report);
        l->report = NULL;
    }
}
