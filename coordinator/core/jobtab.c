/* jobtab.c - current jobs by id, by name and by node. */
#include "jobtab.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "specparts.h"
#include "util.h"

/* The ranks on one node. Kept while the table lives (one per node name seen). */
typedef struct node_slot {
    char name[64];
    br_rank_t *head;
    struct node_slot *next;
} node_slot_t;

struct br_jobtab {
    br_job_t **ids; /* hash by id, chained through job->id_next */
    size_t nids;    /* buckets: a power of two */
    br_job_t **names; /* hash by name (an array task's without its "[i]"), chained
                         through job->name_next; as many buckets as ids */
    size_t count;
    br_job_t *first, *last; /* by id */
    node_slot_t **nodes;
    size_t nnodes; /* buckets: a power of two */
    size_t slots;
    br_job_t *dead; /* removed, freed at the sweep: a list through id_next (the job is
                       in no index then), so that removing never needs memory */
    br_specparts_t *parts; /* what the jobs' specs have alike, kept once */
};

static uint64_t hash_text(const char *s, size_t len)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < len; i++)
        h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

/* The bucket of a name: of its part before "[" (an array's tasks are "name[i]"). */
static size_t name_bucket(const br_jobtab_t *t, const char *name, size_t len)
{
    return (size_t)hash_text(name, len) & (t->nids - 1);
}

static size_t id_bucket(const br_jobtab_t *t, int64_t id)
{
    return (size_t)(((uint64_t)id * 11400714819323198485ull) >> 20) & (t->nids - 1);
}

br_jobtab_t *br_jobtab_new(void)
{
    br_jobtab_t *t = calloc(1, sizeof(*t));
    if (!t)
        return NULL;
    t->nids = 256;
    t->nnodes = 256;
    t->ids = calloc(t->nids, sizeof(*t->ids));
    t->names = calloc(t->nids, sizeof(*t->names));
    t->nodes = calloc(t->nnodes, sizeof(*t->nodes));
    t->parts = br_specparts_new();
    if (!t->ids || !t->names || !t->nodes || !t->parts)
        br_jobtab_destroy(&t);
    return t;
}

static void clear(br_jobtab_t *t)
{
    while (t->first)
        br_jobtab_remove(t, t->first);
    br_jobtab_sweep(t);
}

void br_jobtab_destroy(br_jobtab_t **tp)
{
    br_jobtab_t *t = tp ? *tp : NULL;
    if (!t)
        return;
    if (t->ids && t->names)
        clear(t);
    for (size_t i = 0; t->nodes && i < t->nnodes; i++) {
        for (node_slot_t *s = t->nodes[i], *next; s; s = next) {
            next = s->next;
            free(s);
        }
    }
    free(t->nodes);
    free(t->names);
    free(t->ids);
    br_specparts_destroy(&t->parts);
    free(t);
    *tp = NULL;
}

static node_slot_t *slot_of(br_jobtab_t *t, const char *node, int make)
{
    size_t b = (size_t)hash_text(node, strlen(node)) & (t->nnodes - 1);
    for (node_slot_t *s = t->nodes[b]; s; s = s->next)
        if (strcmp(s->name, node) == 0)
            return s;
    if (!make)
        return NULL;
    if (t->slots >= 2 * t->nnodes) { /* grow: fewer collisions for thousands of nodes */
        size_t n = t->nnodes * 4;
        node_slot_t **nb = calloc(n, sizeof(*nb));
        if (nb) {
            for (size_t i = 0; i < t->nnodes; i++) {
                for (node_slot_t *s = t->nodes[i], *next; s; s = next) {
                    next = s->next;
                    size_t k = (size_t)hash_text(s->name, strlen(s->name)) & (n - 1);
                    s->next = nb[k];
                    nb[k] = s;
                }
            }
            free(t->nodes);
            t->nodes = nb;
            t->nnodes = n;
            b = (size_t)hash_text(node, strlen(node)) & (n - 1);
        }
    }
    node_slot_t *s = calloc(1, sizeof(*s));
    if (!s)
        return NULL;
    br_strlcpy(s->name, node, sizeof(s->name));
    s->next = t->nodes[b];
    t->nodes[b] = s;
    t->slots++;
    return s;
}

void br_jobtab_link_ranks(br_jobtab_t *t, br_job_t *job)
{
    for (int r = 0; r < job->nranks; r++) {
        br_rank_t *rk = &job->ranks[r];
        node_slot_t *s = rk->linked || !rk->node[0] ? NULL : slot_of(t, rk->node, 1);
        if (!s)
            continue;
        rk->node_prev = NULL;
        rk->node_next = s->head;
        if (s->head)
            s->head->node_prev = rk;
        s->head = rk;
        rk->linked = 1;
    }
}

void br_jobtab_unlink_ranks(br_jobtab_t *t, br_job_t *job)
{
    for (int r = 0; r < job->nranks; r++) {
        br_rank_t *rk = &job->ranks[r];
        if (!rk->linked)
            continue;
        node_slot_t *s = slot_of(t, rk->node, 0);
        if (rk->node_prev)
            rk->node_prev->node_next = rk->node_next;
        else if (s)
            s->head = rk->node_next;
        if (rk->node_next)
            rk->node_next->node_prev = rk->node_prev;
        rk->node_prev = rk->node_next = NULL;
        rk->linked = 0;
    }
}

static size_t base_len(const char *name)
{
    return strcspn(name, "[");
}

static void grow_ids(br_jobtab_t *t)
{
    size_t n = t->nids * 4;
    br_job_t **nb = calloc(n, sizeof(*nb)), **nn = calloc(n, sizeof(*nn));
    if (!nb || !nn) {
        free(nb);
        free(nn);
        return; /* longer chains, still correct */
    }
    br_job_t **old = t->ids, **oldnames = t->names;
    size_t oldn = t->nids;
    t->ids = nb;
    t->names = nn;
    t->nids = n;
    for (size_t i = 0; i < oldn; i++) {
        for (br_job_t *j = old[i], *next; j; j = next) {
            next = j->id_next;
            size_t b = id_bucket(t, j->id);
            j->id_next = nb[b];
            nb[b] = j;
        }
        for (br_job_t *j = oldnames[i], *next; j; j = next) {
            next = j->name_next;
            size_t b = name_bucket(t, j->name, base_len(j->name));
            j->name_next = nn[b];
            nn[b] = j;
        }
    }
    free(old);
    free(oldnames);
}

void br_jobtab_add(br_jobtab_t *t, br_job_t *job)
{
    br_specparts_share(t->parts, job->spec);
    if (t->count >= 2 * t->nids)
        grow_ids(t);
    size_t b = id_bucket(t, job->id);
    job->id_next = t->ids[b];
    t->ids[b] = job;
    b = name_bucket(t, job->name, base_len(job->name));
    job->name_next = t->names[b];
    t->names[b] = job;
    /* by id: new jobs come last, so look from the end */
    br_job_t *after = t->last;
    while (after && after->id > job->id)
        after = after->prev;
    job->prev = after;
    job->next = after ? after->next : t->first;
    if (job->next)
        job->next->prev = job;
    else
        t->last = job;
    if (after)
        after->next = job;
    else
        t->first = job;
    t->count++;
    job->in_table = 1;
    br_jobtab_link_ranks(t, job);
}

void br_jobtab_remove(br_jobtab_t *t, br_job_t *job)
{
    if (!job || !job->in_table)
        return;
    br_jobtab_unlink_ranks(t, job);
    br_job_t **pp = &t->ids[id_bucket(t, job->id)];
    while (*pp && *pp != job)
        pp = &(*pp)->id_next;
    if (*pp)
        *pp = job->id_next;
    pp = &t->names[name_bucket(t, job->name, base_len(job->name))];
    while (*pp && *pp != job)
        pp = &(*pp)->name_next;
    if (*pp)
        *pp = job->name_next;
    if (job->prev)
        job->prev->next = job->next;
    else
        t->first = job->next;
    if (job->next)
        job->next->prev = job->prev;
    else
        t->last = job->prev;
    job->prev = job->next = job->name_next = NULL;
    job->in_table = 0;
    t->count--;
    job->id_next = t->dead;
    t->dead = job;
}

void br_jobtab_sweep(br_jobtab_t *t)
{
    while (t->dead) {
        br_job_t *job = t->dead;
        t->dead = job->id_next;
        br_job_destroy(&job);
    }
}

br_job_t *br_jobtab_find(const br_jobtab_t *t, int64_t id)
{
    for (br_job_t *j = t->ids[id_bucket(t, id)]; j; j = j->id_next)
        if (j->id == id)
            return j;
    return NULL;
}

br_job_t *br_jobtab_named(const br_jobtab_t *t, const char *name)
{
    size_t len = strlen(name);
    for (br_job_t *j = t->names[name_bucket(t, name, len)]; j; j = j->name_next)
        if (base_len(j->name) == len && strncmp(j->name, name, len) == 0)
            return j;
    return NULL;
}

br_job_t *br_jobtab_first(const br_jobtab_t *t)
{
    return t->first;
}

size_t br_jobtab_count(const br_jobtab_t *t)
{
    return t->count;
}

size_t br_jobtab_spec_parts(const br_jobtab_t *t)
{
    return br_specparts_count(t->parts);
}

br_job_t **br_jobtab_pending(const br_jobtab_t *t, size_t *n)
{
    br_job_t **list = malloc((t->count ? t->count : 1) * sizeof(*list));
    *n = 0;
    for (br_job_t *j = t->first; list && j; j = j->next)
        if (j->state == BR_JOB_PENDING)
            list[(*n)++] = j;
    return list;
}

br_rank_t *br_jobtab_on_node(const br_jobtab_t *t, const char *node)
{
    node_slot_t *s = slot_of((br_jobtab_t *)t, node, 0);
    return s ? s->head : NULL;
}

static const char *const current_states[] = {"pending", "starting", "running", NULL};

int br_jobtab_load(br_jobtab_t *t, br_store_t *store, br_err_t *err)
{
    clear(t);
    json_t *rows = br_store_job_list(store, current_states, 0, err);
    if (!rows)
        return -1;
    size_t i;
    json_t *row;
    int rc = 0;
    json_array_foreach(rows, i, row) {
        br_job_t *job = br_job_from_row(row, err);
        if (!job) {
            rc = -1;
            break;
        }
        br_jobtab_add(t, job);
    }
    json_decref(rows);
    if (rc < 0)
        clear(t);
    return rc;
}

int br_jobtab_add_stored(br_jobtab_t *t, const json_t *row, int64_t id, br_job_t **out,
                         br_err_t *err)
{
    if (out)
        *out = NULL;
    int s = br_job_state_parse(json_string_value(json_object_get(row, "state")));
    if (s < 0 || br_job_state_ended((br_job_state_t)s))
        return 0;
    br_job_t *job = br_job_from_row_id(row, id, err);
    if (!job)
        return -1;
    br_jobtab_add(t, job);
    if (out)
        *out = job;
    return 1;
}
