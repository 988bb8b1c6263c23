/* overlaylog.c - the overlay's changes, version by version (overlaylog.h). */
#include "overlaylog.h"

#include <stdlib.h>
#include <string.h>

#include "util.h"

typedef struct {
    uint64_t version;
    char name[64]; /* "" : every node */
} change_t;

struct br_overlay_log {
    change_t ring[BR_OVERLAY_LOG_MAX];
    uint64_t version; /* the newest change's (ring[(version - 1) % MAX]) */
};

br_overlay_log_t *br_overlay_log_new(void)
{
    return calloc(1, sizeof(br_overlay_log_t));
}

void br_overlay_log_destroy(br_overlay_log_t **l)
{
    if (l && *l) {
        free(*l);
        *l = NULL;
    }
}

void br_overlay_log_changed(br_overlay_log_t *l, const char *name)
{
    change_t *c = &l->ring[l->version % BR_OVERLAY_LOG_MAX];
    c->version = ++l->version;
    br_strlcpy(c->name, name ? name : "", sizeof(c->name));
}

uint64_t br_overlay_log_version(const br_overlay_log_t *l)
{
    return l->version;
}

json_t *br_overlay_log_since(const br_overlay_log_t *l, uint64_t since)
{
    if (since > l->version || l->version - since > BR_OVERLAY_LOG_MAX)
        return NULL; /* (the ring has moved past it) */
    json_t *names = json_array(), *seen = json_object();
    for (uint64_t v = since + 1; v <= l->version; v++) {
        const change_t *c = &l->ring[(v - 1) % BR_OVERLAY_LOG_MAX];
        if (!c->name[0]) {
            json_decref(names);
            names = NULL;
            break;
        }
        if (!json_object_get(seen, c->name)) {
            json_object_set_new(seen, c->name, json_true());
            json_array_append_new(names, json_string(c->name));
        }
    }
    json_decref(seen);
    return names;
}
