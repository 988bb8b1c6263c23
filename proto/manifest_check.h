/* manifest_check.h - what every side agrees a checkpoint manifest is
 * (docs/checkpoints.md, "The manifest"): its hash, computed entry by entry, and the
 * checks a manifest from elsewhere (a coordinator, a peer) passes before it is
 * trusted to name files: the agent that builds manifests and serves and pulls
 * checkpoints, and the CLI that pulls one to the user's machine, share them.
 *
 * The manifest hash is BLAKE2b-256 over
 *     "bramble-manifest-1" NUL root NUL
 * then, for each entry in byte order of its path,
 *     path NUL type NUL mode NUL size NUL content NUL
 * with root "dir" or "file", type "f" (file) or "l" (link), mode (st_mode & 07777)
 * and size in decimal, content the file's hash in lowercase hex or the link's target. */
#ifndef BRAMBLE_MANIFEST_CHECK_H
#define BRAMBLE_MANIFEST_CHECK_H

#include <jansson.h>
#include <sodium.h>
#include <stdint.h>

#include "err.h"

#define BR_MANIFEST_HASH_LEN crypto_generichash_BYTES /* 32: BLAKE2b-256 */

/* Start the manifest hash of a checkpoint whose root is "dir" or "file". */
void br_manifest_hash_begin(crypto_generichash_state *hs, const char *root);
/* Add one entry: content is a file's hash in hex, or (link) a symlink's target. */
void br_manifest_hash_entry(crypto_generichash_state *hs, const char *path, int link,
                            unsigned mode, int64_t size, const char *content);

/* 1 when what went into hs hashes to hex (lowercase); hs is finished. */
int br_manifest_hashes_to(crypto_generichash_state *hs, const char *hex);
/* 1 when the regular file leaf in the directory dfd (AT_FDCWD: leaf a path, its last
 * component not followed) holds size bytes hashing to hex: one a pull or a fetch
 * need not bring again. */
int br_manifest_file_holds(int dfd, const char *leaf, int64_t size, const char *hex);

/* 1 when path is one a manifest may list: relative, not empty, shorter than
 * PATH_MAX, with no empty, "." or ".." component, none longer than NAME_MAX. */
int br_manifest_path_ok(const char *path);
/* Why path is not one (a short phrase: "an absolute path (...)", "a '..' in the
 * path (...)"), or NULL when it is. */
const char *br_manifest_path_why(const char *path);

/* For a tree that becomes files on a machine (a job's code, a data set, outputs):
 * every link in manifest m is relative and stays inside the tree, and no entry lies
 * below a link. 0, or -1 with err (EPROTO, naming the entry). (A checkpoint's
 * manifest may hold any link: it is restored as it was written.) */
int br_manifest_tree_links_ok(const json_t *m, br_err_t *err);

/* Check a manifest that came from elsewhere (a coordinator, a peer) before it is
 * trusted: its shape (PROTOCOL.md's `manifest`), every path allowed, entries in
 * strictly increasing byte order, every file listed (a truncated one is refused with
 * ENOTSUP), `files` and `bytes` that add up, and `hash` equal to the hash of its
 * entries. 0, or -1 with err. */
int br_manifest_verify(const json_t *m, br_err_t *err);

/* A manifest whose entries do not all fit in a report is reported truncated, with
 * "listing": {"hash", "size"}, the BLAKE2b-256 and length of the text of the whole
 * manifest, which its writer keeps and every holder serves (PROTOCOL.md section 11).
 * 1 with that hash (borrowed) and size when m is truncated and names one; 0 when m
 * is whole; -1 with err (ENOTSUP) when it is truncated without a good listing
 * (or its own hash, which names the listing's file, is not hex). */
int br_manifest_listing(const json_t *m, const char **hash, int64_t *size, br_err_t *err);

/* The whole manifest that the truncated summary stands for, from the text of its
 * listing (already checked against the listing's hash): parsed, verified
 * (br_manifest_verify) and the same checkpoint as summary (hash, root, files,
 * bytes). A new reference, or NULL with err. */
json_t *br_manifest_from_listing(const json_t *summary, const char *text, size_t len,
                                 br_err_t *err);
/* The same without a summary to match: the manifest text holds, parsed and verified. */
json_t *br_manifest_parse_listing(const char *text, size_t len, br_err_t *err);
/* {"hash", "root", "files", "bytes"} of manifest m: what a summary of it says. */
json_t *br_manifest_summary(const json_t *m);

#define BR_MANIFEST_LISTING_MAX (128 << 20) /* bytes of a whole manifest's text */

/* The entry for path in a verified manifest (borrowed), or NULL. */
json_t *br_manifest_find(const json_t *m, const char *path);

#endif
