/* coordlink.c - the gateway's link to the coordinator (see coordlink.h). */
#include "coordlink.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "msg.h"
#include "sock.h"
#include "util.h"

struct gw_link {
    void *ctx, *sock, *monitor;
    gw_table_fn on_table;
    gw_reported_fn on_reported;
    void *arg;
    uint32_t seq;
    int64_t renew_at;  /* monotonic ms the next gateway.watch goes */
    int64_t heard;     /* monotonic ms of the last answer or news; 0: never */
    int64_t version;   /* of the table last taken */
    int refused;
    int load_refused; /* the last load report was refused (said once) */
    int was_up;        /* for the log: the coordinator's comings and goings */
    int sent;          /* something was sent since the socket was last looked at */
    int64_t look_at;   /* monotonic ms it is looked at anyway */
};

/* How often the socket is looked at when its fd says nothing (each look costs
 * libzmq a poll of its mailbox, so not at every turn of the loop). */
#define LOOK_MS 100

gw_link_t *gw_link_new(const br_cred_t *cred, gw_table_fn on_table,
                       gw_reported_fn on_reported, void *arg, br_err_t *err)
{
    gw_link_t *l = calloc(1, sizeof(*l));
    if (!l)
        return br_errp(err, ENOMEM, "out of memory");
    l->on_table = on_table;
    l->on_reported = on_reported;
    l->arg = arg;
    l->ctx = zmq_ctx_new();
    if (!l->ctx) {
        free(l);
        return br_errp(err, errno, "zmq context: %s", zmq_strerror(errno));
    }
    /* ZMTP heartbeats: a coordinator that vanished is noticed, and the link
     * reconnects by itself; a refused key shows on the monitor */
    l->sock = br_sock_client_watched(l->ctx, cred->endpoint, cred->server_public_key,
                                     cred->public_key, cred->secret_key, 1000, 5000,
                                     ZMQ_EVENT_HANDSHAKE_FAILED_AUTH |
                                         ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL,
                                     &l->monitor, err);
    int zero = 0, hwm = 16;
    if (!l->sock || zmq_setsockopt(l->sock, ZMQ_SNDTIMEO, &zero, sizeof(zero)) < 0 ||
        zmq_setsockopt(l->sock, ZMQ_SNDHWM, &hwm, sizeof(hwm)) < 0) {
        if (l->sock)
            br_errf(err, errno, "socket options: %s", zmq_strerror(errno));
        gw_link_destroy(&l);
        return NULL;
    }
    return l;
}

void gw_link_destroy(gw_link_t **lp)
{
    gw_link_t *l = lp ? *lp : NULL;
    if (!l)
        return;
    br_sock_close(&l->monitor);
    br_sock_close(&l->sock);
    if (l->ctx)
        zmq_ctx_term(l->ctx);
    free(l);
    *lp = NULL;
}

int gw_link_fd(const gw_link_t *l)
{
    int fd = -1;
    size_t len = sizeof(fd);
    zmq_getsockopt(l->sock, ZMQ_FD, &fd, &len);
    return fd;
}

static void take_table(gw_link_t *l, json_t *body)
{
    json_t *version = json_object_get(body, "version");
    json_t *table = json_object_get(body, "table");
    if (!l->was_up)
        fprintf(stderr, "bramble-gateway: the coordinator answers; routing table version "
                        "%lld\n", (long long)json_integer_value(version));
    l->was_up = 1;
    if (!json_is_integer(version) || !json_is_object(table))
        return;
    l->version = json_integer_value(version);
    l->on_table(l->arg, l->version, table);
}

/* The coordinator refused this gateway's key: it serves nothing from now on. */
static void key_refused(gw_link_t *l)
{
    l->refused = 1;
    fprintf(stderr, "bramble-gateway: the coordinator refused this gateway's key "
                    "(removed, or another cluster's): serving nothing\n");
    json_t *empty = json_pack("{s:[]}", "services");
    l->on_table(l->arg, -1, empty);
    json_decref(empty);
}

static void take(gw_link_t *l, br_msg_t *m, int64_t now_ms)
{
    json_t *body = br_msg_body(m);
    json_t *errnum = json_object_get(body, "errnum");
    const char *type = br_msg_type(m);
    l->heard = now_ms; /* whatever it says, the coordinator answers */
    if (strcmp(type, "gateway.news") == 0 || (strcmp(type, "gateway.watch") == 0 && !errnum)) {
        take_table(l, body);
    } else if (strcmp(type, "gateway.watch") == 0) {
        fprintf(stderr, "bramble-gateway: the coordinator refused the watch: %s\n",
                json_string_value(json_object_get(body, "error")));
        if (json_integer_value(errnum) == EACCES && !l->refused)
            key_refused(l); /* (its key was removed while it was connected) */
    } else if (strcmp(type, "gateway.load") == 0) {
        if (errnum && !l->load_refused) /* (once: it comes every second) */
            fprintf(stderr, "bramble-gateway: the coordinator refused a load report: %s\n",
                    json_string_value(json_object_get(body, "error")));
        l->load_refused = errnum != NULL;
    } else if (strcmp(type, "gateway.report") == 0 && errnum) {
        fprintf(stderr, "bramble-gateway: the coordinator refused a report: %s\n",
                json_string_value(json_object_get(body, "error")));
    } else if (strcmp(type, "gateway.report") == 0 && l->on_reported) {
        l->on_reported(l->arg, json_string_value(json_object_get(body, "id")));
    } /* (gateway.suspect: a replica that moved on is not worth a line) */
}

/* Send type with body (taken); a full queue drops it (the callers send again). */
static void send_request(gw_link_t *l, const char *type, json_t *body)
{
    br_msg_t *m = br_msg_new(BR_MSG_REQUEST, type, ++l->seq);
    br_err_t err;
    if (m && body) {
        br_msg_set_body(m, body);
        body = NULL;
        br_msg_send(l->sock, m, &err);
        l->sent = 1; /* (a send may take the fd's news: look again) */
    }
    json_decref(body);
    br_msg_destroy(&m);
}

void gw_link_report(gw_link_t *l, const json_t *body)
{
    send_request(l, "gateway.report", json_deep_copy(body));
}

void gw_link_suspect(gw_link_t *l, int64_t job, int port, const char *why)
{
    char text[201]; /* (cut at 200 bytes, never inside a character) */
    br_strlcpy(text, why, sizeof(text));
    br_utf8_trim(text);
    send_request(l, "gateway.suspect",
                 json_pack("{s:I, s:i, s:s}", "job", (json_int_t)job, "port", port, "why",
                           text));
}

void gw_link_load(gw_link_t *l, json_t *services, int64_t version)
{
    send_request(l, "gateway.load",
                 services ? json_pack("{s:o, s:I}", "services", services, "version",
                                      (json_int_t)(version > 0 ? version : 0))
                          : NULL);
}

/* Read all that came (ZMQ_FD is edge-triggered), and whether the key was refused. */
static void look(gw_link_t *l, int64_t now_ms)
{
    l->sent = 0;
    l->look_at = now_ms + LOOK_MS;
    if (!l->refused && br_sock_monitor_auth_failed(l->monitor))
        key_refused(l); /* (at the handshake of a new connection) */
    for (;;) {
        int events = 0;
        size_t len = sizeof(events);
        if (zmq_getsockopt(l->sock, ZMQ_EVENTS, &events, &len) < 0 || !(events & ZMQ_POLLIN))
            break;
        br_msg_t *m = NULL;
        br_err_t err;
        if (br_msg_recv(l->sock, 0, ZMQ_DONTWAIT, &m, &err) < 0) {
            if (errno == EAGAIN)
                break;
            fprintf(stderr, "bramble-gateway: from the coordinator: %s\n", err.text);
            br_msg_destroy(&m);
            continue;
        }
        take(l, m, now_ms);
        br_msg_destroy(&m);
    }
}

int gw_link_run(gw_link_t *l, int64_t now_ms, int ready)
{
    if (ready || l->sent || now_ms >= l->look_at)
        look(l, now_ms);
    if (l->was_up && !gw_link_up(l, now_ms)) {
        l->was_up = 0;
        fprintf(stderr, "bramble-gateway: the coordinator does not answer; serving from "
                        "routing table version %lld\n", (long long)l->version);
    }
    if (now_ms >= l->renew_at) {
        br_msg_t *m = br_msg_new(BR_MSG_REQUEST, "gateway.watch", ++l->seq);
        br_err_t err;
        if (m && br_msg_send(l->sock, m, &err) == 0) /* (a full queue: the next renewal) */
            l->sent = 1;
        br_msg_destroy(&m);
        /* soon again until the coordinator has answered once */
        l->renew_at = now_ms + (l->heard ? GW_WATCH_RENEW_MS : 1000);
    }
    int64_t wait = l->renew_at < l->look_at ? l->renew_at - now_ms : l->look_at - now_ms;
    return l->sent || wait < 0 ? 0 : wait > GW_WATCH_RENEW_MS ? GW_WATCH_RENEW_MS : (int)wait;
}

int gw_link_up(const gw_link_t *l, int64_t now_ms)
{
    return !l->refused && l->heard && now_ms - l->heard < GW_LINK_AWAY_MS;
}
