/* replicas.c - the coordinator's side of checkpoint replicas (replicas.h). */
#include "replicas.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "util.h"

void br_replicas_hello(br_node_t *n, int port)
{
    if (port > 0 && port <= 65535)
        json_object_set_new(n->info, "replica_port", json_integer(port));
    else
        json_object_del(n->info, "replica_port");
}

#define BAD_DISK "node.heartbeat: bad body: 'disk'"

int br_replicas_check_disk(json_t *disk, br_err_t *err)
{
    json_t *rep = NULL, *ck = NULL, *e;
    json_int_t quota = 0, used = 0, free_ = 0;
    json_error_t je;
    size_t i;
    if (json_unpack_ex(disk, &je, JSON_STRICT, "{s?o, s?o}", "replicas", &rep,
                       "checkpoints", &ck) < 0)
        return br_errf(err, EPROTO, BAD_DISK ": %s", je.text);
    if (rep && (json_unpack_ex(rep, &je, JSON_STRICT, "{s:I, s:I, s?I}", "quota",
                               &quota, "used", &used, "free", &free_) < 0 ||
                quota < -1 || used < 0 || free_ < 0))
        return br_errf(err, EPROTO,
                       BAD_DISK ": replicas: quota, used and free are sizes");
    if (ck && (!json_is_array(ck) || json_array_size(ck) > 64))
        return br_errf(err, EPROTO, BAD_DISK ": checkpoints: at most 64 of them");
    json_array_foreach (ck, i, e) {
        const char *dir;
        if (json_unpack_ex(e, &je, JSON_STRICT, "{s:s, s:I}", "dir", &dir, "free",
                           &free_) < 0 ||
            dir[0] != '/' || free_ < 0 || strlen(dir) > 4096)
            return br_errf(err, EPROTO, BAD_DISK ": checkpoints: {\"dir\", \"free\"}");
    }
    return 0;
}

static int64_t room(const br_replica_cand_t *c)
{
    int64_t r = c->quota < 0 ? INT64_MAX : c->quota - c->used;
    return c->free >= 0 && c->free < r ? c->free : r;
}

/* Better first: bandwidth, round trip, room, name. */
static int better(const br_replica_cand_t *a, const br_replica_cand_t *b)
{
    if (a->mbps != b->mbps)
        return a->mbps > b->mbps;
    int ar = a->rtt_ms >= 0, br = b->rtt_ms >= 0;
    if (ar != br)
        return ar;
    if (ar && a->rtt_ms != b->rtt_ms)
        return a->rtt_ms < b->rtt_ms;
    if (room(a) != room(b))
        return room(a) > room(b);
    return strcmp(a->node, b->node) < 0;
}

int br_replicas_pick(const br_replica_cand_t *c, int nc, const char *writer,
                     int64_t bytes, int n, int *out)
{
    int k = 0;
    for (int i = 0; i < nc && n > 0; i++) {
        if (!c[i].ready || !c[i].port || c[i].quota == 0 ||
            (writer && strcmp(c[i].node, writer) == 0) || room(&c[i]) < bytes)
            continue;
        /* insertion into the best n so far */
        int at = k;
        while (at > 0 && better(&c[i], &c[out[at - 1]]))
            at--;
        if (at >= n)
            continue;
        int last = k < n ? k : n - 1;
        for (int j = last; j > at; j--)
            out[j] = out[j - 1];
        out[at] = i;
        if (k < n)
            k++;
    }
    return k;
}

void br_replicas_grant_id(int64_t job, const char *hash, const char *target, char *buf,
                          size_t len)
{
    snprintf(buf, len, "%lld.%.16s.%s", (long long)job, hash ? hash : "", target);
}

static void add_owner(json_t *o, const br_replica_ckpt_t *k)
{
    if (k->dir)
        json_object_set_new(o, "dir", json_string(k->dir));
    if (k->owner_id > 0)
        json_object_set_new(o, "owner_id", json_integer(k->owner_id));
    if (k->unix_user)
        json_object_set_new(o, "unix_user", json_string(k->unix_user));
}

json_t *br_replicas_serve_order(const br_replica_ckpt_t *k, const char *grant,
                                const char *peer, const char *peer_key, int64_t ttl_ms,
                                int from_store)
{
    json_t *o = json_pack("{s:s, s:I, s:s, s:s, s:I, s:O, s:s}", "grant", grant, "job",
                          (json_int_t)k->job, "peer", peer, "peer_key", peer_key, "ttl",
                          (json_int_t)ttl_ms, "manifest", k->manifest, "path", k->path);
    if (o && from_store)
        json_object_set_new(o, "replica", json_true());
    else if (o)
        add_owner(o, k);
    return o;
}

json_t *br_replicas_fetch_order(const br_replica_ckpt_t *k, const char *grant,
                                const char *holder, const char *addr, int port,
                                const char *key, int restore)
{
    json_t *o = json_pack("{s:I, s:I, s:s, s:{s:s, s:s, s:i, s:s}, s:O, s:s}", "job",
                          (json_int_t)k->job, "step", (json_int_t)k->step, "grant",
                          grant, "from", "node", holder, "addr", addr, "port", port,
                          "key", key, "manifest", k->manifest, "path", k->path);
    if (o && restore) {
        json_object_set_new(o, "restore", json_true());
        add_owner(o, k);
    }
    return o;
}

/* ckpt.stored: a node says how a pull it was ordered went. Recorded as an event of
 * the job; job life does not act on it yet. */
void br_api_ckpt_stored(br_coord_t *c, br_msg_t *m, const br_caller_t *who)
{
    json_int_t job, step = -1, received = 0, deduped = 0;
    const char *hash, *path, *error = NULL;
    int restore = 0, errnum = 0;
    br_err_t err = {0};
    if (br_msg_unpack(m, &err, "{s:I, s?I, s:s, s:s, s?b, s?I, s?I, s?i, s?s}", "job",
                      &job, "step", &step, "hash", &hash, "path", &path, "restore",
                      &restore, "received", &received, "deduped", &deduped, "errnum",
                      &errnum, "error", &error) < 0) {
        br_api_fail(c, m, &err);
        return;
    }
    json_t *j = br_store_job_get(c->store, job, &err);
    if (!j) {
        br_api_fail(c, m, &err);
        return;
    }
    const char *state = json_string_value(json_object_get(j, "state"));
    char sent[32], same[32];
    if (error)
        br_coord_event(c, job, who->name, state ? state : "-",
                       "%s of checkpoint %s (step %lld) failed on %s: %s",
                       restore ? "restore" : "replica", path, (long long)step,
                       who->name, error);
    else
        br_coord_event(c, job, who->name, state ? state : "-",
                       "checkpoint %s (step %lld, %.16s) %s on %s: %s sent, %s already "
                       "there",
                       path, (long long)step, hash, restore ? "restored" : "replicated",
                       who->name,
                       br_format_size((uint64_t)received, sent, sizeof(sent)),
                       br_format_size((uint64_t)deduped, same, sizeof(same)));
    json_decref(j);
    br_api_ok(c, m, json_object());
}
