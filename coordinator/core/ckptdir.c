/* ckptdir.c - a job's checkpoint dir as its runs see it: ${BRAMBLE_JOB_ID} expanded,
 * and a warning event when a fresh job's dir already holds another job's steps. */
#include "ckptdir.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "store.h"
#include "util.h"

#define VAR "BRAMBLE_JOB_ID"

/* The length of the variable reference at p ("${BRAMBLE_JOB_ID}" or
 * "$BRAMBLE_JOB_ID" not followed by a name character), else 0. */
static size_t var_at(const char *p)
{
    size_t n = strlen(VAR);
    if (strncmp(p, "${" VAR "}", n + 3) == 0)
        return n + 3;
    if (p[0] == '$' && strncmp(p + 1, VAR, n) == 0) {
        char next = p[1 + n];
        if (!(next == '_' || (next >= 'A' && next <= 'Z') || (next >= 'a' && next <= 'z') ||
              (next >= '0' && next <= '9')))
            return n + 1;
    }
    return 0;
}

int br_ckptdir_expand(const char *dir, int64_t id, char *out, size_t len)
{
    char num[24];
    size_t o = 0;
    snprintf(num, sizeof(num), "%lld", (long long)id);
    for (const char *p = dir; *p;) {
        size_t v = var_at(p);
        const char *piece = v ? num : p;
        size_t plen = v ? strlen(num) : 1;
        if (o + plen >= len) {
            br_strlcpy(out, dir, len);
            errno = EOVERFLOW;
            return -1;
        }
        memcpy(out + o, piece, plen);
        o += plen;
        p += v ? v : 1;
    }
    out[o] = '\0';
    return 0;
}

json_t *br_ckptdir_section(json_t *spec, int64_t id)
{
    json_t *ckpt = json_object_get(spec, "checkpoint");
    const char *dir = json_string_value(json_object_get(ckpt, "dir"));
    if (!json_is_object(ckpt))
        return NULL;
    json_t *copy = json_copy(ckpt);
    char path[4096];
    if (copy && dir && br_ckptdir_expand(dir, id, path, sizeof(path)) == 0)
        json_object_set_new(copy, "dir", json_string(path));
    return copy;
}

void br_ckptdir_check_shared(br_coord_t *c, int64_t id, json_t *spec)
{
    json_t *mine = br_ckptdir_section(spec, id);
    const char *dir = json_string_value(json_object_get(mine, "dir"));
    if (!dir) {
        json_decref(mine);
        return;
    }
    char base[1024], seen[1024];
    int64_t oid;
    size_t n = strlen(br_strlcpy(base, dir, sizeof(base)));
    while (n > 1 && base[n - 1] == '/') /* "/ckpt/" holds what "/ckpt" does */
        base[--n] = '\0';
    if (br_store_checkpoint_under(c->store, base, id, &oid, seen, sizeof(seen), NULL) == 1)
        br_coord_event(c, id, NULL, "starting",
                       "checkpoint dir %s already holds steps of another run (job %lld: "
                       "%s); a job that looks there may take them for its own (put "
                       "${BRAMBLE_JOB_ID} in checkpoint.dir to keep runs apart)",
                       dir, (long long)oid, seen);
    json_decref(mine);
}
