/* fit.c - could any node ever run this job? The job's resources against each
 * node's totals (not what is free now), so that `bramble submit` can warn about a
 * job that would otherwise wait in silence forever: a gang larger than the
 * cluster, more CPUs or GPUs than any node has, a label nobody carries. */
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "spec.h"
#include "util.h"

#define WHY_LEN 256

/* The GPUs of node n that a job needing vram (0: any) of models could use. */
static int usable_gpus(const json_t *n, uint64_t vram, const json_t *models)
{
    int count = 0;
    size_t i;
    json_t *g;
    json_array_foreach(json_object_get(n, "gpus"), i, g) {
        uint64_t total = (uint64_t)json_integer_value(json_object_get(g, "vram_total"));
        if (br_spec_match_list(models, json_string_value(json_object_get(g, "model")), 1) &&
            total >= vram)
            count++;
    }
    return count;
}

/* 1 when node n could ever run one node's share of the job (res: the normalised
 * spec's resources; image: it has one), else 0 with why ("pi1 has 2 CPUs, the job
 * needs 64"), or -1 when the spec's nodelist leaves n out. */
static int node_fits(const json_t *n, const json_t *res, int image, char *why, size_t len)
{
    const char *name = json_string_value(json_object_get(n, "name"));
    const char *arch = json_string_value(json_object_get(n, "arch"));
    json_int_t cpus = json_integer_value(json_object_get(res, "cpus"));
    json_int_t have_cpus = json_integer_value(json_object_get(n, "cpus"));
    uint64_t mem = (uint64_t)json_integer_value(json_object_get(res, "memory"));
    uint64_t have_mem = (uint64_t)json_integer_value(json_object_get(n, "memory"));
    uint64_t vram = (uint64_t)json_integer_value(json_object_get(res, "vram"));
    json_int_t gpus = json_integer_value(json_object_get(res, "gpus"));
    const json_t *labels = json_object_get(res, "labels");
    char a[32], b[32];
    const char *k;
    if (!br_spec_match_list(json_object_get(res, "nodelist"), name, 0))
        return -1;
    if (!br_spec_match_list(json_object_get(res, "arch"), arch, 0))
        return snprintf(why, len, "%s is %s, not a wanted arch", name, arch ? arch : "?"),
               0;
    if (image && !json_is_string(json_object_get(n, "container_runtime")))
        return snprintf(why, len, "%s runs no containers", name), 0;
    if ((k = br_spec_label_missing(labels, json_object_get(n, "labels"))))
        return snprintf(why, len, "%s has no label %s=%s", name, k,
                        json_string_value(json_object_get(labels, k))
                            ? json_string_value(json_object_get(labels, k))
                            : "?"),
               0;
    if (cpus > have_cpus)
        return snprintf(why, len, "%s has %lld CPUs, the job needs %lld", name,
                        (long long)have_cpus, (long long)cpus),
               0;
    if (mem > have_mem)
        return snprintf(why, len, "%s has %s memory, the job needs %s", name,
                        br_format_size(have_mem, a, sizeof(a)),
                        br_format_size(mem, b, sizeof(b))),
               0;
    int usable = usable_gpus(n, vram, json_object_get(res, "gpu_model"));
    if (gpus > usable) {
        const json_t *models = json_object_get(res, "gpu_model");
        char list[128];
        snprintf(why, len, "%s has %d GPUs%s%s%s%s%s, the job needs %lld", name, usable,
                 json_array_size(models) ? " of model " : "",
                 json_array_size(models) ? cli_fmt_list(models, "/", list, sizeof(list))
                                         : "",
                 vram ? " with " : "", vram ? br_format_size(vram, a, sizeof(a)) : "",
                 vram ? " VRAM" : "", (long long)gpus);
        return 0;
    }
    return 1;
}

/* Append sep and what (what alone first) to buf, bounded. */
static void add_text(char *buf, size_t len, const char *sep, const char *what)
{
    size_t n = strlen(buf);
    if (n + strlen(sep) + 1 < len)
        snprintf(buf + n, len - n, "%s%s", n ? sep : "", what);
}

uint32_t cli_fit_ask(cli_t *cli)
{
    uint32_t seq = 0;
    if (!cli->client || br_client_send(cli->client, "node.list", json_object(), &seq,
                                       NULL) < 0)
        return 0;
    return seq;
}

void cli_warn_unfit(cli_t *cli, int64_t id, const json_t *spec, uint32_t seq)
{
    br_msg_t *m = NULL;
    if (!seq || br_client_recv(cli->client, seq, cli->timeout_ms, &m, NULL) < 0)
        return; /* a warning only: the job was submitted */
    json_t *r = json_incref(br_msg_body(m));
    br_msg_destroy(&m);
    const json_t *res = json_object_get(spec, "resources");
    json_t *nodes = json_object_get(r, "nodes"), *n;
    json_int_t want = json_integer_value(json_object_get(res, "nodes"));
    char whys[1024] = "", why[WHY_LEN], fitting[512] = "";
    int fit = 0;
    size_t i;
    if (want < 1)
        want = 1;
    json_array_foreach(nodes, i, n) {
        int f = node_fits(n, res, json_is_string(json_object_get(spec, "image")), why,
                          sizeof(why));
        if (f > 0) {
            fit++;
            add_text(fitting, sizeof(fitting), ", ",
                     json_string_value(json_object_get(n, "name")));
        } else if (f == 0) {
            add_text(whys, sizeof(whys), "; ", why);
        }
    }
    json_array_foreach(json_object_get(res, "nodelist"), i, n) {
        const char *name = json_string_value(n);
        size_t k;
        json_t *node;
        int known = 0;
        json_array_foreach(nodes, k, node) {
            known |= json_equal(json_object_get(node, "name"), n);
        }
        if (!known) {
            snprintf(why, sizeof(why), "no node is named %s", name ? name : "?");
            add_text(whys, sizeof(whys), "; ", why);
        }
    }
    if (json_array_size(nodes) == 0)
        cli_err(cli, "warning: no node has joined yet; job %lld waits until one that "
                     "fits it does",
                (long long)id);
    else if (fit == 0)
        cli_err(cli, "warning: no current node could ever run job %lld (%s); it stays "
                     "pending until a node that fits joins",
                (long long)id, whys);
    else if (fit < want)
        cli_err(cli, "warning: job %lld needs %lld nodes at once, but only %d could ever "
                     "run it (%s%s%s); it stays pending until more such nodes join",
                (long long)id, (long long)want, fit, fitting, whys[0] ? "; " : "", whys);
    json_decref(r);
}
