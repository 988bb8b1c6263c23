/* container.c - the podman command of a container job (container.h). */
#include "container.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "quietrun.h"
#include "spec.h"
#include "util.h"

struct br_container {
    char runtime[16]; /* "podman" or "" */
    unsigned long long nofile, nproc;
    int calibrated;
};

/* init's (PID 1) soft limit named name in /proc/1/limits ("Max open files"), or 0
 * when it cannot be read or is unlimited. */
static unsigned long long init_limit(const char *name)
{
    FILE *f = fopen("/proc/1/limits", "r");
    char line[256];
    unsigned long long v = 0;
    while (f && fgets(line, sizeof(line), f))
        if (strncmp(line, name, strlen(name)) == 0) {
            v = strtoull(line + 26, NULL, 10); /* (the soft column; "unlimited": 0) */
            break;
        }
    if (f)
        fclose(f);
    return v;
}

static unsigned long long limit_of(int resource, const char *name)
{
    struct rlimit rl;
    unsigned long long own = getrlimit(resource, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY
                                 ? (unsigned long long)rl.rlim_cur
                                 : 1048576;
    unsigned long long init = init_limit(name);
    return init && init < own ? init : own;
}

br_container_t *br_container_new(const char *mode, br_err_t *err)
{
    br_container_t *c = calloc(1, sizeof(*c));
    if (!c)
        return br_errp(err, ENOMEM, "out of memory");
    if (!mode || strcmp(mode, "auto") == 0 || strcmp(mode, "podman") == 0) {
        if (br_on_path("podman"))
            br_strlcpy(c->runtime, "podman", sizeof(c->runtime));
        else if (mode && strcmp(mode, "podman") == 0) {
            free(c);
            return br_errp(err, ENOENT, "--container-runtime podman: no podman on PATH "
                                        "(apt-get install podman)");
        }
    } else if (strcmp(mode, "none") != 0) {
        free(c);
        return br_errp(err, EINVAL, "--container-runtime %s: expected auto, podman or none",
                       mode);
    }
    c->nofile = limit_of(RLIMIT_NOFILE, "Max open files");
    c->nproc = limit_of(RLIMIT_NPROC, "Max processes");
    return c;
}

void br_container_destroy(br_container_t **c)
{
    if (c && *c) {
        free(*c);
        *c = NULL;
    }
}

const char *br_container_runtime(const br_container_t *c)
{
    return c && c->runtime[0] ? c->runtime : NULL;
}

/* The empty image the limits are tried with, made here when podman lacks it
 * (`podman import` of an empty tar: no files, so the tries start no program).
 * 0, or -1. */
static int probe_image(int timeout_ms)
{
    char *exists[] = {"podman", "image", "exists", BR_CONTAINER_PROBE, NULL};
    if (br_quietrun(exists, timeout_ms, NULL, 0) == 0)
        return 0;
    char path[] = "/tmp/bramble-probe-XXXXXX";
    int fd = mkstemp(path);
    static const char zeros[1024]; /* a tar of nothing: its two end blocks */
    if (fd < 0)
        return -1;
    int ok = write(fd, zeros, sizeof(zeros)) == (ssize_t)sizeof(zeros);
    close(fd);
    char *import[] = {"podman", "import", path, BR_CONTAINER_PROBE, NULL};
    ok = ok && br_quietrun(import, timeout_ms, NULL, 0) == 0;
    unlink(path);
    return ok ? 0 : -1;
}

int br_container_calibrate(br_container_t *c, int timeout_ms)
{
    if (c->calibrated || !br_container_runtime(c))
        return 0;
    c->calibrated = 1;
    if (probe_image(timeout_ms) < 0)
        return 0; /* (no container starts then: the job says why, as podman does) */
    unsigned long long own = c->nproc, tries[] = {own, 65536, 32768, 4096, 1024};
    int n = 0;
    for (size_t i = 0; i < sizeof(tries) / sizeof(tries[0]); i++) {
        if (tries[i] > own || (i > 0 && tries[i] == own))
            continue;
        char nofile[64], nproc[64];
        snprintf(nofile, sizeof(nofile), "nofile=%llu:%llu", c->nofile, c->nofile);
        snprintf(nproc, sizeof(nproc), "nproc=%llu:%llu", tries[i], tries[i]);
        /* the runtime sets the limits before it looks for the program: "not found"
         * (127) says they were taken, a refusal of them is 126 */
        char *argv[] = {"podman", "run", "--rm", "--pull", "never", "--network", "host",
                        "--ulimit", nofile, "--ulimit", nproc, BR_CONTAINER_PROBE,
                        "/nonexistent", NULL};
        n++;
        if (br_quietrun(argv, timeout_ms, NULL, 0) == 127) {
            c->nproc = tries[i];
            return n;
        }
    }
    return n;
}

unsigned long long br_container_nproc(const br_container_t *c)
{
    return c->nproc;
}

void br_container_name(const char *tag, char *out, size_t len)
{
    snprintf(out, len, "bramble-%s", tag);
    for (char *p = out; *p; p++)
        if (*p == '/')
            *p = '_';
}

void br_container_forget(const char *tag)
{
    char name[300], setup[320];
    br_container_name(tag, name, sizeof(name));
    snprintf(setup, sizeof(setup), "%s-setup", name); /* (its setup's, when it had one) */
    pid_t pid = fork();
    if (pid == 0) { /* (its child runs it: this one is reaped at once, that one by init) */
        char *argv[] = {"podman", "rm", "-f", "--ignore", "-t", "0", name, setup, NULL};
        setsid();
        if (fork() == 0) {
            int null = open("/dev/null", O_RDWR);
            dup2(null, 0);
            dup2(null, 1);
            dup2(null, 2);
            execvp(argv[0], argv);
        }
        _exit(0);
    }
    if (pid > 0)
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
            ;
}

char **br_container_exec_argv(const char *tag, uid_t uid, gid_t gid, const char *workdir,
                              int tty, const char *const *env, const char *const *cmd)
{
    size_t n = 0;
    while (cmd && cmd[n])
        n++;
    char **argv = calloc(n + 24, sizeof(*argv));
    char name[300], user[64];
    if (!argv)
        return NULL;
    br_container_name(tag, name, sizeof(name));
    snprintf(user, sizeof(user), "%u:%u", (unsigned)uid, (unsigned)gid);
    size_t i = 0;
    const char *head[] = {"podman", "exec", tty ? "-it" : "-i", "--user", user};
    for (size_t k = 0; k < sizeof(head) / sizeof(head[0]); k++)
        argv[i++] = strdup(head[k]);
    if (workdir) {
        argv[i++] = strdup("-w");
        argv[i++] = strdup(workdir);
    }
    for (size_t k = 0; env && env[k] && k < 4; k++) {
        argv[i++] = strdup("--env");
        argv[i++] = strdup(env[k]);
    }
    argv[i++] = strdup(name);
    if (n)
        for (size_t k = 0; k < n; k++)
            argv[i++] = strdup(cmd[k]);
    else { /* the image's bash, else its sh */
        argv[i++] = strdup("/bin/sh");
        argv[i++] = strdup("-c");
        argv[i++] = strdup("if [ -x /bin/bash ]; then exec /bin/bash; fi; exec /bin/sh");
    }
    for (size_t k = 0; k < i; k++)
        if (!argv[k]) {
            br_container_argv_free(argv);
            return NULL;
        }
    return argv;
}

void br_container_argv_free(char **argv)
{
    for (size_t k = 0; argv && argv[k]; k++)
        free(argv[k]);
    free(argv);
}

int br_container_cdi(void)
{
    static const char *const dirs[] = {BR_CDI_DIRS};
    int found = 0;
    for (size_t i = 0; !found && i < sizeof(dirs) / sizeof(dirs[0]); i++) {
        DIR *d = opendir(dirs[i]);
        struct dirent *e;
        while (d && !found && (e = readdir(d))) {
            char path[4200];
            size_t n;
            br_err_t err;
            if (e->d_name[0] == '.')
                continue;
            snprintf(path, sizeof(path), "%s/%s", dirs[i], e->d_name);
            char *text = br_read_file(path, 4 << 20, &n, &err);
            found = text && strstr(text, "nvidia.com/gpu") != NULL;
            free(text);
        }
        if (d)
            closedir(d);
    }
    return found;
}

/* A growing command line. */
typedef struct {
    char *s;
    size_t len, cap;
    int bad;
} line_t;

static void add(line_t *l, const char *text)
{
    size_t n = strlen(text);
    if (l->bad)
        return;
    if (l->len + n + 1 > l->cap) {
        size_t cap = (l->len + n + 1) * 2;
        char *s = realloc(l->s, cap);
        if (!s) {
            l->bad = 1;
            return;
        }
        l->s = s;
        l->cap = cap;
    }
    memcpy(l->s + l->len, text, n + 1);
    l->len += n;
}

/* text quoted for sh, after a space. */
static void word(line_t *l, const char *text)
{
    add(l, " '");
    for (const char *p = text; *p; p++) {
        char one[2] = {*p, '\0'};
        add(l, *p == '\'' ? "'\\''" : one);
    }
    add(l, "'");
}

static void opt(line_t *l, const char *flag, const char *value)
{
    add(l, " ");
    add(l, flag);
    word(l, value);
}

/* -v FROM:TO[:ro], quoted (paths may be long: built in parts). */
static void volume(line_t *l, const char *from, const char *to, int ro)
{
    line_t m = {0};
    add(&m, from);
    add(&m, ":");
    add(&m, to);
    if (ro)
        add(&m, ":ro");
    add(l, " -v");
    if (!m.bad)
        word(l, m.s);
    l->bad |= m.bad;
    free(m.s);
}

static int name_ok(const char *k)
{
    return k && *k && strspn(k, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_") ==
                          strlen(k);
}

char *br_container_command(const br_container_t *c, const br_container_run_t *r,
                           br_err_t *err)
{
    if (!br_container_runtime(c))
        return br_errp(err, ENOTSUP, "this node runs no containers (its agent found no "
                                     "podman, or runs with --container-runtime none)");
    if (!br_spec_image_ok(r->image))
        return br_errp(err, EINVAL, "image: not an image name");
    line_t l = {0};
    char buf[128];
    if (r->ngpus > 0) {
        /* the task's GPUs (CUDA_VISIBLE_DEVICES, by index) as CDI devices, numbered
         * from 0 inside: set into "$@", which goes among podman's options */
        int cdi = br_container_cdi();
        add(&l, "set --; n=0; for g in $(echo \"$CUDA_VISIBLE_DEVICES\" | tr , ' '); do "
                "case $g in");
        for (int i = 0; cdi && i < r->ngpus; i++) {
            if (!r->gpu_uuids[i] || !r->gpu_uuids[i][0])
                continue;
            snprintf(buf, sizeof(buf), " %d) set -- \"$@\" --device", i);
            add(&l, buf);
            line_t dev = {0};
            add(&dev, "nvidia.com/gpu=");
            add(&dev, r->gpu_uuids[i]);
            if (!dev.bad)
                word(&l, dev.s);
            l.bad |= dev.bad;
            free(dev.s);
            add(&l, ";;");
        }
        add(&l, cdi ? " *) echo \"bramble: GPU $g of this node has no UUID for its "
                      "container\" >&2; exit 125;;"
                    : " *) echo \"bramble: this node has no CDI spec for its GPUs "
                      "(nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml), so a "
                      "container cannot be given GPU $g\" >&2; exit 125;;");
        add(&l, " esac; n=$((n+1)); done; c=; i=0; while [ $i -lt $n ]; do "
                "c=$c${c:+,}$i; i=$((i+1)); done; export CUDA_VISIBLE_DEVICES=$c\n");
    }
    add(&l, "exec podman run --rm --network host --pid host --security-opt no-new-privileges "
            "--cap-drop all --label \"bramble.task=$BRAMBLE_TASK\" "
            "--name \"bramble-$(echo \"$BRAMBLE_TASK\" | tr / _)");
    if (r->name_suffix && strspn(r->name_suffix, "-abcdefghijklmnopqrstuvwxyz") ==
                              strlen(r->name_suffix))
        add(&l, r->name_suffix);
    add(&l, "\"");
    snprintf(buf, sizeof(buf), "%u:%u", (unsigned)r->uid, (unsigned)r->gid);
    opt(&l, "--user", buf);
    snprintf(buf, sizeof(buf), "nofile=%llu:%llu", c->nofile, c->nofile);
    opt(&l, "--ulimit", buf);
    snprintf(buf, sizeof(buf), "nproc=%llu:%llu", c->nproc, c->nproc);
    opt(&l, "--ulimit", buf);
    /* the job's variables, by name: their values are the task's own (podman reads
     * them from its environment) */
    json_t *names = json_object();
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)r->env, k, v)
        json_object_set_new(names, k, json_true());
    size_t i;
    json_t *t;
    json_array_foreach(r->tasks, i, t)
        json_object_foreach(json_object_get(t, "env"), k, v)
            json_object_set_new(names, k, json_true());
    json_object_set_new(names, "BRAMBLE_TASK", json_true());
    json_object_foreach(names, k, v)
        if (name_ok(k))
            opt(&l, "-e", k);
    json_decref(names);
    for (int j = 0; r->rw && r->rw[j]; j++)
        volume(&l, r->rw[j], r->rw[j], 0);
    for (int j = 0; r->ro && r->ro[j] && r->ro[j + 1]; j += 2)
        volume(&l, r->ro[j], r->ro[j + 1], 1);
    if (r->workdir)
        opt(&l, "-w", r->workdir);
    if (r->ngpus > 0)
        add(&l, " \"$@\"");
    word(&l, r->image); /* (never starts with '-') */
    add(&l, " /bin/sh -c");
    word(&l, r->command);
    if (l.bad) {
        free(l.s);
        return br_errp(err, ENOMEM, "out of memory");
    }
    return l.s;
}
