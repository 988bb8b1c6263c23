/* treefetch.h - the fetches of a starting job's trees (its code, its data sets, its
 * image's archive), kept with the job (an aux slot) for `job show`: by node and
 * tree, what it is, where the node reads it (a node nearby that holds it, or the
 * coordinator), and how far it is, from the order (jobs.c) on, as the nodes'
 * heartbeats say ("pulling", PROTOCOL.md section 6). */
#ifndef BRAMBLE_TREEFETCH_H
#define BRAMBLE_TREEFETCH_H

#include <jansson.h>
#include <stdint.h>

#include "job.h"

/* Node was ordered to fetch tree hash (bytes in all) for job: kind "code", "data"
 * or "image", name the data set's or image's (NULL for code), from the node it reads
 * it from (NULL: the coordinator). Ordered again: where from is updated, how far it
 * is kept. */
void br_treefetch_ordered(br_job_t *job, const char *node, const char *kind,
                          const char *name, const char *hash, int64_t bytes,
                          const char *from, int64_t now_ms);
/* The job is placed anew (an attempt, or the same one again elsewhere): the fetches
 * of its last placement are forgotten. */
void br_treefetch_forget(br_job_t *job);
/* Node said it holds done bytes of tree hash: 1 when that is one of the job's
 * fetches, 0 when not (a checkpoint's copy, or one no longer waited for). */
int br_treefetch_progress(br_job_t *job, const char *node, const char *hash, int64_t done,
                          int64_t now_ms);
/* The fetches as job.show's "transfers" has them (PROTOCOL.md), a new array:
 * {"kind", "name"?, "from", "to", "done", "bytes", "seconds", "rate"?}; none once
 * the job is no longer starting. */
json_t *br_treefetch_list(const br_job_t *job, int64_t now_ms);

#endif
