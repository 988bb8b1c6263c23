/* cmd_image.c - bramble image load|list|rm: images kept by the coordinator for
 * clusters without a registry (docs/containers.md). An archive (`podman save`'s
 * docker-archive or oci-archive) is checked here first (ociarchive.h), then sent
 * the way a data set is, only what the store lacks, as a one-file tree. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "ociarchive.h"
#include "pack.h"
#include "sendtree.h"
#include "spec.h"
#include "util.h"

static int load_run(cli_t *cli, int argc, char **argv)
{
    static const char *const names[] = {"FILE", "NAME"};
    const char *pos[2];
    int json = 0;
    if (cli_args(cli, argc, argv, &json, 2, names, pos) != CLI_OK)
        return CLI_USAGE;
    if (!br_spec_image_ok(pos[1]) || strchr(pos[1], '@'))
        return cli_usage(cli, "NAME: '%s' is not an image name (letters, digits and . _ / : "
                              "- only, at most %d, not starting with '-')",
                         pos[1], BR_SPEC_IMAGE_MAX);
    br_err_t err;
    br_ociarchive_t a;
    if (br_ociarchive_read(pos[0], &a, &err) < 0)
        return cli_fail(cli, "%s", err.text);
    br_pack_t *p = br_pack_new(NULL, &err);
    if (!p || br_pack_file(p, pos[0], BR_IMAGE_ARCHIVE, &err) < 0 ||
        !br_pack_manifest(p, &err)) {
        br_pack_destroy(&p);
        return cli_fail(cli, "%s", err.text);
    }
    json_t *listing, *summary;
    cli_upload_t st;
    if (cli_upload(cli, p, !json && isatty(2), NULL, &listing, &summary, &st) != CLI_OK) {
        br_pack_destroy(&p);
        return CLI_FAIL;
    }
    br_pack_destroy(&p);
    json_t *r = cli_call(cli, "image.load", json_pack("{s:s, s:o, s:o}", "name", pos[1],
                                                      "listing", listing, "manifest",
                                                      summary));
    if (!r)
        return CLI_FAIL;
    if (json) {
        json_object_set_new(r, "sent_bytes", json_integer(st.sent));
        cli_print_json(r);
    } else {
        char size[32], sent[32];
        const char *variant = json_string_value(json_object_get(r, "variant"));
        printf("loaded %s (%s%s%s, %s, id %.12s): %s; sent %s\n",
               json_string_value(json_object_get(r, "name")),
               json_string_value(json_object_get(r, "arch")),
               variant && *variant ? "/" : "", variant ? variant : "",
               json_string_value(json_object_get(r, "format")),
               json_string_value(json_object_get(r, "image_id")),
               br_format_size((uint64_t)a.bytes, size, sizeof(size)),
               br_format_size((uint64_t)st.sent, sent, sizeof(sent)));
    }
    json_decref(r);
    return CLI_OK;
}

static void image_row(cli_table_t *t, const json_t *r)
{
    char arch[64], size[32], created[64], id[16];
    const char *variant = json_string_value(json_object_get(r, "variant"));
    snprintf(arch, sizeof(arch), "%s%s%s", json_string_value(json_object_get(r, "arch")),
             variant && *variant ? "/" : "", variant ? variant : "");
    cli_fmt_size(json_object_get(r, "bytes"), size, sizeof(size));
    cli_fmt_ago(json_object_get(r, "created"), created, sizeof(created));
    snprintf(id, sizeof(id), "%.12s", json_string_value(json_object_get(r, "image_id")));
    const char *cells[] = {json_string_value(json_object_get(r, "name")), arch, size, id,
                           created, json_string_value(json_object_get(r, "owner"))};
    cli_table_add(t, cells);
}

static int list_run(cli_t *cli, int argc, char **argv)
{
    int json = 0;
    if (cli_args(cli, argc, argv, &json, 0, NULL, NULL) != CLI_OK)
        return CLI_USAGE;
    json_t *r = cli_call(cli, "image.list", NULL);
    if (!r)
        return CLI_FAIL;
    json_t *list = json_object_get(r, "images");
    if (!json && json_array_size(list) == 0)
        printf("no images loaded (bramble image load FILE NAME loads one)\n");
    else {
        static const char *const head[] = {"NAME", "ARCH", "SIZE", "ID", "LOADED", "BY"};
        cli_print_list(list, json, 6, head, image_row);
    }
    json_decref(r);
    return CLI_OK;
}

static int rm_run(cli_t *cli, int argc, char **argv)
{
    static const struct option opts[] = {{"arch", required_argument, NULL, 'a'},
                                         {"json", no_argument, NULL, 'j'},
                                         {NULL, 0, NULL, 0}};
    const char *arch = NULL;
    int c, json = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
        if (c == 'a')
            arch = optarg;
        else if (c == 'j')
            json = 1;
        else
            return cli_bad_option(cli, c, argv);
    }
    static const char *const names[] = {"NAME"};
    const char *name;
    if (cli_positional(cli, argc, argv, 1, names, &name) != CLI_OK)
        return CLI_USAGE;
    json_t *body = json_pack("{s:s}", "name", name);
    if (arch)
        json_object_set_new(body, "arch", json_string(arch));
    json_t *r = cli_call(cli, "image.rm", body);
    if (!r)
        return CLI_FAIL;
    if (json)
        cli_print_json(r);
    else {
        char archs[200];
        printf("removed %s: %s\n", json_string_value(json_object_get(r, "name")),
               cli_fmt_list(json_object_get(r, "removed"), ", ", archs, sizeof(archs)));
    }
    json_decref(r);
    return CLI_OK;
}

const cli_cmd_t cli_image_cmds[] = {
    {"image", "load", load_run, "FILE NAME [--json]",
     "keep an image archive for the cluster's nodes (no registry needed)",
     "FILE is an archive as `podman save` (or `docker save`) writes it:\n"
     "docker-archive or oci-archive, one image for one architecture. It is checked\n"
     "whole here and again by the coordinator (an archive cut short, or one that is\n"
     "not an image, is refused and nothing is kept), then sent as a data set is:\n"
     "only what the coordinator lacks. A job whose spec says image: NAME runs from\n"
     "it: each node it lands on fetches the archive from the nearest node that has\n"
     "it (else the coordinator) and loads it into podman. Load one archive per\n"
     "architecture under the same NAME and the job goes to nodes of any of them,\n"
     "each running its own; with one, only to nodes of that architecture. NAME\n"
     "without a tag is NAME:latest.\n"
     "\nOptions:\n"
     "  --json   print the image as JSON\n"},
    {"image", "list", list_run, "[--json]", "list the images loaded",
     "Every image loaded, one line per architecture: NAME ARCH SIZE ID (podman's)\n"
     "LOADED BY.\n"
     "\nOptions:\n"
     "  --json   print an array of images\n"},
    {"image", "rm", rm_run, "NAME [--arch ARCH] [--json]",
     "remove a loaded image (every architecture, or ARCH's)",
     "Removes what `image load` kept under NAME; nodes drop their copies of the\n"
     "archive as their cache needs room. Refused while a job that runs from it is\n"
     "not over. Its loader or the admin may remove it.\n"
     "\nOptions:\n"
     "  --arch ARCH   only the image for ARCH (amd64, arm64, ...)\n"
     "  --json        print what was removed as JSON\n"},
    {0},
};
