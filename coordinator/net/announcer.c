/* announcer.c - the coordinator's LAN announcer: one thread, one UDP socket, a
 * datagram every BR_ANNOUNCE_INTERVAL_MS to every IPv4 broadcast address in reach. */
#include "announcer.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "announce.h"
#include "util.h"

#define MAX_DEST 64

struct br_announcer {
    pthread_t thread;
    int started;
    pthread_mutex_t mu;
    pthread_cond_t cv; /* signalled by destroy */
    int stop;
    int fd;
    int udp_port;
    char datagram[BR_ANNOUNCE_MAX];
    size_t len;
    int failure_logged;
};

/* 255.255.255.255 and each up interface's broadcast address, without repeats. */
static size_t destinations(struct in_addr *out, size_t max)
{
    size_t n = 0;
    out[n++].s_addr = htonl(INADDR_BROADCAST);
    struct ifaddrs *ifs = NULL, *i;
    if (getifaddrs(&ifs) < 0)
        return n;
    for (i = ifs; i && n < max; i = i->ifa_next) {
        if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET || !i->ifa_broadaddr ||
            !(i->ifa_flags & IFF_UP) || !(i->ifa_flags & IFF_BROADCAST))
            continue;
        struct in_addr b = ((struct sockaddr_in *)i->ifa_broadaddr)->sin_addr;
        size_t k = 0;
        while (k < n && out[k].s_addr != b.s_addr)
            k++;
        if (k == n && b.s_addr != 0)
            out[n++] = b;
    }
    freeifaddrs(ifs);
    return n;
}

static void send_round(br_announcer_t *an)
{
    struct in_addr dest[MAX_DEST];
    size_t n = destinations(dest, MAX_DEST), sent = 0;
    int last = 0;
    for (size_t k = 0; k < n; k++) {
        struct sockaddr_in sa = {.sin_family = AF_INET,
                                 .sin_port = htons((uint16_t)an->udp_port),
                                 .sin_addr = dest[k]};
        if (sendto(an->fd, an->datagram, an->len, 0, (struct sockaddr *)&sa,
                   sizeof(sa)) == (ssize_t)an->len)
            sent++;
        else
            last = errno;
    }
    /* no broadcast address in reach (yet): say so once, keep trying */
    if (sent == 0 && !an->failure_logged) {
        fprintf(stderr,
                "brambled: announce: no broadcast address could be reached "
                "(%s); still trying every %ds\n",
                strerror(last), BR_ANNOUNCE_INTERVAL_MS / 1000);
        an->failure_logged = 1;
    }
}

static void *run(void *arg)
{
    br_announcer_t *an = arg;
    pthread_mutex_lock(&an->mu);
    while (!an->stop) {
        pthread_mutex_unlock(&an->mu);
        send_round(an);
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_sec += BR_ANNOUNCE_INTERVAL_MS / 1000;
        until.tv_nsec += (long)(BR_ANNOUNCE_INTERVAL_MS % 1000) * 1000000L;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        pthread_mutex_lock(&an->mu);
        while (!an->stop &&
               pthread_cond_timedwait(&an->cv, &an->mu, &until) != ETIMEDOUT)
            ;
    }
    pthread_mutex_unlock(&an->mu);
    return NULL;
}

br_announcer_t *br_announcer_new(const char *key, const char *listen,
                                 const char *advertise, int udp_port, br_err_t *err)
{
    br_announce_t a = {0};
    char host[BR_ENDPOINT_MAX];
    if (udp_port < 1 || udp_port > 65535)
        return br_errp(err, EINVAL, "--announce-port %d: expected 1..65535", udp_port);
    if (br_announce_split_endpoint(listen, host, sizeof(host), &a.port, err) < 0) {
        br_err_prefix(err, "--announce needs a tcp:// listen endpoint");
        return NULL;
    }
    br_strlcpy(a.key, key, sizeof(a.key));
    br_strlcpy(a.endpoint, advertise[0] ? advertise : listen, sizeof(a.endpoint));
    br_announcer_t *an = calloc(1, sizeof(*an));
    if (!an)
        return br_errp(err, ENOMEM, "out of memory");
    an->fd = -1;
    an->udp_port = udp_port;
    pthread_mutex_init(&an->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&an->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (br_announce_encode(&a, an->datagram, sizeof(an->datagram), &an->len, err) < 0)
        goto fail;
    an->fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    int one = 1;
    if (an->fd < 0 ||
        setsockopt(an->fd, SOL_SOCKET, SO_BROADCAST, &one, sizeof(one)) < 0) {
        br_errf(err, errno, "announce: UDP socket: %s", strerror(errno));
        goto fail;
    }
    /* the thread takes no signals: the server's signalfd gets SIGTERM and friends */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    int rc = pthread_create(&an->thread, NULL, run, an);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        br_errf(err, rc, "announce: cannot start a thread: %s", strerror(rc));
        goto fail;
    }
    an->started = 1;
    fprintf(stderr, "brambled: announcing %s (port %d) on UDP port %d every %ds\n",
            a.endpoint, a.port, udp_port, BR_ANNOUNCE_INTERVAL_MS / 1000);
    return an;
fail:
    br_announcer_destroy(&an);
    return NULL;
}

void br_announcer_destroy(br_announcer_t **anp)
{
    if (!anp || !*anp)
        return;
    int saved = errno;
    br_announcer_t *an = *anp;
    if (an->started) {
        pthread_mutex_lock(&an->mu);
        an->stop = 1;
        pthread_cond_signal(&an->cv);
        pthread_mutex_unlock(&an->mu);
        pthread_join(an->thread, NULL);
    }
    if (an->fd >= 0)
        close(an->fd);
    pthread_cond_destroy(&an->cv);
    pthread_mutex_destroy(&an->mu);
    free(an);
    *anp = NULL;
    errno = saved;
}
