/* util.c - small shared helpers: units (durations, sizes, counts), clocks, files. */
#include "util.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* Split "1.5GiB" into a finite non-negative number and its unit suffix. */
static int split_number(const char *s, double *v, const char **unit)
{
    if (!s || !*s || isspace((unsigned char)*s) || *s == '-' || *s == '+')
        return -1;
    char *end;
    errno = 0;
    double d = strtod(s, &end);
    if (end == s || errno || !isfinite(d) || d < 0)
        return -1;
    /* strtod accepts hex and inf/nan spellings: allow plain decimals only */
    for (const char *p = s; p < end; p++)
        if (!isdigit((unsigned char)*p) && *p != '.' && *p != 'e' && *p != 'E' &&
            *p != '-' && *p != '+')
            return -1;
    *v = d;
    *unit = end;
    return 0;
}

int br_parse_duration(const char *s, int64_t *ms, br_err_t *err)
{
    static const struct {
        const char *unit;
        double ms;
    } units[] = {{"", 1000},   {"ms", 1},         {"s", 1000},     {"m", 60000},
                 {"h", 3600000}, {"d", 86400000}};
    double v;
    const char *unit;
    if (split_number(s, &v, &unit) == 0) {
        for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
            if (strcmp(unit, units[i].unit) == 0) {
                double r = v * units[i].ms;
                if (r > BR_DURATION_MAX_MS)
                    return br_errf(err, EINVAL,
                                   "bad duration '%s': too long (at most %.0f days)", s,
                                   BR_DURATION_MAX_MS / 86400000.0);
                *ms = (int64_t)llround(r);
                return 0;
            }
        }
    }
    return br_errf(err, EINVAL, "bad duration '%s' (use e.g. 500ms, 5s, 10m, 12h)",
                   s ? s : "");
}

int br_parse_size(const char *s, uint64_t *bytes, br_err_t *err)
{
    static const struct {
        const char *unit;
        double mult;
    } units[] = {{"", 1},          {"b", 1},           {"k", 1e3},
                 {"kb", 1e3},       {"m", 1e6},         {"mb", 1e6},
                 {"g", 1e9},        {"gb", 1e9},        {"t", 1e12},
                 {"tb", 1e12},      {"kib", 1024.0},    {"mib", 1048576.0},
                 {"gib", 1073741824.0}, {"tib", 1099511627776.0}};
    double v;
    const char *unit;
    if (split_number(s, &v, &unit) == 0) {
        for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
            if (strcasecmp(unit, units[i].unit) == 0) {
                double r = v * units[i].mult;
                if (r >= 9.2e18) /* must fit an int64 (the store and JSON) */
                    return br_errf(err, EINVAL,
                                   "bad size '%s': too large (less than 8EiB, 2^63 "
                                   "bytes)",
                                   s);
                if (r > 0 && r < 1) /* (llround would make 0.5 one byte, 0.4 none) */
                    return br_errf(err, EINVAL, "bad size '%s': less than a byte", s);
                *bytes = (uint64_t)llround(r);
                return 0;
            }
        }
    }
    return br_errf(err, EINVAL, "bad size '%s' (use e.g. 512MiB, 24GiB, 16GB)",
                   s ? s : "");
}

int br_parse_count(const char *s, double *count, br_err_t *err)
{
    static const struct {
        const char *unit;
        double mult;
    } units[] = {{"", 1}, {"K", 1e3}, {"M", 1e6}, {"B", 1e9}, {"G", 1e9}, {"T", 1e12}};
    double v;
    const char *unit;
    if (split_number(s, &v, &unit) == 0) {
        for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
            if (strcasecmp(unit, units[i].unit) == 0) {
                if (v * units[i].mult > 1e16)
                    return br_errf(err, EINVAL,
                                   "bad count '%s': too large (at most 1e16, 10000T)", s);
                *count = v * units[i].mult;
                return 0;
            }
        }
    }
    return br_errf(err, EINVAL, "bad count '%s' (use e.g. 350M, 8B, 70B)", s ? s : "");
}

int br_parse_port(const char *s, int min, int *port, br_err_t *err)
{
    char *end;
    errno = 0;
    long p = strtol(s, &end, 10);
    if (*s < '0' || *s > '9' || *end || errno || p < min || p > 65535)
        return br_errf(err, EINVAL, "'%s': expected %d..65535", s, min);
    *port = (int)p;
    return 0;
}

char *br_format_size(uint64_t bytes, char *buf, size_t len)
{
    static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    double v = (double)bytes;
    size_t i = 0;
    while (v >= 1024.0 && i + 1 < sizeof(units) / sizeof(units[0])) {
        v /= 1024.0;
        i++;
    }
    if (i == 0)
        snprintf(buf, len, "%lluB", (unsigned long long)bytes);
    else
        snprintf(buf, len, "%.1f%s", v, units[i]);
    return buf;
}

char *br_format_duration(int64_t ms, char *buf, size_t len)
{
    if (ms % 3600000 == 0 && ms >= 3600000)
        snprintf(buf, len, "%lldh", (long long)(ms / 3600000));
    else if (ms % 60000 == 0 && ms >= 60000)
        snprintf(buf, len, "%lldm", (long long)(ms / 60000));
    else if (ms % 1000 == 0)
        snprintf(buf, len, "%llds", (long long)(ms / 1000));
    else
        snprintf(buf, len, "%lldms", (long long)ms);
    return buf;
}

static int64_t clock_ms(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t br_now_ms(void)
{
    return clock_ms(CLOCK_REALTIME);
}

int64_t br_mono_ms(void)
{
    return clock_ms(CLOCK_MONOTONIC);
}

int64_t br_mono_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

void br_raise_nofile(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        (void)setrlimit(RLIMIT_NOFILE, &rl);
    }
}

int br_mkdir_p(const char *path, mode_t mode, br_err_t *err)
{
    char buf[4096];
    struct stat st;
    if (!*path)
        return br_errf(err, ENOENT, "mkdir: empty path");
    if (strlen(path) >= sizeof(buf))
        return br_errf(err, ENAMETOOLONG, "%s: path too long", path);
    strcpy(buf, path);
    for (char *p = buf + 1;; p++) {
        if (*p == '/' || *p == '\0') {
            char c = *p;
            *p = '\0';
            if (mkdir(buf, mode) < 0 && errno != EEXIST)
                return br_errf(err, errno, "mkdir %s: %s", buf, strerror(errno));
            if (stat(buf, &st) < 0 || !S_ISDIR(st.st_mode))
                return br_errf(err, ENOTDIR, "mkdir %s: not a directory", buf);
            if (c == '\0')
                break;
            *p = c;
        }
    }
    return 0;
}

void br_rm_tree(int dfd, const char *name)
{
    br_rm_tree_until(dfd, name, NULL);
}

void br_rm_tree_until(int dfd, const char *name, const atomic_int *stop)
{
    if ((stop && atomic_load(stop)) || unlinkat(dfd, name, 0) == 0 || errno == ENOENT)
        return;
    int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        if (fd >= 0)
            close(fd);
        return;
    }
    struct dirent *de;
    while ((de = readdir(d)))
        if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
            br_rm_tree_until(dirfd(d), de->d_name, stop);
    closedir(d);
    unlinkat(dfd, name, AT_REMOVEDIR);
}

char *br_read_file(const char *path, size_t max, size_t *len, br_err_t *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return br_errp(err, errno, "%s: %s", path, strerror(errno));
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap + 1);
    for (;;) {
        if (!buf) {
            close(fd);
            return br_errp(err, ENOMEM, "%s: out of memory", path);
        }
        if (n == cap) {
            if (cap > max) {
                free(buf);
                close(fd);
                return br_errp(err, EFBIG, "%s: larger than %zu bytes", path, max);
            }
            cap *= 2;
            char *nb = realloc(buf, cap + 1);
            if (!nb)
                free(buf);
            buf = nb;
            continue;
        }
        ssize_t r = read(fd, buf + n, cap - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            int e = errno;
            free(buf);
            close(fd);
            return br_errp(err, e, "%s: %s", path, strerror(e));
        }
        if (r == 0)
            break;
        n += (size_t)r;
    }
    close(fd);
    if (n > max) {
        free(buf);
        return br_errp(err, EFBIG, "%s: larger than %zu bytes", path, max);
    }
    buf[n] = '\0';
    if (len)
        *len = n;
    return buf;
}

int br_write_file(const char *path, const void *data, size_t len, mode_t mode,
                  br_err_t *err)
{
    char tmp[4200];
    snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
    if (fd < 0)
        return br_errf(err, errno, "%s: %s", tmp, strerror(errno));
    const char *p = data;
    size_t left = len;
    while (left > 0) {
        ssize_t w = write(fd, p, left);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0) {
            int e = errno;
            close(fd);
            unlink(tmp);
            return br_errf(err, e, "%s: %s", tmp, strerror(e));
        }
        p += w;
        left -= (size_t)w;
    }
    if (fchmod(fd, mode) < 0 || fsync(fd) < 0 || close(fd) < 0) {
        int e = errno;
        unlink(tmp);
        return br_errf(err, e, "%s: %s", tmp, strerror(e));
    }
    if (rename(tmp, path) < 0) {
        int e = errno;
        unlink(tmp);
        return br_errf(err, e, "rename %s: %s", path, strerror(e));
    }
    return 0;
}

int br_valid_name(const char *s)
{
    size_t n = s ? strlen(s) : 0;
    if (n == 0 || n > 63 || s[0] == '-')
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!(islower((unsigned char)s[i]) || isdigit((unsigned char)s[i]) || s[i] == '-'))
            return 0;
    return 1;
}

char *br_strlcpy(char *dst, const char *src, size_t n)
{
    if (n) {
        size_t l = strnlen(src, n - 1);
        memcpy(dst, src, l);
        dst[l] = '\0';
    }
    return dst;
}

int br_copy_all(int src, int out, void *buf, size_t len)
{
    for (int in_kernel = 1;;) {
        ssize_t k = in_kernel ? copy_file_range(src, NULL, out, NULL, 1 << 30, 0) : 0;
        if (in_kernel && k < 0 && (errno == EXDEV || errno == EINVAL || errno == ENOSYS ||
                                   errno == EOPNOTSUPP || errno == EBADF)) {
            in_kernel = 0; /* (a file system that cannot: the slow way) */
            continue;
        }
        if (k < 0 && errno == EINTR)
            continue;
        if (!in_kernel) {
            k = read(src, buf, len);
            if (k < 0 && errno == EINTR)
                continue;
            if (k > 0 && br_write_all(out, buf, (size_t)k) < 0)
                return -1;
        }
        if (k <= 0)
            return k < 0 ? -1 : 0;
    }
}

int br_write_all(int fd, const void *b, size_t n)
{
    const unsigned char *c = b;
    while (n) {
        ssize_t k = write(fd, c, n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0)
            return -1;
        c += (size_t)k;
        n -= (size_t)k;
    }
    return 0;
}

int br_on_path(const char *prog)
{
    const char *path = getenv("PATH");
    char full[4200];
    for (const char *p = path ? path : "/usr/bin:/bin"; *p;) {
        size_t n = strcspn(p, ":");
        if (n && n < 4096) {
            snprintf(full, sizeof(full), "%.*s/%s", (int)n, p, prog);
            if (access(full, X_OK) == 0)
                return 1;
        }
        p += n + (p[n] == ':');
    }
    return 0;
}
