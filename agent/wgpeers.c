/* wgpeers.c - this node's overlay peers: endpoints tried in turn, routes through
 * relays (wgpeers.h). */
#include "wgpeers.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "quietrun.h"
#include "util.h"
#include "wgkey.h"

#define STEP_MS 5000 /* one `wg` command */

typedef struct {
    char key[BR_WGKEY_B64];
    char node[64];
    char addr[48];
    char via[BR_WGKEY_B64]; /* the relay its traffic goes through, "" direct */
    char eps[BR_WGPEERS_ENDPOINTS][64];
    int neps;
    int cur;        /* the endpoint being tried (or reached) */
    int64_t tried;  /* when it was set */
    int passes;     /* times every endpoint was tried without a handshake */
    int reach;      /* 1 reached, 0 being tried, -1 none of its endpoints answered */
    int fresh;      /* new, or its endpoints changed: set with its first endpoint */
    char at[64];    /* where WireGuard reached it (`wg show ... endpoints`), "" */
    char *allowed;  /* its allowed IPs as last set (NULL: not yet) */
} peer_t;

struct br_wgpeers {
    char ifname[32];
    peer_t *peers;
    size_t n;
    int64_t looked; /* when the handshakes were last looked at (0: never) */
    int adopting;   /* the interface was taken over with its peers (br_wgpeers_adopt) */
    json_t *listed; /* node -> its entry, as the coordinator last listed them */
};

br_wgpeers_t *br_wgpeers_new(const char *ifname)
{
    br_wgpeers_t *p = calloc(1, sizeof(*p));
    if (p && !(p->listed = json_object())) {
        free(p);
        return NULL;
    }
    if (p)
        br_strlcpy(p->ifname, ifname, sizeof(p->ifname));
    return p;
}

static void free_peers(peer_t *peers, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(peers[i].allowed);
    free(peers);
}

void br_wgpeers_destroy(br_wgpeers_t **p)
{
    if (p && *p) {
        free_peers((*p)->peers, (*p)->n);
        json_decref((*p)->listed);
        free(*p);
        *p = NULL;
    }
}

void br_wgpeers_forget(br_wgpeers_t *p)
{
    json_object_clear(p->listed);
    free_peers(p->peers, p->n);
    p->peers = NULL;
    p->n = 0;
    p->looked = 0;
}

void br_wgpeers_adopt(br_wgpeers_t *p)
{
    br_wgpeers_forget(p);
    p->adopting = 1;
}

/* `wg show IF what` (a line per peer, for peers of them) into a new string; NULL
 * when it failed (err says why). */
static char *wg_show(const br_wgpeers_t *p, const char *what, size_t peers, br_err_t *err)
{
    size_t len = peers * 120 + 256;
    char *out = malloc(len);
    if (!out) {
        br_errf(err, ENOMEM, "overlay: out of memory");
        return NULL;
    }
    char *argv[] = {"wg", "show", (char *)p->ifname, (char *)what, NULL};
    if (br_quietrun(argv, STEP_MS, out, len) != 0) {
        br_errf(err, EIO, "overlay: `wg show %s %s` failed: %.200s", p->ifname, what, out);
        free(out);
        return NULL;
    }
    return out;
}

/* Whether text (`wg show ... latest-handshakes`) says a handshake with key within BR_WGPEERS_FRESH_S. */
static int fresh_handshake(const char *text, const char *key, time_t wall)
{
    const char *at = text ? strstr(text, key) : NULL;
    long long when = at ? strtoll(at + strlen(key), NULL, 10) : 0;
    return when > 0 && wall - (time_t)when < BR_WGPEERS_FRESH_S;
}

size_t br_wgpeers_count(const br_wgpeers_t *p)
{
    return p->n;
}

static peer_t *find(peer_t *peers, size_t n, const char *key)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(peers[i].key, key) == 0)
            return &peers[i];
    return NULL;
}

/* Whether text is "A.B.C.D:PORT" or "[V6]:PORT". */
static int endpoint_ok(const char *text)
{
    char host[64];
    unsigned char buf[16];
    const char *colon = strrchr(text, ':');
    if (!colon || strlen(text) >= 64 || colon == text)
        return 0;
    char *end;
    long port = strtol(colon + 1, &end, 10);
    if (*end || end == colon + 1 || port <= 0 || port > 65535)
        return 0;
    size_t len = (size_t)(colon - text);
    if (text[0] == '[') {
        if (len < 3 || text[len - 1] != ']')
            return 0;
        memcpy(host, text + 1, len - 2);
        host[len - 2] = '\0';
        return inet_pton(AF_INET6, host, buf) == 1;
    }
    memcpy(host, text, len);
    host[len] = '\0';
    return inet_pton(AF_INET, host, buf) == 1;
}

/* One listed peer into q; 0, or -1 with err saying why it is refused. */
static int take(peer_t *q, const json_t *v, br_err_t *err)
{
    const char *key = json_string_value(json_object_get(v, "pubkey"));
    const char *addr = json_string_value(json_object_get(v, "address"));
    const char *node = json_string_value(json_object_get(v, "node"));
    const char *via = json_string_value(json_object_get(v, "via"));
    struct in_addr in;
    node = node ? node : "?";
    if (!br_wgkey_ok(key))
        return br_errf(err, EINVAL, "overlay: peer %.60s: its key is not a WireGuard key",
                       node);
    if (!addr || inet_pton(AF_INET, addr, &in) != 1)
        return br_errf(err, EINVAL, "overlay: peer %.60s: its address '%.60s' is not an "
                                    "IPv4 address", node, addr ? addr : "");
    if (via && !br_wgkey_ok(via))
        return br_errf(err, EINVAL, "overlay: peer %.60s: its relay's key is not a "
                                    "WireGuard key", node);
    memset(q, 0, sizeof(*q));
    br_strlcpy(q->key, key, sizeof(q->key));
    br_strlcpy(q->addr, addr, sizeof(q->addr));
    br_strlcpy(q->node, node, sizeof(q->node));
    br_strlcpy(q->via, via ? via : "", sizeof(q->via));
    json_t *eps = json_object_get(v, "endpoints"), *e;
    size_t i;
    if (!eps && json_is_string(json_object_get(v, "endpoint")))
        eps = json_pack("[O]", json_object_get(v, "endpoint"));
    else
        json_incref(eps);
    json_array_foreach(eps, i, e) {
        const char *text = json_string_value(e);
        if (!text || !endpoint_ok(text)) {
            br_errf(err, EINVAL, "overlay: peer %.60s: endpoint '%.60s' is not HOST:PORT "
                                 "with an IP address", node, text ? text : "(not a string)");
            json_decref(eps);
            return -1;
        }
        if (q->neps < BR_WGPEERS_ENDPOINTS)
            br_strlcpy(q->eps[q->neps++], text, sizeof(q->eps[0]));
    }
    json_decref(eps);
    return 0;
}

static int same_endpoints(const peer_t *a, const peer_t *b)
{
    if (a->neps != b->neps)
        return 0;
    for (int i = 0; i < a->neps; i++)
        if (strcmp(a->eps[i], b->eps[i]) != 0)
            return 0;
    return 1;
}

/* argv grown by one word (a NULL after it). */
typedef struct {
    char **v;
    size_t n, cap;
} words_t;

static int word(words_t *w, const char *s)
{
    if (w->n + 2 > w->cap) {
        size_t cap = w->cap ? w->cap * 2 : 64;
        char **v = realloc(w->v, cap * sizeof(char *));
        if (!v)
            return -1;
        w->v = v;
        w->cap = cap;
    }
    w->v[w->n++] = (char *)s;
    w->v[w->n] = NULL;
    return 0;
}

/* Run `wg set IF ...` with words w (when there are any past the first three). */
static int run_set(br_wgpeers_t *p, words_t *w, br_err_t *err)
{
    if (w->n <= 3)
        return 0;
    char said[400];
    int rc = br_quietrun(w->v, STEP_MS, said, sizeof(said));
    if (rc != 0)
        return br_errf(err, EIO, "overlay: `wg set %s ...` (%zu peers) failed: %s",
                       p->ifname, p->n, said[0] ? said : "no output");
    return 0;
}

/* The allowed IPs peer q should have: its own address unless it goes through a
 * listed relay, and those of the peers that go through it. A new string. */
static char *allowed_of(const br_wgpeers_t *p, const peer_t *q)
{
    size_t len = 64, at = 0;
    for (size_t i = 0; i < p->n; i++)
        if (strcmp(p->peers[i].via, q->key) == 0)
            len += strlen(p->peers[i].addr) + 4;
    char *out = malloc(len);
    if (!out)
        return NULL;
    out[0] = '\0';
    if (!q->via[0] || !find(p->peers, p->n, q->via) || strcmp(q->via, q->key) == 0)
        at += (size_t)snprintf(out, len, "%s/32", q->addr);
    for (size_t i = 0; i < p->n; i++) {
        const peer_t *r = &p->peers[i];
        if (r != q && strcmp(r->via, q->key) == 0)
            at += (size_t)snprintf(out + at, len - at, "%s%s/32", at ? "," : "", r->addr);
    }
    return out;
}

/* Set what changed: fresh peers with their endpoint (kept alive every 25 s,
 * turned on anew, so that WireGuard sends at once), and allowed IPs that moved. */
static int apply(br_wgpeers_t *p, int64_t now, br_err_t *err)
{
    words_t w = {0};
    char **keep = calloc(p->n + 1, sizeof(char *)); /* the new allowed texts */
    int rc = -1, ran = 0;
    if (!keep || word(&w, "wg") < 0 || word(&w, "set") < 0 || word(&w, p->ifname) < 0)
        goto done;
    for (size_t i = 0; i < p->n; i++) {
        peer_t *q = &p->peers[i];
        if (!(keep[i] = allowed_of(p, q)))
            goto done;
        int moved = !q->allowed || strcmp(q->allowed, keep[i]) != 0;
        if (!q->fresh && !moved)
            continue;
        if (q->fresh && (word(&w, "peer") < 0 || word(&w, q->key) < 0 ||
                         word(&w, "persistent-keepalive") < 0 || word(&w, "0") < 0))
            goto done;
        if (word(&w, "peer") < 0 || word(&w, q->key) < 0 || word(&w, "allowed-ips") < 0 ||
            word(&w, keep[i]) < 0)
            goto done;
        if (q->fresh && (word(&w, "persistent-keepalive") < 0 || word(&w, "25") < 0 ||
                         (q->neps && (word(&w, "endpoint") < 0 ||
                                      word(&w, q->eps[q->cur]) < 0))))
            goto done;
    }
    rc = run_set(p, &w, err);
    ran = 1;
    for (size_t i = 0; i < p->n; i++) {
        peer_t *q = &p->peers[i];
        if (rc == 0 && q->fresh) {
            q->fresh = 0;
            q->tried = now;
        }
        if (rc == 0) {
            free(q->allowed);
            q->allowed = keep[i];
            keep[i] = NULL;
        }
    }
done:
    if (rc < 0 && !ran)
        br_errf(err, ENOMEM, "overlay: out of memory");
    for (size_t i = 0; keep && i < p->n; i++)
        free(keep[i]);
    free(keep);
    free(w.v);
    return rc;
}

int br_wgpeers_set(br_wgpeers_t *p, const json_t *list, int64_t now, br_err_t *err)
{
    size_t i, nn = 0;
    json_t *v;
    int rc = 0;
    peer_t *next = calloc(json_array_size(list) + 1, sizeof(peer_t));
    if (!next)
        return br_errf(err, ENOMEM, "overlay: out of memory");
    br_err_t herr;
    char *had = p->adopting ? wg_show(p, "latest-handshakes", json_array_size(list), &herr) : NULL;
    time_t wall = time(NULL);
    p->adopting = 0;
    json_object_clear(p->listed);
    json_array_foreach(list, i, v) {
        const char *node = json_string_value(json_object_get(v, "node"));
        if (node) /* (what br_wgpeers_update changes) */
            json_object_set(p->listed, node, v);
        peer_t *q = &next[nn];
        br_err_t bad;
        if (take(q, v, &bad) < 0) { /* refused alone: the others are set */
            if (rc == 0)
                *err = bad;
            rc = -1;
            continue;
        }
        if (find(next, nn, q->key))
            continue; /* (listed twice: the first counts) */
        peer_t *old = find(p->peers, p->n, q->key);
        int kept = old && (same_endpoints(old, q) ||
                           (old->reach == 1 && !old->fresh && old->neps && q->neps &&
                            strcmp(old->eps[0], q->eps[0]) == 0));
        if (kept) { /* as it was, or reached and where it is first found is the same:
                     * where WireGuard reaches it is kept (the new list for later) */
            q->cur = old->cur < q->neps ? old->cur : 0;
            q->tried = old->tried;
            q->passes = old->passes;
            q->reach = old->reach;
            q->fresh = old->fresh;
            q->allowed = old->allowed;
            old->allowed = NULL;
        } else if (old) { /* it moved: tried anew from its first endpoint */
            q->allowed = old->allowed;
            old->allowed = NULL;
            q->fresh = 1;
        } else if (fresh_handshake(had, q->key, wall)) {
            q->reach = 1; /* (taken over, talking: where it is reached is left alone) */
            q->tried = now;
        } else {
            q->fresh = 1;
        }
        nn++;
    }
    free(had);
    words_t w = {0};
    int wrc = word(&w, "wg") | word(&w, "set") | word(&w, p->ifname);
    for (i = 0; i < p->n && wrc == 0; i++) /* gone: removed */
        if (!find(next, nn, p->peers[i].key))
            wrc = word(&w, "peer") | word(&w, p->peers[i].key) | word(&w, "remove");
    if (wrc < 0)
        rc = br_errf(err, ENOMEM, "overlay: out of memory");
    else if (run_set(p, &w, rc == 0 ? err : &(br_err_t){0}) < 0)
        rc = -1;
    free(w.v);
    free_peers(p->peers, p->n);
    p->peers = next;
    p->n = nn;
    br_err_t aerr;
    if (apply(p, now, &aerr) < 0) {
        if (rc == 0)
            *err = aerr;
        rc = -1;
    }
    return rc;
}

int br_wgpeers_update(br_wgpeers_t *p, const json_t *delta, int64_t now, br_err_t *err)
{
    json_t *all = json_copy(p->listed), *v;
    size_t i;
    if (!all)
        return br_errf(err, ENOMEM, "overlay: out of memory");
    json_array_foreach(json_object_get(delta, "gone"), i, v) {
        if (json_is_string(v))
            json_object_del(all, json_string_value(v));
    }
    json_array_foreach(json_object_get(delta, "set"), i, v) {
        const char *node = json_string_value(json_object_get(v, "node"));
        if (node)
            json_object_set(all, node, v);
    }
    json_t *list = json_array();
    const char *name;
    json_object_foreach(all, name, v) {
        json_array_append(list, v);
    }
    int rc = br_wgpeers_set(p, list, now, err);
    json_decref(list);
    json_decref(all);
    return rc;
}

/* Peer q's next endpoint, sent to at once. */
static int next_endpoint(br_wgpeers_t *p, peer_t *q, br_err_t *err)
{
    q->cur = q->neps ? (q->cur + 1) % q->neps : 0;
    char *argv[] = {"wg", "set", p->ifname, "peer", q->key, "persistent-keepalive", "0",
                    "peer", q->key, "persistent-keepalive", "25",
                    q->neps ? "endpoint" : NULL, q->neps ? q->eps[q->cur] : NULL, NULL};
    words_t w = {argv, 13, 0};
    return run_set(p, &w, err);
}

/* Where WireGuard reaches each reached peer now (the address and port its packets
 * come from: a router's mapping, for a peer behind NAT), into its "at". */
static void where_reached(br_wgpeers_t *p)
{
    br_err_t err;
    char *out = wg_show(p, "endpoints", p->n, &err);
    if (!out)
        return; /* (where it reached them is said at the next change) */
    for (size_t i = 0; i < p->n; i++) {
        peer_t *q = &p->peers[i];
        const char *at = q->reach == 1 ? strstr(out, q->key) : NULL;
        char ep[64] = "";
        if (at && sscanf(at + strlen(q->key), "%63s", ep) == 1 && endpoint_ok(ep))
            br_strlcpy(q->at, ep, sizeof(q->at));
        else
            q->at[0] = '\0';
    }
    free(out);
}

int br_wgpeers_tick(br_wgpeers_t *p, int64_t now, br_err_t *err)
{
    int trying = 0, changed = 0, rc = 0;
    if (!p->n || (p->looked && now - p->looked < 1000))
        return 0; /* (the agent's loop calls it at every turn) */
    for (size_t i = 0; i < p->n; i++) /* (one given up on is tried every 30 s: no hurry) */
        trying |= p->peers[i].reach == 0 || p->peers[i].fresh;
    if (p->looked && !trying && now - p->looked < 10000)
        return 0;
    p->looked = now;
    for (size_t i = 0; i < p->n; i++)
        if (p->peers[i].fresh) { /* (a `wg set` that failed: once more) */
            if (apply(p, now, err) < 0)
                return -1;
            break;
        }
    char *out = wg_show(p, "latest-handshakes", p->n, err);
    if (!out)
        return -1;
    time_t wall = time(NULL);
    for (size_t i = 0; i < p->n; i++) {
        peer_t *q = &p->peers[i];
        if (q->fresh)
            continue; /* (not set yet) */
        if (fresh_handshake(out, q->key, wall)) {
            if (q->reach != 1)
                changed = 1;
            q->reach = 1;
            q->passes = 0;
            continue;
        }
        if (q->reach == 1) { /* lost: tried again from where it was */
            q->reach = 0;
            q->tried = now;
            changed = 1;
            continue;
        }
        if (now - q->tried < (q->passes ? BR_WGPEERS_RETRY_MS : BR_WGPEERS_TRY_MS))
            continue;
        q->tried = now;
        if (q->cur + 1 >= q->neps) { /* every endpoint tried once more */
            q->passes++;
            if (q->reach == 0)
                changed = 1;
            q->reach = -1;
        }
        if (next_endpoint(p, q, err) < 0)
            rc = -1;
    }
    free(out);
    if (changed && rc == 0)
        where_reached(p);
    return rc < 0 ? -1 : changed;
}

json_t *br_wgpeers_reach(const br_wgpeers_t *p)
{
    json_t *yes = json_array(), *no = json_array(), *at = json_object();
    for (size_t i = 0; i < p->n; i++) {
        if (p->peers[i].reach == 1)
            json_array_append_new(yes, json_string(p->peers[i].node));
        else if (p->peers[i].reach < 0)
            json_array_append_new(no, json_string(p->peers[i].node));
        if (p->peers[i].reach == 1 && p->peers[i].at[0])
            json_object_set_new(at, p->peers[i].node, json_string(p->peers[i].at));
    }
    return json_pack("{s:o, s:o, s:o}", "reached", yes, "unreached", no, "at", at);
}
