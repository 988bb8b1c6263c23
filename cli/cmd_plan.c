/* cmd_plan.c - bramble plan: the GPU memory a model needs per GPU, by strategy, from
 * the formulas of proto/plan.c (docs/planning.md), and which nodes could run it. */
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <string.h>

#include "cli.h"
#include "plan.h"
#include "util.h"

#define PLAN_FIT_TIMEOUT_MS 5000 /* node.list is optional: wait at most this long */
#define PLAN_MAX_STRATEGIES 4
#define OPT_FIELD 256 /* getopt value of a plan field's flag: OPT_FIELD + field */

static const char *const flags[] = {
    [BR_PLAN_F_PARAMS] = "--params", [BR_PLAN_F_MODE] = "--mode",
    [BR_PLAN_F_DTYPE] = "--dtype",   [BR_PLAN_F_GPUS] = "--gpus",
    [BR_PLAN_F_ZERO] = "--zero",     [BR_PLAN_F_SEQ_LEN] = "--seq-len",
    [BR_PLAN_F_BATCH] = "--batch",   [BR_PLAN_F_LAYERS] = "--layers",
    [BR_PLAN_F_HIDDEN] = "--hidden",
};
#define NFLAGS (sizeof(flags) / sizeof(flags[0]))

typedef struct {
    br_plan_in_t in;
    const char *arg[NFLAGS]; /* each flag's text as given, NULL when not */
    int json;
} plan_opts_t;

typedef struct {
    char name[32];
    br_plan_in_t in;
    br_plan_mem_t mem;
    json_t *fits; /* node names; empty when fitting was skipped */
} strategy_t;

/* ---- arguments */

static int parse_number(cli_t *cli, plan_opts_t *o, br_plan_field_t f, long min,
                        long max, long *out)
{
    return cli_parse_long(cli, flags[f], o->arg[f], min, max, out) ? CLI_USAGE : 0;
}

static int parse_words(cli_t *cli, plan_opts_t *o)
{
    br_err_t err = {0};
    if (!o->arg[BR_PLAN_F_PARAMS])
        return cli_usage(cli, "--params is required (e.g. --params 8B)");
    if (br_parse_count(o->arg[BR_PLAN_F_PARAMS], &o->in.params, &err) < 0)
        return cli_usage(cli, "--params: %s", err.text);
    if (!o->arg[BR_PLAN_F_MODE])
        return cli_usage(cli, "--mode is required (inference, lora, qlora or full)");
    if (br_plan_mode_parse(o->arg[BR_PLAN_F_MODE], &o->in.mode) < 0)
        return cli_usage(cli, "--mode '%s': use inference, lora, qlora or full",
                         o->arg[BR_PLAN_F_MODE]);
    const char *dtype = o->arg[BR_PLAN_F_DTYPE] ? o->arg[BR_PLAN_F_DTYPE] : "bf16";
    if (br_dtype_parse(dtype, &o->in.dtype) < 0)
        return cli_usage(cli, "--dtype '%s': use fp32, fp16, bf16, int8 or int4",
                         dtype);
    return 0;
}

static int parse_numbers(cli_t *cli, plan_opts_t *o)
{
    static const struct {
        br_plan_field_t f;
        long min, max;
    } nums[] = {{BR_PLAN_F_GPUS, 1, BR_PLAN_MAX_GPUS},
                {BR_PLAN_F_ZERO, 0, 3},
                {BR_PLAN_F_SEQ_LEN, 1, BR_PLAN_MAX_SEQ},
                {BR_PLAN_F_BATCH, 1, BR_PLAN_MAX_BATCH},
                {BR_PLAN_F_LAYERS, 1, BR_PLAN_MAX_LAYERS},
                {BR_PLAN_F_HIDDEN, 1, BR_PLAN_MAX_HIDDEN}};
    long v[sizeof(nums) / sizeof(nums[0])] = {1, 0, 0, 0, 0, 0};
    for (size_t i = 0; i < sizeof(nums) / sizeof(nums[0]); i++)
        if (o->arg[nums[i].f] &&
            parse_number(cli, o, nums[i].f, nums[i].min, nums[i].max, &v[i]) != 0)
            return CLI_USAGE;
    o->in.gpus = (int)v[0];
    o->in.zero = (int)v[1];
    o->in.seq_len = v[2];
    o->in.batch = v[3];
    o->in.layers = v[4];
    o->in.hidden = v[5];
    if (o->in.seq_len && !o->in.batch)
        return cli_usage(cli, "--seq-len needs --batch (the micro-batch per GPU)");
    if (o->in.batch && !o->in.seq_len)
        return cli_usage(cli, "--batch needs --seq-len");
    return 0;
}

static int parse_plan_args(cli_t *cli, int argc, char **argv, plan_opts_t *o)
{
    static const struct option opts[] = {
        {"params", required_argument, NULL, OPT_FIELD + BR_PLAN_F_PARAMS},
        {"mode", required_argument, NULL, OPT_FIELD + BR_PLAN_F_MODE},
        {"dtype", required_argument, NULL, OPT_FIELD + BR_PLAN_F_DTYPE},
        {"gpus", required_argument, NULL, OPT_FIELD + BR_PLAN_F_GPUS},
        {"zero", required_argument, NULL, OPT_FIELD + BR_PLAN_F_ZERO},
        {"seq-len", required_argument, NULL, OPT_FIELD + BR_PLAN_F_SEQ_LEN},
        {"batch", required_argument, NULL, OPT_FIELD + BR_PLAN_F_BATCH},
        {"layers", required_argument, NULL, OPT_FIELD + BR_PLAN_F_LAYERS},
        {"hidden", required_argument, NULL, OPT_FIELD + BR_PLAN_F_HIDDEN},
        {"json", no_argument, NULL, 'j'},
        {0}};
    int c;
    while ((c = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
        if (c == 'j')
            o->json = 1;
        else if (c >= OPT_FIELD && (size_t)(c - OPT_FIELD) < NFLAGS)
            o->arg[c - OPT_FIELD] = optarg;
        else
            return cli_bad_option(cli, c, argv);
    }
    if (cli_positional(cli, argc, argv, 0, NULL, NULL) != 0)
        return CLI_USAGE;
    if (parse_words(cli, o) != 0 || parse_numbers(cli, o) != 0)
        return CLI_USAGE;
    br_plan_field_t f = BR_PLAN_F_PARAMS;
    br_err_t err = {0};
    if (br_plan_check(&o->in, &f, &err) < 0)
        return cli_usage(cli, "%s %s: %s", flags[f], o->arg[f] ? o->arg[f] : "",
                         err.text);
    return 0;
}

/* ---- strategies */

static void free_strategies(strategy_t *s, int n)
{
    for (int i = 0; i < n; i++)
        json_decref(s[i].fits);
}

/* Full training: DDP and ZeRO 1..3 over the GPUs; the other modes: one. Returns
 * how many, or -1 after a usage error. */
static int make_strategies(cli_t *cli, const plan_opts_t *o, strategy_t *s)
{
    int n = o->in.mode == BR_PLAN_FULL ? PLAN_MAX_STRATEGIES : 1;
    for (int i = 0; i < n; i++) {
        br_plan_field_t f = BR_PLAN_F_PARAMS;
        br_err_t err = {0};
        s[i].in = o->in;
        if (o->in.mode == BR_PLAN_FULL)
            s[i].in.zero = i;
        br_plan_strategy(&s[i].in, s[i].name, sizeof(s[i].name));
        if (br_plan_compute(&s[i].in, &s[i].mem, &f, &err) < 0) {
            free_strategies(s, i);
            cli_usage(cli, "%s: %s", flags[f], err.text);
            return -1;
        }
        s[i].fits = json_array();
    }
    return n;
}

/* ---- fitting */

/* The cluster's nodes, or NULL with the reason: fitting is optional, so a missing
 * credential or a silent coordinator is not an error. */
static json_t *fetch_nodes(cli_t *cli, char *reason, size_t len)
{
    char path[CLI_PATH_MAX];
    br_cred_t cred = {0};
    br_err_t err = {0};
    json_t *r = NULL;
    br_cred_path(cli->cred_flag, path, sizeof(path));
    if (br_cred_load(path, &cred, &err) == 0) {
        br_client_t *c = br_client_new_cred(&cred, &err);
        int ms = cli->timeout_ms < PLAN_FIT_TIMEOUT_MS ? cli->timeout_ms
                                                       : PLAN_FIT_TIMEOUT_MS;
        if (c)
            r = br_client_call(c, "node.list", NULL, ms, &err);
        br_client_destroy(&c);
    }
    explicit_bzero(cred.secret_key, sizeof(cred.secret_key));
    json_t *nodes = json_incref(json_object_get(r, "nodes"));
    json_decref(r);
    if (!json_is_array(nodes)) {
        snprintf(reason, len, "%s", err.text[0] ? err.text : "no node list");
        json_decref(nodes);
        return NULL;
    }
    return nodes;
}

/* GPUs of node with at least need bytes free (vram_free, else vram_total). */
static int gpus_with(const json_t *node, uint64_t need)
{
    int n = 0;
    size_t i;
    json_t *g;
    json_array_foreach(json_object_get(node, "gpus"), i, g) {
        json_t *v = json_object_get(g, "vram_free");
        if (!json_is_integer(v))
            v = json_object_get(g, "vram_total");
        if (json_is_integer(v) && json_integer_value(v) >= 0 &&
            (uint64_t)json_integer_value(v) >= need)
            n++;
    }
    return n;
}

static void fit(const json_t *nodes, strategy_t *s)
{
    size_t i;
    json_t *node;
    json_array_foreach(nodes, i, node) {
        const char *name = json_string_value(json_object_get(node, "name"));
        const char *state = json_string_value(json_object_get(node, "state"));
        if (name && state && strcmp(state, "ready") == 0 &&
            gpus_with(node, s->mem.total) >= s->in.gpus)
            json_array_append_new(s->fits, json_string(name));
    }
}

/* ---- output */

static json_t *mem_json(const br_plan_mem_t *m)
{
    return json_pack(
        "{s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "weights", (json_int_t)m->weights,
        "gradients", (json_int_t)m->gradients, "optimizer", (json_int_t)m->optimizer,
        "activations", (json_int_t)m->activations, "kv_cache", (json_int_t)m->kv_cache,
        "overhead", (json_int_t)m->overhead, "total", (json_int_t)m->total);
}

static json_t *shape_json(const br_plan_in_t *in, const char *key)
{
    long layers, hidden;
    if (!in->seq_len)
        return json_null();
    br_plan_shape(in, &layers, &hidden);
    return json_integer(strcmp(key, "layers") == 0 ? layers : hidden);
}

static void print_plan_json(const plan_opts_t *o, const strategy_t *s, int n,
                            int checked)
{
    const br_plan_in_t *in = &o->in;
    json_t *list = json_array();
    for (int i = 0; i < n; i++)
        json_array_append_new(list,
                              json_pack("{s:s, s:o, s:O}", "name", s[i].name, "per_gpu",
                                        mem_json(&s[i].mem), "fits", s[i].fits));
    json_t *seq = in->seq_len ? json_integer(in->seq_len) : json_null();
    json_t *batch = in->batch ? json_integer(in->batch) : json_null();
    json_t *out = json_pack(
        "{s:I, s:s, s:s, s:i, s:i, s:o, s:o, s:o, s:o, s:b, s:o}", "params",
        (json_int_t)llround(in->params), "mode", br_plan_mode_name(in->mode), "dtype",
        br_dtype_name(in->dtype), "gpus", in->gpus, "zero", in->zero, "seq_len", seq,
        "batch", batch, "layers", shape_json(in, "layers"), "hidden",
        shape_json(in, "hidden"), "fits_checked", checked, "strategies", list);
    cli_print_json(out);
    json_decref(out);
}

static const char *size_or_dash(uint64_t v, char *buf, size_t len)
{
    return v ? br_format_size(v, buf, len) : strcpy(buf, "-");
}

static void plan_row(cli_table_t *t, const strategy_t *s, int infer, int checked)
{
    char w[32], g[32], op[32], tok[32], ov[32], tot[32], fits[512];
    uint64_t tokens = infer ? s->mem.kv_cache : s->mem.activations;
    if (!checked)
        strcpy(fits, "?");
    else if (json_array_size(s->fits) == 0)
        strcpy(fits, "none");
    else
        cli_fmt_list(s->fits, ",", fits, sizeof(fits));
    const char *cells[] = {s->name,
                           size_or_dash(s->mem.weights, w, sizeof(w)),
                           size_or_dash(s->mem.gradients, g, sizeof(g)),
                           size_or_dash(s->mem.optimizer, op, sizeof(op)),
                           size_or_dash(tokens, tok, sizeof(tok)),
                           size_or_dash(s->mem.overhead, ov, sizeof(ov)),
                           size_or_dash(s->mem.total, tot, sizeof(tot)),
                           fits};
    cli_table_add(t, cells);
}

static void print_heading(const plan_opts_t *o)
{
    const br_plan_in_t *in = &o->in;
    printf(
        "%s parameters (%.0f), %s, %s, %d GPU%s; sizes per GPU "
        "(formulas: docs/planning.md)\n",
        o->arg[BR_PLAN_F_PARAMS], round(in->params), br_plan_mode_name(in->mode),
        br_dtype_name(in->dtype), in->gpus, in->gpus == 1 ? "" : "s");
    if (!in->seq_len)
        return;
    long layers, hidden;
    br_plan_shape(in, &layers, &hidden);
    int infer = in->mode == BR_PLAN_INFERENCE;
    printf("%s for seq-len %ld x batch %ld%s; %ld layers x hidden %ld%s\n",
           infer ? "KV cache" : "activations", in->seq_len, in->batch,
           infer ? "" : " per GPU", layers, hidden,
           in->layers && in->hidden ? "" : " (derived from params)");
}

static void print_plan(const plan_opts_t *o, const strategy_t *s, int n, int checked)
{
    int infer = o->in.mode == BR_PLAN_INFERENCE;
    const char *head[] = {"STRATEGY",
                          "WEIGHTS",
                          "GRADIENTS",
                          "OPTIMIZER",
                          infer ? "KV CACHE" : "ACTIVATIONS",
                          "OVERHEAD",
                          "TOTAL/GPU",
                          "FITS"};
    print_heading(o);
    cli_table_t *t = cli_table_new(8, head);
    for (int i = 0; i < n; i++)
        plan_row(t, &s[i], infer, checked);
    cli_table_print(t, stdout);
    cli_table_destroy(&t);
    if (!checked)
        printf("(no cluster: skipped fitting)\n");
}

static int plan_run(cli_t *cli, int argc, char **argv)
{
    plan_opts_t o = {.in = {.gpus = 1}};
    strategy_t s[PLAN_MAX_STRATEGIES];
    if (parse_plan_args(cli, argc, argv, &o) != 0)
        return CLI_USAGE;
    int n = make_strategies(cli, &o, s);
    if (n < 0)
        return CLI_USAGE;
    char reason[BR_ERR_TEXT + 32];
    json_t *nodes = fetch_nodes(cli, reason, sizeof(reason));
    for (int i = 0; nodes && i < n; i++)
        fit(nodes, &s[i]);
    if (!nodes)
        cli_err(cli, "%s%s", reason, o.json ? " (no cluster: skipped fitting)" : "");
    if (o.json)
        print_plan_json(&o, s, n, nodes != NULL);
    else
        print_plan(&o, s, n, nodes != NULL);
    json_decref(nodes);
    free_strategies(s, n);
    return CLI_OK;
}

const cli_cmd_t cli_plan_cmds[] = {
    {NULL, "plan", plan_run,
     "--params N --mode MODE [--dtype T] [--gpus N] [--zero K] [--seq-len L "
     "--batch B] [--layers N] [--hidden N] [--json]",
     "estimate GPU memory per GPU for a model, and which nodes fit it",
     "Prints, per strategy, the memory each GPU needs (weights, gradients, optimizer\n"
     "states, activations or KV cache, overhead) from the published rules of thumb\n"
     "(docs/planning.md), and the ready nodes with enough GPUs that have that much\n"
     "VRAM free. Full training shows DDP and ZeRO stages 1-3 over --gpus. Without a\n"
     "credential or an answering coordinator, fitting is skipped.\n"
     "\nOptions:\n"
     "  --params N      parameter count: 350M, 8B, 70B, 7e9\n"
     "  --mode MODE     inference, lora, qlora or full (Adam, mixed precision)\n"
     "  --dtype T       fp32, fp16, bf16 (default), int8 or int4: the weights'\n"
     "                  dtype (inference, lora), the compute dtype (qlora, full)\n"
     "  --gpus N        GPUs the model is spread over (default 1)\n"
     "  --zero K        ZeRO stage 0-3 of lora and qlora (default 0); full\n"
     "                  training always shows every stage\n"
     "  --seq-len L     tokens per sequence; with --batch, adds activations\n"
     "                  (training) or the KV cache (inference)\n"
     "  --batch B       sequences at once (training: the micro-batch of each GPU)\n"
     "  --layers N      layer count (default derived from --params)\n"
     "  --hidden N      hidden size (default derived from --params)\n"
     "  --json          print one object: params, mode, dtype, gpus, zero,\n"
     "                  strategies [{name, per_gpu {...}, fits}] (bytes)\n"},
    {0},
};
