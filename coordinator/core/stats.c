/* stats.c - what the coordinator measures for /metrics, and the page (stats.h). */
#include "stats.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coord.h"
#include "gpulive.h"
#include "dashboard.h"
#include "http.h"
#include "metrics.h"
#include "util.h"

#define STATES_MAX 16 /* node or job states told apart on one page */

/* Bucket bounds, in seconds, of each histogram. */
static const double queue_wait_le[] = {0.5, 1,   2,    5,    10,    30,    60,   120,
                                       300, 600, 1800, 3600, 14400, 43200, 86400};
static const double recovery_le[] = {1,  2,  5,   10,  15,  20,   30,
                                     45, 60, 120, 300, 600, 1800, 3600};
static const double rtt_le[] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                                0.05,   0.1,   0.25,   0.5,   1,    2.5};
static const double handling_le[] = {0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025,
                                     0.005,   0.01,   0.025,   0.05,   0.1,   0.25};
#define N(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* The refusals told apart, by errnum; everything else is "other". */
static const struct {
    int errnum;
    const char *reason;
} refusals[] = {
    {EACCES, "not_allowed"}, {EPERM, "not_permitted"},
    {EINVAL, "invalid"},     {ENOENT, "not_found"},
    {EEXIST, "exists"},      {EPROTO, "malformed"},
    {EBUSY, "busy"},         {ENOTCONN, "not_connected"},
    {ESTALE, "stale"},       {ENOTSUP, "not_supported"},
    {EFBIG, "too_big"},      {ENOSPC, "store_full"},
    {EIO, "store_error"},    {ENOMEM, "out_of_memory"},
};
#define NREFUSALS N(refusals)
#define OTHER NREFUSALS /* refused[OTHER]: every other errnum */

struct br_stats {
    br_histogram_t hist[BR_STAT_COUNT];
    uint64_t refused[NREFUSALS + 1];
    uint64_t handshakes_refused;
    uint64_t hung; /* attempts agents ended as hung since this brambled started */
    uint64_t sends_dropped; /* messages the loop dropped: their peer did not read */
    double pulled[2][2]; /* [replica, restore][received, deduplicated] bytes */
    int64_t started_ms; /* wall clock */
    br_metrics_t *page;
};

br_stats_t *br_stats_new(void)
{
    br_stats_t *s = calloc(1, sizeof(*s));
    if (!s)
        return NULL;
    s->page = br_metrics_new();
    if (!s->page) {
        free(s);
        return NULL;
    }
    br_histogram_init(&s->hist[BR_STAT_QUEUE_WAIT], queue_wait_le, N(queue_wait_le));
    br_histogram_init(&s->hist[BR_STAT_RECOVERY], recovery_le, N(recovery_le));
    br_histogram_init(&s->hist[BR_STAT_HEARTBEAT_RTT], rtt_le, N(rtt_le));
    br_histogram_init(&s->hist[BR_STAT_HEARTBEAT_HANDLING], handling_le,
                      N(handling_le));
    s->started_ms = br_now_ms();
    return s;
}

void br_stats_destroy(br_stats_t **sp)
{
    if (!sp || !*sp)
        return;
    br_metrics_destroy(&(*sp)->page);
    free(*sp);
    *sp = NULL;
}

void br_stats_observe(br_stats_t *s, br_stat_t which, double seconds)
{
    if (s && which >= 0 && which < BR_STAT_COUNT)
        br_histogram_observe(&s->hist[which], seconds);
}

static int refusal_index(int errnum)
{
    if (errnum == EROFS) /* the store cannot be written: a store error too */
        errnum = EIO;
    for (int i = 0; i < NREFUSALS; i++)
        if (refusals[i].errnum == errnum)
            return i;
    return OTHER;
}

const char *br_stats_reason(int errnum)
{
    int i = refusal_index(errnum);
    return i == OTHER ? "other" : refusals[i].reason;
}

void br_stats_refused(br_stats_t *s, int errnum)
{
    if (s)
        s->refused[refusal_index(errnum)]++;
}

void br_stats_handshake_refused(br_stats_t *s)
{
    if (s)
        s->handshakes_refused++;
}

void br_stats_hung(br_stats_t *s)
{
    if (s)
        s->hung++;
}

void br_stats_send_dropped(br_stats_t *s)
{
    if (s)
        s->sends_dropped++;
}

void br_stats_set_sends_dropped(br_stats_t *s, uint64_t n)
{
    if (s)
        s->sends_dropped = n;
}

uint64_t br_stats_sends_dropped(const br_stats_t *s)
{
    return s ? s->sends_dropped : 0;
}

void br_stats_pulled(br_stats_t *s, int restore, long long received, long long deduped)
{
    if (!s)
        return;
    s->pulled[restore != 0][0] += (double)(received > 0 ? received : 0);
    s->pulled[restore != 0][1] += (double)(deduped > 0 ? deduped : 0);
}

/* Checkpoints and their copies on other nodes: what the store holds, and what
 * pulls moved since this brambled started. */
static void page_checkpoints(br_metrics_t *m, br_stats_t *s, br_coord_t *c)
{
    int64_t t[4];
    br_err_t err;
    if (br_store_totals(c->store, t, &err) < 0) {
        fprintf(stderr, "brambled: metrics: checkpoints left out: %s\n", err.text);
        return;
    }
    static const struct {
        const char *name, *type, *help;
    } fams[4] = { /* in br_store_totals's order */
        {"bramble_checkpoints_total", "counter",
         "Checkpoints counted (complete, reported by their job's node)."},
        {"bramble_checkpoint_bytes_total", "counter",
         "Bytes of the checkpoints counted, as their nodes measured them."},
        {"bramble_replicas", "gauge", "Verified copies of checkpoints held on other nodes."},
        {"bramble_replica_bytes", "gauge", "Bytes of the verified copies held on other nodes."},
    };
    for (int f = 0; f < 4; f++) {
        br_metrics_family(m, fams[f].name, fams[f].type, fams[f].help);
        br_metrics_sample(m, fams[f].name, NULL, (double)t[f]);
    }
    br_metrics_family(m, "bramble_checkpoint_pulled_bytes_total", "counter",
                      "Bytes of checkpoints pulled between nodes since brambled started: "
                      "sent over the network, or found on the node by hash; for a replica "
                      "or to restore a job.");
    static const char *const kinds[] = {"replica", "restore"}, *const hows[] = {"sent",
                                                                               "deduplicated"};
    for (int k = 0; k < 2; k++)
        for (int h = 0; h < 2; h++) {
            const char *labels[] = {"for", kinds[k], "how", hows[h], NULL};
            br_metrics_sample(m, "bramble_checkpoint_pulled_bytes_total", labels,
                              s->pulled[k][h]);
        }
}

/* What each user's jobs used and cost, ever (usage.h). */
static void page_usage(br_metrics_t *m, br_coord_t *c)
{
    br_err_t err;
    json_t *rows = br_store_usage_totals(c->store, &err);
    if (!rows) {
        fprintf(stderr, "brambled: metrics: usage left out: %s\n", err.text);
        return;
    }
    static const struct {
        const char *name, *key, *help;
        double scale;
    } fams[] = {
        {"bramble_user_gpu_seconds_total", "gpu_ms",
         "GPU-seconds the user's jobs held (every GPU, from placement to the end).", 1e3},
        {"bramble_user_cpu_seconds_total", "cpu_ms", "CPU-seconds the user's jobs held.", 1e3},
        {"bramble_user_cost_total", "cost_micros",
         "What the user's jobs cost, by their nodes' cost per hour.", 1e6},
    };
    for (size_t f = 0; f < sizeof(fams) / sizeof(fams[0]); f++) {
        br_metrics_family(m, fams[f].name, "counter", fams[f].help);
        size_t i;
        json_t *r;
        json_array_foreach(rows, i, r) {
            const char *labels[] = {"user", json_string_value(json_object_get(r, "name")),
                                    NULL};
            br_metrics_sample(m, fams[f].name, labels,
                              (double)json_integer_value(json_object_get(r, fams[f].key)) /
                                  fams[f].scale);
        }
    }
    json_decref(rows);
}

/* --- the page ------------------------------------------------------------------- */

/* Counts by state: the states always shown first (0 when none), then others met. */
typedef struct {
    const char *state[STATES_MAX];
    double count[STATES_MAX];
    int n;
} tally_t;

static void tally_init(tally_t *t, const char *const *always)
{
    memset(t, 0, sizeof(*t));
    for (int i = 0; always[i] && t->n < STATES_MAX; i++)
        t->state[t->n++] = always[i];
}

static void tally_add(tally_t *t, const char *state, double n)
{
    for (int i = 0; i < t->n; i++) {
        if (strcmp(t->state[i], state) == 0) {
            t->count[i] += n;
            return;
        }
    }
    if (t->n < STATES_MAX) {
        t->state[t->n] = state;
        t->count[t->n++] = n;
    }
}

static void tally_write(br_metrics_t *m, const char *name, const tally_t *t)
{
    for (int i = 0; i < t->n; i++) {
        const char *labels[] = {"state", t->state[i], NULL};
        br_metrics_sample(m, name, labels, t->count[i]);
    }
}

/* What each node costs per hour now, as its agent last said (every node that said
 * one), and the mean power behind it (connected nodes that know it). */
static void page_node_cost(br_metrics_t *m, br_coord_t *c)
{
    br_metrics_family(m, "bramble_node_cost_per_hour", "gauge",
                      "What each node costs per hour now: its fixed rate plus its "
                      "electricity over the last heartbeat interval (agent's currency).");
    for (br_node_t *n = br_nodes_first(c->nodes); n; n = n->next) {
        const char *labels[] = {"node", n->name, NULL};
        if (json_is_number(json_object_get(n->info, "cost_per_hour")))
            br_metrics_sample(m, "bramble_node_cost_per_hour", labels,
                              br_node_cost_per_hour(n));
    }
    br_metrics_family(m, "bramble_node_power_watts", "gauge",
                      "Each node's mean power draw over the last heartbeat interval: its "
                      "GPUs' (NVML) plus its idle draw.");
    for (br_node_t *n = br_nodes_first(c->nodes); n; n = n->next) {
        const char *labels[] = {"node", n->name, NULL};
        json_t *w = json_object_get(n->info, "power_watts");
        if (json_is_number(w) && n->route_len > 0 && n->state != BR_NODE_LOST)
            br_metrics_sample(m, "bramble_node_power_watts", labels, json_number_value(w));
    }
}

static void page_nodes(br_metrics_t *m, br_coord_t *c)
{
    static const char *const always[] = {"ready", "draining", "unhealthy", "lost", NULL};
    tally_t t;
    tally_init(&t, always);
    for (br_node_t *n = br_nodes_first(c->nodes); n; n = n->next)
        tally_add(&t, br_node_state_name(n->state), 1);
    br_metrics_family(m, "bramble_nodes", "gauge",
                      "Nodes known to the coordinator, by state.");
    tally_write(m, "bramble_nodes", &t);
    br_metrics_family(m, "bramble_node_last_seen_timestamp_seconds", "gauge",
                      "When the coordinator last heard from each node (unix seconds).");
    for (br_node_t *n = br_nodes_first(c->nodes); n; n = n->next) {
        int64_t ms = n->last_seen_ms
                         ? n->last_seen_ms
                         : json_integer_value(json_object_get(n->info, "last_seen"));
        const char *labels[] = {"node", n->name, NULL};
        br_metrics_sample(m, "bramble_node_last_seen_timestamp_seconds", labels,
                          (double)ms / 1000.0);
    }
    page_node_cost(m, c);
}

/* Jobs by state, and by owner and state; what the per-job cap dropped. */
static void page_jobs(br_metrics_t *m, br_coord_t *c)
{
    static const char *const always[] = {"pending", "starting",  "running", "completed",
                                         "failed",  "cancelled", NULL};
    br_err_t err;
    json_t *rows = br_store_job_counts(c->store, &err);
    int64_t lost = br_store_log_lost_all(c->store, &err);
    if (!rows || lost < 0) {
        fprintf(stderr, "brambled: metrics: jobs left out: %s\n", err.text);
        json_decref(rows);
        return;
    }
    tally_t t;
    tally_init(&t, always);
    double capped = 0;
    size_t i;
    json_t *r;
    json_array_foreach(rows, i, r) {
        const char *state = json_string_value(json_object_get(r, "state"));
        if (state)
            tally_add(&t, state,
                      (double)json_integer_value(json_object_get(r, "count")));
        capped += (double)json_integer_value(json_object_get(r, "log_dropped"));
    }
    br_metrics_family(m, "bramble_jobs", "gauge", "Jobs in the store, by state.");
    tally_write(m, "bramble_jobs", &t);
    br_metrics_family(m, "bramble_user_jobs", "gauge",
                      "Jobs in the store, by owner and state.");
    json_array_foreach(rows, i, r) {
        const char *state = json_string_value(json_object_get(r, "state"));
        const char *owner = json_string_value(json_object_get(r, "owner"));
        const char *labels[] = {"user", owner ? owner : "", "state", state ? state : "",
                                NULL};
        br_metrics_sample(m, "bramble_user_jobs", labels,
                          (double)json_integer_value(json_object_get(r, "count")));
    }
    br_metrics_family(
        m, "bramble_log_dropped_bytes_total", "counter",
        "Bytes of job output dropped: by the coordinator's per-job cap "
        "(--log-max-per-job), or by agents that could not ship it in time.");
    const char *by_cap[] = {"by", "coordinator", NULL},
               *by_agent[] = {"by", "agent", NULL};
    br_metrics_sample(m, "bramble_log_dropped_bytes_total", by_cap, capped);
    br_metrics_sample(m, "bramble_log_dropped_bytes_total", by_agent, (double)lost);
    json_decref(rows);
}

static void page_hung(br_metrics_t *m, br_stats_t *s)
{
    br_metrics_family(m, "bramble_attempts_hung_total", "counter",
                      "Attempts their agent ended as hung: no output, checkpoint or "
                      "progress for the spec's progress.timeout.");
    br_metrics_sample(m, "bramble_attempts_hung_total", NULL, (double)s->hung);
}

static void page_histograms(br_metrics_t *m, br_stats_t *s)
{
    static const struct {
        const char *name, *help;
    } h[BR_STAT_COUNT] = {
        [BR_STAT_QUEUE_WAIT] = {"bramble_job_queue_wait_seconds",
                                "Time from a job's submission to its first running "
                                "attempt."},
        [BR_STAT_RECOVERY] =
            {"bramble_job_recovery_seconds",
             "Time from the coordinator declaring a job's node lost to "
             "the job running again."},
        [BR_STAT_HEARTBEAT_RTT] = {"bramble_heartbeat_rtt_seconds",
                                   "Heartbeat round trips as agents measure them (each "
                                   "heartbeat reports the one before)."},
        [BR_STAT_HEARTBEAT_HANDLING] = {"bramble_heartbeat_handling_seconds",
                                        "Time the coordinator's loop spends on one "
                                        "heartbeat."},
    };
    for (int i = 0; i < BR_STAT_COUNT; i++) {
        br_metrics_family(m, h[i].name, "histogram", h[i].help);
        br_metrics_histogram(m, h[i].name, NULL, &s->hist[i]);
    }
}

static void page_refusals(br_metrics_t *m, br_stats_t *s, br_coord_t *c)
{
    br_metrics_family(m, "bramble_requests_refused_total", "counter",
                      "Requests answered with an error, by reason.");
    for (int i = 0; i <= NREFUSALS; i++) {
        const char *labels[] = {"reason", i == OTHER ? "other" : refusals[i].reason,
                                NULL};
        br_metrics_sample(m, "bramble_requests_refused_total", labels,
                          (double)s->refused[i]);
    }
    br_metrics_family(m, "bramble_handshakes_refused_total", "counter",
                      "Connections whose CURVE key the coordinator does not admit.");
    br_metrics_sample(m, "bramble_handshakes_refused_total", NULL,
                      (double)s->handshakes_refused);
    br_metrics_family(m, "bramble_sends_dropped_total", "counter",
                      "Messages dropped because their peer's queue was full.");
    br_metrics_sample(m, "bramble_sends_dropped_total", NULL, (double)s->sends_dropped);
}

static void page_http(br_metrics_t *m, br_coord_t *c)
{
    br_http_counts_t hc;
    char code[16];
    if (!c->http)
        return;
    br_http_counts(c->http, &hc);
    br_metrics_family(m, "bramble_http_requests_total", "counter",
                      "Answers of the coordinator's HTTP side, by status code.");
    for (int i = 0; i < BR_HTTP_CODES; i++) {
        snprintf(code, sizeof(code), "%d", br_http_code(i));
        const char *labels[] = {"code", code, NULL};
        br_metrics_sample(m, "bramble_http_requests_total", labels,
                          (double)hc.answers[i]);
    }
    br_metrics_family(m, "bramble_http_unauthorized_total", "counter",
                      "HTTP requests refused with 401, by reason.");
    for (int i = 0; i < BR_HTTP_REASONS; i++) {
        const char *labels[] = {"reason", br_http_reason(i), NULL};
        br_metrics_sample(m, "bramble_http_unauthorized_total", labels,
                          (double)hc.unauthorized[i]);
    }
    if (!c->dash)
        return;
    br_dash_counts_t dc;
    br_dash_counts(c->dash, &dc);
    br_metrics_family(m, "bramble_dashboard_sessions", "gauge",
                      "The web dashboard's sessions that have not expired.");
    br_metrics_sample(m, "bramble_dashboard_sessions", NULL, (double)dc.sessions);
    br_metrics_family(m, "bramble_dashboard_streams", "gauge",
                      "The web dashboard's open event streams.");
    br_metrics_sample(m, "bramble_dashboard_streams", NULL, (double)dc.streams);
}

const char *br_stats_page(br_stats_t *s, br_coord_t *c, size_t *len)
{
    br_metrics_t *m = s->page;
    br_err_t err;
    br_metrics_reset(m);
    const char *version[] = {"version", BRAMBLE_VERSION, NULL};
    br_metrics_family(m, "bramble_build_info", "gauge",
                      "The running brambled's version.");
    br_metrics_sample(m, "bramble_build_info", version, 1);
    br_metrics_family(m, "bramble_start_time_seconds", "gauge",
                      "When this brambled started (unix seconds).");
    br_metrics_sample(m, "bramble_start_time_seconds", NULL,
                      (double)s->started_ms / 1000.0);
    page_nodes(m, c);
    br_gpulive_page(m, c->nodes);
    page_jobs(m, c);
    page_hung(m, s);
    page_checkpoints(m, s, c);
    page_usage(m, c);
    page_histograms(m, s);
    int64_t size = br_store_size(c->store, &err);
    if (size >= 0) {
        br_metrics_family(
            m, "bramble_store_size_bytes", "gauge",
            "Bytes the store takes on disk (bramble.db and its write-ahead "
            "log).");
        br_metrics_sample(m, "bramble_store_size_bytes", NULL, (double)size);
    } else {
        fprintf(stderr, "brambled: metrics: store size left out: %s\n", err.text);
    }
    page_refusals(m, s, c);
    page_http(m, c);
    return br_metrics_text(m, len);
}
