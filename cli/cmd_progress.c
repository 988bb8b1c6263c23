/* cmd_progress.c - bramble progress [STEP]: run inside a job, tells the node's agent
 * (through $BRAMBLE_AGENT_SOCK) that the attempt is alive, for hang detection (the
 * spec's progress.timeout; agent/hang.h). No credential: the agent knows the caller
 * by its process. Prints nothing on success, so a training loop may call it often. */
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>

#include "cli.h"
#include "jobsock.h"

static int progress_report(cli_t *cli, int argc, char **argv)
{
    static const struct option opts[] = {{"json", no_argument, NULL, 'j'},
                                         {NULL, 0, NULL, 0}};
    long step = -1;
    int c, json = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
        if (c == 'j')
            json = 1;
        else
            return cli_bad_option(cli, c, argv);
    }
    if (argc - optind > 1)
        return cli_usage(cli, "unexpected argument '%s'", argv[optind + 1]);
    if (argc - optind == 1 && cli_parse_long(cli, "STEP", argv[optind], 0, LONG_MAX, &step) != 0)
        return CLI_USAGE;
    json_t *req = json_pack("{s:s}", "type", "progress");
    if (step >= 0)
        json_object_set_new(req, "step", json_integer(step));
    br_err_t err;
    json_t *r = br_local_request(getenv("BRAMBLE_AGENT_SOCK"), req, 5000, &err);
    json_decref(req);
    if (!r)
        return cli_fail(cli, "%s", err.text);
    if (json)
        cli_print_json(r);
    json_decref(r);
    return CLI_OK;
}

const cli_cmd_t cli_progress_cmds[] = {
    {NULL, "progress", progress_report, "[STEP] [--json]",
     "inside a job: say that this attempt is alive (hang detection)",
     "For jobs with progress: {timeout: T} in their spec (see docs/spec.md): an\n"
     "attempt that for T writes no output, reports no checkpoint and runs no\n"
     "'bramble progress' counts as hung, is killed and restarted from its newest\n"
     "checkpoint. Run it from a training loop that prints little. Talks to this\n"
     "node's agent through $BRAMBLE_AGENT_SOCK; needs no credential; prints\n"
     "nothing on success.\n"
     "\nArguments:\n"
     "  STEP       the training step reached (optional; said when the attempt\n"
     "             is ended as hung)\n"
     "\nOptions:\n"
     "  --json     print the agent's answer\n"},
    {0},
};
