/* cmd_data.c - bramble data push|list|show|rm: named data sets (model weights, a
 * corpus) kept in the coordinator's content store, each version of one packed the
 * way code is (pack.h) and sent once, only what the store lacks (upload.h). */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "pack.h"
#include "sendtree.h"
#include "util.h"

#define SHARES_MAX 64

/* "NAME[:TAG]" into the request body's name and tag. */
static json_t *name_body(const char *arg)
{
    const char *colon = strrchr(arg, ':');
    if (!colon || strchr(arg, '/') > colon)
        return json_pack("{s:s}", "name", arg);
    return json_pack("{s:s#, s:s}", "name", arg, (int)(colon - arg), "tag", colon + 1);
}

static int push_run(cli_t *cli, int argc, char **argv)
{
    static const struct option opts[] = {{"share", required_argument, NULL, 's'},
                                         {"public", no_argument, NULL, 'p'},
                                         {"json", no_argument, NULL, 'j'},
                                         {NULL, 0, NULL, 0}};
    json_t *shares = json_array();
    int c, json = 0, public_ = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
        if (c == 's' && json_array_size(shares) < SHARES_MAX)
            json_array_append_new(shares, json_string(optarg));
        else if (c == 's')
            return json_decref(shares), cli_usage(cli, "--share: at most %d", SHARES_MAX);
        else if (c == 'p')
            public_ = 1;
        else if (c == 'j')
            json = 1;
        else
            return json_decref(shares), cli_bad_option(cli, c, argv);
    }
    static const char *const names[] = {"DIR", "NAME[:TAG]"};
    const char *pos[2];
    if (cli_positional(cli, argc, argv, 2, names, pos) != CLI_OK)
        return json_decref(shares), CLI_USAGE;
    br_err_t err;
    br_pack_t *p = br_pack_new(NULL, &err);
    if (!p || br_pack_dir(p, pos[0], "", &err) < 0 || !br_pack_manifest(p, &err)) {
        br_pack_destroy(&p);
        json_decref(shares);
        return cli_fail(cli, "%s", err.text);
    }
    if (!json)
        cli_upload_say_left_out(p);
    json_t *listing, *summary;
    cli_upload_t st;
    if (cli_upload(cli, p, !json && isatty(2), NULL, &listing, &summary, &st) != CLI_OK) {
        br_pack_destroy(&p);
        json_decref(shares);
        return CLI_FAIL;
    }
    br_pack_destroy(&p);
    json_t *body = name_body(pos[1]);
    json_object_set_new(body, "listing", listing);
    json_object_set_new(body, "manifest", summary);
    json_object_set_new(body, "shares", shares);
    if (public_)
        json_object_set_new(body, "public", json_true());
    json_t *r = cli_call(cli, "data.push", body);
    if (!r)
        return CLI_FAIL;
    if (json) {
        json_object_set_new(r, "sent_files", json_integer(st.sent_files));
        json_object_set_new(r, "sent_bytes", json_integer(st.sent));
        cli_print_json(r);
    } else {
        char all[32], sent[32];
        printf("pushed %s:%s (version %lld): %lld files, %s; sent %lld files, %s\n",
               json_string_value(json_object_get(r, "name")),
               json_string_value(json_object_get(r, "tag")),
               (long long)json_integer_value(json_object_get(r, "version")),
               (long long)st.files, br_format_size((uint64_t)st.bytes, all, sizeof(all)),
               (long long)st.sent_files, br_format_size((uint64_t)st.sent, sent, sizeof(sent)));
    }
    json_decref(r);
    return CLI_OK;
}

static void data_row(cli_table_t *t, const json_t *d)
{
    char name[200], files[32], size[32], created[64], shared[300];
    snprintf(name, sizeof(name), "%s/%s", json_string_value(json_object_get(d, "owner")),
             json_string_value(json_object_get(d, "name")));
    snprintf(files, sizeof(files), "%lld", (long long)json_integer_value(json_object_get(d, "files")));
    cli_fmt_size(json_object_get(d, "bytes"), size, sizeof(size));
    cli_fmt_ago(json_object_get(d, "created"), created, sizeof(created));
    if (json_is_true(json_object_get(d, "public")))
        snprintf(shared, sizeof(shared), "everyone");
    else
        cli_fmt_list(json_object_get(d, "shares"), ",", shared, sizeof(shared));
    const char *cells[] = {name, json_string_value(json_object_get(d, "tag")), files, size,
                           created, shared};
    cli_table_add(t, cells);
}

static int list_run(cli_t *cli, int argc, char **argv)
{
    int json = 0;
    if (cli_args(cli, argc, argv, &json, 0, NULL, NULL) != CLI_OK)
        return CLI_USAGE;
    json_t *r = cli_call(cli, "data.list", NULL);
    if (!r)
        return CLI_FAIL;
    json_t *list = json_object_get(r, "data");
    if (!json && json_array_size(list) == 0)
        printf("no data sets (bramble data push DIR NAME makes one)\n");
    else {
        static const char *const head[] = {"NAME", "TAG", "FILES", "SIZE", "PUSHED", "SHARED"};
        cli_print_list(list, json, 6, head, data_row);
    }
    json_decref(r);
    return CLI_OK;
}

static int show_run(cli_t *cli, int argc, char **argv)
{
    static const char *const names[] = {"NAME[:TAG]"};
    const char *arg;
    int json = 0;
    if (cli_args(cli, argc, argv, &json, 1, names, &arg) != CLI_OK)
        return CLI_USAGE;
    json_t *r = cli_call(cli, "data.show", name_body(arg));
    if (!r)
        return CLI_FAIL;
    if (json) {
        cli_print_json(r);
        json_decref(r);
        return CLI_OK;
    }
    char buf[400];
    snprintf(buf, sizeof(buf), "%s/%s", json_string_value(json_object_get(r, "owner")),
             json_string_value(json_object_get(r, "name")));
    cli_field(10, "name:", buf);
    cli_field_json(10, r, "tag", "tag:");
    cli_field_json(10, r, "version", "version:");
    cli_field(10, "versions:", cli_fmt_list(json_object_get(r, "versions"), ", ", buf, sizeof(buf)));
    cli_field_json(10, r, "files", "files:");
    cli_field(10, "size:", cli_fmt_size(json_object_get(r, "bytes"), buf, sizeof(buf)));
    cli_field_time(10, r, "created", "pushed:");
    cli_field(10, "shared:", json_is_true(json_object_get(r, "public"))
                                 ? "everyone"
                                 : cli_fmt_list(json_object_get(r, "shares"), ", ", buf,
                                                sizeof(buf)));
    cli_field_json(10, r, "manifest", "manifest:");
    size_t i;
    json_t *e;
    if (json_array_size(json_object_get(r, "largest")))
        printf("largest files:\n");
    json_array_foreach(json_object_get(r, "largest"), i, e) {
        char sz[32];
        printf("  %10s  ", cli_fmt_size(json_object_get(e, "size"), sz, sizeof(sz)));
        const char *path = json_string_value(json_object_get(e, "path"));
        cli_put_text(stdout, path, strlen(path));
        putchar('\n');
    }
    json_decref(r);
    return CLI_OK;
}

static int rm_run(cli_t *cli, int argc, char **argv)
{
    static const char *const names[] = {"NAME[:TAG]"};
    const char *arg;
    int json = 0;
    if (cli_args(cli, argc, argv, &json, 1, names, &arg) != CLI_OK)
        return CLI_USAGE;
    json_t *r = cli_call(cli, "data.rm", name_body(arg));
    if (!r)
        return CLI_FAIL;
    if (json)
        cli_print_json(r);
    else {
        char tags[400];
        printf("removed %s: %s\n", json_string_value(json_object_get(r, "name")),
               cli_fmt_list(json_object_get(r, "removed"), ", ", tags, sizeof(tags)));
    }
    json_decref(r);
    return CLI_OK;
}

const cli_cmd_t cli_data_cmds[] = {
    {"data", "push", push_run, "DIR NAME[:TAG] [--share USER]... [--public] [--json]",
     "store a directory as a named data set (model weights, a corpus)",
     "Packs DIR as code is packed (docs/files.md: what git would list of it, less\n"
     "what .brambleignore leaves out; links that leave DIR, sockets and unreadable\n"
     "files are refused, named), hashes every file and sends the coordinator only\n"
     "the files it lacks: pushing a tree again sends nothing, and after a change\n"
     "only what changed. An upload cut off goes on from where it stopped when\n"
     "pushed again. Each push is a new version, named v1, v2, ...; TAG names it\n"
     "too, and a tag names one version for good. Jobs name it in their spec's\n"
     "data: {NAME[:TAG]: /mount/path}.\n"
     "\nOptions:\n"
     "  --share USER   let user USER use it too (again for more users)\n"
     "  --public       let every user use it\n"
     "  --json         print the data set (and sent_files, sent_bytes), no progress\n"},
    {"data", "list", list_run, "[--json]", "list the data sets you may use",
     "Yours, those shared with you and public ones (the admin: all), every version:\n"
     "NAME (OWNER/NAME) TAG FILES SIZE PUSHED SHARED.\n"
     "\nOptions:\n"
     "  --json   print an array of data sets\n"},
    {"data", "show", show_run, "NAME[:TAG] [--json]", "show a data set and its largest files",
     "NAME is yours, or OWNER/NAME another user's that you may use; without TAG,\n"
     "the newest version.\n"
     "\nOptions:\n"
     "  --json   print the data set as JSON\n"},
    {"data", "rm", rm_run, "NAME[:TAG] [--json]", "remove a data set (without TAG: every version)",
     "Removes the version TAG of your data set NAME, or every version of it; the\n"
     "store keeps a file while any other data set holds it. The admin may remove\n"
     "any user's (OWNER/NAME).\n"
     "\nOptions:\n"
     "  --json   print what was removed as JSON\n"},
    {0},
};
