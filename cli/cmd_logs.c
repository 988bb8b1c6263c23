/* cmd_logs.c - what jobs say and what happens to them: logs (a job's output,
 * optionally followed) and events (the cluster's event stream). */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <string.h>

#include "cli.h"
#include "util.h"

#define LOGS_POLL_MS 200
#define EVENTS_POLL_MS 300
#define EVENTS_LIMIT 500

/* ---- logs */

/* Write len bytes of rank's output with each line labelled "RANK: ", as srun
 * --label does. midline remembers, per rank and stream, a line left unfinished. */
static int write_labelled(FILE *out, json_t *midline, int rank, int stream,
                          const char *data, size_t len)
{
    char key[32];
    snprintf(key, sizeof(key), "%d.%d", rank, stream);
    int mid = json_is_true(json_object_get(midline, key));
    for (size_t i = 0; i < len;) {
        const char *nl = memchr(data + i, '\n', len - i);
        size_t end = nl ? (size_t)(nl - data) + 1 : len;
        if (!mid && fprintf(out, "%d: ", rank) < 0)
            return -1;
        if (fwrite(data + i, 1, end - i, out) != end - i)
            return -1;
        mid = nl == NULL;
        i = end;
    }
    json_object_set_new(midline, key, json_boolean(mid));
    return 0;
}

/* Hand the chunks of one job.logs answer to fn: their bytes lie back to back in
 * the data frame, their lengths in "chunks". Returns how many, or -1 when the
 * answer does not add up or fn failed. */
static int each_chunk(cli_t *cli, const br_msg_t *m, cli_chunk_fn fn, void *arg)
{
    size_t dlen = 0, off = 0, i;
    const char *data = br_msg_data(m, &dlen);
    json_t *body = br_msg_body(m), *ch;
    json_t *chunks = json_object_get(body, "chunks");
    int ranks = (int)json_integer_value(json_object_get(body, "ranks"));
    if (!json_is_array(chunks))
        return cli_err(cli, "job.logs: the answer has no chunks"), -1;
    json_array_foreach(chunks, i, ch) {
        json_int_t len = json_integer_value(json_object_get(ch, "len"));
        if (len < 0 || (size_t)len > dlen - off)
            return cli_err(cli, "job.logs: chunk %zu runs past the data frame", i), -1;
        if (len && fn(arg, ranks, (int)json_integer_value(json_object_get(ch, "rank")),
                      (int)json_integer_value(json_object_get(ch, "stream")), data + off,
                      (size_t)len) < 0)
            return -1;
        off += (size_t)len;
    }
    return (int)json_array_size(chunks);
}

int cli_read_logs(cli_t *cli, int64_t id, int rank, int follow, cli_chunk_fn fn, void *arg)
{
    json_t *after = json_integer(0);
    int64_t silent_since = 0;
    int rc = CLI_FAIL;
    cli_watch_t watch = {.job = id, .logs = 1, .poll_ms = LOGS_POLL_MS};
    if (follow)
        cli_watch_wait(cli, &watch, 0); /* news of its output from now on; then look */
    for (;;) {
        if (follow && cli_wait_expired(cli)) {
            rc = cli_wait_gave_up(cli, id);
            break;
        }
        br_msg_t *m = NULL;
        json_t *body = json_pack("{s:I, s:O, s:i}", "id", (json_int_t)id, "after",
                                 after, "rank", rank);
        int r = follow ? cli_rpc_poll(cli, "job.logs", body, &m, &silent_since)
                       : cli_rpc(cli, "job.logs", body, &m);
        if (r < 0)
            break;
        if (r > 0)
            continue; /* following, and the coordinator was silent: go on */
        int ranks = (int)json_integer_value(json_object_get(br_msg_body(m), "ranks"));
        if (rank >= 0 && ranks > 0 && rank >= ranks) {
            cli_err(cli, "job %lld has no rank %d (its ranks are 0 to %d)", (long long)id,
                    rank, ranks - 1);
            br_msg_destroy(&m);
            break;
        }
        int n = each_chunk(cli, m, fn, arg);
        json_t *next = json_object_get(br_msg_body(m), "next");
        int end = json_is_true(json_object_get(br_msg_body(m), "end"));
        if (next) {
            json_decref(after);
            after = json_incref(next);
        }
        br_msg_destroy(&m);
        if (n < 0)
            break;
        if (end || (!follow && n == 0)) {
            rc = CLI_OK;
            break;
        }
        if (n == 0)
            cli_watch_wait(cli, &watch, cli->wait_deadline_ms > 0
                                            ? cli->wait_deadline_ms - br_mono_ms()
                                            : -1);
    }
    json_decref(after);
    return rc;
}

typedef struct {
    cli_t *cli;
    int all;         /* every rank asked for: label lines when there are several */
    FILE *out;       /* NULL: a job's stdout to ours, its stderr to ours */
    json_t *midline; /* labelling: which rank's line is left unfinished */
} writer_t;

static int write_chunk(void *arg, int ranks, int rank, int stream, const char *data,
                       size_t len)
{
    writer_t *w = arg;
    FILE *out = w->out ? w->out : stream == 2 ? stderr : stdout;
    int rc;
    if (w->all && ranks > 1) {
        if (!w->midline)
            w->midline = json_object();
        rc = write_labelled(out, w->midline, rank, stream, data, len);
    } else {
        rc = fwrite(data, 1, len, out) == len ? 0 : -1;
    }
    if (rc < 0)
        return cli_err(w->cli, "cannot write the output: %s", strerror(errno)), -1;
    fflush(out);
    return 0;
}

int cli_stream_logs(cli_t *cli, int64_t id, int rank, int follow, FILE *out)
{
    writer_t w = {cli, rank < 0, out, NULL};
    fflush(stdout);
    int rc = cli_read_logs(cli, id, rank, follow, write_chunk, &w);
    json_decref(w.midline);
    return rc;
}

static int cmd_logs(cli_t *cli, int argc, char **argv)
{
    static const struct option opts[] = {{"follow", no_argument, NULL, 'f'},
                                         {"rank", required_argument, NULL, 'r'},
                                         {0}};
    static const char *names[] = {"job ID"};
    int follow = 0, c;
    long rank = -1;
    int64_t id;
    const char *arg;
    while ((c = getopt_long(argc, argv, ":f", opts, NULL)) != -1) {
        if (c == 'f')
            follow = 1;
        else if (c == 'r' && cli_parse_long(cli, "--rank", optarg, 0, 65535, &rank))
            return CLI_USAGE;
        else if (c != 'r')
            return cli_bad_option(cli, c, argv);
    }
    if (cli_positional(cli, argc, argv, 1, names, &arg) != 0)
        return CLI_USAGE;
    int rc = cli_job_id(cli, arg, &id); /* (12[3]: a task of an array) */
    if (rc != CLI_OK)
        return rc;
    return cli_stream_logs(cli, id, (int)rank, follow, NULL);
}

/* ---- events */

static void print_event(const json_t *ev, int json)
{
    if (json) {
        cli_print_json_line(ev);
        return;
    }
    char when[32], job[32], node[64], state[32], reason[512];
    cli_fmt_time(json_object_get(ev, "time"), when, sizeof(when));
    cli_fmt_value(json_object_get(ev, "job"), job, sizeof(job));
    cli_fmt_value(json_object_get(ev, "node"), node, sizeof(node));
    cli_fmt_value(json_object_get(ev, "state"), state, sizeof(state));
    cli_fmt_value(json_object_get(ev, "reason"), reason, sizeof(reason));
    printf("%-19s  %-5s  %-12s  %-10s  %s\n", when, job, node, state, reason);
}

/* One event.list round: prints what came, moves *after on. Returns how many
 * events came, or -1. */
static int events_round(cli_t *cli, int64_t job, json_int_t *after, int json,
                        int follow, int64_t *silent_since)
{
    br_msg_t *m = NULL;
    json_t *body = json_pack("{s:I, s:I, s:i}", "after", *after, "job", (json_int_t)job,
                             "limit", EVENTS_LIMIT);
    int r = follow ? cli_rpc_poll(cli, "event.list", body, &m, silent_since)
                   : cli_rpc(cli, "event.list", body, &m);
    if (r != 0)
        return r > 0 ? 0 : -1;
    json_t *events = json_object_get(br_msg_body(m), "events"), *ev;
    json_t *next = json_object_get(br_msg_body(m), "next");
    size_t i;
    json_array_foreach(events, i, ev) {
        print_event(ev, json);
        json_t *eid = json_object_get(ev, "id");
        if (json_is_integer(eid) && json_integer_value(eid) > *after)
            *after = json_integer_value(eid);
    }
    if (json_is_integer(next) && json_integer_value(next) > *after)
        *after = json_integer_value(next);
    int n = (int)json_array_size(events);
    br_msg_destroy(&m);
    fflush(stdout);
    return n;
}

static int cmd_events(cli_t *cli, int argc, char **argv)
{
    static const struct option opts[] = {{"follow", no_argument, NULL, 'f'},
                                         {"json", no_argument, NULL, 'j'},
                                         {"job", required_argument, NULL, 'J'},
                                         {0}};
    int follow = 0, json = 0, c;
    long job = 0;
    while ((c = getopt_long(argc, argv, ":f", opts, NULL)) != -1) {
        if (c == 'f' || c == 'j')
            *(c == 'f' ? &follow : &json) = 1;
        else if (c == 'J' && cli_parse_long(cli, "--job", optarg, 1, LONG_MAX, &job))
            return CLI_USAGE;
        else if (c != 'J')
            return cli_bad_option(cli, c, argv);
    }
    if (cli_positional(cli, argc, argv, 0, NULL, NULL) != 0)
        return CLI_USAGE;
    if (!cli_client(cli))
        return CLI_FAIL;
    if (!json)
        printf("%-19s  %-5s  %-12s  %-10s  %s\n", "TIME", "JOB", "NODE", "STATE",
               "REASON");
    json_int_t after = 0;
    int64_t silent_since = 0;
    cli_watch_t watch = {.job = job, .poll_ms = EVENTS_POLL_MS};
    if (follow)
        cli_watch_wait(cli, &watch, 0); /* news from now on; then look */
    for (;;) {
        int n = events_round(cli, job, &after, json, follow, &silent_since);
        if (n < 0)
            return CLI_FAIL;
        if (n < EVENTS_LIMIT && !follow)
            return CLI_OK;
        if (n < EVENTS_LIMIT)
            cli_watch_wait(cli, &watch, -1);
    }
}

const cli_cmd_t cli_log_cmds[] = {
    {NULL, "logs", cmd_logs, "ID [-f] [--rank R]", "print a job's output",
     "The job's stdout goes to stdout, its stderr to stderr, in the order the\n"
     "coordinator stored them, from every attempt. ID may be ARRAY[INDEX], a task\n"
     "of a job array (12[3]).\n"
     "\nOptions:\n"
     "  -f, --follow   keep printing new output until the job has ended\n"
     "  --rank R       only the output of rank R (default: every rank, each line\n"
     "                 labelled \"R: \" when the job has several)\n"},
    {NULL, "events", cmd_events, "[-f] [--json] [--job ID]",
     "print the event stream: every state change of jobs and nodes",
     "Lines: TIME JOB NODE STATE REASON (local time; - where none).\n"
     "\nOptions:\n"
     "  -f, --follow   keep printing new events until interrupted\n"
     "  --json         one JSON object per line: id, time, job, node, state,\n"
     "                 reason\n"
     "  --job ID       only the events of this job\n"},
    {0},
};
