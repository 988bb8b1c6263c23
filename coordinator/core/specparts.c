/* specparts.c - one copy of each part of job specs that many jobs have alike
 * (specparts.h). */
#include "specparts.h"

#include <stdlib.h>

#include "jsontext.h"

#define SWEEP_MIN 256 /* parts the pool may hold before its first sweep */

struct br_specparts {
    json_t *by_text; /* {"text": the part} */
    size_t sweep_at; /* sweep when the pool holds this many */
    json_t *last;    /* the spec shared last (held): an array's tasks share one */
};

br_specparts_t *br_specparts_new(void)
{
    br_specparts_t *p = calloc(1, sizeof(*p));
    if (p && !(p->by_text = json_object())) {
        free(p);
        return NULL;
    }
    if (p)
        p->sweep_at = SWEEP_MIN;
    return p;
}

void br_specparts_destroy(br_specparts_t **p)
{
    if (p && *p) {
        json_decref((*p)->last);
        json_decref((*p)->by_text);
        free(*p);
        *p = NULL;
    }
}

/* Drop the parts only the pool holds; sweep again at twice what is left. */
static void sweep(br_specparts_t *p)
{
    const char *text;
    json_t *part;
    void *tmp;
    json_object_foreach_safe(p->by_text, tmp, text, part) {
        if (part->refcount == 1)
            json_object_del(p->by_text, text);
    }
    size_t left = json_object_size(p->by_text);
    p->sweep_at = 2 * left > SWEEP_MIN ? 2 * left : SWEEP_MIN;
}

void br_specparts_share(br_specparts_t *p, json_t *spec)
{
    if (!p || !json_is_object(spec) || spec == p->last)
        return; /* (the last one's parts are the pool's already) */
    if (json_object_size(p->by_text) >= p->sweep_at)
        sweep(p);
    void *it = json_object_iter(spec);
    for (; it; it = json_object_iter_next(spec, it)) {
        json_t *v = json_object_iter_value(it);
        if (!json_is_object(v) && !json_is_array(v))
            continue;
        char *text = br_jsontext(v, 0, NULL);
        if (!text)
            continue;
        json_t *same = json_object_get(p->by_text, text);
        if (!same && json_object_set(p->by_text, text, v) == 0)
            same = v;
        free(text);
        if (same && same != v) /* (the value of the member iterated: set in place) */
            json_object_iter_set(spec, it, same);
    }
    json_decref(p->last);
    p->last = json_incref(spec);
}

size_t br_specparts_count(const br_specparts_t *p)
{
    return p ? json_object_size(p->by_text) : 0;
}
