/* test_stats.c - the /metrics page (stats.h) for a known state of a coordinator
 * made here (coord_fixture.h): a page Prometheus can read (each family declared
 * once, before its samples, every sample of a declared family, the same on every
 * call); the gauges of nodes by state (every state shown, 0 when none), of each
 * node's last heartbeat, cost and power; jobs by state and by owner; checkpoints,
 * replicas and pulled bytes; what each user used; the counters of refusals by
 * reason (EROFS counts as a store error, an unknown errno as "other"), refused
 * handshakes, hung attempts, dropped sends and dropped output; and the histograms'
 * cumulative buckets, _sum and _count. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <errno.h>
#include <math.h>

#include "coord_fixture.h"
#include "nodelife.h"
#include "stats.h"

static int setup(void **state)
{
    coord_fixture_t *f = calloc(1, sizeof(*f));
    if (!f || fixture_open(f, "test_stats", 0) < 0) {
        free(f);
        return -1;
    }
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    coord_fixture_t *f = *state;
    fixture_close(f);
    free(f);
    return 0;
}

static const char *page_of(br_coord_t *c)
{
    size_t len = 0;
    const char *page = br_stats_page(c->stats, c, &len);
    assert_non_null(page);
    assert_int_equal(strlen(page), len);
    return page;
}

/* The line of series (name{labels} exactly as written), or NULL. */
static const char *find_line(const char *page, const char *series)
{
    size_t n = strlen(series);
    for (const char *p = page; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
        if (strncmp(p, series, n) == 0 && p[n] == ' ')
            return p;
    return NULL;
}

/* The value of series on the page (it must be there). */
static double value(const char *page, const char *series)
{
    const char *line = find_line(page, series);
    if (!line)
        fail_msg("no sample %s on the page:\n%s", series, page);
    return strtod(line + strlen(series) + 1, NULL);
}

static void assert_value(const char *page, const char *series, double want)
{
    double got = value(page, series);
    if (fabs(got - want) > 1e-9 * (fabs(want) > 1 ? fabs(want) : 1))
        fail_msg("%s: %.17g, wanted %.17g", series, got, want);
}

static void assert_absent(const char *page, const char *prefix)
{
    if (strstr(page, prefix))
        fail_msg("'%s' is on the page", prefix);
}

/* How many times text occurs on the page. */
static int count(const char *page, const char *text)
{
    int n = 0;
    for (const char *p = strstr(page, text); p; p = strstr(p + 1, text))
        n++;
    return n;
}

/* Every family has one HELP and one TYPE (before its samples); every sample line
 * belongs to the family declared last (histograms: name_bucket, _sum, _count). */
static void assert_well_formed(const char *page)
{
    char family[128] = "", type[16] = "";
    json_t *seen = json_object();
    const char *p = page;
    while (*p) {
        const char *end = strchr(p, '\n');
        assert_non_null(end); /* every line ends */
        char line[1024];
        size_t len = (size_t)(end - p);
        assert_true(len < sizeof(line));
        memcpy(line, p, len);
        line[len] = '\0';
        if (strncmp(line, "# HELP ", 7) == 0) {
            char name[128];
            assert_int_equal(sscanf(line + 7, "%127s", name), 1);
            if (json_object_get(seen, name))
                fail_msg("family %s declared twice", name);
            json_object_set_new(seen, name, json_true());
            snprintf(family, sizeof(family), "%s", name);
            type[0] = '\0';
        } else if (strncmp(line, "# TYPE ", 7) == 0) {
            char name[128];
            assert_int_equal(sscanf(line + 7, "%127s %15s", name, type), 2);
            assert_string_equal(name, family);
            assert_true(strcmp(type, "counter") == 0 || strcmp(type, "gauge") == 0 ||
                        strcmp(type, "histogram") == 0);
        } else {
            assert_true(type[0] != '\0'); /* a sample after its family's TYPE */
            size_t n = strcspn(line, "{ ");
            char name[128];
            assert_true(n < sizeof(name));
            memcpy(name, line, n);
            name[n] = '\0';
            char want[160];
            int ok = strcmp(name, family) == 0;
            static const char *const parts[] = {"_bucket", "_sum", "_count"};
            for (int i = 0; !ok && strcmp(type, "histogram") == 0 && i < 3; i++) {
                snprintf(want, sizeof(want), "%s%s", family, parts[i]);
                ok = strcmp(name, want) == 0;
            }
            if (!ok)
                fail_msg("sample '%s' is not of family %s (%s)", line, family, type);
            const char *v = strrchr(line, ' ');
            char *vend;
            assert_non_null(v);
            strtod(v + 1, &vend);
            if (*vend != '\0' && strcmp(v + 1, "+Inf") != 0 &&
                strcmp(v + 1, "NaN") != 0)
                fail_msg("sample '%s': not a number", line);
        }
        p = end + 1;
    }
    json_decref(seen);
}

/* --- reasons --------------------------------------------------------------------- */

/* The label of each refusal's errnum, as the counter shows it. */
static void test_reasons(void **state)
{
    (void)state;
    static const struct {
        int errnum;
        const char *reason;
    } cases[] = {
        {EACCES, "not_allowed"},
        {EPERM, "not_permitted"},
        {EINVAL, "invalid"},
        {ENOENT, "not_found"},
        {EEXIST, "exists"},
        {EPROTO, "malformed"},
        {EBUSY, "busy"},
        {ENOTCONN, "not_connected"},
        {ESTALE, "stale"},
        {ENOTSUP, "not_supported"},
        {EFBIG, "too_big"},
        {ENOSPC, "store_full"},
        {EIO, "store_error"},
        {EROFS, "store_error"},
        {ENOMEM, "out_of_memory"},
        {ETIMEDOUT, "other"},
        {0, "other"},
        {-3, "other"},
        {99999, "other"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        assert_string_equal(br_stats_reason(cases[i].errnum), cases[i].reason);
}

/* --- the page -------------------------------------------------------------------- */

/* A coordinator with nothing yet: every state and reason is shown with 0 (so a
 * rate or an alert has a series to start from), the build and start time. */
static void test_page_of_an_empty_coordinator(void **state)
{
    coord_fixture_t *f = *state;
    br_coord_t *c = &f->c;
    /* started now: a new stats object has its own start time */
    int64_t before = br_now_ms();
    br_stats_destroy(&c->stats);
    c->stats = br_stats_new();
    int64_t after = br_now_ms();
    const char *page = page_of(c);
    assert_well_formed(page);
    assert_value(page, "bramble_build_info{version=\"" BRAMBLE_VERSION "\"}", 1);
    double started = value(page, "bramble_start_time_seconds");
    assert_true(started >= (double)before / 1000.0 - 1e-3 &&
                started <= (double)after / 1000.0 + 1e-3);
    static const char *const node_states[] = {"ready", "draining", "unhealthy", "lost"};
    for (int i = 0; i < 4; i++) {
        char series[96];
        snprintf(series, sizeof(series), "bramble_nodes{state=\"%s\"}", node_states[i]);
        assert_value(page, series, 0);
    }
    static const char *const job_states[] = {"pending",   "starting", "running",
                                             "completed", "failed",   "cancelled"};
    for (int i = 0; i < 6; i++) {
        char series[96];
        snprintf(series, sizeof(series), "bramble_jobs{state=\"%s\"}", job_states[i]);
        assert_value(page, series, 0);
    }
    static const char *const reasons[] = {
        "not_allowed", "not_permitted", "invalid", "not_found",
        "exists",      "malformed",     "busy",    "not_connected",
        "stale",       "not_supported", "too_big", "store_full",
        "store_error", "out_of_memory", "other"};
    for (size_t i = 0; i < sizeof(reasons) / sizeof(reasons[0]); i++) {
        char series[96];
        snprintf(series, sizeof(series),
                 "bramble_requests_refused_total{reason=\"%s\"}", reasons[i]);
        assert_value(page, series, 0);
    }
    assert_int_equal(count(page, "bramble_requests_refused_total{"), 15);
    assert_value(page, "bramble_handshakes_refused_total", 0);
    assert_value(page, "bramble_sends_dropped_total", 0);
    assert_value(page, "bramble_attempts_hung_total", 0);
    assert_value(page, "bramble_checkpoints_total", 0);
    assert_value(page, "bramble_checkpoint_bytes_total", 0);
    assert_value(page, "bramble_replicas", 0);
    assert_value(page, "bramble_replica_bytes", 0);
    assert_value(
        page, "bramble_checkpoint_pulled_bytes_total{for=\"replica\",how=\"sent\"}", 0);
    assert_value(
        page,
        "bramble_checkpoint_pulled_bytes_total{for=\"restore\",how=\"deduplicated\"}",
        0);
    assert_value(page, "bramble_log_dropped_bytes_total{by=\"coordinator\"}", 0);
    assert_value(page, "bramble_log_dropped_bytes_total{by=\"agent\"}", 0);
    assert_value(page, "bramble_job_queue_wait_seconds_bucket{le=\"+Inf\"}", 0);
    assert_value(page, "bramble_job_queue_wait_seconds_count", 0);
    assert_value(page, "bramble_heartbeat_rtt_seconds_sum", 0);
    assert_true(value(page, "bramble_store_size_bytes") > 0);
    /* no samples for users or nodes there are none of; no HTTP side, no figures */
    assert_absent(page, "bramble_user_jobs{");
    assert_absent(page, "bramble_node_last_seen_timestamp_seconds{");
    assert_absent(page, "bramble_http_requests_total");
    assert_absent(page, "bramble_dashboard_sessions");
    /* the types a query relies on */
    assert_non_null(strstr(page, "# TYPE bramble_requests_refused_total counter\n"));
    assert_non_null(strstr(page, "# TYPE bramble_nodes gauge\n"));
    assert_non_null(strstr(page, "# TYPE bramble_job_queue_wait_seconds histogram\n"));
}

/* Nodes by state; each node's last heartbeat (unix seconds), its cost per hour as
 * its agent said, and its power only while it is connected and not lost. */
static void test_page_nodes(void **state)
{
    coord_fixture_t *f = *state;
    br_coord_t *c = &f->c;
    br_node_t *a = fixture_node(c, "a", 4, 0), *b = fixture_node(c, "b", 4, 0);
    br_node_t *u = fixture_node(c, "u", 4, 0), *l = fixture_node(c, "l", 4, 0);
    br_node_t *r = fixture_node(c, "r", 4, 0), *q = fixture_node(c, "q", 4, 0);
    br_nodelife_drain(c, b, "admin");
    br_nodelife_unhealthy(c, u, "GPU 0: XID 79");
    br_node_move_t lost = {BR_NODE_LOST, NULL, BR_NODE_NO_HOOK, NULL, 0};
    assert_int_equal(br_node_post(c, l, &lost, "silent"), 0);
    a->last_seen_ms = 1700000000250;
    b->last_seen_ms = 1700000001000;
    u->last_seen_ms = 1700000002000;
    l->last_seen_ms = 0; /* not heard since the start: as stored */
    json_object_set_new(l->info, "last_seen", json_integer(1600000000500));
    r->last_seen_ms = 1700000003000;
    q->last_seen_ms = 1700000004000;
    json_object_set_new(a->info, "cost_per_hour", json_real(1.25));
    json_object_set_new(a->info, "power_watts", json_real(350.5));
    json_object_set_new(l->info, "cost_per_hour", json_integer(2));
    json_object_set_new(l->info, "power_watts", json_real(90)); /* lost: not shown */
    json_object_set_new(q->info, "power_watts", json_real(80));
    q->route_len = 0; /* not connected: not shown */
    const char *page = page_of(c);
    assert_well_formed(page);
    assert_value(page, "bramble_nodes{state=\"ready\"}", 3); /* a, r, q */
    assert_value(page, "bramble_nodes{state=\"draining\"}", 1);
    assert_value(page, "bramble_nodes{state=\"unhealthy\"}", 1);
    assert_value(page, "bramble_nodes{state=\"lost\"}", 1);
    assert_value(page, "bramble_node_last_seen_timestamp_seconds{node=\"a\"}",
                 1700000000.25);
    assert_value(page, "bramble_node_last_seen_timestamp_seconds{node=\"b\"}",
                 1700000001);
    assert_value(page, "bramble_node_last_seen_timestamp_seconds{node=\"l\"}",
                 1600000000.5);
    assert_int_equal(count(page, "bramble_node_last_seen_timestamp_seconds{"), 6);
    assert_value(page, "bramble_node_cost_per_hour{node=\"a\"}", 1.25);
    assert_value(page, "bramble_node_cost_per_hour{node=\"l\"}", 2); /* what it said */
    assert_null(
        find_line(page, "bramble_node_cost_per_hour{node=\"b\"}")); /* said none */
    assert_value(page, "bramble_node_power_watts{node=\"a\"}", 350.5);
    assert_null(find_line(page, "bramble_node_power_watts{node=\"l\"}"));
    assert_null(find_line(page, "bramble_node_power_watts{node=\"q\"}"));

    /* the page is made anew each time: a node undrained moves between states */
    br_nodelife_undrain(c, b, "admin");
    page = page_of(c);
    assert_well_formed(page);
    assert_value(page, "bramble_nodes{state=\"ready\"}", 4);
    assert_value(page, "bramble_nodes{state=\"draining\"}", 0);
    assert_int_equal(count(page, "# TYPE bramble_nodes gauge"), 1);
}

static int64_t add_job(br_coord_t *c, const char *owner, const char *state)
{
    br_err_t err = {0};
    json_t *job =
        json_pack("{s:s, s:s, s:s, s:s, s:{s:s}, s:s, s:I}", "name", "j", "kind", "job",
                  "state", state, "owner", owner, "spec", "command", "true",
                  "spec_yaml", "command: true\n", "submitted", (json_int_t)1000);
    int64_t id = br_store_job_add(c->store, job, &err);
    json_decref(job);
    if (id <= 0)
        fail_msg("job: %s", err.text);
    return id;
}

/* Jobs by state, and by owner and state; output dropped by the coordinator's cap
 * and by agents. */
static void test_page_jobs(void **state)
{
    coord_fixture_t *f = *state;
    br_coord_t *c = &f->c;
    br_err_t err = {0};
    int64_t p1 = add_job(c, "ann", "pending");
    add_job(c, "ann", "pending");
    int64_t run = add_job(c, "ann", "running");
    add_job(c, "ann", "completed");
    add_job(c, "bob", "failed");
    add_job(c, "bob", "pending");
    /* 1000 bytes of output kept to 400: the cap drops the oldest */
    char chunk[100];
    memset(chunk, 'x', sizeof(chunk));
    for (int i = 0; i < 10; i++)
        assert_int_equal(br_store_log_add(c->store, p1, 1, 0, 1, i, 1000 + i, chunk,
                                          sizeof(chunk), &err),
                         0);
    int64_t capped = br_store_log_cap(c->store, p1, 400, &err);
    assert_true(capped > 0);
    /* an agent that ran the attempt says it dropped 777 bytes */
    assert_int_equal(br_store_attempt_node_add(c->store, run, 1, "a", &err), 0);
    assert_true(br_store_log_lost_set(c->store, run, 1, "a", 777, &err) >= 0);
    const char *page = page_of(c);
    assert_well_formed(page);
    assert_value(page, "bramble_jobs{state=\"pending\"}", 3);
    assert_value(page, "bramble_jobs{state=\"running\"}", 1);
    assert_value(page, "bramble_jobs{state=\"completed\"}", 1);
    assert_value(page, "bramble_jobs{state=\"failed\"}", 1);
    assert_value(page, "bramble_jobs{state=\"starting\"}", 0);
    assert_value(page, "bramble_jobs{state=\"cancelled\"}", 0);
    assert_value(page, "bramble_user_jobs{user=\"ann\",state=\"pending\"}", 2);
    assert_value(page, "bramble_user_jobs{user=\"ann\",state=\"running\"}", 1);
    assert_value(page, "bramble_user_jobs{user=\"bob\",state=\"pending\"}", 1);
    assert_value(page, "bramble_user_jobs{user=\"bob\",state=\"failed\"}", 1);
    /* only the pairs there are jobs of */
    assert_null(find_line(page, "bramble_user_jobs{user=\"bob\",state=\"running\"}"));
    assert_value(page, "bramble_log_dropped_bytes_total{by=\"coordinator\"}",
                 (double)capped);
    assert_value(page, "bramble_log_dropped_bytes_total{by=\"agent\"}", 777);
}

/* The counters the loop and the handlers feed, and the histograms' buckets. */
static void test_page_counters_and_histograms(void **state)
{
    coord_fixture_t *f = *state;
    br_coord_t *c = &f->c;
    br_stats_t *s = c->stats;
    br_stats_refused(s, EACCES);
    br_stats_refused(s, EACCES);
    br_stats_refused(s, EIO);
    br_stats_refused(s, EROFS); /* a store that cannot be written: a store error */
    br_stats_refused(s, ENOSPC);
    br_stats_refused(s, 4242);
    br_stats_refused(s, ETIMEDOUT);
    br_stats_handshake_refused(s);
    br_stats_handshake_refused(s);
    br_stats_handshake_refused(s);
    br_stats_hung(s);
    br_stats_set_sends_dropped(s, 7);
    assert_int_equal(br_stats_sends_dropped(s), 7);
    br_stats_pulled(s, 0, 1000, 500);
    br_stats_pulled(s, 0, 24, 0);
    br_stats_pulled(s, 1, 10, -5); /* nonsense counts as nothing */
    br_stats_pulled(s, 7, -1, 3);  /* any restore != 0: to restore */
    br_stats_observe(s, BR_STAT_QUEUE_WAIT, 0.3);
    br_stats_observe(s, BR_STAT_QUEUE_WAIT, 1.5);
    br_stats_observe(s, BR_STAT_QUEUE_WAIT, 100000); /* past the last bound */
    br_stats_observe(s, BR_STAT_QUEUE_WAIT, -2);     /* counts as 0 */
    br_stats_observe(s, BR_STAT_RECOVERY, 12);
    br_stats_observe(s, BR_STAT_HEARTBEAT_RTT, 0.002);
    br_stats_observe(s, BR_STAT_COUNT, 5); /* no such histogram: ignored */
    br_stats_observe(s, (br_stat_t)-1, 5);
    /* a NULL stats object is taken everywhere (a test or a start without one) */
    br_stats_refused(NULL, EIO);
    br_stats_hung(NULL);
    br_stats_handshake_refused(NULL);
    br_stats_pulled(NULL, 0, 1, 1);
    br_stats_observe(NULL, BR_STAT_QUEUE_WAIT, 1);
    assert_int_equal(br_stats_sends_dropped(NULL), 0);

    const char *page = page_of(c);
    assert_well_formed(page);
    assert_value(page, "bramble_requests_refused_total{reason=\"not_allowed\"}", 2);
    assert_value(page, "bramble_requests_refused_total{reason=\"store_error\"}", 2);
    assert_value(page, "bramble_requests_refused_total{reason=\"store_full\"}", 1);
    assert_value(page, "bramble_requests_refused_total{reason=\"other\"}", 2);
    assert_value(page, "bramble_requests_refused_total{reason=\"invalid\"}", 0);
    assert_value(page, "bramble_handshakes_refused_total", 3);
    assert_value(page, "bramble_attempts_hung_total", 1);
    assert_value(page, "bramble_sends_dropped_total", 7);
    assert_value(page,
                 "bramble_checkpoint_pulled_bytes_total{for=\"replica\",how=\"sent\"}",
                 1024);
    assert_value(
        page,
        "bramble_checkpoint_pulled_bytes_total{for=\"replica\",how=\"deduplicated\"}",
        500);
    assert_value(page,
                 "bramble_checkpoint_pulled_bytes_total{for=\"restore\",how=\"sent\"}",
                 10);
    assert_value(
        page,
        "bramble_checkpoint_pulled_bytes_total{for=\"restore\",how=\"deduplicated\"}",
        3);
    /* cumulative buckets: 0 (from -2) and 0.3 by 0.5s, 1.5 by 2s, 100000 only +Inf */
    assert_value(page, "bramble_job_queue_wait_seconds_bucket{le=\"0.5\"}", 2);
    assert_value(page, "bramble_job_queue_wait_seconds_bucket{le=\"1\"}", 2);
    assert_value(page, "bramble_job_queue_wait_seconds_bucket{le=\"2\"}", 3);
    assert_value(page, "bramble_job_queue_wait_seconds_bucket{le=\"86400\"}", 3);
    assert_value(page, "bramble_job_queue_wait_seconds_bucket{le=\"+Inf\"}", 4);
    assert_value(page, "bramble_job_queue_wait_seconds_count", 4);
    assert_value(page, "bramble_job_queue_wait_seconds_sum", 0.3 + 1.5 + 100000);
    assert_value(page, "bramble_job_recovery_seconds_bucket{le=\"10\"}", 0);
    assert_value(page, "bramble_job_recovery_seconds_bucket{le=\"15\"}", 1);
    assert_value(page, "bramble_job_recovery_seconds_count", 1);
    assert_value(page, "bramble_heartbeat_rtt_seconds_bucket{le=\"0.001\"}", 0);
    assert_value(page, "bramble_heartbeat_rtt_seconds_bucket{le=\"0.0025\"}", 1);
    assert_value(page, "bramble_heartbeat_handling_seconds_count", 0);
    /* a histogram's buckets never go down as le grows */
    double last = -1;
    for (const char *p = strstr(page, "bramble_job_queue_wait_seconds_bucket{");
         p && strncmp(p, "bramble_job_queue_wait_seconds_bucket{", 38) == 0;
         p = strchr(p, '\n') + 1) {
        double v = strtod(strchr(p, ' ') + 1, NULL);
        assert_true(v >= last);
        last = v;
    }
    assert_int_equal(count(page, "bramble_job_queue_wait_seconds_bucket{"),
                     16); /* 15 + Inf */
}

/* Checkpoints counted and their bytes; verified copies on other nodes; what each
 * user's jobs used and cost (milliseconds and millionths shown as units). */
static void test_page_checkpoints_and_usage(void **state)
{
    coord_fixture_t *f = *state;
    br_coord_t *c = &f->c;
    br_err_t err = {0};
    int64_t job = add_job(c, "ann", "running");
    assert_int_equal(br_store_checkpoint_add(c->store, job, 1, "a", "/ck/1", 1, 100,
                                             5000, NULL, &err),
                     0);
    assert_int_equal(br_store_checkpoint_add(c->store, job, 1, "a", "/ck/2", 2, 250,
                                             6000, NULL, &err),
                     0);
    assert_int_equal(
        br_store_replica_add(
            c->store, job,
            "1111111111111111111111111111111111111111111111111111111111111111", "b", 2,
            "/ck/2", 250, 7000, &err),
        0);
    assert_int_equal(
        br_store_key_add(c->store, "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
                         BR_PRINCIPAL_USER, "ann", &err),
        0);
    int64_t ann = 0;
    assert_int_equal(
        br_store_principal_id(c->store, BR_PRINCIPAL_USER, "ann", &ann, &err), 0);
    assert_true(ann > 0);
    assert_int_equal(
        br_store_usage_add(c->store, ann, 470000, 3600000, 1000, 2000000, &err), 0);
    assert_int_equal(
        br_store_usage_add(c->store, ann, 470001, 3600000, 500, 500000, &err), 0);
    const char *page = page_of(c);
    assert_well_formed(page);
    assert_value(page, "bramble_checkpoints_total", 2);
    assert_value(page, "bramble_checkpoint_bytes_total", 350);
    assert_value(page, "bramble_replicas", 1);
    assert_value(page, "bramble_replica_bytes", 250);
    assert_value(page, "bramble_user_gpu_seconds_total{user=\"ann\"}", 7200);
    assert_value(page, "bramble_user_cpu_seconds_total{user=\"ann\"}", 1.5);
    assert_value(page, "bramble_user_cost_total{user=\"ann\"}", 2.5);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reasons),
        cmocka_unit_test_setup_teardown(test_page_of_an_empty_coordinator, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_page_nodes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_page_jobs, setup, teardown),
        cmocka_unit_test_setup_teardown(test_page_counters_and_histograms, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_page_checkpoints_and_usage, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
