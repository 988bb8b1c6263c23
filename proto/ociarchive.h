/* ociarchive.h - what image an archive from `podman save` (docker-archive or
 * oci-archive, both plain uncompressed tar files) holds, checked without reading its
 * layers: the tar's headers are walked end to end (ustar, old GNU and v7 headers,
 * GNU long names, pax path/size records), only the small JSON files are read
 * (manifest.json; index.json and the image's manifest; the config), and the
 * image's ID is the sha256 of its config's bytes, as podman names it. And which
 * node machines (uname -m) run an image of an architecture (OCI's names). */
#ifndef BRAMBLE_OCIARCHIVE_H
#define BRAMBLE_OCIARCHIVE_H

#include <stdint.h>

#include "err.h"

#define BR_OCIARCHIVE_JSON_MAX (4 << 20) /* a manifest, an index or a config */
#define BR_OCIARCHIVE_ENTRIES_MAX 100000 /* entries in one archive */
#define BR_OCIARCHIVE_NAME_MAX 4096      /* bytes in one entry's name or link */
#define BR_IMAGE_ARCHIVE "image.tar"     /* the one file of a loaded image's tree in the
                                          * content store (`bramble image load`) */

typedef struct {
    char format[16];  /* "docker-archive" or "oci-archive" */
    char id[65];      /* the image's ID as podman names it: lowercase sha256 hex of
                         its config blob's bytes (computed here with
                         crypto_hash_sha256, and checked against the name/digest
                         the archive gives the config) */
    char arch[32];    /* the config's "architecture": amd64, arm64, arm, riscv64 ... */
    char variant[16]; /* the config's "variant" ("" when none) */
    char os[32];      /* the config's "os" (linux) */
    int layers;       /* layers the manifest names */
    int64_t bytes;    /* the archive's size */
    int64_t layer_bytes; /* the layers' sizes as stored in the archive, summed
                            (docker-archive: tars; oci-archive: as the manifest's
                            media types say, mostly gzip) */
} br_ociarchive_t;

/* Read and check the archive at path. 0, or -1 with err (EINVAL) saying in words
 * what is wrong, always naming the path: e.g. "FILE is not an image archive (not a
 * tar file)", "FILE is not an image archive: no manifest.json (docker-archive) nor
 * index.json (oci-archive)", "FILE is cut short: ENTRY ends at byte N of M", "FILE
 * is cut short: no end-of-archive blocks", "FILE holds 2 images: save one image per
 * archive", "FILE: layer LAYER named by its manifest is missing". A file that cannot
 * be opened or read: -1 with its errno (ENOENT, EACCES, EIO...), named the same way.
 *
 * Where the archive gives the config a digest (oci-archive: the manifest's config
 * descriptor; docker-archive: a Config named "HEX.json" or "blobs/sha256/HEX") the
 * config's bytes must hash to it. Entries named by the manifests may be symbolic or
 * hard links inside the archive (podman's docker-archive has some); a name that two
 * entries share is refused rather than guessed at. */
int br_ociarchive_read(const char *path, br_ociarchive_t *out, br_err_t *err);

/* A node's machine (uname -m: x86_64, aarch64, arm64, armv7l, armv6l, riscv64,
 * ppc64le, s390x, i686) as OCI names architectures (amd64, arm64, arm, riscv64,
 * ppc64le, s390x, 386); unknown: returned as given. */
const char *br_ociarchive_arch_of_machine(const char *machine);

/* Whether an image of arch/variant (OCI's names) runs on a node of machine (uname
 * -m): amd64 on x86_64; arm64 on aarch64; arm on armv7l (variant "" or v7, v6 also
 * on armv7l) and armv6l (variant v6 or ""); etc.: the machine's architecture must be
 * the image's. Only arm's variants are told apart (v5 < v6 < v7 < v8l, a 32-bit
 * machine on a 64-bit CPU): uname -m cannot tell amd64's levels (v2, v3) nor
 * arm64's (v8, v9), so any variant of those passes. No emulation is assumed (386 is
 * not taken to run on x86_64, nor arm on aarch64). variant NULL: "". */
int br_ociarchive_runs_on(const char *arch, const char *variant, const char *machine);

#endif
