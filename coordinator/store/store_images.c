/* store_images.c - images loaded without a registry (docs/containers.md): each an
 * archive kept as a one-file tree in the content store, named, one per
 * architecture. */
#include "store_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define IMAGE_COLS 15

static json_t *image_row(sqlite3_stmt *st, br_err_t *err)
{
    static const char *const names[IMAGE_COLS] = {
        "id",    "name",     "arch",     "variant", "os",    "format", "image_id", "layers",
        "owner", "owner_id", "manifest", "listing", "files", "bytes",  "created"};
    json_t *o = json_object();
    int bad = 0;
    for (int i = 0; i < IMAGE_COLS; i++) {
        json_t *v = i == 0 || i == 7 || i == 9 || i >= 12 ? br_st_col_int(st, i)
                    : i == 11                            ? br_st_col_json(st, i)
                                                         : br_st_col_text(st, i);
        bad |= br_st_put(o, names[i], v);
    }
    return br_st_row_done(o, bad, "image", err);
}

static const char *text_of(const json_t *o, const char *key)
{
    return json_string_value(json_object_get(o, key));
}

json_t *br_store_image_add(br_store_t *s, int64_t owner, const json_t *img,
                           const json_t *manifest, const json_t *listing, br_err_t *err)
{
    static const char *const texts[] = {"name", "arch", "variant", "os", "format",
                                        "image_id"};
    const char *mhash = text_of(manifest, "hash");
    if (br_st_check_text(mhash, SHORT_MAX, 0, "manifest hash", err) < 0)
        return NULL;
    sqlite3_stmt *st = s->st[ST_IMAGE_ADD];
    for (int i = 0; i < 6; i++) {
        const char *v = text_of(img, texts[i]);
        if (!(i == 2 && v && !*v) && /* (no variant: "") */
            br_st_check_text(v, SHORT_MAX, 0, texts[i], err) < 0) {
            br_st_reset(st);
            return NULL;
        }
        if (br_st_bind_text(st, i + 1, v)) {
            br_st_binderr(s, st, "add an image", err);
            return NULL;
        }
    }
    int64_t now = br_now_ms();
    if (sqlite3_bind_int64(st, 7, json_integer_value(json_object_get(img, "layers"))) ||
        sqlite3_bind_int64(st, 8, owner) || br_st_bind_text(st, 9, mhash) ||
        sqlite3_bind_int64(st, 11, json_integer_value(json_object_get(manifest, "files"))) ||
        sqlite3_bind_int64(st, 12, json_integer_value(json_object_get(manifest, "bytes"))) ||
        sqlite3_bind_int64(st, 13, now)) {
        br_st_binderr(s, st, "add an image", err);
        return NULL;
    }
    if (br_st_bind_dump(s, st, 10, listing, "add an image", err) < 0) {
        br_st_reset(st);
        return NULL;
    }
    int rc = sqlite3_step(st);
    br_st_reset(st);
    if (rc == SQLITE_CONSTRAINT)
        return br_errp(err, EEXIST, "%s has an image for %s%s%s already: bramble image rm "
                                    "%s --arch %s first, or load it under another name",
                       text_of(img, "name"), text_of(img, "arch"),
                       *text_of(img, "variant") ? "/" : "", text_of(img, "variant"),
                       text_of(img, "name"), text_of(img, "arch"));
    if (rc != SQLITE_DONE) {
        br_st_dberr(s, err, "add an image");
        return NULL;
    }
    int64_t id = sqlite3_last_insert_rowid(s->db);
    char ref[32];
    snprintf(ref, sizeof(ref), "image:%lld", (long long)id);
    if (br_store_content_ref_tree(s, ref, manifest, owner, err) < 0 ||
        br_store_content_ref(s, ref, text_of(listing, "hash"),
                             json_integer_value(json_object_get(listing, "size")), owner,
                             err) < 0)
        return NULL;
    json_t *row = json_deep_copy(img);
    json_object_set_new(row, "id", json_integer((json_int_t)id));
    json_object_set_new(row, "owner_id", json_integer((json_int_t)owner));
    json_object_set_new(row, "manifest", json_string(mhash));
    json_object_set(row, "listing", (json_t *)listing);
    json_object_set(row, "files", json_object_get(manifest, "files"));
    json_object_set(row, "bytes", json_object_get(manifest, "bytes"));
    json_object_set_new(row, "created", json_integer((json_int_t)now));
    return row;
}

json_t *br_store_image_list(br_store_t *s, br_err_t *err)
{
    return br_st_list_rows(s, s->st[ST_IMAGE_LIST], image_row, "list images", err);
}

int br_store_image_remove(br_store_t *s, int64_t id, json_t **hashes, br_err_t *err)
{
    char ref[32];
    snprintf(ref, sizeof(ref), "image:%lld", (long long)id);
    if (br_store_content_unref(s, ref, hashes, err) < 0)
        return -1;
    sqlite3_stmt *st = s->st[ST_IMAGE_DEL];
    if (sqlite3_bind_int64(st, 1, id))
        return br_st_binderr(s, st, "remove an image", err);
    return br_st_run(s, st, "remove an image", err);
}
