/* cmd_user.c - bramble user add|list|remove: credentials for people who submit jobs.
 * The key pair is made here and only its public half is sent, so a user's secret
 * key never crosses the wire. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "limits.h"
#include "usercred.h"
#include "util.h"

/* user add, with limits (an empty object) to fill from the options */
static int user_add_with(cli_t *cli, int argc, char **argv, json_t *limits)
{
    static const struct option opts[] = {{"out", required_argument, NULL, 'o'},
                                         {"endpoint", required_argument, NULL, 'e'},
                                         {"unix-user", required_argument, NULL, 'u'},
                                         CLI_LIMIT_OPTS,
                                         {NULL, 0, NULL, 0}};
    static const char *names[] = {"user NAME"};
    const char *out = NULL, *name, *endpoint = NULL, *unix_user = NULL;
    int c, took;
    optind = 1;
    while ((c = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
        if (c == 'o')
            out = optarg;
        else if (c == 'e')
            endpoint = optarg;
        else if (c == 'u')
            unix_user = optarg;
        else if ((took = cli_limit_opt(cli, c, optarg, limits)) != 0)
            return took < 0 ? CLI_USAGE : cli_bad_option(cli, c, argv);
    }
    if (cli_positional(cli, argc, argv, 1, names, &name) != 0)
        return CLI_USAGE;
    if (endpoint && cli_usercred_endpoint_ok(cli, endpoint) != 0)
        return CLI_USAGE;
    if (!br_valid_name(name))
        return cli_usage(cli, "user name '%s': use lowercase letters, digits and '-'",
                         name);
    if (!cli_client(cli))
        return CLI_FAIL;
    json_t *body = json_object();
    if (body && unix_user)
        json_object_set_new(body, "unix_user", json_string(unix_user));
    if (body && json_object_size(limits))
        json_object_set(body, "limits", limits);
    char path[CLI_PATH_MAX];
    if (cli_usercred_issue(cli, "user", name, body, endpoint, out, "credential", path))
        return CLI_FAIL;
    printf("added user %s; credential: %s (mode 0600; give it to %s, who runs "
           "bramble --credential %s ...)\n",
           name, path, name, path);
    return CLI_OK;
}

static int user_add(cli_t *cli, int argc, char **argv)
{
    json_t *limits = json_object();
    int rc = limits ? user_add_with(cli, argc, argv, limits) : CLI_FAIL;
    json_decref(limits);
    return rc;
}

static void user_row(cli_table_t *t, const json_t *u)
{
    char a[64], b[64], cr[64], lim[300];
    const char *row[] = {cli_fmt_value(json_object_get(u, "name"), a, sizeof(a)),
                         cli_fmt_value(json_object_get(u, "kind"), b, sizeof(b)),
                         cli_fmt_time(json_object_get(u, "created"), cr, sizeof(cr)),
                         cli_limits_text(json_object_get(u, "limits"), lim, sizeof(lim))};
    cli_table_add(t, row);
}

static int user_list(cli_t *cli, int argc, char **argv)
{
    int json = 0;
    if (cli_args(cli, argc, argv, &json, 0, NULL, NULL) != 0)
        return CLI_USAGE;
    json_t *r = cli_call(cli, "user.list", NULL);
    if (!r)
        return CLI_FAIL;
    static const char *head[] = {"NAME", "KIND", "CREATED", "LIMITS"};
    cli_print_list(json_object_get(r, "users"), json, 4, head, user_row);
    json_decref(r);
    return CLI_OK;
}

/* bramble user set NAME [--unix-user U | --no-unix-user] [limits], limits (an
 * empty object) to fill from the options */
static int user_set_with(cli_t *cli, int argc, char **argv, json_t *limits)
{
    static const struct option opts[] = {{"unix-user", required_argument, NULL, 'u'},
                                         {"no-unix-user", no_argument, NULL, 'n'},
                                         CLI_LIMIT_OPTS,
                                         {NULL, 0, NULL, 0}};
    static const char *names[] = {"user NAME"};
    const char *name, *unix_user = NULL;
    int c, none = 0, took;
    optind = 1;
    while ((c = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
        if (c == 'u')
            unix_user = optarg;
        else if (c == 'n')
            none = 1;
        else if ((took = cli_limit_opt(cli, c, optarg, limits)) != 0)
            return took < 0 ? CLI_USAGE : cli_bad_option(cli, c, argv);
    }
    if (cli_positional(cli, argc, argv, 1, names, &name) != 0)
        return CLI_USAGE;
    if (unix_user && none)
        return cli_usage(cli, "give --unix-user U or --no-unix-user, not both");
    if (!unix_user && !none && !json_object_size(limits))
        return cli_usage(cli, "give --unix-user U, --no-unix-user, or a limit (--max-gpus, "
                              "--max-jobs, --max-pending, --gpu-hours-week, "
                              "--max-priority, --share, --rpm)");
    json_t *body = json_pack("{s:s}", "name", name);
    if (unix_user || none)
        json_object_set_new(body, "unix_user", unix_user ? json_string(unix_user) : json_null());
    if (json_object_size(limits))
        json_object_set(body, "limits", limits);
    json_t *r = cli_call(cli, "user.set", body);
    if (!r)
        return CLI_FAIL;
    if (unix_user)
        printf("user %s: jobs run as local account %s on nodes that have it\n", name,
               unix_user);
    else if (none)
        printf("user %s: jobs run as the node's uid for the user (--job-uids)\n", name);
    char text[300];
    if (json_object_size(limits))
        printf("user %s: limits %s\n", name,
               cli_limits_text(json_object_get(r, "limits"), text, sizeof(text)));
    json_decref(r);
    return CLI_OK;
}

static int user_set(cli_t *cli, int argc, char **argv)
{
    json_t *limits = json_object();
    int rc = limits ? user_set_with(cli, argc, argv, limits) : CLI_FAIL;
    json_decref(limits);
    return rc;
}

static int user_remove(cli_t *cli, int argc, char **argv)
{
    const char *name, *jobs;
    int rc = cli_usercred_remove_args(cli, argc, argv, "user NAME", &name, &jobs);
    if (rc)
        return rc;
    json_t *r = cli_call(cli, "user.remove",
                         json_pack("{s:s, s:s}", "name", name, "jobs", jobs));
    if (!r)
        return CLI_FAIL;
    printf("removed user %s; its key is revoked; %lld active job(s) %s\n", name,
           (long long)json_integer_value(json_object_get(r, "jobs")),
           json_string_value(json_object_get(r, "jobs_were")));
    json_decref(r);
    return CLI_OK;
}

/* Replace the caller's own key pair. The new credential is written next to the old
 * one first (FILE.new), so that an answer lost on the way leaves a usable key. */
static int user_rotate_key(cli_t *cli, int argc, char **argv)
{
    if (cli_args(cli, argc, argv, NULL, 0, NULL, NULL) != 0)
        return CLI_USAGE;
    if (!cli_client(cli))
        return CLI_FAIL;
    char path[CLI_PATH_MAX], next[CLI_PATH_MAX + 8];
    br_cred_path(cli->cred_flag, path, sizeof(path));
    snprintf(next, sizeof(next), "%s.new", path);
    br_cred_t fresh = cli->cred;
    br_err_t err;
    if (br_keypair(fresh.public_key, fresh.secret_key, &err) < 0 ||
        br_cred_save(next, &fresh, &err) < 0)
        return cli_fail(cli, "%s", err.text);
    json_t *r = cli_call(cli, "user.rotate_key",
                         json_pack("{s:s}", "public_key", fresh.public_key));
    if (!r) {
        unlink(next); /* refused: the old key still holds */
        return CLI_FAIL;
    }
    json_decref(r);
    if (rename(next, path) < 0)
        return cli_fail(cli, "the key was rotated, but %s could not replace %s: %s; use "
                             "%s from now on",
                        next, path, strerror(errno), next);
    printf("rotated the key of %s; %s holds the new one, and the old key is refused\n",
           cli->cred.name, path);
    return CLI_OK;
}

static void usage_row(cli_table_t *t, const json_t *u)
{
    char name[64], gpu[32], cpu[32], cost[32], running[32] = "-";
    cli_fmt_value(json_object_get(u, "user"), name, sizeof(name));
    snprintf(gpu, sizeof(gpu), "%.3f", json_number_value(json_object_get(u, "gpu_hours")));
    snprintf(cpu, sizeof(cpu), "%.3f", json_number_value(json_object_get(u, "cpu_hours")));
    snprintf(cost, sizeof(cost), "%.4f", json_number_value(json_object_get(u, "cost")));
    json_int_t live = json_integer_value(json_object_get(u, "running"));
    if (live > 0) /* counted up to now */
        snprintf(running, sizeof(running), "%lld", (long long)live);
    const char *row[] = {name, gpu, cpu, cost, running};
    cli_table_add(t, row);
}

/* One row of the gateways' answers per model and user. */
static void model_usage_row(cli_table_t *t, const json_t *u)
{
    char v[5][32], avg[32] = "-";
    static const char *const keys[] = {"requests", "errors", "prompt_tokens",
                                       "completion_tokens", "ms"};
    for (int i = 0; i < 5; i++)
        snprintf(v[i], sizeof(v[i]), "%lld",
                 (long long)json_integer_value(json_object_get(u, keys[i])));
    json_int_t n = json_integer_value(json_object_get(u, "requests"));
    if (n > 0)
        snprintf(avg, sizeof(avg), "%.1f",
                 (double)json_integer_value(json_object_get(u, "ms")) / (double)n);
    const char *who = json_string_value(json_object_get(u, "user"));
    const char *row[] = {json_string_value(json_object_get(u, "model")),
                         who && *who ? who : "-", v[0], v[1], v[2], v[3], avg};
    cli_table_add(t, row);
}

/* bramble usage [--user U] [--since 7d] [--models] [--json] */
static int cmd_usage(cli_t *cli, int argc, char **argv)
{
    static const struct option opts[] = {{"user", required_argument, NULL, 'u'},
                                         {"since", required_argument, NULL, 's'},
                                         {"json", no_argument, NULL, 'j'},
                                         {"models", no_argument, NULL, 'm'},
                                         {NULL, 0, NULL, 0}};
    const char *user = NULL;
    int64_t since = 7LL * 24 * 3600 * 1000;
    int c, json = 0, models = 0;
    br_err_t err;
    optind = 1;
    while ((c = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
        if (c == 'u')
            user = optarg;
        else if (c == 'j')
            json = 1;
        else if (c == 'm')
            models = 1;
        else if (c == 's') {
            if (br_parse_duration(optarg, &since, &err) < 0)
                return cli_usage(cli, "--since %s", err.text);
        } else
            return cli_bad_option(cli, c, argv);
    }
    if (cli_positional(cli, argc, argv, 0, NULL, NULL) != 0)
        return CLI_USAGE;
    json_t *body = json_pack("{s:I}", "since", (json_int_t)(br_now_ms() - since));
    if (user)
        json_object_set_new(body, "user", json_string(user));
    json_t *r = cli_call(cli, "usage.show", body);
    if (!r)
        return CLI_FAIL;
    static const char *head[] = {"USER", "GPU-HOURS", "CPU-HOURS", "COST", "RUNNING"};
    static const char *mhead[] = {"MODEL",      "USER",       "REQUESTS", "ERRORS",
                                  "TOKENS-IN", "TOKENS-OUT", "AVG-MS"};
    if (models)
        cli_print_list(json_object_get(r, "models"), json, 7, mhead, model_usage_row);
    else
        cli_print_list(json_object_get(r, "users"), json, 5, head, usage_row);
    json_decref(r);
    return CLI_OK;
}

const cli_cmd_t cli_user_cmds[] = {
    {"user", "add", user_add,
     "NAME [--out FILE] [--endpoint tcp://HOST:PORT] [--unix-user U] [LIMITS]",
     "issue a credential for a user who submits jobs (admin)",
     "Makes a key pair here, registers its public key, and writes the credential\n"
     "(mode 0600) to FILE, by default ./NAME.credential. Users see and cancel their\n"
     "own jobs only.\n"
     "\nOptions:\n"
     "  --out FILE        where to write the credential\n"
     "  --endpoint EP     the coordinator's address written into the credential\n"
     "                    (tcp://HOST:PORT; default: the one the coordinator\n"
     "                    advertises), for users who reach it another way\n"
     "  --unix-user U     run the user's jobs as local account U on nodes that\n"
     "                    have it (else as the node's uid for the user)\n"
     "  LIMITS            as for user set\n"},
    {"user", "set", user_set, "NAME [--unix-user U | --no-unix-user] [LIMITS]",
     "change how a user's jobs run, and what they may use (admin)",
     "--unix-user U runs the user's jobs as local account U on every node that has\n"
     "it; --no-unix-user goes back to the node's uid for the user (--job-uids).\n"
     "Jobs started from then on follow it.\n"
     "\nLimits (each takes 'none' to lift it; docs/sharing.md):\n"
     "  --max-gpus N         GPUs held at once; a job that needs more is refused\n"
     "  --max-jobs N         jobs running at once; more wait\n"
     "  --max-pending N      jobs pending at once; more are refused\n"
     "  --gpu-hours-week H   GPU-hours over the last 7 days; then GPU jobs wait\n"
     "  --max-priority P     the highest priority the user's specs may ask for\n"
     "  --share W            their weight in fair share (default 1)\n"
     "  --rpm N              requests a minute through each gateway (docs/gateway.md);\n"
     "                       more get 429\n"},
    {NULL, "usage", cmd_usage, "[--user U] [--since 7d] [--models] [--json]",
     "GPU-hours, CPU-hours and cost per user; requests and tokens per model",
     "What each user's jobs held and cost since --since ago (default 7d), summed by\n"
     "the hour. A user sees their own; the admin everyone's, or one with --user.\n"
     "A job's cost is its nodes' cost per hour times the larger of its part of each\n"
     "node's GPUs and of its CPUs. Jobs still running count up to now; RUNNING\n"
     "says how many of the user's jobs are running.\n"
     "With --models: what the gateways answered per model and user (USER '-': no\n"
     "API key), by the hour: requests, those answered with an error (4xx, 5xx), the\n"
     "tokens the replicas' answers said they used, and the average time per request.\n"
     "\nOptions:\n"
     "  --models   requests and tokens per model, from the gateways' reports\n"
     "  --json     print the array: user, gpu_hours, cpu_hours, cost, running (with\n"
     "             --models: user, model, requests, errors, prompt_tokens,\n"
     "             completion_tokens, ms)\n"},
    {"user", "list", user_list, "[--json]", "list the admin and the users (admin)",
     "Options:\n"
     "  --json   print the array of users: name, kind, created, limits\n"},
    {"user", "rotate-key", user_rotate_key, "",
     "replace your own key pair; the old key is refused at once",
     "Makes a new key pair here, registers its public key for the same user (the\n"
     "same id and jobs) and revokes the key this command ran with. The credential\n"
     "file is rewritten in place; should the answer be lost, FILE.new holds the new\n"
     "credential. Works for the admin's credential too.\n"},
    {"user", "remove", user_remove, "NAME [--jobs cancel|admin]",
     "remove a user and revoke its key at once (admin)",
     "The user's pending and running jobs are cancelled (--jobs cancel, the\n"
     "default) or handed to the admin (--jobs admin). A user added later under the\n"
     "same name is someone else: it sees nothing of the removed user's jobs.\n"
     "\nOptions:\n"
     "  --jobs cancel|admin   what happens to the user's active jobs\n"},
    {0},
};
