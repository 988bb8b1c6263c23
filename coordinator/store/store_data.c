/* store_data.c - data sets, and what refers to each content of the content store. */
#include "store_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static json_t *data_row(sqlite3_stmt *st, br_err_t *err)
{
    static const char *const names[] = {"id",       "owner", "owner_id", "name",
                                        "tag",      "version", "manifest", "files",
                                        "bytes",    "created", "public",  "shares",
                                        "listing"};
    json_t *o = json_object();
    int bad = 0;
    for (int i = 0; i < 13; i++) {
        json_t *v = i == 1 || i == 3 || i == 4 || i == 6 ? br_st_col_text(st, i)
                    : i == 10 ? json_boolean(sqlite3_column_int(st, i))
                    : i >= 11 ? br_st_col_json(st, i)
                              : br_st_col_int(st, i);
        bad |= br_st_put(o, names[i], v);
    }
    return br_st_row_done(o, bad, "data set", err);
}

/* One integer from a statement whose binds are set. */
static int64_t one_int(br_store_t *s, sqlite3_stmt *st, const char *what, br_err_t *err)
{
    int rc = sqlite3_step(st);
    int64_t v = rc == SQLITE_ROW ? sqlite3_column_int64(st, 0) : -1;
    if (rc != SQLITE_ROW)
        br_st_dberr(s, err, what);
    br_st_reset(st);
    return v;
}

json_t *br_store_data_add(br_store_t *s, int64_t owner, const char *name, const char *tag,
                          const json_t *manifest, const json_t *listing, int public_,
                          const json_t *shares, br_err_t *err)
{
    const char *mhash = json_string_value(json_object_get(manifest, "hash"));
    if (br_st_check_text(name, SHORT_MAX, 0, "data set name", err) < 0 ||
        br_st_check_text(tag, SHORT_MAX, 1, "tag", err) < 0 ||
        br_st_check_text(mhash, SHORT_MAX, 0, "manifest hash", err) < 0)
        return NULL;
    sqlite3_stmt *st = s->st[ST_DATA_VERSION];
    if (sqlite3_bind_int64(st, 1, owner) || br_st_bind_text(st, 2, name)) {
        br_st_binderr(s, st, "number a data set", err);
        return NULL;
    }
    int64_t version = one_int(s, st, "number a data set", err);
    if (version < 0)
        return NULL;
    char auto_tag[32];
    snprintf(auto_tag, sizeof(auto_tag), "v%lld", (long long)version);
    st = s->st[ST_DATA_ADD];
    int64_t now = br_now_ms();
    if (sqlite3_bind_int64(st, 1, owner) || br_st_bind_text(st, 2, name) ||
        br_st_bind_text(st, 3, tag ? tag : auto_tag) || sqlite3_bind_int64(st, 4, version) ||
        br_st_bind_text(st, 5, mhash) ||
        sqlite3_bind_int64(st, 6, json_integer_value(json_object_get(manifest, "files"))) ||
        sqlite3_bind_int64(st, 7, json_integer_value(json_object_get(manifest, "bytes"))) ||
        sqlite3_bind_int64(st, 8, now) || sqlite3_bind_int(st, 9, public_ ? 1 : 0)) {
        br_st_binderr(s, st, "add a data set", err);
        return NULL;
    }
    json_t *none = json_array();
    int rc = br_st_bind_dump(s, st, 10, shares ? shares : none, "add a data set", err);
    json_decref(none);
    if (rc == 0)
        rc = br_st_bind_dump(s, st, 11, listing ? listing : json_null(), "add a data set", err);
    if (rc < 0) {
        br_st_reset(st);
        return NULL;
    }
    rc = sqlite3_step(st);
    br_st_reset(st);
    if (rc == SQLITE_CONSTRAINT)
        return br_errp(err, EEXIST, "%s:%s exists, and a tag names one version for good: "
                                    "push under another tag, or with none for the next "
                                    "version",
                       name, tag ? tag : auto_tag);
    if (rc != SQLITE_DONE) {
        br_st_dberr(s, err, "add a data set");
        return NULL;
    }
    int64_t id = sqlite3_last_insert_rowid(s->db);
    char ref[32];
    snprintf(ref, sizeof(ref), "data:%lld", (long long)id);
    if (br_store_content_ref_tree(s, ref, manifest, owner, err) < 0 ||
        (listing && br_store_content_ref(s, ref,
                                         json_string_value(json_object_get(listing, "hash")),
                                         json_integer_value(json_object_get(listing, "size")),
                                         owner, err) < 0))
        return NULL;
    return json_pack("{s:I, s:I, s:s, s:s, s:I, s:s, s:I, s:I, s:I, s:b, s:o, s:O}", "id",
                     (json_int_t)id, "owner_id", (json_int_t)owner, "name", name, "tag",
                     tag ? tag : auto_tag, "version", (json_int_t)version, "manifest",
                     mhash, "files", json_integer_value(json_object_get(manifest, "files")),
                     "bytes", json_integer_value(json_object_get(manifest, "bytes")),
                     "created", (json_int_t)now, "public", public_,
                     "shares", shares ? json_copy((json_t *)shares) : json_array(),
                     "listing", listing ? (json_t *)listing : json_null());
}

json_t *br_store_data_list(br_store_t *s, br_err_t *err)
{
    return br_st_list_rows(s, s->st[ST_DATA_LIST], data_row, "list data sets", err);
}

static json_t *hash_row(sqlite3_stmt *st, br_err_t *err)
{
    json_t *v = br_st_col_text(st, 0);
    return v ? v : br_errp(err, ENOMEM, "out of memory");
}

int br_store_data_remove(br_store_t *s, int64_t id, json_t **hashes, br_err_t *err)
{
    char ref[32];
    snprintf(ref, sizeof(ref), "data:%lld", (long long)id);
    if (br_store_content_unref(s, ref, hashes, err) < 0)
        return -1;
    sqlite3_stmt *st = s->st[ST_DATA_DEL];
    if (sqlite3_bind_int64(st, 1, id))
        return br_st_binderr(s, st, "remove a data set", err);
    return br_st_run(s, st, "remove a data set", err);
}

json_t *br_store_code_unneeded(br_store_t *s, int64_t before_ms, int max, br_err_t *err)
{
    sqlite3_stmt *st = s->st[ST_CODE_UNNEEDED];
    if (sqlite3_bind_int64(st, 1, before_ms) || sqlite3_bind_int(st, 2, max)) {
        br_st_binderr(s, st, "find code no job needs", err);
        return NULL;
    }
    return br_st_list_rows(s, st, hash_row, "find code no job needs", err);
}

int br_store_content_unref(br_store_t *s, const char *ref, json_t **hashes, br_err_t *err)
{
    if (hashes) {
        sqlite3_stmt *st = s->st[ST_REF_HASHES];
        if (br_st_bind_text(st, 1, ref))
            return br_st_binderr(s, st, "list a data set's contents", err);
        if (!(*hashes = br_st_list_rows(s, st, hash_row, "list a data set's contents", err)))
            return -1;
    }
    sqlite3_stmt *st = s->st[ST_REF_DEL];
    if (br_st_bind_text(st, 1, ref))
        return br_st_binderr(s, st, "drop references", err);
    return br_st_run(s, st, "drop references", err);
}

int br_store_content_ref(br_store_t *s, const char *ref, const char *hash, int64_t size,
                         int64_t principal, br_err_t *err)
{
    sqlite3_stmt *st = s->st[ST_REF_ADD];
    if (br_st_bind_text(st, 1, ref) || br_st_bind_text(st, 2, hash) ||
        sqlite3_bind_int64(st, 3, size) || sqlite3_bind_int64(st, 4, principal))
        return br_st_binderr(s, st, "refer to a content", err);
    return br_st_run(s, st, "refer to a content", err);
}

typedef struct {
    const char *hash;
    int64_t size;
} tree_ref_t;

static int by_hash(const void *a, const void *b)
{
    return strcmp(((const tree_ref_t *)a)->hash, ((const tree_ref_t *)b)->hash);
}

int br_store_content_ref_tree(br_store_t *s, const char *ref, const json_t *manifest,
                              int64_t principal, br_err_t *err)
{
    const json_t *entries = json_object_get(manifest, "entries");
    size_t i, n = 0;
    json_t *e;
    tree_ref_t *all = malloc((json_array_size(entries) + 1) * sizeof(*all));
    if (!all)
        return br_errf(err, ENOMEM, "out of memory");
    json_array_foreach(entries, i, e) {
        const char *h = json_string_value(json_object_get(e, "hash"));
        if (h) /* (a link holds no content) */
            all[n++] = (tree_ref_t){h, json_integer_value(json_object_get(e, "size"))};
    }
    /* in the order of the table's keys (ref, hash), and of its indexes by hash: each
     * of their pages is reached once, not at random (10,000 rows: 32 ms, not 44), and
     * a content the tree holds twice is inserted once */
    qsort(all, n, sizeof(*all), by_hash);
    int rc = 0;
    for (i = 0; i < n && rc == 0; i++)
        if (i == 0 || strcmp(all[i].hash, all[i - 1].hash) != 0)
            rc = br_store_content_ref(s, ref, all[i].hash, all[i].size, principal, err);
    free(all);
    return rc;
}

int br_store_content_ref_has(br_store_t *s, const char *ref, const char *hash, br_err_t *err)
{
    sqlite3_stmt *st = s->st[ST_REF_HAS];
    if (br_st_bind_text(st, 1, ref) || br_st_bind_text(st, 2, hash))
        return br_st_binderr(s, st, "look a reference up", err);
    int64_t n = one_int(s, st, "look a reference up", err);
    return n < 0 ? -1 : n > 0;
}

int br_store_output_add(br_store_t *s, int64_t job, int attempt, const char *node,
                        const json_t *manifest, const json_t *listing, int64_t owner,
                        br_err_t *err)
{
    char ref[160];
    snprintf(ref, sizeof(ref), "out:%lld:%d:%s", (long long)job, attempt, node);
    const char *lhash = json_string_value(json_object_get(listing, "hash"));
    json_int_t lsize = json_integer_value(json_object_get(listing, "size"));
    if (br_store_content_unref(s, ref, NULL, err) < 0 || /* (a report made again) */
        br_store_content_ref_tree(s, ref, manifest, owner, err) < 0 ||
        br_store_content_ref(s, ref, lhash, lsize, owner, err) < 0)
        return -1;
    sqlite3_stmt *st = s->st[ST_OUT_ADD];
    if (sqlite3_bind_int64(st, 1, job) || sqlite3_bind_int(st, 2, attempt) ||
        br_st_bind_text(st, 3, node) ||
        br_st_bind_text(st, 4, json_string_value(json_object_get(manifest, "hash"))) ||
        br_st_bind_text(st, 5, lhash) || sqlite3_bind_int64(st, 6, lsize) ||
        sqlite3_bind_int64(st, 7, json_integer_value(json_object_get(manifest, "files"))) ||
        sqlite3_bind_int64(st, 8, json_integer_value(json_object_get(manifest, "bytes"))) ||
        sqlite3_bind_int64(st, 9, br_now_ms()))
        return br_st_binderr(s, st, "record outputs", err);
    return br_st_run(s, st, "record outputs", err);
}

json_t *br_store_outputs_unneeded(br_store_t *s, int64_t before_ms, int max, br_err_t *err)
{
    sqlite3_stmt *st = s->st[ST_OUT_UNNEEDED];
    if (sqlite3_bind_int64(st, 1, before_ms) || sqlite3_bind_int(st, 2, max)) {
        br_st_binderr(s, st, "find outputs no job keeps", err);
        return NULL;
    }
    return br_st_list_rows(s, st, hash_row, "find outputs no job keeps", err);
}

int br_store_output_remove(br_store_t *s, const char *ref, json_t **hashes, br_err_t *err)
{
    if (br_store_content_unref(s, ref, hashes, err) < 0)
        return -1;
    sqlite3_stmt *st = s->st[ST_OUT_DEL];
    if (br_st_bind_text(st, 1, ref))
        return br_st_binderr(s, st, "remove outputs", err);
    return br_st_run(s, st, "remove outputs", err);
}

static json_t *output_row(sqlite3_stmt *st, br_err_t *err)
{
    static const char *const names[] = {"attempt", "node", "manifest", "listing",
                                        "listing_size", "files", "bytes", "time"};
    json_t *o = json_object();
    int bad = 0;
    for (int i = 0; i < 8; i++)
        bad |= br_st_put(o, names[i],
                         i == 1 || i == 2 || i == 3 ? br_st_col_text(st, i) : br_st_col_int(st, i));
    return br_st_row_done(o, bad, "outputs", err);
}

json_t *br_store_output_list(br_store_t *s, int64_t job, br_err_t *err)
{
    sqlite3_stmt *st = s->st[ST_OUT_LIST];
    if (sqlite3_bind_int64(st, 1, job)) {
        br_st_binderr(s, st, "list outputs", err);
        return NULL;
    }
    return br_st_list_rows(s, st, output_row, "list outputs", err);
}

int br_store_output_has(br_store_t *s, int64_t job, const char *hash, br_err_t *err)
{
    char glob[64];
    snprintf(glob, sizeof(glob), "out:%lld:*", (long long)job);
    sqlite3_stmt *st = s->st[ST_REF_HAS_GLOB];
    if (br_st_bind_text(st, 1, glob) || br_st_bind_text(st, 2, hash))
        return br_st_binderr(s, st, "look an output up", err);
    int64_t n = one_int(s, st, "look an output up", err);
    return n < 0 ? -1 : n > 0;
}

int br_store_data_manifest_used(br_store_t *s, const char *mhash, br_err_t *err)
{
    sqlite3_stmt *st = s->st[ST_DATA_MANIFEST_USED];
    if (br_st_bind_text(st, 1, mhash))
        return br_st_binderr(s, st, "look a manifest up", err);
    return (int)one_int(s, st, "look a manifest up", err);
}

int br_store_content_refs(br_store_t *s, const char *hash, br_err_t *err)
{
    sqlite3_stmt *st = s->st[ST_REF_COUNT];
    if (br_st_bind_text(st, 1, hash))
        return br_st_binderr(s, st, "count a content's references", err);
    return (int)one_int(s, st, "count a content's references", err);
}

int br_store_content_user_has(br_store_t *s, int64_t principal, const char *hash,
                              br_err_t *err)
{
    sqlite3_stmt *st = s->st[ST_REF_USER_HAS];
    if (sqlite3_bind_int64(st, 1, principal) || br_st_bind_text(st, 2, hash))
        return br_st_binderr(s, st, "look a content up", err);
    int64_t n = one_int(s, st, "look a content up", err);
    return n < 0 ? -1 : n > 0;
}

int64_t br_store_content_user_bytes(br_store_t *s, int64_t principal, br_err_t *err)
{
    sqlite3_stmt *st = s->st[ST_REF_USER_BYTES];
    if (sqlite3_bind_int64(st, 1, principal))
        return br_st_binderr(s, st, "add up a user's contents", err);
    return one_int(s, st, "add up a user's contents", err);
}
