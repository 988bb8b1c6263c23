/* probe_boot.h - the rank bootstrap and helpers shared by the probe programs
 * (nccl_probe.c, net_probe.c): messages, option and environment parsing, sockets
 * with deadlines, and rank 0's listener on MASTER_PORT (probe_boot_t) that takes
 * the other ranks' hellos. Functions return -1 (or NULL) and say why on stderr
 * unless they say otherwise. */
#ifndef BRAMBLE_PROBE_BOOT_H
#define BRAMBLE_PROBE_BOOT_H

#include <getopt.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/socket.h>

#define PROBE_EXIT_USAGE 2
#define PROBE_PEER_TIMEOUT_MS 5000 /* one peer's hello or connect attempt */
#define PROBE_RETRY_MS 250         /* between connect attempts to rank 0 */

/* ---- messages: "PROG: rank R: ..." on stderr */

/* The program's name for messages, and how the environment's "not set" message
 * ends: "bramble sets it for <gang_job>; see --help". Call first. */
void probe_log_init(const char *prog, const char *gang_job);
void probe_log_rank(int rank); /* -1 (the default): not known yet */
int probe_errf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

int64_t probe_now_ns(void); /* monotonic */
int64_t probe_now_ms(void);
void probe_sleep_us(int64_t us);

/* ---- options and environment */

/* getopt_long over argv with "-h" and the long options ("help" must give 'h'):
 * take(ctx, option, optarg) for each, nonzero for a bad value. 0: run; 1: --help
 * printed by usage(stdout); -1: a usage error printed. */
int probe_getopt(int argc, char **argv, const struct option *longopts,
                 int (*take)(void *ctx, int opt, const char *arg), void *ctx,
                 void (*usage)(FILE *));
/* "64M", "1KiB", "4096" -> bytes (K, M, G: powers of 1024), at most `limit`
 * before the suffix's shift; -1 when malformed, nothing printed. */
int probe_parse_size(const char *s, uint64_t limit, uint64_t *out);
/* A decimal integer in [min, max]; -1 when not, nothing printed. */
int probe_parse_count(const char *s, int min, int max, int *out);
/* An integer environment variable in [min, max], `dflt` when unset and not
 * required; -1 with a message naming it. */
int probe_env_int(const char *name, int required, int dflt, int min, int max, int *out);
/* MASTER_ADDR and MASTER_PORT, checked when world > 1. */
int probe_env_master(int world, const char **addr, const char **port);

/* ---- big-endian integers on the wire */

void probe_put32(unsigned char *p, uint32_t v);
void probe_put64(unsigned char *p, uint64_t v);
uint32_t probe_get32(const unsigned char *p);
uint64_t probe_get64(const unsigned char *p);

/* ---- non-blocking sockets with deadlines (probe_now_ms time); these set errno
 * and print nothing, except probe_sock_close and probe_join */

/* Wait for fd to be ready for `events` (ETIMEDOUT at the deadline). */
int probe_sock_wait(int fd, short events, int64_t deadline);
/* All of len bytes to or from fd (ECONNRESET for an early end of stream). */
int probe_sock_xfer(int fd, void *buf, size_t len, int writing, int64_t deadline);
void probe_sock_close(int fd); /* -1: nothing; a failure is printed */
/* A listening socket on every address of this host (IPv6 with v4-mapped addresses
 * where the kernel has IPv6, else IPv4); port 0: any. */
int probe_listen(int port, int backlog);
/* One connect attempt before the deadline; the socket. */
int probe_connect(const struct sockaddr *sa, socklen_t len, int64_t deadline);
/* Ranks > 0: connect to rank 0 at host:port, retrying until the deadline (it may
 * start later); the socket, or -1 with "cannot reach rank 0 ... within
 * timeout_s s" printed. */
int probe_join(const char *host, const char *port, int64_t deadline, int timeout_s);

/* ---- rank 0's listener on MASTER_PORT: hellos of the other ranks.
 * A hello is `hello_bytes` bytes: the 8-byte magic, rank u32, world u32, then the
 * program's own fields. Wrong or duplicate hellos are refused (closed, said on
 * stderr) and do not count. */

typedef struct {
    int port, world, timeout_s; /* timeout_s: for messages */
    const char *magic;          /* 8 bytes */
    size_t hello_bytes;
    const char *done_what;    /* "connected": "N of M ranks <done_what> within" */
    const char *const *names; /* rank names for messages, or NULL */
    int nodes;                /* ranks are NNODES nodes rather than WORLD_SIZE */
} probe_boot_cfg_t;

typedef struct probe_boot probe_boot_t;

/* Listen on cfg->port; NULL with "cannot listen on MASTER_PORT=..." printed. */
probe_boot_t *probe_boot_new(const probe_boot_cfg_t *cfg);
/* Closes the listener; NULL is fine; nulls *bp. */
void probe_boot_destroy(probe_boot_t **bp);
/* The next rank's connection with a good hello (in `hello`; its rank in *rank,
 * one not taken yet), from the peer address in *peer (may be NULL); -1 when none
 * came before the deadline ("N of M ranks ... first missing ..." printed) or
 * accept failed. The caller closes the socket. */
int probe_boot_accept(probe_boot_t *b, int64_t deadline, unsigned char *hello,
                      struct sockaddr_storage *peer, uint32_t *rank);
/* Count rank as served: a later hello of the same rank is refused. */
void probe_boot_take(probe_boot_t *b, uint32_t rank);
int probe_boot_taken(const probe_boot_t *b); /* how many ranks so far */

#endif
