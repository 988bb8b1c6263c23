/* stages.c - trees of code fetched by a node while they are uploaded (stages.h). */
#include "stages.h"

#include <stdlib.h>
#include <string.h>

#include "util.h"

struct br_stages {
    br_stage_t st[BR_STAGE_MAX];
    size_t n;
    int64_t next_id;
};

br_stages_t *br_stages_new(void)
{
    br_stages_t *s = calloc(1, sizeof(*s));
    if (s)
        s->next_id = 1;
    return s;
}

static void drop(br_stages_t *s, size_t i)
{
    json_decref(s->st[i].files);
    s->st[i] = s->st[--s->n];
}

void br_stages_destroy(br_stages_t **sp)
{
    br_stages_t *s = *sp;
    if (!s)
        return;
    while (s->n)
        drop(s, 0);
    free(s);
    *sp = NULL;
}

br_stage_t *br_stages_add(br_stages_t *s, int64_t user, const char *node, const char *mhash,
                          json_t *files, int64_t now_ms, int *fresh)
{
    *fresh = 0;
    for (size_t i = 0; i < s->n; i++) {
        br_stage_t *x = &s->st[i];
        if (x->user == user && strcmp(x->mhash, mhash) == 0 && !x->held_ms &&
            strcmp(x->node, node) == 0) { /* an upload taken up again */
            x->last_ms = now_ms;
            return x;
        }
    }
    if (s->n == BR_STAGE_MAX) { /* the oldest goes */
        size_t old = 0;
        for (size_t i = 1; i < s->n; i++)
            if (s->st[i].last_ms < s->st[old].last_ms)
                old = i;
        drop(s, old);
    }
    br_stage_t *x = &s->st[s->n++];
    *x = (br_stage_t){.id = s->next_id++, .user = user, .files = json_incref(files),
                      .last_ms = now_ms};
    br_strlcpy(x->node, node, sizeof(x->node));
    br_strlcpy(x->mhash, mhash, sizeof(x->mhash));
    *fresh = 1;
    return x;
}

br_stage_t *br_stages_find(br_stages_t *s, int64_t id)
{
    for (size_t i = 0; i < s->n; i++)
        if (s->st[i].id == id)
            return &s->st[i];
    return NULL;
}

void br_stages_touch(br_stages_t *s, int64_t user, int64_t now_ms)
{
    for (size_t i = 0; i < s->n; i++)
        if (s->st[i].user == user && !s->st[i].held_ms)
            s->st[i].last_ms = now_ms;
}

void br_stages_held(br_stages_t *s, const char *node, const char *mhash, int64_t now_ms)
{
    for (size_t i = 0; i < s->n; i++)
        if (!s->st[i].held_ms && strcmp(s->st[i].node, node) == 0 &&
            strcmp(s->st[i].mhash, mhash) == 0)
            s->st[i].held_ms = now_ms;
}

const char *br_stages_node_of(const br_stages_t *s, const char *mhash)
{
    for (size_t i = 0; mhash && i < s->n; i++)
        if (strcmp(s->st[i].mhash, mhash) == 0)
            return s->st[i].node;
    return NULL;
}

void br_stages_expire(br_stages_t *s, int64_t now_ms, int (*alive)(void *, const char *),
                      void *arg)
{
    for (size_t i = 0; i < s->n;) {
        const br_stage_t *x = &s->st[i];
        if ((x->held_ms ? now_ms - x->held_ms >= BR_STAGE_KEEP_MS
                        : now_ms - x->last_ms >= BR_STAGE_IDLE_MS) ||
            (alive && !alive(arg, x->node)))
            drop(s, i);
        else
            i++;
    }
}
