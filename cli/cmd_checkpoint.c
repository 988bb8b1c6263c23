/* cmd_checkpoint.c - bramble checkpoint PATH --step N: run inside a job, tells the
 * node's agent (through $BRAMBLE_AGENT_SOCK) that PATH is a complete checkpoint of
 * this attempt. No credential: the agent knows the caller by its process.
 * bramble checkpoint list JOB: a job's counted checkpoints and where their copies
 * are (job.show's "checkpoints"); bramble checkpoint pull: cmd_ckptpull.c.
 * bramble job purge JOB: drop the copies of an ended job's checkpoints on other
 * nodes now (job.purge), instead of after the coordinator's --replica-retention. */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "jobsock.h"

/* Where a checkpoint's copies are: "NODE (wrote it), NODE, ...". */
static void copies_text(const json_t *cp, char *buf, size_t len)
{
    size_t i, used = 0;
    json_t *c;
    buf[0] = 0;
    json_array_foreach(json_object_get(cp, "copies"), i, c) {
        int n = snprintf(buf + used, len - used, "%s%s%s", used ? ", " : "",
                         json_string_value(json_object_get(c, "node")),
                         json_is_true(json_object_get(c, "writer")) ? " (wrote it)" : "");
        if (n < 0 || (size_t)n >= len - used)
            break;
        used += (size_t)n;
    }
    if (!buf[0])
        snprintf(buf, len, "-");
}

static int checkpoint_list(cli_t *cli, int argc, char **argv)
{
    static const char *names[] = {"job ID"};
    const char *arg;
    int json = 0;
    long id;
    if (cli_args(cli, argc, argv, &json, 1, names, &arg) != 0 ||
        cli_parse_long(cli, "job ID", arg, 1, LONG_MAX, &id) != 0)
        return CLI_USAGE;
    json_t *r = cli_call(cli, "job.show", json_pack("{s:I}", "id", (json_int_t)id));
    if (!r)
        return CLI_FAIL;
    json_t *cps = json_object_get(json_object_get(r, "job"), "checkpoints");
    if (json) {
        cli_print_json(cps ? cps : json_array());
        json_decref(r);
        return CLI_OK;
    }
    static const char *head[] = {"STEP", "SIZE", "HASH", "VERIFIED", "COPIES", "PATH"};
    cli_table_t *t = cli_table_new(6, head);
    size_t i;
    json_t *cp;
    json_array_foreach(cps, i, cp) {
        char step[32], size[32], hash[16] = "-", copies[1024], path[1024];
        const json_t *m = json_object_get(cp, "manifest");
        const char *h = json_string_value(json_object_get(m, "hash"));
        if (h)
            snprintf(hash, sizeof(hash), "%.12s", h);
        cli_fmt_value(json_object_get(cp, "step"), step, sizeof(step));
        cli_fmt_size(json_object_get(cp, "size"), size, sizeof(size));
        cli_fmt_value(json_object_get(cp, "path"), path, sizeof(path));
        copies_text(cp, copies, sizeof(copies));
        /* a manifest: the agent hashed every file, and each copy was checked
         * against it; none: nothing can be verified (no copies are made) */
        const char *cells[] = {step, size, hash, h ? "yes" : "no", copies, path};
        cli_table_add(t, cells);
    }
    if (t)
        cli_table_print(t, stdout);
    cli_table_destroy(&t);
    if (json_array_size(cps) == 0)
        printf("job %ld has no counted checkpoints\n", id);
    json_decref(r);
    return CLI_OK;
}

int cli_step_args(const cli_t *cli, int argc, char **argv, int npos,
                  const char *const *names, const char **pos, long *step, int *json)
{
    static const struct option opts[] = {{"step", required_argument, NULL, 's'},
                                         {"json", no_argument, NULL, 'j'},
                                         {NULL, 0, NULL, 0}};
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
        if (c == 's') {
            if (cli_parse_long(cli, "--step", optarg, 0, LONG_MAX, step) != 0)
                return CLI_USAGE;
        } else if (c == 'j') {
            *json = 1;
        } else {
            return cli_bad_option(cli, c, argv);
        }
    }
    return cli_positional(cli, argc, argv, npos, names, pos) != 0 ? CLI_USAGE : 0;
}

static int checkpoint_report(cli_t *cli, int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "list") == 0) /* (a path named list: ./list) */
        return checkpoint_list(cli, argc - 1, argv + 1);
    if (argc >= 2 && strcmp(argv[1], "pull") == 0) /* (and one named pull: ./pull) */
        return cli_checkpoint_pull(cli, argc - 1, argv + 1);
    static const char *names[] = {"checkpoint PATH"};
    const char *path;
    long step = -1;
    int json = 0;
    if (cli_step_args(cli, argc, argv, 1, names, &path, &step, &json) != 0)
        return CLI_USAGE;
    if (step < 0)
        return cli_usage(cli, "--step N is required");
    char abs[PATH_MAX];
    if (!realpath(path, abs))
        return cli_fail(cli, "%s: %s", path, strerror(errno));
    br_err_t err;
    json_t *req = json_pack("{s:s, s:s, s:I}", "type", "checkpoint", "path", abs, "step",
                            (json_int_t)step);
    json_t *r = br_local_request(getenv("BRAMBLE_AGENT_SOCK"), req, 5000, &err);
    json_decref(req);
    if (!r)
        return cli_fail(cli, "%s", err.text);
    if (json)
        cli_print_json(r);
    else
        printf("checkpoint step %ld at %s reported (job %lld, attempt %lld)\n", step, abs,
               (long long)json_integer_value(json_object_get(r, "job")),
               (long long)json_integer_value(json_object_get(r, "attempt")));
    json_decref(r);
    return CLI_OK;
}

static int job_purge(cli_t *cli, int argc, char **argv)
{
    static const char *names[] = {"job ID"};
    const char *arg;
    int json = 0;
    long id;
    if (cli_args(cli, argc, argv, &json, 1, names, &arg) != 0 ||
        cli_parse_long(cli, "job ID", arg, 1, LONG_MAX, &id) != 0)
        return CLI_USAGE;
    json_t *r = cli_call(cli, "job.purge", json_pack("{s:I}", "id", (json_int_t)id));
    if (!r)
        return CLI_FAIL;
    if (json) {
        cli_print_json(r);
    } else {
        long long dropped = json_integer_value(json_object_get(r, "dropped"));
        long long forgotten = json_integer_value(json_object_get(r, "forgotten"));
        printf("job %ld: %lld replica%s dropped", id, dropped, dropped == 1 ? "" : "s");
        if (forgotten)
            printf(", %lld forgotten on nodes not connected (their copies stay on their "
                   "disks)",
                   forgotten);
        printf("\n");
    }
    json_decref(r);
    return CLI_OK;
}

const cli_cmd_t cli_checkpoint_cmds[] = {
    {NULL, "checkpoint", checkpoint_report,
     "PATH --step N [--json] | list JOB [--json] | pull JOB [--step N] [--json] DEST",
     "inside a job: report PATH as a complete checkpoint; list: a job's checkpoints; "
     "pull: fetch one here",
     "For jobs whose checkpoints the agent cannot recognise by itself (see\n"
     "docs/checkpoints.md). Talks to this node's agent through $BRAMBLE_AGENT_SOCK;\n"
     "needs no credential. A restarted attempt gets the newest reported checkpoint\n"
     "as BRAMBLE_RESUME_FROM and its step as BRAMBLE_RESUME_STEP.\n"
     "\n'bramble checkpoint list JOB' shows a job's counted checkpoints: step, size,\n"
     "manifest hash, whether it can be verified, and the nodes that hold a verified\n"
     "copy (the writer, and replicas: docs/checkpoints.md).\n"
     "\n'bramble checkpoint pull JOB [--step N] DEST' fetches the job's newest counted\n"
     "checkpoint (or the one at step N) to this machine through the coordinator,\n"
     "from a node that holds a copy, into DEST/NAME (NAME: the checkpoint's own\n"
     "name; DEST is made when missing, with its parents), verifying every file\n"
     "against the checkpoint's manifest. DEST/NAME appears only once all of it is\n"
     "verified; a pull that stops keeps what it verified in\n"
     "DEST/.bramble-pull-NAME, and the next pull goes on from it. Progress shows\n"
     "on a terminal. When the copy it reads is gone, it says whether another is\n"
     "left.\n"
     "\nOptions:\n"
     "  --step N   the training step the checkpoint holds (required); pull: the step\n"
     "             to fetch (default: the newest)\n"
     "  --json     print the agent's answer (list: the checkpoints as JSON; pull:\n"
     "             {job, step, path, from, hash, files, bytes, received, kept,\n"
     "             seconds})\n"},
    {"job", "purge", job_purge, "ID [--json]",
     "drop the replicas of an ended job's checkpoints now",
     "The copies of the job's checkpoints on other nodes (replicas, see\n"
     "docs/checkpoints.md) are dropped from their nodes now, instead of when the\n"
     "coordinator's --replica-retention (default 7d) has passed since the job ended.\n"
     "A node that is not connected keeps its copy on its disk; the coordinator\n"
     "forgets it. Only a job that has ended can be purged (cancel it first); a user\n"
     "may purge only their own jobs. The job, its checkpoints as the job wrote them\n"
     "and its events stay.\n"
     "\nOptions:\n"
     "  --json   print {\"id\", \"dropped\", \"forgotten\"}\n"},
    {0},
};
