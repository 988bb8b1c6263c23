/* cmd_shell.c - bramble shell: a shell, or a command, inside a running job, on its
 * node, through the coordinator's relay (docs/shell.md). With a terminal: the
 * remote side gets one too (raw mode here, window size changes passed on, Ctrl-C
 * a byte for the remote terminal to turn into SIGINT); otherwise plain pipes, so
 * that `bramble shell 7 -- tar c results | tar x` works. The remote exit status
 * is this command's. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/signalfd.h>
#include <termios.h>
#include <unistd.h>
#include <zmq.h>

#include "cli.h"
#include "sock.h"
#include "stream.h"
#include "streamend.h"
#include "util.h"

#define ATTACH_WAIT_MS 25000 /* the relay gives up at 15 s: its word comes first */
#define CLI_GONE 255         /* the exit status when the stream broke, as ssh's */

static struct termios saved_tio;
static int tio_saved;
static int saved_fl[3] = {-1, -1, -1};

static void restore_terminal(void)
{
    if (tio_saved) {
        tcsetattr(0, TCSADRAIN, &saved_tio);
        tio_saved = 0;
    }
    for (int fd = 0; fd < 3; fd++)
        if (saved_fl[fd] >= 0) {
            fcntl(fd, F_SETFL, saved_fl[fd]);
            saved_fl[fd] = -1;
        }
}

static void raw_terminal(void)
{
    struct termios t;
    if (tcgetattr(0, &saved_tio) < 0)
        return;
    tio_saved = 1;
    t = saved_tio;
    cfmakeraw(&t);
    tcsetattr(0, TCSADRAIN, &t);
}

/* The streams end with a dup of fd, made non-blocking; its flags come back at exit
 * (the descriptions are shared with the shell that started us). */
static int dup_nonblock(int fd)
{
    saved_fl[fd] = fcntl(fd, F_GETFL);
    int d = fcntl(fd, F_DUPFD_CLOEXEC, 3);
    if (d < 0)
        return -1;
    if (saved_fl[fd] >= 0)
        fcntl(d, F_SETFL, saved_fl[fd] | O_NONBLOCK);
    return d;
}

static uint64_t window_size(void)
{
    struct winsize ws;
    if (ioctl(1, TIOCGWINSZ, &ws) < 0 || !ws.ws_row || !ws.ws_col)
        return (uint64_t)24 << 16 | 80;
    return (uint64_t)ws.ws_row << 16 | ws.ws_col;
}

typedef struct {
    cli_t *cli;
    void *sock;
    uint32_t id;
    br_streamend_t *end;
    int sigfd;
    int tty;
    int64_t seen, pinged, opened;
    int done;   /* 1: EXIT came (status), 2: CLOSE came or the stream broke */
    int status;
} session_t;

/* Write what the sinks hold before leaving: however long the reader takes (a pager
 * the user reads at leisure), until a signal (SIGWINCH aside). 0 when all went
 * out (or its reader went: a sink that cannot be written lets go of its bytes), -1
 * when a signal cut it short. */
static int drain(session_t *s)
{
    while (br_streamend_queued(s->end)) {
        zmq_pollitem_t it[2 * BR_STREAMEND_CHANNELS + 1];
        int n = br_streamend_poll(s->end, it, 2 * BR_STREAMEND_CHANNELS);
        it[n++] = (zmq_pollitem_t){NULL, s->sigfd, ZMQ_POLLIN, 0};
        if (zmq_poll(it, n, 1000) < 0 && errno != EINTR)
            break;
        struct signalfd_siginfo si;
        while (read(s->sigfd, &si, sizeof(si)) == sizeof(si))
            if (si.ssi_signo != SIGWINCH)
                return -1;
        br_streamend_turn(s->end);
    }
    return 0;
}

static void on_frame(session_t *s, const br_stream_hdr_t *h, void *p, size_t len)
{
    br_err_t err;
    s->seen = br_mono_ms();
    if (h->stream != s->id)
        return;
    if (br_streamend_open(s->end, h, p, &len, &err) < 0) {
        const char *why = "the client's side: a frame failed its check";
        br_streamend_send(s->end, BR_STREAM_CLOSE, 0, 0, why, strlen(why));
        s->done = 2;
        restore_terminal();
        cli_err(s->cli, "%s", err.text);
        return;
    }
    if (h->type == BR_STREAM_EXIT) {
        s->done = 1;
        s->status = (int)(h->arg & 0xff);
        return;
    }
    if (h->type == BR_STREAM_CLOSE) {
        s->done = 2;
        restore_terminal();
        cli_err(s->cli, "%.*s", (int)(len < BR_STREAM_REASON_MAX ? len : BR_STREAM_REASON_MAX),
                p ? (const char *)p : "closed");
        return;
    }
    if (br_streamend_frame(s->end, h, p, len, &err) < 0) {
        s->done = 2;
        restore_terminal();
        cli_err(s->cli, "%s", err.text);
        return;
    }
    if (h->type == BR_STREAM_ATTACHED && s->tty) /* (the size may have changed since) */
        br_streamend_send(s->end, BR_STREAM_WINCH, 0, window_size(), NULL, 0);
}

static void take_frames(session_t *s)
{
    static unsigned char buf[BR_STREAM_CHUNK];
    br_stream_hdr_t h;
    size_t len;
    int has, rc;
    for (int k = 0; k < 64 && !s->done && (rc = br_stream_recv(s->sock, &h, buf, sizeof(buf),
                                                               &len, &has)) != 0;
         k++)
        if (rc > 0)
            on_frame(s, &h, has ? buf : NULL, len);
}

/* Signals: a window change is passed on; an interruption (not a terminal's Ctrl-C,
 * which is a byte in raw mode) closes the stream. */
static void on_signals(session_t *s)
{
    struct signalfd_siginfo si;
    while (read(s->sigfd, &si, sizeof(si)) == sizeof(si)) {
        if (si.ssi_signo == SIGWINCH) {
            if (s->tty && br_streamend_attached(s->end))
                br_streamend_send(s->end, BR_STREAM_WINCH, 0, window_size(), NULL, 0);
            continue;
        }
        const char *why = "the client was interrupted";
        br_streamend_send(s->end, BR_STREAM_CLOSE, 0, 0, why, strlen(why));
        s->done = 2;
        s->status = 128 + (int)si.ssi_signo;
    }
}

static int pump(session_t *s)
{
    while (!s->done) {
        zmq_pollitem_t it[2 + 2 * BR_STREAMEND_CHANNELS];
        int n = 0;
        it[n++] = (zmq_pollitem_t){s->sock, 0, ZMQ_POLLIN, 0};
        it[n++] = (zmq_pollitem_t){NULL, s->sigfd, ZMQ_POLLIN, 0};
        n += br_streamend_poll(s->end, it + n, 2 * BR_STREAMEND_CHANNELS);
        if (zmq_poll(it, n, 250) < 0 && errno != EINTR)
            break;
        if (it[1].revents)
            on_signals(s);
        take_frames(s);
        if (s->done)
            break;
        if (br_streamend_turn(s->end) < 0) {
            restore_terminal();
            cli_err(s->cli, "the relay: %s", zmq_strerror(errno));
            return CLI_GONE;
        }
        int64_t now = br_mono_ms();
        if (now - s->pinged >= BR_STREAM_PING_MS) {
            s->pinged = now;
            br_stream_send(s->sock, NULL, 0, BR_STREAM_PING, 0, s->id, 0, NULL, 0, 0);
        }
        int attached = br_streamend_attached(s->end);
        if ((attached && now - s->seen > BR_STREAM_GONE_MS) ||
            (!attached && now - s->opened > ATTACH_WAIT_MS)) {
            restore_terminal();
            cli_err(s->cli, "%s", attached ? "the coordinator stopped answering"
                                           : "no answer from the coordinator's relay");
            return CLI_GONE;
        }
    }
    if (s->done == 1 && drain(s) < 0) {
        cli_err(s->cli, "interrupted: %zu bytes of the command's output were not written",
                br_streamend_queued(s->end));
        return CLI_GONE;
    }
    return s->done == 1 ? s->status : s->status ? s->status : CLI_GONE;
}

/* Ask for the stream, then carry it. */
int cli_shell_run(cli_t *cli, int64_t job, long rank, int tty, char **cmd, int ncmd)
{
    json_t *body = json_pack("{s:I, s:s, s:i, s:b}", "id", (json_int_t)job, "kind", "shell",
                             "rank", (int)rank, "tty", tty);
    if (ncmd) {
        json_t *words = json_array();
        for (int i = 0; i < ncmd; i++)
            json_array_append_new(words, json_string(cmd[i]));
        json_object_set_new(body, "command", words);
    }
    if (tty) {
        uint64_t ws = window_size();
        const char *term = getenv("TERM");
        json_object_set_new(body, "rows", json_integer((json_int_t)(ws >> 16)));
        json_object_set_new(body, "cols", json_integer((json_int_t)(ws & 0xffff)));
        if (term && *term && strlen(term) < 64)
            json_object_set_new(body, "term", json_string(term));
    }
    json_t *r = cli_call(cli, "stream.open", body);
    if (!r)
        return CLI_FAIL;
    char ep[300];
    json_int_t id = json_integer_value(json_object_get(r, "stream"));
    const char *ticket = json_string_value(json_object_get(r, "ticket"));
    const char *key = json_string_value(json_object_get(r, "key"));
    int port = (int)json_integer_value(json_object_get(r, "relay_port"));
    if (!ticket || strlen(ticket) != BR_STREAM_TICKET || !br_streamseal_key_ok(key) ||
        br_stream_endpoint(cli->cred.endpoint, port, ep, sizeof(ep)) < 0) {
        json_decref(r);
        return cli_fail(cli, ticket && !key ? "stream.open: the answer has no stream key; "
                                              "the coordinator is older than this bramble "
                                              "(upgrade brambled)"
                                            : "stream.open: the answer names no relay");
    }
    br_err_t err;
    void *ctx = zmq_ctx_new();
    session_t s = {.cli = cli, .id = (uint32_t)id, .tty = tty, .sigfd = -1};
    s.sock = br_sock_stream_client(ctx, ep, &err);
    int rc = CLI_GONE;
    if (!s.sock) {
        cli_err(cli, "the relay: %s", err.text);
        goto out;
    }
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGWINCH);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGHUP);
    sigprocmask(SIG_BLOCK, &set, NULL);
    s.sigfd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
    s.end = br_streamend_new(s.sock, s.id, key, BR_STREAM_FROM_CLI, &err);
    if (!s.end || s.sigfd < 0) {
        cli_err(cli, "out of memory");
        goto out;
    }
    br_streamend_source(s.end, 0, dup_nonblock(0)); /* (never closed: main.c) */
    br_streamend_sink(s.end, 1, dup_nonblock(1), 0);
    if (!tty)
        br_streamend_sink(s.end, 2, dup_nonblock(2), 0);
    atexit(restore_terminal);
    if (tty)
        raw_terminal();
    s.opened = s.seen = s.pinged = br_mono_ms();
    br_stream_send(s.sock, NULL, 0, BR_STREAM_ATTACH, 0, s.id, 0, ticket, BR_STREAM_TICKET, 0);
    rc = pump(&s);
out:
    restore_terminal();
    json_decref(r);
    br_streamend_destroy(&s.end);
    if (s.sigfd >= 0)
        close(s.sigfd);
    br_sock_close(&s.sock);
    zmq_ctx_term(ctx);
    return rc;
}

static int cmd_shell(cli_t *cli, int argc, char **argv)
{
    static const struct option opts[] = {{"rank", required_argument, NULL, 'r'},
                                          {"tty", no_argument, NULL, 't'},
                                          {"no-tty", no_argument, NULL, 'T'},
                                          {0, 0, 0, 0}};
    long rank = 0;
    int force = -1, c, end = argc;
    for (int i = 1; i < argc; i++) /* options before "--", the command after it */
        if (strcmp(argv[i], "--") == 0) {
            end = i;
            break;
        }
    const char *jobarg = NULL;
    optind = 0;
    /* options before JOB and after it (stopping at each word that is not one) */
    for (int pass = 0; pass < 2; pass++) {
        while (optind < end && (c = getopt_long(end, argv, "+r:tT", opts, NULL)) != -1) {
            if (c == 'r') {
                if (cli_parse_long(cli, "--rank", optarg, 0, 1 << 20, &rank) != 0)
                    return CLI_USAGE;
            } else if (c == 't' || c == 'T') {
                force = c == 't';
            } else {
                return cli_bad_option(cli, c, argv);
            }
        }
        if (pass == 0) {
            if (optind >= end)
                return cli_usage(cli, "which job? (bramble shell JOB [-- COMMAND...])");
            jobarg = argv[optind++];
        }
    }
    int64_t job;
    if (cli_job_id(cli, jobarg, &job) != CLI_OK)
        return CLI_USAGE;
    /* the command: after "--", or the words after JOB and its options */
    char **cmd = end < argc ? argv + end + 1 : argv + optind;
    int ncmd = end < argc ? argc - end - 1 : argc - optind;
    if (end < argc && optind < end)
        return cli_usage(cli, "unexpected '%s' before '--'", argv[optind]);
    int tty = force >= 0 ? force : (ncmd == 0 && isatty(0) && isatty(1));
    if (tty && !isatty(0))
        return cli_usage(cli, "--tty needs a terminal on standard input");
    if (!cli_client(cli))
        return CLI_FAIL;
    return cli_shell_run(cli, job, rank, tty, cmd, ncmd);
}

const cli_cmd_t cli_shell_cmds[] = {
    {NULL, "shell", cmd_shell, "JOB [--rank R] [-t|-T] [-- COMMAND [ARG...]]",
     "a shell, or a command, inside a running job on its node",
     "Runs on the node of the job's rank R (default 0), as the job's user, in its\n"
     "environment (BRAMBLE_*, CUDA_VISIBLE_DEVICES), working directory and process\n"
     "tree: cancelling the job, or its end, closes the shell too. Owner or admin.\n"
     "With a terminal and no command: an interactive shell ($SHELL of the job's\n"
     "user, else /bin/sh) on a terminal of its own, resized with this one; Ctrl-C\n"
     "goes to what runs there. With a command, or without a terminal: plain pipes\n"
     "(stdin, stdout and stderr each their own), so it can sit in a pipeline:\n"
     "  bramble shell 7 -- tar c results | tar x\n"
     "The command is run as given (found on the job's PATH); for shell syntax use\n"
     "  bramble shell 7 -- sh -c 'ls *.pt | wc -l'\n"
     "Exits with the remote command's status (128+N when killed by signal N), or\n"
     "255 when the stream broke (the reason on stderr).\n"
     "\nOptions:\n"
     "  --rank R     the rank whose node to run on (default 0)\n"
     "  -t, --tty    a terminal even with a command (bramble shell 7 -t -- htop)\n"
     "  -T, --no-tty plain pipes even on a terminal\n"},
    {0},
};
