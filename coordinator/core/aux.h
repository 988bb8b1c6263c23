/* aux.h - a module's own data on a job or a node, in the manner of flux-core's
 * flux_jobtap_job_aux_set: a module takes a slot once by its name, then hangs what
 * it keeps of each job or node there with the function that frees it. job.h and
 * nodes.h each keep a table of slots on top of this; the core never looks inside
 * the data. */
#ifndef BRAMBLE_AUX_H
#define BRAMBLE_AUX_H

typedef struct {
    void *data;
    void (*free)(void *data);
} br_aux_t;

/* The slot of the module named owner among owners (max of them, NULL where none
 * has been taken; owner is kept as given, so a string literal): the same one each
 * time it asks, or -1 when all max are taken by others. */
int br_aux_slot(const char **owners, int max, const char *owner);

/* Set a's data, freeing what was there first (with its free; NULL frees nothing). */
void br_aux_set(br_aux_t *a, void *data, void (*free)(void *data));

#endif
