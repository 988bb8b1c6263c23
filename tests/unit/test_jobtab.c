/* test_jobtab.c - current jobs in memory (job.h, jobtab.h): a store row read into
 * typed fields and written back unchanged, rows it refuses, lookups by id and by name
 * (an array's tasks under the array's name) through adds, growth and removals, ranks by node as
 * placements change, removal deferred to the sweep, and loading from a real
 * store (ended jobs stay out), and a job just stored built from its row the
 * same as read back. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "jobtab.h"

static json_t *row(int64_t id, const char *state)
{
    return json_pack("{s:I, s:s, s:s, s:s, s:s, s:i, s:I, s:{s:s, s:i, s:I}, s:I, s:o}", "id",
                     (json_int_t)id, "name", "train", "kind", "job", "owner", "ann", "state",
                     state, "attempt", 1, "owner_id", (json_int_t)7, "spec", "command",
                     "true", "priority", 3, "time_limit", (json_int_t)60000, "submitted",
                     (json_int_t)1000, "nodes", json_array());
}

static br_job_t *job_of(json_t *r)
{
    br_err_t err;
    br_job_t *j = br_job_from_row(r, &err);
    json_decref(r);
    assert_non_null(j);
    return j;
}

static int freed;

static void count_free(void *data)
{
    freed++;
    free(data);
}

/* A module's slot on a job: one per module name, its data freed when replaced and
 * when the job goes. */
static void test_aux_slots(void **state)
{
    (void)state;
    int a = br_job_aux_slot("test-a"), b = br_job_aux_slot("test-b");
    assert_true(a >= 0 && b >= 0 && a != b);
    assert_int_equal(br_job_aux_slot("test-a"), a);
    assert_int_equal(br_job_aux_slot("test-b"), b);
    br_job_t *j = job_of(row(1, "pending"));
    assert_null(br_job_aux_get(j, a));
    freed = 0;
    br_job_aux_set(j, a, strdup("one"), count_free);
    br_job_aux_set(j, b, strdup("two"), count_free);
    assert_string_equal(br_job_aux_get(j, a), "one");
    br_job_aux_set(j, a, strdup("three"), count_free); /* the old one is freed */
    assert_int_equal(freed, 1);
    assert_string_equal(br_job_aux_get(j, a), "three");
    assert_null(br_job_aux_get(j, -1));
    br_job_aux_set(j, BR_JOB_AUX_MAX, NULL, NULL); /* no such slot: nothing */
    br_job_destroy(&j);
    assert_int_equal(freed, 3);
}

static void test_row_round_trip(void **state)
{
    (void)state;
    json_t *r = row(5, "running");
    json_object_set_new(r, "attempt", json_integer(3));
    json_object_set_new(r, "started", json_integer(2000));
    json_object_set_new(r, "reason", json_string("why"));
    json_object_set_new(r, "nodes", json_pack("[s, s]", "a", "b"));
    json_object_set_new(
        r, "assign",
        json_pack("{s:[{s:s, s:i, s:I, s:[i], s:s}, {s:s, s:i, s:I, s:[], s:s}], s:i}",
                  "ranks", "node", "a", "cpus", 2, "memory", (json_int_t)1024, "gpus", 1,
                  "state", "started", "node", "b", "cpus", 2, "memory", (json_int_t)1024,
                  "gpus", "state", "done", "port", 29500));
    json_object_set_new(r, "restarts", json_integer(2));
    json_object_set_new(r, "exclude", json_pack("[s]", "c"));
    json_object_set_new(r, "lost_at", json_integer(1500));
    json_object_set_new(r, "placement", json_string("near"));
    json_object_set_new(r, "service", json_integer(4));
    json_object_set_new(r, "replica", json_integer(1));
    br_job_t *j = job_of(json_incref(r));
    assert_int_equal(j->id, 5);
    assert_int_equal(j->state, BR_JOB_RUNNING);
    assert_int_equal(j->attempt, 3);
    assert_int_equal(j->owner_id, 7);
    assert_int_equal(j->priority, 3);
    assert_int_equal(j->time_limit, 60000);
    assert_int_equal(j->nranks, 2);
    assert_string_equal(j->ranks[1].node, "b");
    assert_int_equal(j->ranks[0].state, BR_RANK_STARTED);
    assert_int_equal(j->ranks[1].state, BR_RANK_DONE);
    assert_int_equal(j->port, 29500);
    assert_int_equal(j->restarts, 2);
    assert_true(br_job_excluded(j, "c"));
    assert_false(br_job_excluded(j, "a"));
    assert_int_equal(j->service, 4);
    assert_int_equal(j->replica, 1);
    assert_int_equal(j->replicas, -1);
    assert_int_equal(j->exit_code, -1);
    assert_int_equal(br_job_rank_on(j, "b", 0), 1);
    assert_int_equal(br_job_rank_on(j, "b", 1), -1); /* done */
    assert_int_equal(br_job_ranks_left(j), 1);
    /* written back: every field the store row had, the same */
    json_t *f = br_job_fields(j);
    const char *keys[] = {"state",   "attempt",   "nodes",   "assign", "started",
                          "reason",  "restarts",  "exclude", "lost_at", "placement",
                          "service", "replica"};
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
        assert_true(json_equal(json_object_get(f, keys[i]), json_object_get(r, keys[i])));
    assert_true(json_is_null(json_object_get(f, "ended")));
    assert_true(json_is_null(json_object_get(f, "exit_code")));
    json_decref(f);
    json_decref(r);
    br_job_destroy(&j);
    assert_null(j);
}

static void test_bad_rows(void **state)
{
    (void)state;
    br_err_t err;
    json_t *r = row(3, "sleeping");
    assert_null(br_job_from_row(r, &err));
    assert_non_null(strstr(err.text, "state"));
    json_decref(r);
    r = row(3, "pending");
    json_object_del(r, "spec");
    assert_null(br_job_from_row(r, &err));
    assert_non_null(strstr(err.text, "spec"));
    json_decref(r);
}

static void place(br_jobtab_t *t, br_job_t *j, const char *a, const char *b)
{
    const char *nodes[2] = {a, b};
    json_t *share = json_pack("{s:i}", "cpus", 1);
    json_t *shares[2] = {share, share};
    br_jobtab_unlink_ranks(t, j);
    assert_int_equal(br_job_set_ranks(j, nodes, shares, b ? 2 : 1), 0);
    br_jobtab_link_ranks(t, j);
    json_decref(share);
}

static int count_on(br_jobtab_t *t, const char *node)
{
    int n = 0;
    for (br_rank_t *rk = br_jobtab_on_node(t, node); rk; rk = rk->node_next) {
        assert_string_equal(rk->node, node);
        assert_ptr_equal(&rk->job->ranks[rk->index], rk);
        n++;
    }
    return n;
}

static void test_indexes(void **state)
{
    (void)state;
    br_jobtab_t *t = br_jobtab_new();
    assert_non_null(t);
    for (int64_t id = 1; id <= 3000; id++) /* grows the id index several times */
        br_jobtab_add(t, job_of(row(id * 7919 % 3001, "pending")));
    assert_int_equal(br_jobtab_count(t), 3000);
    for (int64_t id = 1; id <= 3000; id += 2)
        br_jobtab_remove(t, br_jobtab_find(t, id));
    br_jobtab_sweep(t);
    for (int64_t id = 1; id <= 3000; id++) {
        br_job_t *j = br_jobtab_find(t, id);
        if (id % 2)
            assert_null(j);
        else
            assert_true(j && j->id == id);
    }
    assert_int_equal(br_jobtab_count(t), 1500);
    br_jobtab_destroy(&t);
}

static void test_order_nodes_and_sweep(void **state)
{
    (void)state;
    br_jobtab_t *t = br_jobtab_new();
    for (int64_t id = 2; id <= 4000; id += 2)
        br_jobtab_add(t, job_of(row(id, "pending")));
    br_jobtab_add(t, job_of(row(1001, "pending"))); /* out of order */
    int64_t last = 0;
    size_t n = 0;
    for (br_job_t *j = br_jobtab_first(t); j; j = j->next, n++) {
        assert_true(j->id > last);
        assert_ptr_equal(br_jobtab_find(t, j->id), j);
        last = j->id;
    }
    assert_int_equal(n, 2001);
    assert_null(br_jobtab_find(t, 3));
    br_jobtab_find(t, 4)->state = BR_JOB_RUNNING;
    size_t np;
    br_job_t **pending = br_jobtab_pending(t, &np);
    assert_int_equal(np, 2000); /* all but job 4 */
    assert_int_equal(pending[0]->id, 2);
    assert_int_equal(pending[1]->id, 6);
    free(pending);

    br_job_t *g = br_jobtab_find(t, 10), *s = br_jobtab_find(t, 12);
    place(t, g, "a", "b"); /* a gang on a and b */
    place(t, s, "a", NULL);
    assert_int_equal(count_on(t, "a"), 2);
    assert_int_equal(count_on(t, "b"), 1);
    place(t, g, "c", "b"); /* placed again elsewhere */
    assert_int_equal(count_on(t, "a"), 1);
    assert_int_equal(count_on(t, "c"), 1);
    assert_int_equal(count_on(t, "b"), 1);
    assert_null(br_jobtab_on_node(t, "nowhere"));

    br_jobtab_remove(t, s); /* out of every index at once, alive until the sweep */
    assert_null(br_jobtab_find(t, 12));
    assert_int_equal(count_on(t, "a"), 0);
    assert_int_equal(s->id, 12);
    assert_false(s->in_table);
    br_jobtab_remove(t, s); /* twice: no harm */
    br_jobtab_sweep(t);
    assert_int_equal(br_jobtab_count(t), 2000);
    br_jobtab_destroy(&t);
    assert_null(t);
}

/* A new store in dir (a mkdtemp template, filled in). */
static br_store_t *open_store(char *dir)
{
    char path[64];
    br_err_t err;
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/bramble.db", dir);
    br_store_t *s = br_store_open(path, &err);
    assert_non_null(s);
    return s;
}

static void close_store(br_store_t **s, const char *dir)
{
    br_store_destroy(s);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

/* A row as br_store_job_add takes it: no id yet, its YAML. */
static json_t *new_row(const char *state)
{
    json_t *r = row(0, state);
    json_object_del(r, "id");
    json_object_set_new(r, "spec_yaml", json_string("command: true\n"));
    return r;
}

static void test_load_from_store(void **state)
{
    (void)state;
    char dir[] = "/tmp/test_jobtab.XXXXXX";
    br_err_t err;
    br_store_t *s = open_store(dir);
    const char *states[] = {"pending", "running", "completed", "starting", "failed"};
    for (int i = 0; i < 5; i++) {
        json_t *r = new_row(states[i]);
        assert_true(br_store_job_add(s, r, &err) > 0);
        json_decref(r);
    }
    br_jobtab_t *t = br_jobtab_new();
    br_jobtab_add(t, job_of(row(99, "pending"))); /* replaced by the load */
    assert_int_equal(br_jobtab_load(t, s, &err), 0);
    assert_int_equal(br_jobtab_count(t), 3); /* pending, running, starting */
    assert_non_null(br_jobtab_find(t, 1));
    assert_null(br_jobtab_find(t, 3));
    assert_null(br_jobtab_find(t, 99));
    br_job_t *j = br_jobtab_find(t, 2);
    /* a change written back reads back the same */
    j->attempt = 4;
    j->restarts = 3;
    br_job_exclude(j, "x");
    json_t *f = br_job_fields(j);
    assert_int_equal(br_store_job_update(s, 2, f, &err), 0);
    json_decref(f);
    assert_int_equal(br_jobtab_load(t, s, &err), 0);
    j = br_jobtab_find(t, 2);
    assert_int_equal(j->attempt, 4);
    assert_int_equal(j->restarts, 3);
    assert_true(br_job_excluded(j, "x"));
    br_jobtab_destroy(&t);
    close_store(&s, dir);
}

static void same_job(const br_job_t *a, const br_job_t *b)
{
    assert_int_equal(a->id, b->id);
    assert_string_equal(a->name, b->name);
    assert_string_equal(a->owner, b->owner);
    assert_string_equal(a->kind, b->kind);
    assert_string_equal(a->shape, b->shape);
    assert_int_equal(a->owner_id, b->owner_id);
    assert_int_equal(a->submitted, b->submitted);
    assert_int_equal(a->priority, b->priority);
    assert_int_equal(a->time_limit, b->time_limit);
    assert_int_equal(a->array_of, b->array_of);
    assert_int_equal(a->array_index, b->array_index);
    assert_int_equal(a->array_count, b->array_count);
    assert_int_equal(a->nafter, b->nafter);
    for (int i = 0; i < a->nafter; i++) {
        assert_int_equal(a->after[i].job, b->after[i].job);
        assert_int_equal(a->after[i].on, b->after[i].on);
    }
    assert_true(json_equal(a->spec, b->spec));
    json_t *fa = br_job_fields(a), *fb = br_job_fields(b);
    assert_true(json_equal(fa, fb)); /* every field the store keeps */
    json_decref(fa);
    json_decref(fb);
}

/* A job just stored is built from the row it was stored as, not read back: for
 * each shape of row the job core adds (a plain job, a service and its replica,
 * an array's task, one that waits on another), the same job as one read back from
 * a real store; an ended row stays out of the table. */
static void test_add_stored(void **state)
{
    (void)state;
    char dir[] = "/tmp/test_jobtab.XXXXXX";
    br_err_t err;
    br_store_t *s = open_store(dir);
    json_t *rows[5];
    for (int i = 0; i < 5; i++) {
        rows[i] = new_row("pending");
    }
    json_object_set_new(rows[1], "state", json_string("running")); /* a service */
    json_object_set_new(rows[1], "kind", json_string("service"));
    json_object_set_new(rows[1], "reason", json_string("a service of 2 replicas"));
    json_object_set_new(rows[1], "replicas", json_integer(2));
    json_object_set_new(rows[2], "service", json_integer(2)); /* its replica */
    json_object_set_new(rows[2], "replica", json_integer(1));
    json_object_set_new(rows[3], "array_of", json_integer(1)); /* an array's task */
    json_object_set_new(rows[3], "array_index", json_integer(4));
    json_object_set_new(json_object_get(rows[3], "spec"), "array",
                        json_pack("{s:i, s:i}", "count", 8, "max", 2));
    json_object_set_new(json_object_get(rows[4], "spec"), "after", /* waits */
                        json_pack("[{s:I, s:s}]", "job", (json_int_t)1, "on", "ok"));
    json_object_set_new(json_object_get(rows[4], "spec"), "resources",
                        json_pack("{s:i, s:I}", "cpus", 2, "memory", (json_int_t)1 << 30));
    br_jobtab_t *t = br_jobtab_new();
    for (int i = 0; i < 5; i++) {
        int64_t id = br_store_job_add(s, rows[i], &err);
        assert_int_equal(id, i + 1);
        br_job_t *j = NULL;
        assert_int_equal(br_jobtab_add_stored(t, rows[i], id, &j, &err), 1);
        assert_ptr_equal(br_jobtab_find(t, id), j);
        json_t *back = br_store_job_get(s, id, &err);
        assert_non_null(back);
        br_job_t *read = job_of(back);
        same_job(j, read);
        br_job_destroy(&read);
        json_decref(rows[i]);
    }
    assert_int_equal(br_jobtab_find(t, 5)->after[0].job, 1);
    json_t *ended = new_row("completed");
    int64_t id = br_store_job_add(s, ended, &err);
    br_job_t *none = (br_job_t *)&none;
    assert_int_equal(br_jobtab_add_stored(t, ended, id, &none, &err), 0);
    assert_null(none);
    assert_null(br_jobtab_find(t, id));
    json_decref(ended);
    assert_int_equal(br_jobtab_count(t), 5);
    br_jobtab_destroy(&t);
    close_store(&s, dir);
}

/* Whether a name is taken by a current job: by its own name, or by an array's
 * tasks ("name[i]") under the array's name; not by a longer or shorter name; and
 * no longer once it is removed. Enough jobs to grow the table on the way. */
static void test_named(void **state)
{
    (void)state;
    br_jobtab_t *t = br_jobtab_new();
    enum { N = 3000 };
    char name[32];
    br_job_t *train = NULL;
    for (int i = 1; i <= N; i++) {
        json_t *r = row(i, "pending");
        if (i == 7)
            snprintf(name, sizeof(name), "train");
        else if (i == 8)
            snprintf(name, sizeof(name), "sweep[3]");
        else
            snprintf(name, sizeof(name), "job-%d", i);
        json_object_set_new(r, "name", json_string(name));
        br_job_t *j = job_of(r);
        br_jobtab_add(t, j);
        train = i == 7 ? j : train;
    }
    assert_ptr_equal(br_jobtab_named(t, "train"), train);
    assert_int_equal(br_jobtab_named(t, "sweep")->id, 8);
    assert_int_equal(br_jobtab_named(t, "job-2999")->id, 2999);
    assert_null(br_jobtab_named(t, "trai"));
    assert_null(br_jobtab_named(t, "training"));
    assert_null(br_jobtab_named(t, "sweep[3"));
    assert_null(br_jobtab_named(t, "job-3001"));
    br_jobtab_remove(t, train);
    assert_null(br_jobtab_named(t, "train"));
    br_jobtab_remove(t, br_jobtab_find(t, 8));
    assert_null(br_jobtab_named(t, "sweep"));
    br_jobtab_sweep(t);
    assert_int_equal(br_jobtab_named(t, "job-1")->id, 1);
    br_jobtab_destroy(&t);
}

/* Jobs in the table share their specs' alike parts (specparts.h). */
static void test_jobs_share_spec_parts(void **state)
{
    (void)state;
    br_jobtab_t *t = br_jobtab_new();
    assert_non_null(t);
    json_t *r1 = row(1, "pending"), *r2 = row(2, "pending");
    json_object_set_new(json_object_get(r1, "spec"), "resources", json_pack("{s:i}", "cpus", 2));
    json_object_set_new(json_object_get(r2, "spec"), "resources", json_pack("{s:i}", "cpus", 2));
    br_job_t *a = job_of(r1), *b = job_of(r2);
    br_jobtab_add(t, a);
    br_jobtab_add(t, b);
    assert_ptr_equal(json_object_get(a->spec, "resources"), json_object_get(b->spec, "resources"));
    assert_int_equal(br_jobtab_spec_parts(t), 1);
    br_jobtab_destroy(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_row_round_trip),
        cmocka_unit_test(test_aux_slots),
        cmocka_unit_test(test_bad_rows),
        cmocka_unit_test(test_indexes),
        cmocka_unit_test(test_order_nodes_and_sweep),
        cmocka_unit_test(test_load_from_store),
        cmocka_unit_test(test_add_stored),
        cmocka_unit_test(test_named),
        cmocka_unit_test(test_jobs_share_spec_parts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
