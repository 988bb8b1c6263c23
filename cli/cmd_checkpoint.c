/* cmd_checkpoint.c - bramble checkpoint PATH --step N: run inside a job, tells the
 * node's agent (through $BRAMBLE_AGENT_SOCK) that PATH is a complete checkpoint of
 * this attempt. No credential: the agent knows the caller by its process. */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "jobsock.h"

static int checkpoint_report(cli_t *cli, int argc, char **argv)
{
    static const struct option opts[] = {{"step", required_argument, NULL, 's'},
                                         {"json", no_argument, NULL, 'j'},
                                         {NULL, 0, NULL, 0}};
    static const char *names[] = {"checkpoint PATH"};
    const char *path;
    long step = -1;
    int c, json = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
        if (c == 's') {
            if (cli_parse_long(cli, "--step", optarg, 0, LONG_MAX, &step) != 0)
                return CLI_USAGE;
        } else if (c == 'j') {
            json = 1;
        } else {
            return cli_bad_option(cli, c, argv);
        }
    }
    if (cli_positional(cli, argc, argv, 1, names, &path) != 0)
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

const cli_cmd_t cli_checkpoint_cmds[] = {
    {NULL, "checkpoint", checkpoint_report, "PATH --step N [--json]",
     "inside a job: report PATH as a complete checkpoint of this attempt",
     "For jobs whose checkpoints the agent cannot recognise by itself (see\n"
     "docs/checkpoints.md). Talks to this node's agent through $BRAMBLE_AGENT_SOCK;\n"
     "needs no credential. A restarted attempt gets the newest reported checkpoint\n"
     "as BRAMBLE_RESUME_FROM and its step as BRAMBLE_RESUME_STEP.\n"
     "\nOptions:\n"
     "  --step N   the training step the checkpoint holds (required)\n"
     "  --json     print the agent's answer\n"},
    {0},
};
