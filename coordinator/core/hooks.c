/* hooks.c - the modules' functions for the core's points, in the order added. */
#include "hooks.h"

#include <stdlib.h>

typedef struct {
    br_hook_fn fn;
    void *ctx;
} hook_t;

struct br_hooks {
    hook_t *at[BR_HOOKS];
    int count[BR_HOOKS];
};

br_hooks_t *br_hooks_new(void)
{
    return calloc(1, sizeof(br_hooks_t));
}

void br_hooks_destroy(br_hooks_t **hp)
{
    br_hooks_t *h = hp ? *hp : NULL;
    if (!h)
        return;
    for (int p = 0; p < BR_HOOKS; p++)
        free(h->at[p]);
    free(h);
    *hp = NULL;
}

int br_hooks_add(br_hooks_t *h, br_hook_point_t point, br_hook_fn fn, void *ctx)
{
    if (!h || (unsigned)point >= BR_HOOKS || !fn)
        return -1;
    hook_t *at = realloc(h->at[point], (size_t)(h->count[point] + 1) * sizeof(*at));
    if (!at)
        return -1;
    at[h->count[point]++] = (hook_t){fn, ctx};
    h->at[point] = at;
    return 0;
}

void br_hooks_run(struct br_coord *c, br_hooks_t *h, br_hook_point_t point, br_hook_arg_t *arg)
{
    br_hook_arg_t none = {0};
    if (!arg)
        arg = &none;
    if (!h || (unsigned)point >= BR_HOOKS)
        return;
    for (int i = 0; i < h->count[point]; i++) {
        h->at[point][i].fn(c, arg, h->at[point][i].ctx);
        if ((point == BR_HOOK_ATTEMPT_ENDED && arg->restart) ||
            (point == BR_HOOK_RESUMING && arg->hold))
            break; /* taken over */
    }
}
