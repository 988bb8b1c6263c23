/* fake_nvml.c - a libnvidia-ml.so.1 for tests: GPUs read from a text file, again on
 * every call, so a test changes what the "hardware" reports while an agent runs.
 *
 * FAKE_NVML_GPUS names the file: one GPU per line, fields separated by '|':
 *
 *     # name              | total | used | util % | power W | temp C | xids | ecc
 *     NVIDIA RTX 4090     | 24GiB | 0    | 12     | 85.5    | 41     | 79   | 0
 *
 * The last two fields may be left out: xids lists the XID errors the GPU has had so
 * far, oldest first ("79" or "48,79"; empty for none), each delivered once as an
 * nvmlEventTypeXidCriticalError event to every event set registered for the GPU;
 * ecc is its volatile count of uncorrected ECC errors.
 *
 * Sizes are bytes or take KiB, MiB, GiB; "-" for a figure means the GPU does not
 * support it (NVML_ERROR_NOT_SUPPORTED); '#' starts a comment line. The number of
 * GPUs is the number of lines. Without the variable, or with a file that cannot be
 * read, nvmlInit_v2 fails as it does on a box without the driver. Only the calls
 * bramble-agent makes are here. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define NVML_SUCCESS 0
#define NVML_ERROR_INVALID_ARGUMENT 2
#define NVML_ERROR_NOT_SUPPORTED 3
#define NVML_ERROR_INSUFFICIENT_SIZE 7
#define NVML_ERROR_DRIVER_NOT_LOADED 9
#define NVML_ERROR_TIMEOUT 10
#define NVML_EVENT_XID 0x8ULL /* nvmlEventTypeXidCriticalError */
#define MAX_XIDS 32

#define MAX_GPUS 16
#define UNSUPPORTED -1.0

typedef struct nvml_device *nvml_device_t;
typedef struct {
    unsigned long long total, free, used;
} nvml_memory_t;
typedef struct {
    unsigned int gpu, memory;
} nvml_utilization_t;

typedef struct {
    char name[96];
    double total, used, util, power, temp; /* UNSUPPORTED when "-" */
    unsigned long long xids[MAX_XIDS];
    int nxids;
    double ecc;
} fake_gpu_t;

typedef struct {
    nvml_device_t device;
    unsigned long long type, data;
    unsigned int gpu_instance, compute_instance;
} nvml_event_t;

/* An event set: which GPUs it hears, and how many of each one's XIDs it was told. */
typedef struct {
    int registered[MAX_GPUS];
    int told[MAX_GPUS];
} fake_set_t;

static char handles[MAX_GPUS]; /* a device handle points at its index's byte */

static char *trim(char *s)
{
    while (*s == ' ' || *s == '\t')
        s++;
    size_t n = strlen(s);
    while (n > 0 && strchr(" \t\r\n", s[n - 1]))
        s[--n] = '\0';
    return s;
}

static double figure(char *field)
{
    static const struct {
        const char *suffix;
        double scale;
    } units[] = {{"GiB", 1073741824.0}, {"MiB", 1048576.0}, {"KiB", 1024.0}};
    char *end;
    field = trim(field);
    if (strcmp(field, "-") == 0 || !*field)
        return UNSUPPORTED;
    double v = strtod(field, &end);
    end = trim(end);
    for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++)
        if (strcasecmp(end, units[i].suffix) == 0)
            return v * units[i].scale;
    return v;
}

/* The GPUs the file lists now; -1 when it cannot be read. */
static int load(fake_gpu_t *gpus)
{
    const char *path = getenv("FAKE_NVML_GPUS");
    FILE *f = path ? fopen(path, "r") : NULL;
    char line[512];
    int n = 0;
    if (!f)
        return -1;
    while (n < MAX_GPUS && fgets(line, sizeof(line), f)) {
        char *s = trim(line), *field[8];
        int k = 0;
        if (!*s || *s == '#')
            continue;
        for (char *rest = s; k < 8 && (field[k] = strsep(&rest, "|")) != NULL; k++)
            ;
        if (k < 6)
            continue;
        fake_gpu_t *g = &gpus[n++];
        snprintf(g->name, sizeof(g->name), "%s", trim(field[0]));
        g->total = figure(field[1]);
        g->used = figure(field[2]);
        g->util = figure(field[3]);
        g->power = figure(field[4]);
        g->temp = figure(field[5]);
        g->nxids = 0;
        for (char *rest = k > 6 ? trim(field[6]) : NULL, *x;
             rest && g->nxids < MAX_XIDS && (x = strsep(&rest, ",")) != NULL;)
            if (*trim(x))
                g->xids[g->nxids++] = strtoull(trim(x), NULL, 10);
        g->ecc = k > 7 ? figure(field[7]) : 0;
    }
    fclose(f);
    return n;
}

/* The GPU behind handle h, as the file says now; NULL when there is none. */
static const fake_gpu_t *gpu_of(nvml_device_t h, fake_gpu_t *gpus)
{
    const char *p = (const char *)h;
    int n = load(gpus);
    if (p < handles || p >= handles + MAX_GPUS || p - handles >= n)
        return NULL;
    return &gpus[p - handles];
}

int nvmlInit_v2(void)
{
    fake_gpu_t gpus[MAX_GPUS];
    return load(gpus) < 0 ? NVML_ERROR_DRIVER_NOT_LOADED : NVML_SUCCESS;
}

int nvmlShutdown(void)
{
    return NVML_SUCCESS;
}

int nvmlDeviceGetCount_v2(unsigned int *count)
{
    fake_gpu_t gpus[MAX_GPUS];
    int n = load(gpus);
    if (!count)
        return NVML_ERROR_INVALID_ARGUMENT;
    *count = n < 0 ? 0 : (unsigned int)n;
    return NVML_SUCCESS;
}

int nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvml_device_t *h)
{
    fake_gpu_t gpus[MAX_GPUS];
    int n = load(gpus);
    if (!h || n < 0 || index >= (unsigned int)n)
        return NVML_ERROR_INVALID_ARGUMENT;
    *h = (nvml_device_t)(void *)&handles[index];
    return NVML_SUCCESS;
}

int nvmlDeviceGetName(nvml_device_t h, char *name, unsigned int len)
{
    fake_gpu_t gpus[MAX_GPUS];
    const fake_gpu_t *g = gpu_of(h, gpus);
    if (!g || !name)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(g->name) >= len)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(name, g->name, strlen(g->name) + 1);
    return NVML_SUCCESS;
}

/* A UUID made from the GPU's index, as stable as the real one. */
int nvmlDeviceGetUUID(nvml_device_t h, char *uuid, unsigned int len)
{
    fake_gpu_t gpus[MAX_GPUS];
    const fake_gpu_t *g = gpu_of(h, gpus);
    if (!g || !uuid)
        return NVML_ERROR_INVALID_ARGUMENT;
    int n = snprintf(uuid, len, "GPU-fa4e0000-0000-0000-0000-%012d",
                     (int)((char *)(void *)h - handles));
    return n < 0 || (unsigned int)n >= len ? NVML_ERROR_INSUFFICIENT_SIZE : NVML_SUCCESS;
}

int nvmlDeviceGetMemoryInfo(nvml_device_t h, nvml_memory_t *mem)
{
    fake_gpu_t gpus[MAX_GPUS];
    const fake_gpu_t *g = gpu_of(h, gpus);
    if (!g || !mem)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (g->total < 0 || g->used < 0)
        return NVML_ERROR_NOT_SUPPORTED;
    mem->total = (unsigned long long)g->total;
    mem->used = (unsigned long long)g->used;
    mem->free = mem->used < mem->total ? mem->total - mem->used : 0;
    return NVML_SUCCESS;
}

int nvmlDeviceGetUtilizationRates(nvml_device_t h, nvml_utilization_t *u)
{
    fake_gpu_t gpus[MAX_GPUS];
    const fake_gpu_t *g = gpu_of(h, gpus);
    if (!g || !u)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (g->util < 0)
        return NVML_ERROR_NOT_SUPPORTED;
    u->gpu = (unsigned int)g->util;
    u->memory = 0;
    return NVML_SUCCESS;
}

int nvmlDeviceGetPowerUsage(nvml_device_t h, unsigned int *mw)
{
    fake_gpu_t gpus[MAX_GPUS];
    const fake_gpu_t *g = gpu_of(h, gpus);
    if (!g || !mw)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (g->power < 0)
        return NVML_ERROR_NOT_SUPPORTED;
    *mw = (unsigned int)(g->power * 1000.0 + 0.5);
    return NVML_SUCCESS;
}

int nvmlDeviceGetTemperature(nvml_device_t h, int sensor, unsigned int *temp)
{
    fake_gpu_t gpus[MAX_GPUS];
    const fake_gpu_t *g = gpu_of(h, gpus);
    if (!g || !temp || sensor != 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (g->temp < 0)
        return NVML_ERROR_NOT_SUPPORTED;
    *temp = (unsigned int)g->temp;
    return NVML_SUCCESS;
}

int nvmlSystemGetDriverVersion(char *version, unsigned int len)
{
    if (!version || len < 8)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    snprintf(version, len, "550.fake");
    return NVML_SUCCESS;
}

int nvmlSystemGetCudaDriverVersion(int *version)
{
    if (!version)
        return NVML_ERROR_INVALID_ARGUMENT;
    *version = 12040;
    return NVML_SUCCESS;
}

int nvmlDeviceGetTotalEccErrors(nvml_device_t h, int type, int counter,
                                unsigned long long *count)
{
    fake_gpu_t gpus[MAX_GPUS];
    const fake_gpu_t *g = gpu_of(h, gpus);
    if (!g || !count || type != 1 || counter != 0) /* uncorrected, volatile only */
        return NVML_ERROR_INVALID_ARGUMENT;
    if (g->ecc < 0)
        return NVML_ERROR_NOT_SUPPORTED;
    *count = (unsigned long long)g->ecc;
    return NVML_SUCCESS;
}

int nvmlEventSetCreate(fake_set_t **set)
{
    if (!set)
        return NVML_ERROR_INVALID_ARGUMENT;
    *set = calloc(1, sizeof(**set));
    return *set ? NVML_SUCCESS : NVML_ERROR_INVALID_ARGUMENT;
}

int nvmlDeviceRegisterEvents(nvml_device_t h, unsigned long long types, fake_set_t *set)
{
    fake_gpu_t gpus[MAX_GPUS];
    const char *p = (const char *)h;
    if (!set || !gpu_of(h, gpus) || !(types & NVML_EVENT_XID))
        return NVML_ERROR_INVALID_ARGUMENT;
    set->registered[p - handles] = 1;
    return NVML_SUCCESS;
}

/* The next XID not yet told to set, at once; NVML_ERROR_TIMEOUT when none (the
 * fake never waits). */
int nvmlEventSetWait_v2(fake_set_t *set, nvml_event_t *ev, unsigned int timeout_ms)
{
    (void)timeout_ms;
    fake_gpu_t gpus[MAX_GPUS];
    int n = load(gpus);
    if (!set || !ev)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (int i = 0; i < n; i++) {
        if (!set->registered[i] || set->told[i] >= gpus[i].nxids)
            continue;
        memset(ev, 0, sizeof(*ev));
        ev->device = (nvml_device_t)(void *)&handles[i];
        ev->type = NVML_EVENT_XID;
        ev->data = gpus[i].xids[set->told[i]++];
        return NVML_SUCCESS;
    }
    return NVML_ERROR_TIMEOUT;
}

int nvmlEventSetFree(fake_set_t *set)
{
    free(set);
    return NVML_SUCCESS;
}
