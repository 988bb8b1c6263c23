/* manifest_bench.c - how fast the agent hashes a checkpoint: builds the manifest of
 * PATH (a file or a directory) as the agent's hasher thread does, and prints files,
 * bytes, seconds, MB/s and the manifest hash. Run it twice to hash from the page
 * cache; drop the cache (echo 3 > /proc/sys/vm/drop_caches) to include the disk. */
#include <stdio.h>
#include <stdlib.h>
#include <sodium.h>

#include "manifest.h"
#include "util.h"

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: bramble-bench-manifest PATH\n");
        return 2;
    }
    if (sodium_init() < 0) /* as br_manifest_new does: libsodium's own choice */
        return 1;
    br_err_t err;
    int64_t t0 = br_mono_us();
    json_t *m = br_manifest_build(NULL, argv[1], NULL, NULL, &err);
    int64_t us = br_mono_us() - t0;
    if (!m) {
        fprintf(stderr, "bramble-bench-manifest: %s: %s\n", argv[1], err.text);
        return 1;
    }
    json_int_t bytes = json_integer_value(json_object_get(m, "bytes"));
    printf("files %lld  bytes %lld  seconds %.3f  MB/s %.0f  hash %s\n",
           (long long)json_integer_value(json_object_get(m, "files")), (long long)bytes,
           (double)us / 1e6, us > 0 ? (double)bytes / (double)us : 0.0,
           json_string_value(json_object_get(m, "hash")));
    json_decref(m);
    return 0;
}
