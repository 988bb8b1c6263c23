/* netmap.c - round-trip times between nodes, and gang placement by them. */
#include "netmap.h"

#include "probeset.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LOST_MS 1e6 /* a pair that does not answer counts as this far apart */

struct br_netmap {
    json_t *reports; /* {"node": {"coordinator": ms, "peers": {"name": ms|null}}} */
};

br_netmap_t *br_netmap_new(void)
{
    br_netmap_t *m = calloc(1, sizeof(*m));
    if (m && !(m->reports = json_object())) {
        free(m);
        return NULL;
    }
    return m;
}

void br_netmap_destroy(br_netmap_t **mp)
{
    if (mp && *mp) {
        json_decref((*mp)->reports);
        free(*mp);
        *mp = NULL;
    }
}

void br_netmap_report(br_netmap_t *m, const char *node, json_t *rtt)
{
    if (!json_is_object(rtt))
        return;
    json_t *was = json_object_get(json_object_get(m->reports, node), "coordinator");
    if (was && !json_object_get(rtt, "coordinator")) {
        /* a round trip comes with the heartbeat after an answered one: keep the last */
        json_t *keep = json_copy(rtt);
        if (keep && json_object_set(keep, "coordinator", was) == 0)
            json_object_set_new(m->reports, node, keep);
        else
            json_decref(keep);
        return;
    }
    json_object_set(m->reports, node, rtt);
}

void br_netmap_forget(br_netmap_t *m, const char *node)
{
    json_object_del(m->reports, node);
}

/* a's measurement of b: 1 and *ms when answered, 0 lost, -1 never measured. */
static int one_way(const br_netmap_t *m, const char *a, const char *b, double *ms)
{
    json_t *v = json_object_get(json_object_get(json_object_get(m->reports, a), "peers"), b);
    if (json_is_number(v)) {
        *ms = json_number_value(v);
        return 1;
    }
    return json_is_null(v) ? 0 : -1;
}

/* The round trip between a and b from both measurements, a's of b's target to_b
 * and b's of a's target to_a: the larger of those answered; -2 when one was
 * probed in vain and none answered, -1 when neither was measured. */
static double both_ways(const br_netmap_t *m, const char *a, const char *to_b, const char *b,
                        const char *to_a)
{
    double ab = 0, ba = 0;
    int x = one_way(m, a, to_b, &ab), y = one_way(m, b, to_a, &ba);
    if (x == 1 || y == 1)
        return x == 1 && y == 1 ? (ab > ba ? ab : ba) : x == 1 ? ab : ba;
    return x == 0 || y == 0 ? -2 : -1;
}

double br_netmap_rtt(const br_netmap_t *m, const char *a, const char *b)
{
    return both_ways(m, a, b, b, a);
}

double br_netmap_overlay_rtt(const br_netmap_t *m, const char *a, const char *b)
{
    char oa[100], ob[100];
    snprintf(oa, sizeof(oa), "%s" BR_PROBE_OVERLAY_SUFFIX, a);
    snprintf(ob, sizeof(ob), "%s" BR_PROBE_OVERLAY_SUFFIX, b);
    return both_ways(m, a, ob, b, oa);
}

double br_netmap_coordinator_rtt(const br_netmap_t *m, const char *node)
{
    json_t *v = json_object_get(json_object_get(m->reports, node), "coordinator");
    return json_is_number(v) ? json_number_value(v) : -1;
}

json_t *br_netmap_matrix(const br_netmap_t *m, br_nodes_t *nodes)
{
    json_t *names = json_array(), *rows = json_array(), *coord = json_array();
    json_t *lost = json_array(), *orows = json_array();
    int over = 0; /* some overlay path measured */
    for (br_node_t *a = br_nodes_first(nodes); a; a = a->next) {
        json_t *row = json_array(), *orow = json_array();
        for (br_node_t *b = br_nodes_first(nodes); b; b = b->next) {
            double ms = 0;
            char ob[100];
            snprintf(ob, sizeof(ob), "%s" BR_PROBE_OVERLAY_SUFFIX, b->name);
            if (a == b)
                json_array_append_new(row, json_real(0));
            else if (one_way(m, a->name, b->name, &ms) == 1)
                json_array_append_new(row, json_real(ms));
            else
                json_array_append_new(row, json_null());
            if (a == b)
                json_array_append_new(orow, json_real(0));
            else if (one_way(m, a->name, ob, &ms) == 1 && ++over)
                json_array_append_new(orow, json_real(ms));
            else
                json_array_append_new(orow, json_null());
            if (a != b && strcmp(a->name, b->name) < 0 && br_netmap_rtt(m, a->name,
                                                                         b->name) == -2)
                json_array_append_new(lost, json_pack("[s, s]", a->name, b->name));
        }
        double c = br_netmap_coordinator_rtt(m, a->name);
        json_array_append_new(names, json_string(a->name));
        json_array_append_new(rows, row);
        json_array_append_new(orows, orow);
        json_array_append_new(coord, c >= 0 ? json_real(c) : json_null());
    }
    json_t *out = json_pack("{s:o, s:o, s:o, s:o}", "nodes", names, "rtt_ms", rows,
                            "coordinator_ms", coord, "no_answer", lost);
    if (over)
        json_object_set_new(out, "overlay_rtt_ms", orows);
    else
        json_decref(orows);
    return out;
}

/* --- choosing a gang --------------------------------------------------------- */

typedef struct {
    int mixed;    /* pairs in different sites */
    int relayed;  /* pairs that talk through a relay */
    int unknown;  /* pairs never measured */
    double worst; /* largest round trip among measured pairs */
    double sum;
} score_t;

static const char *site_of(const br_node_t *n)
{
    return json_string_value(json_object_get(json_object_get(n->info, "labels"), "site"));
}

/* How pairs are weighed: the map, and who says a pair is relayed. */
typedef struct {
    const br_netmap_t *m;
    const br_netmap_via_t *via; /* NULL: direct */
} weigh_t;

/* The round trip a pair of a gang has (br_netmap_rtt's -1 and -2 as there): the
 * direct one; over the overlay (via) its own where measured, when the gang runs
 * over it or the pair answers no direct probe. */
static double pair_rtt(const weigh_t *w, const br_node_t *a, const br_node_t *b)
{
    double ms = br_netmap_rtt(w->m, a->name, b->name);
    if (!w->via || (!w->via->overlay && ms != -2))
        return ms;
    double ov = br_netmap_overlay_rtt(w->m, a->name, b->name);
    if (ov >= 0)
        return ov;
    return w->via->overlay ? ov : ms; /* (auto: no direct answer, none measured over it) */
}

static void add_pair(const weigh_t *w, const br_node_t *a, const br_node_t *b, score_t *s)
{
    if (w->via && w->via->relayed && w->via->relayed(w->via->ctx, a, b))
        s->relayed++;
    double ms = pair_rtt(w, a, b);
    const char *sa = site_of(a), *sb = site_of(b);
    if (ms == -1) {
        s->unknown++;
        ms = 0;
    } else if (ms == -2) {
        ms = LOST_MS;
    }
    if ((sa && sb && strcmp(sa, sb) != 0) || ms > BR_SITE_RTT_MS)
        s->mixed++;
    if (ms > s->worst)
        s->worst = ms;
    s->sum += ms;
}

/* <0 when x is better than y. */
static int compare(const score_t *x, const score_t *y, int spread_any)
{
    if (!spread_any && x->mixed != y->mixed)
        return x->mixed - y->mixed;
    if (x->relayed != y->relayed)
        return x->relayed - y->relayed;
    if (x->unknown != y->unknown)
        return x->unknown - y->unknown;
    if (x->worst != y->worst)
        return x->worst < y->worst ? -1 : 1;
    return x->sum < y->sum ? -1 : x->sum > y->sum;
}

static int cmp_int(const void *a, const void *b)
{
    return *(const int *)a - *(const int *)b;
}

/* Grow a set from seed, each time taking the candidate nearest to it. */
static score_t grow(const weigh_t *m, br_node_t *const *cand, int ncand, int want,
                    int spread_any, int seed, int *set, char *in)
{
    memset(in, 0, (size_t)ncand);
    set[0] = seed;
    in[seed] = 1;
    for (int size = 1; size < want; size++) {
        int best = -1;
        score_t bs = {0};
        for (int j = 0; j < ncand; j++) {
            if (in[j])
                continue;
            score_t s = {0};
            for (int k = 0; k < size; k++)
                add_pair(m, cand[j], cand[set[k]], &s);
            if (best < 0 || compare(&s, &bs, spread_any) < 0) {
                best = j;
                bs = s;
            }
        }
        set[size] = best;
        in[best] = 1;
    }
    score_t total = {0};
    for (int i = 0; i < want; i++)
        for (int k = i + 1; k < want; k++)
            add_pair(m, cand[set[i]], cand[set[k]], &total);
    return total;
}

/* Append to why (bounded). */
static void say(char *why, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void say(char *why, size_t len, const char *fmt, ...)
{
    size_t n = strlen(why);
    va_list ap;
    va_start(ap, fmt);
    if (n + 1 < len)
        vsnprintf(why + n, len - n, fmt, ap);
    va_end(ap);
}

void br_netmap_choose(const br_netmap_t *m, br_node_t *const *cand, int ncand, int want,
                      int spread_any, const br_netmap_via_t *via, int *chosen, char *why,
                      size_t whylen)
{
    weigh_t w = {m, via};
    int *set = calloc((size_t)want, sizeof(int));
    char *in = calloc((size_t)ncand, 1);
    score_t best = {0};
    int have = 0;
    why[0] = '\0';
    for (int seed = 0; set && in && seed < ncand; seed++) {
        score_t s = grow(&w, cand, ncand, want, spread_any, seed, set, in);
        if (!have || compare(&s, &best, spread_any) < 0) {
            memcpy(chosen, set, (size_t)want * sizeof(int));
            best = s;
            have = 1;
        }
        if (want == ncand)
            break; /* every candidate goes: nothing to choose */
    }
    if (!have) { /* out of memory: first fit */
        for (int i = 0; i < want; i++)
            chosen[i] = i;
    }
    qsort(chosen, (size_t)want, sizeof(int), cmp_int);
    if (want > 1 && best.unknown == want * (want - 1) / 2)
        say(why, whylen, "round trips not measured yet");
    else if (want > 1)
        say(why, whylen, "max rtt %.2f ms%s%s%s", best.worst,
            best.unknown ? " (some pairs not measured yet)" : "",
            best.mixed ? ", across sites: no set within one site fits" : "",
            best.relayed ? ", some pairs relayed: no set without fits" : "");
    /* the candidates left out, and how far they are from those chosen */
    int told = 0;
    for (int j = 0; j < ncand && have; j++) {
        int is = 0;
        for (int i = 0; i < want; i++)
            is |= chosen[i] == j;
        if (is)
            continue;
        if (told++ == 3) {
            say(why, whylen, "; ...");
            break;
        }
        double far = -1;
        const char *to = NULL, *site = NULL;
        for (int i = 0; i < want; i++) {
            double ms = pair_rtt(&w, cand[j], cand[chosen[i]]);
            if (ms == -2)
                ms = LOST_MS;
            if (ms > far) {
                far = ms;
                to = cand[chosen[i]]->name;
            }
            const char *sj = site_of(cand[j]), *si = site_of(cand[chosen[i]]);
            if (sj && si && strcmp(sj, si) != 0)
                site = sj;
        }
        if (site)
            say(why, whylen, "; %s not chosen: site %s", cand[j]->name, site);
        else if (far >= LOST_MS)
            say(why, whylen, "; %s not chosen: no answer from it to %s", cand[j]->name, to);
        else if (far >= 0)
            say(why, whylen, "; %s not chosen: rtt %.2f ms to %s", cand[j]->name, far, to);
        else
            say(why, whylen, "; %s not chosen: not measured", cand[j]->name);
    }
    free(set);
    free(in);
}
