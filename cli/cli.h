/* cli.h - shared declarations of the bramble command line: the per-run context
 * (credential, lazily made client), the command table entry, output helpers. */
#ifndef BRAMBLE_CLI_H
#define BRAMBLE_CLI_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "client.h"
#include "cred.h"
#include "err.h"
#include "msg.h"

#define CLI_TIMEOUT_MS 10000 /* default RPC timeout (--timeout) */
#define CLI_PATH_MAX 4096

/* One run of the CLI: global options, and what a command needs to talk. */
typedef struct {
    const char *cmd;       /* "token create": the prefix of every message */
    const char *cred_flag; /* --credential, NULL when not given */
    int timeout_ms;        /* --timeout */
    int timeout_given;     /* --timeout was given (an upload waits for it, not 60 s) */
    int64_t wait_ms;          /* submit --timeout: the most --wait/--follow wait */
    int64_t wait_deadline_ms; /* br_mono_ms() when they give up; 0: never */
    br_cred_t cred;
    int have_cred;
    br_client_t *client;
} cli_t;

typedef int (*cli_handler_t)(cli_t *cli, int argc, char **argv);

/* One command: "token create" is group "token", name "create". */
typedef struct {
    const char *group;    /* "token", or NULL for a one-word command */
    const char *name;     /* "create", "nodes", ... */
    cli_handler_t run;    /* returns the exit status */
    const char *synopsis; /* arguments after the command words */
    const char *summary;  /* one line for `bramble --help` */
    const char *options;  /* the rest of `bramble CMD --help` (may be "") */
} cli_cmd_t;

/* Exit statuses (ARCHITECTURE.md, "Command line"). */
enum { CLI_OK = 0, CLI_FAIL = 1, CLI_USAGE = 2 };

/* ---- context (ctx.c) */

/* The client, made on first use from the credential (--credential, else
 * $BRAMBLE_CREDENTIAL, else ~/.config/bramble/credential). Prints the reason and
 * returns NULL when the credential cannot be loaded. */
br_client_t *cli_client(cli_t *cli);

/* Use this credential instead of the configured one (bramble up). */
br_client_t *cli_client_with(cli_t *cli, const br_cred_t *cred);

void cli_close(cli_t *cli);

/* Request/response. body is stolen (NULL sends {}). On failure prints
 * "bramble: CMD: reason" and returns NULL / -1. */
json_t *cli_call(cli_t *cli, const char *type, json_t *body);
int cli_rpc(cli_t *cli, const char *type, json_t *body, br_msg_t **resp);

/* The same in two halves, for requests in flight together (br_client_send):
 * cli_send (body stolen) gives the request's seq, cli_recv its answer's body (new
 * reference); each prints the reason and returns -1 / NULL on failure. */
int cli_send(cli_t *cli, const char *type, json_t *body, uint32_t *seq);
json_t *cli_recv(cli_t *cli, uint32_t seq);

/* For polling loops (--wait, logs -f, events -f): like cli_rpc, but a coordinator
 * that does not answer is ridden out for up to CLI_OUTAGE_MS, since it may be
 * restarting and keeps every job it took. Returns 0 with *resp, 1 when the caller
 * should simply try again, -1 after printing the reason. *silent_since starts 0. */
#define CLI_OUTAGE_MS 60000
int cli_rpc_poll(cli_t *cli, const char *type, json_t *body, br_msg_t **resp,
                 int64_t *silent_since);

/* Waiting for something to happen to a job without polling: the coordinator sends
 * news (event.watch, PROTOCOL.md) and the loop asks again only then. Start with
 * {.job = ID (0: every job), .logs = 1 for its output too}, call cli_watch_wait
 * between the loop's requests. */
#define CLI_WATCH_RENEW_MS 5000 /* renewed (and asked again) this often regardless */
typedef struct {
    int64_t job;
    int logs;
    int state;       /* 0: not asked yet, 1: watching, -1: no news (older coordinator) */
    int64_t renewed; /* monotonic ms of the last event.watch */
    uint32_t asked;  /* the event.watch in flight, answer not yet taken (0: none) */
    int poll_ms;     /* without news: how long to sleep instead */
} cli_watch_t;
/* Ask for news the first time and at each renewal (returning at once, so the loop
 * asks again: its request goes out behind the watch's, both in flight together,
 * and the next call takes the watch's answer); else wait up to max_ms (< 0: no
 * bound but the renewal) for news. 1 when news came (or the watch was just asked
 * for or renewed, or there is no news to wait for: ask again), 0 when max_ms passed
 * without any. */
int cli_watch_wait(cli_t *cli, cli_watch_t *w, int64_t max_ms);

/* ---- output (output.c) */

/* "bramble: CMD: ..." on stderr. cli_fail returns CLI_FAIL. */
void cli_err(const cli_t *cli, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
int cli_fail(const cli_t *cli, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* A usage error: the message, a pointer to --help, returns CLI_USAGE. */
int cli_usage(const cli_t *cli, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Run getopt_long's error cases through cli_usage: c is what getopt returned
 * ('?' or ':'). Returns CLI_USAGE. */
int cli_bad_option(const cli_t *cli, int c, char **argv);

/* The common case of a command's arguments: only --json (when json is not NULL)
 * and exactly npos positional arguments, named in names[] for the usage error.
 * Fills pos[]. Returns 0, or CLI_USAGE after printing the reason. */
int cli_args(const cli_t *cli, int argc, char **argv, int *json, int npos,
             const char *const *names, const char **pos);

/* After getopt: exactly npos positional arguments left (names for the message). */
int cli_positional(const cli_t *cli, int argc, char **argv, int npos,
                   const char *const *names, const char **pos);

/* Parse a positive/non-negative integer argument; prints a usage error on failure. */
int cli_parse_long(const cli_t *cli, const char *what, const char *s, long min,
                   long max, long *out);
int cli_parse_ms(const cli_t *cli, const char *what, const char *s, int64_t *ms);

/* Print JSON indented (JSON_INDENT(2)) and a newline; compact on one line. */
void cli_print_json(const json_t *v);
void cli_print_json_line(const json_t *v);

/* Times: unix seconds (a JSON real, or null) as local "2026-11-29 18:04:05", or
 * "5m ago" / "in 3m", or "-" when null. Returns buf. */
char *cli_fmt_time(const json_t *t, char *buf, size_t len);
char *cli_fmt_ago(const json_t *t, char *buf, size_t len);
char *cli_fmt_size(const json_t *bytes, char *buf, size_t len);

/* A JSON value as short text: strings as is, integers, reals, "-" for null or
 * missing, "yes"/"no" for booleans. Returns buf. */
char *cli_fmt_value(const json_t *v, char *buf, size_t len);

/* Join the strings (or numbers) of an array with sep; "-" when empty. */
char *cli_fmt_list(const json_t *arr, const char *sep, char *buf, size_t len);

/* Text from the coordinator (a job's name, command, reason...) made safe for a
 * terminal: control characters (C0, DEL, C1) written as \n, \t, \r or \xNN, so
 * that nobody can write escape sequences onto another user's terminal. Malloc'd
 * (NULL when out of memory); _put writes it to out. */
char *cli_escape(const char *s, size_t n);
void cli_put_text(FILE *out, const char *s, size_t n);

/* "name       value" lines of a show command, names padded to width; "-" for an
 * empty value, control characters escaped (cli_escape). _json takes the value at
 * key, _time a time with how long ago. */
void cli_field(int width, const char *name, const char *value);
void cli_field_json(int width, const json_t *obj, const char *key, const char *name);
void cli_field_time(int width, const json_t *obj, const char *key, const char *name);

/* An aligned table: columns separated by two spaces, the last one not padded. */
typedef struct cli_table cli_table_t;

cli_table_t *cli_table_new(int ncols, const char *const *headers);
void cli_table_destroy(cli_table_t **t);
/* Add a row of ncols cells (copied). */
int cli_table_add(cli_table_t *t, const char *const *cells);
void cli_table_print(const cli_table_t *t, FILE *out);

/* An array of objects as an aligned table: one row per item, made by row (which
 * calls cli_table_add). cli_print_list prints the array as JSON instead with json
 * (an empty array when items is missing). */
typedef void (*cli_row_fn)(cli_table_t *t, const json_t *item);
void cli_print_rows(const json_t *items, int ncols, const char *const *head,
                    cli_row_fn row);
void cli_print_list(const json_t *items, int json, int ncols, const char *const *head,
                    cli_row_fn row);

/* Sleep this many milliseconds (restarts after signals). */
void cli_sleep_ms(int ms);

/* ---- commands */

extern const cli_cmd_t cli_cluster_cmds[];
extern const cli_cmd_t cli_node_cmds[];
extern const cli_cmd_t cli_job_cmds[];
extern const cli_cmd_t cli_log_cmds[];
extern const cli_cmd_t cli_user_cmds[];
extern const cli_cmd_t cli_class_cmds[];
extern const cli_cmd_t cli_audit_cmds[];
extern const cli_cmd_t cli_dashboard_cmds[];
extern const cli_cmd_t cli_checkpoint_cmds[];
/* The arguments of the checkpoint commands: --step N (into *step), --json and
 * exactly npos positional ones (cmd_checkpoint.c). 0, or CLI_USAGE after saying why. */
int cli_step_args(const cli_t *cli, int argc, char **argv, int npos,
                  const char *const *names, const char **pos, long *step, int *json);
/* bramble checkpoint pull (cmd_ckptpull.c): argv[0] is "pull". */
int cli_checkpoint_pull(cli_t *cli, int argc, char **argv);
extern const cli_cmd_t cli_progress_cmds[];
extern const cli_cmd_t cli_plan_cmds[];
extern const cli_cmd_t cli_top_cmds[];
extern const cli_cmd_t cli_probe_cmds[];
extern const cli_cmd_t cli_service_cmds[];
extern const cli_cmd_t cli_data_cmds[];
extern const cli_cmd_t cli_image_cmds[];
extern const cli_cmd_t cli_outputs_cmds[];
extern const cli_cmd_t cli_gateway_cmds[];
extern const cli_cmd_t cli_key_cmds[];
extern const cli_cmd_t cli_shell_cmds[];
extern const cli_cmd_t cli_forward_cmds[];

/* Each chunk of job id's stored output (rank -1: every rank), in the order the
 * coordinator stored it; ranks: how many the job has. Return -1 to stop. */
typedef int (*cli_chunk_fn)(void *arg, int ranks, int rank, int stream, const char *data,
                            size_t len);
/* Read job id's logs into fn; follow: until the job has ended. CLI_OK or CLI_FAIL. */
int cli_read_logs(cli_t *cli, int64_t id, int rank, int follow, cli_chunk_fn fn, void *arg);

/* Shared by submit --follow, logs and probe: print job id's logs (rank -1: all,
 * each line labelled "R: " when the job has several ranks) to stdout/stderr as
 * the job wrote them, or all to out when it is not NULL; follow: until the job
 * has ended. Returns CLI_OK or CLI_FAIL. */
int cli_stream_logs(cli_t *cli, int64_t id, int rank, int follow, FILE *out);

/* The exit rule of submit --wait: fetch job id until it has ended; returns CLI_OK
 * when it completed, else prints "job N STATE: reason" and returns CLI_FAIL. While
 * the job is pending its reason goes to stderr (again when it changes); past
 * cli->wait_deadline_ms it gives up as cli_wait_gave_up does. */
int cli_wait_job(cli_t *cli, int64_t id);
/* bramble shell: a shell (cmd NULL) or a command inside rank of a running job,
 * with a terminal on both sides (tty) or pipes; its exit status (cmd_shell.c). */
int cli_shell_run(cli_t *cli, int64_t job, long rank, int tty, char **cmd, int ncmd);
/* A job named on the command line: "12", or "12[3]" (task 3 of array 12, whose id
 * the coordinator gives). CLI_OK with *id, CLI_USAGE or CLI_FAIL (said). */
int cli_job_id(cli_t *cli, const char *arg, int64_t *id);

/* 1 when cli->wait_deadline_ms has passed. */
int cli_wait_expired(const cli_t *cli);

/* "gave up waiting after D: job N is STATE: reason" on stderr; CLI_FAIL. The job
 * is left alone. */
int cli_wait_gave_up(cli_t *cli, int64_t id);

/* ---- fit.c */

/* After submitting job id (spec: its normalised spec), warn on stderr when no node
 * of the cluster as it is could ever run it (or too few for its gang). Quiet when
 * the nodes cannot be listed. cli_fit_ask sends the request for the nodes (right
 * after the submission's own, so that both are in flight together and answered
 * after one commit) and gives its seq, 0 when it could not; cli_warn_unfit takes
 * the answer. */
uint32_t cli_fit_ask(cli_t *cli);
void cli_warn_unfit(cli_t *cli, int64_t id, const json_t *spec, uint32_t seq);

#endif
