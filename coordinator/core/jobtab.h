/* jobtab.h - the coordinator's current jobs in memory (job.h), indexed by id, by
 * name and, through their ranks, by node: what a heartbeat, a report or the scheduler
 * needs without reading the store. Loaded from the store at start and again
 * after a rollback undid what the wake had changed; the job core (jobs.c) keeps
 * it and the store in step. A job that ends leaves the indexes at once and is
 * freed at the next br_jobtab_sweep (the end of the wake), so that whoever still
 * holds it in this wake does not hold freed memory. */
#ifndef BRAMBLE_JOBTAB_H
#define BRAMBLE_JOBTAB_H

#include <stddef.h>
#include <stdint.h>

#include "job.h"
#include "store.h"

typedef struct br_jobtab br_jobtab_t;

br_jobtab_t *br_jobtab_new(void);
void br_jobtab_destroy(br_jobtab_t **t);

/* Replace what the table holds with every pending, starting and running job of
 * the store. On error the table is left empty. */
int br_jobtab_load(br_jobtab_t *t, br_store_t *store, br_err_t *err);
/* A job just written to the store as row (what br_store_job_add took) under id:
 * added when it is current (1), else 0; -1 on error. It is built from row, not
 * read back (what the row leaves out, the store and br_job_from_row both take as
 * unset). The job it added in *out (may be NULL). */
int br_jobtab_add_stored(br_jobtab_t *t, const json_t *row, int64_t id, br_job_t **out,
                         br_err_t *err);

/* Take job (not in a table) into the table; its ranks are indexed by node, and
 * its spec's parts that other jobs have alike are shared with them
 * (specparts.h). */
void br_jobtab_add(br_jobtab_t *t, br_job_t *job);
/* Out of the indexes now, freed at the next sweep. */
void br_jobtab_remove(br_jobtab_t *t, br_job_t *job);
void br_jobtab_sweep(br_jobtab_t *t);

br_job_t *br_jobtab_find(const br_jobtab_t *t, int64_t id);
/* A current job named name, or a task of a current array of that name
 * ("name[i]"); NULL when there is none. */
br_job_t *br_jobtab_named(const br_jobtab_t *t, const char *name);
/* Every current job in id order (then job->next). */
br_job_t *br_jobtab_first(const br_jobtab_t *t);
size_t br_jobtab_count(const br_jobtab_t *t);
/* The distinct spec parts the jobs share (specparts.h). */
size_t br_jobtab_spec_parts(const br_jobtab_t *t);

/* The pending jobs, in id order: a new array (free it) with *n of them; NULL when
 * out of memory. */
br_job_t **br_jobtab_pending(const br_jobtab_t *t, size_t *n);

/* The ranks of current jobs placed on node (then rank->node_next), any order. */
br_rank_t *br_jobtab_on_node(const br_jobtab_t *t, const char *node);

/* Around br_job_set_ranks: take the job's ranks out of the node index, and put
 * them (the new ones) back in. */
void br_jobtab_unlink_ranks(br_jobtab_t *t, br_job_t *job);
void br_jobtab_link_ranks(br_jobtab_t *t, br_job_t *job);

#endif
