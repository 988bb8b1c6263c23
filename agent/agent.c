/* agent.c - the agent's loop: connect, hello, heartbeat, run and kill attempts, ship
 * their output, report their exits until acknowledged. */
#include "agent.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <sodium.h>
#include <zmq.h>

#include "announce.h"
#include "attempt.h"
#include "cache.h"
#include "container.h"
#include "envcache.h"
#include "setuprun.h"
#include "imagefetch.h"
#include "ociarchive.h"
#include "overlay.h"
#include "outputs.h"
#include "client.h"
#include "gpu.h"
#include "inventory.h"
#include "jobuser.h"
#include "keeper.h"
#include "runstate.h"
#include "spec.h"
#include "localsock.h"
#include "listing.h"
#include "manifest.h"
#include "power.h"
#include "probe.h"
#include "replica.h"
#include "resume.h"
#include "msg.h"
#include "sock.h"
#include "stream.h"
#include "streams.h"
#include "token.h"
#include "trash.h"
#include "util.h"

#define MAX_ATTEMPTS BR_NODE_MAX_ATTEMPTS /* the scheduler places no more */
#define DRAIN_MAX 32 /* coordinator messages handled per wake */
#define HELLO_RETRY_MS 1000
#define GPU_READ_MS 1000 /* NVML is read this often (the loop wakes at least as often) */
#define MAX_UNACKED 256 /* checkpoint reports kept for resending */
#define SEND_QUEUE 256  /* messages queued for the coordinator before sends fail */
#define LOG_HOLD_MS (10 * 60 * 1000) /* an end waits this long for its output taken */
#define CACHE_WORK_KEEP_S (24 * 3600) /* ended attempts' working dirs, removed at a start */

struct br_agent {
    const br_settings_t *s;
    void *ctx, *sock, *monitor;
    int sigfd;
    br_gpus_t *gpus;
    json_t *inventory;
    br_localsock_t *local; /* `bramble checkpoint` from inside jobs */
    br_probe_t *probe;     /* round trips to the other nodes; NULL when off */
    char agent_id[17];     /* hash of this node's key: which jobs are ours */
    br_attempt_t *att[MAX_ATTEMPTS];
    int natt;
    zmq_pollitem_t *items; /* what the loop polls, grown as needed */
    br_attempt_t **owner;  /* the attempt each item's pipe belongs to, or NULL */
    int items_cap;
    uint32_t seq, hello_seq, hb_seq;
    int hello_acked;
    int64_t hello_sent, hb_sent, hb_ms;
    int64_t hb_sent_us;   /* when the heartbeat in flight left (monotonic) */
    double coord_rtt_ms;  /* the round trip of the last answered heartbeat, until told
                             (< 0: none new) */
    int64_t last_heard, fence_ms; /* fencing: freeze jobs when silent this long */
    json_t *unacked;              /* checkpoint reports not acknowledged yet */
    br_manifest_t *hasher;        /* hashes each checkpoint before it is reported */
    br_replica_t *replica;        /* checkpoints to and from other nodes */
    br_cache_t *cache;            /* jobs' code, pulled once (--cache-dir) */
    json_t *fetching;             /* job.run orders waiting for their trees (code, data
                                     sets): [{"job", "attempt", "body", "since", "wait":
                                     [manifest hash...], "received", "deduped"}] */
    json_t *pulls;                /* manifest hash: the trees being pulled now */
    json_int_t room_seq;          /* numbers the pulls that wait for room, in turn */
    json_t *mounted;              /* "JOB.ATTEMPT": [manifest hash...], the data sets
                                     a running attempt mounts and its image's archive
                                     (kept in the cache) */
    br_outputs_t *outputs;        /* attempts' outputs kept at their end */
    br_streams_t *streams;        /* shells and forwards into its jobs (streams.h) */
    br_trash_t *trash;            /* ended attempts' working dirs, removed off the loop */
    br_container_t *containers;   /* jobs' containers, when it runs them (container.h) */
    br_overlay_t *overlay;        /* its side of the overlay (overlay.h) */
    json_t *keep;                 /* "JOB.ATTEMPT": {"dir", "patterns", "uid", "gid",
                                     "state": wait|busy|done}: outputs to keep */
    json_t *stored;               /* ckpt.stored reports not answered yet */
    json_t *extras;               /* "JOB.ATTEMPT": what a running attempt has beyond its
                                     tasks (attempt_extra): {"failed"?: where its setup's
                                     runner writes why it failed (setuprun.h),
                                     "image_failed"?: the same of its image's fetch
                                     (imagefetch.h), "env"?:
                                     the environment it runs with, "container"?: {"uid",
                                     "gid", "workdir"} (its shells go into it)} */
    json_t *envs_unwanted;        /* environment key: removed once no attempt uses it */
    char exe[4096];               /* this program, which runs jobs' setups */
    int hello_plain;              /* the coordinator refuses "replica_port" in hellos */
    int hb_nodisk;                /* ... or "disk" in heartbeats */
    int hb_nopulling;             /* ... or "pulling" */
    int hb_notrees;               /* ... or "trees" */
    int trees_told;               /* the coordinator knows what the cache holds now */
    int64_t trees_stamp;          /* ... as the cache's trees were then (cache.h) */
    json_t *envs_told;            /* the environments the coordinator was last told of */
    int64_t envs_looked;          /* monotonic ms they were last looked at */
    int envs_dirty;               /* an attempt with one ended, or one was removed */
    int hb_noenvs;                /* the coordinator refuses "envs" in heartbeats */
    int hb_noreach;               /* ... or "overlay_reach" */
    int ckpt_plain;               /* the coordinator refuses "manifest" in reports */
    int64_t send_failed;          /* sends that found the queue full, in all */
    int64_t send_failed_run;      /* ... since the last one that went through */
    int exit_plain;               /* the coordinator refuses "log_dropped" in exits */
    int log_plain;                /* ... or job.log as a request: output goes as events */
    int64_t log_refused;          /* chunks of output refused since one was stored */
    int hb_plain;                 /* ... or "gpus" in heartbeats */
    int hb_nocost;                /* ... or "cost_per_hour" and "power_watts" */
    int64_t gpus_read;            /* when NVML was last read (monotonic ms) */
    int gpus_fresh;               /* read since the last heartbeat that told them */
    int power_known;              /* the last read had a GPU's power, or idle_watts */
    br_power_t *power;            /* the mean draw over each heartbeat interval */
    br_keeper_t *keeper;          /* fences the jobs when this process cannot */
    br_runstate_t *runstate;      /* what runs, saved for the agent after this one */
    json_t *adoptable;            /* what the previous agent saved, until adopted */
    int handoff;                  /* stopping for the next agent: jobs go on */
    int keeper_froze;             /* its freezes seen so far */
    char key_pub[BR_KEY_LEN + 1], key_sec[BR_KEY_LEN + 1]; /* what the socket uses */
    uint32_t rekey_seq;           /* node.key in flight: other requests wait */
    char rekey_pub[BR_KEY_LEN + 1], rekey_sec[BR_KEY_LEN + 1];
    int stop, fatal;
    char fatal_text[BR_ERR_TEXT];
};

/* --- joining ------------------------------------------------------------------ */

/* The token's endpoint gets JOIN_FIRST_MS to answer before the agent also listens for
 * the coordinator's LAN announcement (proto/announce.h); it may still answer later.
 * Without discovery (--discover-timeout 0) it gets JOIN_TIMEOUT_MS, as ever. */
#define JOIN_TIMEOUT_MS 15000
#define JOIN_FIRST_MS 3000
#define JOIN_FOUND_MS 5000 /* an announced endpoint is on the LAN: it answers at once */
#define JOIN_SHUNNED 8     /* announced endpoints that did not answer, skipped after */

/* Endpoints that announced the token's key but answered no join: impostors (or a
 * coordinator gone), not listened to again. */
typedef struct {
    char ep[JOIN_SHUNNED][BR_ENDPOINT_MAX];
    int n;
} join_shunned_t;

static int shunned(const join_shunned_t *sh, const char *endpoint)
{
    for (int i = 0; sh && i < sh->n; i++)
        if (strcmp(sh->ep[i], endpoint) == 0)
            return 1;
    return 0;
}

/* The node.join body: the token, and the node's own public key to register. Its
 * cost: the fixed rate and the idle draw (no GPU read yet). */
static json_t *join_body(const br_settings_t *s)
{
    return json_pack("{s:s, s:s, s:s, s:O, s:f}", "token", s->join_token, "public_key",
                     s->cred.public_key, "name", s->name, "labels", s->labels,
                     "cost_per_hour",
                     br_power_cost(s->cost_per_hour, s->power_price, s->idle_watts));
}

/* The credential a join talks with: the node's, but with the token's join key pair
 * (token.h) instead of the node's own, since the coordinator's handshake admits no
 * key it does not know. */
static void join_cred(const br_settings_t *s, br_cred_t *out)
{
    br_token_t t;
    *out = s->cred;
    if (br_token_decode(s->join_token, &t, NULL) == 0)
        br_token_join_keypair(t.secret, out->public_key, out->secret_key);
    sodium_memzero(&t, sizeof(t));
}

/* node.join on a fresh CURVE DEALER to endpoint; the socket, or NULL. */
static void *join_send(void *ctx, const br_settings_t *s, const char *endpoint,
                       uint32_t seq, br_err_t *err)
{
    br_cred_t c;
    join_cred(s, &c);
    void *sock = br_sock_client(ctx, endpoint, c.server_public_key, c.public_key,
                                c.secret_key, err);
    sodium_memzero(&c, sizeof(c));
    br_msg_t *m = sock ? br_msg_new(BR_MSG_REQUEST, "node.join", seq) : NULL;
    if (m)
        br_msg_set_body(m, join_body(s));
    if (sock && (!m || br_msg_send(sock, m, err) < 0))
        br_sock_close(&sock);
    br_msg_destroy(&m);
    return sock;
}

/* Whether the host of a tcp:// endpoint resolves (other endpoints: assumed so). */
static int join_resolves(const char *endpoint)
{
    char host[BR_ENDPOINT_MAX];
    int port;
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res = NULL;
    if (br_announce_split_endpoint(endpoint, host, sizeof(host), &port, NULL) < 0 ||
        strcmp(host, "*") == 0)
        return 1;
    if (getaddrinfo(host, NULL, &hints, &res) != 0)
        return 0;
    freeaddrinfo(res);
    return 1;
}

/* Read pending announcements; 1 (and found) when one carries the token's key and
 * does not come from a shunned endpoint. */
static int join_heard(const br_settings_t *s, int udp, int *ignored, char *found,
                      size_t foundlen, const join_shunned_t *sh)
{
    br_announce_t a;
    char src[INET_ADDRSTRLEN];
    br_err_t e;
    int rc;
    while ((rc = br_announce_recv(udp, &a, src, sizeof(src), &e)) != 0) {
        if (rc < 0 && !src[0])
            return 0; /* socket error: keep waiting on the token's endpoint */
        if (rc > 0 && strcmp(a.key, s->cred.server_public_key) == 0) {
            snprintf(found, foundlen, "tcp://%s:%d", src, a.port);
            if (shunned(sh, found)) {
                found[0] = '\0';
                continue;
            }
            fprintf(stderr, "bramble-agent: the coordinator announced itself from %s "
                            "(port %d, endpoint %s)\n", src, a.port, a.endpoint);
            return 1;
        }
        if (!(*ignored)++) /* once: a LAN may hold several clusters */
            fprintf(stderr, "bramble-agent: ignoring %s from %s: %s\n",
                    rc > 0 ? "an announcement" : "a datagram", src,
                    rc > 0 ? "another coordinator's key (not the token's)" : e.text);
    }
    return 0;
}

/* Ask the token's endpoint to join, listening for announcements once it has been
 * silent for JOIN_FIRST_MS or cannot be resolved. The response body; or NULL with
 * found set when an announcement with the token's key came first; or NULL and err. */
static json_t *join_token_endpoint(br_settings_t *s, char *found, size_t foundlen,
                                   const join_shunned_t *sh, br_err_t *err)
{
    const char *ep = s->cred.endpoint;
    int discover = s->discover_timeout_ms > 0, udp = -1, listening = 0, ignored = 0;
    int64_t start = br_mono_ms();
    int64_t deadline = start + (discover ? JOIN_FIRST_MS + s->discover_timeout_ms
                                         : JOIN_TIMEOUT_MS);
    uint32_t seq = (uint32_t)start;
    const char *why = "did not answer within 3s";
    json_t *resp = NULL;
    char dur[32];
    void *ctx = zmq_ctx_new(), *sock = NULL, *mon = NULL;
    found[0] = '\0';
    err->errnum = 0;
    if (!ctx)
        return br_errp(err, ENOMEM, "zmq_ctx_new: %s", zmq_strerror(errno));
    if (discover && !join_resolves(ep))
        why = "cannot be resolved";
    else if (!(sock = join_send(ctx, s, ep, seq, err)) && !discover)
        goto done;
    else if (!sock)
        why = "cannot be dialled";
    if (sock)
        mon = br_sock_monitor(ctx, sock);
    while (!resp && !found[0] && br_mono_ms() < deadline) {
        if (mon && br_sock_monitor_auth_failed(mon)) {
            br_errf(err, EACCES, "join refused: the coordinator at %s does not know this "
                                 "token (never issued there, or expired over a day ago)",
                    ep);
            goto done;
        }
        int silent = !sock || br_mono_ms() - start >= JOIN_FIRST_MS;
        if (discover && !listening && silent) {
            br_err_t e;
            listening = 1;
            fprintf(stderr, "bramble-agent: %s %s; listening for the coordinator's "
                            "announcement on UDP port %d (up to %s)\n", ep, why,
                    s->discover_port, br_format_duration(s->discover_timeout_ms, dur,
                                                         sizeof(dur)));
            if ((udp = br_announce_listen(s->discover_port, &e)) < 0)
                fprintf(stderr, "bramble-agent: %s\n", e.text);
        }
        zmq_pollitem_t items[2];
        int n = 0;
        if (sock)
            items[n++] = (zmq_pollitem_t){sock, 0, ZMQ_POLLIN, 0};
        if (udp >= 0)
            items[n++] = (zmq_pollitem_t){NULL, udp, ZMQ_POLLIN, 0};
        int64_t left = deadline - br_mono_ms();
        if (zmq_poll(items, n, left < 200 ? (long)(left > 0 ? left : 0) : 200) < 0 &&
            errno != EINTR) {
            br_errf(err, errno, "poll: %s", zmq_strerror(errno));
            goto done;
        }
        br_msg_t *m = NULL;
        if (sock && br_msg_recv(sock, 0, ZMQ_DONTWAIT, &m, NULL) == 0 &&
            br_msg_kind(m) == BR_MSG_RESPONSE && br_msg_seq(m) == seq) {
            if (br_msg_check(m, err) == 0)
                resp = json_incref(br_msg_body(m));
            else
                br_err_prefix(err, "join refused");
            br_msg_destroy(&m);
            goto done;
        }
        br_msg_destroy(&m);
        if (udp >= 0 && join_heard(s, udp, &ignored, found, foundlen, sh))
            break;
    }
    if (!resp && !found[0] && !discover)
        br_errf(err, ETIMEDOUT, "join refused: no answer from the coordinator at %s "
                                "within %.1fs (is brambled running there?)",
                ep, JOIN_TIMEOUT_MS / 1000.0);
    else if (!resp && !found[0])
        br_errf(err, ETIMEDOUT, "join failed: %s %s, and no coordinator announced the "
                                "token's key on UDP port %d within %s",
                ep, why, s->discover_port,
                br_format_duration(s->discover_timeout_ms, dur, sizeof(dur)));
done:
    if (udp >= 0)
        close(udp);
    br_sock_close(&mon);
    br_sock_close(&sock);
    zmq_ctx_term(ctx);
    return resp;
}

/* Join at the endpoint an announcement gave (saved in the credential). */
static json_t *join_found(br_settings_t *s, const char *endpoint, br_err_t *err)
{
    br_strlcpy(s->cred.endpoint, endpoint, sizeof(s->cred.endpoint));
    br_cred_t jc;
    join_cred(s, &jc);
    br_client_t *cl = br_client_new_cred(&jc, err);
    sodium_memzero(&jc, sizeof(jc));
    if (!cl)
        return NULL;
    json_t *resp = br_client_call(cl, "node.join", join_body(s), JOIN_FOUND_MS, err);
    br_client_destroy(&cl);
    if (!resp && (err->errnum == EEXIST || err->errnum == EACCES) &&
        (cl = br_client_new_cred(&s->cred, NULL))) {
        /* the token's endpoint took the first request after all, too late to answer
         * (a name clash, or the token used up by that very join): when this key is a
         * node already, ask the coordinator its name */
        br_err_t e2;
        json_t *me = br_client_call(cl, "ping", NULL, JOIN_TIMEOUT_MS, &e2);
        const char *who = json_string_value(json_object_get(me, "principal"));
        if (who && strcmp(who, "node") == 0)
            resp = json_pack("{s:O}", "name", json_object_get(me, "name"));
        json_decref(me);
        br_client_destroy(&cl);
    }
    if (!resp && err->errnum == ETIMEDOUT) /* e.g. an impostor without the secret key */
        br_errf(err, ETIMEDOUT, "join failed: %s announced the token's key, but no "
                                "coordinator holding it answered there within %ds",
                endpoint, JOIN_FOUND_MS / 1000);
    else if (!resp)
        br_err_prefix(err, "join refused at %s", endpoint);
    return resp;
}

int br_agent_join(br_settings_t *s, br_err_t *err)
{
    br_token_t t;
    if (br_token_decode(s->join_token, &t, err) < 0)
        return -1;
    br_cred_t *c = &s->cred;
    memset(c, 0, sizeof(*c));
    br_strlcpy(c->endpoint, t.endpoint, sizeof(c->endpoint));
    br_strlcpy(c->server_public_key, t.server_key, sizeof(c->server_public_key));
    if (br_keypair(c->public_key, c->secret_key, err) < 0)
        return -1;
    char found[BR_ENDPOINT_MAX];
    join_shunned_t sh = {.n = 0};
    json_t *resp = NULL;
    for (;;) {
        resp = join_token_endpoint(s, found, sizeof(found), &sh, err);
        if (resp || !found[0])
            break;
        resp = join_found(s, found, err);
        if (resp || err->errnum != ETIMEDOUT || sh.n == JOIN_SHUNNED)
            break;
        /* an impostor that announced first must not stop the agent from hearing the
         * real coordinator: skip that endpoint and listen on */
        fprintf(stderr, "bramble-agent: %s; listening on for the coordinator\n", err->text);
        br_strlcpy(sh.ep[sh.n++], found, BR_ENDPOINT_MAX);
        br_strlcpy(s->cred.endpoint, t.endpoint, sizeof(s->cred.endpoint));
    }
    if (!resp)
        return -1;
    const char *name = json_string_value(json_object_get(resp, "name"));
    if (!name) {
        json_decref(resp);
        return br_errf(err, EPROTO, "join: the coordinator's answer has no node name");
    }
    br_strlcpy(c->name, name, sizeof(c->name));
    br_strlcpy(s->name, c->name, sizeof(s->name));
    json_decref(resp);
    if (br_mkdir_p(s->data_dir, 0700, err) < 0)
        return -1;
    return br_settings_save(s, err);
}

/* --- setup --------------------------------------------------------------------- */

static int open_signals(br_agent_t *a)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGCHLD);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGHUP);
    sigaddset(&set, SIGUSR2); /* stop, leaving the jobs to the next agent */
    sigprocmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);
    a->sigfd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
    return a->sigfd < 0 ? -1 : 0;
}

/* The CURVE socket to the coordinator with the node's key (a->key_pub/sec), and
 * its monitor. */
static int open_socket(br_agent_t *a, br_err_t *err)
{
    const br_cred_t *c = &a->s->cred;
    /* watched from before it connects: a refusal of the first handshake is seen */
    a->sock = br_sock_client_watched(a->ctx, c->endpoint, c->server_public_key, a->key_pub,
                                     a->key_sec, BR_AGENT_PING_MS, BR_AGENT_DEAD_MS,
                                     ZMQ_EVENT_HANDSHAKE_FAILED_AUTH |
                                         ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL,
                                     &a->monitor, err);
    if (!a->sock)
        return -1;
    /* no send may block the loop (fencing runs in it): a bounded queue, and what
     * does not fit fails at once */
    int zero = 0, hwm = SEND_QUEUE;
    if (zmq_setsockopt(a->sock, ZMQ_SNDTIMEO, &zero, sizeof(zero)) < 0 ||
        zmq_setsockopt(a->sock, ZMQ_SNDHWM, &hwm, sizeof(hwm)) < 0)
        return br_errf(err, errno, "socket options: %s", zmq_strerror(errno));
    if (!a->monitor)
        return br_errf(err, errno, "socket monitor: %s", zmq_strerror(errno));
    return 0;
}

br_agent_t *br_agent_new(const br_settings_t *s, br_err_t *err)
{
    br_agent_t *a = calloc(1, sizeof(*a));
    if (!a)
        return br_errp(err, ENOMEM, "out of memory");
    a->s = s;
    a->sigfd = -1;
    a->hb_ms = 1000;
    a->fence_ms = 3000;
    a->last_heard = br_mono_ms();
    a->unacked = json_array();
    a->stored = json_array();
    a->seq = (uint32_t)br_mono_ms();
    /* what a previous agent left running, to adopt; its keeper goes, and this run's
     * keeper takes over its run id, which those jobs carry */
    if (!(a->runstate = br_runstate_new(s->data_dir, err)))
        goto fail;
    a->adoptable = br_runstate_load(a->runstate);
    pid_t old_keeper;
    uint64_t old_start;
    char run[17];
    int have_run = br_runstate_keeper(a->runstate, &old_keeper, &old_start, run) == 0;
    if (have_run && br_keeper_retire(old_keeper, old_start))
        fprintf(stderr, "bramble-agent: stopped the keeper (pid %d) of the previous run\n",
                (int)old_keeper);
    /* first, while this process has no thread: the keeper that outlives it */
    a->keeper = br_keeper_new(have_run && json_array_size(a->adoptable) ? run : NULL,
                              a->fence_ms, 0, err);
    if (!a->keeper ||
        br_runstate_save_keeper(a->runstate, br_keeper_pid(a->keeper),
                                br_keeper_start(a->keeper), br_keeper_run_id(a->keeper),
                                err) < 0)
        goto fail;
    /* orphans of our jobs come back to us, so a job's whole tree stays ours */
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    if (open_signals(a) < 0) {
        br_errf(err, errno, "signalfd: %s", strerror(errno));
        goto fail;
    }
    a->gpus = br_gpus_new(s->gpus[0] ? s->gpus : "auto", err);
    a->inventory = a->gpus ? br_inventory_collect(err) : NULL;
    if (!a->inventory ||
        !(a->containers = br_container_new(s->container_runtime[0] ? s->container_runtime
                                                                   : "auto",
                                           err)))
        goto fail;
    json_object_set_new(a->inventory, "container_runtime", /* (null: takes no image job) */
                        br_container_runtime(a->containers)
                            ? json_string(br_container_runtime(a->containers))
                            : json_null());
    /* the stream frames it speaks (proto/stream.h): the coordinator opens no shell or
     * forward to an agent that cannot seal them */
    json_object_set_new(a->inventory, "streams", json_integer(BR_STREAM_VERSION));
    if (!(a->overlay = br_overlay_new(s->overlay, s->data_dir, s->relay, err)))
        goto fail;
    if (!br_overlay_mode(a->overlay))
        fprintf(stderr, "bramble-agent: overlay: %s\n", br_overlay_why_not(a->overlay));
    json_object_set_new(a->inventory, "overlay", br_overlay_hello(a->overlay));
    if (!(a->power = br_power_new(s->idle_watts))) {
        br_errf(err, ENOMEM, "out of memory");
        goto fail;
    }
    json_object_set_new(a->inventory, "gpu_source", json_string(br_gpus_source(a->gpus)));
    const char *refuses = br_settings_refuses_all(s);
    if (refuses) /* the coordinator places nothing here, and says why */
        json_object_set_new(a->inventory, "refuses", json_string(refuses));
    json_object_set_new(a->inventory, "gpu_driver",
                        json_string(br_gpus_driver_version(a->gpus)));
    json_object_set_new(a->inventory, "cuda_version",
                        json_string(br_gpus_cuda_version(a->gpus)));
    /* jobs carry it, so a restarted agent kills what its predecessor left behind
     * and never the jobs of another cluster's node of the same name */
    unsigned char h[8];
    crypto_generichash(h, sizeof(h), (const unsigned char *)s->cred.public_key,
                       strlen(s->cred.public_key), NULL, 0);
    sodium_bin2hex(a->agent_id, sizeof(a->agent_id), h, sizeof(h));
    a->local = br_localsock_new(s->name, err);
    if (!a->local)
        goto fail;
    a->coord_rtt_ms = -1;
    if (s->probe_port >= 0 && !(a->probe = br_probe_new(s->probe_port, err)))
        goto fail;
    if (!(a->hasher = br_manifest_new(err))) /* a thread: after the keeper's fork */
        goto fail;
    if (!(a->replica = br_replica_new(s, err))) /* threads too */
        goto fail;
    if (!(a->cache = br_cache_new(s->cache_dir, br_listings_dir(br_replica_listings(a->replica)),
                                  s->data_dir, err)) ||
        !(a->fetching = json_array()) || !(a->keep = json_object()) ||
        !(a->extras = json_object()) ||
        !(a->envs_unwanted = json_object()) ||
        !(a->pulls = json_object()) || !(a->mounted = json_object()) ||
        !(a->outputs = br_outputs_new(&s->cred, err)) || !(a->streams = br_streams_new(err)) ||
        !(a->trash = br_trash_new(err)))
        goto fail;
    /* (not the working dirs of the attempts still running, taken over below: a long
     * run's top directory can be older than a day) */
    br_cache_sweep_work(a->cache, CACHE_WORK_KEEP_S, a->adoptable);
    ssize_t exe_len = readlink("/proc/self/exe", a->exe, sizeof(a->exe) - 1);
    a->exe[exe_len > 0 ? exe_len : 0] = '\0';
    a->ctx = zmq_ctx_new();
    br_strlcpy(a->key_pub, s->cred.public_key, sizeof(a->key_pub));
    br_strlcpy(a->key_sec, s->cred.secret_key, sizeof(a->key_sec));
    if (open_socket(a, err) < 0)
        goto fail;
    return a;
fail:
    br_agent_destroy(&a);
    return NULL;
}

void br_agent_destroy(br_agent_t **ap)
{
    br_agent_t *a = ap ? *ap : NULL;
    if (!a)
        return;
    if (a->handoff) /* the keeper guards the jobs until the next agent takes them */
        br_keeper_leave(&a->keeper);
    else
        br_keeper_destroy(&a->keeper); /* stopping on purpose: it goes too */
    br_runstate_destroy(&a->runstate);
    json_decref(a->adoptable);
    br_streams_destroy(&a->streams); /* (hangs up every shell left) */
    br_trash_destroy(&a->trash);
    for (int i = 0; i < a->natt; i++)
        br_attempt_destroy(&a->att[i]);
    br_sock_close(&a->monitor);
    br_sock_close(&a->sock);
    if (a->ctx)
        zmq_ctx_term(a->ctx);
    br_gpus_destroy(&a->gpus);
    br_power_destroy(&a->power);
    br_localsock_destroy(&a->local);
    br_probe_destroy(&a->probe);
    br_manifest_destroy(&a->hasher);
    br_replica_destroy(&a->replica);
    br_cache_destroy(&a->cache);
    json_decref(a->fetching);
    json_decref(a->pulls);
    json_decref(a->mounted);
    br_outputs_destroy(&a->outputs);
    json_decref(a->keep);
    json_decref(a->extras);
    br_container_destroy(&a->containers);
    if (a->handoff) /* its jobs go on, and talk over it: the next agent takes it over */
        br_overlay_leave(&a->overlay);
    br_overlay_destroy(&a->overlay);
    json_decref(a->envs_unwanted);
    json_decref(a->envs_told);
    free(a->items);
    free(a->owner);
    json_decref(a->inventory);
    json_decref(a->unacked);
    json_decref(a->stored);
    if (a->sigfd >= 0)
        close(a->sigfd);
    free(a);
    *ap = NULL;
}

/* --- sending ------------------------------------------------------------------- */

/* Send m without waiting: -1 when the queue to the coordinator is full (counted,
 * and said once per run of failures) or the send failed otherwise. What the
 * protocol resends (hello, exits, checkpoints) goes again on its timer; log chunks
 * wait in their attempt's buffer; anything else is dropped. */
static int send_now(br_agent_t *a, const br_msg_t *m)
{
    br_err_t err;
    if (a->rekey_seq && br_msg_kind(m) != BR_MSG_RESPONSE && br_msg_seq(m) != a->rekey_seq) {
        /* the key changes when node.key is answered: what the coordinator would read
         * after the change under the old key it would refuse, so it waits (reports
         * are resent, logs stay in their buffer) */
        errno = EAGAIN;
        return -1;
    }
    if (br_msg_send(a->sock, m, &err) == 0) {
        if (a->send_failed_run)
            fprintf(stderr, "bramble-agent: sends to the coordinator go through again "
                            "(%lld found the queue full meanwhile)\n",
                    (long long)a->send_failed_run);
        a->send_failed_run = 0;
        return 0;
    }
    if (errno != EAGAIN) {
        fprintf(stderr, "bramble-agent: %s\n", err.text);
        return -1;
    }
    if (!a->send_failed_run++)
        fprintf(stderr, "bramble-agent: the queue to the coordinator is full (%d "
                        "messages): %s and what follows not sent; reports are resent, "
                        "logs wait in a bounded buffer\n", SEND_QUEUE, br_msg_type(m));
    a->send_failed++;
    return -1;
}

/* Send a new message; its seq, and *sent (when given) whether it went. */
static uint32_t send_msg_ok(br_agent_t *a, br_msg_kind_t kind, const char *type,
                            json_t *body, const void *data, size_t len, int *sent)
{
    uint32_t seq = ++a->seq;
    br_msg_t *m = br_msg_new(kind, type, seq);
    if (sent)
        *sent = 0;
    if (!m) {
        json_decref(body);
        return 0;
    }
    br_msg_set_body(m, body);
    if (data)
        br_msg_set_data(m, data, len);
    int ok = send_now(a, m) == 0;
    if (sent)
        *sent = ok;
    br_msg_destroy(&m);
    return seq;
}

static uint32_t send_msg(br_agent_t *a, br_msg_kind_t kind, const char *type,
                         json_t *body, const void *data, size_t len)
{
    return send_msg_ok(a, kind, type, body, data, len, NULL);
}

static void reply(br_agent_t *a, br_msg_t *req, int errnum, const char *text)
{
    br_msg_t *r = errnum ? br_msg_reply_error(req, errnum, "%s", text) : br_msg_reply(req);
    if (r)
        send_now(a, r);
    br_msg_destroy(&r);
}

static json_t *tasks_json(br_agent_t *a)
{
    json_t *tasks = json_array();
    for (int i = 0; i < a->natt; i++) {
        br_attempt_t *t = a->att[i];
        json_t *task = json_pack("{s:I, s:i, s:s}", "job", (json_int_t)br_attempt_job(t),
                                 "attempt", br_attempt_number(t), "state",
                                 br_attempt_done(t)     ? "exited"
                                 : br_attempt_frozen(t) ? "frozen"
                                                        : "running");
        if (br_attempt_port(t))
            json_object_set_new(task, "port", json_integer(br_attempt_port(t)));
        json_object_set_new(task, "log_dropped", json_integer(br_attempt_log_dropped(t)));
        if (br_attempt_health(t))
            json_object_set_new(task, "health", json_string(br_health_state_name(
                                                    br_health_state(br_attempt_health(t)))));
        json_array_append_new(tasks, task);
    }
    return tasks;
}

/* Read the GPUs when GPU_READ_MS have passed, whether a heartbeat is due or not:
 * each reading of their draw goes into the mean the next heartbeat prices. */
static void read_gpus(br_agent_t *a, int64_t now)
{
    if (a->gpus_read && now - a->gpus_read < GPU_READ_MS)
        return;
    int known = 0;
    a->gpus_read = now;
    br_gpus_refresh(a->gpus);
    br_power_sample(a->power, now, br_gpus_power(a->gpus, &known));
    a->power_known = known > 0 || a->s->idle_watts > 0;
    a->gpus_fresh = 1;
}

/* The GPUs' live figures for a heartbeat, when they were read since the last one
 * told them; NULL on the heartbeats between (the coordinator keeps the last ones),
 * without NVML, or when the coordinator does not take them. */
static json_t *live_gpus(br_agent_t *a)
{
    if (a->hb_plain || !a->gpus_fresh)
        return NULL;
    a->gpus_fresh = 0;
    return br_gpus_live_json(a->gpus);
}

/* What the node costs per hour over the interval this heartbeat ends, and the mean
 * draw that makes it (docs/cli.md, "Nodes"): into hb, unless the coordinator does
 * not take them. */
static void add_cost(br_agent_t *a, json_t *hb, int64_t now)
{
    double watts = br_power_take(a->power, now);
    if (a->hb_nocost)
        return;
    json_object_set_new(hb, "cost_per_hour",
                        json_real(br_power_cost(a->s->cost_per_hour, a->s->power_price,
                                                watts)));
    if (a->power_known)
        json_object_set_new(hb, "power_watts", json_real(watts));
}

/* The heartbeat's "disk" (replica.h), when it is time to look again: the
 * store's and each running job's checkpoint dir's. */
static json_t *disk_json(br_agent_t *a, int64_t now)
{
    const char *dirs[64];
    int n = 0;
    for (int i = 0; i < a->natt && n < 64; i++) {
        br_ckpt_t *ck = br_attempt_ckpt(a->att[i]);
        if (ck)
            dirs[n++] = br_ckpt_dir(ck);
    }
    return br_replica_disk(a->replica, dirs, n, now);
}

/* The hello's cost: the fixed rate and what the node draws now (idle, and the GPUs'
 * as just read); the heartbeats that follow say it over each interval. */
static void send_hello(br_agent_t *a)
{
    br_gpus_refresh(a->gpus);
    a->gpus_read = 0; /* the first heartbeat after it carries the live figures */
    double cost = br_power_cost(a->s->cost_per_hour, a->s->power_price,
                                a->s->idle_watts + br_gpus_power(a->gpus, NULL));
    json_t *body = json_pack("{s:O, s:o, s:O, s:f, s:o}", "inventory", a->inventory, "gpus",
                             br_gpus_to_json(a->gpus), "labels", a->s->labels,
                             "cost_per_hour", cost, "tasks", tasks_json(a));
    if (a->s->advertise_addr[0])
        json_object_set_new(body, "advertise_addr", json_string(a->s->advertise_addr));
    if (a->probe)
        json_object_set_new(body, "probe_port", json_integer(br_probe_port(a->probe)));
    if (br_replica_port(a->replica) >= 0 && !a->hello_plain)
        json_object_set_new(body, "replica_port",
                            json_integer(br_replica_port(a->replica)));
    a->hello_seq = send_msg(a, BR_MSG_REQUEST, "node.hello", body, NULL, 0);
    a->hello_sent = br_mono_ms();
}

/* A chunk of output goes as a request, kept until the coordinator answers that it
 * stored it; to a coordinator that takes job.log only as an event, as an event. */
static int64_t ship_log(void *arg, br_attempt_t *t, int rank, int stream, int64_t seq,
                        const void *data, size_t len)
{
    br_agent_t *a = arg;
    int sent;
    if (a->send_failed_run)
        return -1; /* the queue is full: try again on the next timer */
    uint32_t tag = send_msg_ok(
        a, a->log_plain ? BR_MSG_EVENT : BR_MSG_REQUEST, "job.log",
        json_pack("{s:I, s:i, s:i, s:i, s:I}", "job", (json_int_t)br_attempt_job(t),
                  "attempt", br_attempt_number(t), "rank", rank, "stream", stream, "seq",
                  (json_int_t)seq),
        data, len, &sent);
    if (!sent)
        return -1;
    return a->log_plain ? 0 : (int64_t)tag;
}

/* A checkpoint report is resent with each heartbeat until it is acknowledged. */
static void send_checkpoint(br_agent_t *a, json_t *body)
{
    json_t *sent = json_deep_copy(body);
    if (a->ckpt_plain) /* a coordinator from before manifests */
        json_object_del(sent, "manifest");
    uint32_t seq = send_msg(a, BR_MSG_REQUEST, "job.checkpoint", sent, NULL, 0);
    json_object_set_new(body, "_seq", json_integer(seq));
}

/* Whose checkpoint a watcher callback reports, and whose files it holds. */
typedef struct {
    br_agent_t *a;
    br_attempt_t *t;
    const br_fsid_t *as; /* the job's user, or NULL: the agent itself */
} ckpt_ctx_t;

/* The name of an attempt's requests to the hasher. */
static void hash_group(const br_attempt_t *t, char *buf, size_t len)
{
    snprintf(buf, len, "%lld.%d", (long long)br_attempt_job(t), br_attempt_number(t));
}

/* 1 while a checkpoint of the attempt is being hashed or waits to be reported. */
static int hashing(br_agent_t *a, const br_attempt_t *t)
{
    char group[48];
    hash_group(t, group, sizeof(group));
    return br_manifest_pending(a->hasher, group) > 0;
}

/* Report a hashed checkpoint (with "manifest") or a refused one (with "refused",
 * which the coordinator turns into an event) and keep it until acknowledged. */
static void report_checkpoint(br_agent_t *a, json_t *body)
{
    if (a->ckpt_plain && json_object_get(body, "refused"))
        return; /* an old coordinator would count it */
    if (json_array_size(a->unacked) >= MAX_UNACKED)
        json_array_remove(a->unacked, 0);
    json_t *copy = json_deep_copy(body);
    send_checkpoint(a, copy);
    json_array_append_new(a->unacked, copy);
}

/* A complete checkpoint to count: hashed first, off the loop (manifest.h), as the
 * job's user; collect_manifests reports it once its manifest is ready. */
static void count_checkpoint(const ckpt_ctx_t *ctx, const char *path, int64_t step,
                             int64_t size, int64_t mtime_ms)
{
    br_attempt_t *t = ctx->t;
    br_ckpt_t *ck = br_attempt_ckpt(t);
    json_t *body = json_pack("{s:I, s:i, s:s, s:I, s:I, s:f}", "job",
                             (json_int_t)br_attempt_job(t), "attempt", br_attempt_number(t),
                             "path", path, "step", (json_int_t)step, "size",
                             (json_int_t)size, "time", (double)mtime_ms / 1000.0);
    char group[48];
    hash_group(t, group, sizeof(group));
    br_manifest_req_t r = {.dir = ck ? br_ckpt_dir(ck) : NULL,
                           .path = path,
                           .as_user = ctx->as != NULL,
                           .uid = ctx->as ? br_fsid_uid(ctx->as) : 0,
                           .gid = ctx->as ? br_fsid_gid(ctx->as) : 0,
                           .group = group,
                           .tag = body};
    br_err_t err;
    if (br_manifest_submit(ctx->a->hasher, &r, &err) < 0) {
        fprintf(stderr,
                "bramble-agent: job %lld attempt %d: checkpoint step %lld at %s "
                "not counted: %s\n",
                (long long)br_attempt_job(t), br_attempt_number(t), (long long)step,
                path, err.text);
        json_object_set_new(body, "refused", json_string(err.text));
        report_checkpoint(ctx->a, body);
    }
    json_decref(body);
}

/* One the attempt completed (the watcher's, or `bramble checkpoint`): a sign of life
 * too. */
static void on_checkpoint(void *arg, const char *path, int64_t step, int64_t size,
                          int64_t mtime_ms)
{
    const ckpt_ctx_t *ctx = arg;
    br_hang_activity(br_attempt_hang(ctx->t), BR_HANG_CHECKPOINT, -1, br_mono_ms());
    count_checkpoint(ctx, path, step, size, mtime_ms);
}

/* Checkpoints whose manifest is ready: reported with it, or as refused (a special
 * file in it, a file the job's user cannot read), saying why. */
static void collect_manifests(br_agent_t *a)
{
    json_t *body, *m;
    br_err_t err;
    while (br_manifest_take(a->hasher, &body, &m, &err) == 1) {
        long long job = (long long)json_integer_value(json_object_get(body, "job"));
        int attempt = (int)json_integer_value(json_object_get(body, "attempt"));
        long long step = (long long)json_integer_value(json_object_get(body, "step"));
        const char *path = json_string_value(json_object_get(body, "path"));
        json_t *sent = NULL;
        br_err_t lerr = {0};
        if (m && !(sent = br_listings_report(br_replica_listings(a->replica), m, &lerr)))
            err = lerr;
        if (sent) {
            fprintf(stderr,
                    "bramble-agent: job %lld attempt %d: checkpoint step %lld at "
                    "%s (%lld files, manifest %.16s)%s%s\n",
                    job, attempt, step, path,
                    (long long)json_integer_value(json_object_get(m, "files")),
                    json_string_value(json_object_get(m, "hash")),
                    lerr.errnum ? "; its whole manifest cannot be kept, so it cannot be "
                                  "copied: "
                                : "",
                    lerr.errnum ? lerr.text : "");
            json_object_set_new(body, "manifest", sent);
        } else {
            fprintf(stderr,
                    "bramble-agent: job %lld attempt %d: checkpoint step %lld at "
                    "%s not counted: %s\n",
                    job, attempt, step, path, err.text);
            json_object_set_new(body, "refused", json_string(err.text));
        }
        json_decref(m);
        report_checkpoint(a, body);
        json_decref(body);
    }
}

static void resend_checkpoints(br_agent_t *a)
{
    size_t i;
    json_t *body;
    json_array_foreach(a->unacked, i, body) {
        json_object_del(body, "_seq");
        send_checkpoint(a, body);
    }
}

/* A ckpt.stored report is resent with each heartbeat until it is answered (an
 * error answer too: the coordinator has heard it); the oldest go beyond
 * MAX_UNACKED. */
static void send_stored(br_agent_t *a, json_t *body)
{
    uint32_t seq = send_msg(a, BR_MSG_REQUEST, "ckpt.stored", json_deep_copy(body), NULL, 0);
    json_object_set_new(body, "_seq", json_integer(seq));
}

static void resend_stored(br_agent_t *a)
{
    size_t i;
    json_t *body;
    json_array_foreach(a->stored, i, body) {
        json_object_del(body, "_seq");
        send_stored(a, body);
    }
}

static void stored_acked(br_agent_t *a, uint32_t seq)
{
    for (size_t i = 0; i < json_array_size(a->stored); i++)
        if (json_integer_value(json_object_get(json_array_get(a->stored, i), "_seq")) ==
            seq) {
            json_array_remove(a->stored, i);
            return;
        }
}

static void checkpoint_acked(br_agent_t *a, uint32_t seq, const br_err_t *failed)
{
    size_t i;
    json_t *body;
    json_array_foreach(a->unacked, i, body) {
        if (json_integer_value(json_object_get(body, "_seq")) != seq)
            continue;
        if (failed && failed->errnum == EPROTO &&
            strstr(failed->text, "left unpacked: manifest")) {
            /* a coordinator that predates manifests: report without them (each
             * report that was already on its way comes back here) */
            if (!a->ckpt_plain)
                fprintf(stderr,
                        "bramble-agent: the coordinator does not take "
                        "\"manifest\" in job.checkpoint; reporting checkpoints "
                        "without it\n");
            a->ckpt_plain = 1;
            json_object_del(body, "_seq");
            send_checkpoint(a, body);
            return;
        }
        json_array_remove(a->unacked, i);
        return;
    }
}

/* `bramble checkpoint PATH --step N` from inside a job. localsock has made sure the
 * asking process is in task's process tree and runs as its uid; the path is looked
 * at as that uid, and must be inside the attempt's checkpoint dir when it has one. */
static json_t *on_local(void *arg, br_task_t *task, const br_jobsock_req_t *req,
                        br_err_t *err)
{
    br_agent_t *a = arg;
    br_attempt_t *t = NULL;
    for (int i = 0; i < a->natt && !t; i++)
        if (br_attempt_has_tag(a->att[i], br_task_tag(task)))
            t = a->att[i];
    if (!t || br_attempt_done(t))
        return br_errp(err, EACCES, "refused: not inside a running job of this node");
    if (strcmp(req->type, "progress") == 0) { /* `bramble progress [STEP]` */
        br_hang_t *h = br_attempt_hang(t);
        br_hang_activity(h, BR_HANG_PROGRESS, req->step, br_mono_ms());
        /* watched: this node judges the attempt's hangs (rank 0's, docs/spec.md) */
        return json_pack("{s:b, s:I, s:i, s:b}", "ok", 1, "job",
                         (json_int_t)br_attempt_job(t), "attempt", br_attempt_number(t),
                         "watched", h != NULL);
    }
    br_ckpt_t *ck = br_attempt_ckpt(t);
    br_fsid_t *as = br_fsid_new(br_task_uid(task), br_task_gid(task), err);
    int64_t size = 0, mtime_ms = 0;
    int rc = as ? br_ckpt_inspect(ck ? br_ckpt_dir(ck) : NULL, as, req->path, &size,
                                  &mtime_ms, err)
                : -1;
    if (rc < 0) {
        br_fsid_destroy(&as);
        br_err_prefix(err, "refused");
        return NULL;
    }
    ckpt_ctx_t ctx = {a, t, as};
    on_checkpoint(&ctx, req->path, req->step, size, mtime_ms);
    br_fsid_destroy(&as);
    return json_pack("{s:b, s:I, s:i}", "ok", 1, "job", (json_int_t)br_attempt_job(t),
                     "attempt", br_attempt_number(t));
}

#define KILLED_ON_REQUEST "killed on request" /* the coordinator's kill: superseded */

/* An ended attempt's checkpoint dir, looked at once more before its end is
 * reported (br_ckpt_settle): a checkpoint finished just before the exit counts. */
static int ckpt_settled(br_agent_t *a, br_attempt_t *t, int64_t now)
{
    br_ckpt_t *ck = br_attempt_ckpt(t);
    if (!ck || br_attempt_frozen(t) || strcmp(br_attempt_reason(t), KILLED_ON_REQUEST) == 0)
        return 1; /* its checkpoints cannot count any more (on_kill) */
    int code, sig;
    br_attempt_status(t, &code, &sig);
    ckpt_ctx_t ctx = {a, t, br_ckpt_user(ck)};
    return br_ckpt_settle(ck, now, code == 0 && sig < 0, on_checkpoint, &ctx);
}

/* The environments running attempts use: {dir: true}. */
static json_t *envs_in_use(br_agent_t *a)
{
    json_t *in_use = json_object(), *v;
    const char *k;
    json_object_foreach(a->extras, k, v)
        if (json_is_string(json_object_get(v, "env")))
            json_object_set(in_use, json_string_value(json_object_get(v, "env")), json_true());
    return in_use;
}

/* The attempt key's extras (br_agent_t's extras), made when there are none yet. */
static json_t *attempt_extra(br_agent_t *a, const char *key)
{
    json_t *x = json_object_get(a->extras, key);
    if (!x)
        json_object_set_new(a->extras, key, x = json_object());
    return x;
}

/* The environments to tell the coordinator of in this heartbeat, or NULL: looked at
 * after an attempt that used one ended (or every minute), once those removed on
 * request whose jobs ended are gone and the cache is within its quota (the ones used
 * longest ago leave first); told when they changed. */
static json_t *envs_news(br_agent_t *a, int64_t now)
{
    if (!a->envs_dirty && a->envs_told && now - a->envs_looked < 60000)
        return NULL;
    a->envs_dirty = 0;
    a->envs_looked = now;
    const char *cache = br_cache_dir(a->cache), *key;
    json_t *in_use = envs_in_use(a), *v, *tmp;
    json_object_foreach_safe(a->envs_unwanted, tmp, key, v) {
        br_err_t err = {0};
        if (br_envcache_remove(cache, key, in_use, &err) == 0 || err.errnum != EBUSY)
            json_object_del(a->envs_unwanted, key);
    }
    if (a->s->cache_quota >= 0)
        br_envcache_trim(cache, a->s->cache_quota - br_cache_used(a->cache), in_use);
    json_decref(in_use);
    json_t *list = br_envcache_list(cache);
    if (a->envs_told && json_equal(list, a->envs_told)) {
        json_decref(list);
        return NULL;
    }
    json_decref(a->envs_told);
    a->envs_told = json_incref(list);
    return list;
}

/* env.rm {"key"}: the environment goes now, or once no running attempt uses it. */
static void on_env_rm(br_agent_t *a, br_msg_t *m)
{
    const char *key;
    br_err_t err = {0};
    if (br_msg_unpack(m, &err, "{s:s}", "key", &key) < 0) {
        reply(a, m, EPROTO, err.text);
        return;
    }
    json_t *in_use = envs_in_use(a);
    int rc = br_envcache_remove(br_cache_dir(a->cache), key, in_use, &err);
    json_decref(in_use);
    if (rc < 0 && err.errnum == EBUSY) /* (after its jobs: envs_news) */
        json_object_set_new(a->envs_unwanted, key, json_true());
    fprintf(stderr, "bramble-agent: environment %s: %s, as ordered\n", key,
            rc == 0 ? "removed" : err.errnum == EBUSY ? "removed once its jobs end" : err.text);
    a->envs_dirty = 1;
    reply(a, m, rc < 0 && err.errnum != EBUSY ? err.errnum : 0,
          rc < 0 && err.errnum != EBUSY ? err.text : NULL);
}

/* "JOB.ATTEMPT" into key. */
static void attempt_key(int64_t job, int attempt, char *key, size_t len)
{
    snprintf(key, len, "%lld.%d", (long long)job, attempt);
}

/* Why the attempt's setup failed (the runner's note, setuprun.h), or its image could
 * not be had (imagefetch.h: 2), when it did: into why; else 0. */
static int setup_failed(br_agent_t *a, br_attempt_t *t, int code, char *why, size_t len)
{
    char key[48];
    attempt_key(br_attempt_job(t), br_attempt_number(t), key, sizeof(key));
    json_t *x = json_object_get(a->extras, key);
    const char *path = json_string_value(json_object_get(x, "failed"));
    const char *image = json_string_value(json_object_get(x, "image_failed"));
    size_t n;
    br_err_t err;
    char *note = path && code == BR_SETUP_FAILED ? br_read_file(path, 4096, &n, &err) : NULL;
    if (note) {
        snprintf(why, len, "setup failed: %s", note);
        free(note);
        return 1;
    }
    note = image && code == BR_IMAGE_FAILED ? br_read_file(image, 4096, &n, &err) : NULL;
    if (note)
        snprintf(why, len, "could not start: image: %s", note);
    free(note);
    return note ? 2 : 0;
}

static void report_exit(br_agent_t *a, br_attempt_t *t)
{
    int code, sig;
    br_attempt_status(t, &code, &sig);
    char why[900];
    int failed = setup_failed(a, t, code, why, sizeof(why));
    json_t *body = json_pack("{s:I, s:i, s:o, s:o, s:s}", "job",
                             (json_int_t)br_attempt_job(t), "attempt", br_attempt_number(t),
                             "exit_code", code >= 0 ? json_integer(code) : json_null(),
                             "signal", sig >= 0 ? json_integer(sig) : json_null(), "reason",
                             failed ? why : br_attempt_reason(t));
    if (failed == 2) /* not the job's failure: it waits, and is placed again */
        json_object_set_new(body, "fault", json_string("image"));
    /* bytes of its output dropped because they could not be sent, when there were */
    if (!a->exit_plain && br_attempt_log_dropped(t) > 0)
        json_object_set_new(body, "log_dropped", json_integer(br_attempt_log_dropped(t)));
    if (br_hang_fired(br_attempt_hang(t))) /* ended by hang detection: cause "hung" */
        json_object_set_new(body, "fault", json_string("hung"));
    br_attempt_set_report_seq(t, send_msg(a, BR_MSG_REQUEST, "job.exited", body, NULL, 0));
}

/* Report an attempt's end once it is ready: its processes and pipes are done, a
 * checkpoint it completed was reported first (so that it counts), and the
 * coordinator took all its output (or LOG_HOLD_MS passed, and what is left is
 * counted as dropped). 1 when reported now. */
/* Whether the attempt's outputs are kept (or it has none): its exit waits till then.
 * The first ask starts keeping them. */
static int outputs_kept(br_agent_t *a, br_attempt_t *t)
{
    char key[48];
    snprintf(key, sizeof(key), "%lld.%d", (long long)br_attempt_job(t), br_attempt_number(t));
    json_t *k = json_object_get(a->keep, key);
    const char *state = json_string_value(json_object_get(k, "state"));
    if (!k || strcmp(state, "done") == 0) {
        json_object_del(a->keep, key);
        return 1;
    }
    if (strcmp(state, "wait") == 0) {
        br_err_t err;
        if (br_outputs_submit(a->outputs, br_attempt_job(t), br_attempt_number(t),
                              json_string_value(json_object_get(k, "dir")),
                              json_object_get(k, "patterns"),
                              (uid_t)json_integer_value(json_object_get(k, "uid")),
                              (gid_t)json_integer_value(json_object_get(k, "gid")), &err) < 0) {
            fprintf(stderr, "bramble-agent: job %s: outputs not kept: %s\n", key, err.text);
            json_object_del(a->keep, key);
            return 1;
        }
        json_object_set_new(k, "state", json_string("busy"));
    }
    return 0;
}

/* Outputs kept (or not): their attempts' exits may go. */
static void outputs_taken(br_agent_t *a)
{
    json_t *r;
    while ((r = br_outputs_take(a->outputs))) {
        char key[48];
        snprintf(key, sizeof(key), "%lld.%d",
                 (long long)json_integer_value(json_object_get(r, "job")),
                 (int)json_integer_value(json_object_get(r, "attempt")));
        const char *error = json_string_value(json_object_get(r, "error"));
        if (error)
            fprintf(stderr, "bramble-agent: job %s: outputs not kept: %s\n", key, error);
        else
            fprintf(stderr, "bramble-agent: job %s: %lld output file(s) kept, %lld bytes "
                            "sent\n", key,
                    (long long)json_integer_value(json_object_get(r, "files")),
                    (long long)json_integer_value(json_object_get(r, "sent")));
        json_t *k = json_object_get(a->keep, key);
        if (k)
            json_object_set_new(k, "state", json_string("done"));
        json_decref(r);
    }
}

static int exit_if_ready(br_agent_t *a, br_attempt_t *t, int64_t now)
{
    if (!a->hello_acked || !br_attempt_finished(t) || br_attempt_report_seq(t) ||
        !ckpt_settled(a, t, now) || hashing(a, t) || !outputs_kept(a, t))
        return 0;
    br_attempt_flush(t, 1, ship_log, a);
    if (br_attempt_log_holds_exit(t, now, LOG_HOLD_MS))
        return 0;
    report_exit(a, t);
    return 1;
}

/* --- attempts ------------------------------------------------------------------ */

/* Bind TCP port (0: any) on every address and let go again: the port, free here
 * at this moment, or 0 when it is taken (or no socket could be made). */
static int try_port(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    socklen_t len = sizeof(sa);
    if (fd < 0)
        return 0;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    int got = bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
                      getsockname(fd, (struct sockaddr *)&sa, &len) == 0
                  ? ntohs(sa.sin_port)
                  : 0;
    close(fd);
    return got;
}

/* A service replica's health check, from its order's "service" object. */
static void start_health(br_attempt_t *t, json_t *service, int port)
{
    br_attempt_set_replica(t, 1);
    json_t *health = json_object_get(service, "health");
    if (!json_is_object(health))
        return; /* none: running counts as healthy */
    br_err_t err;
    br_health_t *h = br_health_new(
        port, json_string_value(json_object_get(health, "http")),
        json_integer_value(json_object_get(service, "interval")),
        json_integer_value(json_object_get(service, "grace")), br_mono_ms(), &err);
    if (!h)
        fprintf(stderr, "bramble-agent: job %lld: %s\n", (long long)br_attempt_job(t),
                err.text);
    br_attempt_set_health(t, h);
}

/* Hang detection for an attempt whose order carried progress: {"timeout": ms}. */
static void start_hang(br_attempt_t *t, json_t *progress)
{
    json_int_t ms = json_integer_value(json_object_get(progress, "timeout"));
    if (ms <= 0)
        return;
    br_hang_t *h = br_hang_new(ms, br_mono_ms());
    if (!h)
        fprintf(stderr, "bramble-agent: job %lld: no hang detection: out of memory\n",
                (long long)br_attempt_job(t));
    br_attempt_set_hang(t, h);
}

static br_attempt_t *find_attempt(br_agent_t *a, int64_t job, int attempt)
{
    for (int i = 0; i < a->natt; i++)
        if (br_attempt_job(a->att[i]) == job && br_attempt_number(a->att[i]) == attempt)
            return a->att[i];
    return NULL;
}

/* The trees running attempts mount: a new {manifest hash: true}. */
static json_t *trees_mounted(br_agent_t *a)
{
    json_t *keep = json_object(), *list, *h;
    const char *k;
    size_t i;
    json_object_foreach(a->mounted, k, list)
        json_array_foreach(list, i, h)
            json_object_set_new(keep, json_string_value(h), json_true());
    return keep;
}

/* The damaged trees set aside that no running attempt mounts, removed (cache.h). */
static void sweep_gone(br_agent_t *a)
{
    json_t *keep = trees_mounted(a);
    if (keep)
        br_cache_sweep_gone(a->cache, keep);
    json_decref(keep);
}

/* The attempt's own copy of its code in the cache (when it has one), removed off
 * the loop (trash.h): it ended, or never started. */
static void drop_workdir(br_agent_t *a, int64_t job, int attempt)
{
    char work[4200], key[48];
    br_err_t err;
    attempt_key(job, attempt, key, sizeof(key));
    br_cache_work_path(a->cache, work, sizeof(work));
    if (br_trash_tree(a->trash, work, key, &err) < 0)
        fprintf(stderr, "bramble-agent: job %s: its working dir stays: %s\n", key, err.text);
}

static void remove_attempt(br_agent_t *a, int i)
{
    br_streams_job_ended(a->streams, br_attempt_job(a->att[i]), br_attempt_number(a->att[i]));
    char key[48];
    attempt_key(br_attempt_job(a->att[i]), br_attempt_number(a->att[i]), key, sizeof(key));
    json_object_del(a->mounted, key); /* its data sets may leave the cache now */
    sweep_gone(a); /* (a damaged one it kept mounted goes with it) */
    json_t *x = json_object_get(a->extras, key);
    if (json_object_get(x, "container")) { /* a container podman never started stays */
        json_t *tasks = br_attempt_saved(a->att[i]), *task;
        size_t k;
        json_array_foreach(tasks, k, task)
            if (json_is_string(json_object_get(task, "tag")))
                br_container_forget(json_string_value(json_object_get(task, "tag")));
        json_decref(tasks);
    }
    for (int k = 0; k < 2; k++) {
        const char *failed = json_string_value(json_object_get(x, k ? "image_failed" : "failed"));
        if (failed)
            unlink(failed);
    }
    if (json_object_get(x, "env")) /* built now, perhaps: told, and trimmed */
        a->envs_dirty = 1;
    json_object_del(a->extras, key);
    drop_workdir(a, br_attempt_job(a->att[i]), br_attempt_number(a->att[i]));
    br_runstate_forget(a->runstate, br_attempt_job(a->att[i]), br_attempt_number(a->att[i]));
    br_attempt_destroy(&a->att[i]);
    a->att[i] = a->att[--a->natt];
}

/* Save what the next agent needs to adopt the attempt (runstate.h). */
static void save_attempt(br_agent_t *a, br_attempt_t *t, json_t *ckpt, json_t *service)
{
    json_t *rec = json_pack("{s:i, s:o}", "port", br_attempt_port(t), "tasks",
                            br_attempt_saved(t));
    if (br_attempt_hang(t))
        json_object_set_new(rec, "progress",
                            json_pack("{s:I}", "timeout",
                                      (json_int_t)br_hang_timeout(br_attempt_hang(t))));
    if (json_is_object(ckpt))
        json_object_set(rec, "checkpoint", ckpt);
    if (json_is_object(service))
        json_object_set(rec, "service", service);
    char key[48];
    attempt_key(br_attempt_job(t), br_attempt_number(t), key, sizeof(key));
    json_t *mounts = json_object_get(a->mounted, key);
    if (mounts) /* kept in the cache while it runs, under the next agent too */
        json_object_set(rec, "data", mounts);
    json_t *extra = json_object_get(a->extras, key);
    if (json_object_size(extra)) /* its setup's and image's notes, its container */
        json_object_set(rec, "extras", extra);
    br_err_t err;
    if (br_runstate_save(a->runstate, br_attempt_job(t), br_attempt_number(t), rec, &err) < 0)
        fprintf(stderr, "bramble-agent: job %lld: %s: an agent started after this one "
                        "will not adopt it\n", (long long)br_attempt_job(t), err.text);
    json_decref(rec);
}

/* Take over the attempts the previous agent saved: each stays frozen until the
 * coordinator, told of it in the hello, says it is still current (job.thaw) or not
 * (job.kill). Returns the tags of the tasks taken over (NULL-terminated, malloc'd,
 * pointing into the attempts), which the sweep for orphans leaves alone. */
static const char **adopt_all(br_agent_t *a)
{
    size_t n = json_array_size(a->adoptable), i, nt = 0;
    const char **keep = calloc(n * BR_ATTEMPT_MAX_TASKS + 1, sizeof(char *));
    json_t *rec;
    json_array_foreach(a->adoptable, i, rec) {
        json_int_t job = json_integer_value(json_object_get(rec, "job"));
        int attempt = (int)json_integer_value(json_object_get(rec, "attempt"));
        json_t *ckpt = json_object_get(rec, "checkpoint");
        json_t *tasks = json_object_get(rec, "tasks");
        br_attempt_opts_t o = {.job = job,
                               .attempt = attempt,
                               .node = a->s->name,
                               .checkpoint = json_is_object(ckpt) ? ckpt : NULL,
                               .exit_dir = br_runstate_dir(a->runstate)};
        br_err_t err = {0};
        br_attempt_t *t = keep && a->natt < MAX_ATTEMPTS && !find_attempt(a, job, attempt)
                              ? br_attempt_adopt(&o, tasks, &err)
                              : NULL;
        if (!t) {
            if (keep && a->natt < MAX_ATTEMPTS)
                fprintf(stderr, "bramble-agent: job %lld attempt %d: not adopted: %s\n",
                        (long long)job, attempt, err.text);
            br_runstate_forget(a->runstate, job, attempt);
            continue;
        }
        a->att[a->natt++] = t;
        if (json_is_object(json_object_get(rec, "extras"))) { /* as its agent had them */
            char key[48];
            attempt_key(job, attempt, key, sizeof(key));
            json_object_set(a->extras, key, json_object_get(rec, "extras"));
        }
        if (json_is_array(json_object_get(rec, "data"))) {
            char key[48];
            attempt_key(job, attempt, key, sizeof(key));
            json_object_set(a->mounted, key, json_object_get(rec, "data"));
        }
        int port = (int)json_integer_value(json_object_get(rec, "port"));
        br_attempt_set_port(t, port);
        json_t *service = json_object_get(rec, "service");
        if (json_is_object(service))
            start_health(t, service, port);
        start_hang(t, json_object_get(rec, "progress"));
        json_t *first = json_array_get(tasks, 0);
        br_err_t cerr;
        if (br_attempt_ckpt(t) &&
            br_ckpt_set_user(br_attempt_ckpt(t),
                             (uid_t)json_integer_value(json_object_get(first, "uid")),
                             (gid_t)json_integer_value(json_object_get(first, "gid")),
                             &cerr) < 0)
            fprintf(stderr, "bramble-agent: job %lld: checkpoint watcher: %s\n",
                    (long long)job, cerr.text);
        br_attempt_freeze(t); /* until the coordinator says it is still theirs */
        size_t k;
        json_t *task;
        json_array_foreach(tasks, k, task)
            keep[nt++] = json_string_value(json_object_get(task, "tag"));
        fprintf(stderr, "bramble-agent: job %lld attempt %d: adopted (pid %d), frozen until "
                        "the coordinator says it is still current\n",
                (long long)job, attempt, (int)br_attempt_pid(t));
    }
    return keep;
}

/* Whom a job of owner_id (unix_user: the admin's mapping, or NULL) runs as: the
 * owner's own uid where the agent has them (jobuser.h). 0, or -1 with err. */
static int job_user(br_agent_t *a, json_int_t owner_id, const char *unix_user,
                    br_jobuser_t *who, br_err_t *err)
{
    br_jobusers_opts_t uo = {.job_user = a->s->job_user,
                             .first = a->s->job_uid_first,
                             .last = a->s->job_uid_last,
                             .allow_root = a->s->allow_root_jobs,
                             .data_dir = a->s->data_dir,
                             .agent_uid = geteuid()};
    br_jobusers_t *users = br_jobusers_new(&uo, err);
    int rc = users ? br_jobusers_resolve(users, owner_id, unix_user, who, err) : -1;
    br_jobusers_destroy(&users);
    return rc;
}

/* Where the attempt resumes from (env's BRAMBLE_RESUME_FROM; "" or NULL: nowhere):
 * a newer complete checkpoint than ordered when the dir holds one the previous
 * attempt wrote after its last report (resume.h), then in *newer. */
static const char *resume_from(json_t *ckpt, json_int_t job, int attempt, json_t *env,
                               const br_jobuser_t *who, br_ckpt_found_t *newer)
{
    char ordered[32];
    const char *step = json_string_value(json_object_get(env, "BRAMBLE_RESUME_STEP"));
    snprintf(ordered, sizeof(ordered), "%s", step && *step ? step : "none");
    br_err_t err;
    int rc = br_resume_newer(ckpt, env, who->uid, who->gid, newer, &err);
    if (rc < 0)
        fprintf(stderr, "bramble-agent: job %lld attempt %d: no look for a newer "
                        "checkpoint: %s\n", (long long)job, attempt, err.text);
    if (rc != 1)
        newer->step = -1;
    else
        fprintf(stderr, "bramble-agent: job %lld attempt %d: resumes from %s (step %lld), "
                        "newer than the newest counted (step %s)\n",
                (long long)job, attempt, newer->path, (long long)newer->step, ordered);
    return json_string_value(json_object_get(env, "BRAMBLE_RESUME_FROM"));
}

/* The order waiting for its code at i in a->fetching, or -1. */
static int fetching_at(br_agent_t *a, json_int_t job, int attempt)
{
    size_t i;
    json_t *f;
    json_array_foreach(a->fetching, i, f) {
        if (json_integer_value(json_object_get(f, "job")) == job &&
            json_integer_value(json_object_get(f, "attempt")) == attempt)
            return (int)i;
    }
    return -1;
}

/* The trees the cache keeps while it makes room: {manifest hash: true}. Those
 * running attempts mount, those being pulled, those the orders waiting for their
 * trees wait for, and (also, an array of {"manifest"}) the trees of the order being
 * started: a tree it has must not go to make room for one it lacks, or each would
 * push the other out in turn for ever. */
static json_t *trees_in_use(br_agent_t *a, const json_t *also)
{
    json_t *keep = trees_mounted(a), *h, *v;
    const char *k;
    size_t i, j;
    json_object_foreach(a->pulls, k, v)
        json_object_set_new(keep, k, json_true());
    json_array_foreach(a->fetching, i, v)
        json_array_foreach(json_object_get(v, "wait"), j, h)
            json_object_set_new(keep, json_string_value(json_object_get(h, "hash")),
                                json_true());
    json_array_foreach(also, i, v) {
        const char *mh = json_string_value(json_object_get(json_object_get(v, "manifest"),
                                                           "hash"));
        if (mh)
            json_object_set_new(keep, mh, json_true());
    }
    return keep;
}

/* The cache's quota less what the environments hold (-1: no cap). */
static int64_t cache_quota(br_agent_t *a)
{
    int64_t quota = a->s->cache_quota;
    if (quota >= 0) {
        quota -= br_envcache_bytes(br_cache_dir(a->cache));
        if (quota < 0)
            quota = 0;
    }
    return quota;
}

/* Bytes the pulls ahead of mhash will still write into the cache: those queued or
 * in progress (a->pulls, not waiting for room), less what the one in progress has
 * in place already (counted in the cache's use). */
static int64_t pulls_ahead(br_agent_t *a, const char *mhash)
{
    json_t *now = br_replica_progress(a->replica), *v;
    const char *cur = json_string_value(json_object_get(now, "hash")), *k;
    int64_t sum = 0;
    json_object_foreach(a->pulls, k, v) {
        if (strcmp(k, mhash) == 0 || json_object_get(v, "room") ||
            br_cache_has(a->cache, k))
            continue;
        int64_t left = json_integer_value(json_object_get(json_object_get(v, "manifest"),
                                                          "bytes"));
        if (cur && strcmp(cur, k) == 0)
            left -= json_integer_value(json_object_get(now, "done"));
        sum += left > 0 ? left : 0;
    }
    json_decref(now);
    return sum;
}

/* Whether a pull other than mhash waits for room since before turn (its entry's
 * "room"; NULL: it waits for none yet, so any that waits came first). */
static int older_waits(br_agent_t *a, const char *mhash, const json_t *turn)
{
    json_t *v;
    const char *k;
    json_object_foreach(a->pulls, k, v) {
        json_t *other = json_object_get(v, "room");
        if (other && strcmp(k, mhash) != 0 &&
            (!turn || json_integer_value(other) < json_integer_value(turn)))
            return 1;
    }
    return 0;
}

/* Start the pull of a->pulls' entry mhash once the cache has room for it beside the
 * pulls ahead of it (the trees used longest ago leave to make it): a pull ordered
 * while another is queued or under way would otherwise be given the same free room,
 * and the two together pass --cache-quota. While the room is held by pulls ahead,
 * it waits (the entry's "room"), and is tried again as each ends
 * (pulls_wanting_room); held by anything else (trees running jobs mount, the
 * order's own other trees), it is started with the room there is, and fails
 * saying so, as before. 0 (started, or waiting), or -1 with err. */
static int pull_when_room(br_agent_t *a, const char *mhash, const json_t *also, br_err_t *err)
{
    json_t *rec = json_object_get(a->pulls, mhash);
    json_t *mf = json_object_get(rec, "manifest");
    int64_t quota = cache_quota(a), ahead = quota >= 0 ? pulls_ahead(a, mhash) : 0, limit = -1;
    int64_t need = json_integer_value(json_object_get(mf, "bytes"));
    json_t *turn = json_object_get(rec, "room");
    int rc = 0;
    /* in turn: the pulls that waited first start first */
    int behind = quota >= 0 && need <= quota && older_waits(a, mhash, turn);
    if (!behind) {
        json_t *keep = trees_in_use(a, also);
        rc = br_cache_room(a->cache, quota < 0 ? -1 : quota > ahead ? quota - ahead : 0,
                           need, keep, &limit, err);
        json_decref(keep);
        if (rc < 0 && !(err->errnum == ENOSPC && need <= quota && ahead > 0))
            return -1;
    }
    if (behind || ((rc < 0 || (limit >= 0 && limit < need)) &&
                   (ahead > 0 || older_waits(a, mhash, turn)))) {
        if (!turn) {
            fprintf(stderr, "bramble-agent: tree %.16s... (%lld bytes) waits for room in "
                            "the node's cache (--cache-quota): %lld bytes of pulls ahead\n",
                    mhash, (long long)need, (long long)ahead);
            json_object_set_new(rec, "room", json_integer(++a->room_seq));
        }
        return 0;
    }
    char dest[4200], spare[4300]; /* a job's code: its first working dir is made as it comes */
    br_cache_tree_path(a->cache, mhash, dest, sizeof(dest));
    br_cache_spare_path(a->cache, mhash, spare, sizeof(spare));
    int code = json_is_true(json_object_get(rec, "code"));
    if (br_replica_pull_tree(a->replica, json_integer_value(json_object_get(rec, "job")),
                             (int)json_integer_value(json_object_get(rec, "attempt")), mf,
                             json_string_value(json_object_get(rec, "grant")),
                             json_object_get(rec, "from"), dest, code ? spare : NULL,
                             br_cache_dir(a->cache), limit, err) < 0)
        return -1;
    json_object_del(rec, "room");
    return 0;
}

static void orders_fail(br_agent_t *a, const char *mhash, const char *error);

static json_t *order_trees(json_t *code, json_t *data, json_t *image);

/* The trees of every order that waits for its trees, as order_trees lists them: none
 * leaves the cache to make room for a pull, though it came already (the order's
 * own fetching entry waits only for the rest). A new array. */
static json_t *orders_trees(br_agent_t *a)
{
    json_t *all = json_array(), *f;
    size_t i;
    json_array_foreach(a->fetching, i, f) {
        json_t *body = json_object_get(f, "body");
        json_t *t = order_trees(json_object_get(body, "code"), json_object_get(body, "data"),
                                json_object_get(body, "image_archive"));
        json_array_extend(all, t);
        json_decref(t);
    }
    return all;
}

/* Whether an order waiting for its trees waits for tree mhash. */
static int awaited(br_agent_t *a, const char *mhash)
{
    json_t *f, *h;
    size_t i, j;
    json_array_foreach(a->fetching, i, f)
        json_array_foreach(json_object_get(f, "wait"), j, h)
            if (json_is_string(json_object_get(h, "hash")) &&
                strcmp(json_string_value(json_object_get(h, "hash")), mhash) == 0)
                return 1;
    return 0;
}

static int by_turn(const void *x, const void *y)
{
    json_int_t a = json_integer_value(json_object_get(*(json_t *const *)x, "turn"));
    json_int_t b = json_integer_value(json_object_get(*(json_t *const *)y, "turn"));
    return a < b ? -1 : a > b;
}

/* The pulls that wait for room, tried again in the order they began to wait (a pull
 * ended): the first that still does not fit keeps the others waiting behind it. */
static void pulls_wanting_room(br_agent_t *a)
{
    json_t *v, **list = calloc(json_object_size(a->pulls) + 1, sizeof(*list));
    const char *k;
    size_t n = 0;
    if (!list)
        return; /* (tried again when the next pull ends) */
    json_object_foreach(a->pulls, k, v)
        if (json_object_get(v, "room") &&
            (list[n] = json_pack("{s:s, s:O}", "hash", k, "turn", json_object_get(v, "room"))))
            n++;
    qsort(list, n, sizeof(list[0]), by_turn);
    json_t *also = n ? orders_trees(a) : NULL;
    for (size_t i = 0; i < n; i++) {
        const char *mhash = json_string_value(json_object_get(list[i], "hash"));
        json_t *rec = json_object_get(a->pulls, mhash);
        br_err_t err;
        if (!rec || !json_object_get(rec, "room"))
            continue;
        if (json_integer_value(json_object_get(rec, "job")) > 0 && !awaited(a, mhash)) {
            fprintf(stderr, "bramble-agent: tree %.16s... no longer waits for room: no "
                            "order wants it now\n", mhash);
            json_object_del(a->pulls, mhash); /* (its order was killed, or failed) */
            continue;
        }
        if (pull_when_room(a, mhash, also, &err) < 0) {
            json_object_del(a->pulls, mhash);
            orders_fail(a, mhash, err.text);
        } else if (json_object_get(json_object_get(a->pulls, mhash), "room")) {
            break; /* (still waits: those behind it too) */
        }
    }
    json_decref(also);
    for (size_t i = 0; i < n; i++)
        json_decref(list[i]);
    free(list);
}

/* Pull the tree mf (a truncated manifest: its summary and listing) into the cache,
 * unless it is being pulled already. 0, or -1 with err. */
static int pull_tree(br_agent_t *a, json_int_t job, int attempt, json_t *mf,
                     const char *grant, json_t *from, int code, const json_t *also,
                     br_err_t *err)
{
    const char *mhash = json_string_value(json_object_get(mf, "hash"));
    json_t *going = json_object_get(a->pulls, mhash);
    char dest[4200];
    br_cache_tree_path(a->cache, mhash, dest, sizeof(dest));
    if (going && job > 0 && json_integer_value(json_object_get(going, "job")) == 0) {
        /* fetched as it is uploaded (tree.stage): a job waits for it now, ahead of
         * the pulls no job waits for; should it fail (its stage ended), this job's
         * own grant fetches the rest */
        json_object_set_new(going, "job", json_integer(job));
        json_object_set_new(going, "attempt", json_integer(attempt));
        json_object_set_new(going, "grant", json_string(grant));
        json_object_set_new(going, "staged", json_true());
        br_replica_hurry_tree(a->replica, dest);
    }
    if (going)
        return 0; /* another order asked for it first: it comes once */
    /* (what a pull from another node needs to be made again from the coordinator) */
    json_t *rec = json_pack("{s:I, s:i, s:O, s:s, s:b}", "job", job, "attempt", attempt,
                            "manifest", mf, "grant", grant, "code", code);
    if (rec && json_is_object(from))
        json_object_set(rec, "from", from);
    if (!rec || json_object_set_new(a->pulls, mhash, rec) < 0)
        return br_errf(err, ENOMEM, "out of memory");
    if (pull_when_room(a, mhash, also, err) < 0) {
        json_object_del(a->pulls, mhash);
        return -1;
    }
    return 0;
}

/* The trees an order needs: {"grant", "manifest", "what"} for its code, each data
 * set and its loaded image's archive. A new array. */
static json_t *order_trees(json_t *code, json_t *data, json_t *image)
{
    json_t *out = json_array(), *d;
    size_t i;
    if (code) {
        json_t *t = json_pack("{s:O, s:O, s:s, s:b}", "grant", json_object_get(code, "grant"),
                              "manifest", json_object_get(code, "manifest"), "what",
                              "its code", "code", 1);
        if (json_is_object(json_object_get(code, "from"))) /* a node that holds it, nearby */
            json_object_set(t, "from", json_object_get(code, "from"));
        json_array_append_new(out, t);
    }
    json_array_foreach(json_object_get(data, "sets"), i, d) {
        char what[200];
        snprintf(what, sizeof(what), "data set %s",
                 json_string_value(json_object_get(d, "set")));
        json_t *t = json_pack("{s:O, s:O, s:s}", "grant", json_object_get(data, "grant"),
                              "manifest", json_object_get(d, "manifest"), "what", what);
        if (json_is_object(json_object_get(d, "from"))) /* a node that holds it, nearby */
            json_object_set(t, "from", json_object_get(d, "from"));
        json_array_append_new(out, t);
    }
    if (image) {
        char what[200];
        snprintf(what, sizeof(what), "image %s",
                 json_string_value(json_object_get(image, "name")));
        json_t *t = json_pack("{s:O, s:O, s:s}", "grant", json_object_get(image, "grant"),
                              "manifest", json_object_get(image, "manifest"), "what", what);
        if (json_is_object(json_object_get(image, "from")))
            json_object_set(t, "from", json_object_get(image, "from"));
        json_array_append_new(out, t);
    }
    return out;
}

/* Whether every tree the order needs is here (0), some are now being pulled and the
 * order waits for them (1), or one cannot be had (-1 with err, naming it). */
static int trees_here(br_agent_t *a, br_msg_t *m, json_int_t job, int attempt, json_t *code,
                      json_t *data, json_t *image, br_err_t *err)
{
    if (fetching_at(a, job, attempt) >= 0)
        return 1; /* (a resent order) */
    json_t *trees = order_trees(code, data, image), *wait = json_array(), *t;
    size_t i;
    int rc = 0;
    json_int_t files = 0;
    json_array_foreach(trees, i, t) {
        json_t *mf = json_object_get(t, "manifest");
        const char *mhash = json_string_value(json_object_get(mf, "hash"));
        if (br_cache_has(a->cache, mhash))
            continue;
        if (pull_tree(a, job, attempt, mf, json_string_value(json_object_get(t, "grant")),
                      json_object_get(t, "from"), json_is_true(json_object_get(t, "code")),
                      trees, err) < 0) {
            br_err_prefix(err, "%s", json_string_value(json_object_get(t, "what")));
            rc = -1;
            break;
        }
        json_array_append_new(wait, json_pack("{s:O, s:O}", "hash", json_object_get(mf, "hash"),
                                              "what", json_object_get(t, "what")));
        files += json_integer_value(json_object_get(mf, "files"));
    }
    json_decref(trees);
    if (rc == 0 && json_array_size(wait)) {
        json_array_append_new(a->fetching,
                              json_pack("{s:I, s:i, s:O, s:I, s:O, s:i, s:i}", "job", job,
                                        "attempt", attempt, "body", br_msg_body(m), "since",
                                        (json_int_t)br_mono_ms(), "wait", wait, "received", 0,
                                        "deduped", 0));
        fprintf(stderr, "bramble-agent: job %lld attempt %d: fetching %zu tree(s) (%lld "
                        "files)\n", (long long)job, attempt, json_array_size(wait),
                (long long)files);
        rc = 1;
    }
    json_decref(wait);
    return rc;
}

/* job.run's (and job.fetch's) "code": {"grant", "manifest": {"hash"...}}. */
static int code_check(const json_t *code, br_err_t *err)
{
    if (!json_is_string(json_object_get(code, "grant")) ||
        !json_is_string(json_object_get(json_object_get(code, "manifest"), "hash")))
        return br_errf(err, EPROTO, "code must be {\"grant\", \"manifest\"}");
    return 0;
}

/* job.run's "image_archive": {"grant", "name", "image_id", "manifest": {"hash"}}: a
 * loaded image's archive (podman's ID for it: 64 hex digits). */
static int image_check(const json_t *img, br_err_t *err)
{
    const char *id = json_string_value(json_object_get(img, "image_id"));
    if (!json_is_string(json_object_get(img, "grant")) ||
        !br_spec_image_ok(json_string_value(json_object_get(img, "name"))) || !id ||
        strlen(id) != 64 || strspn(id, "0123456789abcdef") != 64 ||
        !json_is_string(json_object_get(json_object_get(img, "manifest"), "hash")))
        return br_errf(err, EPROTO, "job.run: image_archive: {\"grant\", \"name\", "
                                    "\"image_id\": 64 hex digits, \"manifest\"}");
    return 0;
}

/* job.run's "data": {"grant", "sets": [{"name", "set", "path", "manifest": {"hash"}}]},
 * at most BR_SPEC_MAX_DATA sets, each at a path a data set may be mounted at. */
static int data_check(const json_t *data, br_err_t *err)
{
    json_t *sets = json_object_get(data, "sets"), *d;
    size_t i;
    if (!json_is_string(json_object_get(data, "grant")) || !json_is_array(sets) ||
        json_array_size(sets) > BR_SPEC_MAX_DATA)
        return br_errf(err, EPROTO, "job.run: data: {\"grant\", \"sets\": [at most %d]}",
                       BR_SPEC_MAX_DATA);
    json_array_foreach(sets, i, d) {
        const char *path = json_string_value(json_object_get(d, "path")), *why = NULL;
        if (!json_is_string(json_object_get(d, "set")) ||
            !json_is_string(json_object_get(json_object_get(d, "manifest"), "hash")) ||
            !br_spec_mount_ok(path, &why))
            return br_errf(err, EPROTO, "job.run: data.sets[%zu]: {\"set\", \"path\", "
                                        "\"manifest\"}%s%s", i, why ? ": path " : "",
                           why ? why : "");
    }
    return 0;
}

/* The mounts of an order's data sets, each tree's path in the cache in from[i]: pairs
 * into mounts (NULL-terminated). 0, or -1 with err. */
static int data_mounts(br_agent_t *a, json_t *data, const char **mounts,
                       char (*from)[4200], br_err_t *err)
{
    json_t *d;
    size_t i, n = 0;
    json_array_foreach(json_object_get(data, "sets"), i, d) {
        if (br_cache_mount_path(a->cache, json_object_get(d, "manifest"), from[i],
                                sizeof(from[i]), err) < 0) {
            br_err_prefix(err, "data set %s", json_string_value(json_object_get(d, "set")));
            return -1;
        }
        mounts[n++] = from[i];
        mounts[n++] = json_string_value(json_object_get(d, "path"));
    }
    mounts[n] = NULL;
    return 0;
}

static void run_order(br_agent_t *a, br_msg_t *m, int answer, json_t *fetched);

/* The line that runs a container job's setup (its environment env_dir not built
 * yet) before the job's own container, as cr (that container) but for its command:
 * the setup's runner (setuprun.h) with VIA the `podman run` of a container of the
 * same image, named with "-setup", that runs env_dir.setup (mounted read-only) in
 * the job's working directory, env_dir mounted. malloc'd, or NULL with err. */
static char *container_setup(br_agent_t *a, const br_container_run_t *cr,
                             const char *env_dir, const char *failed, br_err_t *err)
{
    char file[4300], run[8800];
    const char *ro[2 * BR_SPEC_MAX_DATA + 3];
    size_t n = 0, at = 0;
    snprintf(file, sizeof(file), "%s.setup", env_dir);
    for (; cr->ro && cr->ro[n] && cr->ro[n + 1] && n < 2 * BR_SPEC_MAX_DATA; n += 2) {
        ro[n] = cr->ro[n];
        ro[n + 1] = cr->ro[n + 1];
    }
    ro[n] = ro[n + 1] = file;
    ro[n + 2] = NULL;
    snprintf(run, sizeof(run), "/bin/sh ");
    at = strlen(run);
    if (br_steprun_quote(file, run, sizeof(run), &at) < 0)
        return br_errp(err, ENAMETOOLONG, "setup: the cache's path is too long");
    br_container_run_t in = *cr;
    in.command = run;
    in.ro = ro;
    in.name_suffix = "-setup";
    char *via = br_container_command(a->containers, &in, err);
    size_t len = via ? 3 * strlen(via) + 3 * 4400 : 0;
    char *line = via ? malloc(len) : NULL;
    if (via && (!line || br_setuprun_line(a->exe, env_dir, failed, via, line, len) < 0)) {
        free(line);
        line = br_errp(err, ENOMEM, "setup: could not put its runner before the command");
    }
    free(via);
    return line;
}

/* Where the archive of an order's loaded image is in the cache (image_check): into
 * out. 0, or -1 with err. */
static int archive_at(br_agent_t *a, const json_t *archive, char *out, size_t len,
                      br_err_t *err)
{
    char dir[4200];
    if (br_cache_mount_path(a->cache, json_object_get(archive, "manifest"), dir, sizeof(dir),
                            err) < 0) {
        br_err_prefix(err, "image %s", json_string_value(json_object_get(archive, "name")));
        return -1;
    }
    if ((size_t)snprintf(out, len, "%s/%s", dir, BR_IMAGE_ARCHIVE) >= len)
        return br_errf(err, ENAMETOOLONG, "the cache's path is too long");
    return 0;
}

/* The attempt ends before it started: job.exited with reason (and the log says so). */
static void end_unstarted(br_agent_t *a, json_int_t job, int attempt, const char *reason)
{
    drop_workdir(a, job, attempt);
    fprintf(stderr, "bramble-agent: job %lld attempt %d: %s\n", (long long)job, attempt,
            reason);
    send_msg(a, BR_MSG_REQUEST, "job.exited",
             json_pack("{s:I, s:i, s:n, s:n, s:s}", "job", job, "attempt", attempt,
                       "exit_code", "signal", "reason", reason),
             NULL, 0);
}

/* job.fetched: the trees a gang's rank needs are here (how: {"received", "deduped",
 * "seconds", "from"?}). */
static void say_fetched(br_agent_t *a, json_int_t job, int attempt, json_t *how)
{
    send_msg(a, BR_MSG_REQUEST, "job.fetched",
             json_pack("{s:I, s:i, s:O}", "job", job, "attempt", attempt, "code", how), NULL,
             0);
}

/* job.fetch: a gang's rank fetches its trees before any rank starts (the
 * coordinator's barrier); job.fetched says they are here. */
static void on_fetch_trees(br_agent_t *a, br_msg_t *m)
{
    json_int_t job;
    int attempt, rank;
    json_t *code = NULL, *data = NULL, *image = NULL;
    br_err_t err = {0};
    if (br_msg_unpack(m, &err, "{s:I, s:i, s:i, s?o, s?o, s?o}", "job", &job, "attempt",
                      &attempt, "rank", &rank, "code", &code, "data", &data, "image_archive",
                      &image) < 0 ||
        (code && code_check(code, &err) < 0) || (data && data_check(data, &err) < 0) ||
        (image && image_check(image, &err) < 0)) {
        reply(a, m, EPROTO, err.text);
        return;
    }
    reply(a, m, 0, NULL);
    int here = trees_here(a, m, job, attempt, code, data, image, &err);
    if (here == 1) { /* (a resent order waits with the first) */
        int i = fetching_at(a, job, attempt);
        json_object_set_new(json_array_get(a->fetching, (size_t)i), "prefetch", json_true());
    } else if (here == 0) {
        json_t *how = json_pack("{s:i, s:i, s:f}", "received", 0, "deduped", 0, "seconds", 0.0);
        say_fetched(a, job, attempt, how);
        json_decref(how);
    } else {
        char reason[BR_ERR_TEXT + 32];
        snprintf(reason, sizeof(reason), "could not start: %s", err.text);
        end_unstarted(a, job, attempt, reason);
    }
}

/* tree.stage: a job's code is being uploaded, and this node is where the job would
 * go: fetch it as it comes (the coordinator answers EINPROGRESS for files still on
 * their way), so that the job finds it here. No job waits for it yet: a job.run for
 * the same tree waits on this pull, and takes it over (pull_tree). */
static void on_stage_tree(br_agent_t *a, br_msg_t *m)
{
    json_t *mf;
    const char *grant;
    br_err_t err = {0};
    if (br_msg_unpack(m, &err, "{s:s, s:o}", "grant", &grant, "manifest", &mf) < 0 ||
        !json_is_string(json_object_get(mf, "hash"))) {
        reply(a, m, EPROTO, err.text[0] ? err.text : "tree.stage: {\"grant\", \"manifest\"}");
        return;
    }
    reply(a, m, 0, NULL);
    if (br_cache_has(a->cache, json_string_value(json_object_get(mf, "hash"))))
        return;
    if (pull_tree(a, 0, 0, mf, grant, NULL, 1, NULL, &err) < 0)
        fprintf(stderr, "bramble-agent: a tree staged while it is uploaded: %s\n", err.text);
}

static void on_run(br_agent_t *a, br_msg_t *m)
{
    run_order(a, m, 1, NULL);
}

/* job.run: the order m, answered when answer (not when it is taken up again once its
 * code came; fetched then says how: {"received", "deduped", "seconds"}). */
static void run_order(br_agent_t *a, br_msg_t *m, int answer, json_t *fetched)
{
    json_int_t job;
    int attempt, rank;
    const char *name, *command;
    json_t *workdir, *env, *ckpt = NULL, *tasks = NULL, *service = NULL, *progress = NULL;
    json_t *code = NULL; /* {"grant", "manifest"}: the job's code, from the coordinator */
    json_t *data = NULL; /* {"grant", "sets": [{"name", "set", "path", "manifest"}]} */
    json_t *outputs = NULL; /* [pattern...]: kept from the working dir at the end */
    json_t *setup = NULL;   /* {"command", "files"}: run first, its result cached */
    const char *image = NULL; /* it runs in a container of this image (container.h) */
    json_t *archive = NULL; /* {"grant", "name", "image_id", "manifest"}: image is one
                             * loaded into bramble, its archive fetched like a data set */
    char archive_path[4300] = "";
    char code_dir[4200] = "";
    br_envcache_env_t envc;
    json_int_t owner_id = 0; /* whose job (PROTOCOL.md section 6) */
    const char *unix_user = NULL; /* the local account the admin mapped the owner to */
    br_err_t err = {0};
    const char *fault = "";
    const char *node_address = NULL;
    if (br_msg_unpack(m, &err,
                      "{s:I, s:i, s:s, s:i, s:s, s:o, s:o, s?I, s?s, s?o, s?o, s?o, s?o, s?s,"
                      " s?o, s?o, s?o, s?o, s?s, s?o}",
                      "job", &job, "attempt", &attempt, "name", &name, "rank", &rank,
                      "command", &command, "workdir", &workdir, "env", &env, "owner_id",
                      &owner_id, "unix_user", &unix_user, "checkpoint", &ckpt, "tasks",
                      &tasks, "service", &service, "progress", &progress, "node_address",
                      &node_address, "code", &code, "outputs", &outputs, "data", &data,
                      "setup", &setup, "image", &image, "image_archive", &archive) < 0 ||
        (image && !br_spec_image_ok(image)) || (archive && !image) ||
        (archive && image_check(archive, &err) < 0) ||
        (setup && (!json_is_string(json_object_get(setup, "command")) ||
                   !json_is_array(json_object_get(setup, "files")))) ||
        (data && data_check(data, &err) < 0) ||
        (outputs && !json_is_array(outputs)) ||
        !json_is_object(env) || (tasks && !json_is_array(tasks)) ||
        (code && code_check(code, &err) < 0) || (service && !json_is_object(service)) ||
        (progress && !json_is_integer(json_object_get(progress, "timeout"))) ||
        br_resume_check(ckpt, &err) < 0) {
        if (answer)
            reply(a, m, EPROTO, err.text[0] ? err.text : "job.run: env and service must be "
                                                         "objects, tasks an array, progress "
                                                         "{\"timeout\": ms}, code "
                                                         "{\"grant\", \"manifest\"} and "
                                                         "setup {\"command\", \"files\"}");
        return;
    }
    json_t *want_port = json_object_get(service, "port");
    if (answer)
        reply(a, m, 0, NULL);
    if (find_attempt(a, job, attempt))
        return; /* a resent order: already running */
    int here = 0;
    if ((code || data || archive) &&
        (here = trees_here(a, m, job, attempt, code, data, archive, &err)) == 1)
        return; /* taken up again once its trees are here (tree_fetched) */
    const char *mounts[2 * BR_SPEC_MAX_DATA + 1] = {NULL};
    char mount_from[BR_SPEC_MAX_DATA][4200];
    const char *resume = NULL;
    br_jobuser_t who;
    br_ckpt_found_t newer = {.step = -1};
    if (here < 0) {
        /* (err names the tree) */
    } else if ((data && data_mounts(a, data, mounts, mount_from, &err) < 0) ||
               (archive && archive_at(a, archive, archive_path, sizeof(archive_path),
                                      &err) < 0)) {
        /* a tree that left the cache meanwhile, one it cannot open to the job, or one
         * with a damaged file: then fetched again (once), and never mounted (the
         * damaged one set aside goes now, unless a running job mounts it) */
        if (err.errnum == EBADMSG)
            sweep_gone(a);
        if (err.errnum == EBADMSG && !fetched) {
            fprintf(stderr, "bramble-agent: job %lld attempt %d: %s: fetching it again\n",
                    (long long)job, attempt, err.text);
            if (trees_here(a, m, job, attempt, code, data, archive, &err) == 1)
                return;
        }
    } else if (a->natt == MAX_ATTEMPTS) {
        br_errf(&err, EBUSY, "this node runs %d attempts already", MAX_ATTEMPTS);
        fault = "node_full"; /* not the job's failure: it is placed again */
    } else if (job_user(a, owner_id, unix_user, &who, &err) < 0) {
        fault = "job_user"; /* the node's setup, not the job, is at fault: elsewhere */
    } else if ((resume = resume_from(json_is_object(ckpt) ? ckpt : NULL, job, attempt, env,
                                     &who, &newer)) &&
               *resume && access(resume, F_OK) < 0) {
        /* never start from zero when the checkpoint to resume from is out of sight */
        br_errf(&err, ENOENT, "checkpoint %s is not visible on this node", resume);
        fault = "checkpoint_not_visible";
    } else if (json_is_integer(want_port) && !try_port((int)json_integer_value(want_port))) {
        br_errf(&err, EADDRINUSE, "port %lld is in use on this node",
                (long long)json_integer_value(want_port));
        fault = "port_busy";
    } else if (br_jobuser_make_dir(
                   &who, json_string_value(json_object_get(ckpt, "dir")), &err) < 0) {
        /* its checkpoint dir cannot be had by its uid: said now, not deep in the job */
    } else if (code && br_cache_workdir(a->cache, job, attempt, json_object_get(code, "manifest"),
                                        who.uid, who.gid, code_dir, sizeof(code_dir),
                                        &err) < 0) {
        /* its own copy of the code could not be made (a full disk), or the cache's
         * copy is damaged: then it is fetched again (once), and never run (the
         * damaged one set aside goes now) */
        if (err.errnum == EBADMSG)
            sweep_gone(a);
        if (err.errnum == EBADMSG && !fetched) {
            fprintf(stderr, "bramble-agent: job %lld attempt %d: %s: fetching it again\n",
                    (long long)job, attempt, err.text);
            if (trees_here(a, m, job, attempt, code, data, archive, &err) == 1)
                return;
        }
    } else if (image && !br_container_runtime(a->containers)) {
        br_errf(&err, ENOTSUP, "this node runs no containers (its agent found no podman, or "
                               "runs with --container-runtime none)");
    } else if (setup && br_envcache_prepare(br_cache_dir(a->cache), setup,
                                            code_dir[0] ? code_dir : NULL,
                                            archive ? json_string_value(json_object_get(
                                                          archive, "image_id"))
                                                    : image,
                                            who.uid, who.gid, &envc, &err) < 0) {
        /* a setup file that is not in its code (err names it), a full disk */
    } else {
        char key[48];
        attempt_key(job, attempt, key, sizeof(key));
        char *with_setup = NULL; /* the command, its setup's runner first */
        char setup_failed[sizeof(envc.user_dir) + 64] = "";
        if (setup) {
            json_object_set_new(env, "BRAMBLE_ENV_DIR", json_string(envc.dir));
            char line[3 * sizeof(envc.dir)], *failed = setup_failed;
            snprintf(setup_failed, sizeof(setup_failed), "%s/.failed-%lld.%d", envc.user_dir,
                     (long long)job, attempt);
            if (!envc.ready && image) /* (its runner goes before the container's) */
                json_object_set_new(attempt_extra(a, key), "failed", json_string(failed));
            else if (!envc.ready &&
                br_setuprun_line(a->exe, envc.dir, failed, NULL, line, sizeof(line)) == 0 &&
                (with_setup = malloc(strlen(line) + strlen(command) + 1))) {
                strcpy(with_setup, line);
                strcat(with_setup, command);
                command = with_setup;
                json_object_set_new(attempt_extra(a, key), "failed", json_string(failed));
            } else if (!envc.ready && !image) { /* (never run the command without it) */
                br_errf(&err, ENOMEM, "setup: could not put its runner before the command");
                command = NULL;
            }
        }
        if (code_dir[0]) /* the attempt's own copy of the code, its working dir */
            json_object_set_new(env, "BRAMBLE_CODE_DIR", json_string(code_dir));
        json_object_set_new(env, "BRAMBLE_AGENT_SOCK",
                            json_string(br_localsock_address(a->local)));
        json_object_set_new(env, "BRAMBLE_AGENT_ID", json_string(a->agent_id));
        /* gloo and NCCL talk over the interface that holds the node's address, not
         * whatever the host name resolves to (often 127.0.1.1), unless the spec
         * says otherwise */
        char ifname[64];
        if (node_address && br_inventory_iface_of(node_address, ifname, sizeof(ifname)) == 0)
            for (int k = 0; k < 2; k++) {
                const char *var = k ? "NCCL_SOCKET_IFNAME" : "GLOO_SOCKET_IFNAME";
                if (!json_object_get(env, var))
                    json_object_set_new(env, var, json_string(ifname));
            }
        /* what the keeper knows this run's jobs by */
        json_object_set_new(env, KEEPER_ENV, json_string(br_keeper_run_id(a->keeper)));
        /* rank 0 chooses the gang's rendezvous port; the coordinator hands it to
         * the other ranks once this node says it started */
        int port = 0;
        char text[16];
        if (rank == 0 && !json_object_get(env, "MASTER_PORT")) {
            port = try_port(0);
            snprintf(text, sizeof(text), "%d", port);
            json_object_set_new(env, "MASTER_PORT", json_string(text));
        }
        if (service) { /* a service replica: its PORT is the port to report */
            port = json_is_integer(want_port) ? (int)json_integer_value(want_port)
                                              : try_port(0);
            snprintf(text, sizeof(text), "%d", port);
            json_object_set_new(env, "PORT", json_string(text));
        }
        if (who.home[0] && !json_object_get(env, "HOME"))
            json_object_set_new(env, "HOME", json_string(who.home));
        br_attempt_opts_t o = {
            .job = job,
            .attempt = attempt,
            .command = command,
            .workdir = json_is_string(workdir) ? json_string_value(workdir)
                       : code_dir[0]          ? code_dir
                                              : NULL,
            .env = env,
            .tasks = tasks,
            .default_rank = rank,
            .user = who.user[0] ? who.user : NULL,
            .node = a->s->name,
            .checkpoint = json_is_object(ckpt) ? ckpt : NULL,
            .exit_dir = br_runstate_dir(a->runstate),
            .mounts = mounts[0] ? mounts : NULL};
        if (data || archive) { /* its data sets and image stay in the cache while it runs */
            json_t *hashes = json_array(), *d;
            size_t i;
            json_array_foreach(json_object_get(data, "sets"), i, d)
                json_array_append(hashes, json_object_get(json_object_get(d, "manifest"),
                                                          "hash"));
            if (archive)
                json_array_append(hashes, json_object_get(json_object_get(archive, "manifest"),
                                                          "hash"));
            json_object_set_new(a->mounted, key, hashes);
        }
        if (setup)
            json_object_set_new(attempt_extra(a, key), "env", json_string(envc.dir));
        char *in_container = NULL; /* the command, as podman runs it */
        if (image && o.command) {
            /* a loaded image by its ID: the name may be another's in a registry */
            const char *ref = archive ? json_string_value(json_object_get(archive, "image_id"))
                                      : image;
            if (br_container_calibrate(a->containers, 5000) > 0)
                fprintf(stderr, "bramble-agent: containers: the limits podman may give "
                                "them here were tried (nproc %llu)\n",
                        br_container_nproc(a->containers));
            const char *rw[4] = {NULL};
            int nrw = 0;
            const char *ckdir = json_string_value(json_object_get(ckpt, "dir"));
            if (o.workdir)
                rw[nrw++] = o.workdir;
            if (ckdir && (!o.workdir || strcmp(ckdir, o.workdir) != 0))
                rw[nrw++] = ckdir;
            if (setup) /* its environment, where the host's jobs have it */
                rw[nrw++] = envc.dir;
            const char *uuids[BR_CONTAINER_GPUS];
            int ngpus = br_gpus_count(a->gpus);
            for (int g = 0; g < ngpus && g < BR_CONTAINER_GPUS; g++)
                uuids[g] = br_gpus_get(a->gpus, g)->uuid;
            br_container_run_t cr = {.image = ref, .command = o.command,
                                     .workdir = o.workdir, .uid = who.uid, .gid = who.gid,
                                     .env = env, .tasks = tasks, .rw = rw, .ro = o.mounts,
                                     .gpu_uuids = uuids,
                                     .ngpus = ngpus < BR_CONTAINER_GPUS ? ngpus : BR_CONTAINER_GPUS};
            in_container = br_container_command(a->containers, &cr, &err);
            /* its setup, when not built yet, in a container of the same image first */
            char *setup_line = in_container && setup && !envc.ready
                                   ? container_setup(a, &cr, envc.dir, setup_failed, &err)
                                   : NULL;
            /* the image is made sure of first of all, inside the task (imagefetch.h) */
            char fetch[3 * 4400], failed[4300];
            snprintf(failed, sizeof(failed), "%s/image-failed-%lld.%d",
                     br_runstate_dir(a->runstate), (long long)job, attempt);
            char *all = NULL;
            if (in_container && setup && !envc.ready && !setup_line) {
                free(in_container); /* (never run the command without its setup) */
                in_container = NULL;
            } else if (in_container &&
                       (br_imagefetch_line(a->exe, failed, ref, archive ? archive_path : NULL,
                                           fetch, sizeof(fetch)) < 0 ||
                        !(all = malloc(strlen(fetch) + (setup_line ? strlen(setup_line) : 0) +
                                       strlen(in_container) + 1)))) {
                br_errf(&err, ENOMEM, "image: could not put its fetch before the command");
                free(in_container);
                in_container = NULL;
            } else if (all) {
                strcpy(all, fetch);
                strcat(all, setup_line ? setup_line : "");
                strcat(all, in_container);
                free(in_container);
                in_container = all;
                json_object_set_new(attempt_extra(a, key), "image_failed", json_string(failed));
            }
            free(setup_line);
            json_object_set_new(attempt_extra(a, key), "container",
                                json_pack("{s:I, s:I, s:s?}", "uid", (json_int_t)who.uid,
                                          "gid", (json_int_t)who.gid, "workdir", o.workdir));
            o.command = in_container;
            o.mounts = NULL; /* (podman mounts them, into the container) */
            if (geteuid() == 0) /* podman as root; the job's uid inside (--user) */
                o.user = NULL;
        }
        br_attempt_t *t = o.command ? br_attempt_start(&o, &err) : NULL;
        free(with_setup);
        free(in_container);
        if (!t) {
            json_object_del(a->mounted, key);
            json_object_del(a->extras, key);
        }
        br_err_t cerr;
        if (t && br_attempt_ckpt(t) &&
            br_ckpt_set_user(br_attempt_ckpt(t), who.uid, who.gid, &cerr) < 0)
            fprintf(stderr, "bramble-agent: job %lld: checkpoint watcher: %s\n",
                    (long long)job, cerr.text);
        const char *dir = o.workdir ? o.workdir : NULL;
        if (t && json_array_size(outputs) && dir) { /* kept at its end (outputs_kept) */
            json_object_set_new(a->keep, key,
                                json_pack("{s:s, s:O, s:I, s:I, s:s}", "dir", dir, "patterns",
                                          outputs, "uid", (json_int_t)who.uid, "gid",
                                          (json_int_t)who.gid, "state", "wait"));
        }
        if (t) {
            a->att[a->natt++] = t;
            br_attempt_set_port(t, port);
            if (service)
                start_health(t, service, port);
            start_hang(t, progress);
            save_attempt(a, t, ckpt, service);
            json_t *body = json_pack("{s:I, s:i, s:i}", "job", job, "attempt", attempt,
                                     "pid", (int)br_attempt_pid(t));
            if (port)
                json_object_set_new(body, "port", json_integer(port));
            if (code || data || archive) /* what had to be fetched: the coordinator says so */
                json_object_set_new(body, "code",
                                    fetched ? json_incref(fetched)
                                            : json_pack("{s:i, s:i, s:f}", "received", 0,
                                                        "deduped", 0, "seconds", 0.0));
            if (newer.step >= 0) { /* said first: the gang's other ranks resume from it */
                json_object_set_new(body, "resumed",
                                    json_pack("{s:s, s:I}", "path", newer.path, "step",
                                              (json_int_t)newer.step));
            }
            send_msg(a, BR_MSG_REQUEST, "job.started", body, NULL, 0);
            if (newer.step >= 0) { /* counted as this attempt's, once hashed */
                ckpt_ctx_t ctx = {a, t, br_ckpt_user(br_attempt_ckpt(t))};
                count_checkpoint(&ctx, newer.path, newer.step, newer.size,
                                 newer.mtime_ms);
            }
            return;
        }
    }
    char reason[BR_ERR_TEXT + 32];
    snprintf(reason, sizeof(reason), "could not start: %s", err.text);
    drop_workdir(a, job, attempt); /* (a copy of its code made before the failure) */
    json_t *body = json_pack("{s:I, s:i, s:n, s:n, s:s}", "job", job, "attempt", attempt,
                             "exit_code", "signal", "reason", reason);
    if (*fault)
        json_object_set_new(body, "fault", json_string(fault));
    send_msg(a, BR_MSG_REQUEST, "job.exited", body, NULL, 0);
}

/* The attempt an order {"job","attempt"} names (NULL when this agent runs no such
 * attempt). A malformed order is answered here and -1 returned. */
static int order_target(br_agent_t *a, br_msg_t *m, br_attempt_t **t)
{
    json_int_t job;
    int attempt;
    br_err_t err;
    if (br_msg_unpack(m, &err, "{s:I, s:i}", "job", &job, "attempt", &attempt) < 0) {
        reply(a, m, EPROTO, err.text);
        return -1;
    }
    *t = find_attempt(a, job, attempt);
    return 0;
}

static void on_kill(br_agent_t *a, br_msg_t *m)
{
    br_attempt_t *t;
    int sig = 0, attempt;
    json_int_t job, grace = 0;
    br_err_t err = {0};
    if (br_msg_unpack(m, &err, "{s:I, s:i, s?i, s?I}", "job", &job, "attempt", &attempt,
                      "signal", &sig, "grace", &grace) < 0 ||
        sig < 0 || sig >= 65 || grace < 0) {
        reply(a, m, EPROTO, err.text[0] ? err.text : "job.kill: signal 1..64, grace >= 0 ms");
        return;
    }
    t = find_attempt(a, job, attempt);
    int waiting = fetching_at(a, job, attempt);
    if (waiting >= 0) { /* it never started: it ends here (its code still comes) */
        json_array_remove(a->fetching, (size_t)waiting);
        fprintf(stderr, "bramble-agent: job %lld attempt %d: killed, as ordered, while "
                        "its code came\n", (long long)job, attempt);
        send_msg(a, BR_MSG_REQUEST, "job.exited",
                 json_pack("{s:I, s:i, s:n, s:n, s:s}", "job", job, "attempt", attempt,
                           "exit_code", "signal", "reason",
                           "killed, as ordered, before it started (its code was coming)"),
                 NULL, 0);
    }
    if (t && sig > 0) { /* asked to stop: the signal now, SIGKILL when the grace is over */
        if (!br_attempt_done(t)) {
            if (sig == SIGTERM || sig == SIGKILL) /* (not a preemption's USR1) */
                br_streams_job_stopping(a->streams, job, attempt);
            int n = br_attempt_stop(t, sig, grace, br_mono_ms());
            fprintf(stderr, "bramble-agent: job %lld attempt %d: signal %d sent to %d "
                            "process(es), as ordered; killed in %lld ms if still there\n",
                    (long long)br_attempt_job(t), br_attempt_number(t), sig, n,
                    (long long)grace);
        }
        reply(a, m, 0, NULL);
        return;
    }
    if (t) { /* its checkpoints cannot count any more: stop hashing them */
        char group[48];
        hash_group(t, group, sizeof(group));
        br_manifest_cancel(a->hasher, group);
    }
    if (t && !br_attempt_done(t) && !br_attempt_reason(t)[0]) { /* not stopping yet */
        fprintf(stderr, "bramble-agent: job %lld attempt %d: killing it, as ordered\n",
                (long long)br_attempt_job(t), br_attempt_number(t));
        br_attempt_set_reason(t, KILLED_ON_REQUEST);
        if (br_attempt_kill(t, 5000) < 0)
            fprintf(stderr, "bramble-agent: job %lld: processes survived SIGKILL\n",
                    (long long)br_attempt_job(t));
    }
    reply(a, m, 0, NULL);
}

static void on_thaw(br_agent_t *a, br_msg_t *m)
{
    br_attempt_t *t;
    if (order_target(a, m, &t) < 0)
        return;
    if (t && br_attempt_frozen(t)) {
        br_attempt_thaw(t);
        fprintf(stderr, "bramble-agent: job %lld attempt %d thawed: still current\n",
                (long long)br_attempt_job(t), br_attempt_number(t));
    }
    reply(a, m, 0, NULL);
}

/* A gateway could not use a replica: check it now, and quickly after (health.h),
 * so one that stopped answering is stopped, and restarted, within seconds. */
static void on_check(br_agent_t *a, br_msg_t *m)
{
    br_attempt_t *t;
    if (order_target(a, m, &t) < 0)
        return;
    br_health_t *h = t && !br_attempt_done(t) ? br_attempt_health(t) : NULL;
    if (h) {
        br_health_suspect(h, br_mono_ms());
        fprintf(stderr, "bramble-agent: job %lld attempt %d: a gateway could not use it; "
                        "checking its health now\n",
                (long long)br_attempt_job(t), br_attempt_number(t));
    }
    reply(a, m, 0, NULL);
}

/* Fencing: out of touch with the coordinator for fence_ms, freeze every attempt
 * before the coordinator (after node_timeout) can start it elsewhere. A service's
 * replicas serve on (but_replicas): two copies of a replica for a while cost
 * nothing, and a model that stops answering whenever the coordinator is away
 * would. */
/* Freeze every attempt still running (but_replicas: but service replicas); how
 * many were. */
static int freeze_all(br_agent_t *a, int but_replicas)
{
    int n = 0;
    for (int i = 0; i < a->natt; i++) {
        br_attempt_t *t = a->att[i];
        if (!br_attempt_frozen(t) && !br_attempt_done(t) &&
            !(but_replicas && br_attempt_is_replica(t))) {
            br_attempt_freeze(t);
            n++;
        }
    }
    return n;
}

static void fence(br_agent_t *a, int64_t now)
{
    if (now - a->last_heard <= a->fence_ms)
        return;
    int n = freeze_all(a, 1);
    if (n)
        fprintf(stderr,
                "bramble-agent: no word from the coordinator for %.1fs: froze %d job(s) "
                "until it says whether they are still theirs\n",
                (double)(now - a->last_heard) / 1000.0, n);
}

/* --- receiving ----------------------------------------------------------------- */

static void set_fatal(br_agent_t *a, const char *fmt, const char *text)
{
    snprintf(a->fatal_text, sizeof(a->fatal_text), fmt, text);
    a->fatal = 1;
    a->stop = 1;
}

/* `bramble node rotate-key`: make a new key pair, keep it beside the credential, and
 * ask the coordinator to take it (node.key); nothing else is sent meanwhile. */
static void on_rekey(br_agent_t *a, br_msg_t *m)
{
    br_cred_t next = a->s->cred;
    br_err_t err;
    char path[1100];
    snprintf(path, sizeof(path), "%s/credential.new", a->s->data_dir);
    if (a->rekey_seq) {
        reply(a, m, EBUSY, "a new key is being made already");
        return;
    }
    if (br_keypair(next.public_key, next.secret_key, &err) < 0 ||
        br_cred_save(path, &next, &err) < 0) {
        reply(a, m, err.errnum ? err.errnum : EIO, err.text);
        sodium_memzero(&next, sizeof(next));
        return;
    }
    reply(a, m, 0, NULL);
    br_strlcpy(a->rekey_pub, next.public_key, sizeof(a->rekey_pub));
    br_strlcpy(a->rekey_sec, next.secret_key, sizeof(a->rekey_sec));
    sodium_memzero(&next, sizeof(next));
    br_msg_t *k = br_msg_new(BR_MSG_REQUEST, "node.key", a->rekey_seq = ++a->seq);
    if (k)
        br_msg_set_body(k, json_pack("{s:s}", "public_key", a->rekey_pub));
    if (!k || send_now(a, k) < 0) {
        fprintf(stderr, "bramble-agent: could not ask for a new key; keeping this one\n");
        a->rekey_seq = 0;
        unlink(path);
    }
    br_msg_destroy(&k);
}

/* The coordinator answered node.key: on yes the new key is this node's from now on
 * (saved, and a new connection made with it); on no the old one stays. */
static void rekeyed(br_agent_t *a, int failed, const br_err_t *why)
{
    char next[1100], path[1100];
    snprintf(next, sizeof(next), "%s/credential.new", a->s->data_dir);
    snprintf(path, sizeof(path), "%s/credential", a->s->data_dir);
    a->rekey_seq = 0;
    if (failed || rename(next, path) < 0) {
        fprintf(stderr, "bramble-agent: key not rotated: %s\n",
                failed ? why->text : strerror(errno));
        unlink(next);
    } else {
        br_err_t err;
        br_strlcpy(a->key_pub, a->rekey_pub, sizeof(a->key_pub));
        br_strlcpy(a->key_sec, a->rekey_sec, sizeof(a->key_sec));
        br_sock_close(&a->monitor);
        br_sock_close(&a->sock);
        if (open_socket(a, &err) < 0) {
            set_fatal(a, "after a key rotation: %s", err.text);
        } else {
            fprintf(stderr, "bramble-agent: this node has a new key; the old one is "
                            "refused from now on\n");
            /* its overlay key too: the next hello says the new one (the node keeps
             * its overlay address) */
            if (br_overlay_rotate(a->overlay, &err) < 0)
                fprintf(stderr, "bramble-agent: overlay key not rotated: %s\n", err.text);
            else
                json_object_set_new(a->inventory, "overlay", br_overlay_hello(a->overlay));
            a->hello_acked = 0;
            send_hello(a);
        }
    }
    sodium_memzero(a->rekey_sec, sizeof(a->rekey_sec));
}

/* A coordinator that predates a heartbeat field refuses the heartbeat (EPROTO
 * naming the field): leave that field out from now on. 1 when err named one that
 * was still sent. ("gpus": the GPUs from hello stand; "cost_per_hour": the rate
 * from hello stands.) */
static int drop_heartbeat_field(br_agent_t *a, const br_err_t *err)
{
    const struct {
        const char *key, *also; /* either named in the error */
        int *dropped;
        const char *without;
    } fields[] = {
        {"gpus", NULL, &a->hb_plain, "GPU figures"},
        {"cost_per_hour", "power_watts", &a->hb_nocost, "cost figures"},
        {"disk", NULL, &a->hb_nodisk, "disk figures"},
        {"pulling", NULL, &a->hb_nopulling, "the pulls' progress"},
        {"trees", NULL, &a->hb_notrees, "the cache's trees"},
        {"envs", NULL, &a->hb_noenvs, "the cache's environments"},
        {"overlay_reach", NULL, &a->hb_noreach, "the overlay peers reached"},
    };
    for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++) {
        if (*fields[i].dropped || (!strstr(err->text, fields[i].key) &&
                                   !(fields[i].also && strstr(err->text, fields[i].also))))
            continue;
        *fields[i].dropped = 1;
        fprintf(stderr, "bramble-agent: the coordinator does not take \"%s\" in "
                        "node.heartbeat; heartbeats go without %s\n",
                fields[i].key, fields[i].without);
        return 1;
    }
    return 0;
}

/* The answer to a chunk of output (ship_log): taken, or kept to be sent again. Its
 * attempt's end, which waited for it, is reported at once when it was the last. */
static void log_answered(br_agent_t *a, uint32_t seq, const br_err_t *err)
{
    int errnum = err ? err->errnum : 0;
    if (errnum == EPROTO && strstr(err->text, "wrong message kind") && !a->log_plain) {
        a->log_plain = 1; /* a coordinator that predates the answer */
        fprintf(stderr, "bramble-agent: the coordinator takes job.log only as an event; "
                        "output that cannot be stored there is lost\n");
    } else if (errnum && errnum != EPERM && errnum != ENOENT) {
        if (!a->log_refused++) /* once for a run of refusals */
            fprintf(stderr, "bramble-agent: output not stored by the coordinator (%s); "
                            "kept, and sent again every %d ms\n",
                    err->text, BR_LOG_RETRY_MS);
    } else if (!errnum && a->log_refused) {
        fprintf(stderr, "bramble-agent: the coordinator stores output again, after %lld "
                        "refusals\n",
                (long long)a->log_refused);
        a->log_refused = 0;
    }
    int64_t now = br_mono_ms();
    for (int i = 0; i < a->natt; i++)
        if (br_attempt_log_answered(a->att[i], seq, errnum, now)) {
            exit_if_ready(a, a->att[i], now);
            return;
        }
}

static void on_response(br_agent_t *a, br_msg_t *m)
{
    br_err_t err;
    int failed = br_msg_check(m, &err) < 0;
    if (a->rekey_seq && br_msg_seq(m) == a->rekey_seq &&
        strcmp(br_msg_type(m), "node.key") == 0) {
        a->last_heard = br_mono_ms();
        rekeyed(a, failed, &err);
        return;
    }
    if (failed && err.errnum == EACCES) {
        set_fatal(a, "the coordinator refused this node: %s", err.text);
        return;
    }
    uint32_t seq = br_msg_seq(m);
    a->last_heard = br_mono_ms();
    if (seq == a->hello_seq) {
        if (failed && err.errnum == EPROTO && strstr(err.text, "replica_port") &&
            !a->hello_plain) {
            /* a coordinator that predates the field: say hello without it, at once */
            a->hello_plain = 1;
            fprintf(stderr, "bramble-agent: the coordinator does not take "
                            "\"replica_port\" in node.hello; saying hello without it\n");
            send_hello(a);
            return;
        }
        if (failed) {
            fprintf(stderr, "bramble-agent: hello refused: %s\n", err.text);
            return;
        }
        json_t *b = br_msg_body(m);
        json_int_t hb = json_integer_value(json_object_get(b, "heartbeat_interval"));
        json_int_t fence_ms = json_integer_value(json_object_get(b, "fence_timeout"));
        a->hb_ms = hb >= 10 ? hb : 1000;
        a->fence_ms = fence_ms > a->hb_ms ? fence_ms : 3 * a->hb_ms;
        br_keeper_set_times(a->keeper, a->fence_ms,
                            json_integer_value(json_object_get(b, "node_timeout")));
        a->hello_acked = 1;
        a->trees_told = 0; /* a coordinator that (re)met us: tell it the cache again */
        json_decref(a->envs_told);
        a->envs_told = NULL;
        for (int i = 0; i < a->natt; i++) /* answers to output sent before will not come */
            br_attempt_log_resend(a->att[i]);
        if (json_is_object(json_object_get(b, "overlay"))) /* its place in the overlay */
            br_overlay_assigned(a->overlay, json_object_get(b, "overlay"));
        if (json_is_array(json_object_get(b, "overlay_peers")))
            br_overlay_peers(a->overlay, json_object_get(b, "overlay_peers"));
        else if (json_is_object(json_object_get(b, "overlay_peers_delta")))
            br_overlay_peers(a->overlay, json_object_get(b, "overlay_peers_delta"));
        const char *key = json_string_value(json_object_get(b, "probe_key"));
        if (a->probe && key &&
            br_probe_set_key(a->probe, key,
                             json_integer_value(json_object_get(b, "probe_interval")),
                             &err) < 0)
            fprintf(stderr, "bramble-agent: %s: not probing\n", err.text);
        fprintf(stderr, "bramble-agent: connected to %s as %s (heartbeat %lldms)\n",
                a->s->cred.endpoint, a->s->name, (long long)a->hb_ms);
    } else if (seq == a->hb_seq && !failed) {
        a->coord_rtt_ms = (double)(br_mono_us() - a->hb_sent_us) / 1000.0; /* 1 us steps */
        json_t *peers = json_object_get(br_msg_body(m), "peers");
        if (a->probe && json_is_array(peers))
            br_probe_set_peers(a->probe, peers);
        json_t *wg = json_object_get(br_msg_body(m), "overlay_peers");
        json_t *delta = json_object_get(br_msg_body(m), "overlay_peers_delta");
        if (json_is_array(wg)) /* its overlay peers changed: all of them */
            br_overlay_peers(a->overlay, wg);
        else if (json_is_object(delta)) /* ... those that changed */
            br_overlay_peers(a->overlay, delta);
    } else if (seq == a->hb_seq && failed && err.errnum == EPROTO &&
               drop_heartbeat_field(a, &err)) {
        a->hb_sent = 0; /* said again at once, without it */
    } else if (failed && err.errnum == ENOTCONN) {
        a->hello_acked = 0; /* the coordinator wants a hello (restarted, or we were lost) */
        send_hello(a);
    } else if (strcmp(br_msg_type(m), "ckpt.stored") == 0) {
        stored_acked(a, seq); /* heard, refused or not: not resent */
    } else if (strcmp(br_msg_type(m), "job.checkpoint") == 0) {
        /* refused (superseded attempt): do not resend */
        checkpoint_acked(a, seq, failed ? &err : NULL);
    } else if (strcmp(br_msg_type(m), "job.log") == 0) {
        log_answered(a, seq, failed ? &err : NULL);
    } else if (strcmp(br_msg_type(m), "job.exited") == 0) {
        for (int i = 0; i < a->natt; i++)
            if (br_attempt_report_seq(a->att[i]) != seq) {
                continue;
            } else if (!failed || err.errnum == EPERM) {
                /* EPERM: the coordinator never gave this node that attempt (a store
                 * from before it kept who ran what): saying it again will not help */
                remove_attempt(a, i);
                break;
            } else if (err.errnum == EPROTO && strstr(err.text, "log_dropped") &&
                       !a->exit_plain) {
                /* a coordinator that predates the field: say it without */
                a->exit_plain = 1;
                fprintf(stderr, "bramble-agent: the coordinator does not take "
                                "\"log_dropped\" in job.exited; reporting exits "
                                "without it\n");
                report_exit(a, a->att[i]);
                break;
            }
    }
}

/* ckpt.serve, ckpt.fetch, ckpt.drop (replica.h): carried out off the loop; rc and
 * err are what the replica module said of the order. */
static void replica_answer(br_agent_t *a, br_msg_t *m, int rc, const br_err_t *err)
{
    if (rc < 0)
        fprintf(stderr, "bramble-agent: %s refused: %s\n", br_msg_type(m), err->text);
    reply(a, m, rc < 0 ? (err->errnum ? err->errnum : EINVAL) : 0, err->text);
}

static void on_serve(br_agent_t *a, br_msg_t *m)
{
    br_err_t err = {0};
    int rc = br_replica_serve(a->replica, m, a->cache, &err);
    replica_answer(a, m, rc, &err);
}

static void on_fetch(br_agent_t *a, br_msg_t *m)
{
    br_err_t err = {0};
    int rc = br_replica_fetch(a->replica, m, &err);
    replica_answer(a, m, rc, &err);
}

static void on_drop(br_agent_t *a, br_msg_t *m)
{
    br_err_t err = {0};
    int rc = br_replica_drop(a->replica, m, &err);
    replica_answer(a, m, rc, &err);
}

/* The position in f's "wait" of the tree mhash, its "what" into *what; -1: none. */
static int waits_for(json_t *f, const char *mhash, const char **what)
{
    size_t k;
    json_t *w;
    json_array_foreach(json_object_get(f, "wait"), k, w)
        if (strcmp(json_string_value(json_object_get(w, "hash")), mhash) == 0) {
            *what = json_string_value(json_object_get(w, "what"));
            return (int)k;
        }
    return -1;
}

/* The tree mhash cannot be had: every order that waited for it ends, not started. */
static void orders_fail(br_agent_t *a, const char *mhash, const char *error)
{
    for (size_t i = 0; i < json_array_size(a->fetching);) {
        json_t *f = json_array_get(a->fetching, i);
        const char *what;
        if (waits_for(f, mhash, &what) < 0) {
            i++;
            continue;
        }
        json_int_t job = json_integer_value(json_object_get(f, "job"));
        int attempt = (int)json_integer_value(json_object_get(f, "attempt"));
        char reason[BR_ERR_TEXT + 300];
        snprintf(reason, sizeof(reason), "could not start: %s: %s", what, error);
        end_unstarted(a, job, attempt, reason);
        json_array_remove(a->fetching, i);
    }
}

/* The tree mhash is here (res: how it came): every order that waited for it, once the
 * last tree it waits for is here, is taken up again. */
static void orders_go(br_agent_t *a, const char *mhash, const json_t *res)
{
    for (size_t i = 0; i < json_array_size(a->fetching);) {
        json_t *f = json_array_get(a->fetching, i), *wait = json_object_get(f, "wait");
        const char *what;
        int k = waits_for(f, mhash, &what);
        if (k < 0) {
            i++;
            continue;
        }
        json_array_remove(wait, (size_t)k);
        const char *peer = json_string_value(json_object_get(res, "from"));
        if (peer) { /* read from another node: said in the start's event */
            if (!json_object_get(f, "from"))
                json_object_set_new(f, "from", json_array());
            json_array_append_new(json_object_get(f, "from"), json_string(peer));
        }
        for (int s = 0; s < 2; s++) {
            const char *n = s ? "deduped" : "received";
            json_object_set_new(f, n, json_integer(json_integer_value(json_object_get(f, n)) +
                                                   json_integer_value(json_object_get(res, n))));
        }
        if (json_array_size(wait)) {
            i++;
            continue;
        }
        f = json_incref(f);
        json_array_remove(a->fetching, i);
        json_int_t job = json_integer_value(json_object_get(f, "job"));
        int attempt = (int)json_integer_value(json_object_get(f, "attempt"));
        double secs =
            (double)(br_mono_ms() - json_integer_value(json_object_get(f, "since"))) / 1e3;
        fprintf(stderr, "bramble-agent: job %lld attempt %d: its trees are here (%lld bytes "
                        "fetched, %lld found here) in %.1f s\n",
                (long long)job, attempt,
                (long long)json_integer_value(json_object_get(f, "received")),
                (long long)json_integer_value(json_object_get(f, "deduped")), secs);
        br_msg_t *m = br_msg_new(BR_MSG_REQUEST, "job.run", 0);
        json_t *how = json_pack("{s:O, s:O, s:f}", "received", json_object_get(f, "received"),
                                "deduped", json_object_get(f, "deduped"), "seconds", secs);
        if (json_object_get(f, "from"))
            json_object_set(how, "from", json_object_get(f, "from"));
        if (json_is_true(json_object_get(f, "prefetch"))) /* a gang's: the start waits */
            say_fetched(a, job, attempt, how);
        else if (m) {
            br_msg_set_body(m, json_incref(json_object_get(f, "body")));
            run_order(a, m, 0, how);
        }
        json_decref(how);
        br_msg_destroy(&m);
        json_decref(f);
    }
}

static void tree_pulled(br_agent_t *a, json_t *res);

/* A tree's pull ended: what waited for it goes on (tree_pulled), then the pulls that
 * waited for room are tried again (the orders it let start copied their code out of
 * it first, so it may leave the cache now). */
static void tree_fetched(br_agent_t *a, json_t *res)
{
    tree_pulled(a, res);
    pulls_wanting_room(a);
}

/* A tree's pull ended. One from another node that failed is made again from the
 * coordinator; else the orders that waited for it fail with it, or go on. */
static void tree_pulled(br_agent_t *a, json_t *res)
{
    const char *mhash = json_string_value(json_object_get(res, "hash"));
    const char *error = json_string_value(json_object_get(res, "error"));
    const char *peer = json_string_value(json_object_get(res, "from"));
    if (!mhash)
        return;
    a->trees_told = 0; /* one more tree here (or some left to make room) */
    json_t *pull = json_incref(json_object_get(a->pulls, mhash));
    json_object_del(a->pulls, mhash);
    br_err_t err = {0};
    int again = -1;
    if (!error && pull) /* verified file by file just now: its copies need not hash */
        br_cache_seal(a->cache, json_object_get(pull, "manifest"));
    int staged = pull && json_is_true(json_object_get(pull, "staged"));
    if (error && pull && !peer && json_integer_value(json_object_get(pull, "job")) == 0) {
        fprintf(stderr, "bramble-agent: tree %.16s..., staged while it was uploaded, not "
                        "pulled: %s\n", mhash, error);
        json_decref(pull);
        return; /* no order waits for it */
    }
    if (error && (peer || staged) && pull) {
        /* that node could not serve it, or its upload stopped being served as it
         * came: the coordinator can, for the job that waits */
        fprintf(stderr, "bramble-agent: tree %.16s... not pulled from %s (%s): from the "
                        "coordinator instead\n", mhash, peer ? peer : "its upload", error);
        again = pull_tree(a, json_integer_value(json_object_get(pull, "job")),
                          (int)json_integer_value(json_object_get(pull, "attempt")),
                          json_object_get(pull, "manifest"),
                          json_string_value(json_object_get(pull, "grant")), NULL,
                          json_is_true(json_object_get(pull, "code")), NULL, &err);
    }
    json_decref(pull);
    if (again == 0)
        return; /* the orders wait on */
    int e = (int)json_integer_value(json_object_get(res, "errnum"));
    if (again < 0 && err.text[0])
        orders_fail(a, mhash, err.text);
    else if (error && (e == ENOSPC || e == EDQUOT || e == EFBIG) && !strstr(error, "quota")) {
        char said[BR_ERR_TEXT + 100]; /* the disk, not --cache-quota: where it is */
        snprintf(said, sizeof(said), "the node's cache (--cache-dir) has no room on its "
                                     "disk: %s",
                 error);
        orders_fail(a, mhash, said);
    } else if (error)
        orders_fail(a, mhash, error);
    else
        orders_go(a, mhash, res);
}

static void report_stored(br_agent_t *a)
{
    json_t *body;
    while (a->hello_acked && (body = br_replica_take(a->replica))) {
        if (json_is_true(json_object_get(body, "code"))) {
            tree_fetched(a, body);
            json_decref(body);
            continue;
        }
        const char *error = json_string_value(json_object_get(body, "error"));
        fprintf(stderr, "bramble-agent: job %lld: checkpoint %s %s%s%s\n",
                (long long)json_integer_value(json_object_get(body, "job")),
                json_string_value(json_object_get(body, "path")),
                error ? "not pulled: " : "pulled",
                error ? error : "",
                json_is_true(json_object_get(body, "restore")) ? " (restore)" : "");
        if (json_array_size(a->stored) >= MAX_UNACKED)
            json_array_remove(a->stored, 0);
        send_stored(a, body);
        json_array_append_new(a->stored, body);
    }
}

#define K_REQUEST (1 << BR_MSG_REQUEST)
#define K_EVENT (1 << BR_MSG_EVENT)

/* --- shells and forwards --------------------------------------------------------- */

/* stream.open: start a shell in a running rank (or connect to one of its node's
 * ports) and hand it to the streams thread, which attaches it at the relay. What
 * cannot start is told to the client there, through the same stream. */
static void on_stream_open(br_agent_t *a, br_msg_t *m)
{
    json_int_t stream, job, rank, rows = 24, cols = 80, port = 0;
    int attempt, relay_port, tty = 0;
    const char *ticket, *key, *kind, *term = NULL;
    json_t *command = NULL;
    br_err_t err = {0};
    if (br_msg_unpack(m, &err, "{s:I, s:s, s:s, s:i, s:I, s:i, s:I, s:s, s?b, s?I, s?I, s?s, s?o, s?I}",
                      "stream", &stream, "ticket", &ticket, "key", &key, "relay_port",
                      &relay_port, "job",
                      &job, "attempt", &attempt, "rank", &rank, "kind", &kind, "tty", &tty,
                      "rows", &rows, "cols", &cols, "term", &term, "command", &command,
                      "port", &port) < 0 ||
        strlen(ticket) != BR_STREAM_TICKET || !br_streamseal_key_ok(key) || stream <= 0 ||
        stream > UINT32_MAX) {
        reply(a, m, EPROTO,
              err.text[0] ? err.text : "stream.open: a bad stream, ticket or key");
        return;
    }
    br_streams_session_t ss = {.stream = (uint32_t)stream, .job = job, .attempt = attempt,
                               .rank = (int)rank, .fds = {-1, -1, -1}};
    br_strlcpy(ss.ticket, ticket, sizeof(ss.ticket));
    br_strlcpy(ss.key, key, sizeof(ss.key));
    if (br_stream_endpoint(a->s->cred.endpoint, relay_port, ss.endpoint,
                           sizeof(ss.endpoint)) < 0) {
        reply(a, m, EINVAL, "the coordinator's endpoint names no TCP port");
        return;
    }
    br_attempt_t *t = find_attempt(a, job, attempt);
    br_task_t *task = t ? br_attempt_task_of_rank(t, (int)rank) : NULL;
    char why[BR_ERR_TEXT + 64];
    if (!task) {
        snprintf(why, sizeof(why), "rank %lld of job %lld does not run on this node now",
                 (long long)rank, (long long)job);
        ss.error = why;
    } else if (strcmp(kind, "forward") == 0) {
        snprintf(ss.target, sizeof(ss.target), "port %lld of node %s", (long long)port,
                 a->s->name);
        if (port < 1 || port > 65535) {
            snprintf(why, sizeof(why), "port: 1 to 65535");
            ss.error = why;
        }
        ss.port = (int)port; /* (connected to on the streams thread) */
        ss.is_socket = 1;
    } else {
        size_t n = json_array_size(command);
        const char **argv = n ? calloc(n + 1, sizeof(*argv)) : NULL;
        for (size_t i = 0; argv && i < n; i++)
            argv[i] = json_string_value(json_array_get(command, i));
        char akey[48];
        attempt_key(job, attempt, akey, sizeof(akey));
        json_t *ct = json_object_get(json_object_get(a->extras, akey), "container");
        char **in_ct = NULL; /* a container job's shell: podman exec, into its container */
        char mark[64], tterm[80]; /* what it starts carries mark, wherever it goes */
        br_streams_mark(ss.stream, mark, sizeof(mark));
        snprintf(tterm, sizeof(tterm), "TERM=%s", term ? term : "");
        const char *ct_env[] = {mark, tty && term ? tterm : NULL, NULL};
        if (ct && (!n || argv))
            in_ct = br_container_exec_argv(
                br_task_tag(task), (uid_t)json_integer_value(json_object_get(ct, "uid")),
                (gid_t)json_integer_value(json_object_get(ct, "gid")),
                json_string_value(json_object_get(ct, "workdir")), tty, ct_env, argv);
        br_task_join_opts_t o = {.argv = in_ct ? (const char *const *)in_ct : argv,
                                 .tty = tty, .rows = (unsigned short)rows,
                                 .cols = (unsigned short)cols, .term = tty ? term : NULL,
                                 .mark = mark};
        if (n && (!argv || !argv[n - 1])) {
            snprintf(why, sizeof(why), "command: a list of strings");
            ss.error = why;
        } else if ((ss.pid = br_task_join(task, &o, ss.fds, &err)) < 0) {
            ss.pid = 0;
            snprintf(why, sizeof(why), "cannot start it in job %lld: %s", (long long)job,
                     err.text);
            ss.error = why;
        }
        ss.tty = tty;
        free(argv);
        br_container_argv_free(in_ct);
    }
    if (br_streams_add(a->streams, &ss, &err) < 0) {
        reply(a, m, err.errnum, err.text);
        return;
    }
    reply(a, m, 0, NULL);
}

/* The orders the agent takes from the coordinator (proto/PROTOCOL.md section 6;
 * tests/unit/test_agent_orders.c holds the two to each other): type -> the kinds
 * it is taken as -> handler. Answers to the agent's own requests go to
 * on_response. */
static const struct {
    const char *type;
    int kinds; /* K_REQUEST, K_EVENT */
    void (*fn)(br_agent_t *a, br_msg_t *m);
} orders[] = {
    {"job.run", K_REQUEST, on_run},
    {"job.kill", K_REQUEST, on_kill},
    {"job.thaw", K_REQUEST, on_thaw},
    {"job.check", K_REQUEST, on_check},
    {"node.rekey", K_REQUEST, on_rekey},
    {"ckpt.serve", K_REQUEST, on_serve},
    {"ckpt.fetch", K_REQUEST, on_fetch},
    {"job.fetch", K_REQUEST, on_fetch_trees},
    {"tree.stage", K_REQUEST, on_stage_tree},
    {"ckpt.drop", K_REQUEST, on_drop},
    {"stream.open", K_REQUEST, on_stream_open},
    {"env.rm", K_REQUEST, on_env_rm},
};

#define NORDERS (sizeof(orders) / sizeof(orders[0]))

const char *br_agent_order_type(size_t i)
{
    return i < NORDERS ? orders[i].type : NULL;
}

int br_agent_order_kinds(size_t i)
{
    return i < NORDERS ? orders[i].kinds : 0;
}

static void on_message(br_agent_t *a, br_msg_t *m)
{
    const char *type = br_msg_type(m);
    if (br_msg_kind(m) == BR_MSG_RESPONSE) {
        on_response(a, m);
        return;
    }
    int kind = 1 << br_msg_kind(m);
    for (size_t i = 0; i < NORDERS; i++) {
        if (strcmp(orders[i].type, type) == 0 && (orders[i].kinds & kind)) {
            orders[i].fn(a, m);
            return;
        }
    }
    /* not an order the agent takes, or not as this kind: an event is dropped, a
     * request refused (a ckpt.* one logged as well, as the replica orders are) */
    if (br_msg_kind(m) != BR_MSG_REQUEST)
        return;
    if (strncmp(type, "ckpt.", 5) == 0)
        fprintf(stderr, "bramble-agent: %s refused: unknown request for an agent\n",
                type);
    reply(a, m, EPROTO, "unknown request for an agent");
}

/* Handle what the coordinator sent, a bounded number per wake: a batch of job.run
 * orders (each a fork and exec) must not keep the loop from its timers, and the
 * keeper sees this process alive after each. */
static void drain_socket(br_agent_t *a)
{
    for (int i = 0; i < DRAIN_MAX && !a->stop; i++) {
        if (i > 0)
            br_keeper_beat(a->keeper, br_mono_ms());
        br_msg_t *m = NULL;
        br_err_t err;
        if (br_msg_recv(a->sock, 0, ZMQ_DONTWAIT, &m, &err) < 0) {
            br_msg_destroy(&m);
            if (errno == EAGAIN)
                return;
            fprintf(stderr, "bramble-agent: dropped a message: %s\n", err.text);
            continue;
        }
        on_message(a, m);
        br_msg_destroy(&m);
    }
}

/* A rank's leader of attempt t ended, and the processes left in its tree were
 * killed with it, the shells joined into it among them: their clients are told the
 * job ended (before those shells are reaped, which would tell them a signal killed
 * their command). */
static void rank_ended(br_agent_t *a, br_attempt_t *t)
{
    for (int i = 0; i < br_attempt_ntasks(t); i++) {
        int rank = br_attempt_rank_at(t, i);
        if (br_task_done(br_attempt_task_of_rank(t, rank), NULL, NULL))
            br_streams_rank_ended(a->streams, br_attempt_job(t), br_attempt_number(t), rank);
    }
}

static void reap(br_agent_t *a)
{
    int status;
    pid_t pid;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
        if (br_keeper_reaped(a->keeper, pid, status) ||
            br_streams_reaped(a->streams, pid, status) ||
            br_overlay_reaped(a->overlay, pid, status))
            continue;
        for (int i = 0; i < a->natt; i++)
            if (br_attempt_reaped(a->att[i], pid, status)) {
                rank_ended(a, a->att[i]);
                break;
            }
    }
}

static void on_signal(br_agent_t *a)
{
    struct signalfd_siginfo si;
    while (read(a->sigfd, &si, sizeof(si)) == sizeof(si)) {
        if (si.ssi_signo == SIGCHLD) {
            reap(a);
        } else {
            a->stop = 1;
            a->handoff = si.ssi_signo == SIGUSR2;
        }
    }
}

/* --- the loop ------------------------------------------------------------------ */

/* Advance a replica's health check; an unhealthy replica is stopped, and its exit
 * report says why (the coordinator restarts it). A change is told at once: the
 * next heartbeat goes now (requests may wait for this replica to come up). */
static void check_health(br_agent_t *a, br_attempt_t *t, int64_t now)
{
    br_health_t *h = br_attempt_health(t);
    if (!h || br_attempt_done(t) || br_attempt_frozen(t))
        return;
    br_health_state_t was = br_health_state(h), is = br_health_poll(h, now);
    if (is == was)
        return;
    a->hb_sent = now - a->hb_ms;
    const char *why = br_health_why(h);
    fprintf(stderr, "bramble-agent: job %lld attempt %d: %s%s%s\n",
            (long long)br_attempt_job(t), br_attempt_number(t), br_health_state_name(is),
            *why ? ": " : "", why);
    if (is == BR_HEALTH_UNHEALTHY) {
        char reason[240];
        snprintf(reason, sizeof(reason), "health check failed %d times in a row (%s)",
                 BR_HEALTH_FAILURES, why);
        br_attempt_set_reason(t, reason);
        br_attempt_kill(t, 5000);
    }
}

/* Hang detection: an attempt that showed no sign of life for its progress.timeout
 * is stopped, its whole tree on this node, and its exit report carries fault "hung"
 * (report_exit), which the coordinator restarts under restart.on: [hung]. */
static void check_hang(br_attempt_t *t, int64_t now)
{
    br_hang_t *h = br_attempt_hang(t);
    if (!h || br_attempt_done(t) || br_attempt_reason(t)[0] || !br_hang_check(h, now))
        return;
    char reason[200];
    br_hang_reason(h, now, reason, sizeof(reason));
    fprintf(stderr, "bramble-agent: job %lld attempt %d: %s; killing it\n",
            (long long)br_attempt_job(t), br_attempt_number(t), reason);
    br_attempt_set_reason(t, reason);
    if (br_attempt_kill(t, 5000) < 0)
        fprintf(stderr, "bramble-agent: job %lld: some processes survived the kill\n",
                (long long)br_attempt_job(t));
}

/* The keeper froze the jobs while this process showed no life (paused, stuck): count
 * them as frozen, so the coordinator's word thaws or kills them. */
static void keeper_froze(br_agent_t *a)
{
    int froze = br_keeper_froze(a->keeper);
    if (froze == a->keeper_froze)
        return;
    a->keeper_froze = froze;
    int n = freeze_all(a, 0);
    if (n)
        fprintf(stderr, "bramble-agent: the keeper froze %d job(s) while this agent was "
                        "silent; they stay frozen until the coordinator says whether they "
                        "are still theirs\n", n);
}

static void timers(br_agent_t *a)
{
    int64_t now = br_mono_ms();
    br_keeper_beat(a->keeper, now);
    keeper_froze(a);
    fence(a, now);
    if (a->probe && a->hello_acked)
        br_probe_tick(a->probe, now);
    for (int i = 0; i < a->natt; i++) {
        br_attempt_t *t = a->att[i];
        if (br_attempt_check_adopted(t) > 0)
            rank_ended(a, t);
        br_attempt_check_lingering(t); /* a stopped job's handlers that have finished */
        br_attempt_flush(t, 0, ship_log, a);
        check_health(a, t, now);
        if (br_attempt_ckpt(t) && !br_attempt_frozen(t)) {
            ckpt_ctx_t ctx = {a, t, br_ckpt_user(br_attempt_ckpt(t))};
            br_ckpt_poll(br_attempt_ckpt(t), now, on_checkpoint, &ctx);
        }
        /* after what woke the loop was taken in: its output (read before timers),
         * its requests (served before) and its checkpoints (just above) */
        check_hang(t, br_mono_ms());
        if (br_attempt_stop_due(t, now) && !br_attempt_done(t) && !br_attempt_reason(t)[0]) {
            fprintf(stderr, "bramble-agent: job %lld attempt %d: still running after its "
                            "grace: killing it\n",
                    (long long)br_attempt_job(t), br_attempt_number(t));
            br_attempt_set_reason(t, "killed after its grace, as ordered");
            br_attempt_kill(t, 5000);
        }
    }
    collect_manifests(a);
    report_stored(a);
    outputs_taken(a);
    read_gpus(a, now);
    br_overlay_tick(a->overlay, now);
    if (!a->hello_acked) {
        if (now - a->hello_sent >= HELLO_RETRY_MS)
            send_hello(a);
        return;
    }
    unsigned char reported_now[MAX_ATTEMPTS] = {0};
    for (int i = 0; i < a->natt; i++)
        reported_now[i] = (unsigned char)exit_if_ready(a, a->att[i], now);
    if (now - a->hb_sent >= a->hb_ms) {
        a->hb_sent = now;
        double load[1];
        json_t *hb = json_pack("{s:o}", "tasks", tasks_json(a));
        if (getloadavg(load, 1) == 1)
            json_object_set_new(hb, "load", json_real(load[0]));
        json_t *gpus = live_gpus(a);
        if (gpus)
            json_object_set_new(hb, "gpus", gpus);
        add_cost(a, hb, now);
        json_t *disk = a->hb_nodisk ? NULL : disk_json(a, now);
        if (disk)
            json_object_set_new(hb, "disk", disk);
        /* how far the checkpoint pull in progress is, for the job's owner to see */
        json_t *pulling = a->hb_nopulling || !a->replica ? NULL
                                                         : br_replica_progress(a->replica);
        if (pulling && json_integer_value(json_object_get(pulling, "job")) == 0) {
            /* a tree staged as it is uploaded: the job that waits for it now, if any */
            json_int_t job = json_integer_value(json_object_get(
                json_object_get(a->pulls, json_string_value(json_object_get(pulling, "hash"))),
                "job"));
            if (job > 0)
                json_object_set_new(pulling, "job", json_integer(job));
            else
                json_decref(pulling), pulling = NULL;
        }
        if (pulling)
            json_object_set_new(hb, "pulling", pulling);
        json_t *envs = a->hb_noenvs ? NULL : envs_news(a, now);
        if (envs)
            json_object_set_new(hb, "envs", envs);
        json_t *reach = a->hb_noreach ? NULL : br_overlay_reach_news(a->overlay);
        if (reach) /* the overlay peers it reached, and those it could not (wgpeers.h) */
            json_object_set_new(hb, "overlay_reach", reach);
        int64_t stamp = a->hb_notrees ? 0 : br_cache_trees_stamp(a->cache);
        if (stamp != a->trees_stamp) /* (a tree came or went since: by hand too) */
            a->trees_told = 0;
        if (!a->trees_told && !a->hb_notrees) { /* where a job's data sets are already */
            a->trees_stamp = stamp; /* (taken first: a change while listing is told next) */
            json_t *trees = br_cache_trees(a->cache);
            while (json_array_size(trees) > BR_CACHE_TREES_TOLD)
                json_array_remove(trees, json_array_size(trees) - 1);
            json_object_set_new(hb, "trees", trees);
            a->trees_told = 1;
        }
        json_t *rtt = json_pack("{s:o}", "peers", a->probe ? br_probe_report(a->probe, now)
                                                            : json_object());
        if (a->coord_rtt_ms >= 0) /* each round trip once: not every heartbeat is answered */
            json_object_set_new(rtt, "coordinator", json_real(a->coord_rtt_ms));
        a->coord_rtt_ms = -1;
        json_object_set_new(hb, "rtt", rtt);
        a->hb_sent_us = br_mono_us();
        a->hb_seq = send_msg(a, BR_MSG_REQUEST, "node.heartbeat", hb, NULL, 0);
        for (int i = 0; i < a->natt; i++) {
            br_attempt_t *t = a->att[i];
            if (br_attempt_report_seq(t) && !reported_now[i]) /* not acknowledged yet */
                report_exit(a, t);
            if (br_attempt_log_dropped_news(t))
                fprintf(stderr, "bramble-agent: job %lld attempt %d: %lld bytes of output "
                                "dropped so far (log_dropped): it printed faster than "
                                "the coordinator took it\n",
                        (long long)br_attempt_job(t), br_attempt_number(t),
                        (long long)br_attempt_log_dropped(t));
        }
        resend_checkpoints(a);
        resend_stored(a);
    }
}

#define FIXED_ITEMS 5

/* What the loop waits on, in a->items: the socket, its monitor, signals, the local
 * socket, the probe socket, then each attempt's checkpoint watcher and output pipes (a->owner says
 * whose). Returns the count, or -1 when out of memory. */
static int build_poll(br_agent_t *a)
{
    int max = FIXED_ITEMS + BR_LOCALSOCK_MAX_CONNS + 3;
    for (int i = 0; i < a->natt; i++)
        max += 1 + 3 * br_attempt_ntasks(a->att[i]);
    if (max > a->items_cap) {
        zmq_pollitem_t *it = realloc(a->items, (size_t)max * sizeof(*it));
        if (it)
            a->items = it;
        br_attempt_t **ow = realloc(a->owner, (size_t)max * sizeof(*ow));
        if (ow)
            a->owner = ow;
        if (!it || !ow)
            return -1;
        a->items_cap = max;
    }
    zmq_pollitem_t *items = a->items;
    br_attempt_t **owner = a->owner;
    int n = 0;
    items[n++] = (zmq_pollitem_t){a->sock, 0, ZMQ_POLLIN, 0};
    items[n++] = (zmq_pollitem_t){a->monitor, 0, ZMQ_POLLIN, 0};
    items[n++] = (zmq_pollitem_t){NULL, a->sigfd, ZMQ_POLLIN, 0};
    items[n++] = (zmq_pollitem_t){NULL, br_localsock_fd(a->local), ZMQ_POLLIN, 0};
    items[n++] = a->probe ? (zmq_pollitem_t){NULL, br_probe_fd(a->probe), ZMQ_POLLIN, 0}
                          : (zmq_pollitem_t){NULL, a->sigfd, 0, 0}; /* a placeholder */
    int lfds[BR_LOCALSOCK_FDS_MAX]; /* the job socket's open connections: wake-ups */
    int nl = br_localsock_fds(a->local, lfds, BR_LOCALSOCK_FDS_MAX);
    for (int f = 1; f < nl && n < max; f++) {
        owner[n] = NULL;
        items[n++] = (zmq_pollitem_t){NULL, lfds[f], ZMQ_POLLIN, 0};
    }
    owner[n] = NULL; /* a checkpoint's manifest is ready: timers() reports it */
    items[n++] = (zmq_pollitem_t){NULL, br_manifest_fd(a->hasher), ZMQ_POLLIN, 0};
    owner[n] = NULL; /* a fetch has finished: timers() reports it */
    items[n++] = (zmq_pollitem_t){NULL, br_replica_fd(a->replica), ZMQ_POLLIN, 0};
    owner[n] = NULL; /* outputs are kept: timers() lets the exit go */
    items[n++] = (zmq_pollitem_t){NULL, br_outputs_fd(a->outputs), ZMQ_POLLIN, 0};
    for (int i = 0; i < a->natt; i++) {
        br_ckpt_t *ck = br_attempt_ckpt(a->att[i]);
        if (ck && br_ckpt_fd(ck) >= 0) {
            owner[n] = NULL; /* a wake-up only: timers() scans */
            items[n++] = (zmq_pollitem_t){NULL, br_ckpt_fd(ck), ZMQ_POLLIN, 0};
        }
        int fds[2 * BR_ATTEMPT_MAX_TASKS];
        int nw = br_attempt_wait_fds(a->att[i], fds, BR_ATTEMPT_MAX_TASKS);
        for (int f = 0; f < nw && n < max; f++) { /* an adopted task ended: timers() */
            owner[n] = NULL;
            items[n++] = (zmq_pollitem_t){NULL, fds[f], ZMQ_POLLIN, 0};
        }
        int nfds = br_attempt_fds(a->att[i], fds, 2 * BR_ATTEMPT_MAX_TASKS);
        for (int f = 0; f < nfds && n < max; f++) {
            owner[n] = a->att[i];
            items[n++] = (zmq_pollitem_t){NULL, fds[f], ZMQ_POLLIN, 0};
        }
    }
    return n;
}

/* How long the loop may sleep: until the next hello or heartbeat is due; with jobs
 * running, at most 50 ms (log batching, checkpoint scans, fencing). An idle node
 * wakes once per heartbeat, and at least four times per fence time (keeper.h). */
static long poll_timeout(const br_agent_t *a)
{
    int64_t now = br_mono_ms();
    int64_t due = a->hello_acked ? a->hb_sent + a->hb_ms : a->hello_sent + HELLO_RETRY_MS;
    int64_t wait = due - now;
    if (a->natt > 0 && wait > 50)
        wait = 50;
    if (wait > a->fence_ms / 4) /* the keeper must see this process alive */
        wait = a->fence_ms / 4;
    return wait < 1 ? 1 : wait > 1000 ? 1000 : (long)wait;
}

/* Stopping: every process of every attempt, found in one pass over /proc per round
 * (one pass per attempt took seconds with a few hundred attempts). */
static void kill_all(br_agent_t *a)
{
    char prefix[80], also[80];
    snprintf(prefix, sizeof(prefix), "%s/", a->s->name);
    snprintf(also, sizeof(also), "BRAMBLE_AGENT_ID=%s", a->agent_id);
    if (a->natt && br_task_kill_tag_prefix(prefix, also, NULL, 5000) < 0)
        for (int i = 0; i < a->natt; i++) /* what the pass missed */
            br_attempt_kill(a->att[i], 1000);
}

int br_agent_run(br_agent_t *a, br_err_t *err)
{
    char prefix[80], also[80];
    snprintf(prefix, sizeof(prefix), "%s/", a->s->name);
    snprintf(also, sizeof(also), "BRAMBLE_AGENT_ID=%s", a->agent_id);
    const char **keep = adopt_all(a);
    int orphans = br_task_kill_tag_prefix(prefix, also, keep, 5000);
    free(keep);
    json_decref(a->adoptable);
    a->adoptable = NULL;
    sweep_gone(a); /* (what a previous agent set aside that no adopted job mounts) */
    if (orphans > 0) /* a previous run of this agent died and left jobs it could not adopt */
        fprintf(stderr, "bramble-agent: killed %d process(es) left by a previous run\n",
                orphans);
    send_hello(a);
    while (!a->stop) {
        int n = build_poll(a);
        if (n < 0)
            return br_errf(err, ENOMEM, "out of memory");
        zmq_pollitem_t *items = a->items;
        br_attempt_t **owner = a->owner;
        int rc = zmq_poll(items, n, poll_timeout(a));
        if (rc < 0 && errno != EINTR)
            return br_errf(err, errno, "poll: %s", zmq_strerror(errno));
        if (br_sock_monitor_auth_failed(a->monitor)) {
            set_fatal(a, "the coordinator at %s refused this node's key (was the node "
                         "removed?)", a->s->cred.endpoint);
            fprintf(stderr, "bramble-agent: to join this machine again, delete %s/agent.yaml "
                            "and %s/credential and start the agent with --join-file and "
                            "a new token\n",
                    a->s->data_dir, a->s->data_dir);
            break;
        }
        if (rc > 0 && (items[2].revents & ZMQ_POLLIN))
            on_signal(a);
        if (rc > 0 && (items[4].revents & ZMQ_POLLIN))
            br_probe_read(a->probe);
        /* pipes before the socket: an acknowledgement there may free an attempt */
        for (int i = FIXED_ITEMS; i < n && rc > 0; i++)
            if (owner[i] && (items[i].revents & (ZMQ_POLLIN | ZMQ_POLLERR))) {
                br_attempt_read(owner[i], ship_log, a);
                for (int j = i + 1; j < n; j++) /* read once per wake */
                    if (owner[j] == owner[i])
                        owner[j] = NULL;
            }
        br_localsock_serve(a->local, on_local, a); /* never blocks; expires the idle */
        if (rc > 0 && (items[0].revents & ZMQ_POLLIN))
            drain_socket(a);
        timers(a);
    }
    if (a->handoff) {
        fprintf(stderr, "bramble-agent: stopping; %d attempt(s) go on for the next agent to "
                        "adopt\n", a->natt);
    } else {
        kill_all(a);
        for (int i = 0; i < a->natt; i++) /* nothing is left to adopt */
            br_runstate_forget(a->runstate, br_attempt_job(a->att[i]),
                               br_attempt_number(a->att[i]));
    }
    if (a->fatal)
        return br_errf(err, EACCES, "%s", a->fatal_text);
    return 0;
}
