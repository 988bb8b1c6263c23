/* cmd_forward.c - bramble forward: a port of a running job's node on this machine.
 * Listens on a local port (loopback unless --bind says otherwise); each
 * connection is a stream of its own (stream.open, then the relay, proto/stream.h)
 * to 127.0.0.1:PORT (or [::1]:PORT) on the node, many at once, all on one connection to the
 * relay. With --stdio, standard input and output are the one connection (an
 * ssh ProxyCommand). Never to another host: the node's agent connects to its own
 * loopback only. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zmq.h>

#include "cli.h"
#include "sock.h"
#include "stream.h"
#include "streamend.h"
#include "util.h"

#define FWD_MAX 64               /* connections carried at once */
#define ATTACH_WAIT_MS 25000     /* the relay gives up at 15 s: its word comes first */
#define JOB_CHECK_MS 2000        /* a listening forward asks this often if its job ended */

typedef struct {
    uint32_t id;
    br_streamend_t *end;
    int64_t opened;
    int exited; /* the node's side ended: dropped once what came is written out */
} fwd_t;

/* A connection accepted whose stream.open is in flight: the loop goes on carrying
 * the other connections' bytes meanwhile, rather than waiting a round trip to the
 * coordinator (on a far link, tens of milliseconds) for each new one. */
typedef struct {
    uint32_t seq;
    int fd;
    int64_t sent;
} opening_t;

#define OPENING_MAX (BR_CLIENT_PENDING - 1) /* (one request left for the job's check) */

typedef struct {
    cli_t *cli;
    int64_t job;
    long rank, port;
    void *ctx, *sock;
    char endpoint[300];
    fwd_t f[FWD_MAX];
    int n;
    opening_t opening[OPENING_MAX];
    int nopening;
    int64_t seen, pinged;
    int64_t checked;    /* monotonic ms the job's state was last asked (listening) */
    uint32_t check_seq; /* that job.show, in flight while checking */
    int checking;
    int stdio; /* --stdio: the one stream's end is the whole command's */
    int status;
} fwd_state_t;

static json_t *open_body(const fwd_state_t *st)
{
    return json_pack("{s:I, s:s, s:i, s:i}", "id", (json_int_t)st->job, "kind", "forward",
                     "rank", (int)st->rank, "port", (int)st->port);
}

static void close_pair(int in_fd, int out_fd)
{
    if (in_fd >= 0)
        close(in_fd);
    if (out_fd >= 0 && out_fd != in_fd)
        close(out_fd);
}

/* stream.open was refused (or not answered): say why, and close the descriptors; a
 * refusal that will not change (the job ended, or is not the caller's) sets
 * st->status, which stops the command. -1. */
static int refused(fwd_state_t *st, const br_err_t *err, int in_fd, int out_fd)
{
    cli_err(st->cli, "%s", err->text);
    if (err->errnum != EBUSY && err->errnum != EAGAIN && err->errnum != EHOSTUNREACH &&
        err->errnum != ETIMEDOUT)
        st->status = CLI_FAIL; /* (busy, not started yet, a node away: may pass) */
    close_pair(in_fd, out_fd);
    return -1;
}

/* stream.open's answer r: the stream attached at the relay, its end reading in_fd
 * and writing out_fd (taken). 0, or -1 after saying why. */
static int attach_stream(fwd_state_t *st, const json_t *r, int in_fd, int out_fd,
                         int is_socket)
{
    br_err_t err;
    const char *ticket = json_string_value(json_object_get(r, "ticket"));
    const char *key = json_string_value(json_object_get(r, "key"));
    int port = (int)json_integer_value(json_object_get(r, "relay_port"));
    uint32_t id = (uint32_t)json_integer_value(json_object_get(r, "stream"));
    if (!ticket || strlen(ticket) != BR_STREAM_TICKET || !br_streamseal_key_ok(key)) {
        cli_err(st->cli, ticket && !key ? "stream.open: the answer has no stream key; the "
                                          "coordinator is older than this bramble (upgrade "
                                          "brambled)"
                                        : "stream.open: the answer names no ticket and key");
        close_pair(in_fd, out_fd);
        return -1;
    }
    if (!st->sock) {
        if (br_stream_endpoint(st->cli->cred.endpoint, port, st->endpoint,
                               sizeof(st->endpoint)) < 0 ||
            !(st->sock = br_sock_stream_client(st->ctx, st->endpoint, &err))) {
            cli_err(st->cli, "the relay: %s", st->sock ? "" : err.text);
            close_pair(in_fd, out_fd);
            return -1;
        }
        st->seen = br_mono_ms();
    }
    fwd_t *f = &st->f[st->n];
    memset(f, 0, sizeof(*f));
    if (!(f->end = br_streamend_new(st->sock, id, key, BR_STREAM_FROM_CLI, &err))) {
        cli_err(st->cli, "%s", err.text);
        close_pair(in_fd, out_fd);
        return -1;
    }
    f->id = id;
    f->opened = br_mono_ms();
    br_streamend_source(f->end, 0, in_fd);
    br_streamend_sink(f->end, 1, out_fd, is_socket);
    if (st->n++ == 0) /* (nothing was due from the relay while none was open) */
        st->seen = br_mono_ms();
    br_stream_send(st->sock, NULL, 0, BR_STREAM_ATTACH, 0, id, 0, ticket, BR_STREAM_TICKET, 0);
    return 0;
}

/* A stream to the node's port, its end reading in_fd and writing out_fd (taken),
 * waiting for stream.open's answer (--stdio's one stream). 0, or -1 after saying why. */
static int open_stream(fwd_state_t *st, int in_fd, int out_fd, int is_socket)
{
    br_msg_t *resp = NULL;
    br_err_t err;
    if (br_client_rpc(cli_client(st->cli), "stream.open", open_body(st), st->cli->timeout_ms,
                      &resp, &err) < 0)
        return refused(st, &err, in_fd, out_fd);
    int rc = attach_stream(st, br_msg_body(resp), in_fd, out_fd, is_socket);
    br_msg_destroy(&resp);
    return rc;
}

/* The answer to seq, sent at sent: 1 with *resp when it came, 0 while it is in
 * flight, -1 with err when refused or, once the CLI's timeout passed without it,
 * given up (ETIMEDOUT, naming what). */
static int answer_by(fwd_state_t *st, uint32_t seq, int64_t sent, int64_t now,
                     const char *what, br_msg_t **resp, br_err_t *err)
{
    br_client_t *client = cli_client(st->cli);
    int rc = br_client_try(client, seq, resp, err);
    if (rc != 0 || now - sent <= st->cli->timeout_ms)
        return rc;
    br_client_recv(client, seq, 0, NULL, err); /* (forgotten: dropped should it come) */
    br_errf(err, ETIMEDOUT, "%s: no answer from the coordinator in %.1f s", what,
            st->cli->timeout_ms / 1000.0);
    return -1;
}

/* An accepted connection c: its stream.open sent, answered in a later turn. */
static void ask_open(fwd_state_t *st, int c)
{
    br_err_t err;
    uint32_t seq;
    if (br_client_send(cli_client(st->cli), "stream.open", open_body(st), &seq, &err) < 0) {
        refused(st, &err, c, c);
        return;
    }
    st->opening[st->nopening++] = (opening_t){seq, c, br_mono_ms()};
}

/* The stream.opens answered since: each attached, or its refusal said; one not
 * answered within the CLI's timeout is given up. */
static void take_opens(fwd_state_t *st, int64_t now)
{
    for (int i = st->nopening; i-- > 0;) {
        opening_t o = st->opening[i];
        br_msg_t *resp = NULL;
        br_err_t err;
        int rc = answer_by(st, o.seq, o.sent, now, "stream.open", &resp, &err);
        if (rc == 0)
            continue;
        st->opening[i] = st->opening[--st->nopening];
        if (rc > 0) {
            attach_stream(st, br_msg_body(resp), o.fd, o.fd, 1);
            br_msg_destroy(&resp);
        } else {
            refused(st, &err, o.fd, o.fd);
        }
    }
}

/* Forget stream i; why: tell the node's side first (NULL: it ended already). */
static void drop(fwd_state_t *st, int i, const char *why)
{
    if (why)
        br_streamend_send(st->f[i].end, BR_STREAM_CLOSE, 0, 0, why, strlen(why));
    br_streamend_destroy(&st->f[i].end);
    st->f[i] = st->f[--st->n];
}

static int find(fwd_state_t *st, uint32_t id)
{
    for (int i = 0; i < st->n; i++)
        if (st->f[i].id == id)
            return i;
    return -1;
}

static void take_frames(fwd_state_t *st)
{
    static unsigned char buf[BR_STREAM_CHUNK];
    br_stream_hdr_t h;
    size_t len;
    int has, rc;
    for (int k = 0; k < 256 && (rc = br_stream_recv(st->sock, &h, buf, sizeof(buf), &len,
                                                    &has)) != 0;
         k++) {
        st->seen = br_mono_ms();
        int i = rc > 0 ? find(st, h.stream) : -1;
        if (i < 0 && rc > 0)
            br_stream_disown(st->sock, &h, "the client's side no longer has this stream", 0);
        if (i < 0)
            continue;
        br_err_t err;
        if (br_streamend_open(st->f[i].end, &h, buf, &len, &err) < 0) {
            cli_err(st->cli, "%s", err.text);
            drop(st, i, "the client's side: a frame failed its check");
        } else if (h.type == BR_STREAM_EXIT) { /* the node's side closed, both ways */
            st->f[i].exited = 1;
        } else if (h.type == BR_STREAM_CLOSE) {
            cli_err(st->cli, "%.*s", (int)len, has ? (const char *)buf : "closed");
            if (st->stdio)
                st->status = CLI_FAIL;
            drop(st, i, NULL);
        } else if (br_streamend_frame(st->f[i].end, &h, has ? buf : NULL, len, &err) < 0) {
            cli_err(st->cli, "%s", err.text);
            drop(st, i, err.text);
        }
    }
}

/* A local listening socket at bind:port. -1 after saying why. */
static int listen_on(cli_t *cli, const char *bind_addr, long port)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV},
                    *ai = NULL;
    char ps[16];
    snprintf(ps, sizeof(ps), "%ld", port);
    int rc = getaddrinfo(bind_addr, ps, &hints, &ai);
    if (rc != 0)
        return cli_err(cli, "--bind %s: %s", bind_addr, gai_strerror(rc)), -1;
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0), one = 1;
    if (fd >= 0)
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (fd < 0 || bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(fd, 64) < 0) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        freeaddrinfo(ai);
        return cli_err(cli, "cannot listen on %s port %ld: %s", bind_addr, port,
                       strerror(e)),
               -1;
    }
    freeaddrinfo(ai);
    return fd;
}

/* Whether job.show's answer r says the job has not ended (a job back in the queue,
 * to start again elsewhere, goes on). 0 after saying so, with st->status set. */
static int goes_on(fwd_state_t *st, const json_t *r)
{
    const char *state = json_string_value(json_object_get(json_object_get(r, "job"), "state"));
    int ended = state && (strcmp(state, "completed") == 0 || strcmp(state, "failed") == 0 ||
                          strcmp(state, "cancelled") == 0);
    if (ended) {
        cli_err(st->cli, "job %lld is %s: a forward needs a running job", (long long)st->job,
                state);
        st->status = CLI_FAIL;
    }
    return !ended;
}

/* A refusal of job.show: 0 after saying so (no such job, or not the caller's),
 * with st->status set; a coordinator that does not answer is not an end. */
static int show_refused(fwd_state_t *st, const br_err_t *err)
{
    if (err->errnum != ENOENT)
        return 1;
    cli_err(st->cli, "%s", err->text);
    st->status = CLI_FAIL;
    return 0;
}

/* Whether the job has not ended, asked and waited for (before listening). */
static int job_goes_on(fwd_state_t *st)
{
    st->checked = br_mono_ms();
    br_msg_t *resp = NULL;
    br_err_t err;
    if (br_client_rpc(cli_client(st->cli), "job.show",
                      json_pack("{s:I}", "id", (json_int_t)st->job), st->cli->timeout_ms,
                      &resp, &err) < 0)
        return show_refused(st, &err);
    int on = goes_on(st, br_msg_body(resp));
    br_msg_destroy(&resp);
    return on;
}

/* The same while listening, without holding the streams: asked every JOB_CHECK_MS,
 * the answer taken in a later turn. 0 once it says the job ended. */
static int job_check(fwd_state_t *st, int64_t now)
{
    br_client_t *client = cli_client(st->cli);
    br_err_t err;
    if (!st->checking) {
        if (now - st->checked >= JOB_CHECK_MS &&
            br_client_send(client, "job.show", json_pack("{s:I}", "id", (json_int_t)st->job),
                           &st->check_seq, &err) == 0) {
            st->checked = now;
            st->checking = 1;
        }
        return 1;
    }
    br_msg_t *resp = NULL;
    int rc = answer_by(st, st->check_seq, st->checked, now, "job.show", &resp, &err);
    if (rc == 0)
        return 1;
    st->checking = 0;
    st->checked = now;
    /* (not answered in time: not an end, asked again later) */
    int on = rc > 0 ? goes_on(st, br_msg_body(resp)) : show_refused(st, &err);
    br_msg_destroy(&resp);
    return on;
}

static int serve(fwd_state_t *st, int lfd, int sigfd)
{
    while (st->status < 0) {
        zmq_pollitem_t it[4 + FWD_MAX * 2 * BR_STREAMEND_CHANNELS];
        int n = 0;
        it[n++] = (zmq_pollitem_t){NULL, sigfd, ZMQ_POLLIN, 0};
        if (st->sock)
            it[n++] = (zmq_pollitem_t){st->sock, 0, ZMQ_POLLIN, 0};
        if (st->nopening || st->checking) /* (answers to what is in flight) */
            it[n++] = (zmq_pollitem_t){br_client_socket(cli_client(st->cli)), 0, ZMQ_POLLIN, 0};
        int accepting = lfd >= 0 && st->n + st->nopening < FWD_MAX && st->nopening < OPENING_MAX;
        if (accepting)
            it[n++] = (zmq_pollitem_t){NULL, lfd, ZMQ_POLLIN, 0};
        for (int i = 0; i < st->n; i++)
            n += br_streamend_poll(st->f[i].end, it + n, 2 * BR_STREAMEND_CHANNELS);
        if (zmq_poll(it, n, 250) < 0 && errno != EINTR)
            return CLI_FAIL;
        if (it[0].revents) {
            struct signalfd_siginfo si;
            if (read(sigfd, &si, sizeof(si)) == sizeof(si))
                st->status = st->stdio ? 128 + (int)si.ssi_signo : CLI_OK;
            break;
        }
        if (accepting) {
            int c = accept4(lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
            if (c >= 0) {
                int one = 1;
                setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
                ask_open(st, c); /* (a refusal that stays sets status) */
            }
        }
        int64_t now = br_mono_ms();
        if (st->nopening)
            take_opens(st, now);
        if (st->sock)
            take_frames(st);
        for (int i = st->n; i-- > 0;) {
            fwd_t *f = &st->f[i];
            if (br_streamend_turn(f->end) < 0)
                drop(st, i, NULL);
            else if (f->exited && !br_streamend_queued(f->end))
                drop(st, i, NULL); /* (all it sent is written out) */
            else if (st->stdio && br_streamend_attached(f->end) && br_streamend_sinks_done(f->end))
                drop(st, i, "the client's side ended"); /* the node's side closed: as ssh -W */
            else if (!br_streamend_attached(f->end) && now - f->opened > ATTACH_WAIT_MS)
                drop(st, i, "no answer in time");
        }
        if (lfd >= 0 && !job_check(st, now))
            break;
        if (st->sock && st->n && now - st->pinged >= BR_STREAM_PING_MS) {
            st->pinged = now;
            br_stream_send(st->sock, NULL, 0, BR_STREAM_PING, 0, 0, 0, NULL, 0, 0);
        }
        if (st->sock && st->n && now - st->seen > BR_STREAM_GONE_MS) {
            cli_err(st->cli, "the coordinator stopped answering");
            while (st->n) /* (told, should it be there after all: its slots go) */
                drop(st, st->n - 1, "the coordinator stopped answering");
            if (st->stdio)
                return CLI_FAIL;
        }
        if (st->stdio && st->n == 0 && st->status < 0)
            st->status = CLI_OK; /* (its stream ended) */
    }
    return st->status < 0 ? CLI_OK : st->status;
}

static int cmd_forward(cli_t *cli, int argc, char **argv)
{
    static const struct option opts[] = {{"rank", required_argument, NULL, 'r'},
                                          {"stdio", no_argument, NULL, 's'},
                                          {"bind", required_argument, NULL, 'b'},
                                          {0, 0, 0, 0}};
    fwd_state_t st = {.cli = cli, .status = -1};
    const char *bind_addr = "127.0.0.1";
    int c;
    optind = 0;
    while ((c = getopt_long(argc, argv, "r:", opts, NULL)) != -1) {
        if (c == 'r') {
            if (cli_parse_long(cli, "--rank", optarg, 0, 1 << 20, &st.rank) != 0)
                return CLI_USAGE;
        } else if (c == 's') {
            st.stdio = 1;
        } else if (c == 'b') {
            bind_addr = optarg;
        } else {
            return cli_bad_option(cli, c, argv);
        }
    }
    const char *pos[2];
    static const char *const names[] = {"JOB", "[LOCAL:]PORT"};
    if (cli_positional(cli, argc, argv, 2, names, pos) != 0)
        return CLI_USAGE;
    if (cli_job_id(cli, pos[0], &st.job) != CLI_OK)
        return CLI_USAGE;
    long local;
    const char *colon = strchr(pos[1], ':');
    char lbuf[16];
    if (colon && (size_t)(colon - pos[1]) < sizeof(lbuf)) {
        snprintf(lbuf, sizeof(lbuf), "%.*s", (int)(colon - pos[1]), pos[1]);
        if (cli_parse_long(cli, "the local port", lbuf, 0, 65535, &local) != 0 ||
            cli_parse_long(cli, "the port", colon + 1, 1, 65535, &st.port) != 0)
            return CLI_USAGE;
    } else {
        if (cli_parse_long(cli, "the port", pos[1], 1, 65535, &st.port) != 0)
            return CLI_USAGE;
        local = st.port;
    }
    if (!cli_client(cli))
        return CLI_FAIL;
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGHUP);
    sigprocmask(SIG_BLOCK, &set, NULL);
    int sigfd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC), lfd = -1, rc = CLI_FAIL;
    signal(SIGPIPE, SIG_IGN);
    st.ctx = zmq_ctx_new();
    if (st.stdio) {
        /* its own standard input and output (closed at their ends, so that the
         * reader of our output sees its end) */
        if (open_stream(&st, 0, 1, 0) < 0)
            goto out;
    } else {
        if (!job_goes_on(&st) || (lfd = listen_on(cli, bind_addr, local)) < 0)
            goto out;
        struct sockaddr_storage ss;
        socklen_t sl = sizeof(ss);
        char host[NI_MAXHOST], serv[NI_MAXSERV];
        if (getsockname(lfd, (struct sockaddr *)&ss, &sl) == 0 &&
            getnameinfo((struct sockaddr *)&ss, sl, host, sizeof(host), serv, sizeof(serv),
                        NI_NUMERICHOST | NI_NUMERICSERV) == 0)
            printf("forwarding %s:%s to port %ld of job %lld (rank %ld); Ctrl-C stops\n", host,
                   serv, st.port, (long long)st.job, st.rank);
        fflush(stdout);
    }
    rc = serve(&st, lfd, sigfd);
out:
    while (st.n) /* (the node's side closes now, not after the relay's silence) */
        drop(&st, st.n - 1, "the client stopped");
    while (st.nopening) /* (a stream opened for one is never attached: the relay lets
                         * it go after its wait) */
        close(st.opening[--st.nopening].fd);
    if (lfd >= 0)
        close(lfd);
    if (sigfd >= 0)
        close(sigfd);
    br_sock_close(&st.sock);
    zmq_ctx_term(st.ctx);
    return rc;
}

const cli_cmd_t cli_forward_cmds[] = {
    {NULL, "forward", cmd_forward, "JOB [LOCAL:]PORT [--rank R] [--bind ADDR] [--stdio]",
     "a port of a running job's node on this machine",
     "Listens on LOCAL (default PORT; 0: any free port, printed) on this machine and\n"
     "carries each connection to 127.0.0.1:PORT (or [::1]:PORT where 127.0.0.1\n"
     "refuses) on the node of the job's rank R (default 0), many at once, through\n"
     "the coordinator: the node needs no open port. Only that node's loopback is\n"
     "reachable, never another host. Runs until Ctrl-C, or until the job ends.\n"
     "Owner or admin.\n"
     "  bramble forward 7 8888          # Jupyter in job 7: http://127.0.0.1:8888\n"
     "  bramble forward 7 16006:6006    # its TensorBoard on local port 16006\n"
     "With --stdio, standard input and output are one connection, for ssh:\n"
     "  ssh -o ProxyCommand='bramble forward 7 2222 --stdio' user@job7\n"
     "\nOptions:\n"
     "  --rank R       the rank whose node to reach (default 0)\n"
     "  --bind ADDR    the local address to listen on (default 127.0.0.1)\n"
     "  --stdio        one connection on standard input and output, no listening\n"},
    {0},
};
