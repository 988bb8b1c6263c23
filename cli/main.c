/* main.c - bramble, the user's command line: global options, the command table,
 * help texts and dispatch to the command handlers (cmd_*.c). */
#include <ctype.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

#ifndef BRAMBLE_VERSION
#define BRAMBLE_VERSION "0.0.0"
#endif

static const cli_cmd_t *const tables[] = {cli_cluster_cmds, cli_node_cmds, cli_job_cmds,
                                          cli_log_cmds, cli_top_cmds, cli_user_cmds,
                                          cli_class_cmds, cli_audit_cmds,
                                          cli_dashboard_cmds, cli_probe_cmds,
                                          cli_service_cmds, cli_data_cmds, cli_image_cmds,
                                          cli_outputs_cmds,
                                          cli_checkpoint_cmds, cli_progress_cmds,
                                          cli_plan_cmds, cli_gateway_cmds, cli_key_cmds,
                                          cli_shell_cmds, cli_forward_cmds};
#define NTABLES (sizeof(tables) / sizeof(tables[0]))

static const char global_help[] =
    "Global options (before or after the command):\n"
    "  --credential FILE    credential to use (default $BRAMBLE_CREDENTIAL, else\n"
    "                       ~/.config/bramble/credential)\n"
    "  --timeout DURATION   how long to wait for each answer of the coordinator\n"
    "                       (default 10s; e.g. 500ms, 30s, 1m); after 'submit' it is\n"
    "                       submit's own: how long --wait and --follow wait\n"
    "  -h, --help           show help and exit\n";

static void cmd_words(const cli_cmd_t *c, char *buf, size_t len)
{
    if (c->group)
        snprintf(buf, len, "%s %s", c->group, c->name);
    else
        snprintf(buf, len, "%s", c->name);
}

static void print_main_help(void)
{
    printf(
        "Usage: bramble [GLOBAL OPTIONS] COMMAND [ARGS...]\n\n"
        "bramble runs jobs on a small cluster of GPU boxes, rented nodes and\n"
        "Raspberry Pis; this is its command line.\n\nCommands:\n");
    for (size_t t = 0; t < NTABLES; t++)
        for (const cli_cmd_t *c = tables[t]; c->name; c++) {
            char words[64];
            cmd_words(c, words, sizeof(words));
            printf("  %-16s %s\n", words, c->summary);
        }
    printf("  %-16s %s\n  %-16s %s\n", "help [COMMAND]",
           "show this help, or a command's (as 'bramble COMMAND --help')", "version",
           "print bramble's version");
    printf(
        "\n%s\nRun 'bramble COMMAND --help' for the options of a command.\n"
        "Exit status: 0 success, 1 the request was refused or failed, 2 bad "
        "usage.\n",
        global_help);
}

/* "Usage: bramble CMD SYNOPSIS", wrapped between [groups] within 80 columns. */
static void print_usage_line(const char *words, const char *synopsis)
{
    int col = printf("Usage: bramble %s", words), indent = col;
    const char *p = synopsis;
    while (*p) {
        size_t n = 0;
        int depth = 0;
        for (; p[n] && (depth > 0 || p[n] != ' '); n++)
            depth += (p[n] == '[') - (p[n] == ']');
        if (col + 1 + (int)n > 80 && col > indent)
            col = printf("\n%*s", indent, "") - 1;
        col += printf(" %.*s", (int)n, p);
        p += n;
        while (*p == ' ')
            p++;
    }
    printf("\n");
}

static void print_cmd_help(const cli_cmd_t *c)
{
    char words[64];
    cmd_words(c, words, sizeof(words));
    print_usage_line(words, c->synopsis);
    printf("\n%c%s.\n", toupper((unsigned char)c->summary[0]), c->summary + 1);
    if (*c->options)
        printf("\n%s", c->options);
    printf("\n%s", global_help);
}

static void print_group_help(const char *group, FILE *out)
{
    fprintf(out, "Usage: bramble %s SUBCOMMAND [ARGS...]\n\nSubcommands:\n", group);
    for (size_t t = 0; t < NTABLES; t++)
        for (const cli_cmd_t *c = tables[t]; c->name; c++)
            if (c->group && strcmp(c->group, group) == 0)
                fprintf(out, "  %s %-10s %s\n", group, c->name, c->summary);
    fprintf(out, "\nRun 'bramble %s SUBCOMMAND --help' for its options.\n", group);
}

static const cli_cmd_t *find_cmd(const char *group, const char *name)
{
    for (size_t t = 0; t < NTABLES; t++)
        for (const cli_cmd_t *c = tables[t]; c->name; c++) {
            if (group && c->group && strcmp(c->group, group) == 0 &&
                strcmp(c->name, name) == 0)
                return c;
            if (!group && !c->group && strcmp(c->name, name) == 0)
                return c;
        }
    return NULL;
}

static int is_group(const char *word)
{
    for (size_t t = 0; t < NTABLES; t++)
        for (const cli_cmd_t *c = tables[t]; c->name; c++)
            if (c->group && strcmp(c->group, word) == 0)
                return 1;
    return 0;
}

static int is_help(const char *a)
{
    return strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0;
}

/* A global option at argv[*i] (with its value): 1 when taken, 0 when not global,
 * -1 on a usage error. */
static int take_global(cli_t *cli, int argc, char **argv, int *i)
{
    static const char *names[] = {"--credential", "--timeout"};
    for (int k = 0; k < 2; k++) {
        size_t n = strlen(names[k]);
        const char *a = argv[*i], *val;
        if (strncmp(a, names[k], n) != 0 || (a[n] != 0 && a[n] != '='))
            continue;
        if (a[n] == '=')
            val = a + n + 1;
        else if (*i + 1 < argc)
            val = argv[++*i];
        else
            return cli_usage(cli, "option '%s' needs a value", names[k]), -1;
        if (k == 0) {
            cli->cred_flag = val;
            return 1;
        }
        int64_t ms;
        if (cli_parse_ms(cli, "--timeout", val, &ms) != 0)
            return -1;
        if (ms <= 0)
            return cli_usage(cli, "--timeout %s: give a time to wait for each answer, more "
                                  "than 0 (e.g. 5s)", val), -1;
        cli->timeout_ms = (int)ms;
        cli->timeout_given = 1;
        return 1;
    }
    return 0;
}

/* Move every global option out of args (until "--"); the rest stays in order.
 * After the word submit, --timeout is submit's own (how long --wait waits). */
static int strip_globals(cli_t *cli, int *argc, char **argv)
{
    int out = 0, dashdash = 0, submit = 0;
    for (int i = 0; i < *argc; i++) {
        if (!dashdash && strcmp(argv[i], "--") == 0)
            dashdash = 1;
        if (out == 0 && strcmp(argv[i], "submit") == 0)
            submit = 1;
        int own = submit && strncmp(argv[i], "--timeout", 9) == 0 &&
                  (argv[i][9] == '\0' || argv[i][9] == '=');
        int r = dashdash || own ? 0 : take_global(cli, *argc, argv, &i);
        if (r < 0)
            return -1;
        if (r == 0)
            argv[out++] = argv[i];
    }
    argv[out] = NULL;
    *argc = out;
    return 0;
}

static int wants_help(int argc, char **argv)
{
    for (int i = 1; i < argc && strcmp(argv[i], "--") != 0; i++)
        if (is_help(argv[i]))
            return 1;
    return 0;
}

#if defined(__SANITIZE_ADDRESS__)
#define CLI_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CLI_SANITIZED 1
#endif
#endif

/* After a command that talked to the coordinator: every request it made has been
 * answered (or given up on), so nothing is left to send, and the process ends here
 * without closing the connection and ZeroMQ's context: the kernel closes the
 * socket, and the context's two threads end with the process instead of being
 * woken, told to stop and joined first, which cost a bramble submit about 2 ms of
 * its CPU (docs/benchmarks.md). Output is flushed and the exit status is the same.
 * A sanitizer build (the tests') takes everything down, so that LeakSanitizer
 * still checks the CLI's memory. */
static void end_early(cli_t *cli, int rc)
{
#ifndef CLI_SANITIZED
    if (cli->client) {
        explicit_bzero(cli->cred.secret_key, sizeof(cli->cred.secret_key));
        fflush(NULL);
        _exit(rc);
    }
#else
    (void)cli;
    (void)rc;
#endif
}

static int run_cmd(cli_t *cli, const cli_cmd_t *c, int argc, char **argv)
{
    char words[64];
    cmd_words(c, words, sizeof(words));
    cli->cmd = words;
    if (wants_help(argc, argv)) {
        print_cmd_help(c);
        cli->cmd = NULL;
        return CLI_OK;
    }
    argv[0] = words;
    optind = 0;
    opterr = 0;
    int rc = c->run(cli, argc, argv);
    end_early(cli, rc);
    cli_close(cli);
    fflush(stdout);
    cli->cmd = NULL;
    return rc;
}

/* bramble help [CMD...]: the main help, or CMD's as 'bramble CMD --help' gives it. */
static int help_cmd(cli_t *cli, int argc, char **argv)
{
    if (argc < 2) {
        print_main_help();
        return CLI_OK;
    }
    if (is_group(argv[1]) && argc < 3) {
        print_group_help(argv[1], stdout);
        return CLI_OK;
    }
    const cli_cmd_t *c = is_group(argv[1]) ? find_cmd(argv[1], argv[2])
                                            : find_cmd(NULL, argv[1]);
    if (!c || argc > (is_group(argv[1]) ? 3 : 2))
        return cli_usage(cli, "help: no command '%s%s%s'", argv[1],
                         is_group(argv[1]) ? " " : "", is_group(argv[1]) ? argv[2] : "");
    print_cmd_help(c);
    return CLI_OK;
}

static int dispatch(cli_t *cli, int argc, char **argv)
{
    const char *word = argv[0];
    if (is_help(word)) {
        print_main_help();
        return CLI_OK;
    }
    if (strcmp(word, "help") == 0)
        return help_cmd(cli, argc, argv);
    if (strcmp(word, "version") == 0 && argc > 1)
        return cli_usage(cli, "version: takes no arguments");
    if (strcmp(word, "version") == 0)
        word = "--version";
    if (strcmp(word, "--version") == 0) {
        printf("bramble %s\n", BRAMBLE_VERSION);
        return CLI_OK;
    }
    if (word[0] == '-' && word[1])
        return cli_usage(cli, "unknown option '%s'", word);
    if (is_group(word)) {
        if (argc >= 2 && is_help(argv[1])) {
            print_group_help(word, stdout);
            return CLI_OK;
        }
        if (argc < 2) {
            cli_err(cli, "'%s' needs a subcommand", word);
            print_group_help(word, stderr);
            return CLI_USAGE;
        }
        const cli_cmd_t *c = find_cmd(word, argv[1]);
        if (!c) {
            cli_err(cli, "unknown command '%s %s'", word, argv[1]);
            fprintf(stderr, "Try 'bramble %s --help'.\n", word);
            return CLI_USAGE;
        }
        return run_cmd(cli, c, argc - 1, argv + 1);
    }
    const cli_cmd_t *c = find_cmd(NULL, word);
    if (!c)
        return cli_usage(cli, "unknown command '%s'", word);
    return run_cmd(cli, c, argc, argv);
}

int main(int argc, char **argv)
{
    /* a standard stream started closed (`<&-`) is /dev/null: the first file or
     * socket opened would otherwise take its number, and be read as stdin */
    for (int fd = 0; fd <= 2; fd++)
        if (fcntl(fd, F_GETFD) < 0 && open("/dev/null", fd ? O_WRONLY : O_RDONLY) != fd)
            return CLI_FAIL;
    cli_t cli = {.timeout_ms = CLI_TIMEOUT_MS};
    char **args = calloc((size_t)argc + 1, sizeof(*args));
    if (!args)
        return CLI_FAIL;
    int n = argc - 1;
    memcpy(args, argv + 1, (size_t)n * sizeof(*args));
    int rc;
    if (strip_globals(&cli, &n, args) < 0)
        rc = CLI_USAGE;
    else if (n == 0)
        rc = cli_usage(&cli, "no command given");
    else
        rc = dispatch(&cli, n, args);
    cli_close(&cli);
    free(args);
    return rc;
}
