/* test_ociarchive.c - unit tests for proto/ociarchive.c: image archives written here
 * header by header (docker-archive and oci-archive as `podman save` writes them),
 * good ones and ones cut short at every byte, damaged, holding two images or an
 * index, missing a layer, with a config that does not match its digest; names
 * through GNU long names and pax records; and the machine/architecture tables. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "err.h"
#include "ociarchive.h"
#include "util.h"

static char dir[64];  /* the scratch directory, made once */
static char arc[128]; /* the archive each test writes */

static void hex_of(const void *b, size_t n, char out[65])
{
    unsigned char h[crypto_hash_sha256_BYTES];
    crypto_hash_sha256(h, b, n);
    sodium_bin2hex(out, 65, h, sizeof(h));
}

/* ---- writing tar files ---- */

enum how {
    PLAIN,
    LONGNAME, /* the name through a GNU 'L' header */
    PAXPATH,  /* the name through a pax 'x' path record */
    PAXSIZE,  /* the size through a pax 'x' size record (the header says 0) */
    BASE256,  /* the size in GNU's base-256 form */
};

struct ent {
    const char *name;
    char type;        /* '0', '2' (link), '5' (directory) */
    const char *data; /* contents, or a link's target */
    size_t len;       /* 0: strlen(data) */
    enum how how;
};

static void header(FILE *f, const char *name, char type, const char *link,
                   uint64_t size, int base256)
{
    unsigned char h[512] = {0};
    snprintf((char *)h, 100, "%s", name);
    memcpy(h + 100, "0000644", 8);
    memcpy(h + 108, "0000000", 8);
    memcpy(h + 116, "0000000", 8);
    if (base256) {
        h[124] = 0x80;
        for (int i = 11; i >= 1; i--, size >>= 8)
            h[124 + i] = (unsigned char)(size & 0xff);
    } else {
        snprintf((char *)h + 124, 12, "%011llo", (unsigned long long)size);
    }
    memcpy(h + 136, "00000000000", 12);
    h[156] = (unsigned char)type;
    if (link)
        snprintf((char *)h + 157, 100, "%s", link);
    memcpy(h + 257,
           "ustar\0"
           "00",
           8);
    memset(h + 148, ' ', 8);
    unsigned sum = 0;
    for (int i = 0; i < 512; i++)
        sum += h[i];
    snprintf((char *)h + 148, 8, "%06o", sum);
    assert_int_equal(fwrite(h, 1, 512, f), 512);
}

static void data(FILE *f, const void *b, size_t n)
{
    static const char zero[512];
    assert_int_equal(fwrite(b, 1, n, f), n);
    if (n % 512)
        assert_int_equal(fwrite(zero, 1, 512 - n % 512, f), 512 - n % 512);
}

static void entry(FILE *f, const struct ent *e)
{
    int link = e->type == '2';
    size_t len = link ? 0 : e->len ? e->len : e->data ? strlen(e->data) : 0;
    const char *name = e->name;
    char rec[5000];
    if (e->how == LONGNAME) {
        header(f, "././@LongLink", 'L', NULL, strlen(name) + 1, 0);
        data(f, name, strlen(name) + 1);
        name = "truncated-name-in-the-header";
    } else if (e->how == PAXPATH || e->how == PAXSIZE) {
        char body[4900];
        if (e->how == PAXPATH)
            snprintf(body, sizeof(body), "path=%s\n", name);
        else
            snprintf(body, sizeof(body), "size=%zu\n", len);
        size_t n = strlen(body) + 3; /* "NN " */
        if (n >= 100)
            n++;
        if (n >= 1000)
            n++;
        snprintf(rec, sizeof(rec), "%zu %s", n, body);
        assert_int_equal(strlen(rec), n);
        header(f, "PaxHeaders.0/x", 'x', NULL, n, 0);
        data(f, rec, n);
        if (e->how == PAXPATH)
            name = "PaxHeaders.0/not-this-name";
    }
    header(f, name, e->type, link ? e->data : NULL, e->how == PAXSIZE ? 0 : len,
           e->how == BASE256);
    if (len)
        data(f, e->data, len);
}

/* Write entries to arc, then ends all-zero blocks. */
static void write_tar(const struct ent *e, size_t n, int ends)
{
    static const char zero[512];
    FILE *f = fopen(arc, "w");
    assert_non_null(f);
    for (size_t i = 0; i < n; i++)
        entry(f, &e[i]);
    for (int i = 0; i < ends; i++)
        assert_int_equal(fwrite(zero, 1, 512, f), 512);
    assert_int_equal(fclose(f), 0);
}

/* ---- the images ---- */

/* Two layers' bytes (the layers are never read: any bytes do). */
static char layer1[700], layer2[1536];

static const char *cfg_arm =
    "{\"architecture\":\"arm\",\"variant\":\"v7\",\"os\":\"linux\",\"config\":{},"
    "\"rootfs\":{\"type\":\"layers\",\"diff_ids\":[]}}";
static const char *cfg_arm64 =
    "{\"created\":\"2024-01-01T00:00:00Z\",\"architecture\":\"arm64\",\"os\":"
    "\"linux\"}";

enum {
    D_TWO = 1 << 0,     /* manifest.json lists two images */
    D_MISSING = 1 << 1, /* a layer it names is not there */
    D_BADNAME = 1 << 2, /* the config is named by another digest */
    D_LONG = 1 << 3,    /* a layer's name is a GNU long name */
    D_PAX = 1 << 4,     /* the config is named by a pax path: blobs/sha256/HEX */
    D_SIZES = 1 << 5,   /* sizes by pax record and base-256 */
    D_DUP = 1 << 6,     /* manifest.json twice */
    D_NOARCH = 1 << 7,  /* the config has no architecture */
    D_NOTOBJ = 1 << 8,  /* the config is a JSON list */
    D_DAMAGE = 1 << 9,  /* a header's checksum is wrong */
    D_ONEEND = 1 << 10, /* one end-of-archive block, not two */
};

#define LONGLAYER                                                             \
    "a-layer-whose-name-is-longer-than-a-ustar-header-holds/0123456789abcdef" \
    "0123456789abcdef0123456789abcdef0123456789abcdef/layer.tar"

/* A docker-archive as podman writes it, the config's bytes in *cfg. */
static void docker(unsigned flags, const char **cfg)
{
    char hex[65], cfgname[128], man[2048], layers[512];
    const char *c = flags & D_NOARCH   ? "{\"os\":\"linux\"}"
                    : flags & D_NOTOBJ ? "[\"architecture\",\"os\"]"
                                       : cfg_arm;
    hex_of(c, strlen(c), hex);
    if (flags & D_BADNAME)
        hex[0] = hex[0] == 'a' ? 'b' : 'a';
    if (flags & D_PAX)
        snprintf(cfgname, sizeof(cfgname), "blobs/sha256/%s", hex);
    else
        snprintf(cfgname, sizeof(cfgname), "%s.json", hex);
    snprintf(layers, sizeof(layers), "\"l1.tar\",\"%s\"%s",
             flags & D_LONG ? LONGLAYER : "abc/layer.tar",
             flags & D_MISSING ? ",\"nope.tar\"" : "");
    snprintf(man, sizeof(man),
             "[{\"Config\":\"%s\",\"RepoTags\":[\"localhost/t:1\"],\"Layers\":[%s]}%s]",
             cfgname, layers,
             flags & D_TWO ? ",{\"Config\":\"x.json\",\"Layers\":[]}" : "");
    struct ent e[] = {
        {"l1.tar", '0', layer1, sizeof(layer1), flags & D_SIZES ? BASE256 : PLAIN},
        {"l2.tar", '0', layer2, sizeof(layer2), flags & D_SIZES ? PAXSIZE : PLAIN},
        {cfgname, '0', c, 0, flags & D_PAX ? PAXPATH : PLAIN},
        {"abc/", '5', NULL, 0, PLAIN},
        {flags & D_LONG ? LONGLAYER : "abc/layer.tar", flags & D_LONG ? '0' : '2',
         flags & D_LONG ? "long" : "../l2.tar", 0, flags & D_LONG ? LONGNAME : PLAIN},
        {"abc/VERSION", '0', "1.0", 0, PLAIN},
        {"manifest.json", '0', man, 0, PLAIN},
        {"repositories", '0', "{\"localhost/t\":{\"1\":\"abc\"}}", 0, PLAIN},
        {"manifest.json", '0', "[]", 0, PLAIN},
    };
    write_tar(e, sizeof(e) / sizeof(*e) - !(flags & D_DUP), flags & D_ONEEND ? 1 : 2);
    if (flags & D_DAMAGE) { /* the third header: after l1.tar's and l2.tar's */
        FILE *f = fopen(arc, "r+");
        assert_non_null(f);
        assert_int_equal(fseek(f, 512 + 1024 + 512 + 1536 + 10, SEEK_SET), 0);
        fputc('#', f);
        assert_int_equal(fclose(f), 0);
    }
    if (cfg)
        *cfg = c;
}

enum {
    O_TWO = 1 << 0,      /* index.json lists two manifests */
    O_NESTED = 1 << 1,   /* the manifest it names is an index */
    O_MISSING = 1 << 2,  /* a layer's blob is not there */
    O_MISMATCH = 1 << 3, /* the config's bytes do not hash to its digest */
    O_SIZE = 1 << 4,     /* a layer's size is not its descriptor's */
    O_NOLAYOUT = 1 << 5, /* no oci-layout */
    O_DOTS = 1 << 6,     /* every name begins "./" (tar -C dir -c .) */
};

/* An oci-archive as podman writes it; the config's digest in cfghex. */
static void oci(unsigned flags, char cfghex[65])
{
    char lhex[65], mhex[65], chex[65], other[65], man[1024], idx[1024];
    char n_l[128], n_c[128], n_m[128];
    const char *c = cfg_arm64;
    const char *p = flags & O_DOTS ? "./" : "";
    hex_of(layer1, sizeof(layer1), lhex);
    hex_of(c, strlen(c), chex);
    hex_of("other", 5, other);
    const char *cname = flags & O_MISMATCH ? other : chex;
    snprintf(man, sizeof(man),
             "{\"schemaVersion\":2,\"mediaType\":\"%s\",\"config\":{\"mediaType\":"
             "\"application/vnd.oci.image.config.v1+json\",\"digest\":\"sha256:%s\","
             "\"size\":%zu},\"layers\":[{\"mediaType\":\"application/vnd.oci.image."
             "layer.v1.tar+gzip\",\"digest\":\"sha256:%s\",\"size\":%zu}]%s}",
             flags & O_NESTED ? "application/vnd.oci.image.index.v1+json"
                              : "application/vnd.oci.image.manifest.v1+json",
             cname, strlen(c), lhex, sizeof(layer1) + !!(flags & O_SIZE),
             flags & O_NESTED ? ",\"manifests\":[{},{},{}]" : "");
    hex_of(man, strlen(man), mhex);
    const char *d =
        "{\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\","
        "\"digest\":\"sha256:%s\",\"size\":%zu}";
    char d1[512];
    snprintf(d1, sizeof(d1), d, mhex, strlen(man));
    snprintf(idx, sizeof(idx), "{\"schemaVersion\":2,\"manifests\":[%s%s%s]}", d1,
             flags & O_TWO ? "," : "", flags & O_TWO ? d1 : "");
    snprintf(n_l, sizeof(n_l), "%sblobs/sha256/%s", p, lhex);
    snprintf(n_c, sizeof(n_c), "%sblobs/sha256/%s", p, cname);
    snprintf(n_m, sizeof(n_m), "%sblobs/sha256/%s", p, mhex);
    char n_b[16], n_s[32], n_i[32], n_o[32];
    snprintf(n_b, sizeof(n_b), "%sblobs/", p);
    snprintf(n_s, sizeof(n_s), "%sblobs/sha256/", p);
    snprintf(n_i, sizeof(n_i), "%sindex.json", p);
    snprintf(n_o, sizeof(n_o), "%soci-layout", p);
    struct ent e[] = {
        {n_b, '5', NULL, 0, PLAIN},
        {n_s, '5', NULL, 0, PLAIN},
        {n_l, '0', layer1, sizeof(layer1), PLAIN},
        {n_c, '0', c, 0, PLAIN},
        {n_m, '0', man, 0, PLAIN},
        {n_i, '0', idx, 0, PLAIN},
        {n_o, '0', "{\"imageLayoutVersion\": \"1.0.0\"}", 0, PLAIN},
    };
    struct ent kept[7];
    size_t n = 0;
    for (size_t i = 0; i < 7; i++)
        if (!(i == 2 && (flags & O_MISSING)) && !(i == 6 && (flags & O_NOLAYOUT)))
            kept[n++] = e[i];
    write_tar(kept, n, 2);
    if (cfghex)
        memcpy(cfghex, chex, 65);
}

/* ---- checks ---- */

/* br_ociarchive_read refuses arc with words holding want and arc's name. */
static void refused(const char *want)
{
    br_ociarchive_t o;
    br_err_t err = {0};
    int rc = br_ociarchive_read(arc, &o, &err);
    if (rc == 0 || !strstr(err.text, want) || !strstr(err.text, arc))
        fail_msg("wanted a refusal with '%s', got %d '%s'", want, rc, err.text);
    assert_int_equal(err.errnum, EINVAL);
    assert_string_equal(o.id, "");
}

static void read_ok(br_ociarchive_t *o)
{
    br_err_t err = {0};
    if (br_ociarchive_read(arc, o, &err) < 0)
        fail_msg("%s", err.text);
    struct stat st;
    assert_int_equal(stat(arc, &st), 0);
    assert_int_equal(o->bytes, st.st_size);
}

static void test_docker_archive(void **state)
{
    (void)state;
    const char *cfg;
    char hex[65];
    br_ociarchive_t o;
    docker(0, &cfg);
    read_ok(&o);
    hex_of(cfg, strlen(cfg), hex);
    assert_string_equal(o.format, "docker-archive");
    assert_string_equal(o.id, hex);
    assert_string_equal(o.arch, "arm");
    assert_string_equal(o.variant, "v7");
    assert_string_equal(o.os, "linux");
    assert_int_equal(o.layers, 2);
    assert_int_equal(o.layer_bytes, sizeof(layer1) + sizeof(layer2)); /* via the link */

    docker(D_ONEEND, NULL); /* one end block, as some writers leave */
    read_ok(&o);
    assert_string_equal(o.id, hex);
}

static void test_oci_archive(void **state)
{
    (void)state;
    char hex[65];
    br_ociarchive_t o;
    for (unsigned dots = 0; dots <= O_DOTS; dots += O_DOTS) {
        oci(dots, hex);
        read_ok(&o);
        assert_string_equal(o.format, "oci-archive");
        assert_string_equal(o.id, hex);
        assert_string_equal(o.arch, "arm64");
        assert_string_equal(o.variant, "");
        assert_string_equal(o.os, "linux");
        assert_int_equal(o.layers, 1);
        assert_int_equal(o.layer_bytes, sizeof(layer1));
    }
}

static void test_not_a_tar(void **state)
{
    (void)state;
    char text[2000];
    memset(text, 'x', sizeof(text));
    assert_int_equal(br_write_file(arc, text, sizeof(text), 0644, NULL), 0);
    refused("is not an image archive (not a tar file)");
    assert_int_equal(br_write_file(arc, "", 0, 0644, NULL), 0);
    refused("is not an image archive (not a tar file)");
    char zero[1024] = {0}; /* an empty tar: no manifest */
    assert_int_equal(br_write_file(arc, zero, sizeof(zero), 0644, NULL), 0);
    refused("no manifest.json (docker-archive) nor index.json (oci-archive)");

    br_ociarchive_t o;
    br_err_t err = {0};
    assert_int_equal(br_ociarchive_read(dir, &o, &err), -1);
    assert_non_null(strstr(err.text, "not a file"));
    char gone[160];
    snprintf(gone, sizeof(gone), "%s/gone.tar", dir);
    assert_int_equal(br_ociarchive_read(gone, &o, &err), -1);
    assert_int_equal(err.errnum, ENOENT);
    assert_non_null(strstr(err.text, gone));
}

static void test_no_manifest(void **state)
{
    (void)state;
    struct ent e[] = {{"foo.txt", '0', "hello", 0, PLAIN},
                      {"etc/", '5', NULL, 0, PLAIN}};
    write_tar(e, 2, 2);
    refused(
        "is not an image archive: no manifest.json (docker-archive) nor "
        "index.json (oci-archive)");
    oci(O_NOLAYOUT, NULL);
    refused("index.json but no oci-layout");
}

/* Every cut of the archive just written short of its last end block is refused
 * as cut short (or, under one header, as no tar); what keeps one block passes. */
static void every_cut(void)
{
    size_t n = 0;
    br_err_t err = {0};
    char *full = br_read_file(arc, 1 << 20, &n, &err);
    assert_non_null(full);
    int ends = 0, mid = 0;
    for (size_t len = 0; len <= n; len++) {
        assert_int_equal(br_write_file(arc, full, len, 0644, NULL), 0);
        br_ociarchive_t o;
        int rc = br_ociarchive_read(arc, &o, &err);
        if (len >= n - 512) {
            if (rc < 0)
                fail_msg("cut at %zu of %zu: %s", len, n, err.text);
            continue;
        }
        if (rc == 0 || !(strstr(err.text, "cut short") ||
                         (len < 512 && strstr(err.text, "(not a tar file)"))))
            fail_msg("cut at %zu of %zu: %d '%s'", len, n, rc, err.text);
        ends += strstr(err.text, "no end-of-archive blocks") != NULL;
        mid += strstr(err.text, " ends at byte ") != NULL;
    }
    /* at the end of the last entry, and between entries */
    assert_int_equal(br_write_file(arc, full, n - 1024, 0644, NULL), 0);
    refused("is cut short: no end-of-archive blocks");
    assert_true(ends >= 3);
    assert_true(mid > 100);
    free(full);
}

static void test_cut_short(void **state)
{
    (void)state;
    docker(D_LONG | D_PAX | D_SIZES, NULL);
    every_cut();
    oci(0, NULL);
    every_cut();

    docker(0, NULL); /* the words for a cut inside an entry */
    struct stat st;
    assert_int_equal(stat(arc, &st), 0);
    assert_int_equal(truncate(arc, 512 + 100), 0);
    refused("is cut short: l1.tar ends at byte 1536 of 612");
    docker(0, NULL);
    assert_int_equal(truncate(arc, st.st_size - 1024 - 3), 0); /* in its padding */
    char want[128];
    snprintf(want, sizeof(want), "is cut short: repositories ends at byte %lld of %lld",
             (long long)st.st_size - 1024, (long long)st.st_size - 1027);
    refused(want);
}

static void test_two_images(void **state)
{
    (void)state;
    docker(D_TWO, NULL);
    refused(" holds 2 images: save one image per archive");
    oci(O_TWO, NULL);
    refused(
        " holds 2 images (an index of several architectures?): save one image "
        "per archive");
    oci(O_NESTED, NULL);
    refused(" holds 3 images (an index of several architectures?)");
}

static void test_missing_layer(void **state)
{
    (void)state;
    docker(D_MISSING, NULL);
    refused(": layer nope.tar named by its manifest is missing");
    oci(O_MISSING, NULL);
    refused(" named by its manifest is missing");
    refused(": layer blobs/sha256/");
    oci(O_SIZE, NULL);
    refused("its descriptor says 701");

    /* a directory named as a layer, marked as v7 tars do: by its name alone */
    const char *cfg = "{\"architecture\":\"amd64\",\"os\":\"linux\"}";
    struct ent e[] = {
        {"c.json", '0', cfg, 0, PLAIN},
        {"d/", '\0', NULL, 0, PLAIN},
        {"manifest.json", '0', "[{\"Config\":\"c.json\",\"Layers\":[\"d\"]}]", 0,
         PLAIN},
    };
    write_tar(e, 3, 2);
    refused(": layer d named by its manifest is not a file");
}

static void test_config_digest(void **state)
{
    (void)state;
    oci(O_MISMATCH, NULL);
    refused(": its config does not match its digest");
    docker(D_BADNAME, NULL);
    refused(": its config does not match its digest");
    docker(D_NOARCH, NULL);
    refused(": its config's \"architecture\" is missing");
    docker(D_NOTOBJ, NULL);
    refused("is not a JSON object");
}

static void test_long_names(void **state)
{
    (void)state;
    const char *cfg;
    char hex[65];
    br_ociarchive_t o;
    docker(D_LONG | D_PAX | D_SIZES, &cfg); /* also sizes by pax and base-256 */
    read_ok(&o);
    hex_of(cfg, strlen(cfg), hex);
    assert_string_equal(o.id, hex);
    assert_int_equal(o.layers, 2);
    assert_int_equal(o.layer_bytes, sizeof(layer1) + 4); /* LONGLAYER holds "long" */

    docker(D_LONG, NULL);       /* without the 'L' header, the name is not found */
    FILE *f = fopen(arc, "r+"); /* turn the 'L' header into a plain file */
    assert_non_null(f);
    long at = 512 + 1024 + 512 + 1536 + 512 + 512 + 512; /* l1, l2, cfg, abc/ */
    unsigned char h[512];
    assert_int_equal(fseek(f, at, SEEK_SET), 0);
    assert_int_equal(fread(h, 1, 512, f), 512);
    assert_string_equal((char *)h, "././@LongLink");
    h[156] = '0';
    memset(h + 148, ' ', 8);
    unsigned sum = 0;
    for (int i = 0; i < 512; i++)
        sum += h[i];
    snprintf((char *)h + 148, 8, "%06o", sum);
    assert_int_equal(fseek(f, at, SEEK_SET), 0);
    assert_int_equal(fwrite(h, 1, 512, f), 512);
    assert_int_equal(fclose(f), 0);
    refused(": layer " LONGLAYER " named by its manifest is missing");
}

static void test_damaged(void **state)
{
    (void)state;
    docker(D_DAMAGE, NULL);
    refused(" is damaged at byte 3584 (not a tar header)");
    docker(D_DUP, NULL);
    refused("two entries are called manifest.json");

    char *big = malloc(5 << 20); /* a manifest.json over 4 MiB */
    assert_non_null(big);
    memset(big, ' ', 5 << 20);
    big[0] = '[';
    big[(5 << 20) - 1] = ']';
    struct ent e[] = {{"manifest.json", '0', big, 5 << 20, PLAIN}};
    write_tar(e, 1, 2);
    free(big);
    refused(": manifest.json is too large for an image's manifest");
}

static void test_arch_of_machine(void **state)
{
    (void)state;
    const char *t[][2] = {
        {"x86_64", "amd64"},
        {"aarch64", "arm64"},
        {"arm64", "arm64"},
        {"armv7l", "arm"},
        {"armv6l", "arm"},
        {"riscv64", "riscv64"},
        {"ppc64le", "ppc64le"},
        {"s390x", "s390x"},
        {"i686", "386"},
        {"sparc64", "sparc64"},
        {"", ""},
    };
    for (size_t i = 0; i < sizeof(t) / sizeof(*t); i++)
        assert_string_equal(br_ociarchive_arch_of_machine(t[i][0]), t[i][1]);
}

static void test_runs_on(void **state)
{
    (void)state;
    struct {
        const char *arch, *variant, *machine;
        int runs;
    } t[] = {
        {"amd64", "", "x86_64", 1},    {"amd64", "v3", "x86_64", 1},
        {"amd64", "", "aarch64", 0},   {"arm64", "", "aarch64", 1},
        {"arm64", "v8", "aarch64", 1}, {"arm64", NULL, "arm64", 1},
        {"arm64", "v8", "x86_64", 0},  {"arm", "", "armv7l", 1},
        {"arm", "v7", "armv7l", 1},    {"arm", "v6", "armv7l", 1},
        {"arm", "v6", "armv6l", 1},    {"arm", "", "armv6l", 1},
        {"arm", "v7", "armv6l", 0},    {"arm", "v8", "armv7l", 0},
        {"arm", "v7", "aarch64", 0},   {"arm", "v7x", "armv7l", 0},
        {"riscv64", "", "riscv64", 1}, {"386", "", "i686", 1},
        {"386", "", "x86_64", 0},      {"ppc64le", "", "ppc64le", 1},
        {"s390x", "", "s390x", 1},     {"sparc64", "", "sparc64", 1},
        {"amd64", "", "", 0},
    };
    for (size_t i = 0; i < sizeof(t) / sizeof(*t); i++)
        if (br_ociarchive_runs_on(t[i].arch, t[i].variant, t[i].machine) != t[i].runs)
            fail_msg("%s/%s on %s: wanted %d", t[i].arch, t[i].variant, t[i].machine,
                     t[i].runs);
}

static int setup(void **state)
{
    (void)state;
    if (sodium_init() < 0)
        return -1;
    for (size_t i = 0; i < sizeof(layer1); i++)
        layer1[i] = (char)(i * 7);
    for (size_t i = 0; i < sizeof(layer2); i++)
        layer2[i] = (char)(i * 13 + 1);
    snprintf(dir, sizeof(dir), "/tmp/test_ociarchive.XXXXXX");
    if (!mkdtemp(dir))
        return -1;
    snprintf(arc, sizeof(arc), "%s/image.tar", dir);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    br_rm_tree(AT_FDCWD, dir);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_docker_archive),  cmocka_unit_test(test_oci_archive),
        cmocka_unit_test(test_not_a_tar),       cmocka_unit_test(test_no_manifest),
        cmocka_unit_test(test_cut_short),       cmocka_unit_test(test_two_images),
        cmocka_unit_test(test_missing_layer),   cmocka_unit_test(test_config_digest),
        cmocka_unit_test(test_long_names),      cmocka_unit_test(test_damaged),
        cmocka_unit_test(test_arch_of_machine), cmocka_unit_test(test_runs_on),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
