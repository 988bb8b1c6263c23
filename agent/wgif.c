/* wgif.c - this node's WireGuard interface (wgif.h). */
#include "wgif.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "quietrun.h"
#include "util.h"

#define STEP_MS 5000      /* a `wg` or `ip` command */
#define SOCKET_WAIT_MS 3000 /* wireguard-go's control socket to appear */
#define UAPI_DIR "/var/run/wireguard"
#define RELAY_TABLE "5213" /* the routing table (and rule preference) of a relay */

struct br_wgif {
    int up;
    pid_t wggo;          /* wireguard-go, when it runs it (else 0) */
    char address[64];    /* "A.B.C.D/N" it has, "" none */
    int relaying;        /* it forwards between peers (br_wgif_relay) */
};

br_wgif_t *br_wgif_new(void)
{
    return calloc(1, sizeof(br_wgif_t));
}

/* Run argv; 0, or -1 with err saying what and what it said. */
static int step(char *const *argv, br_err_t *err)
{
    char said[400];
    int rc = br_quietrun(argv, STEP_MS, said, sizeof(said));
    if (rc == 0)
        return 0;
    char line[200] = "";
    for (int i = 0; argv[i] && strlen(line) < 150; i++)
        snprintf(line + strlen(line), sizeof(line) - strlen(line), "%s%s", i ? " " : "",
                 argv[i]);
    return br_errf(err, EIO, "overlay: `%s` failed (%s): %s", line,
                   rc < 0 ? "did not finish" : "exit status", said[0] ? said : "no output");
}

/* The rule and table br_wgif_relay adds, removed. */
static void relay_off(void)
{
    char *rule[] = {"ip", "rule", "del", "pref", RELAY_TABLE, NULL};
    char *flush[] = {"ip", "route", "flush", "table", RELAY_TABLE, NULL};
    br_quietrun(rule, STEP_MS, NULL, 0);
    br_quietrun(flush, STEP_MS, NULL, 0);
}

/* Remove the interface, and stop wireguard-go when it runs it. */
static void take_down(br_wgif_t *w)
{
    char *del[] = {"ip", "link", "del", BR_WGIF_NAME, NULL};
    br_quietrun(del, STEP_MS, NULL, 0); /* (wireguard-go ends with its device) */
    if (w->wggo > 0) {
        int64_t until = br_mono_ms() + 2000;
        int status;
        while (waitpid(w->wggo, &status, WNOHANG) == 0) {
            if (br_mono_ms() > until) {
                kill(w->wggo, SIGKILL);
                waitpid(w->wggo, &status, 0);
                break;
            }
            kill(w->wggo, SIGTERM);
            nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
        }
        w->wggo = 0;
    }
    if (w->relaying)
        relay_off();
    w->relaying = 0;
    w->up = 0;
    w->address[0] = '\0';
}

void br_wgif_destroy(br_wgif_t **w)
{
    if (w && *w) {
        if ((*w)->up || (*w)->wggo > 0)
            take_down(*w);
        free(*w);
        *w = NULL;
    }
}

int br_wgif_reaped(br_wgif_t *w, int pid, int status)
{
    if (!w || w->wggo <= 0 || pid != w->wggo)
        return 0;
    fprintf(stderr, "bramble-agent: overlay: wireguard-go ended (%s %d); %s is down until "
                    "the coordinator is heard again\n",
            WIFEXITED(status) ? "exit status" : "signal",
            WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status), BR_WGIF_NAME);
    w->wggo = 0;
    take_down(w);
    return 1;
}

void br_wgif_leave(br_wgif_t **w)
{
    if (w && *w) {
        free(*w);
        *w = NULL;
    }
}

/* Whether the interface is there already with this node's public key pub (one a
 * previous agent left for this one): taken over then, as it is. */
static int take_over(br_wgif_t *w, const char *pub)
{
    char *show[] = {"wg", "show", BR_WGIF_NAME, "public-key", NULL};
    char have[128];
    if (br_quietrun(show, STEP_MS, have, sizeof(have)) != 0 || strcmp(have, pub) != 0)
        return 0;
    w->up = 1;
    return 1;
}

int br_wgif_is_up(const br_wgif_t *w)
{
    return w->up;
}

/* Start wireguard-go on the interface, in the foreground as the agent's child, and
 * wait for its control socket. */
static int start_wggo(br_wgif_t *w, br_err_t *err)
{
    char stale[200];
    snprintf(stale, sizeof(stale), UAPI_DIR "/%s.sock", BR_WGIF_NAME);
    unlink(stale); /* (one that ended left it: the new one's is waited for) */
    pid_t pid = fork();
    if (pid == 0) {
        int null = open("/dev/null", O_RDWR);
        dup2(null, 0);
        dup2(null, 1);
        setsid(); /* (not in the agent's process group: a ^C there is the agent's) */
        setenv("WG_I_PREFER_BUGGY_USERSPACE_TO_POLISHED_KMOD", "1", 1);
        execlp("wireguard-go", "wireguard-go", "-f", BR_WGIF_NAME, (char *)NULL);
        fprintf(stderr, "wireguard-go: %s\n", strerror(errno));
        _exit(127);
    }
    if (pid < 0)
        return br_errf(err, errno, "overlay: cannot start wireguard-go: %s", strerror(errno));
    w->wggo = pid;
    char sock[200];
    snprintf(sock, sizeof(sock), UAPI_DIR "/%s.sock", BR_WGIF_NAME);
    int64_t until = br_mono_ms() + SOCKET_WAIT_MS;
    while (access(sock, F_OK) != 0) {
        int status;
        if (waitpid(pid, &status, WNOHANG) == pid) {
            w->wggo = 0;
            return br_errf(err, EIO, "overlay: wireguard-go ended at once (exit status %d; "
                                     "its words are in the agent's log)",
                           WIFEXITED(status) ? WEXITSTATUS(status) : -1);
        }
        if (br_mono_ms() > until)
            return br_errf(err, ETIMEDOUT, "overlay: wireguard-go made no %s within %d ms",
                           sock, SOCKET_WAIT_MS);
        nanosleep(&(struct timespec){0, 5 * 1000 * 1000}, NULL);
    }
    return 0;
}

int br_wgif_up(br_wgif_t *w, const char *mode, const char *key_file, const char *pub,
               const char *address, int prefix, br_err_t *err)
{
    char cidr[64], port[16];
    snprintf(cidr, sizeof(cidr), "%s/%d", address, prefix);
    snprintf(port, sizeof(port), "%d", BR_WGIF_PORT);
    int made = 0;
    if (w->up && strcmp(w->address, cidr) == 0)
        return 0;
    if (!w->up && take_over(w, pub)) {
        made = 2;
    } else if (!w->up) {
        made = 1;
        take_down(w); /* (one a killed agent left, with another key) */
        char *add[] = {"ip", "link", "add", BR_WGIF_NAME, "type", "wireguard", NULL};
        if (strcmp(mode, "kernel") == 0 ? step(add, err) < 0 : start_wggo(w, err) < 0) {
            take_down(w);
            return -1;
        }
        char *set[] = {"wg", "set", BR_WGIF_NAME, "private-key", (char *)key_file,
                       "listen-port", port, NULL};
        char *upl[] = {"ip", "link", "set", BR_WGIF_NAME, "up", NULL};
        if (step(set, err) < 0 || step(upl, err) < 0) {
            take_down(w);
            return -1;
        }
        w->up = 1;
    }
    char *show[] = {"ip", "-4", "-o", "address", "show", "dev", BR_WGIF_NAME, NULL};
    char *flush[] = {"ip", "address", "flush", "dev", BR_WGIF_NAME, NULL};
    char *addr[] = {"ip", "address", "add", cidr, "dev", BR_WGIF_NAME, NULL};
    char has[600], word[80];
    snprintf(word, sizeof(word), "inet %s ", cidr);
    const char *first = br_quietrun(show, STEP_MS, has, sizeof(has)) == 0
                            ? strstr(has, "inet ") : NULL;
    if (first && strncmp(first, word, strlen(word)) == 0 && !strstr(first + 1, "inet ")) {
        /* (taken over with its address as it was: left alone, so what talks over it
         * goes on) */
    } else if (step(flush, err) < 0 || step(addr, err) < 0) {
        return -1;
    }
    br_strlcpy(w->address, cidr, sizeof(w->address));
    return made;
}

/* Write text into the file at path; 0, or -1 with err. */
static int write_proc(const char *path, const char *text, br_err_t *err)
{
    FILE *f = fopen(path, "w");
    if (!f || fputs(text, f) < 0 || fclose(f) != 0) {
        int e = errno;
        if (f)
            fclose(f);
        return br_errf(err, e, "overlay: %s: %s", path, strerror(e));
    }
    return 0;
}

int br_wgif_relay(br_wgif_t *w, const char *net, br_err_t *err)
{
    if (!net || !w->up) {
        relay_off();
        w->relaying = 0;
        return 0;
    }
    char *rule_del[] = {"ip", "rule", "del", "pref", RELAY_TABLE, NULL};
    char *rule[] = {"ip", "rule", "add", "pref", RELAY_TABLE, "iif", BR_WGIF_NAME, "lookup",
                    RELAY_TABLE, NULL};
    char *route[] = {"ip", "route", "replace", (char *)net, "dev", BR_WGIF_NAME, "table",
                     RELAY_TABLE, NULL};
    char *none[] = {"ip", "route", "replace", "unreachable", "default", "table", RELAY_TABLE,
                    NULL};
    br_quietrun(rule_del, STEP_MS, NULL, 0); /* (one a previous agent left) */
    if (step(route, err) < 0 || step(none, err) < 0 || step(rule, err) < 0 ||
        write_proc("/proc/sys/net/ipv4/conf/" BR_WGIF_NAME "/send_redirects", "0", err) < 0 ||
        write_proc("/proc/sys/net/ipv4/conf/" BR_WGIF_NAME "/forwarding", "1", err) < 0) {
        relay_off();
        return -1;
    }
    w->relaying = 1;
    return 0;
}
