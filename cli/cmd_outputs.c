/* cmd_outputs.c - bramble outputs JOB [--attempt N] [--json] DEST: the files an
 * attempt of a job left (its spec's outputs:, docs/files.md), fetched from the
 * coordinator's content store (content.read) and verified file by file against
 * their manifest. Each file arrives in NAME.bramble-part beside its place, is hashed
 * as it comes, and is renamed into place only when its hash matches; a file that is
 * there already with other bytes is not overwritten. A gang's nodes each left their
 * own: they go to DEST/NODE. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "manifest_check.h"
#include "util.h"

#define READ_TIMEOUT_MS 60000
#define PART ".bramble-part"

typedef struct {
    cli_t *cli;
    br_client_t *client;
    int64_t job;
    int64_t files, bytes, fetched;
} get_t;

/* size bytes of content hash into fd, or into mem when fd < 0 (hashed into hs); -1
 * after saying why. */
static int read_content(get_t *g, const char *hash, int64_t size, int fd, char *mem,
                        crypto_generichash_state *hs, const char *what)
{
    for (int64_t off = 0; off < size;) {
        br_msg_t *resp = NULL;
        br_err_t err;
        if (br_client_rpc(g->client, "content.read",
                          json_pack("{s:I, s:s, s:I}", "job", (json_int_t)g->job, "hash", hash,
                                    "offset", (json_int_t)off),
                          READ_TIMEOUT_MS, &resp, &err) < 0) {
            cli_err(g->cli, "%s: %s", what, err.text);
            return -1;
        }
        size_t len = 0;
        const void *data = br_msg_data(resp, &len);
        if (!len || (int64_t)len > size - off ||
            (fd >= 0 && write(fd, data, len) != (ssize_t)len)) {
            cli_err(g->cli, "%s: %s", what, !len || (int64_t)len > size - off
                                               ? "the coordinator sent another size"
                                               : strerror(errno));
            br_msg_destroy(&resp);
            return -1;
        }
        if (fd < 0)
            memcpy(mem + off, data, len);
        crypto_generichash_update(hs, data, len);
        off += (int64_t)len;
        g->fetched += (int64_t)len;
        br_msg_destroy(&resp);
    }
    return 0;
}

/* One node's outputs (row of job.show's outputs) into dir. */
static int fetch_tree(get_t *g, const json_t *row, const char *dir)
{
    const char *lhash = json_string_value(json_object_get(row, "listing"));
    int64_t lsize = json_integer_value(json_object_get(row, "listing_size"));
    if (lsize < 2 || lsize > BR_MANIFEST_LISTING_MAX)
        return cli_fail(g->cli, "the outputs' listing has a bad size");
    char *text = malloc((size_t)lsize + 1);
    crypto_generichash_state hs;
    crypto_generichash_init(&hs, NULL, 0, BR_MANIFEST_HASH_LEN);
    int rc = text ? read_content(g, lhash, lsize, -1, text, &hs, "the outputs' listing") : -1;
    if (rc < 0 || !br_manifest_hashes_to(&hs, lhash)) {
        free(text);
        return rc < 0 ? CLI_FAIL : cli_fail(g->cli, "the outputs' listing is damaged");
    }
    br_err_t err;
    json_t *summary = json_pack("{s:O, s:s, s:O, s:O}", "hash", json_object_get(row, "manifest"),
                                "root", "dir", "files", json_object_get(row, "files"),
                                "bytes", json_object_get(row, "bytes"));
    json_t *m = br_manifest_from_listing(summary, text, (size_t)lsize, &err);
    json_decref(summary);
    free(text);
    if (!m)
        return cli_fail(g->cli, "the outputs' manifest: %s", err.text);
    size_t i;
    json_t *e;
    rc = CLI_OK;
    json_array_foreach(json_object_get(m, "entries"), i, e) {
        const char *path = json_string_value(json_object_get(e, "path"));
        const char *hash = json_string_value(json_object_get(e, "hash"));
        int64_t size = json_integer_value(json_object_get(e, "size"));
        char to[PATH_MAX], part[PATH_MAX + 16], parent[PATH_MAX];
        if (!hash)
            continue; /* (outputs hold files only) */
        snprintf(to, sizeof(to), "%s/%s", dir, path);
        snprintf(part, sizeof(part), "%s%s", to, PART);
        snprintf(parent, sizeof(parent), "%s", to);
        *strrchr(parent, '/') = '\0';
        g->files++;
        g->bytes += size;
        if (br_manifest_file_holds(AT_FDCWD, to, size, hash))
            continue; /* there already */
        struct stat st;
        if (lstat(to, &st) == 0) {
            rc = cli_fail(g->cli, "%s is there already, with other bytes: not overwritten", to);
            break;
        }
        if (br_mkdir_p(parent, 0755, &err) < 0) {
            rc = cli_fail(g->cli, "%s", err.text);
            break;
        }
        int fd = open(part, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0) {
            rc = cli_fail(g->cli, "%s: %s", part, strerror(errno));
            break;
        }
        crypto_generichash_init(&hs, NULL, 0, BR_MANIFEST_HASH_LEN);
        int ok = read_content(g, hash, size, fd, NULL, &hs, path) == 0;
        if (ok && !br_manifest_hashes_to(&hs, hash)) {
            cli_err(g->cli, "%s: the bytes that came are not the file's (damaged)", path);
            ok = 0;
        }
        ok = ok && fchmod(fd, (mode_t)json_integer_value(json_object_get(e, "mode")) & 0777) == 0;
        close(fd);
        if (!ok || rename(part, to) < 0) {
            if (ok)
                cli_err(g->cli, "%s: %s", to, strerror(errno));
            unlink(part);
            rc = CLI_FAIL;
            break;
        }
    }
    json_decref(m);
    return rc;
}

static int outputs_run(cli_t *cli, int argc, char **argv)
{
    static const struct option opts[] = {{"attempt", required_argument, NULL, 'a'},
                                         {"json", no_argument, NULL, 'j'},
                                         {NULL, 0, NULL, 0}};
    int c, json = 0;
    long attempt = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
        char *end;
        if (c == 'a') {
            attempt = strtol(optarg, &end, 10);
            if (*end || attempt < 1)
                return cli_usage(cli, "--attempt %s: an attempt number, 1 or more", optarg);
        } else if (c == 'j')
            json = 1;
        else
            return cli_bad_option(cli, c, argv);
    }
    static const char *const names[] = {"JOB", "DEST"};
    const char *pos[2];
    if (cli_positional(cli, argc, argv, 2, names, pos) != CLI_OK)
        return CLI_USAGE;
    get_t g = {.cli = cli};
    if (cli_job_id(cli, pos[0], &g.job) != CLI_OK)
        return CLI_USAGE;
    json_t *r = cli_call(cli, "job.show", json_pack("{s:I}", "id", (json_int_t)g.job));
    if (!r)
        return CLI_FAIL;
    json_t *outs = json_object_get(json_object_get(r, "job"), "outputs"), *o, *rows = json_array();
    size_t i;
    json_int_t last = 0; /* the attempt asked for, else the last that left any */
    json_array_foreach(outs, i, o)
        if (json_integer_value(json_object_get(o, "attempt")) > last)
            last = json_integer_value(json_object_get(o, "attempt"));
    json_int_t want = attempt ? attempt : last;
    json_array_foreach(outs, i, o)
        if (json_integer_value(json_object_get(o, "attempt")) == want)
            json_array_append(rows, o);
    int rc = CLI_OK;
    if (!json_array_size(rows))
        rc = attempt ? cli_fail(cli, "job %lld's attempt %ld left no outputs",
                                (long long)g.job, attempt)
                     : cli_fail(cli, "job %lld left no outputs (its spec's outputs: names "
                                     "what to keep)", (long long)g.job);
    if (rc == CLI_OK && !(g.client = cli_client(cli)))
        rc = CLI_FAIL;
    br_err_t err;
    if (rc == CLI_OK && br_mkdir_p(pos[1], 0755, &err) < 0)
        rc = cli_fail(cli, "%s", err.text);
    json_t *nodes = json_array();
    json_array_foreach(rows, i, o) {
        if (rc != CLI_OK)
            break;
        const char *node = json_string_value(json_object_get(o, "node"));
        char dir[PATH_MAX];
        if (json_array_size(rows) > 1) /* a gang: each node's own */
            snprintf(dir, sizeof(dir), "%s/%s", pos[1], node);
        else
            snprintf(dir, sizeof(dir), "%s", pos[1]);
        rc = fetch_tree(&g, o, dir);
        json_array_append_new(nodes, json_string(node));
    }
    if (rc == CLI_OK && json) {
        json_t *out = json_pack("{s:I, s:I, s:s, s:O, s:I, s:I, s:I}", "job", (json_int_t)g.job,
                                "attempt", want, "dest", pos[1], "nodes", nodes, "files",
                                (json_int_t)g.files, "bytes", (json_int_t)g.bytes, "fetched",
                                (json_int_t)g.fetched);
        cli_print_json(out);
        json_decref(out);
    } else if (rc == CLI_OK) {
        char sz[32], names_txt[400];
        printf("fetched the outputs of job %lld attempt %lld (%s) into %s: %lld files, %s, "
               "verified\n",
               (long long)g.job, (long long)want,
               cli_fmt_list(nodes, ", ", names_txt, sizeof(names_txt)), pos[1],
               (long long)g.files, br_format_size((uint64_t)g.bytes, sz, sizeof(sz)));
    }
    json_decref(nodes);
    json_decref(rows);
    json_decref(r);
    return rc;
}

const cli_cmd_t cli_outputs_cmds[] = {
    {NULL, "outputs", outputs_run, "JOB [--attempt N] [--json] DEST",
     "fetch the files a job's attempt left (its spec's outputs:)",
     "Fetches what the job's last attempt that left outputs (--attempt N: attempt\n"
     "N) kept at its end, failed attempts too, from the coordinator's store into\n"
     "DEST (made when missing; a gang's nodes each into DEST/NODE). Every file is\n"
     "verified against its hash before it is renamed into place; a file that is\n"
     "there with the same bytes is left alone, one with other bytes is not\n"
     "overwritten. docs/files.md, \"Outputs\".\n"
     "\nOptions:\n"
     "  --attempt N   that attempt's outputs\n"
     "  --json        print {\"job\", \"attempt\", \"dest\", \"nodes\", \"files\", \"bytes\",\n"
     "                \"fetched\"}\n"},
    {0},
};
