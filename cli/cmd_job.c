/* cmd_job.c - jobs: submit (with --wait and --follow), jobs, job show, cancel. */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "pack.h"
#include "spec.h"
#include "sendtree.h"
#include "util.h"

#define WAIT_POLL_MS 200 /* without news from the coordinator */

/* "12", or "12[3]" (task 3 of array 12: *index 3; else -1). */
static int parse_ref(const cli_t *cli, const char *s, int64_t *id, int *index)
{
    long v, i = -1;
    char num[32];
    const char *open = strchr(s, '[');
    size_t len = open ? (size_t)(open - s) : strlen(s);
    if (len >= sizeof(num))
        len = sizeof(num) - 1; /* (too long to be a number: refused below) */
    memcpy(num, s, len);
    num[len] = '\0';
    if (open) {
        char idx[32];
        size_t n = strlen(open + 1);
        if (n < 2 || n >= sizeof(idx) || open[n] != ']')
            return cli_usage(cli, "bad job ID '%s' (a number, or ARRAY[INDEX] for a task "
                                  "of an array)", s);
        memcpy(idx, open + 1, n - 1);
        idx[n - 1] = '\0';
        if (cli_parse_long(cli, "array index", idx, 0, INT_MAX, &i) != 0)
            return CLI_USAGE;
    }
    if (cli_parse_long(cli, "job ID", num, 1, LONG_MAX, &v) != 0)
        return CLI_USAGE;
    *id = v;
    *index = (int)i;
    return 0;
}

/* The request body that names the job (with "index" for an array's task). */
static json_t *ref_body(int64_t id, int index)
{
    json_t *b = json_pack("{s:I}", "id", (json_int_t)id);
    if (index >= 0)
        json_object_set_new(b, "index", json_integer(index));
    return b;
}

int cli_job_id(cli_t *cli, const char *arg, int64_t *id)
{
    int index;
    if (parse_ref(cli, arg, id, &index) != 0)
        return CLI_USAGE;
    if (index < 0)
        return CLI_OK;
    json_t *r = cli_call(cli, "job.show", ref_body(*id, index));
    json_t *jid = json_object_get(json_object_get(r, "job"), "id");
    int found = json_is_integer(jid);
    if (found)
        *id = json_integer_value(jid);
    json_decref(r);
    return found ? CLI_OK : CLI_FAIL;
}

static int is_ended(const char *state)
{
    return state && (strcmp(state, "completed") == 0 || strcmp(state, "failed") == 0 ||
                     strcmp(state, "cancelled") == 0);
}

/* Why a job ended, in words: its reason, else its exit code or signal. */
static char *end_reason(const json_t *job, char *buf, size_t len)
{
    const char *reason = json_string_value(json_object_get(job, "reason"));
    const json_t *code = json_object_get(job, "exit_code");
    const json_t *sig = json_object_get(job, "signal");
    if (reason && *reason)
        br_strlcpy(buf, reason, len);
    else if (json_is_integer(code))
        snprintf(buf, len, "exit code %lld", (long long)json_integer_value(code));
    else if (json_is_integer(sig))
        snprintf(buf, len, "killed by signal %lld", (long long)json_integer_value(sig));
    else
        br_strlcpy(buf, "no reason given", len);
    return buf;
}

/* ---- waiting for the end of a job (submit --wait, --follow) */

static int job_outcome(cli_t *cli, int64_t id, const json_t *job)
{
    const char *state = json_string_value(json_object_get(job, "state"));
    char why[BR_ERR_TEXT + 64];
    if (strcmp(state, "completed") == 0)
        return CLI_OK;
    return cli_fail(cli, "job %lld %s: %s", (long long)id, state,
                    end_reason(job, why, sizeof(why)));
}

/* A pending job's reason on stderr, when it differs from the one printed last. */
static void note_pending(cli_t *cli, int64_t id, const json_t *job, char *last, size_t len)
{
    const char *state = json_string_value(json_object_get(job, "state"));
    const char *reason = json_string_value(json_object_get(job, "reason"));
    if (!state || strcmp(state, "pending") != 0) {
        last[0] = '\0'; /* back to pending later: say why again */
        return;
    }
    if (!reason || !*reason || strcmp(reason, last) == 0)
        return;
    br_strlcpy(last, reason, len);
    cli_err(cli, "job %lld is pending: %s", (long long)id, reason);
}

int cli_wait_expired(const cli_t *cli)
{
    return cli->wait_deadline_ms > 0 && br_mono_ms() >= cli->wait_deadline_ms;
}

int cli_wait_gave_up(cli_t *cli, int64_t id)
{
    char wait[32], why[BR_ERR_TEXT + 64] = "";
    br_format_duration(cli->wait_ms, wait, sizeof(wait));
    cli->wait_deadline_ms = 0; /* this last question may take its time */
    json_t *r = cli_call(cli, "job.show", json_pack("{s:I}", "id", (json_int_t)id));
    json_t *job = json_object_get(r, "job");
    const char *state = json_string_value(json_object_get(job, "state"));
    const char *reason = json_string_value(json_object_get(job, "reason"));
    if (reason && *reason)
        snprintf(why, sizeof(why), ": %s", reason);
    cli_err(cli, "gave up waiting after %s: job %lld is %s%s (the job itself goes on; "
                 "'bramble cancel %lld' stops it)",
            wait, (long long)id, state ? state : "in an unknown state", why, (long long)id);
    json_decref(r);
    return CLI_FAIL;
}

/* How long the next request may wait: the RPC timeout, cut to the deadline. */
static void cut_timeout(cli_t *cli, int saved)
{
    cli->timeout_ms = saved;
    if (cli->wait_deadline_ms > 0) {
        int64_t left = cli->wait_deadline_ms - br_mono_ms();
        if (left < saved)
            cli->timeout_ms = left > 1 ? (int)left : 1;
    }
}

/* Fetch job id until it has ended (or, with until_started, left pending; with
 * until_started 2, runs), saying why it is pending and giving up at the deadline.
 * CLI_OK / CLI_FAIL; -1 with until_started when the job has started (1: or
 * ended). */
static int wait_loop(cli_t *cli, int64_t id, int until_started)
{
    int64_t silent_since = 0;
    int saved = cli->timeout_ms;
    char last[BR_ERR_TEXT + 64] = "";
    cli_watch_t watch = {.job = id, .poll_ms = WAIT_POLL_MS};
    cli_watch_wait(cli, &watch, 0); /* news from now on; then look */
    for (;;) {
        if (cli_wait_expired(cli))
            return cli->timeout_ms = saved, cli_wait_gave_up(cli, id);
        br_msg_t *m = NULL;
        cut_timeout(cli, saved);
        int r = cli_rpc_poll(cli, "job.show", json_pack("{s:I}", "id", (json_int_t)id),
                             &m, &silent_since);
        cli->timeout_ms = saved;
        if (r < 0)
            return CLI_FAIL;
        if (r > 0)
            continue; /* the timeout has already waited */
        json_t *job = json_object_get(br_msg_body(m), "job");
        const char *state = json_string_value(json_object_get(job, "state"));
        note_pending(cli, id, job, last, sizeof(last));
        int started = state && strcmp(state, "pending") != 0 &&
                      (until_started < 2 || strcmp(state, "starting") != 0);
        int rc = until_started == 1 && started                 ? -1
                 : is_ended(state)                             ? job_outcome(cli, id, job)
                 : until_started == 2 && started               ? -1
                                                               : -2;
        br_msg_destroy(&m);
        if (rc != -2)
            return rc;
        cli_watch_wait(cli, &watch,
                       cli->wait_deadline_ms > 0 ? cli->wait_deadline_ms - br_mono_ms() : -1);
    }
}

int cli_wait_job(cli_t *cli, int64_t id)
{
    return wait_loop(cli, id, 0);
}

/* ---- submit */

static char *read_stdin(size_t *len, br_err_t *err)
{
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap + 1);
    while (buf) {
        if (n == cap) {
            if (cap > BR_SPEC_MAX_BYTES) {
                free(buf);
                return br_errp(err, EFBIG, "larger than %d bytes", BR_SPEC_MAX_BYTES);
            }
            char *b = realloc(buf, cap * 2 + 1);
            if (!b)
                break;
            buf = b;
            cap *= 2;
        }
        ssize_t got = read(STDIN_FILENO, buf + n, cap - n);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0) {
            int e = errno;
            free(buf);
            return br_errp(err, e, "%s", strerror(e));
        }
        if (got == 0) {
            buf[n] = 0;
            *len = n;
            return buf;
        }
        n += (size_t)got;
    }
    free(buf);
    return br_errp(err, ENOMEM, "out of memory");
}

typedef struct {
    const char *path;
    const char **sets;
    int nsets;
    int wait, follow, json;
    int shell;           /* --shell: attach a shell once it runs (cmd_shell.c) */
    const char *timeout; /* --timeout: the most --wait/--follow/--shell wait */
    const char *code;    /* --code DIR: in place of the spec's code: */
} submit_opts_t;

static int submit_args(cli_t *cli, int argc, char **argv, submit_opts_t *o)
{
    static const struct option opts[] = {{"set", required_argument, NULL, 's'},
                                         {"wait", no_argument, NULL, 'w'},
                                         {"follow", no_argument, NULL, 'f'},
                                         {"json", no_argument, NULL, 'j'},
                                         {"timeout", required_argument, NULL, 't'},
                                         {"code", required_argument, NULL, 'c'},
                                         {"shell", no_argument, NULL, 'S'},
                                         {0}};
    static const char *names[] = {"SPEC (a YAML file, or - for stdin)"};
    int c;
    while ((c = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
        if (c == 's') {
            if (!strchr(optarg, '='))
                return cli_usage(cli, "--set %s: expected key=value", optarg);
            o->sets[o->nsets++] = optarg;
        } else if (c == 't') {
            int64_t ms;
            if (cli_parse_ms(cli, "--timeout", optarg, &ms) != 0)
                return CLI_USAGE;
            if (ms <= 0)
                return cli_usage(cli, "--timeout %s: give how long to wait, more than 0 "
                                      "(e.g. 30s)", optarg);
            o->timeout = optarg;
            cli->wait_ms = ms;
        } else if (c == 'c') {
            if (!*optarg)
                return cli_usage(cli, "--code: name a directory");
            o->code = optarg;
        } else if (c == 'S') {
            o->shell = 1;
        } else if (c == 'w' || c == 'f' || c == 'j') {
            *(c == 'w' ? &o->wait : c == 'f' ? &o->follow : &o->json) = 1;
        } else {
            return cli_bad_option(cli, c, argv);
        }
    }
    if (o->shell && (o->wait || o->follow || o->json))
        return cli_usage(cli, "--shell attaches to the job once it runs: not with %s",
                         o->wait ? "--wait" : o->follow ? "--follow" : "--json");
    if (o->timeout && !o->wait && !o->follow && !o->shell)
        return cli_usage(cli, "--timeout bounds --wait, --follow or --shell: give one of "
                              "them");
    return cli_positional(cli, argc, argv, 1, names, &o->path);
}

/* Read the spec and check it here, so that errors come before anything is sent.
 * *norm: the normalised spec. */
static char *load_spec(cli_t *cli, const submit_opts_t *o, size_t *len, json_t **norm)
{
    const char *shown = strcmp(o->path, "-") == 0 ? "stdin" : o->path;
    br_err_t err = {0};
    char *text = strcmp(o->path, "-") == 0
                     ? read_stdin(len, &err)
                     : br_read_file(o->path, BR_SPEC_MAX_BYTES, len, &err);
    if (!text) { /* br_read_file's reason names the file already */
        cli_err(cli, "%s%s", strcmp(o->path, "-") == 0 ? "stdin: " : "", err.text);
        return NULL;
    }
    br_spec_t *spec = br_spec_parse(text, *len, o->sets, o->nsets, &err);
    if (!spec) {
        cli_err(cli, "%s: %s", shown, err.text);
        free(text);
        return NULL;
    }
    *norm = br_spec_to_json(spec);
    br_spec_destroy(&spec);
    return text;
}

/* path, relative to the spec file's directory (spec "-": to this one), into out. */
static void spec_relative(const char *spec, const char *path, char *out, size_t len)
{
    const char *slash = strrchr(spec, '/');
    if (path[0] == '/' || !slash || strcmp(spec, "-") == 0)
        snprintf(out, len, "%s", path);
    else if (strcmp(path, ".") == 0)
        snprintf(out, len, "%.*s", (int)(slash - spec), spec);
    else
        snprintf(out, len, "%.*s/%s", (int)(slash - spec), spec, path);
}

static json_t *submit_body(const char *text, size_t len, const submit_opts_t *o);

/* The job's code (--code DIR, else the spec's code: DIR, relative to the spec
 * file's directory, and its files:) packed and sent into the content store: {"listing",
 * "manifest"} for job.submit, NULL in *code when the job has none; a big upload has
 * the code fetched by the node the job would go to as it is sent (the spec text and
 * sets go with code.stage). CLI_OK, or CLI_FAIL after saying why. */
static int send_code(cli_t *cli, const submit_opts_t *o, const json_t *norm, const char *text,
                     size_t len, json_t **code)
{
    *code = NULL;
    const char *dir = o->code ? o->code : json_string_value(json_object_get(norm, "code"));
    const json_t *files = json_object_get(norm, "files");
    if (!dir && !json_array_size(files))
        return CLI_OK;
    char path[PATH_MAX] = "", from[PATH_MAX];
    if (dir && !o->code)
        spec_relative(o->path, dir, path, sizeof(path));
    else if (dir)
        br_strlcpy(path, dir, sizeof(path));
    br_err_t err;
    br_pack_t *p = br_pack_new(NULL, &err);
    if (!p || (dir && br_pack_dir(p, path, "", &err) < 0)) {
        br_pack_destroy(&p);
        return cli_fail(cli, "code: %s", err.text);
    }
    size_t i;
    json_t *f;
    json_array_foreach(files, i, f) { /* files: more paths into the same tree */
        struct stat st;
        const char *to = json_string_value(json_object_get(f, "to"));
        spec_relative(o->path, json_string_value(json_object_get(f, "from")), from,
                      sizeof(from));
        int rc = stat(from, &st) < 0 ? br_errf(&err, errno, "%s: %s", from, strerror(errno))
                 : S_ISDIR(st.st_mode) ? br_pack_dir(p, from, to, &err)
                                       : br_pack_file(p, from, to, &err);
        if (rc < 0) {
            br_pack_destroy(&p);
            return cli_fail(cli, "files[%zu]: %s", i, err.text);
        }
    }
    if (!br_pack_manifest(p, &err)) {
        br_pack_destroy(&p);
        return cli_fail(cli, "code: %s", err.text);
    }
    json_array_foreach(json_object_get(norm, "setup_files"), i, f) { /* (setup's key) */
        const char *src = br_pack_source(p, json_string_value(f));
        struct stat sst;
        if (src && stat(src, &sst) == 0 && sst.st_size > BR_SPEC_SETUP_FILE_MAX) {
            br_pack_destroy(&p);
            return cli_fail(cli, "setup_files[%zu]: %s is %lld bytes, more than %d: name a "
                                 "small file (a requirements list), not data",
                            i, json_string_value(f), (long long)sst.st_size,
                            BR_SPEC_SETUP_FILE_MAX);
        }
        if (!src) {
            br_pack_destroy(&p);
            return cli_fail(cli, "setup_files[%zu]: %s is not a file of the code sent "
                                 "(missing, a directory, or left out by .gitignore or "
                                 ".brambleignore)",
                            i, json_string_value(f));
        }
    }
    if (!dir)
        br_strlcpy(path, "(files)", sizeof(path));
    if (!o->json)
        cli_upload_say_left_out(p);
    json_t *listing, *summary;
    cli_upload_t st;
    json_t *stage = submit_body(text, len, o); /* (NULL: none staged) */
    int rc = cli_upload(cli, p, !o->json && isatty(2), stage, &listing, &summary, &st);
    json_decref(stage);
    br_pack_destroy(&p);
    if (rc != CLI_OK)
        return rc;
    if (!o->json) {
        char all[32], sent[32];
        fprintf(stderr, "code: %s, %lld files, %s; sent %lld files, %s\n", path,
                (long long)st.files, br_format_size((uint64_t)st.bytes, all, sizeof(all)),
                (long long)st.sent_files, br_format_size((uint64_t)st.sent, sent, sizeof(sent)));
    }
    *code = json_pack("{s:o, s:o, s:s}", "listing", listing, "manifest", summary, "dir",
                      dir ? dir : "(files)");
    return *code ? CLI_OK : cli_fail(cli, "out of memory");
}

static json_t *submit_body(const char *text, size_t len, const submit_opts_t *o)
{
    json_t *sets = json_array();
    json_t *spec = json_stringn(text, len); /* NULL when not UTF-8 */
    int ok = spec && sets;
    for (int i = 0; ok && i < o->nsets; i++)
        ok = json_array_append_new(sets, json_string(o->sets[i])) == 0;
    if (!ok) {
        json_decref(spec);
        json_decref(sets);
        return NULL;
    }
    return json_pack("{s:o, s:o}", "spec", spec, "sets", sets);
}

/* Submit, and ask for the nodes (the fit warning) in the same breath: both are in
 * flight together, so the second costs no round trip of its own. */
static int submit_send(cli_t *cli, const submit_opts_t *o, const char *text, size_t len,
                       json_t *code, int64_t *id, json_t **array, uint32_t *fit_seq)
{
    json_t *body = submit_body(text, len, o);
    uint32_t seq = 0;
    if (!body) {
        json_decref(code);
        return cli_fail(cli, "%s: the spec or a --set is not UTF-8 text", o->path);
    }
    if (code)
        json_object_set_new(body, "code", code);
    if (cli_send(cli, "job.submit", body, &seq) < 0)
        return CLI_FAIL;
    *fit_seq = cli_fit_ask(cli);
    json_t *r = cli_recv(cli, seq);
    if (!r)
        return CLI_FAIL;
    json_t *jid = json_object_get(r, "id");
    if (!json_is_integer(jid)) {
        json_decref(r);
        return cli_fail(cli, "the coordinator's answer has no job id");
    }
    *id = json_integer_value(jid);
    *array = json_incref(json_object_get(r, "array"));
    json_decref(r);
    return CLI_OK;
}

/* --wait for an array: each of its tasks (ids first..last) to end; 0 only if every
 * one completed. */
static int wait_array(cli_t *cli, const json_t *array)
{
    int64_t first = json_integer_value(json_object_get(array, "first"));
    int64_t last = json_integer_value(json_object_get(array, "last"));
    int rc = CLI_OK;
    for (int64_t id = first; id >= 1 && id <= last; id++) {
        if (cli_wait_job(cli, id) != CLI_OK)
            rc = CLI_FAIL;
        if (cli_wait_expired(cli))
            return CLI_FAIL;
    }
    return rc;
}

static int cmd_submit(cli_t *cli, int argc, char **argv)
{
    const char *sets[argc > 0 ? argc : 1];
    submit_opts_t o = {.sets = sets};
    if (submit_args(cli, argc, argv, &o) != 0)
        return CLI_USAGE;
    size_t len;
    json_t *norm = NULL;
    char *text = load_spec(cli, &o, &len, &norm);
    if (!text)
        return CLI_FAIL;
    int64_t id = 0;
    uint32_t fit_seq = 0;
    json_t *array = NULL;
    if ((o.follow || o.shell) && json_object_get(norm, "array")) {
        free(text);
        json_decref(norm);
        return cli_usage(cli, o.follow ? "--follow shows one job's output, and an array has "
                                         "many tasks: use --wait, then 'bramble logs "
                                         "ID[INDEX]'"
                                       : "--shell attaches to one job, and an array has many "
                                         "tasks: submit it, then 'bramble shell ID[INDEX]'");
    }
    json_t *code = NULL;
    int rc = send_code(cli, &o, norm, text, len, &code);
    if (rc == CLI_OK)
        rc = submit_send(cli, &o, text, len, code, &id, &array, &fit_seq);
    free(text);
    if (rc != CLI_OK) {
        json_decref(norm);
        return rc;
    }
    /* With --follow or --shell, stdout carries the job's output or the shell's: the
     * id goes to stderr. */
    FILE *out = o.follow || o.shell ? stderr : stdout;
    if (o.json && array) {
        json_t *o_json = json_pack("{s:I, s:O}", "id", (json_int_t)id, "array", array);
        cli_print_json(o_json);
        json_decref(o_json);
    } else if (o.json)
        fprintf(out, "{\"id\": %lld}\n", (long long)id);
    else if (o.follow || o.shell)
        fprintf(out, "bramble: submitted job %lld\n", (long long)id);
    else
        fprintf(out, "%lld\n", (long long)id);
    fflush(out);
    cli_warn_unfit(cli, id, norm, fit_seq);
    json_decref(norm);
    if (o.timeout)
        cli->wait_deadline_ms = br_mono_ms() + cli->wait_ms;
    if (array) {
        rc = o.wait ? wait_array(cli, array) : CLI_OK;
        json_decref(array);
        return rc;
    }
    if (o.follow) {
        /* say why it waits until it starts, then show what it prints */
        rc = wait_loop(cli, id, 1);
        if (rc >= 0)
            return rc;
        if (cli_stream_logs(cli, id, -1, 1, NULL) != CLI_OK)
            return CLI_FAIL;
    }
    if (o.shell) {
        /* say why it waits until it runs, then attach (rank 0; a terminal when this
         * has one) */
        if ((rc = wait_loop(cli, id, 2)) >= 0)
            return rc;
        cli->wait_deadline_ms = 0; /* (--timeout bounded the wait, not the shell) */
        rc = cli_shell_run(cli, id, 0, isatty(0) && isatty(1), NULL, 0);
        fprintf(stderr, "bramble: job %lld runs on: 'bramble shell %lld' attaches again, "
                        "'bramble cancel %lld' stops it\n",
                (long long)id, (long long)id, (long long)id);
        return rc;
    }
    if (o.follow || o.wait)
        return cli_wait_job(cli, id);
    return CLI_OK;
}

/* ---- jobs, job show */

static void job_row(cli_table_t *t, const json_t *job)
{
    char id[128], name[80], state[128], attempt[16], nodes[256], sub[32], why[256];
    cli_fmt_value(json_object_get(job, "id"), id, sizeof(id));
    cli_fmt_value(json_object_get(job, "name"), name, sizeof(name));
    cli_fmt_value(json_object_get(job, "state"), state, sizeof(state));
    cli_fmt_value(json_object_get(job, "attempt"), attempt, sizeof(attempt));
    cli_fmt_list(json_object_get(job, "nodes"), ",", nodes, sizeof(nodes));
    cli_fmt_ago(json_object_get(job, "submitted"), sub, sizeof(sub));
    if (is_ended(state) || json_is_string(json_object_get(job, "reason")))
        end_reason(job, why, sizeof(why));
    else
        br_strlcpy(why, "-", sizeof(why));
    char cost[32] = "-"; /* so far, as charged (docs/sharing.md); "-": nothing */
    double so_far = json_number_value(json_object_get(json_object_get(job, "usage"), "cost"));
    if (so_far > 0) /* four digits of a small cost, cents of a larger one */
        snprintf(cost, sizeof(cost), so_far >= 100 ? "%.0f" : so_far >= 1 ? "%.2f" : "%.4f",
                 so_far);
    const char *cells[] = {id, name, state, attempt, nodes, sub, cost, why};
    cli_table_add(t, cells);
}

/* ---- an array's tasks folded into one row of the table */

static const char *const fold_states[] = {"running", "starting", "pending",
                                          "completed", "failed", "cancelled"};
#define FOLD_STATES 6

typedef struct {
    int64_t id;
    json_t *row; /* the folded row, in the output list */
    int *index;  /* the indices seen */
    size_t n, cap;
    int count[FOLD_STATES];
    double cost; /* its tasks' */
} fold_t;

static int by_int(const void *x, const void *y)
{
    int a = *(const int *)x, b = *(const int *)y;
    return a < b ? -1 : a > b;
}

/* "ID[0-99]" or "ID[1,3,5-9]" from the indices seen. */
static void fold_label(fold_t *f, char *buf, size_t len)
{
    qsort(f->index, f->n, sizeof(*f->index), by_int);
    size_t used = (size_t)snprintf(buf, len, "%lld[", (long long)f->id);
    for (size_t i = 0; i < f->n && used < len;) {
        size_t j = i;
        while (j + 1 < f->n && f->index[j + 1] == f->index[j] + 1)
            j++;
        int w = j > i ? snprintf(buf + used, len - used, "%s%d-%d", i ? "," : "",
                                 f->index[i], f->index[j])
                      : snprintf(buf + used, len - used, "%s%d", i ? "," : "", f->index[i]);
        used += w > 0 ? (size_t)w : 0;
        i = j + 1;
    }
    if (used + 2 > len) /* too long for a cell: show its ends */
        snprintf(buf, len, "%lld[%d..%d]", (long long)f->id, f->index[0], f->index[f->n - 1]);
    else
        snprintf(buf + used, len - used, "]");
}

/* Its tasks counted by state: "running 8, pending 90, completed 2". */
static void fold_counts(const fold_t *f, char *buf, size_t len)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int s = 0; s < FOLD_STATES && used < len; s++) {
        if (!f->count[s])
            continue;
        int w = snprintf(buf + used, len - used, "%s%s %d", used ? ", " : "",
                         fold_states[s], f->count[s]);
        used += w > 0 ? (size_t)w : 0;
    }
}

/* Add task (a job of array f->id) to its fold. */
static void fold_add(fold_t *f, const json_t *task)
{
    const char *state = json_string_value(json_object_get(task, "state"));
    for (int s = 0; state && s < FOLD_STATES; s++)
        f->count[s] += strcmp(state, fold_states[s]) == 0;
    f->cost += json_number_value(json_object_get(json_object_get(task, "usage"), "cost"));
    if (f->n == f->cap) {
        size_t cap = f->cap ? 2 * f->cap : 16;
        int *more = realloc(f->index, cap * sizeof(*more));
        if (!more)
            return;
        f->index = more;
        f->cap = cap;
    }
    f->index[f->n++] = (int)json_integer_value(json_object_get(task, "array_index"));
}

/* The jobs as the table shows them: each array as one row at its first task's
 * place ("12[0-99]", the array's name, its tasks by state). New reference. */
static json_t *fold_arrays(const json_t *jobs)
{
    json_t *out = json_array();
    fold_t *folds = NULL;
    size_t nf = 0, i;
    json_t *job;
    json_array_foreach(jobs, i, job) {
        json_t *aid = json_object_get(job, "array_id");
        if (!json_is_integer(aid)) {
            json_array_append(out, job);
            continue;
        }
        size_t k = 0;
        while (k < nf && folds[k].id != json_integer_value(aid))
            k++;
        if (k == nf) {
            fold_t *more = realloc(folds, (nf + 1) * sizeof(*more));
            if (!more)
                continue;
            folds = more;
            char name[80];
            const char *task = json_string_value(json_object_get(job, "name"));
            br_strlcpy(name, task ? task : "-", sizeof(name));
            char *br = strrchr(name, '[');
            if (br)
                *br = '\0'; /* the array's name: its tasks' without "[i]" */
            folds[nf++] = (fold_t){.id = json_integer_value(aid),
                                   .row = json_pack("{s:s, s:O}", "name", name, "submitted",
                                                    json_object_get(job, "submitted"))};
            json_array_append(out, folds[k].row);
        }
        fold_add(&folds[k], job);
    }
    for (size_t k = 0; k < nf; k++) {
        char label[128], counts[128];
        fold_label(&folds[k], label, sizeof(label));
        fold_counts(&folds[k], counts, sizeof(counts));
        json_object_set_new(folds[k].row, "id", json_string(label));
        json_object_set_new(folds[k].row, "state", json_string(counts));
        json_object_set_new(folds[k].row, "usage", json_pack("{s:f}", "cost", folds[k].cost));
        json_decref(folds[k].row);
        free(folds[k].index);
    }
    free(folds);
    return out;
}

static int cmd_jobs(cli_t *cli, int argc, char **argv)
{
    static const struct option opts[] = {
        {"all", no_argument, NULL, 'a'}, {"json", no_argument, NULL, 'j'}, {0}};
    int all = 0, json = 0, c;
    while ((c = getopt_long(argc, argv, ":a", opts, NULL)) != -1) {
        if (c == 'a' || c == 'j')
            *(c == 'a' ? &all : &json) = 1;
        else
            return cli_bad_option(cli, c, argv);
    }
    if (cli_positional(cli, argc, argv, 0, NULL, NULL) != 0)
        return CLI_USAGE;
    json_t *r = cli_call(cli, "job.list", json_pack("{s:b}", "all", all));
    if (!r)
        return CLI_FAIL;
    static const char *head[] = {"ID",        "NAME", "STATE",      "ATTEMPT", "NODES",
                                 "SUBMITTED", "COST", "REASON/EXIT"};
    json_t *rows = json ? NULL : fold_arrays(json_object_get(r, "jobs"));
    cli_print_list(json ? json_object_get(r, "jobs") : rows, json, 8, head, job_row);
    json_decref(rows);
    json_decref(r);
    return CLI_OK;
}

static void queue_row(cli_table_t *t, const json_t *job)
{
    char pos[16], id[32], name[64], owner[64], prio[16], waited[32], why[256];
    char score[32], share[32], age[32];
    cli_fmt_value(json_object_get(job, "position"), pos, sizeof(pos));
    cli_fmt_value(json_object_get(job, "id"), id, sizeof(id));
    cli_fmt_value(json_object_get(job, "name"), name, sizeof(name));
    cli_fmt_value(json_object_get(job, "owner"), owner, sizeof(owner));
    cli_fmt_value(json_object_get(job, "priority"), prio, sizeof(prio));
    const json_t *sc = json_object_get(job, "score");
    snprintf(score, sizeof(score), "%.0f", json_number_value(json_object_get(sc, "total")));
    snprintf(share, sizeof(share), "%.0f",
             json_number_value(json_object_get(sc, "fairshare")));
    snprintf(age, sizeof(age), "%.1f", json_number_value(json_object_get(sc, "age")));
    br_format_duration((int64_t)(json_number_value(json_object_get(job, "waited")) * 1000),
                       waited, sizeof(waited));
    cli_fmt_value(json_object_get(job, "reason"), why, sizeof(why));
    char start[40] = "-", in[32];
    const json_t *at = json_object_get(job, "start");
    if (json_is_number(at)) { /* estimated: by then at the latest */
        int64_t ms = (int64_t)(json_number_value(at) * 1000) - br_now_ms();
        snprintf(start, sizeof(start), "in %s", br_format_duration(ms > 0 ? ms : 0, in, sizeof(in)));
    }
    const char *cells[] = {pos, id, name, owner, prio, score, share, age, waited, start, why};
    cli_table_add(t, cells);
}

static int cmd_queue(cli_t *cli, int argc, char **argv)
{
    static const struct option opts[] = {{"json", no_argument, NULL, 'j'}, {0}};
    int json = 0, c;
    while ((c = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
        if (c == 'j')
            json = 1;
        else
            return cli_bad_option(cli, c, argv);
    }
    if (cli_positional(cli, argc, argv, 0, NULL, NULL) != 0)
        return CLI_USAGE;
    json_t *r = cli_call(cli, "job.queue", json_object());
    if (!r)
        return CLI_FAIL;
    static const char *head[] = {"POS",   "ID",        "NAME", "OWNER",  "PRIORITY",
                                 "SCORE", "FAIRSHARE", "AGE",  "WAITED", "START",
                                 "REASON"};
    cli_print_list(json_object_get(r, "jobs"), json, 11, head, queue_row);
    json_decref(r);
    return CLI_OK;
}

#define FIELD_WIDTH 11

static void checkpoint_row(cli_table_t *t, const json_t *cp)
{
    char step[40], attempt[16], when[32], path[1024], tmp[32];
    char files[32] = "-", hash[16] = "-";
    snprintf(step, sizeof(step), "  %s",
             cli_fmt_value(json_object_get(cp, "step"), tmp, sizeof(tmp)));
    cli_fmt_value(json_object_get(cp, "attempt"), attempt, sizeof(attempt));
    cli_fmt_time(json_object_get(cp, "time"), when, sizeof(when));
    const json_t *m = json_object_get(cp, "manifest");
    const char *h = json_string_value(json_object_get(m, "hash"));
    if (h) { /* the hash's first 12 digits, as git shortens */
        cli_fmt_value(json_object_get(m, "files"), files, sizeof(files));
        snprintf(hash, sizeof(hash), "%.12s", h);
    }
    cli_fmt_value(json_object_get(cp, "path"), path, sizeof(path));
    char copies[512] = "", *at = copies;
    size_t i;
    json_t *c;
    json_array_foreach(json_object_get(cp, "copies"), i, c) { /* where it is held */
        int n = snprintf(at, sizeof(copies) - (size_t)(at - copies), "%s%s",
                         at > copies ? "," : "", json_string_value(json_object_get(c, "node")));
        if (n < 0 || (size_t)n >= sizeof(copies) - (size_t)(at - copies))
            break;
        at += n;
    }
    const char *cells[] = {step, attempt, when, files, hash, copies[0] ? copies : "-", path};
    cli_table_add(t, cells);
}

static void event_row(cli_table_t *t, const json_t *ev)
{
    char when[40], tmp[32], state[32], node[64], reason[512];
    snprintf(when, sizeof(when), "  %s",
             cli_fmt_time(json_object_get(ev, "time"), tmp, sizeof(tmp)));
    cli_fmt_value(json_object_get(ev, "state"), state, sizeof(state));
    cli_fmt_value(json_object_get(ev, "node"), node, sizeof(node));
    cli_fmt_value(json_object_get(ev, "reason"), reason, sizeof(reason));
    const char *cells[] = {when, state, node, reason};
    cli_table_add(t, cells);
}

/* "title: -" for none, else "title:" and the table. */
static void print_section(const char *title, const json_t *items, int ncols,
                          const char *const *head, cli_row_fn row)
{
    printf("%s:%s\n", title, json_array_size(items) ? "" : " -");
    if (json_array_size(items))
        cli_print_rows(items, ncols, head, row);
}

/* A copy under way (a checkpoint's; a job's code, data set or image fetched as it
 * starts): what, where from and to, how far. */
static void transfer_row(cli_table_t *t, const json_t *x)
{
    char kind[24], step[200], done[32], of[32], pct[16] = "-", rate[40] = "-", tmp[32];
    snprintf(kind, sizeof(kind), "  %s", json_string_value(json_object_get(x, "kind")));
    if (json_is_string(json_object_get(x, "name"))) /* a data set's, an image's */
        snprintf(step, sizeof(step), "%s", json_string_value(json_object_get(x, "name")));
    else
        cli_fmt_value(json_object_get(x, "step"), step, sizeof(step));
    json_int_t d = json_integer_value(json_object_get(x, "done"));
    json_int_t b = json_integer_value(json_object_get(x, "bytes"));
    br_format_size((uint64_t)d, done, sizeof(done));
    br_format_size((uint64_t)b, of, sizeof(of));
    if (b > 0)
        snprintf(pct, sizeof(pct), "%d%%", (int)(100 * (d < b ? d : b) / b));
    if (json_is_number(json_object_get(x, "rate")))
        snprintf(rate, sizeof(rate), "%s/s",
                 br_format_size((uint64_t)json_number_value(json_object_get(x, "rate")),
                                tmp, sizeof(tmp)));
    char from[64], to[64], amount[80];
    cli_fmt_value(json_object_get(x, "from"), from, sizeof(from));
    cli_fmt_value(json_object_get(x, "to"), to, sizeof(to));
    snprintf(amount, sizeof(amount), "%s of %s", done, of);
    const char *cells[] = {kind, step, from, to, amount, pct, rate};
    cli_table_add(t, cells);
}

static void print_transfers(const json_t *xs)
{
    static const char *head[] = {"  KIND", "WHAT", "FROM", "TO", "DONE", "%", "RATE"};
    if (json_array_size(xs)) /* (none: no section at all) */
        print_section("copies under way", xs, 7, head, transfer_row);
}

static void output_row(cli_table_t *t, const json_t *o)
{
    char att[24], files[24], size[32], tmp[24];
    snprintf(att, sizeof(att), "  %s", cli_fmt_value(json_object_get(o, "attempt"), tmp, sizeof(tmp)));
    cli_fmt_value(json_object_get(o, "files"), files, sizeof(files));
    cli_fmt_size(json_object_get(o, "bytes"), size, sizeof(size));
    const char *cells[] = {att, json_string_value(json_object_get(o, "node")), files, size};
    cli_table_add(t, cells);
}

/* What its attempts left (outputs:), fetched with bramble outputs. */
static void print_outputs(const json_t *outs)
{
    static const char *head[] = {"  ATTEMPT", "NODE", "FILES", "SIZE"};
    if (json_array_size(outs)) /* (none: no section at all) */
        print_section("outputs (bramble outputs JOB DEST)", outs, 4, head, output_row);
}

static void print_checkpoints(const json_t *cps)
{
    static const char *head[] = {"  STEP", "ATTEMPT",  "TIME", "FILES",
                                 "MANIFEST", "COPIES", "PATH"};
    print_section("checkpoints", cps, 7, head, checkpoint_row);
}

static void replica_row(cli_table_t *t, const json_t *r)
{
    char k[24], id[24], state[32], node[64], port[16], health[24], tmp[16];
    snprintf(k, sizeof(k), "  %s", cli_fmt_value(json_object_get(r, "replica"), tmp, sizeof(tmp)));
    cli_fmt_value(json_object_get(r, "id"), id, sizeof(id));
    cli_fmt_value(json_object_get(r, "state"), state, sizeof(state));
    cli_fmt_value(json_object_get(r, "node"), node, sizeof(node));
    cli_fmt_value(json_object_get(r, "port"), port, sizeof(port));
    cli_fmt_value(json_object_get(r, "health"), health, sizeof(health));
    if (json_is_true(json_object_get(r, "draining")))
        snprintf(health + strlen(health), sizeof(health) - strlen(health), ", draining");
    const char *cells[] = {k, id, state, node, port, health};
    cli_table_add(t, cells);
}

/* A service's replicas, one line each. */
static void print_replicas(const json_t *replicas)
{
    static const char *head[] = {"  REPLICA", "JOB", "STATE", "NODE", "PORT", "HEALTH"};
    print_section("replicas", replicas, 6, head, replica_row);
}

static void print_timeline(const json_t *events)
{
    static const char *head[] = {"  TIME", "STATE", "NODE", "REASON"};
    print_section("events", events, 4, head, event_row);
}

/* The spec as the user wrote it, indented under "spec:". */
static void print_spec_text(const char *text)
{
    printf("spec:\n");
    while (*text) {
        size_t n = strcspn(text, "\n");
        fputs("  ", stdout);
        cli_put_text(stdout, text, n);
        putchar('\n');
        text += n + (text[n] == '\n');
    }
}

/* A field whose value may hold several lines: the later ones indented under it. */
static void field_lines(const char *name, const char *text)
{
    size_t n = strcspn(text, "\n");
    printf("%-11s ", name);
    cli_put_text(stdout, text, n);
    putchar('\n');
    for (text += n; *text == '\n' && text[1]; text += n) {
        text++;
        n = strcspn(text, "\n");
        printf("%-11s ", "");
        cli_put_text(stdout, text, n);
        putchar('\n');
    }
}

/* The normalised spec (an object): what runs and what it asked for. */
static void print_spec_summary(const json_t *spec)
{
    const json_t *res = json_object_get(spec, "resources");
    const char *cmd = json_string_value(json_object_get(spec, "command"));
    char mem[32], vram[32], buf[256], tasks[32];
    field_lines("command:", cmd ? cmd : "-");
    cli_field_json(FIELD_WIDTH, spec, "workdir", "workdir:");
    const json_t *code = json_object_get(spec, "code");
    if (json_is_object(code)) { /* code: the tree it brought, as submitted */
        char size[32], line[400];
        cli_fmt_size(json_object_get(code, "bytes"), size, sizeof(size));
        snprintf(line, sizeof(line), "%s: %lld files, %s (manifest %.12s)",
                 json_string_value(json_object_get(code, "dir")),
                 (long long)json_integer_value(json_object_get(code, "files")), size,
                 json_string_value(json_object_get(code, "hash")));
        cli_field(FIELD_WIDTH, "code:", line);
    }
    cli_fmt_value(json_object_get(res, "tasks_per_node"), tasks, sizeof(tasks));
    cli_fmt_size(json_object_get(res, "memory"), mem, sizeof(mem));
    cli_fmt_size(json_object_get(res, "vram"), vram, sizeof(vram));
    snprintf(buf, sizeof(buf),
             "nodes %lld, tasks/node %s, gpus %lld (vram %s), cpus %lld, "
             "memory %s",
             (long long)json_integer_value(json_object_get(res, "nodes")), tasks,
             (long long)json_integer_value(json_object_get(res, "gpus")), vram,
             (long long)json_integer_value(json_object_get(res, "cpus")), mem);
    if (json_is_object(res))
        cli_field(FIELD_WIDTH, "resources:", buf);
    const char *sizing = json_string_value(json_object_get(spec, "sizing"));
    if (sizing)
        cli_field(FIELD_WIDTH, "sizing:", sizing);
}

/* "log: 12.0 MiB stored; 3.0 MiB of the oldest output dropped by the cap". */
static void print_log_usage(const json_t *job)
{
    const json_t *stored = json_object_get(job, "log_bytes");
    if (!json_is_integer(stored))
        return;
    char a[32], b[32], c[32], line[160];
    json_int_t dropped = json_integer_value(json_object_get(job, "log_dropped"));
    json_int_t lost = json_integer_value(json_object_get(job, "log_lost"));
    int n = snprintf(line, sizeof(line), "%s stored", cli_fmt_size(stored, a, sizeof(a)));
    if (dropped > 0 && n > 0 && (size_t)n < sizeof(line))
        n += snprintf(line + n, sizeof(line) - (size_t)n,
                      "; %s of the oldest output dropped by the cap",
                      cli_fmt_size(json_object_get(job, "log_dropped"), b, sizeof(b)));
    if (lost > 0 && n > 0 && (size_t)n < sizeof(line))
        snprintf(line + n, sizeof(line) - (size_t)n, "; %s dropped on its node",
                 cli_fmt_size(json_object_get(job, "log_lost"), c, sizeof(c)));
    cli_field(FIELD_WIDTH, "log:", line);
}

static void print_job(const json_t *job)
{
    char buf[1024];
    cli_field_json(FIELD_WIDTH, job, "id", "id:");
    cli_field_json(FIELD_WIDTH, job, "name", "name:");
    cli_field_json(FIELD_WIDTH, job, "kind", "kind:");
    cli_field_json(FIELD_WIDTH, job, "owner", "owner:");
    cli_field_json(FIELD_WIDTH, job, "state", "state:");
    cli_field_json(FIELD_WIDTH, job, "attempt", "attempt:");
    if (json_is_integer(json_object_get(job, "array_id"))) {
        snprintf(buf, sizeof(buf), "task %lld of array %lld",
                 (long long)json_integer_value(json_object_get(job, "array_index")),
                 (long long)json_integer_value(json_object_get(job, "array_id")));
        cli_field(FIELD_WIDTH, "array:", buf);
    }
    cli_field(FIELD_WIDTH, "nodes:", cli_fmt_list(json_object_get(job, "nodes"), ",", buf, sizeof(buf)));
    if (json_is_string(json_object_get(job, "placement")))
        cli_field_json(FIELD_WIDTH, job, "placement", "placement:");
    cli_field_time(FIELD_WIDTH, job, "submitted", "submitted:");
    cli_field_time(FIELD_WIDTH, job, "started", "started:");
    cli_field_time(FIELD_WIDTH, job, "ended", "ended:");
    cli_field_json(FIELD_WIDTH, job, "exit_code", "exit code:");
    cli_field_json(FIELD_WIDTH, job, "signal", "signal:");
    cli_field_json(FIELD_WIDTH, job, "reason", "reason:");
    print_log_usage(job);
    const json_t *use = json_object_get(job, "usage");
    if (json_is_object(use)) {
        snprintf(buf, sizeof(buf), "%.3f GPU-hours, %.3f CPU-hours; cost %.4f",
                 json_number_value(json_object_get(use, "gpu_hours")),
                 json_number_value(json_object_get(use, "cpu_hours")),
                 json_number_value(json_object_get(use, "cost")));
        cli_field(FIELD_WIDTH, "used:", buf);
    }
    const json_t *spec = json_object_get(job, "spec");
    if (json_is_object(spec))
        print_spec_summary(spec);
    else if (json_is_string(spec))
        print_spec_text(json_string_value(spec));
    const json_t *as = json_object_get(job, "autoscale");
    if (json_is_object(as)) {
        char line[200];
        snprintf(line, sizeof(line),
                 "%lld..%lld replicas, %lld in flight and %lld waiting (target %lld a "
                 "replica, %lld gateway%s reporting): wants %lld",
                 (long long)json_integer_value(json_object_get(as, "min")),
                 (long long)json_integer_value(json_object_get(as, "max")),
                 (long long)json_integer_value(json_object_get(as, "inflight")),
                 (long long)json_integer_value(json_object_get(as, "waiting")),
                 (long long)json_integer_value(json_object_get(as, "target_inflight")),
                 (long long)json_integer_value(json_object_get(as, "gateways")),
                 json_integer_value(json_object_get(as, "gateways")) == 1 ? "" : "s",
                 (long long)json_integer_value(json_object_get(as, "wants")));
        cli_field(FIELD_WIDTH, "autoscale:", line);
    }
    const json_t *dev = json_object_get(job, "dev");
    if (json_is_object(dev)) {
        char line[200], idle[32], stop[32];
        json_int_t streams = json_integer_value(json_object_get(dev, "streams"));
        json_int_t ms = json_integer_value(json_object_get(dev, "idle"));
        json_int_t unit = ms >= 3600000 ? 3600000 : ms >= 60000 ? 60000 : 1000;
        br_format_duration(ms / unit * unit, idle, sizeof(idle)); /* (whole units) */
        br_format_duration(json_integer_value(json_object_get(dev, "idle_stop")), stop,
                           sizeof(stop));
        if (streams > 0)
            snprintf(line, sizeof(line), "in use: %lld shell%s or forward connection%s open "
                                         "(stops after %s idle)",
                     (long long)streams, streams == 1 ? "" : "s", streams == 1 ? "" : "s",
                     stop);
        else
            snprintf(line, sizeof(line), "idle for %s; stops after %s idle (no shell, no "
                                         "forward connection, no output)",
                     idle, stop);
        cli_field(FIELD_WIDTH, "dev:", line);
    }
    if (json_is_array(json_object_get(job, "replicas")))
        print_replicas(json_object_get(job, "replicas"));
    print_checkpoints(json_object_get(job, "checkpoints"));
    print_transfers(json_object_get(job, "transfers"));
    print_outputs(json_object_get(job, "outputs"));
    print_timeline(json_object_get(job, "events"));
}

static int job_show(cli_t *cli, int argc, char **argv)
{
    static const char *names[] = {"job ID"};
    const char *arg;
    int json = 0, index;
    int64_t id = 0;
    if (cli_args(cli, argc, argv, &json, 1, names, &arg) != 0 ||
        parse_ref(cli, arg, &id, &index))
        return CLI_USAGE;
    json_t *r = cli_call(cli, "job.show", ref_body(id, index));
    if (!r)
        return CLI_FAIL;
    json_t *job = json_object_get(r, "job");
    if (json)
        cli_print_json(job ? job : json_object());
    else
        print_job(job);
    json_decref(r);
    return CLI_OK;
}

/* ---- cancel */

typedef struct {
    int now, wait;
    const char *names[64];
    int nnames;
} cancel_opts_t;

/* The id of the active job called name (names are unique among active jobs). */
static int active_named(cli_t *cli, const char *name, int64_t *id)
{
    json_t *r = cli_call(cli, "job.list", json_pack("{s:b}", "all", 0));
    if (!r)
        return CLI_FAIL;
    size_t i;
    json_t *j;
    int found = 0;
    json_array_foreach(json_object_get(r, "jobs"), i, j) {
        const char *n = json_string_value(json_object_get(j, "name"));
        const char *state = json_string_value(json_object_get(j, "state"));
        if (n && strcmp(n, name) == 0 && !is_ended(state)) {
            *id = json_integer_value(json_object_get(j, "id"));
            found = 1;
            break;
        }
    }
    json_decref(r);
    return found ? CLI_OK : cli_fail(cli, "no active job named '%s' (bramble jobs lists them)",
                                     name);
}

/* Ask for job id until it has ended (a task of an array in its grace: many such
 * are waited for one after another, without a watch each). */
static int wait_ended(cli_t *cli, int64_t id, json_t **final)
{
    for (;;) {
        json_t *r = cli_call(cli, "job.show", json_pack("{s:I}", "id", (json_int_t)id));
        if (!r)
            return CLI_FAIL;
        json_t *job = json_object_get(r, "job");
        int ended = is_ended(json_string_value(json_object_get(job, "state")));
        if (ended && final)
            *final = json_incref(job);
        json_decref(r);
        if (ended)
            return CLI_OK;
        cli_sleep_ms(WAIT_POLL_MS);
    }
}

/* A job whose cancel began its grace: wait for its end, and print it. */
static int cancel_wait(cli_t *cli, int64_t id, const char *label)
{
    json_t *job = NULL;
    int rc = wait_ended(cli, id, &job);
    if (rc == CLI_OK) { /* how it ended on stderr; stdout says the state alone */
        char state[32], why[BR_ERR_TEXT + 64];
        cli_fmt_value(json_object_get(job, "state"), state, sizeof(state));
        cli_err(cli, "%s: %s", label, end_reason(job, why, sizeof(why)));
        printf("%s: %s\n", label, state);
    }
    json_decref(job);
    return rc;
}

static int cancel_one(cli_t *cli, const cancel_opts_t *o, int64_t id, int index)
{
    json_t *body = ref_body(id, index);
    if (o->now)
        json_object_set_new(body, "now", json_true());
    json_t *r = cli_call(cli, "job.cancel", body);
    if (!r)
        return CLI_FAIL;
    char state[32], label[64];
    json_t *array = json_object_get(r, "array"), *job = json_object_get(r, "job");
    json_int_t n = json_integer_value(json_object_get(array, "cancelled"));
    cli_fmt_value(json_object_get(job, "state"), state, sizeof(state));
    if (index >= 0)
        snprintf(label, sizeof(label), "job %lld[%d]", (long long)id, index);
    else
        snprintf(label, sizeof(label), "job %lld", (long long)id);
    int rc = CLI_OK;
    if (array) {
        json_t *stopping = json_object_get(array, "stopping");
        size_t k, left = json_array_size(stopping);
        json_t *v;
        if (left && o->wait)
            cli_err(cli, "array %lld: %zu running task%s sent SIGTERM; waiting for them to "
                         "end (--now kills at once)",
                    (long long)id, left, left == 1 ? "" : "s");
        json_array_foreach(stopping, k, v) {
            if (o->wait && wait_ended(cli, json_integer_value(v), NULL) != CLI_OK)
                rc = CLI_FAIL;
        }
        printf("array %lld: %lld task%s cancelled\n", (long long)id, (long long)n,
               n == 1 ? "" : "s");
    } else if (strcmp(state, "cancelled") != 0 && o->wait) { /* in its grace */
        int64_t jid = json_integer_value(json_object_get(job, "id"));
        const char *reason = json_string_value(json_object_get(job, "reason"));
        cli_err(cli, "%s: %s; waiting for it to end", label, reason ? reason : state);
        rc = cancel_wait(cli, jid, label);
    } else if (strcmp(state, "cancelled") != 0) {
        const char *reason = json_string_value(json_object_get(job, "reason"));
        printf("%s: %s (%s)\n", label, state, reason ? reason : "");
    } else {
        printf("%s: %s\n", label, state);
    }
    json_decref(r);
    return rc;
}

static int cmd_cancel(cli_t *cli, int argc, char **argv)
{
    static const struct option opts[] = {{"now", no_argument, NULL, 'k'},
                                         {"no-wait", no_argument, NULL, 'W'},
                                         {"name", required_argument, NULL, 'n'},
                                         {0}};
    cancel_opts_t o = {.wait = 1};
    int c;
    while ((c = getopt_long(argc, argv, ":n:", opts, NULL)) != -1) {
        if (c == 'k') {
            o.now = 1;
        } else if (c == 'W') {
            o.wait = 0;
        } else if (c == 'n') {
            if (o.nnames == (int)(sizeof(o.names) / sizeof(o.names[0])))
                return cli_usage(cli, "at most %zu --name options",
                                 sizeof(o.names) / sizeof(o.names[0]));
            o.names[o.nnames++] = optarg;
        } else {
            return cli_bad_option(cli, c, argv);
        }
    }
    if (optind >= argc && !o.nnames)
        return cli_usage(cli, "missing job ID (or --name NAME)");
    int64_t ids[256];
    int idx[256], n = 0;
    if (argc - optind > (int)(sizeof(ids) / sizeof(ids[0])))
        return cli_usage(cli, "at most %zu job IDs at once", sizeof(ids) / sizeof(ids[0]));
    for (int i = optind; i < argc; i++, n++) /* every ID checked before any is cancelled */
        if (parse_ref(cli, argv[i], &ids[n], &idx[n]) != 0)
            return CLI_USAGE;
    int rc = CLI_OK;
    for (int i = 0; i < o.nnames; i++) {
        int64_t id = 0;
        if (active_named(cli, o.names[i], &id) != CLI_OK)
            rc = CLI_FAIL;
        else if (cancel_one(cli, &o, id, -1) != CLI_OK)
            rc = CLI_FAIL;
    }
    for (int i = 0; i < n; i++) /* one that cannot be cancelled does not stop the rest */
        if (cancel_one(cli, &o, ids[i], idx[i]) != CLI_OK)
            rc = CLI_FAIL;
    return rc;
}

const cli_cmd_t cli_job_cmds[] = {
    {NULL, "submit", cmd_submit,
     "SPEC [--set KEY=VALUE]... [--code DIR] [--wait] [--follow] [--shell] [--timeout DURATION] "
     "[--json]",
     "submit a job",
     "SPEC is a YAML job spec (ARCHITECTURE.md, \"The job spec\"), or - to read it\n"
     "from stdin. It is checked here first; an error names its line. Prints the new\n"
     "job's id.\n"
     "\nOptions:\n"
     "  --set KEY=VALUE  override a field of the spec, e.g. --set resources.gpus=2\n"
     "                   (repeatable)\n"
     "  --code DIR       send DIR as the job's code (in place of the spec's code:),\n"
     "                   packed as git would list it, less .brambleignore; only the\n"
     "                   files the coordinator lacks are sent (docs/files.md)\n"
     "  --wait           return when the job has ended: exit 0 only if it completed\n"
     "  --follow         print the job's output while it runs (the id then goes to\n"
     "                   stderr), then exit as --wait does\n"
     "  --shell          wait until the job runs, then attach a shell to rank 0 as\n"
     "                   'bramble shell' does (the id goes to stderr); for a dev\n"
     "                   environment (kind: dev, docs/shell.md). The job runs on\n"
     "                   when the shell ends\n"
     "  --timeout DURATION  with --wait, --follow or --shell: give up after DURATION (e.g.\n"
     "                   30s, 10m) with exit status 1, naming the job's state and\n"
     "                   reason; the job itself is left alone. After the command\n"
     "                   word; before it, --timeout is the global option\n"
     "  --json           print {\"id\": N}; for an array also \"array\": {\"range\",\n"
     "                   \"count\", \"max\", \"first\", \"last\"} (its tasks are jobs\n"
     "                   first to last)\n"
     "\nA spec with array: (e.g. 0-99%8) makes one task per index in this one\n"
     "request; the id printed is the array's, and --wait waits for every task.\n"
     "\nWhile the job is pending, --wait and --follow print why on stderr (again\n"
     "when the reason changes). When no node of the cluster could ever run the job\n"
     "(too many CPUs, GPUs or nodes, an arch or label nobody has), a warning says so\n"
     "on stderr; the job is submitted all the same.\n"},
    {NULL, "jobs", cmd_jobs, "[--all] [--json]", "list jobs",
     "Without --all: pending, starting and running jobs, and jobs that ended in the\n"
     "last 10 minutes. Table columns: ID NAME STATE ATTEMPT NODES SUBMITTED\n"
     "REASON/EXIT. The tasks of a job array are folded into one row, ID[0-99],\n"
     "with their count in each state (\"running 8, pending 90, completed 2\").\n"
     "\nOptions:\n"
     "  -a, --all   every job the coordinator keeps\n"
     "  --json      print the array of jobs: id, name, kind, state, attempt, nodes,\n"
     "              submitted, started, ended, exit_code, signal, reason, owner,\n"
     "              array_id, array_index (one object per array task; null when\n"
     "              the job is not in an array)\n"},
    {NULL, "queue", cmd_queue, "[--json]", "list pending jobs in the order they are placed",
     "The pending jobs in the order the scheduler considered them in its last pass:\n"
     "highest score first. The score is the priority x 1000, plus the owner's fair\n"
     "share (0-1000: 1000 for someone who used nothing lately), plus the age (a point\n"
     "per 10 minutes waited, at most 500); docs/sharing.md. Table columns: POS ID\n"
     "NAME OWNER PRIORITY SCORE FAIRSHARE AGE WAITED START REASON (POS is the place\n"
     "in the whole queue; START when it starts at the latest if the jobs before it run\n"
     "to their time limits, - when no time can be told; a user sees only their own\n"
     "jobs).\n"
     "\nOptions:\n"
     "  --json   print the array of entries: position, id, name, owner, priority,\n"
     "           attempt, submitted, waited (seconds), reason, score {total,\n"
     "           priority, fairshare, age}, start (seconds, when estimated)\n"},
    {"job", "show", job_show, "ID [--json]",
     "show one job: fields, checkpoints and its events",
     "ID is a job's id, or ARRAY[INDEX] for a task of a job array (12[3]).\n"
     "\nOptions:\n"
     "  --json   print the job object with spec, checkpoints and events\n"},
    {NULL, "cancel", cmd_cancel, "ID... [--name NAME]... [--now] [--no-wait]",
     "cancel jobs; prints each one's new state",
     "ID is a job's id, or ARRAY[INDEX] for one task of a job array (12[3]). The id\n"
     "of an array (12) cancels every task of it still pending or running.\n"
     "\nA running job gets SIGTERM on every one of its processes, and SIGKILL once\n"
     "brambled's --kill-grace (default 30s) has passed, as Slurm's scancel does: a\n"
     "job that traps the signal may save its state first. The job stays running\n"
     "until its processes have ended, then it is cancelled; this command waits for\n"
     "that and prints how it ended. A pending job is cancelled at once.\n"
     "\nOptions:\n"
     "  -n, --name NAME  the active job called NAME (repeatable)\n"
     "  --now            SIGKILL at once, no grace (also for a job already in its\n"
     "                   grace)\n"
     "  --no-wait        return once SIGTERM is sent; the job is cancelled when its\n"
     "                   processes have ended\n"
     "\nEvery ID is cancelled even when one of them cannot be; the exit status is 1\n"
     "when any could not.\n"},
    {0},
};
