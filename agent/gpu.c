/* gpu.c - this node's GPUs: NVML via dlopen ("auto"), "none", or a declared list. */
#include "gpu.h"

#include <ctype.h>
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

/* The few NVML types and calls we use, declared here so that building needs no
 * NVML headers and running needs no NVML library (it is loaded when present). */
typedef int nvml_return_t; /* nvmlReturn_t: 0 is NVML_SUCCESS */
typedef struct nvml_device *nvml_device_t;
typedef struct {
    unsigned long long total, free, used;
} nvml_memory_t;
typedef struct {
    unsigned int gpu, memory; /* percent of the last sample period busy */
} nvml_utilization_t;

typedef struct nvml_event_set *nvml_event_set_t;
typedef struct {
    nvml_device_t device;
    unsigned long long type, data; /* data: the XID's number */
    unsigned int gpu_instance, compute_instance;
} nvml_event_t;

#define NVML_SUCCESS 0
#define NVML_TEMPERATURE_GPU 0 /* nvmlTemperatureSensors_t: the GPU die */
#define NVML_EVENT_XID 0x8ULL  /* nvmlEventTypeXidCriticalError */
#define NVML_ECC_UNCORRECTED 1 /* nvmlMemoryErrorType_t */
#define NVML_ECC_VOLATILE 0    /* nvmlEccCounterType_t: since the driver loaded */
#define NVML_EVENTS_PER_REFRESH 64
#define NVML_DEFAULT_LIBRARY "libnvidia-ml.so.1"
#define NVML_DRIVER_BUFFER 80

typedef struct {
    nvml_return_t (*init)(void);
    nvml_return_t (*shutdown)(void);
    nvml_return_t (*count)(unsigned int *);
    nvml_return_t (*handle)(unsigned int, nvml_device_t *);
    nvml_return_t (*name)(nvml_device_t, char *, unsigned int);
    nvml_return_t (*uuid)(nvml_device_t, char *, unsigned int); /* NULL: not there */
    nvml_return_t (*memory)(nvml_device_t, nvml_memory_t *);
    nvml_return_t (*driver)(char *, unsigned int);
    nvml_return_t (*cuda)(int *);
    /* optional: NULL when the library lacks them (the figure is then left out) */
    nvml_return_t (*util)(nvml_device_t, nvml_utilization_t *);
    nvml_return_t (*power)(nvml_device_t, unsigned int *); /* milliwatts */
    nvml_return_t (*temp)(nvml_device_t, int, unsigned int *);
    nvml_return_t (*ecc)(nvml_device_t, int, int, unsigned long long *);
    nvml_return_t (*set_create)(nvml_event_set_t *);
    nvml_return_t (*set_register)(nvml_device_t, unsigned long long, nvml_event_set_t);
    nvml_return_t (*set_wait)(nvml_event_set_t, nvml_event_t *, unsigned int);
    nvml_return_t (*set_free)(nvml_event_set_t);
} nvml_api_t;

struct br_gpus {
    const char *source;
    int n;
    br_gpu_t *gpus;
    void *lib; /* NVML library handle, NVML initialised while set */
    nvml_api_t api;
    nvml_device_t *handles; /* per GPU, NVML only */
    nvml_event_set_t events; /* XIDs of every GPU that takes them; NULL: none */
    char driver[NVML_DRIVER_BUFFER];
    char cuda[16];
};

/* ---- declared lists ------------------------------------------------------------- */

static char *trim(char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    size_t n = strlen(s);
    while (n > 0 && isspace((unsigned char)s[n - 1]))
        s[--n] = '\0';
    return s;
}

static br_gpu_t *add_gpu(br_gpus_t *g)
{
    br_gpu_t *v = realloc(g->gpus, (size_t)(g->n + 1) * sizeof(*v));
    if (!v)
        return NULL;
    g->gpus = v;
    memset(&v[g->n], 0, sizeof(v[g->n]));
    v[g->n].index = g->n;
    return &v[g->n++];
}

/* One "MODEL:VRAM" entry (entry is trimmed and writable). */
static int parse_entry(br_gpus_t *g, char *entry, br_err_t *err)
{
    char *colon = strrchr(entry, ':');
    if (!*entry)
        return br_errf(err, EINVAL, "--gpus: empty entry (use MODEL:VRAM,...)");
    char shown[BR_ERR_TEXT / 2];
    br_strlcpy(shown, entry, sizeof(shown));
    if (!colon)
        return br_errf(err, EINVAL, "--gpus: entry '%s' needs MODEL:VRAM", shown);
    *colon = '\0';
    char *model = trim(entry), *vram = trim(colon + 1);
    if (!*model || !*vram)
        return br_errf(err, EINVAL, "--gpus: entry '%s' needs MODEL:VRAM", shown);
    if (strlen(model) >= sizeof(g->gpus[0].model))
        return br_errf(err, EINVAL, "--gpus: entry '%s': model name too long", shown);
    uint64_t bytes;
    if (br_parse_size(vram, &bytes, err) < 0) {
        br_err_prefix(err, "--gpus: entry '%s'", shown);
        return -1;
    }
    if (bytes == 0)
        return br_errf(err, EINVAL, "--gpus: entry '%s' has no VRAM", shown);
    br_gpu_t *gpu = add_gpu(g);
    if (!gpu)
        return br_errf(err, ENOMEM, "out of memory");
    br_strlcpy(gpu->model, model, sizeof(gpu->model));
    gpu->vram_total = gpu->vram_free = bytes;
    return 0;
}

static int parse_list(br_gpus_t *g, const char *spec, br_err_t *err)
{
    char *copy = strdup(spec);
    if (!copy)
        return br_errf(err, ENOMEM, "out of memory");
    int rc = 0;
    char *rest = copy, *entry;
    while (rc == 0 && (entry = strsep(&rest, ",")) != NULL)
        rc = parse_entry(g, trim(entry), err);
    free(copy);
    g->source = "declared";
    return rc;
}

/* ---- NVML ----------------------------------------------------------------------- */

static int nvml_bind(void *lib, nvml_api_t *api)
{
    static const char *const names[] = {
        "nvmlInit_v2",
        "nvmlShutdown",
        "nvmlDeviceGetCount_v2",
        "nvmlDeviceGetHandleByIndex_v2",
        "nvmlDeviceGetName",
        "nvmlDeviceGetMemoryInfo",
        "nvmlSystemGetDriverVersion",
        "nvmlSystemGetCudaDriverVersion",
    };
    void *fns[sizeof(names) / sizeof(names[0])];
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        if (!(fns[i] = dlsym(lib, names[i])))
            return -1;
    }
    /* POSIX guarantees data and function pointers convert for dlsym's sake. */
    memcpy(&api->init, &fns[0], sizeof(void *));
    memcpy(&api->shutdown, &fns[1], sizeof(void *));
    memcpy(&api->count, &fns[2], sizeof(void *));
    memcpy(&api->handle, &fns[3], sizeof(void *));
    memcpy(&api->name, &fns[4], sizeof(void *));
    memcpy(&api->memory, &fns[5], sizeof(void *));
    memcpy(&api->driver, &fns[6], sizeof(void *));
    memcpy(&api->cuda, &fns[7], sizeof(void *));
    void *fn;
    if ((fn = dlsym(lib, "nvmlDeviceGetUUID")))
        memcpy(&api->uuid, &fn, sizeof(void *));
    if ((fn = dlsym(lib, "nvmlDeviceGetUtilizationRates")))
        memcpy(&api->util, &fn, sizeof(void *));
    if ((fn = dlsym(lib, "nvmlDeviceGetPowerUsage")))
        memcpy(&api->power, &fn, sizeof(void *));
    if ((fn = dlsym(lib, "nvmlDeviceGetTemperature")))
        memcpy(&api->temp, &fn, sizeof(void *));
    if ((fn = dlsym(lib, "nvmlDeviceGetTotalEccErrors")))
        memcpy(&api->ecc, &fn, sizeof(void *));
    void *ev[4] = {dlsym(lib, "nvmlEventSetCreate"), dlsym(lib, "nvmlDeviceRegisterEvents"),
                   dlsym(lib, "nvmlEventSetWait_v2"), dlsym(lib, "nvmlEventSetFree")};
    if (ev[0] && ev[1] && ev[2] && ev[3]) { /* events: all four, or none */
        memcpy(&api->set_create, &ev[0], sizeof(void *));
        memcpy(&api->set_register, &ev[1], sizeof(void *));
        memcpy(&api->set_wait, &ev[2], sizeof(void *));
        memcpy(&api->set_free, &ev[3], sizeof(void *));
    }
    return 0;
}

static void nvml_close(br_gpus_t *g)
{
    if (g->events) {
        g->api.set_free(g->events);
        g->events = NULL;
    }
    if (g->lib) {
        g->api.shutdown();
        dlclose(g->lib);
        g->lib = NULL;
    }
}

static void nvml_versions(br_gpus_t *g)
{
    int cuda = 0;
    if (g->api.driver(g->driver, sizeof(g->driver)) != NVML_SUCCESS)
        g->driver[0] = '\0';
    g->driver[sizeof(g->driver) - 1] = '\0';
    if (g->api.cuda(&cuda) == NVML_SUCCESS && cuda > 0)
        snprintf(g->cuda, sizeof(g->cuda), "%d.%d", cuda / 1000, cuda % 1000 / 10);
}

/* One GPU's live figures; -1 when its memory could not be read. */
static int nvml_sample(const nvml_api_t *api, nvml_device_t h, br_gpu_t *gpu)
{
    nvml_memory_t mem;
    nvml_utilization_t util;
    unsigned int mw, temp;
    gpu->have = 0;
    if (!h)
        return -1;
    int rc = -1;
    if (api->memory(h, &mem) == NVML_SUCCESS) {
        gpu->vram_total = mem.total;
        gpu->vram_free = mem.free;
        gpu->vram_used = mem.used;
        gpu->have |= BR_GPU_MEMORY;
        rc = 0;
    }
    if (api->util && api->util(h, &util) == NVML_SUCCESS && util.gpu <= 100) {
        gpu->util = (int)util.gpu;
        gpu->have |= BR_GPU_UTIL;
    }
    if (api->power && api->power(h, &mw) == NVML_SUCCESS) {
        gpu->power_w = mw / 1000.0;
        gpu->have |= BR_GPU_POWER;
    }
    if (api->temp && api->temp(h, NVML_TEMPERATURE_GPU, &temp) == NVML_SUCCESS &&
        temp < 1000) {
        gpu->temp_c = (int)temp;
        gpu->have |= BR_GPU_TEMP;
    }
    unsigned long long ecc;
    if (api->ecc && api->ecc(h, NVML_ECC_UNCORRECTED, NVML_ECC_VOLATILE, &ecc) == NVML_SUCCESS) {
        gpu->ecc_uncorrected = ecc;
        gpu->have |= BR_GPU_ECC;
    }
    return rc;
}

/* Read one device; a device NVML cannot describe keeps its index, as CUDA counts it. */
static void nvml_device(br_gpus_t *g, br_gpu_t *gpu, nvml_device_t *h)
{
    if (g->api.handle((unsigned int)gpu->index, h) != NVML_SUCCESS) {
        *h = NULL;
        br_strlcpy(gpu->model, "unknown GPU", sizeof(gpu->model));
        return;
    }
    if (g->api.name(*h, gpu->model, sizeof(gpu->model)) != NVML_SUCCESS)
        br_strlcpy(gpu->model, "unknown GPU", sizeof(gpu->model));
    gpu->model[sizeof(gpu->model) - 1] = '\0';
    if (g->api.uuid && g->api.uuid(*h, gpu->uuid, sizeof(gpu->uuid)) != NVML_SUCCESS)
        gpu->uuid[0] = '\0';
    gpu->uuid[sizeof(gpu->uuid) - 1] = '\0';
    nvml_sample(&g->api, *h, gpu);
}

static int nvml_devices(br_gpus_t *g, unsigned int count)
{
    g->handles = calloc(count, sizeof(*g->handles));
    if (!g->handles)
        return -1;
    for (unsigned int i = 0; i < count; i++) {
        br_gpu_t *gpu = add_gpu(g);
        if (!gpu)
            return -1;
        nvml_device(g, gpu, &g->handles[i]);
    }
    return 0;
}

/* NVML when it loads and finds devices; anything short of that means no GPUs. */
static int nvml_probe(br_gpus_t *g, br_err_t *err)
{
    const char *path = getenv("BRAMBLE_NVML_LIBRARY");
    unsigned int count = 0;
    g->source = "none";
    g->lib = dlopen(path && *path ? path : NVML_DEFAULT_LIBRARY, RTLD_NOW | RTLD_LOCAL);
    if (!g->lib)
        return 0;
    if (nvml_bind(g->lib, &g->api) < 0 || g->api.init() != NVML_SUCCESS) {
        dlclose(g->lib);
        g->lib = NULL;
        return 0;
    }
    if (g->api.count(&count) != NVML_SUCCESS || count == 0) {
        nvml_close(g);
        return 0;
    }
    if (nvml_devices(g, count) < 0)
        return br_errf(err, ENOMEM, "out of memory listing GPUs");
    nvml_versions(g);
    /* XIDs come as events: one set for every GPU that takes them */
    if (g->api.set_create && g->api.set_create(&g->events) == NVML_SUCCESS) {
        int any = 0;
        for (int i = 0; i < g->n; i++)
            any |= g->handles[i] &&
                   g->api.set_register(g->handles[i], NVML_EVENT_XID, g->events) ==
                       NVML_SUCCESS;
        if (!any) {
            g->api.set_free(g->events);
            g->events = NULL;
        }
    }
    g->source = "nvml";
    return 0;
}

/* ---- the interface -------------------------------------------------------------- */

br_gpus_t *br_gpus_new(const char *spec, br_err_t *err)
{
    br_gpus_t *g = calloc(1, sizeof(*g));
    if (!g)
        return br_errp(err, ENOMEM, "out of memory");
    g->source = "none";
    int rc = 0;
    if (!spec || strcmp(spec, "auto") == 0)
        rc = nvml_probe(g, err);
    else if (strspn(spec, " \t") == strlen(spec))
        rc = br_errf(err, EINVAL, "--gpus: empty (use auto, none or MODEL:VRAM,...)");
    else if (strcmp(spec, "none") != 0)
        rc = parse_list(g, spec, err);
    if (rc < 0) {
        int saved = errno;
        br_gpus_destroy(&g);
        errno = saved;
    }
    return g;
}

void br_gpus_destroy(br_gpus_t **gpus)
{
    if (!gpus || !*gpus)
        return;
    int saved = errno;
    br_gpus_t *g = *gpus;
    nvml_close(g);
    free(g->handles);
    free(g->gpus);
    free(g);
    *gpus = NULL;
    errno = saved;
}

int br_gpus_count(const br_gpus_t *gpus)
{
    return gpus ? gpus->n : 0;
}

const br_gpu_t *br_gpus_get(const br_gpus_t *gpus, int i)
{
    if (!gpus || i < 0 || i >= gpus->n)
        return NULL;
    return &gpus->gpus[i];
}

const char *br_gpus_source(const br_gpus_t *gpus)
{
    return gpus ? gpus->source : "none";
}

const char *br_gpus_driver_version(const br_gpus_t *gpus)
{
    return gpus ? gpus->driver : "";
}

const char *br_gpus_cuda_version(const br_gpus_t *gpus)
{
    return gpus ? gpus->cuda : "";
}

int br_gpus_refresh(br_gpus_t *gpus)
{
    if (!gpus || !gpus->lib)
        return 0;
    int rc = 0;
    for (int i = 0; i < gpus->n; i++)
        if (nvml_sample(&gpus->api, gpus->handles[i], &gpus->gpus[i]) < 0)
            rc = -1;
    nvml_event_t ev;
    for (int k = 0; gpus->events && k < NVML_EVENTS_PER_REFRESH &&
                    gpus->api.set_wait(gpus->events, &ev, 0) == NVML_SUCCESS;
         k++) {
        for (int i = 0; i < gpus->n; i++) /* whose: by its handle */
            if (ev.device && ev.device == gpus->handles[i] && (ev.type & NVML_EVENT_XID)) {
                gpus->gpus[i].xid_count++;
                gpus->gpus[i].xid_last = ev.data;
            }
    }
    if (rc < 0)
        errno = EIO;
    return rc;
}

double br_gpus_power(const br_gpus_t *gpus, int *known)
{
    double w = 0;
    int n = 0;
    for (int i = 0; i < br_gpus_count(gpus); i++)
        if (gpus->gpus[i].have & BR_GPU_POWER) {
            w += gpus->gpus[i].power_w;
            n++;
        }
    if (known)
        *known = n;
    return w;
}

static json_t *gpu_json(const br_gpu_t *gpu)
{
    json_t *o = json_pack("{s:i, s:s, s:I, s:I}", "index", gpu->index, "model", gpu->model,
                          "vram_total", (json_int_t)gpu->vram_total, "vram_free",
                          (json_int_t)gpu->vram_free);
    if (o && gpu->uuid[0]) /* (NVML's GPU-...; what CDI names a GPU by) */
        json_object_set_new(o, "uuid", json_string(gpu->uuid));
    return o;
}

json_t *br_gpus_to_json(const br_gpus_t *gpus)
{
    json_t *arr = json_array();
    for (int i = 0; arr && i < br_gpus_count(gpus); i++) {
        if (json_array_append_new(arr, gpu_json(&gpus->gpus[i])) < 0) {
            json_decref(arr);
            return NULL;
        }
    }
    return arr;
}

static json_t *live_json(const br_gpu_t *gpu)
{
    json_t *o = json_pack("{s:i}", "index", gpu->index);
    if (!o)
        return NULL;
    if (gpu->have & BR_GPU_MEMORY) {
        json_object_set_new(o, "vram_free", json_integer((json_int_t)gpu->vram_free));
        json_object_set_new(o, "vram_used", json_integer((json_int_t)gpu->vram_used));
    }
    if (gpu->have & BR_GPU_UTIL)
        json_object_set_new(o, "util", json_integer(gpu->util));
    if (gpu->have & BR_GPU_POWER)
        json_object_set_new(o, "power_w", json_real(gpu->power_w));
    if (gpu->have & BR_GPU_TEMP)
        json_object_set_new(o, "temp_c", json_integer(gpu->temp_c));
    if (gpu->have & BR_GPU_ECC)
        json_object_set_new(o, "ecc_uncorrected", json_integer((json_int_t)gpu->ecc_uncorrected));
    if (gpu->xid_count) {
        json_object_set_new(o, "xid_count", json_integer((json_int_t)gpu->xid_count));
        json_object_set_new(o, "xid_last", json_integer((json_int_t)gpu->xid_last));
    }
    return o;
}

json_t *br_gpus_live_json(const br_gpus_t *gpus)
{
    if (!gpus || !gpus->lib)
        return NULL;
    json_t *arr = json_array();
    for (int i = 0; arr && i < gpus->n; i++) {
        if (json_array_append_new(arr, live_json(&gpus->gpus[i])) < 0) {
            json_decref(arr);
            return NULL;
        }
    }
    return arr;
}
