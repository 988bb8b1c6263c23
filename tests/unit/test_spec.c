/* test_spec.c - unit tests for the job spec parser (proto/spec.c). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "spec.h"

#define GIB (1024ULL * 1024 * 1024)

/* The example of ARCHITECTURE.md, verbatim (it gives both model and vram, and a
 * service section on a train job, so it is refused as it stands). */
static const char example[] =
    "name: llama-lora            # required; [a-z0-9-], unique among active jobs\n"
    "kind: train                 # train: runs to completion, restarted on failure\n"
    "                            # service: kept running (inference), see below\n"
    "command: python3 train.py --resume \"$BRAMBLE_RESUME_FROM\"\n"
    "workdir: /srv/llama          # optional\n"
    "env: {HF_HOME: /srv/hf}      # optional\n"
    "resources:\n"
    "  nodes: 2                  # gang size; all nodes start together or none\n"
    "  tasks_per_node: gpus      # 1 (default: one process per node, e.g. torchrun)\n"
    "                            # or gpus (one process per GPU, RANK set per task)\n"
    "  gpus: 4                   # per node\n"
    "  vram: 24GiB               # minimum free per GPU\n"
    "  cpus: 8\n"
    "  memory: 32GiB\n"
    "  arch: [x86_64, aarch64]   # optional\n"
    "  gpu_model: [RTX 4090, A100]  # optional, substring match\n"
    "  labels: {site: home}      # optional, all must match\n"
    "model:                      # optional: size the job from the model instead\n"
    "  params: 8B                #   of giving vram (see `bramble plan`)\n"
    "  mode: lora                # inference | lora | qlora | full\n"
    "  dtype: bf16\n"
    "checkpoint:\n"
    "  dir: /srv/llama/ckpt      # where the job writes checkpoints\n"
    "  pattern: \"checkpoint-*\"   # entries that are checkpoints; step = last number\n"
    "  complete_file: trainer_state.json  # optional marker: only then complete\n"
    "restart:\n"
    "  max: 5                    # restarts after node loss or failure\n"
    "  on: [node_lost, nonzero_exit]\n"
    "priority: 0\n"
    "time_limit: 12h\n"
    "service:                    # kind: service only\n"
    "  replicas: 6\n"
    "  port: auto                # $PORT given to each replica\n"
    "  health: {http: /health}   # or {tcp: true}\n";

/* The example made valid: without resources.vram and without the service part. */
static char *example_train(void)
{
    char *s = strdup(example);
    char *vram = strstr(s, "  vram: 24GiB");
    memset(vram, ' ', strcspn(vram, "\n")); /* a blank line keeps the numbering */
    *strstr(s, "service:  ") = '\0';
    return s;
}

static br_spec_t *parse(const char *yaml, const char *const *sets, int nsets,
                        br_err_t *err)
{
    memset(err, 0, sizeof(*err));
    return br_spec_parse(yaml, strlen(yaml), sets, nsets, err);
}

static br_spec_t *parse_ok(const char *yaml, const char *const *sets, int nsets)
{
    br_err_t err;
    br_spec_t *s = parse(yaml, sets, nsets, &err);
    if (!s)
        fail_msg("unexpected error: %s", err.text);
    return s;
}

/* The JSON of the spec must equal want (a JSON text). */
static void assert_json(const br_spec_t *s, const char *want)
{
    json_error_t jerr;
    json_t *w = json_loads(want, 0, &jerr), *got = br_spec_to_json(s);
    if (!w)
        fail_msg("bad expected JSON: %s", jerr.text);
    if (!json_equal(w, got)) {
        char *g = json_dumps(got, JSON_SORT_KEYS);
        char *e = json_dumps(w, JSON_SORT_KEYS);
        print_error("got:  %s\nwant: %s\n", g, e);
        free(g);
        free(e);
        fail();
    }
    json_decref(w);
    json_decref(got);
}

/* ---- good specs ------------------------------------------------------------------ */

/* code: DIR is kept as written (the CLI resolves it) and shows in the JSON form only
 * when given. */
static void test_code(void **state)
{
    (void)state;
    br_spec_t *s = parse_ok("name: a\ncommand: run\ncode: ../proj\n", NULL, 0);
    assert_string_equal(s->code, "../proj");
    json_t *j = br_spec_to_json(s);
    assert_string_equal(json_string_value(json_object_get(j, "code")), "../proj");
    json_decref(j);
    br_spec_destroy(&s);
    s = parse_ok("name: a\ncommand: run\n", NULL, 0);
    j = br_spec_to_json(s);
    assert_null(json_object_get(j, "code"));
    json_decref(j);
    br_spec_destroy(&s);
}

static void test_defaults(void **state)
{
    br_spec_t *s = parse_ok("name: a\ncommand: run\n", NULL, 0);
    assert_string_equal(s->name, "a");
    assert_int_equal(s->kind, BR_JOB_TRAIN);
    assert_null(s->workdir);
    assert_null(s->code);
    assert_int_equal(json_object_size(s->env), 0);
    assert_int_equal(s->resources.nodes, 1);
    assert_int_equal(s->resources.tasks_per_node, 1);
    assert_int_equal(s->resources.gpus, 0);
    assert_int_equal(s->resources.cpus, 1);
    assert_int_equal(s->resources.n_arch, 0);
    assert_non_null(s->resources.labels);
    assert_int_equal(s->resources.spread_any, 0);
    assert_int_equal(s->model.given, 0);
    assert_null(s->checkpoint.dir);
    assert_int_equal(s->restart.max, 3);
    assert_int_equal(s->restart.on_node_lost, 1);
    assert_int_equal(s->restart.on_nonzero_exit, 0);
    assert_int_equal(s->time_limit_ms, 0);
    assert_json(s,
                "{\"name\":\"a\",\"kind\":\"train\",\"command\":\"run\","
                "\"workdir\":null,\"env\":{},\"resources\":{\"nodes\":1,"
                "\"tasks_per_node\":1,\"gpus\":0,\"vram\":0,\"cpus\":1,\"memory\":0,"
                "\"arch\":[],\"gpu_model\":[],\"labels\":{},\"spread\":\"site\"},"
                "\"model\":null,\"checkpoint\":null,\"restart\":{\"max\":3,"
                "\"on\":[\"node_lost\"]},\"progress\":null,\"priority\":0,\"time_limit\":0,"
                "\"preemptible\":false,\"preempt\":{\"signal\":10,\"grace\":120000},"
                "\"service\":null,\"after\":[]}");
    br_spec_destroy(&s);
    assert_null(s);
}

static void test_example_train(void **state)
{
    char *text = example_train();
    br_spec_t *s = parse_ok(text, NULL, 0);
    assert_string_equal(s->name, "llama-lora");
    assert_string_equal(s->command,
                        "python3 train.py --resume \"$BRAMBLE_RESUME_FROM\"");
    assert_string_equal(s->workdir, "/srv/llama");
    assert_string_equal(json_string_value(json_object_get(s->env, "HF_HOME")),
                        "/srv/hf");
    assert_int_equal(s->resources.nodes, 2);
    assert_int_equal(s->resources.tasks_per_node, BR_TASKS_GPUS);
    assert_int_equal(s->resources.gpus, 4);
    assert_int_equal(s->resources.vram, 0);
    assert_int_equal(s->resources.memory, 32 * GIB);
    assert_int_equal(s->resources.n_gpu_model, 2);
    assert_string_equal(s->resources.gpu_model[0], "RTX 4090");
    assert_true(s->model.params == 8e9);
    assert_string_equal(s->checkpoint.pattern, "checkpoint-*");
    assert_int_equal(s->checkpoint.replicas, -1); /* not given: the cluster decides */
    assert_int_equal(s->checkpoint.keep, 2);
    br_spec_t *r = parse_ok("name: r\ncommand: x\ncheckpoint: {dir: /c, replicas: 0, keep: 3}\n", NULL, 0);
    assert_int_equal(r->checkpoint.replicas, 0);
    assert_int_equal(r->checkpoint.keep, 3);
    br_spec_destroy(&r);
    assert_int_equal(s->restart.on_nonzero_exit, 1);
    assert_json(
        s,
        "{\"name\":\"llama-lora\",\"kind\":\"train\",\"command\":"
        "\"python3 train.py --resume \\\"$BRAMBLE_RESUME_FROM\\\"\","
        "\"workdir\":\"/srv/llama\",\"env\":{\"HF_HOME\":\"/srv/hf\"},"
        "\"resources\":{\"nodes\":2,\"tasks_per_node\":\"gpus\",\"gpus\":4,"
        "\"vram\":0,\"cpus\":8,\"memory\":34359738368,"
        "\"arch\":[\"x86_64\",\"aarch64\"],\"gpu_model\":[\"RTX 4090\","
        "\"A100\"],\"labels\":{\"site\":\"home\"},\"spread\":\"site\"},"
        "\"model\":{\"params\":8000000000,\"mode\":\"lora\",\"dtype\":\"bf16\"},"
        "\"checkpoint\":{\"dir\":\"/srv/llama/ckpt\",\"pattern\":"
        "\"checkpoint-*\",\"complete_file\":\"trainer_state.json\","
        "\"replicas\":null,\"keep\":2},"
        "\"restart\":{\"max\":5,\"on\":[\"node_lost\",\"nonzero_exit\"]},"
        "\"progress\":null,\"priority\":0,\"time_limit\":43200000,\"service\":null,\"after\":[],"
        "\"preemptible\":true,\"preempt\":{\"signal\":10,\"grace\":120000}}");
    br_spec_destroy(&s);
    free(text);
}

/* after: the jobs to wait for, on ok by default, in order. */
static void test_after(void **state)
{
    (void)state;
    const char *y = "name: b\ncommand: run\nafter:\n  - {job: 12}\n  - {job: 7, on: started}\n"
                    "  - job: 9\n    on: failed\n";
    br_err_t err;
    br_spec_t *s = br_spec_parse(y, strlen(y), NULL, 0, &err);
    assert_non_null(s);
    assert_int_equal(s->n_after, 3);
    assert_int_equal(s->after[0].job, 12);
    assert_int_equal(s->after[0].on, BR_AFTER_OK);
    assert_int_equal(s->after[1].on, BR_AFTER_STARTED);
    assert_int_equal(s->after[2].on, BR_AFTER_FAILED);
    json_t *j = br_spec_to_json(s);
    json_t *want = json_pack("[{s:i, s:s}, {s:i, s:s}, {s:i, s:s}]", "job", 12, "on", "ok",
                             "job", 7, "on", "started", "job", 9, "on", "failed");
    assert_true(json_equal(json_object_get(j, "after"), want));
    json_decref(want);
    json_decref(j);
    br_spec_destroy(&s);
    assert_int_equal(br_after_on_parse("ended"), BR_AFTER_ENDED);
    assert_int_equal(br_after_on_parse("soon"), -1);
    assert_string_equal(br_after_goal(BR_AFTER_OK), "end ok");
    assert_string_equal(br_after_goal(BR_AFTER_ENDED), "end"); /* not "end ended" */
    assert_string_equal(br_after_goal(BR_AFTER_STARTED), "start");
}

static void test_service(void **state)
{
    br_spec_t *s = parse_ok(
        "name: chat\nkind: service\ncommand: serve\n"
        "resources: {gpus: 1, vram: 20GB, spread: any}\n"
        "service:\n  replicas: 3\n  port: 8080\n"
        "  health: {tcp: true, interval: 2s, grace: 1m}\n",
        NULL, 0);
    assert_int_equal(s->kind, BR_JOB_SERVICE);
    assert_int_equal(s->service.replicas, 3);
    assert_int_equal(s->service.port, 8080);
    assert_int_equal(s->service.health_tcp, 1);
    assert_null(s->service.health_http);
    assert_json(s,
                "{\"name\":\"chat\",\"kind\":\"service\",\"command\":\"serve\","
                "\"workdir\":null,\"env\":{},\"resources\":{\"nodes\":1,"
                "\"tasks_per_node\":1,\"gpus\":1,\"vram\":20000000000,\"cpus\":1,"
                "\"memory\":0,\"arch\":[],\"gpu_model\":[],\"labels\":{},"
                "\"spread\":\"any\"},\"model\":null,\"checkpoint\":null,"
                "\"restart\":{\"max\":3,\"on\":[\"node_lost\"]},\"priority\":0,"
                "\"progress\":null,\"time_limit\":0,\"service\":{\"replicas\":3,\"port\":8080,"
                "\"health\":{\"tcp\":true},\"interval\":2000,\"grace\":60000,\"model\":null,"
                "\"aliases\":[],\"adapters\":[],\"max_inflight\":0,\"public\":false,"
                "\"autoscale\":null},"
                "\"after\":[],\"preemptible\":false,"
                "\"preempt\":{\"signal\":10,\"grace\":120000}}");
    br_spec_destroy(&s);
}

/* preemptible follows the checkpoint section unless given; preempt's signal by
 * name, with or without SIG. */
static void test_preempt(void **state)
{
    (void)state;
    br_spec_t *s = parse_ok("name: a\ncommand: run\ncheckpoint: {dir: /c}\n"
                            "preempt: {signal: SIGTERM, grace: 30s}\n", NULL, 0);
    assert_int_equal(s->preemptible, 1);
    assert_int_equal(s->preempt_signal, SIGTERM);
    assert_int_equal(s->preempt_grace_ms, 30000);
    br_spec_destroy(&s);
    s = parse_ok("name: a\ncommand: run\ncheckpoint: {dir: /c}\npreemptible: false\n", NULL,
                 0);
    assert_int_equal(s->preemptible, 0);
    assert_int_equal(s->preempt_signal, SIGUSR1);
    br_spec_destroy(&s);
    s = parse_ok("name: a\ncommand: run\npreemptible: true\npreempt: {signal: USR2}\n", NULL,
                 0);
    assert_int_equal(s->preemptible, 1);
    assert_int_equal(s->preempt_signal, SIGUSR2);
    assert_int_equal(s->preempt_grace_ms, 120000);
    br_spec_destroy(&s);
}

/* yaml must be refused with an error that holds want. */
static void parse_fail(const char *yaml, const char *want)
{
    br_err_t err;
    br_spec_t *s = parse(yaml, NULL, 0, &err);
    if (s)
        br_spec_destroy(&s);
    if (!strstr(err.text, want))
        fail_msg("want an error with '%s', got '%s'", want, err.text);
}

/* What the gateway routes by: a model name, its aliases and adapters, each valid
 * and named once; a cap of requests per replica; public. */
static void test_service_models(void **state)
{
    (void)state;
    br_spec_t *s = parse_ok(
        "name: llm\nkind: service\ncommand: serve\n"
        "service:\n  model: meta-llama/Llama-3.1-8B\n  aliases: [llama, llama-8b]\n"
        "  adapters: sql-lora\n  max_inflight: 8\n  public: true\n",
        NULL, 0);
    assert_string_equal(s->service.model, "meta-llama/Llama-3.1-8B");
    assert_int_equal(s->service.n_aliases, 2);
    assert_string_equal(s->service.aliases[1], "llama-8b");
    assert_int_equal(s->service.n_adapters, 1);
    assert_string_equal(s->service.adapters[0], "sql-lora");
    assert_int_equal(s->service.max_inflight, 8);
    assert_int_equal(s->service.is_public, 1);
    json_t *j = br_spec_to_json(s);
    json_t *sv = json_object_get(j, "service");
    assert_string_equal(json_string_value(json_object_get(sv, "model")),
                        "meta-llama/Llama-3.1-8B");
    assert_int_equal(json_array_size(json_object_get(sv, "aliases")), 2);
    assert_true(json_is_true(json_object_get(sv, "public")));
    json_decref(j);
    br_spec_destroy(&s);
    parse_fail("name: llm\nkind: service\ncommand: serve\nservice: {aliases: [a]}\n",
               "service.aliases: needs service.model");
    parse_fail("name: llm\nkind: service\ncommand: serve\n"
               "service: {model: a, aliases: [b, a]}\n",
               "service.aliases: 'a' is named twice");
    parse_fail("name: llm\nkind: service\ncommand: serve\nservice: {model: 'a b'}\n",
               "service.model: 'a b' is not a model name");
    parse_fail("name: llm\nkind: service\ncommand: serve\nservice: {max_inflight: -1}\n",
               "service.max_inflight");
    assert_false(br_spec_model_name_ok(""));
    assert_true(br_spec_model_name_ok("Qwen/Qwen2.5-7B-Instruct:q4@v1+x"));
}

/* service.autoscale: defaults, where it starts, and what it refuses. */
static void test_service_autoscale(void **state)
{
    (void)state;
    br_spec_t *s = parse_ok("name: llm\nkind: service\ncommand: serve\n"
                            "service: {model: m, autoscale: {max: 4}}\n",
                            NULL, 0);
    const br_autoscale_spec_t *as = &s->service.autoscale;
    assert_int_equal(as->on, 1);
    assert_int_equal(as->min, 0);
    assert_int_equal(as->max, 4);
    assert_int_equal(as->target_inflight, 4);
    assert_int_equal(as->up_after_ms, 15000);
    assert_int_equal(as->down_after_ms, 300000);
    assert_int_equal(as->cold_start_ms, 300000);
    assert_int_equal(s->service.replicas, 0); /* it starts at min */
    json_t *j = br_spec_to_json(s);
    json_t *a = json_object_get(json_object_get(j, "service"), "autoscale");
    json_t *want = json_pack("{s:i, s:i, s:i, s:i, s:i, s:i}", "min", 0, "max", 4,
                             "target_inflight", 4, "up_after", 15000, "down_after", 300000,
                             "cold_start_timeout", 300000);
    assert_true(json_equal(a, want));
    json_decref(want);
    json_decref(j);
    br_spec_destroy(&s);
    s = parse_ok("name: llm\nkind: service\ncommand: serve\n"
                 "service:\n  model: m\n  replicas: 2\n  max_inflight: 8\n"
                 "  autoscale: {min: 1, max: 3, target_inflight: 8, up_after: 2s,"
                 " down_after: 10s, cold_start_timeout: 1m}\n",
                 NULL, 0);
    assert_int_equal(s->service.replicas, 2);
    assert_int_equal(s->service.autoscale.min, 1);
    assert_int_equal(s->service.autoscale.up_after_ms, 2000);
    assert_int_equal(s->service.autoscale.cold_start_ms, 60000);
    br_spec_destroy(&s);
    s = parse_ok("name: web\nkind: service\ncommand: serve\n", NULL, 0);
    assert_int_equal(s->service.autoscale.on, 0);
    assert_int_equal(s->service.replicas, 1);
    br_spec_destroy(&s);
#define SVC "name: llm\nkind: service\ncommand: serve\n"
    parse_fail(SVC "service: {model: m, autoscale: {min: 1}}\n",
               "service.autoscale: needs max");
    parse_fail(SVC "service: {autoscale: {max: 2}}\n",
               "service.autoscale: needs service.model");
    parse_fail(SVC "service: {model: m, autoscale: {min: 3, max: 2}}\n",
               "min (3) is more than max (2)");
    parse_fail(SVC "service: {model: m, replicas: 5, autoscale: {max: 2}}\n",
               "service.replicas: 5 is outside autoscale's 0..2");
    parse_fail(SVC "service: {model: m, max_inflight: 2, autoscale: {max: 2, "
                   "target_inflight: 3}}\n",
               "target_inflight: 3 is more than service.max_inflight (2)");
    /* not given, it is 4 or max_inflight when that is lower */
    s = parse_ok(SVC "service: {model: m, max_inflight: 2, autoscale: {max: 2}}\n", NULL, 0);
    assert_int_equal(s->service.autoscale.target_inflight, 2);
    br_spec_destroy(&s);
    parse_fail(SVC "service: {model: m, autoscale: {max: 2, target: 3}}\n", "target");
    parse_fail(SVC "service: {model: m, autoscale: {max: 2, up_after: soon}}\n",
               "service.autoscale.up_after");
    parse_fail(SVC "service: {model: m, autoscale: {max: 0}}\n", "service.autoscale.max");
#undef SVC
}

static void test_service_defaults(void **state)
{
    br_spec_t *s = parse_ok(
        "name: web\nkind: service\ncommand: serve\n"
        "service: {port: auto, health: {http: /healthz}}\n",
        NULL, 0);
    assert_int_equal(s->service.replicas, 1);
    assert_int_equal(s->service.port, BR_PORT_AUTO);
    assert_string_equal(s->service.health_http, "/healthz");
    assert_int_equal(s->service.health_interval_ms, 5000);
    assert_int_equal(s->service.health_grace_ms, 30000);
    json_t *j = br_spec_to_json(s);
    json_t *sv = json_object_get(j, "service");
    assert_string_equal(json_string_value(json_object_get(sv, "port")), "auto");
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(sv, "health"), "http")),
        "/healthz");
    json_decref(j);
    br_spec_destroy(&s);
    /* a service without a service section gets every default, health none */
    s = parse_ok("name: web\nkind: service\ncommand: serve\n", NULL, 0);
    j = br_spec_to_json(s);
    assert_true(json_is_null(json_object_get(json_object_get(j, "service"), "health")));
    json_decref(j);
    br_spec_destroy(&s);
}

static void test_nodelist(void **state)
{
    br_spec_t *s = parse_ok("name: p\ncommand: x\nresources: {nodes: 2, nodelist: [a, b-2, c]}\n",
                            NULL, 0);
    assert_int_equal(s->resources.n_nodelist, 3);
    assert_string_equal(s->resources.nodelist[1], "b-2");
    json_t *j = br_spec_to_json(s);
    json_t *nl = json_object_get(json_object_get(j, "resources"), "nodelist");
    assert_int_equal(json_array_size(nl), 3);
    assert_string_equal(json_string_value(json_array_get(nl, 2)), "c");
    json_decref(j);
    br_spec_destroy(&s);
    /* one name as a scalar; no nodelist: absent from the JSON */
    s = parse_ok("name: p\ncommand: x\nresources: {nodelist: a}\n", NULL, 0);
    assert_int_equal(s->resources.n_nodelist, 1);
    br_spec_destroy(&s);
    s = parse_ok("name: p\ncommand: x\n", NULL, 0);
    j = br_spec_to_json(s);
    assert_null(json_object_get(json_object_get(j, "resources"), "nodelist"));
    json_decref(j);
    br_spec_destroy(&s);
}

static void test_small_forms(void **state)
{
    br_spec_t *s = parse_ok(
        "---\nname: &n a\ncommand: 'run'\nresources:\n"
        "  gpus: \"2\"\n  cpus: 0\n  arch: x86_64\n"
        "restart: {on: []}\npriority: -5\ntime_limit: 90\n"
        "model: {params: 350M}\nworkdir:\n...\n",
        NULL, 0);
    assert_int_equal(s->resources.gpus, 2);
    assert_int_equal(s->resources.cpus, 0);
    assert_int_equal(s->resources.n_arch, 1);
    assert_string_equal(s->resources.arch[0], "x86_64");
    assert_int_equal(s->restart.on_node_lost, 0);
    assert_int_equal(s->restart.on_nonzero_exit, 0);
    assert_int_equal(s->priority, -5);
    assert_int_equal(s->time_limit_ms, 90000);
    assert_int_equal(s->model.given, 1);
    assert_string_equal(s->model.mode, "inference");
    assert_string_equal(s->model.dtype, "bf16");
    assert_null(s->workdir);
    json_t *j = br_spec_to_json(s);
    assert_int_equal(
        json_array_size(json_object_get(json_object_get(j, "restart"), "on")), 0);
    json_decref(j);
    br_spec_destroy(&s);
}

static void test_env_scalars(void **state)
{
    br_spec_t *s = parse_ok(
        "name: a\ncommand: x\nenv:\n  N: 1\n  B: true\n  E: ''\n"
        "  _X9: \"two words\"\n",
        NULL, 0);
    assert_string_equal(json_string_value(json_object_get(s->env, "N")), "1");
    assert_string_equal(json_string_value(json_object_get(s->env, "B")), "true");
    assert_string_equal(json_string_value(json_object_get(s->env, "E")), "");
    assert_string_equal(json_string_value(json_object_get(s->env, "_X9")), "two words");
    br_spec_destroy(&s);
}

static void test_sets(void **state)
{
    const char *sets[] = {"resources.gpus=2",
                          "model.params=8B",
                          "env.FOO=bar",
                          "resources.arch=[a, b]",
                          "resources.labels={site: home}",
                          "workdir=",
                          "restart.on=[nonzero_exit]",
                          "name=other"};
    br_spec_t *s =
        parse_ok("name: a\ncommand: x\nworkdir: /w\nresources:\n  gpus: 8\n", sets, 8);
    assert_string_equal(s->name, "other");
    assert_int_equal(s->resources.gpus, 2);
    assert_int_equal(s->model.given, 1);
    assert_true(s->model.params == 8e9);
    assert_string_equal(json_string_value(json_object_get(s->env, "FOO")), "bar");
    assert_int_equal(s->resources.n_arch, 2);
    assert_string_equal(s->resources.arch[1], "b");
    assert_string_equal(json_string_value(json_object_get(s->resources.labels, "site")),
                        "home");
    assert_null(s->workdir);
    assert_int_equal(s->restart.on_node_lost, 0);
    assert_int_equal(s->restart.on_nonzero_exit, 1);
    br_spec_destroy(&s);
}

static void test_set_into_null_section(void **state)
{
    const char *sets[] = {"model.params=70B", "model.mode=qlora"};
    br_spec_t *s = parse_ok("name: a\ncommand: x\nmodel:\n", sets, 2);
    assert_int_equal(s->model.given, 1);
    assert_true(s->model.params == 70e9);
    assert_string_equal(s->model.mode, "qlora");
    br_spec_destroy(&s);
    /* later --set wins over an earlier one */
    const char *twice[] = {"priority=1", "priority=7"};
    s = parse_ok("name: a\ncommand: x\n", twice, 2);
    assert_int_equal(s->priority, 7);
    br_spec_destroy(&s);
}

static void test_destroy_null(void **state)
{
    br_spec_t *s = NULL;
    br_spec_destroy(NULL);
    br_spec_destroy(&s);
    assert_null(s);
    assert_string_equal(br_job_kind_name(BR_JOB_TRAIN), "train");
    assert_string_equal(br_job_kind_name(BR_JOB_SERVICE), "service");
    assert_string_equal(br_job_kind_name(BR_JOB_DEV), "dev");
}

/* setup: and setup_files: kept in the JSON; setup_files only with setup and a code
 * tree, as plain relative paths; an empty setup or one too long refused. */
static void test_setup(void **state)
{
    (void)state;
    br_spec_t *s = parse_ok("name: t\ncode: .\ncommand: x\nsetup: |\n  make venv\n"
                            "setup_files: [requirements.txt, conf/a.toml]\n", NULL, 0);
    assert_string_equal(s->setup, "make venv\n");
    json_t *j = br_spec_to_json(s);
    assert_string_equal(json_string_value(json_object_get(j, "setup")), "make venv\n");
    assert_int_equal(json_array_size(json_object_get(j, "setup_files")), 2);
    assert_string_equal(json_string_value(json_array_get(json_object_get(j, "setup_files"), 1)),
                        "conf/a.toml");
    json_decref(j);
    br_spec_destroy(&s);
    s = parse_ok("name: t\ncommand: x\nsetup: pip install x\n", NULL, 0);
    assert_null(s->setup_files);
    j = br_spec_to_json(s);
    assert_null(json_object_get(j, "setup_files"));
    json_decref(j);
    br_spec_destroy(&s);
    s = parse_ok("name: t\ncommand: x\n", NULL, 0);
    j = br_spec_to_json(s);
    assert_null(json_object_get(j, "setup"));
    json_decref(j);
    br_spec_destroy(&s);
    parse_fail("name: t\ncommand: x\nsetup: '  '\n", "line 3: setup: must not be empty");
    parse_fail("name: t\ncode: .\ncommand: x\nsetup_files: [a]\n",
               "setup_files: only with setup");
    parse_fail("name: t\ncommand: x\nsetup: s\nsetup_files: [a]\n",
               "setup_files: name files of the code dir, and there is none");
    parse_fail("name: t\ncode: .\ncommand: x\nsetup: s\nsetup_files: [../etc/passwd]\n",
               "setup_files[0]: expected a path inside the code dir");
    parse_fail("name: t\ncode: .\ncommand: x\nsetup: s\nsetup_files: [/etc/passwd]\n",
               "setup_files[0]: expected a path inside the code dir");
    parse_fail("name: t\ncode: .\ncommand: x\nsetup: s\nsetup_files: req.txt\n",
               "setup_files: expected a list");
    size_t n = BR_SPEC_MAX_SETUP + 1;
    const char *head = "name: t\ncommand: x\nsetup: ";
    size_t h = strlen(head);
    char *big = malloc(h + n + 2);
    memcpy(big, head, h);
    memset(big + h, 'a', n);
    strcpy(big + h + n, "\n");
    br_err_t err;
    br_spec_t *bad = br_spec_parse(big, strlen(big), NULL, 0, &err);
    assert_null(bad);
    assert_non_null(strstr(err.text, "setup: 65536 bytes, more than 65535"));
    free(big);
}

/* image: an image's name only (nothing a shell or podman's options would read), in
 * the JSON; not with setup yet. */
static void test_image(void **state)
{
    (void)state;
    br_spec_t *s = parse_ok("name: t\ncommand: x\nimage: docker.io/library/python:3.11-slim\n",
                            NULL, 0);
    assert_string_equal(s->image, "docker.io/library/python:3.11-slim");
    json_t *j = br_spec_to_json(s);
    assert_string_equal(json_string_value(json_object_get(j, "image")),
                        "docker.io/library/python:3.11-slim");
    json_decref(j);
    br_spec_destroy(&s);
    assert_true(br_spec_image_ok("localhost/x@sha256:0123abcdef"));
    assert_false(br_spec_image_ok("-x"));
    assert_false(br_spec_image_ok("a b"));
    assert_false(br_spec_image_ok("a$(id)"));
    assert_false(br_spec_image_ok(""));
    assert_false(br_spec_image_ok(NULL));
    parse_fail("name: t\ncommand: x\nimage: 'a;b'\n",
               "line 3: image: 'a;b' is not an image name");
    parse_fail("name: t\ncommand: x\nimage: --privileged\n", "is not an image name");
    /* a setup runs in the image too (docs/containers.md) */
    br_spec_t *both = parse_ok("name: t\ncommand: x\nsetup: s\nimage: a\n", NULL, 0);
    assert_string_equal(both->image, "a");
    br_spec_destroy(&both);
}

/* kind: dev: idle_stop 2 h unless given, kept in the JSON; what belongs to other
 * kinds, or an idle_stop too short, refused naming the field. */
static void test_dev(void **state)
{
    (void)state;
    br_spec_t *s = parse_ok("name: box\nkind: dev\ncommand: sleep infinity\n", NULL, 0);
    assert_int_equal(s->kind, BR_JOB_DEV);
    assert_int_equal(s->idle_stop_ms, 2 * 3600 * 1000);
    assert_int_equal(s->preemptible, 0);
    br_spec_destroy(&s);
    s = parse_ok("name: box\nkind: dev\ncommand: x\nidle_stop: 90s\n", NULL, 0);
    assert_int_equal(s->idle_stop_ms, 90000);
    json_t *j = br_spec_to_json(s);
    assert_string_equal(json_string_value(json_object_get(j, "kind")), "dev");
    assert_int_equal(json_integer_value(json_object_get(j, "idle_stop")), 90000);
    json_decref(j);
    br_spec_destroy(&s);
    s = parse_ok("name: t\ncommand: x\n", NULL, 0);
    assert_int_equal(s->idle_stop_ms, 0);
    j = br_spec_to_json(s);
    assert_null(json_object_get(j, "idle_stop"));
    json_decref(j);
    br_spec_destroy(&s);
    parse_fail("name: t\ncommand: x\nidle_stop: 1h\n", "line 3: idle_stop: only for kind: dev");
    parse_fail("name: t\nkind: dev\ncommand: x\nidle_stop: 10ms\n",
               "idle_stop: must be at least 1s");
    parse_fail("name: t\nkind: dev\ncommand: x\nidle_stop: soon\n", "idle_stop");
    parse_fail("name: t\nkind: dev\ncommand: x\nprogress: {timeout: 1m}\n",
               "progress: only for kind: train (a dev environment waits for you)");
    parse_fail("name: t\nkind: dev\ncommand: x\narray: 0-3\n", "array: only for kind: train");
    parse_fail("name: t\nkind: dev\ncommand: x\npreemptible: true\n",
               "preemptible: only for kind: train");
    parse_fail("name: t\nkind: box\ncommand: x\n", "kind: expected train, service or dev");
}

static void test_oversized(void **state)
{
    size_t n = BR_SPEC_MAX_BYTES + 1;
    char *big = malloc(n + 1);
    memset(big, '#', n);
    big[0] = 'a';
    big[1] = ':';
    big[2] = ' ';
    big[n] = '\0';
    br_err_t err = {0};
    assert_null(br_spec_parse(big, n, NULL, 0, &err));
    assert_non_null(strstr(err.text, "larger than 262144 bytes"));
    free(big);
}

static void test_null_input(void **state)
{
    br_err_t err = {0};
    assert_null(br_spec_parse(NULL, 0, NULL, 0, &err));
    assert_string_equal(err.text, "spec: empty");
}

static void test_example_refused(void **state)
{
    br_err_t err;
    assert_null(parse(example, NULL, 0, &err));
    assert_string_equal(
        err.text, "line 18: model: give either model or resources.vram, not both");
    char *text = strdup(example);
    char *vram = strstr(text, "  vram: 24GiB");
    memset(vram, ' ', strcspn(vram, "\n"));
    assert_null(parse(text, NULL, 0, &err));
    assert_string_equal(err.text, "line 31: service: only for kind: service");
    free(text);
}

/* ---- bad specs: each must fail with the given text in the error --------------------
 */

#define BASE "name: job\ncommand: run\n" /* lines 1-2 */

typedef struct {
    const char *name;
    const char *yaml;
    const char *sets[3];
    const char *want; /* substring of the error text; exact when it starts with '=' */
} bad_case_t;

static const bad_case_t bad_cases[] = {
    /* keys */
    {"unknown top key",
     BASE "kind: train\nresorces: {}\n",
     {0},
     "=line 4: unknown key 'resorces'"},
    {"unknown nested key",
     BASE "resources:\n  nodes: 1\n  cpus: 2\n  gpu: 2\n",
     {0},
     "=line 6: unknown key 'gpu' in resources"},
    {"unknown health key",
     BASE "kind: service\nservice:\n  health: {http: /, udp: 1}\n",
     {0},
     "=line 5: unknown key 'udp' in service.health"},
    {"duplicate key", BASE "name: again\n", {0}, "=line 3: duplicate key 'name'"},
    {"missing name", "command: run\n", {0}, "=name: required"},
    {"null name", "name:\ncommand: run\n", {0}, "=name: required"},
    {"missing command", "name: job\n", {0}, "=command: required"},
    /* types and values */
    {"unknown key later",
     BASE "resources:\n  nodes: 1\n  cpus: 1\n  gpus: 1\n  gpus2: 1\n",
     {0},
     "line 7: unknown key 'gpus2' in resources"},
    {"gpus not int",
     BASE "priority: 1\nresources:\n  cpus: 1\n  memory: 1\n  gpus: two\n",
     {0},
     "=line 7: resources.gpus: expected a non-negative integer, got 'two'"},
    {"gpus float",
     BASE "resources: {gpus: 2.5}\n",
     {0},
     "=line 3: resources.gpus: expected a non-negative integer, got '2.5'"},
    {"gpus hex", BASE "resources: {gpus: 0x10}\n", {0}, "got '0x10'"},
    {"gpus list",
     BASE "resources: {gpus: [1]}\n",
     {0},
     "resources.gpus: expected a non-negative integer, got a list"},
    {"nodes zero",
     BASE "resources: {nodes: 0}\n",
     {0},
     "=line 3: resources.nodes: 0 is out of range (1..1024)"},
    {"nodes word",
     BASE "resources: {nodes: many}\n",
     {0},
     "resources.nodes: expected a positive integer, got 'many'"},
    {"vram less than a byte",
     BASE "resources: {gpus: 1, vram: 0.5}\n",
     {0},
     "line 3: resources.vram: size '0.5' is less than a byte"},
    {"vram far below a byte",
     BASE "resources: {gpus: 1, vram: 0.0000001}\n",
     {0},
     "resources.vram: size '0.0000001' is less than a byte"},
    {"cpus huge",
     BASE "resources: {cpus: 99999999999999999999}\n",
     {0},
     "=line 3: resources.cpus: 99999999999999999999 is out of range (0..100000)"},
    {"memory past the limit",
     BASE "resources: {memory: 2EiB}\n",
     {0},
     "=line 3: resources.memory: bad size '2EiB' (use e.g. 512MiB, 24GiB)"},
    {"vram past the limit",
     BASE "resources: {vram: 2000000TiB}\n",
     {0},
     "=line 3: resources.vram: size '2000000TiB' is too large (at most 1EiB)"},
    {"memory past int64",
     BASE "resources: {memory: 1e30}\n",
     {0},
     "=line 3: resources.memory: size '1e30' is too large (at most 1EiB)"},
    {"after not a list", BASE "after: 12\n", {0},
     "=line 3: after: expected a list like [{job: 12, on: ok}], got a scalar"},
    {"after entry not a mapping", BASE "after: [12]\n", {0},
     "=line 3: after[0]: expected a mapping like {job: 12, on: ok}, got a scalar"},
    {"after without job", BASE "after: [{on: ok}]\n", {0},
     "=line 3: after[0].job: missing (the job to wait for)"},
    {"after bad job", BASE "after: [{job: -3}]\n", {0},
     "=line 3: after[0].job: -3 is out of range (1..2147483647)"},
    {"after bad on", BASE "after:\n  - {job: 3, on: okay}\n", {0},
     "=line 4: after[0].on: expected ok, failed, ended or started, got 'okay'"},
    {"after unknown key", BASE "after:\n  - job: 3\n    when: later\n", {0},
     "=line 5: unknown key 'when' in after[0]"},
    {"after twice", BASE "after: [{job: 3}, {job: 3, on: failed}]\n", {0},
     "=line 3: after[1]: job 3 is listed twice"},
    {"preempt signal unknown", BASE "preempt: {signal: KILL}\n", {0},
     "=line 3: preempt.signal: expected one of HUP, INT, QUIT, USR1, USR2, TERM, got 'KILL'"},
    {"preempt grace too long", BASE "preempt:\n  grace: 2h\n", {0},
     "=line 4: preempt.grace: at most 1h (it holds what a waiting job needs)"},
    {"preempt unknown key", BASE "preempt: {signal: USR1, wait: 3s}\n", {0},
     "=line 3: unknown key 'wait' in preempt"},
    {"preemptible not a bool", BASE "preemptible: maybe\n", {0},
     "=line 3: preemptible: expected true or false, got 'maybe'"},
    {"preemptible service", "name: s\nkind: service\ncommand: run\npreemptible: true\n",
     {0}, "=line 4: preemptible: only for kind: train"},
    {"time_limit too long",
     BASE "time_limit: 1e20d\n",
     {0},
     "=line 3: time_limit: duration '1e20d' is too long (at most 11574074 days)"},
    {"time_limit rounds to none",
     BASE "time_limit: 0.0001ms\n",
     {0},
     "=line 3: time_limit: '0.0001ms' rounds to 0, which means no limit (the least is "
     "1ms; leave it out for none)"},
    {"time_limit tiny exponent",
     BASE "time_limit: 1e-9s\n",
     {0},
     "time_limit: '1e-9s' rounds to 0"},
    {"set time_limit rounds to none", BASE, {"time_limit=0.4ms"}, "rounds to 0"},
    {"bad name",
     "name: Foo_1\ncommand: x\n",
     {0},
     "=line 1: name: 'Foo_1' must be lowercase letters, digits and '-' (1-63 chars)"},
    {"name dash", "name: -a\ncommand: x\n", {0}, "line 1: name: '-a' must be"},
    {"name too long",
     "name: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\ncommand: "
     "x\n",
     {0},
     "line 1: name: 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa...' must be"},
    {"name mapping",
     "name: {a: 1}\ncommand: x\n",
     {0},
     "line 1: name: expected a string, got a mapping"},
    {"kind",
     BASE "kind: batch\n",
     {0},
     "=line 3: kind: expected train, service or dev, got 'batch'"},
    {"command empty",
     "name: a\ncommand: '  '\n",
     {0},
     "=line 2: command: must not be empty"},
    {"command list",
     "name: a\ncommand: [python3, x.py]\n",
     {0},
     "line 2: command: expected a string, got a list"},
    {"workdir relative",
     BASE "workdir: srv\n",
     {0},
     "=line 3: workdir: must be an absolute path, got 'srv'"},
    {"env name",
     BASE "env:\n  OK: 1\n  FOO-BAR: x\n",
     {0},
     "=line 5: env: 'FOO-BAR' is not a valid variable name"},
    {"env digit", BASE "env: {1X: a}\n", {0}, "env: '1X' is not a valid variable name"},
    {"env list value",
     BASE "env: {A: [1]}\n",
     {0},
     "=line 3: env.A: expected a string, got a list"},
    {"env list", BASE "env: [A]\n", {0}, "env: expected a mapping, got a list"},
    {"labels value map",
     BASE "resources:\n  labels:\n    site: {a: b}\n",
     {0},
     "=line 5: resources.labels.site: expected a string, got a mapping"},
    {"tasks gpus no gpus",
     BASE "resources: {tasks_per_node: gpus}\n",
     {0},
     "=line 3: resources.tasks_per_node: gpus needs resources.gpus from 1 to 64"},
    {"tasks gpus too many",
     BASE "resources: {tasks_per_node: gpus, gpus: 65}\n",
     {0},
     "=line 3: resources.tasks_per_node: gpus needs resources.gpus from 1 to 64"},
    {"tasks unequal gpus",
     BASE "resources: {tasks_per_node: 3, gpus: 4}\n",
     {0},
     "=line 3: resources.tasks_per_node: 3 tasks cannot share 4 GPUs equally"},
    {"nodelist bad name",
     BASE "resources: {nodelist: [a, B_2]}\n",
     {0},
     "=line 3: resources.nodelist: 'B_2' is not a node name (lowercase letters, digits "
     "and '-')"},
    {"nodelist too short",
     BASE "resources: {nodes: 3, nodelist: [a, b]}\n",
     {0},
     "=line 3: resources.nodelist: names 2 nodes, fewer than resources.nodes (3)"},
    {"tasks word",
     BASE "resources: {tasks_per_node: many}\n",
     {0},
     "resources.tasks_per_node: expected a positive integer or 'gpus', got 'many'"},
    {"tasks zero",
     BASE "resources: {tasks_per_node: 0}\n",
     {0},
     "resources.tasks_per_node: 0 is out of range (1..64)"},
    {"bad size unit",
     BASE "resources:\n  vram: 24GiBs\n",
     {0},
     "=line 4: resources.vram: bad size '24GiBs' (use e.g. 512MiB, 24GiB)"},
    {"size words",
     BASE "resources:\n  memory: lots\n",
     {0},
     "line 4: resources.memory: bad size 'lots'"},
    {"size negative", BASE "resources:\n  memory: -1GiB\n", {0}, "bad size '-1GiB'"},
    {"arch mapping",
     BASE "resources: {arch: {a: b}}\n",
     {0},
     "resources.arch: expected a string or a list, got a mapping"},
    {"arch nested",
     BASE "resources: {arch: [[a]]}\n",
     {0},
     "resources.arch: entries must be non-empty strings"},
    {"arch too many",
     BASE "resources: {arch: [a,a,a,a,a,a,a,a,a,a,a,a,a,a,a,a,a,a,a,a,a,a,a,a,a,a,a,a,"
          "a,a,a,a,a]}\n",
     {0},
     "resources.arch: at most 32 entries"},
    {"spread",
     BASE "resources: {spread: far}\n",
     {0},
     "resources.spread: expected site or any, got 'far'"},
    {"model no params",
     BASE "model:\n  mode: lora\n",
     {0},
     "=line 3: model.params: required"},
    {"model bad params",
     BASE "model:\n  params: lots\n",
     {0},
     "=line 4: model.params: bad count 'lots' (use e.g. 8B, 70B)"},
    {"model zero params",
     BASE "model: {params: 0}\n",
     {0},
     "model.params: bad count '0'"},
    {"model mode",
     BASE "model: {params: 8B, mode: dpo}\n",
     {0},
     "model.mode: expected inference, lora, qlora or full, got 'dpo'"},
    {"model dtype",
     BASE "model: {params: 8B, dtype: fp8}\n",
     {0},
     "model.dtype: expected fp32, fp16, bf16, int8 or int4, got 'fp8'"},
    {"model and vram",
     BASE "resources: {vram: 1GiB}\nmodel: {params: 8B}\n",
     {0},
     "=line 4: model: give either model or resources.vram, not both"},
    {"model scalar",
     BASE "model: 8B\n",
     {0},
     "=line 3: model: expected a mapping, got a scalar"},
    {"checkpoint no dir",
     BASE "checkpoint:\n  pattern: x\n",
     {0},
     "=line 3: checkpoint.dir: required"},
    {"checkpoint relative",
     BASE "checkpoint: {dir: ckpt}\n",
     {0},
     "checkpoint.dir: must be an absolute path, got 'ckpt'"},
    {"complete_file slash",
     BASE "checkpoint: {dir: /c, complete_file: a/b}\n",
     {0},
     "checkpoint.complete_file: must be a plain file name, got 'a/b'"},
    {"checkpoint replicas negative",
     BASE "checkpoint: {dir: /c, replicas: -1}\n",
     {0},
     "checkpoint.replicas"},
    {"checkpoint replicas too many",
     BASE "checkpoint: {dir: /c, replicas: 17}\n",
     {0},
     "checkpoint.replicas"},
    {"checkpoint keep zero",
     BASE "checkpoint: {dir: /c, keep: 0}\n",
     {0},
     "checkpoint.keep"},
    {"checkpoint key",
     BASE "checkpoint: {dir: /c, every: 5m}\n",
     {0},
     "unknown key 'every' in checkpoint"},
    {"restart on",
     BASE "restart:\n  on: [node_lost, oom]\n",
     {0},
     "=line 4: restart.on: expected node_lost, nonzero_exit or hung, got 'oom'"},
    /* progress: hang detection */
    {"progress unknown key",
     BASE "progress:\n  timeout: 5m\n  every: 1m\n",
     {0},
     "=line 5: unknown key 'every' in progress"},
    {"progress no timeout",
     BASE "priority: 1\nprogress: {}\n",
     {0},
     "=line 4: progress.timeout: required"},
    {"progress bad duration",
     BASE "progress:\n  timeout: forever\n",
     {0},
     "=line 4: progress.timeout: bad duration 'forever' (use e.g. 500ms, 5s, 10m, 12h)"},
    {"progress too short",
     BASE "progress: {timeout: 500ms}\n",
     {0},
     "=line 3: progress.timeout: must be at least 1s"},
    {"progress zero",
     BASE "progress: {timeout: 0}\n",
     {0},
     "progress.timeout: must be at least 1s"},
    {"progress scalar",
     BASE "progress: 15m\n",
     {0},
     "=line 3: progress: expected a mapping, got a scalar"},
    {"progress list timeout",
     BASE "progress: {timeout: [1m]}\n",
     {0},
     "progress.timeout: expected a duration"},
    {"progress on service",
     BASE "kind: service\nprogress: {timeout: 5m}\n",
     {0},
     "=line 4: progress: only for kind: train (a service has health checks)"},
    {"progress set bad",
     BASE,
     {"progress.timeout=soon"},
     "progress.timeout: bad duration 'soon'"},
    {"restart max",
     BASE "restart: {max: 1001}\n",
     {0},
     "restart.max: 1001 is out of range (0..1000)"},
    {"priority",
     BASE "priority: 2000\n",
     {0},
     "priority: 2000 is out of range (-1000..1000)"},
    {"priority float",
     BASE "priority: 1e3\n",
     {0},
     "priority: expected an integer, got '1e3'"},
    {"time_limit",
     BASE "time_limit: 12 hours\n",
     {0},
     "=line 3: time_limit: bad duration '12 hours' (use e.g. 500ms, 5s, 10m, 12h)"},
    {"service on train",
     BASE "priority: 1\nservice:\n  replicas: 2\n",
     {0},
     "=line 4: service: only for kind: service"},
    {"port range",
     BASE "kind: service\nservice: {port: 70000}\n",
     {0},
     "service.port: 70000 is out of range (1..65535)"},
    {"port word",
     BASE "kind: service\nservice: {port: any}\n",
     {0},
     "service.port: expected 'auto' or a port number, got 'any'"},
    {"replicas zero",
     BASE "kind: service\nservice: {replicas: 0}\n",
     {0},
     "service.replicas: 0 is out of range (1..1000)"},
    {"health both",
     BASE "kind: service\nservice:\n  health: {http: /h, tcp: true}\n",
     {0},
     "=line 5: service.health: give either http or tcp, not both"},
    {"health none",
     BASE "kind: service\nservice:\n  health: {interval: 5s}\n",
     {0},
     "=line 5: service.health: give http: /path or tcp: true"},
    {"health tcp false",
     BASE "kind: service\nservice: {health: {tcp: false}}\n",
     {0},
     "service.health: give http: /path or tcp: true"},
    {"health http path",
     BASE "kind: service\nservice: {health: {http: health}}\n",
     {0},
     "service.health.http: must be a path starting with '/', got 'health'"},
    {"health tcp yes",
     BASE "kind: service\nservice: {health: {tcp: yes}}\n",
     {0},
     "service.health.tcp: expected true or false, got 'yes'"},
    {"health interval",
     BASE "kind: service\nservice: {health: {tcp: true, interval: 0}}\n",
     {0},
     "service.health.interval: must be positive"},
    {"health scalar",
     BASE "kind: service\nservice: {health: tcp}\n",
     {0},
     "service.health: expected a mapping, got a scalar"},
    {"labels empty key",
     BASE "resources: {labels: {'': a}}\n",
     {0},
     "=line 3: resources.labels: keys must not be empty"},
    {"pattern empty",
     BASE "checkpoint: {dir: /c, pattern: ''}\n",
     {0},
     "=line 3: checkpoint.pattern: must not be empty"},
    {"port zero",
     BASE "kind: service\nservice: {port: 0}\n",
     {0},
     "service.port: 0 is out of range (1..65535)"},
    {"resources list",
     BASE "resources: [gpus]\n",
     {0},
     "=line 3: resources: expected a mapping, got a list"},
    /* YAML itself */
    {"invalid yaml",
     "name: a\n  b: c\n",
     {0},
     "line 2: invalid YAML: mapping values are not allowed"},
    {"unclosed flow", BASE "env: {A: b\n", {0}, "invalid YAML"},
    {"bad utf-8", "name: a\ncommand: \xff\n", {0}, "line 2: invalid YAML"},
    {"list root",
     "- a\n- b\n",
     {0},
     "=line 1: spec: expected a mapping at the top, got a list"},
    {"scalar root",
     "hello\n",
     {0},
     "spec: expected a mapping at the top, got a scalar"},
    {"empty", "", {0}, "=spec: empty"},
    {"comment only", "# nothing\n", {0}, "=spec: empty"},
    {"two documents",
     BASE "---\nname: b\n",
     {0},
     "=line 3: only one YAML document is allowed"},
    {"alias", "name: &n a\ncommand: *n\n", {0}, "=line 2: aliases are not supported"},
    {"alias key", "name: &n a\n*n : b\n", {0}, "aliases are not supported"},
    {"complex key", BASE "? [a]\n: b\n", {0}, "mapping keys must be plain strings"},
    {"nul",
     "name: \"a\\0b\"\ncommand: x\n",
     {0},
     "=line 1: NUL characters are not allowed"},
    {"deep nesting",
     BASE "env: [[[[[[[[[[[[[[[[[a]]]]]]]]]]]]]]]]]\n",
     {0},
     "nesting deeper than 16 levels"},
    /* --set */
    {"set unknown key",
     BASE,
     {"resorces.gpus=2"},
     "=--set resorces.gpus: unknown key 'resorces'"},
    {"set unknown nested",
     BASE,
     {"resources.gpu=2"},
     "=--set resources.gpu: unknown key 'gpu' in resources"},
    {"set under scalar",
     BASE,
     {"resources.gpus.x=1"},
     "=--set resources.gpus.x: unknown key 'x' in resources.gpus"},
    {"set no equals",
     BASE,
     {"resources.gpus"},
     "=--set resources.gpus: expected key=value"},
    {"set empty key", BASE, {"resources..gpus=1"}, "=--set resources..gpus: empty key"},
    {"set empty path", BASE, {"=1"}, "empty key"},
    {"set bad value",
     BASE,
     {"resources.gpus=two"},
     "=--set: resources.gpus: expected a non-negative integer, got 'two'"},
    {"set invalid yaml",
     BASE,
     {"resources.arch=[a"},
     "--set resources.arch: invalid YAML"},
    {"set into scalar",
     BASE "resources: 5\n",
     {"resources.gpus=1"},
     "=--set resources.gpus: 'resources' is not a mapping"},
    {"set service on train",
     BASE,
     {"service.replicas=2"},
     "=--set: service: only for kind: service"},
    {"set unknown in value",
     BASE,
     {"resources={gpu: 1}"},
     "=--set: unknown key 'gpu' in resources"},
    {"set second bad",
     BASE,
     {"priority=1", "kind=cron"},
     "--set: kind: expected train, service or dev, got 'cron'"},
    {"set bad utf-8",
     BASE,
     {"resources.\xff\xfe=1"},
     "=--set resources.?"
     "?: unknown key '?"
     "?' in resources"},
    {"set removes name", BASE, {"name="}, "=name: required"},
    {"code empty", BASE "code: ''\n", {0}, "code: must name a directory"},
    {"code not a string", BASE "code: [a]\n", {0}, "code: "},
    {"files not a list", BASE "files: a\n", {0}, "files: expected a list"},
    {"files to escapes", BASE "files: [{from: a, to: ../b}]\n", {0},
     "files[0].to: '../b' is not a path inside the code dir"},
    {"files no from", BASE "files: [{to: b}]\n", {0}, "files[0].from: required"},
    {"files unknown key", BASE "files: [{from: a, to: b, mode: 1}]\n", {0}, "unknown key 'mode'"},
    {"outputs not a list", BASE "outputs: results/\n", {0}, "outputs: expected a list"},
    {"outputs not a pattern", BASE "outputs: [[a]]\n", {0}, "outputs[0]: expected a pattern"},
    {"outputs empty pattern", BASE "outputs: ['']\n", {0}, "outputs[0]: expected a pattern"},
};

static void run_bad_case(void **state)
{
    const bad_case_t *c = *state;
    int nsets = 0;
    while (nsets < 3 && c->sets[nsets])
        nsets++;
    br_err_t err;
    br_spec_t *s = parse(c->yaml, c->sets, nsets, &err);
    if (s) {
        br_spec_destroy(&s);
        fail_msg("%s: parsed, want error '%s'", c->name, c->want);
    }
    int exact = c->want[0] == '=';
    const char *want = c->want + exact;
    if (exact ? strcmp(err.text, want) != 0 : !strstr(err.text, want))
        fail_msg("%s: error '%s', want '%s'", c->name, err.text, want);
    assert_int_not_equal(err.errnum, 0);
}

/* A spec larger than any field: errors stay short and whole lines. */
static void test_long_values(void **state)
{
    char yaml[600];
    snprintf(yaml, sizeof(yaml), "name: a\ncommand: x\nkind: %0500d\n", 7);
    br_err_t err;
    assert_null(parse(yaml, NULL, 0, &err));
    assert_true(strlen(err.text) < BR_ERR_TEXT - 1);
    assert_non_null(strstr(err.text, "...'"));
}

/* libyaml's limit on a key's length is named, in block and flow style. */
static void test_long_key(void **state)
{
    static const char *const forms[] = {"name: a\ncommand: x\nenv:\n  %s: 1\n",
                                        "name: a\ncommand: x\nenv: {%s: 1}\n"};
    char key[1101], yaml[1200];
    memset(key, 'K', sizeof(key) - 1);
    key[sizeof(key) - 1] = '\0';
    for (size_t i = 0; i < sizeof(forms) / sizeof(forms[0]); i++) {
        snprintf(yaml, sizeof(yaml), forms[i], key);
        br_err_t err;
        assert_null(parse(yaml, NULL, 0, &err));
        if (!strstr(err.text, "keys are at most 1024 characters"))
            fail_msg("form %zu: %s", i, err.text);
    }
}

/* 0 where 0 means "no limit" is fine said plainly. */
static void test_zero_time_limit(void **state)
{
    static const char *const zeros[] = {"0", "0ms", "0.0s", "0e5"};
    for (size_t i = 0; i < sizeof(zeros) / sizeof(zeros[0]); i++) {
        char yaml[64];
        snprintf(yaml, sizeof(yaml), "name: a\ncommand: x\ntime_limit: %s\n", zeros[i]);
        br_spec_t *s = parse_ok(yaml, NULL, 0);
        assert_int_equal(s->time_limit_ms, 0);
        br_spec_destroy(&s);
    }
    br_spec_t *s = parse_ok("name: a\ncommand: x\ntime_limit: 0.6ms\n", NULL, 0);
    assert_int_equal(s->time_limit_ms, 1);
    br_spec_destroy(&s);
}

/* progress: {timeout}: hang detection, with restart.on taking hung by default; a
 * restart.on that is given is taken as it is. */
static void test_progress(void **state)
{
    (void)state;
    br_spec_t *s = parse_ok("name: a\ncommand: x\nprogress: {timeout: 15m}\n", NULL, 0);
    assert_int_equal(s->progress_timeout_ms, 15 * 60000);
    assert_int_equal(s->restart.on_hung, 1);
    json_t *j = br_spec_to_json(s);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(j, "progress"),
                                                        "timeout")),
                     15 * 60000);
    json_t *on = json_object_get(json_object_get(j, "restart"), "on");
    assert_int_equal(json_array_size(on), 2);
    assert_string_equal(json_string_value(json_array_get(on, 0)), "node_lost");
    assert_string_equal(json_string_value(json_array_get(on, 1)), "hung");
    json_decref(j);
    br_spec_destroy(&s);

    /* restart.on given without hung: a hang fails the job */
    s = parse_ok("name: a\ncommand: x\nprogress: {timeout: 3s}\n"
                 "restart: {on: [nonzero_exit]}\n", NULL, 0);
    assert_int_equal(s->progress_timeout_ms, 3000);
    assert_int_equal(s->restart.on_hung, 0);
    assert_int_equal(s->restart.on_nonzero_exit, 1);
    br_spec_destroy(&s);

    /* hung may be listed with or without progress (then it never happens) */
    s = parse_ok("name: a\ncommand: x\nrestart: {on: [hung, node_lost]}\n", NULL, 0);
    assert_int_equal(s->restart.on_hung, 1);
    assert_int_equal(s->progress_timeout_ms, 0);
    br_spec_destroy(&s);

    /* without progress: no hung in the defaults, progress null */
    s = parse_ok("name: a\ncommand: x\n", NULL, 0);
    assert_int_equal(s->restart.on_hung, 0);
    j = br_spec_to_json(s);
    assert_true(json_is_null(json_object_get(j, "progress")));
    json_decref(j);
    br_spec_destroy(&s);

    /* --set reaches it, and the least timeout passes */
    const char *sets[] = {"progress.timeout=1s"};
    s = parse_ok("name: a\ncommand: x\n", sets, 1);
    assert_int_equal(s->progress_timeout_ms, 1000);
    assert_int_equal(s->restart.on_hung, 1);
    br_spec_destroy(&s);
}

/* A command longer than one execve argument may be is refused at parse time, naming
 * the limit; one just within it passes. */
static void test_command_length(void **state)
{
    size_t n = BR_SPEC_MAX_COMMAND + 1;
    char *yaml = malloc(n + 64);
    assert_non_null(yaml);
    int head = snprintf(yaml, 64, "name: a\ncommand: ");
    memset(yaml + head, 'x', n);
    strcpy(yaml + head + n, "\n");
    br_err_t err;
    assert_null(parse(yaml, NULL, 0, &err));
    assert_non_null(strstr(err.text, "longer than the kernel's limit for one argument "
                                     "(131071 bytes)"));
    strcpy(yaml + head + n - 1, "\n");
    br_spec_t *s = parse_ok(yaml, NULL, 0);
    assert_int_equal(strlen(s->command), BR_SPEC_MAX_COMMAND);
    br_spec_destroy(&s);
    /* an env variable too */
    head = snprintf(yaml, 64, "name: a\ncommand: x\nenv:\n  V: ");
    memset(yaml + head, 'x', n);
    strcpy(yaml + head + n, "\n");
    assert_null(parse(yaml, NULL, 0, &err));
    assert_non_null(strstr(err.text, "env.V: longer than the kernel's limit"));
    free(yaml);
}

/* Lists and mappings are capped at 1024 entries. */
static void test_too_many_entries(void **state)
{
    size_t cap = 16 * 1100;
    char *yaml = malloc(cap);
    size_t n = (size_t)sprintf(yaml, "name: a\ncommand: x\nenv:\n");
    for (int i = 0; i < 1025; i++)
        n += (size_t)sprintf(yaml + n, "  V%d: x\n", i);
    br_err_t err;
    assert_null(parse(yaml, NULL, 0, &err));
    assert_string_equal(err.text, "line 1028: more than 1024 entries");
    /* 1024 are fine */
    *strstr(yaml, "  V1024: x\n") = '\0';
    br_spec_t *s = parse_ok(yaml, NULL, 0);
    assert_int_equal(json_object_size(s->env), 1024);
    br_spec_destroy(&s);
    free(yaml);
}

/* A quoted value cut short in an error never splits a UTF-8 character. */
static void test_error_utf8(void **state)
{
    char yaml[400];
    char word[200] = "";
    for (int i = 0; i < 30; i++)
        strcat(word, "\xc3\xa9"); /* e-acute, two bytes */
    snprintf(yaml, sizeof(yaml), "name: a\ncommand: x\nkind: x%s\n", word);
    br_err_t err;
    assert_null(parse(yaml, NULL, 0, &err));
    json_t *j = json_string(err.text); /* NULL when not valid UTF-8 */
    assert_non_null(j);
    json_decref(j);
    assert_non_null(strstr(err.text, "...'"));
}

static void test_odd_calls(void **state)
{
    br_err_t err;
    const char *sets[] = {NULL};
    assert_null(br_spec_to_json(NULL));
    assert_null(parse("name: a\ncommand: x\n", sets, 1, &err));
    assert_string_equal(err.text, "--set: missing");
    /* nsets 0 with a NULL array is fine */
    br_spec_t *s = parse_ok("name: a\ncommand: x\n", NULL, 0);
    br_spec_destroy(&s);
}

int main(void)
{
    static const struct CMUnitTest fixed[] = {
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_code),
        cmocka_unit_test(test_example_train),
        cmocka_unit_test(test_example_refused),
        cmocka_unit_test(test_service),
        cmocka_unit_test(test_after),
        cmocka_unit_test(test_service_defaults),
        cmocka_unit_test(test_service_autoscale),
        cmocka_unit_test(test_service_models),
        cmocka_unit_test(test_preempt),
        cmocka_unit_test(test_nodelist),
        cmocka_unit_test(test_small_forms),
        cmocka_unit_test(test_env_scalars),
        cmocka_unit_test(test_sets),
        cmocka_unit_test(test_set_into_null_section),
        cmocka_unit_test(test_destroy_null),
        cmocka_unit_test(test_oversized),
        cmocka_unit_test(test_null_input),
        cmocka_unit_test(test_long_values),
        cmocka_unit_test(test_too_many_entries),
        cmocka_unit_test(test_zero_time_limit),
        cmocka_unit_test(test_progress),
        cmocka_unit_test(test_long_key),
        cmocka_unit_test(test_command_length),
        cmocka_unit_test(test_error_utf8),
        cmocka_unit_test(test_odd_calls),
        cmocka_unit_test(test_dev),
        cmocka_unit_test(test_setup),
        cmocka_unit_test(test_image),
    };
    size_t nfixed = sizeof(fixed) / sizeof(fixed[0]);
    size_t nbad = sizeof(bad_cases) / sizeof(bad_cases[0]);
    struct CMUnitTest *tests = calloc(nfixed + nbad, sizeof(*tests));
    if (!tests)
        return 1;
    memcpy(tests, fixed, sizeof(fixed));
    for (size_t i = 0; i < nbad; i++) {
        tests[nfixed + i] = (struct CMUnitTest){.name = bad_cases[i].name,
                                                .test_func = run_bad_case,
                                                .initial_state = (void *)&bad_cases[i]};
    }
    int rc = _cmocka_run_group_tests("spec", tests, nfixed + nbad, NULL, NULL);
    free(tests);
    return rc;
}
