/* api_data.c - the files users send and get back (docs/files.md) through the
 * content store (PROTOCOL.md section 12): content.lack says what a tree's upload
 * must still send, content.put stores one chunk, content.read gives a job's outputs
 * back; data.push names a tree whose files are all stored, data.list/show/rm. A
 * job's code: kept at submit (br_api_code_keep), served to the nodes that run it
 * (ckpt.read with the grant code:JOB), its fetches' progress kept for job.show, and
 * let go after the ended jobs' retention. A user sees and removes their own data
 * sets and uses those shared with them or public; the admin all of them. */
#include "api.h"
#include "content.h"
#include "listcache.h"
#include "contentw.h"
#include "treefetch.h"
#include "stages.h"
#include "uploads.h"
#include "job.h"
#include "jobtab.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "manifest_check.h"
#include "nodes.h"
#include "outbox.h"
#include "util.h"

#define LACK_MAX 20000     /* entries one content.lack answer names ("more" after) */
#define LACK_SCAN 1000     /* ... and looks at, when asked "paged" ("next": where on) */
#define CONTENTS_MAX 1000  /* contents one content.lack asks about by hash */
#define NAME_MAX_LEN 64    /* of a data set's name and of a tag */
#define LARGEST_SHOWN 5    /* files a quota refusal names */
#define SHOW_LARGEST 10    /* files data.show lists */

/* [a-z0-9][a-z0-9._-]*, at most NAME_MAX_LEN: what a data set's name and a tag are. */
static int word_ok(const char *s, const char *what, br_err_t *err)
{
    size_t n = s ? strlen(s) : 0;
    int ok = n > 0 && n <= NAME_MAX_LEN && ((s[0] >= 'a' && s[0] <= 'z') ||
                                            (s[0] >= '0' && s[0] <= '9'));
    for (size_t i = 0; ok && i < n; i++)
        ok = (s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '.' ||
             s[i] == '_' || s[i] == '-';
    if (!ok)
        return br_errf(err, EINVAL, "'%.80s' is not a data set %s: lowercase letters, "
                                    "digits, '.', '_' and '-', first a letter or digit, "
                                    "at most %d",
                       s ? s : "", what, NAME_MAX_LEN);
    return 0;
}

/* A listing a refused request named goes with the wake's sweep, unless nothing
 * refers to it only because another user's upload of the same tree is under way
 * (their next page would find it gone). */
static void let_listing_go(br_coord_t *c, const br_caller_t *who, const char *lh)
{
    int64_t user = who->kind == BR_PRINCIPAL_USER ? who->id : 0;
    if (lh && !br_uploads_others(c->uploads, user, lh))
        br_content_doubt(c->content, lh, 0);
}

static int claimable(br_coord_t *c, const br_caller_t *who, const char *h, br_err_t *err);

/* The whole manifest an upload names: its listing (the manifest's own text, stored
 * as a content first) read from the store and checked against the summary. NULL
 * with err (ENOENT: the listing is not stored yet). */
static json_t *listed_manifest(br_coord_t *c, const br_caller_t *who, const json_t *listing,
                               const json_t *summary, br_err_t *err)
{
    const char *lhash;
    json_int_t lsize;
    if (json_unpack((json_t *)listing, "{s:s, s:I}", "hash", &lhash, "size", &lsize) < 0 ||
        lsize < 2 || lsize > BR_MANIFEST_LISTING_MAX)
        return br_errp(err, EINVAL, "listing must be {\"hash\", \"size\"} of at most %d bytes",
                       BR_MANIFEST_LISTING_MAX);
    int has = claimable(c, who, lhash, err);
    if (has < 0)
        return NULL;
    if (!has)
        return br_errp(err, ENOENT, "the manifest's listing %.16s... is not stored: send it "
                                    "first (content.put)",
                       lhash);
    /* made from this listing and summary before (by the content writer as the
     * listing was stored, or an earlier page), parsed and verified, its links
     * checked: kept only when they were all right */
    json_t *m = br_listcache_get(c->listcache, lhash, summary, br_mono_ms());
    char path[4200];
    snprintf(path, sizeof(path), "%s/objects/%.2s/%s", br_content_dir(c->content), lhash,
             lhash);
    struct stat st;
    if (m && (stat(path, &st) < 0 || st.st_size != lsize)) {
        json_decref(m);
        return br_errp(err, EPROTO, "the manifest: the listing is not its size");
    }
    if (!m) {
        size_t len = 0;
        char *text = br_read_file(path, BR_MANIFEST_LISTING_MAX, &len, err);
        if (!text)
            return NULL;
        m = len == (size_t)lsize ? br_manifest_from_listing(summary, text, len, err)
                                 : br_errp(err, EPROTO, "the listing is not its size");
        free(text);
        if (m && br_manifest_tree_links_ok(m, err) < 0) { /* (files on machines, from it) */
            json_decref(m);
            m = NULL;
        }
        if (m && lsize <= BR_LISTCACHE_LISTING_MAX)
            br_listcache_put(c->listcache, lhash, summary, m, br_mono_ms());
    }
    if (m && strcmp(json_string_value(json_object_get(m, "root")), "dir") != 0) {
        json_decref(m);
        return br_errp(err, EINVAL, "a data set is a directory (its manifest's root is "
                                    "not \"dir\")");
    }
    if (!m)
        br_err_prefix(err, "the manifest");
    return m;
}

json_t *br_api_tree_files(br_coord_t *c, const br_caller_t *who, const json_t *listing,
                          const json_t *summary, br_err_t *err)
{
    json_t *full = listed_manifest(c, who, listing, summary, err), *out = full ? json_object() : NULL;
    size_t i;
    json_t *e;
    json_array_foreach(json_object_get(full, "entries"), i, e) {
        const char *h = json_string_value(json_object_get(e, "hash"));
        if (h)
            json_object_set_new(out, h, json_true());
    }
    if (out)
        json_object_set_new(out, json_string_value(json_object_get(listing, "hash")),
                            json_true());
    json_decref(full);
    return out;
}

/* Every content a manifest names: {hash: size}, each once (links hold none). */
static json_t *distinct_contents(const json_t *m)
{
    json_t *seen = json_object();
    size_t i;
    json_t *e;
    json_array_foreach(json_object_get(m, "entries"), i, e) {
        const char *h = json_string_value(json_object_get(e, "hash"));
        if (h && seen)
            json_object_set(seen, h, json_object_get(e, "size"));
    }
    return seen;
}

/* The n (at most SHOW_LARGEST) largest files of manifest m into top, largest first
 * (of equal ones, the first listed); how many. */
static size_t largest(const json_t *m, size_t n, const json_t **top)
{
    size_t i, k = 0;
    json_t *e;
    if (n > SHOW_LARGEST)
        n = SHOW_LARGEST;
    json_array_foreach(json_object_get(m, "entries"), i, e) {
        json_int_t sz = json_integer_value(json_object_get(e, "size"));
        if (!json_object_get(e, "hash"))
            continue;
        size_t at = k < n ? k++ : n;
        while (at > 0 && json_integer_value(json_object_get(top[at - 1], "size")) < sz) {
            if (at < n)
                top[at] = top[at - 1];
            at--;
        }
        if (at < n)
            top[at] = e;
    }
    return k;
}

/* The paths of the n largest files of m into buf, "a (1.2 GiB), b (3 MiB)". */
static const char *largest_text(const json_t *m, size_t n, char *buf, size_t len)
{
    const json_t *top[SHOW_LARGEST];
    size_t i, k = largest(m, n, top), used = 0;
    buf[0] = 0;
    for (i = 0; i < k && used < len; i++) {
        char sz[32];
        br_format_size((uint64_t)json_integer_value(json_object_get(top[i], "size")), sz,
                       sizeof(sz));
        int w = snprintf(buf + used, len - used, "%s%s (%s)", i ? ", " : "",
                         json_string_value(json_object_get(top[i], "path")), sz);
        used += w > 0 ? (size_t)w : 0;
    }
    return buf;
}

/* Refuse (EDQUOT) when m's contents the caller does not refer to yet would take
 * them past --user-store-quota. The admin has no such quota. */
static int check_user_quota(br_coord_t *c, const br_caller_t *who, const json_t *m,
                            br_err_t *err)
{
    int64_t quota = c->cfg.user_store_quota;
    if (quota <= 0 || who->kind != BR_PRINCIPAL_USER) /* (a node: its job's owner's, later) */
        return 0;
    int64_t used = br_store_content_user_bytes(c->store, who->id, err);
    if (used < 0)
        return -1;
    json_t *all = distinct_contents(m);
    if (!all)
        return br_errf(err, ENOMEM, "out of memory");
    int64_t more = 0, own = 0; /* own: of more, what the caller's uploads hold */
    const char *h;
    json_t *v;
    json_object_foreach(all, h, v) {
        int has = br_store_content_user_has(c->store, who->id, h, err);
        if (has < 0) {
            json_decref(all);
            return -1;
        }
        more += has ? 0 : json_integer_value(v);
        own += !has && br_uploads_size(c->uploads, who->id, h) > 0 ? json_integer_value(v) : 0;
    }
    json_decref(all);
    /* the caller's other stored files that nothing refers to yet count as well */
    int64_t loose = br_uploads_pending(c->uploads, who->id) - own;
    loose = loose < 0 ? 0 : loose;
    if (used + loose + more <= quota)
        return 0;
    char q[32], u[32], n[32], l[32], big[600], also[200] = "";
    if (loose > 0)
        snprintf(also, sizeof(also), " and %s of files uploaded but not (yet) submitted, "
                                     "let go a day after their upload stopped",
                 br_format_size((uint64_t)loose, l, sizeof(l)));
    return br_errf(err, EDQUOT, "over your quota: this tree adds %s to the %s you hold%s, "
                                "and each user may hold %s (--user-store-quota); its largest "
                                "files: %s. Leave out what the job does not need with "
                                ".brambleignore",
                   br_format_size((uint64_t)more, n, sizeof(n)),
                   br_format_size((uint64_t)used, u, sizeof(u)), also,
                   br_format_size((uint64_t)quota, q, sizeof(q)),
                   largest_text(m, LARGEST_SHOWN, big, sizeof(big)));
}

/* The partial a caller's content.put writes: a user's own (br_content_write), the
 * shared one for a node or the admin. */
static int64_t own_partial(const br_caller_t *who)
{
    return who->kind == BR_PRINCIPAL_USER ? who->id : 0;
}

/* Refuse (EDQUOT) when m's contents the store lacks would take it past --store-quota
 * (anyone's tree, the admin's too), before any of them is sent: a push refused part
 * way would leave the files it stored taking the room of the next one. What the
 * caller's cut-off upload of a file holds already is not counted twice. Each file is
 * looked at only when the whole tree could pass it (so not on a store with room, and
 * on the loop only then). */
static int check_store_quota(br_coord_t *c, const br_caller_t *who, const json_t *m,
                             br_err_t *err)
{
    uint64_t quota = br_content_quota(c->content), used = br_content_used(c->content);
    uint64_t all = (uint64_t)json_integer_value(json_object_get(m, "bytes"));
    if (quota == 0 || used + all <= quota)
        return 0;
    json_t *distinct = distinct_contents(m);
    if (!distinct)
        return br_errf(err, ENOMEM, "out of memory");
    uint64_t more = 0;
    const char *h;
    json_t *v;
    json_object_foreach(distinct, h, v)
        if (!br_content_has(c->content, h)) { /* (what a cut-off upload of it holds counts
                                               * in used already) */
            int64_t held = br_content_partial(c->content, h, own_partial(who));
            int64_t left = json_integer_value(v) - (held > 0 ? held : 0);
            more += left > 0 ? (uint64_t)left : 0;
        }
    json_decref(distinct);
    if (used + more <= quota)
        return 0;
    char q[32], u[32], n[32], big[600];
    return br_errf(err, EDQUOT, "the store is full: this tree adds %s to the %s it holds, "
                                "and it may hold %s (--store-quota); its largest files: %s. "
                                "Leave out what the job does not need with .brambleignore",
                   br_format_size(more, n, sizeof(n)), br_format_size(used, u, sizeof(u)),
                   br_format_size(quota, q, sizeof(q)),
                   largest_text(m, LARGEST_SHOWN, big, sizeof(big)));
}

void br_api_settle_tree(br_coord_t *c, const br_caller_t *who, const json_t *full,
                        const json_t *listing)
{
    size_t i;
    json_t *e;
    json_array_foreach(json_object_get(full, "entries"), i, e) {
        const char *h = json_string_value(json_object_get(e, "hash"));
        if (h)
            br_uploads_settle(c->uploads, who->id, h);
    }
    const char *lh = json_string_value(json_object_get(listing, "hash"));
    if (lh)
        br_uploads_settle(c->uploads, who->id, lh);
}

/* Refuse (EDQUOT) a chunk of a file the caller has not begun to store yet when,
 * with its size, what they hold and their uploads nothing refers to yet would pass
 * --user-store-quota; else charge the file to their uploads. Whether they asked
 * content.lack first or not: the quota holds either way. */
static int charge_upload(br_coord_t *c, const br_caller_t *who, const char *hash,
                         int64_t size, br_err_t *err)
{
    int64_t quota = c->cfg.user_store_quota, now = br_mono_ms();
    if (quota <= 0 || who->kind != BR_PRINCIPAL_USER || br_content_has(c->content, hash) ||
        br_uploads_touch(c->uploads, who->id, hash, now))
        return 0;
    int64_t used = br_uploads_used(c->uploads, who->id, now);
    if (used < 0) {
        if ((used = br_store_content_user_bytes(c->store, who->id, err)) < 0)
            return -1;
        br_uploads_set_used(c->uploads, who->id, used, now);
    }
    int64_t pending = br_uploads_pending(c->uploads, who->id);
    if (used + pending + size > quota) {
        char q[32], u[32], p[32], n[32];
        return br_errf(err, EDQUOT, "over your quota: a file of %s on top of the %s you hold "
                                    "and %s of files uploaded but not (yet) submitted (let "
                                    "go a day after their upload stopped); each user may "
                                    "hold %s (--user-store-quota)",
                       br_format_size((uint64_t)size, n, sizeof(n)),
                       br_format_size((uint64_t)used, u, sizeof(u)),
                       br_format_size((uint64_t)pending, p, sizeof(p)),
                       br_format_size((uint64_t)quota, q, sizeof(q)));
    }
    return br_uploads_add(c->uploads, who->id, hash, size, now) < 0
               ? br_errf(err, ENOMEM, "out of memory")
               : 0;
}


/* Whether content h counts as stored for the caller: whole in the store, and for a
 * user also one that they refer to already (a job, output or data set of theirs) or
 * sent every byte of themselves. Knowing a hash is not holding the file: another
 * user's private file is never theirs by its name. -1 with err when the store
 * cannot say. */
static int known_claimable(br_coord_t *c, const br_caller_t *who, const char *h, int held,
                           br_err_t *err)
{
    if (!held)
        return 0;
    if (who->kind != BR_PRINCIPAL_USER || br_content_proved(c->content, h, who->id))
        return 1;
    return br_store_content_user_has(c->store, who->id, h, err);
}

static int claimable(br_coord_t *c, const br_caller_t *who, const char *h, br_err_t *err)
{
    return known_claimable(c, who, h, br_content_has(c->content, h), err);
}

/* [[i, offset], ...] for the entries of m from `from` on whose content is not stored
 * for the caller (claimable; offset: what the caller's partial of it holds), each
 * content once; *more when the answer stopped at LACK_MAX. look, when not NULL, is
 * the content writer's look at entries from..from+look->n: what the store holds is
 * read there, not asked of the file system here. NULL with err. */
static json_t *lacking(br_coord_t *c, const br_caller_t *who, const json_t *entries,
                       size_t from, size_t scan, const br_contentw_look_t *look, int *more,
                       size_t *next, json_int_t *bytes, br_err_t *err)
{
    json_t *out = json_array(), *seen = json_object();
    size_t i;
    json_t *e;
    *more = 0;
    *bytes = 0;
    if (!out || !seen)
        goto oom;
    for (i = from; i < json_array_size(entries); i++) {
        if (scan && i - from == scan) {
            *more = 1; /* (the rest in the next page: each a wake of its own) */
            break;
        }
        e = json_array_get(entries, i);
        const char *h = json_string_value(json_object_get(e, "hash"));
        if (!h || json_object_get(seen, h))
            continue;
        int looked = look && i - from < look->n;
        int has = looked ? known_claimable(c, who, h, look->has[i - from], err)
                         : claimable(c, who, h, err);
        if (has < 0) {
            json_decref(out);
            json_decref(seen);
            return NULL;
        }
        if (has)
            continue;
        if (json_array_size(out) == LACK_MAX) {
            *more = 1;
            break;
        }
        int64_t off = looked ? look->partial[i - from]
                             : br_content_partial(c->content, h, own_partial(who));
        json_int_t size = json_integer_value(json_object_get(e, "size"));
        if (off > size)
            off = 0;
        *bytes += size - off;
        if (json_object_set_new(seen, h, json_true()) < 0 ||
            json_array_append_new(out, json_pack("[I, I]", (json_int_t)i, (json_int_t)off)) < 0)
            goto oom;
    }
    *next = i;
    json_decref(seen);
    return out;
oom:
    json_decref(out);
    json_decref(seen);
    return br_errp(err, ENOMEM, "out of memory");
}

json_t *br_api_uploaded_tree(br_coord_t *c, const br_caller_t *who,
                             const br_caller_t *sender, const json_t *listing,
                             const json_t *summary, br_err_t *err)
{
    json_t *full = listed_manifest(c, sender, listing, summary, err);
    if (!full || check_user_quota(c, who, full, err) < 0) {
        json_decref(full);
        return NULL;
    }
    size_t i;
    json_t *e;
    json_array_foreach(json_object_get(full, "entries"), i, e) {
        const char *h = json_string_value(json_object_get(e, "hash"));
        int has = h ? claimable(c, sender, h, err) : 1;
        if (has == 0)
            br_errf(err, ENOENT, "%s is not stored yet: send every file first",
                    json_string_value(json_object_get(e, "path")));
        if (has <= 0) {
            json_decref(full);
            return NULL;
        }
    }
    return full;
}

int br_api_code_keep(br_coord_t *c, const br_caller_t *who, const json_t *code,
                     json_t *spec_json, br_err_t *err)
{
    json_t *listing = json_object_get(code, "listing"), *summary = json_object_get(code, "manifest");
    const char *dir = json_string_value(json_object_get(code, "dir"));
    if (!json_is_object(code) || !listing || !summary || !dir ||
        json_object_size(code) != 3 || strlen(dir) >= 4096)
        return br_errf(err, EPROTO, "job.submit: code: {\"listing\", \"manifest\", \"dir\"}");
    json_t *full = br_api_uploaded_tree(c, who, who, listing, summary, err);
    if (!full)
        return -1;
    const char *mhash = json_string_value(json_object_get(full, "hash"));
    char ref[80];
    snprintf(ref, sizeof(ref), "code:%s", mhash);
    /* the files, and the listing the nodes read the tree's entries from */
    int rc = br_store_content_ref_tree(c->store, ref, full, who->id, err);
    if (rc == 0)
        rc = br_store_content_ref(c->store, ref,
                                  json_string_value(json_object_get(listing, "hash")),
                                  json_integer_value(json_object_get(listing, "size")),
                                  who->id, err);
    if (rc == 0) {
        br_api_settle_tree(c, who, full, listing);
        json_object_set_new(spec_json, "code",
                            json_pack("{s:s, s:O, s:O, s:O, s:O}", "dir", dir, "hash",
                                      json_object_get(full, "hash"), "files",
                                      json_object_get(full, "files"), "bytes",
                                      json_object_get(full, "bytes"), "listing", listing));
    }
    json_decref(full);
    return rc;
}

void br_api_code_progress(br_coord_t *c, br_node_t *n, const json_t *pulling)
{
    br_job_t *job = br_jobtab_find(c->jobs, json_integer_value(json_object_get(pulling, "job")));
    const char *hash = json_string_value(json_object_get(pulling, "hash"));
    if (job && hash) /* (else a checkpoint's copy: replicas.c) */
        br_treefetch_progress(job, n->name, hash,
                              json_integer_value(json_object_get(pulling, "done")),
                              br_mono_ms());
}

json_t *br_api_code_transfers(br_coord_t *c, int64_t id)
{
    return br_treefetch_list(br_jobtab_find(c->jobs, id), br_mono_ms());
}

/* Let go of refs (code trees, or outputs: out), their contents removed after the
 * commit if nothing else holds them. */
static void let_go(br_coord_t *c, json_t *refs, int out)
{
    br_err_t err;
    size_t i, k;
    json_t *r, *h;
    json_array_foreach(refs, i, r) {
        json_t *hashes = NULL;
        const char *ref = json_string_value(r);
        if ((out ? br_store_output_remove(c->store, ref, &hashes, &err)
                 : br_store_content_unref(c->store, ref, &hashes, &err)) < 0) {
            fprintf(stderr, "brambled: %s: %s\n", ref, err.text);
            break;
        }
        json_array_foreach(hashes, k, h) /* gone after the commit, if nothing else holds */
            br_content_doubt(c->content, json_string_value(h), 0);
        char line[300];
        snprintf(line, sizeof(line), "brambled: %s %.*s... %s: its %zu file(s) let go\n",
                 out ? "outputs" : "code", out ? 120 : 21, ref,
                 out ? "are past the ended jobs' retention" : "is no job's any more",
                 json_array_size(hashes));
        br_outbox_log(c->out, line);
        json_decref(hashes);
    }
}

void br_api_code_expire(br_coord_t *c, int64_t before_ms)
{
    br_err_t err;
    for (int out = 0; out < 2; out++) {
        json_t *refs = out ? br_store_outputs_unneeded(c->store, before_ms, 64, &err)
                           : br_store_code_unneeded(c->store, before_ms, 64, &err);
        if (!refs) {
            fprintf(stderr, "brambled: looking for %s no job needs: %s\n",
                    out ? "outputs" : "code", err.text);
            continue;
        }
        let_go(c, refs, out);
        json_decref(refs);
    }
}

void br_api_reply_chunk(br_coord_t *c, br_msg_t *m, const char *hash, int64_t offset)
{
    static unsigned char buf[BR_CONTENT_CHUNK];
    int64_t size = 0;
    br_err_t err;
    ssize_t k = br_content_read(c->content, hash, offset, buf, sizeof(buf), &size, &err);
    br_msg_t *resp = k < 0 ? NULL : br_msg_reply(m);
    if (k >= 0 && (!resp || br_msg_set_data(resp, buf, (size_t)k) < 0)) {
        br_msg_destroy(&resp);
        br_errf(&err, ENOMEM, "out of memory");
    }
    if (!resp) {
        br_reply_fail(c, m, &err);
        return;
    }
    br_msg_set_body(resp, json_pack("{s:I}", "offset", (json_int_t)offset));
    br_coord_post(c, resp);
}

static json_t *find_versions(br_coord_t *c, const br_caller_t *who, const char *full,
                             const char *tag, br_err_t *err);

/* The current job that mounts data set version id, or NULL. */
static br_job_t *data_user(br_coord_t *c, json_int_t id)
{
    for (br_job_t *j = br_jobtab_first(c->jobs); j; j = j->next) {
        if (br_job_state_ended(j->state))
            continue;
        const char *k;
        json_t *v;
        json_object_foreach(json_object_get(j->spec, "data"), k, v)
            if (json_integer_value(json_object_get(v, "id")) == id)
                return j;
    }
    return NULL;
}

/* ckpt.read with grant data:JOB (a content of one of the data sets job JOB mounts)
 * or image:JOB (of its loaded image's archive, api_image.c), read by a node that
 * runs a rank of it: kind "data" or "image". */
static void tree_read(br_coord_t *c, br_msg_t *m, const br_caller_t *who, const char *kind,
                      const char *grant, const char *path, const char *hash, int64_t offset)
{
    br_err_t err;
    long long id = 0;
    int used = 0, image = strcmp(kind, "image") == 0;
    char form[32];
    snprintf(form, sizeof(form), "%s:%%lld%%n", kind);
    br_job_t *job = sscanf(grant, form, &id, &used) == 1 && !grant[used]
                        ? br_jobtab_find(c->jobs, id) : NULL;
    json_t *trees = json_array(), *v; /* the rows whose contents it may read */
    const char *k;
    size_t i;
    if (job && image)
        json_array_extend(trees, json_object_get(json_object_get(job->spec, "image_archive"),
                                                 "variants"));
    else if (job)
        json_object_foreach(json_object_get(job->spec, "data"), k, v)
            json_array_append(trees, v);
    if (!json_array_size(trees) || !br_job_state_live(job->state) ||
        br_job_rank_on(job, who->name, 1) < 0) {
        br_errf(&err, EACCES, "grant '%.40s' is not this node's: no %s of a job it runs",
                grant, image ? "image" : "data");
        goto fail;
    }
    json_array_foreach(trees, i, v) {
        char ref[48];
        snprintf(ref, sizeof(ref), "%s:%lld", kind,
                 (long long)json_integer_value(json_object_get(v, "id")));
        int has = br_store_content_ref_has(c->store, ref, hash, &err);
        if (has < 0)
            goto fail;
        if (has) {
            json_decref(trees);
            br_api_reply_chunk(c, m, hash, offset);
            return;
        }
    }
    br_errf(&err, ENOENT, "%.200s (%.16s...) is in none of job %lld's %s", path, hash, id,
            image ? "images" : "data sets");
fail:
    json_decref(trees);
    br_reply_fail(c, m, &err);
}

int br_api_data_resolve(br_coord_t *c, const br_caller_t *who, json_t *spec_json,
                        br_err_t *err)
{
    json_t *data = json_object_get(spec_json, "data"), *named = json_object();
    const char *key;
    json_t *path;
    if (!named)
        return br_errf(err, ENOMEM, "out of memory");
    json_object_foreach(data, key, path) {
        char full[160];
        const char *colon = strchr(key, ':');
        size_t n = colon ? (size_t)(colon - key) : strlen(key);
        if (n >= sizeof(full)) {
            br_errf(err, EINVAL, "data: '%.80s': too long a name", key);
            goto fail;
        }
        memcpy(full, key, n);
        full[n] = 0;
        json_t *found = find_versions(c, who, full, colon ? colon + 1 : NULL, err);
        if (!found) {
            br_err_prefix(err, "data");
            goto fail;
        }
        /* the tag named, else the newest: fixed now, for every attempt of the job */
        json_t *d = json_array_get(found, json_array_size(found) - 1);
        json_t *listing = json_object_get(d, "listing");
        if (!d || !json_is_object(listing)) {
            if (d)
                br_errf(err, ENOENT, "data: %s: pushed before data sets could be mounted: "
                                     "push it again", key);
            else
                br_errf(err, ENOENT, "data: no data set %s that you may use (bramble data "
                                     "list shows those you may)", key);
            json_decref(found);
            goto fail;
        }
        char set[200];
        snprintf(set, sizeof(set), "%s/%s:%s", json_string_value(json_object_get(d, "owner")),
                 json_string_value(json_object_get(d, "name")),
                 json_string_value(json_object_get(d, "tag")));
        json_object_set_new(named, key,
                            json_pack("{s:O, s:s, s:O, s:O, s:O, s:O, s:O}", "path", path,
                                      "set", set, "id", json_object_get(d, "id"), "hash",
                                      json_object_get(d, "manifest"), "files",
                                      json_object_get(d, "files"), "bytes",
                                      json_object_get(d, "bytes"), "listing", listing));
        json_decref(found);
    }
    json_object_set_new(spec_json, "data", named);
    return 0;
fail:
    json_decref(named);
    return -1;
}

/* ckpt.read with grant stage:ID: a file of a tree being uploaded, read by the node it
 * is staged on (stages.h); one not stored yet is EINPROGRESS, to be asked again. */
static void stage_read(br_coord_t *c, br_msg_t *m, const br_caller_t *who, const char *grant,
                       const char *path, const char *hash, int64_t offset)
{
    long long id = 0;
    int used = 0;
    br_err_t err;
    br_stage_t *x = sscanf(grant, "stage:%lld%n", &id, &used) == 1 && !grant[used]
                        ? br_stages_find(c->stages, id) : NULL;
    if (!x || strcmp(x->node, who->name) != 0)
        br_errf(&err, EACCES, "grant '%.40s' is not this node's: no upload staged on it (it "
                              "stopped, or the node holds the tree)", grant);
    else if (!json_object_get(x->files, hash))
        br_errf(&err, ENOENT, "%.200s (%.16s...) is not in the tree staged", path, hash);
    else if (!br_content_has(c->content, hash))
        br_errf(&err, EINPROGRESS, "%.200s is not stored yet: its upload goes on", path);
    else {
        x->last_ms = br_mono_ms(); /* read from: the stage is in use */
        br_api_reply_chunk(c, m, hash, offset);
        return;
    }
    br_reply_fail(c, m, &err);
}

void br_api_content_read(br_coord_t *c, br_msg_t *m, const br_caller_t *who)
{
    const char *grant, *path, *hash;
    json_int_t offset;
    br_err_t err;
    long long id = 0;
    int used = 0;
    if (br_msg_unpack(m, &err, "{s:s, s:s, s:s, s:I}", "grant", &grant, "path", &path,
                      "hash", &hash, "offset", &offset) < 0)
        goto fail;
    if (strncmp(grant, "data:", 5) == 0) { /* the data sets of a job it runs */
        tree_read(c, m, who, "data", grant, path, hash, offset);
        return;
    }
    if (strncmp(grant, "image:", 6) == 0) { /* the loaded image of a job it runs */
        tree_read(c, m, who, "image", grant, path, hash, offset);
        return;
    }
    if (strncmp(grant, "stage:", 6) == 0) { /* code on its way to the store */
        stage_read(c, m, who, grant, path, hash, offset);
        return;
    }
    /* code:JOB: the code of a job this node is given a rank of */
    br_job_t *job = sscanf(grant, "code:%lld%n", &id, &used) == 1 && !grant[used]
                        ? br_jobtab_find(c->jobs, id) : NULL;
    json_t *code = job ? json_object_get(job->spec, "code") : NULL;
    if (!json_is_object(code) || !br_job_state_live(job->state) ||
        br_job_rank_on(job, who->name, 1) < 0) {
        br_errf(&err, EACCES, "grant '%.40s' is not this node's: no code of a job it runs",
                grant);
        goto fail;
    }
    char ref[80];
    snprintf(ref, sizeof(ref), "code:%s", json_string_value(json_object_get(code, "hash")));
    int has = strcmp(hash, json_string_value(json_object_get(json_object_get(code, "listing"),
                                                             "hash"))) == 0
                  ? 1 : br_store_content_ref_has(c->store, ref, hash, &err);
    if (has <= 0) {
        if (has == 0)
            br_errf(&err, ENOENT, "%.200s (%.16s...) is not in job %lld's code", path, hash,
                    id);
        goto fail;
    }
    br_api_reply_chunk(c, m, hash, offset);
    return;
fail:
    br_reply_fail(c, m, &err);
}

void br_api_content_read_user(br_coord_t *c, br_msg_t *m, const br_caller_t *who)
{
    const char *hash;
    json_int_t id, offset;
    br_err_t err;
    json_t *job = NULL;
    if (br_msg_unpack(m, &err, "{s:I, s:s, s:I}", "job", &id, "hash", &hash, "offset",
                      &offset) < 0)
        goto fail;
    job = br_store_job_get(c->store, id, &err);
    if (!job || !br_coord_may_see(who, job)) {
        br_errf(&err, ENOENT, "no job %lld", (long long)id);
        goto fail;
    }
    int has = br_store_output_has(c->store, id, hash, &err);
    if (has <= 0) { /* knowing a hash grants nothing */
        if (has == 0)
            br_errf(&err, ENOENT, "%.16s... is none of job %lld's outputs", hash,
                    (long long)id);
        goto fail;
    }
    json_decref(job);
    br_api_reply_chunk(c, m, hash, offset);
    return;
fail:
    json_decref(job);
    br_reply_fail(c, m, &err);
}

/* content.lack's answer for the entries of manifest full from `from` on (scan: at
 * most so many looked at, 0 all), as lacking() finds them. NULL with err. */
static json_t *lack_page(br_coord_t *c, const br_caller_t *who, const json_t *full,
                         size_t from, size_t scan, const br_contentw_look_t *look,
                         br_err_t *err)
{
    int more;
    size_t next;
    json_int_t bytes;
    json_t *lack = lacking(c, who, json_object_get(full, "entries"), from, scan, look, &more,
                           &next, &bytes, err);
    if (!lack)
        return NULL;
    json_t *out = json_pack("{s:o, s:b, s:I, s:I}", "lack", lack, "more", more, "bytes",
                            bytes, "next", (json_int_t)next);
    return out ? out : br_errp(err, ENOMEM, "out of memory");
}

/* A page of content.lack waiting for the content writer's look at the store. */
typedef struct {
    br_coord_t *c;
    br_msg_t *reply;
    br_caller_t who;
    json_t *full;
    size_t from;
} lack_wait_t;

static void lack_wait_free(lack_wait_t *p)
{
    br_msg_destroy(&p->reply);
    json_decref(p->full);
    free(p);
}

/* The look made (loop's thread): the page answered as the synchronous path would. */
static void lack_seen(br_contentw_look_t *look, void *arg)
{
    lack_wait_t *p = arg;
    br_err_t err;
    json_t *out = look->dropped ? NULL
                                : lack_page(p->c, &p->who, p->full, p->from, LACK_SCAN, look,
                                            &err);
    if (out) {
        br_msg_set_body(p->reply, out);
        br_coord_post(p->c, p->reply);
        p->reply = NULL;
    } else if (!look->dropped) {
        br_coord_post(p->c, br_msg_reply_error(p->reply, err.errnum ? err.errnum : EIO, "%s",
                                               err.text));
    }
    br_contentw_look_free(&look);
    lack_wait_free(p);
}

/* Hand the page of full from `from` on to the content writer, which looks at what
 * the store holds of its LACK_SCAN entries off the loop (two paths looked up each: a
 * page of a thousand held the loop some 10 ms); answered by lack_seen. 0 with full
 * taken, or -1 (full still the caller's): answer it here. */
static int lack_page_later(br_coord_t *c, br_msg_t *m, const br_caller_t *who, json_t *full,
                           size_t from)
{
    const json_t *entries = json_object_get(full, "entries");
    size_t total = json_array_size(entries), n = from < total ? total - from : 0;
    n = n > LACK_SCAN ? LACK_SCAN : n;
    lack_wait_t *p = calloc(1, sizeof(*p));
    br_contentw_look_t *look = p ? br_contentw_look_new(n, own_partial(who), lack_seen, p)
                                 : NULL;
    br_err_t err;
    if (!look || !(p->reply = br_msg_reply(m))) {
        br_contentw_look_free(&look);
        free(p);
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        const char *h = json_string_value(json_object_get(json_array_get(entries, from + i),
                                                          "hash"));
        snprintf(look->hash[i], sizeof(look->hash[i]), "%s", h ? h : "");
    }
    p->c = c;
    p->who = *who;
    p->full = full;
    p->from = from;
    if (br_contentw_look(c->contentw, look, &err) < 0) {
        p->full = NULL;
        br_contentw_look_free(&look);
        lack_wait_free(p);
        return -1;
    }
    return 0;
}

void br_api_content_lack(br_coord_t *c, br_msg_t *m, const br_caller_t *who)
{
    json_t *contents = NULL, *listing = NULL, *summary = NULL, *full = NULL, *out = NULL;
    json_int_t from = 0;
    int paged = 0;
    br_err_t err;
    if (br_msg_unpack(m, &err, "{s?o, s?o, s?o, s?I, s?b}", "contents", &contents, "listing",
                      &listing, "manifest", &summary, "from", &from, "paged", &paged) < 0)
        goto fail;
    if (!contents == !listing || !listing != !summary || from < 0) {
        br_errf(&err, EINVAL, "content.lack: give contents, or listing with manifest");
        goto fail;
    }
    if (contents) { /* by hash: [{"hash","size"}] */
        size_t i;
        json_t *e;
        if (!json_is_array(contents) || json_array_size(contents) > CONTENTS_MAX) {
            br_errf(&err, EINVAL, "contents: an array of at most %d", CONTENTS_MAX);
            goto fail;
        }
        json_array_foreach(contents, i, e) {
            const char *h = json_string_value(json_object_get(e, "hash"));
            if (!h || !json_is_integer(json_object_get(e, "size"))) {
                br_errf(&err, EINVAL, "contents[%zu]: {\"hash\", \"size\"}", i);
                goto fail;
            }
        }
        int more;
        size_t next;
        json_int_t bytes;
        json_t *lack = lacking(c, who, contents, 0, 0, NULL, &more, &next, &bytes, &err);
        if (!lack)
            goto fail;
        br_reply_ok(c, m, json_pack("{s:o, s:b, s:I}", "lack", lack, "more", 0, "bytes", bytes));
        return;
    }
    if (!(full = listed_manifest(c, who, listing, summary, &err)) ||
        (from == 0 && (check_user_quota(c, who, full, &err) < 0 ||
                       check_store_quota(c, who, full, &err) < 0))) /* (once a tree: each
                                                                  * chunk is charged too) */
        goto fail;
    if (paged && c->contentw && lack_page_later(c, m, who, full, (size_t)from) == 0) {
        c->handed++;
        return; /* (full is the page's now) */
    }
    out = lack_page(c, who, full, (size_t)from, paged ? LACK_SCAN : 0, NULL, &err);
    if (!out)
        goto fail;
    json_decref(full);
    br_reply_ok(c, m, out);
    return;
fail:
    if (listing && json_is_string(json_object_get(listing, "hash"))) /* not kept for it */
        let_listing_go(c, who, json_string_value(json_object_get(listing, "hash")));
    json_decref(full);
    br_reply_fail(c, m, &err);
}

void br_api_content_put(br_coord_t *c, br_msg_t *m, const br_caller_t *who)
{
    const char *hash;
    json_int_t size, offset;
    br_err_t err;
    size_t len = 0;
    const void *data = br_msg_data(m, &len);
    if (br_msg_unpack(m, &err, "{s:s, s:I, s:I}", "hash", &hash, "size", &size, "offset",
                      &offset) < 0)
        goto fail;
    if (len > BR_CONTENT_CHUNK) {
        br_errf(&err, EINVAL, "content.put: at most %d bytes at a time", BR_CONTENT_CHUNK);
        goto fail;
    }
    if (charge_upload(c, who, hash, size, &err) < 0)
        goto fail;
    /* a user's own partial, unless the content is theirs already (whole at once) */
    int64_t part = own_partial(who);
    int theirs = part ? claimable(c, who, hash, &err) : 0;
    if (theirs < 0)
        goto fail;
    if (theirs)
        part = 0;
    if (who->kind != BR_PRINCIPAL_NODE) /* an upload that a node fetches as it comes */
        br_stages_touch(c->stages, who->id, br_mono_ms());
    if (c->contentw) { /* written off the loop; answered once it is (server.c) */
        br_msg_t *reply = br_msg_reply(m);
        if (!reply) {
            br_errf(&err, ENOMEM, "out of memory");
            goto fail;
        }
        if (br_contentw_put(c->contentw, reply, hash, part, size, offset, data,
                            data ? len : 0, &err) < 0) {
            br_msg_destroy(&reply);
            goto fail;
        }
        c->handed++;
        return;
    }
    int64_t held = 0;
    int whole = 0;
    if (br_content_write(c->content, hash, part, size, offset, data ? data : "",
                         data ? len : 0,
                         &held, &whole, &err) < 0)
        goto fail;
    br_reply_ok(c, m, json_pack("{s:I, s:b}", "held", (json_int_t)held, "whole", whole));
    return;
fail:
    br_reply_fail(c, m, &err);
}

/* Split "OWNER/NAME" (or a bare NAME: the caller's) into *owner (NULL when bare) and
 * name; both checked. */
static int split_name(const char *full, char *owner, size_t olen, const char **name,
                      br_err_t *err)
{
    const char *slash = strchr(full, '/');
    owner[0] = 0;
    *name = full;
    if (slash) {
        size_t n = (size_t)(slash - full);
        if (n == 0 || n >= olen)
            return br_errf(err, EINVAL, "'%.80s': OWNER/NAME with a user's name", full);
        memcpy(owner, full, n);
        owner[n] = 0;
        *name = slash + 1;
    }
    return word_ok(*name, "name", err);
}

/* Whether who may use data set row d: its owner, the admin, a user it is shared
 * with, anyone when it is public. */
static int may_use(const br_caller_t *who, const json_t *d)
{
    if (who->kind == BR_PRINCIPAL_ADMIN ||
        json_integer_value(json_object_get(d, "owner_id")) == who->id ||
        json_is_true(json_object_get(d, "public")))
        return 1;
    size_t i;
    json_t *s;
    json_array_foreach(json_object_get(d, "shares"), i, s)
        if (json_integer_value(json_object_get(s, "id")) == who->id)
            return 1;
    return 0;
}

/* The versions of a data set the caller names ("NAME" theirs, "OWNER/NAME" another's
 * they may use), tag NULL: all; a new array (empty: none), or NULL with err. */
static json_t *find_versions(br_coord_t *c, const br_caller_t *who, const char *full,
                             const char *tag, br_err_t *err)
{
    char owner[64];
    const char *name;
    if (split_name(full, owner, sizeof(owner), &name, err) < 0 ||
        (tag && word_ok(tag, "tag", err) < 0))
        return NULL;
    json_t *all = br_store_data_list(c->store, err), *out = json_array();
    if (!all || !out) {
        json_decref(all);
        json_decref(out);
        return all ? br_errp(err, ENOMEM, "out of memory") : NULL;
    }
    size_t i;
    json_t *d;
    json_array_foreach(all, i, d) {
        int mine = owner[0] ? strcmp(json_string_value(json_object_get(d, "owner")), owner) == 0
                            : json_integer_value(json_object_get(d, "owner_id")) == who->id;
        if (mine && strcmp(json_string_value(json_object_get(d, "name")), name) == 0 &&
            (!tag || strcmp(json_string_value(json_object_get(d, "tag")), tag) == 0) &&
            may_use(who, d))
            json_array_append(out, d);
    }
    json_decref(all);
    return out;
}

/* The users named to share with: [{"id","name"}], each a live user. */
static json_t *share_list(br_coord_t *c, const json_t *names, br_err_t *err)
{
    json_t *out = json_array();
    size_t i;
    json_t *v;
    if (names && !json_is_array(names)) {
        json_decref(out);
        return br_errp(err, EINVAL, "shares: an array of user names");
    }
    json_array_foreach(names, i, v) {
        int64_t id = 0;
        const char *n = json_string_value(v);
        if (!n || br_store_principal_id(c->store, BR_PRINCIPAL_USER, n, &id, err) < 0 || !id) {
            if (!n || !id)
                br_errf(err, ENOENT, "--share %s: no such user", n ? n : "(not a name)");
            json_decref(out);
            return NULL;
        }
        json_array_append_new(out, json_pack("{s:I, s:s}", "id", (json_int_t)id, "name", n));
    }
    return out;
}

/* The summary of a row the caller sees: shares by name, ids left out. */
static json_t *row_out(const json_t *d)
{
    json_t *o = json_deep_copy(d), *names = json_array();
    size_t i;
    json_t *s;
    json_array_foreach(json_object_get(d, "shares"), i, s)
        json_array_append(names, json_object_get(s, "name"));
    json_object_set_new(o, "shares", names);
    json_object_del(o, "owner_id");
    json_object_del(o, "listing");
    json_object_set_new(o, "created", br_time_json(json_object_get(d, "created")));
    return o;
}

void br_api_data_push(br_coord_t *c, br_msg_t *m, const br_caller_t *who)
{
    const char *name, *tag = NULL;
    json_t *listing = NULL, *summary, *names = NULL, *full = NULL, *shares = NULL, *row = NULL;
    int public_ = 0;
    br_err_t err;
    if (br_msg_unpack(m, &err, "{s:s, s?s, s:o, s:o, s?b, s?o}", "name", &name, "tag", &tag,
                      "listing", &listing, "manifest", &summary, "public", &public_,
                      "shares", &names) < 0)
        goto fail;
    if (word_ok(name, "name", &err) < 0 || (tag && word_ok(tag, "tag", &err) < 0))
        goto fail;
    if (tag && tag[0] == 'v' && tag[1] && strspn(tag + 1, "0123456789") == strlen(tag + 1)) {
        br_errf(&err, EINVAL, "tag '%s': tags v1, v2... are the versions' own", tag);
        goto fail;
    }
    if (!(shares = share_list(c, names, &err)) ||
        !(full = br_api_uploaded_tree(c, who, who, listing, summary, &err)))
        goto fail;
    if (br_content_put_manifest(c->content, full, &err) < 0 ||
        !(row = br_store_data_add(c->store, who->id, name, tag, full, listing, public_,
                                  shares, &err)))
        goto fail;
    br_api_settle_tree(c, who, full, listing);
    json_object_set_new(row, "owner", json_string(who->name));
    char sz[32];
    br_coord_event(c, 0, NULL, "data", "data set %s/%s:%s pushed: %lld files, %s", who->name,
                   name, json_string_value(json_object_get(row, "tag")),
                   (long long)json_integer_value(json_object_get(row, "files")),
                   br_format_size((uint64_t)json_integer_value(json_object_get(row, "bytes")),
                                  sz, sizeof(sz)));
    br_reply_ok(c, m, row_out(row));
    json_decref(row);
    json_decref(full);
    json_decref(shares);
    return;
fail:
    if (listing) /* a refused push leaves no listing behind (a retry sends it again) */
        let_listing_go(c, who, json_string_value(json_object_get(listing, "hash")));
    json_decref(full);
    json_decref(shares);
    br_reply_fail(c, m, &err);
}

void br_api_data_list(br_coord_t *c, br_msg_t *m, const br_caller_t *who)
{
    br_err_t err;
    json_t *all = NULL, *out = json_array();
    if (br_msg_unpack(m, &err, "{}") < 0 || !(all = br_store_data_list(c->store, &err))) {
        json_decref(out);
        br_reply_fail(c, m, &err);
        return;
    }
    size_t i;
    json_t *d;
    json_array_foreach(all, i, d)
        if (may_use(who, d))
            json_array_append_new(out, row_out(d));
    json_decref(all);
    br_reply_ok(c, m, json_pack("{s:o}", "data", out));
}

void br_api_data_show(br_coord_t *c, br_msg_t *m, const br_caller_t *who)
{
    const char *name, *tag = NULL;
    br_err_t err;
    json_t *found = NULL, *mf = NULL;
    if (br_msg_unpack(m, &err, "{s:s, s?s}", "name", &name, "tag", &tag) < 0 ||
        (tag && word_ok(tag, "tag", &err) < 0) ||
        !(found = find_versions(c, who, name, NULL, &err)))
        goto fail;
    json_t *d = NULL, *v;
    size_t i;
    json_array_foreach(found, i, v) /* the tagged one, else the newest */
        if (!tag || strcmp(json_string_value(json_object_get(v, "tag")), tag) == 0)
            d = v;
    if (!d) {
        br_errf(&err, ENOENT, "no data set %s%s%s", name, tag ? ":" : "", tag ? tag : "");
        goto fail;
    }
    if (!(mf = br_content_get_manifest(c->content,
                                       json_string_value(json_object_get(d, "manifest")), &err)))
        goto fail;
    json_t *out = row_out(d), *tags = json_array(), *biggest = json_array();
    json_array_foreach(found, i, v)
        json_array_append(tags, json_object_get(v, "tag"));
    const json_t *top[SHOW_LARGEST]; /* the largest files, largest first */
    size_t k = largest(mf, SHOW_LARGEST, top);
    for (i = 0; i < k; i++)
        json_array_append_new(biggest, json_pack("{s:O, s:O}", "path",
                                                 json_object_get(top[i], "path"), "size",
                                                 json_object_get(top[i], "size")));
    json_object_set_new(out, "versions", tags);
    json_object_set_new(out, "largest", biggest);
    json_decref(mf);
    json_decref(found);
    br_reply_ok(c, m, out);
    return;
fail:
    json_decref(found);
    br_reply_fail(c, m, &err);
}

void br_api_data_rm(br_coord_t *c, br_msg_t *m, const br_caller_t *who)
{
    const char *name, *tag = NULL;
    br_err_t err;
    json_t *found = NULL, *removed = json_array();
    if (br_msg_unpack(m, &err, "{s:s, s?s}", "name", &name, "tag", &tag) < 0 ||
        !(found = find_versions(c, who, name, tag, &err)))
        goto fail;
    if (!json_array_size(found)) {
        br_errf(&err, ENOENT, "no data set %s%s%s", name, tag ? ":" : "", tag ? tag : "");
        goto fail;
    }
    size_t i;
    json_t *d;
    json_array_foreach(found, i, d) { /* the owner's or the admin's to remove */
        if (who->kind != BR_PRINCIPAL_ADMIN &&
            json_integer_value(json_object_get(d, "owner_id")) != who->id) {
            br_errf(&err, EACCES, "not allowed: %s/%s is %s's, shared with you to use",
                    json_string_value(json_object_get(d, "owner")), json_string_value(
                        json_object_get(d, "name")),
                    json_string_value(json_object_get(d, "owner")));
            goto fail;
        }
    }
    json_array_foreach(found, i, d) { /* a job that will still mount it keeps it */
        br_job_t *user = data_user(c, json_integer_value(json_object_get(d, "id")));
        if (user) {
            br_errf(&err, EBUSY, "%s/%s:%s is used by job %lld (%s, %s): cancel it or let "
                                 "it end first",
                    json_string_value(json_object_get(d, "owner")),
                    json_string_value(json_object_get(d, "name")),
                    json_string_value(json_object_get(d, "tag")), (long long)user->id,
                    user->name, br_job_state_name(user->state));
            goto fail;
        }
    }
    json_array_foreach(found, i, d) {
        json_t *hashes = NULL;
        if (br_store_data_remove(c->store, json_integer_value(json_object_get(d, "id")),
                                 &hashes, &err) < 0)
            goto fail;
        size_t k;
        json_t *h;
        json_array_foreach(hashes, k, h)
            br_content_doubt(c->content, json_string_value(h), 0);
        json_decref(hashes);
        br_content_doubt(c->content, json_string_value(json_object_get(d, "manifest")), 1);
        json_array_append(removed, json_object_get(d, "tag"));
        br_coord_event(c, 0, NULL, "data", "data set %s/%s:%s removed by %s",
                       json_string_value(json_object_get(d, "owner")),
                       json_string_value(json_object_get(d, "name")),
                       json_string_value(json_object_get(d, "tag")), who->name);
    }
    json_decref(found);
    br_reply_ok(c, m, json_pack("{s:s, s:o}", "name", name, "removed", removed));
    return;
fail:
    json_decref(found);
    json_decref(removed);
    br_reply_fail(c, m, &err);
}
