/* inventory.c - what this node is: hostname, arch, CPUs, memory, OS, agent version. */
#include "inventory.h"

#include <errno.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <inttypes.h>
#include <limits.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sysinfo.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "util.h"

#ifndef BRAMBLE_VERSION
#define BRAMBLE_VERSION "0.0.0"
#endif

/* CPUs this process may run on (cpusets, taskset), else the online count. */
static int count_cpus(void)
{
    for (int ncpu = 1024; ncpu <= 1 << 16; ncpu *= 2) {
        cpu_set_t *set = CPU_ALLOC(ncpu);
        if (!set)
            break;
        size_t size = CPU_ALLOC_SIZE(ncpu);
        CPU_ZERO_S(size, set);
        int rc = sched_getaffinity(0, size, set);
        int n = rc == 0 ? CPU_COUNT_S(size, set) : 0;
        CPU_FREE(set);
        if (rc == 0 && n > 0)
            return n;
        if (rc < 0 && errno != EINVAL)
            break;
    }
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 && n < INT_MAX ? (int)n : 1;
}

static uint64_t meminfo_total(void)
{
    FILE *f = fopen("/proc/meminfo", "re");
    char line[256];
    unsigned long long kib = 0;
    if (!f)
        return 0;
    while (fgets(line, sizeof(line), f)) {
        if (sscanf(line, "MemTotal: %llu kB", &kib) == 1)
            break;
    }
    fclose(f);
    return (uint64_t)kib * 1024;
}

static uint64_t total_memory(void)
{
    struct sysinfo si;
    if (sysinfo(&si) == 0 && si.totalram > 0)
        return (uint64_t)si.totalram * (si.mem_unit ? si.mem_unit : 1);
    return meminfo_total();
}

/* Value of KEY="..." (quotes optional, backslash escapes honoured) in os-release. */
static int os_release_value(const char *line, const char *key, char *out, size_t len)
{
    size_t klen = strlen(key);
    if (strncmp(line, key, klen) != 0 || line[klen] != '=')
        return -1;
    const char *p = line + klen + 1;
    char quote = (*p == '"' || *p == '\'') ? *p++ : '\0';
    size_t n = 0;
    for (; *p && *p != '\n' && *p != quote && n + 1 < len; p++) {
        if (*p == '\\' && quote == '"' && p[1])
            p++;
        out[n++] = *p;
    }
    out[n] = '\0';
    return n > 0 ? 0 : -1;
}

static int os_pretty_name(char *out, size_t len)
{
    static const char *const paths[] = {"/etc/os-release", "/usr/lib/os-release"};
    for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
        FILE *f = fopen(paths[i], "re");
        char line[512];
        int rc = -1;
        if (!f)
            continue;
        while (rc < 0 && fgets(line, sizeof(line), f))
            rc = os_release_value(line, "PRETTY_NAME", out, len);
        fclose(f);
        if (rc == 0)
            return 0;
    }
    return -1;
}

json_t *br_inventory_collect(br_err_t *err)
{
    struct utsname u;
    char host[HOST_NAME_MAX + 1] = "";
    char os[256];
    if (uname(&u) < 0)
        return br_errp(err, errno, "uname: %s", strerror(errno));
    if (gethostname(host, sizeof(host)) < 0)
        return br_errp(err, errno, "gethostname: %s", strerror(errno));
    host[sizeof(host) - 1] = '\0';
    if (os_pretty_name(os, sizeof(os)) < 0)
        br_strlcpy(os, u.sysname, sizeof(os));
    json_t *inv =
        json_pack("{s:s, s:s, s:i, s:I, s:s, s:s, s:s}", "hostname", host, "arch",
                  u.machine, "cpus", count_cpus(), "memory", (json_int_t)total_memory(),
                  "os", os, "kernel", u.release, "agent_version", BRAMBLE_VERSION);
    if (!inv)
        return br_errp(err, ENOMEM, "out of memory collecting the inventory");
    return inv;
}

/* 1 when a and b (both of a's family, AF_INET or AF_INET6) hold the same address. */
static int same_address(const struct sockaddr *a, const struct sockaddr *b)
{
    if (a->sa_family == AF_INET)
        return ((const struct sockaddr_in *)(const void *)a)->sin_addr.s_addr ==
               ((const struct sockaddr_in *)(const void *)b)->sin_addr.s_addr;
    return memcmp(&((const struct sockaddr_in6 *)(const void *)a)->sin6_addr,
                  &((const struct sockaddr_in6 *)(const void *)b)->sin6_addr,
                  sizeof(struct in6_addr)) == 0;
}

int br_inventory_iface_of(const char *address, char *name, size_t len)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_flags = AI_NUMERICHOST}, *ai = NULL;
    if (!address || !*address || getaddrinfo(address, NULL, &hints, &ai) != 0)
        return -1;
    struct ifaddrs *list = NULL;
    int rc = -1;
    if (getifaddrs(&list) == 0) {
        for (struct ifaddrs *i = list; i && rc < 0; i = i->ifa_next) {
            const struct sockaddr *sa = i->ifa_addr;
            if (sa && sa->sa_family == ai->ai_family && same_address(sa, ai->ai_addr) &&
                strlen(i->ifa_name) < len) {
                memcpy(name, i->ifa_name, strlen(i->ifa_name) + 1);
                rc = 0;
            }
        }
        freeifaddrs(list);
    }
    freeaddrinfo(ai);
    return rc;
}
