/* api_image.c - images loaded without a registry (docs/containers.md): image.load
 * takes an archive the CLI uploaded as a one-file tree (image.tar) into the content
 * store, checks it there (ociarchive.h) and names it, one image per architecture
 * under a name; image.list and image.rm. A job whose image: names a loaded image
 * gets its archive's tree (br_api_image_resolve); each of its nodes fetches it like
 * a data set, from the coordinator or the nearest node that holds it, and loads it
 * into podman inside the job's task. Every user sees and runs every loaded image;
 * its loader or the admin removes it. */
#include "api.h"
#include "content.h"
#include "job.h"
#include "jobtab.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ociarchive.h"
#include "spec.h"
#include "util.h"

/* name as images are kept: a tag (":latest" when none) after its last '/'. */
static int normal_name(const char *name, char *out, size_t len, br_err_t *err)
{
    if (!br_spec_image_ok(name) || strchr(name, '@'))
        return br_errf(err, EINVAL, "'%.80s' is not an image name (letters, digits and . "
                                    "_ / : - only, at most %d, not starting with '-')",
                       name ? name : "", BR_SPEC_IMAGE_MAX);
    const char *slash = strrchr(name, '/');
    int tagged = strchr(slash ? slash : name, ':') != NULL;
    if ((size_t)snprintf(out, len, "%s%s", name, tagged ? "" : ":latest") >= len)
        return br_errf(err, EINVAL, "'%.80s': too long an image name", name);
    return 0;
}

/* Every image named name (kept form); arch NULL: of every architecture. A new
 * array, or NULL with err. */
static json_t *find_images(br_coord_t *c, const char *name, const char *arch, br_err_t *err)
{
    json_t *all = br_store_image_list(c->store, err), *out = json_array();
    size_t i;
    json_t *r;
    if (!all || !out) {
        json_decref(all);
        json_decref(out);
        return all ? br_errp(err, ENOMEM, "out of memory") : NULL;
    }
    json_array_foreach(all, i, r)
        if (strcmp(json_string_value(json_object_get(r, "name")), name) == 0 &&
            (!arch || strcmp(json_string_value(json_object_get(r, "arch")), arch) == 0))
            json_array_append(out, r);
    json_decref(all);
    return out;
}

/* A row as callers see it. */
static json_t *row_out(const json_t *r)
{
    json_t *o = json_deep_copy(r);
    json_object_del(o, "owner_id");
    json_object_del(o, "listing");
    json_object_set_new(o, "created", br_time_json(json_object_get(r, "created")));
    return o;
}

void br_api_image_load(br_coord_t *c, br_msg_t *m, const br_caller_t *who)
{
    const char *name;
    json_t *listing = NULL, *summary, *full = NULL, *row = NULL, *img = NULL;
    char kept[BR_SPEC_IMAGE_MAX + 16];
    const char *hash = NULL;
    br_err_t err;
    if (br_msg_unpack(m, &err, "{s:s, s:o, s:o}", "name", &name, "listing", &listing,
                      "manifest", &summary) < 0 ||
        normal_name(name, kept, sizeof(kept), &err) < 0 ||
        !(full = br_api_uploaded_tree(c, who, who, listing, summary, &err)))
        goto fail;
    json_t *entries = json_object_get(full, "entries"), *e = json_array_get(entries, 0);
    hash = json_string_value(json_object_get(e, "hash"));
    if (json_array_size(entries) != 1 || !hash ||
        strcmp(json_string_value(json_object_get(e, "path")), BR_IMAGE_ARCHIVE) != 0) {
        br_errf(&err, EINVAL, "an image is one file, %s: this tree is not", BR_IMAGE_ARCHIVE);
        hash = NULL;
        goto fail;
    }
    /* checked here, where it is kept: what the CLI said of it is not taken on trust */
    char path[4200];
    snprintf(path, sizeof(path), "%s/objects/%.2s/%s", br_content_dir(c->content), hash, hash);
    br_ociarchive_t a;
    if (br_ociarchive_read(path, &a, &err) < 0) {
        const char *says = strstr(err.text, path); /* named as the user knows it */
        char text[BR_ERR_TEXT];
        snprintf(text, sizeof(text), "the archive%s", says ? says + strlen(path) : ": ");
        if (!says)
            br_strlcpy(text + strlen(text), err.text, sizeof(text) - strlen(text));
        br_errf(&err, EINVAL, "%s", text);
        goto fail;
    }
    img = json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:i}", "name", kept, "arch", a.arch,
                    "variant", a.variant, "os", a.os, "format", a.format, "image_id", a.id,
                    "layers", a.layers);
    if (!img || !(row = br_store_image_add(c->store, who->id, img, full, listing, &err)))
        goto fail;
    br_api_settle_tree(c, who, full, listing);
    json_object_set_new(row, "owner", json_string(who->name));
    char sz[32];
    br_coord_event(c, 0, NULL, "image", "image %s (%s%s%s, %s) loaded by %s: %s", kept,
                   a.arch, a.variant[0] ? "/" : "", a.variant, a.format, who->name,
                   br_format_size((uint64_t)a.bytes, sz, sizeof(sz)));
    br_reply_ok(c, m, row_out(row));
    json_decref(row);
    json_decref(img);
    json_decref(full);
    return;
fail:
    if (listing) /* a refused load keeps nothing (a retry sends it again) */
        br_content_doubt(c->content, json_string_value(json_object_get(listing, "hash")), 0);
    if (hash)
        br_content_doubt(c->content, hash, 0);
    json_decref(img);
    json_decref(full);
    br_reply_fail(c, m, &err);
}

void br_api_image_list(br_coord_t *c, br_msg_t *m, const br_caller_t *who)
{
    (void)who;
    br_err_t err;
    json_t *all = NULL, *out = json_array();
    if (br_msg_unpack(m, &err, "{}") < 0 || !(all = br_store_image_list(c->store, &err))) {
        json_decref(out);
        br_reply_fail(c, m, &err);
        return;
    }
    size_t i;
    json_t *r;
    json_array_foreach(all, i, r)
        json_array_append_new(out, row_out(r));
    json_decref(all);
    br_reply_ok(c, m, json_pack("{s:o}", "images", out));
}

/* The current job that runs from image row id, or NULL. */
static br_job_t *image_user(br_coord_t *c, json_int_t id)
{
    for (br_job_t *j = br_jobtab_first(c->jobs); j; j = j->next) {
        size_t i;
        json_t *v;
        if (br_job_state_ended(j->state))
            continue;
        json_array_foreach(json_object_get(json_object_get(j->spec, "image_archive"),
                                           "variants"), i, v)
            if (json_integer_value(json_object_get(v, "id")) == id)
                return j;
    }
    return NULL;
}

void br_api_image_rm(br_coord_t *c, br_msg_t *m, const br_caller_t *who)
{
    const char *name, *arch = NULL;
    char kept[BR_SPEC_IMAGE_MAX + 16];
    br_err_t err;
    json_t *found = NULL, *removed = json_array();
    size_t i;
    json_t *r;
    if (br_msg_unpack(m, &err, "{s:s, s?s}", "name", &name, "arch", &arch) < 0 ||
        normal_name(name, kept, sizeof(kept), &err) < 0 ||
        !(found = find_images(c, kept, arch, &err)))
        goto fail;
    if (!json_array_size(found)) {
        br_errf(&err, ENOENT, "no image %s%s%s loaded (bramble image list shows them)", kept,
                arch ? " for " : "", arch ? arch : "");
        goto fail;
    }
    json_array_foreach(found, i, r) {
        br_job_t *user = image_user(c, json_integer_value(json_object_get(r, "id")));
        if (who->kind != BR_PRINCIPAL_ADMIN &&
            json_integer_value(json_object_get(r, "owner_id")) != who->id) {
            br_errf(&err, EACCES, "not allowed: %s (%s) was loaded by %s", kept,
                    json_string_value(json_object_get(r, "arch")),
                    json_string_value(json_object_get(r, "owner")));
            goto fail;
        }
        if (user) {
            br_errf(&err, EBUSY, "%s (%s) is used by job %lld (%s, %s): cancel it or let it "
                                 "end first", kept, json_string_value(json_object_get(r, "arch")),
                    (long long)user->id, user->name, br_job_state_name(user->state));
            goto fail;
        }
    }
    json_array_foreach(found, i, r) {
        json_t *hashes = NULL, *h;
        size_t k;
        if (br_store_image_remove(c->store, json_integer_value(json_object_get(r, "id")),
                                  &hashes, &err) < 0)
            goto fail;
        json_array_foreach(hashes, k, h)
            br_content_doubt(c->content, json_string_value(h), 0);
        json_decref(hashes);
        json_array_append(removed, json_object_get(r, "arch"));
        br_coord_event(c, 0, NULL, "image", "image %s (%s) removed by %s", kept,
                       json_string_value(json_object_get(r, "arch")), who->name);
    }
    json_decref(found);
    br_reply_ok(c, m, json_pack("{s:s, s:o}", "name", kept, "removed", removed));
    return;
fail:
    json_decref(found);
    json_decref(removed);
    br_reply_fail(c, m, &err);
}

int br_api_image_resolve(br_coord_t *c, json_t *spec_json, br_err_t *err)
{
    const char *image = json_string_value(json_object_get(spec_json, "image"));
    char kept[BR_SPEC_IMAGE_MAX + 16];
    if (!image || strchr(image, '@') || normal_name(image, kept, sizeof(kept), err) < 0)
        return 0; /* (a digest names a registry's image) */
    json_t *found = find_images(c, kept, NULL, err), *variants = json_array(), *r;
    size_t i;
    if (!found || !variants) {
        json_decref(found);
        json_decref(variants);
        return -1;
    }
    json_array_foreach(found, i, r)
        json_array_append_new(
            variants, json_pack("{s:O, s:O, s:O, s:O, s:O, s:O, s:O, s:O}", "id",
                                json_object_get(r, "id"), "arch", json_object_get(r, "arch"),
                                "variant", json_object_get(r, "variant"), "image_id",
                                json_object_get(r, "image_id"), "hash",
                                json_object_get(r, "manifest"), "files",
                                json_object_get(r, "files"), "bytes",
                                json_object_get(r, "bytes"), "listing",
                                json_object_get(r, "listing")));
    json_decref(found);
    if (json_array_size(variants))
        json_object_set_new(spec_json, "image_archive",
                            json_pack("{s:s, s:o}", "name", kept, "variants", variants));
    else
        json_decref(variants);
    return 0;
}
