/*
 * A fake libnvidia-ml.so.1 for bubblewatch's tests.
 *
 * The real pynvml module loads this library and calls it through ctypes with
 * NVML's real signatures and struct layouts. It answers from a simulator
 * timeline file (docs/timeline-format.md) and applies NVML's own averaging:
 *
 *   nvmlDeviceGetPowerUsage          mean power over the last 1 s (mW)
 *   field 186 (POWER_INSTANT)        power of the current timeline cell (mW)
 *   nvmlDeviceGetTotalEnergy...      integral of power since the timeline start (mJ)
 *   GPM SM_UTIL/OCCUPANCY/TENSOR     mean between the two GPM samples (percent)
 *   GPM PCIE_TX/RX_PER_SEC           mean between the two GPM samples (MiB/s)
 *   nvmlDeviceGetUtilizationRates    kernel-busy share of the last completed 1/6 s period
 *   nvmlDeviceGetSamples             driver buffers filled at a fixed rate
 *   nvmlDeviceGetPcieThroughput      mean over the last 20 ms (KB/s)
 *   nvmlDeviceGetMemoryInfo[_v2]     allocations = the memory of the GPU's compute
 *                                    processes (BUBBLEWATCH_FAKE_NVML_PROCS); v2 gives the
 *                                    driver's reserve apart, v1's `used` includes it
 *
 * Wall time maps to timeline time as t = now - start (looping), where start is
 * when nvmlInit first opened the timeline. Tests may drive a manual clock with
 * bwfake_set_time(epoch_s).
 *
 * Configuration and faults come from the environment, read at every nvmlInit:
 *   BUBBLEWATCH_FAKE_NVML_TIMELINE   path of the .bwtl file (unset: no driver)
 *   BUBBLEWATCH_FAKE_NVML_INIT_ERROR nvmlInit returns this NVML error code
 *   BUBBLEWATCH_FAKE_NVML_NO_GPUS    1: the driver sees no GPU
 *   BUBBLEWATCH_FAKE_NVML_LOST       "gpu@after_s[-until_s],...": GPU_IS_LOST on every
 *                                    call for that GPU in that span of timeline time
 *   BUBBLEWATCH_FAKE_NVML_NO_GPM     "all" or "0,3": GPM not supported (older card)
 *   BUBBLEWATCH_FAKE_NVML_NO_INSTANT_POWER  "all" or GPU list: field 186 NOT_SUPPORTED
 *   BUBBLEWATCH_FAKE_NVML_INSTANT_POWER_USAGE  "all" or GPU list: nvmlDeviceGetPowerUsage
 *                                    returns the instant cell, as on GA100 and older (else
 *                                    the mean over the last 1 s, Ampere except GA100 and newer)
 *   BUBBLEWATCH_FAKE_NVML_EMPTY_SAMPLES     "all" or GPU list: sample buffers stay empty
 *   BUBBLEWATCH_FAKE_NVML_SLOW       "nvmlFunctionName:ms" or "*:ms": that call sleeps
 *   BUBBLEWATCH_FAKE_NVML_SAMPLE_PERIOD_MS  power sample buffer period (default 100)
 *   BUBBLEWATCH_FAKE_NVML_PROCS      "gpu:pid[:mem_mib],...": running compute processes
 *   BUBBLEWATCH_FAKE_NVML_NO_MEMORY_V2  1: nvmlDeviceGetMemoryInfo_v2 answers FUNCTION_NOT_FOUND
 *                                    (pynvml's answer on a driver without the symbol)
 *   BUBBLEWATCH_FAKE_NVML_XID        "gpu@t_s:xid,...": Xid critical events (at most 256)
 *   BUBBLEWATCH_FAKE_NVML_NVLINK     1: GPUs are NVLink peers (P2P status OK)
 *   BUBBLEWATCH_FAKE_NVML_TOPOLOGY_LEVEL  common-ancestor level (default 50, SYSTEM)
 *   BUBBLEWATCH_FAKE_NVML_NO_TOPOLOGY     1: P2P status and common ancestor are NOT_SUPPORTED
 *
 * Not thread-safe: bubblewatch calls NVML from one thread.
 */
#define _GNU_SOURCE
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define EXPORT __attribute__((visibility("default")))

/* NVML return codes (pynvml NVML_ERROR_*). */
enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_UNINITIALIZED = 1,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3,
    NVML_ERROR_NOT_FOUND = 6,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_DRIVER_NOT_LOADED = 9,
    NVML_ERROR_TIMEOUT = 10,
    NVML_ERROR_FUNCTION_NOT_FOUND = 13,
    NVML_ERROR_GPU_IS_LOST = 15,
    NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
    NVML_ERROR_UNKNOWN = 999,
};

#define MAX_GPUS 64
#define N_FIELDS 10
#define MAX_PROCS 64
#define MAX_XIDS 256 /* more than the sampler reads in one poll (64) */
#define UTIL_PERIOD_S (1.0 / 6.0)
#define SAMPLE_BUFFER_LEN 120
#define GPM_MIN_INTERVAL_S 0.1
#define FI_POWER_INSTANT 186
#define XID_EVENT 0x8ULL
#define GPM_METRICS_MAX 477
/* Frame buffer of an H100 80GB as nvidia-smi reports it; the reserve is illustrative
 * (its size varies by card and driver). */
#define FB_TOTAL_BYTES (81559ULL << 20)
#define FB_RESERVED_BYTES (512ULL << 20)
/* nvml.h: nvmlMemory_v2 = NVML_STRUCT_VERSION(Memory, 2) = sizeof(nvmlMemory_v2_t) | 2 << 24 */
#define NVML_MEMORY_V2 ((unsigned int)(sizeof(nvmlMemory_v2_t) | (2u << 24)))

enum { F_POWER, F_SM, F_OCC, F_TENSOR, F_BUSY, F_CLOCK, F_REASONS, F_TEMP, F_TX, F_RX };

/* ---- NVML structs, laid out as in pynvml.py ---- */

typedef struct fake_device *nvmlDevice_t;

typedef struct {
    unsigned int gpu;
    unsigned int memory;
} nvmlUtilization_t;

typedef struct {
    unsigned long long total;
    unsigned long long free;
    unsigned long long used; /* reserved + allocated */
} nvmlMemory_t;

typedef struct {
    unsigned int version;
    unsigned long long total;
    unsigned long long reserved;
    unsigned long long free;
    unsigned long long used; /* allocated */
} nvmlMemory_v2_t;
/* pynvml: nvmlMemory_v2 = 0x02000028 */
_Static_assert(sizeof(nvmlMemory_v2_t) == 0x28, "nvmlMemory_v2_t is 40 bytes in nvml.h");

typedef union {
    double dVal;
    unsigned int uiVal;
    unsigned long ulVal;
    unsigned long long ullVal;
    signed long long sllVal;
    signed int siVal;
    unsigned short usVal;
} nvmlValue_t;

typedef struct {
    unsigned long long timeStamp;
    nvmlValue_t sampleValue;
} nvmlSample_t;

typedef struct {
    unsigned int fieldId;
    unsigned int scopeId;
    long long timestamp;
    long long latencyUsec;
    int valueType;
    int nvmlReturn;
    nvmlValue_t value;
} nvmlFieldValue_t;

typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
} nvmlProcessInfo_t;

typedef struct {
    char busIdLegacy[16];
    unsigned int domain;
    unsigned int bus;
    unsigned int device;
    unsigned int pciDeviceId;
    unsigned int pciSubSystemId;
    char busId[32];
} nvmlPciInfo_t;

typedef struct gpm_sample {
    int device;
    double t_s;
} *nvmlGpmSample_t;

typedef struct {
    const char *shortName;
    const char *longName;
    const char *unit;
} nvmlGpmMetricInfo_t;

typedef struct {
    unsigned int metricId;
    int nvmlReturn;
    double value;
    nvmlGpmMetricInfo_t metricInfo;
} nvmlGpmMetric_t;

typedef struct {
    unsigned int version;
    unsigned int numMetrics;
    nvmlGpmSample_t sample1;
    nvmlGpmSample_t sample2;
    nvmlGpmMetric_t metrics[GPM_METRICS_MAX];
} nvmlGpmMetricsGet_t;

typedef struct {
    unsigned int version;
    unsigned int isSupportedDevice;
} nvmlGpmSupport_t;

typedef struct {
    nvmlDevice_t device;
    unsigned long long eventType;
    unsigned long long eventData;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
} nvmlEventData_t;

typedef struct event_set {
    unsigned long long mask[MAX_GPUS];
    int delivered[MAX_XIDS];
} *nvmlEventSet_t;

/* ---- state ---- */

struct fake_device {
    int index;
    char uuid[96];
    char name[96];
    double power_limit_w;
    double idle_power_w;
    const float *cells[N_FIELDS]; /* n_cells each */
    double *prefix[N_FIELDS];     /* n_cells + 1 running sums of cell values */
    int lost;
    double lost_from_s, lost_until_s;
    int no_gpm, no_instant_power, empty_samples, instant_power_usage;
};

struct xid {
    int gpu;
    double t_s;
    unsigned long long xid;
};

static struct {
    int refcount;
    char path[4096];
    int loaded;
    unsigned int n_gpus;
    uint64_t n_cells;
    double dt_s;
    float *data;
    struct fake_device dev[MAX_GPUS];
    double start_epoch_s;
    int manual_clock;
    double manual_epoch_s;
    int no_gpus;
    char slow_fn[128];
    int slow_ms;
    double sample_period_s;
    int no_memory_v2;
    int n_procs;
    struct { int gpu; unsigned int pid; unsigned long long mem; } procs[MAX_PROCS];
    int n_xids;
    struct xid xids[MAX_XIDS];
    int nvlink;
    int topology_level;
    int no_topology;
    unsigned long long calls;
    unsigned long long gpm_too_close;
} S;

/* ---- test controls (not NVML) ---- */

EXPORT void bwfake_set_time(double epoch_s) {
    S.manual_clock = epoch_s >= 0;
    S.manual_epoch_s = epoch_s;
}

EXPORT unsigned long long bwfake_calls(void) { return S.calls; }

static void free_timeline(void);

/* Forget the loaded timeline: the next nvmlInit reopens it and restarts its clock. */
EXPORT void bwfake_reset(void) {
    free_timeline();
    S.path[0] = 0;
    S.refcount = 0;
    S.calls = 0;
    S.gpm_too_close = 0;
}

EXPORT unsigned long long bwfake_gpm_too_close(void) { return S.gpm_too_close; }

EXPORT double bwfake_timeline_time(void);

/* ---- helpers ---- */

static double now_epoch_s(void) {
    if (S.manual_clock) return S.manual_epoch_s;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

EXPORT double bwfake_timeline_time(void) { return now_epoch_s() - S.start_epoch_s; }

static void sleep_ms(double ms) {
    if (ms <= 0) return;
    struct timespec ts = {(time_t)(ms / 1000), (long)(fmod(ms, 1000.0) * 1e6)};
    nanosleep(&ts, NULL);
}

static int enter(const char *fn) {
    S.calls++;
    if (S.slow_ms > 0 && (strcmp(S.slow_fn, "*") == 0 || strcmp(S.slow_fn, fn) == 0))
        sleep_ms(S.slow_ms);
    return S.refcount > 0 ? NVML_SUCCESS : NVML_ERROR_UNINITIALIZED;
}

/* The device behind a handle, or NULL. *rc says why not. */
static struct fake_device *device_of(nvmlDevice_t h, int *rc) {
    if (h < &S.dev[0] || h >= &S.dev[S.n_gpus]) {
        *rc = NVML_ERROR_INVALID_ARGUMENT;
        return NULL;
    }
    double t = bwfake_timeline_time();
    if (h->lost && t >= h->lost_from_s && t < h->lost_until_s) {
        *rc = NVML_ERROR_GPU_IS_LOST;
        return NULL;
    }
    *rc = NVML_SUCCESS;
    return h;
}

#define ENTER_DEVICE(fn, h, d)                      \
    int rc_ = enter(fn);                            \
    if (rc_ != NVML_SUCCESS) return rc_;            \
    struct fake_device *d = device_of((h), &rc_);   \
    if (d == NULL) return rc_;

/* Integral of a field from timeline time 0 to t (any sign), looping. */
static double integral(const struct fake_device *d, int f, double t) {
    double len = (double)S.n_cells * S.dt_s;
    double k = floor(t / len);
    double r = t - k * len;
    uint64_t c = (uint64_t)(r / S.dt_s);
    if (c >= S.n_cells) c = S.n_cells - 1;
    double part = d->prefix[f][c] * S.dt_s + (r - (double)c * S.dt_s) * d->cells[f][c];
    return k * d->prefix[f][S.n_cells] * S.dt_s + part;
}

static double mean_over(const struct fake_device *d, int f, double a, double b) {
    if (b <= a) return d->cells[f][0];
    return (integral(d, f, b) - integral(d, f, a)) / (b - a);
}

static double value_at(const struct fake_device *d, int f, double t) {
    double len = (double)S.n_cells * S.dt_s;
    double r = t - floor(t / len) * len;
    uint64_t c = (uint64_t)(r / S.dt_s);
    if (c >= S.n_cells) c = S.n_cells - 1;
    return d->cells[f][c];
}

static int in_list(const char *spec, int gpu) {
    if (spec == NULL || *spec == 0) return 0;
    if (strcmp(spec, "all") == 0) return 1;
    const char *p = spec;
    while (*p) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p) return 0;
        if (v == gpu) return 1;
        p = (*end == ',') ? end + 1 : end;
        if (*end != ',' && *end != 0) return 0;
    }
    return 0;
}

static void free_timeline(void) {
    for (unsigned int g = 0; g < S.n_gpus; g++)
        for (int f = 0; f < N_FIELDS; f++) {
            free(S.dev[g].prefix[f]);
            S.dev[g].prefix[f] = NULL;
        }
    free(S.data);
    S.data = NULL;
    S.loaded = 0;
    S.n_gpus = 0;
}

static int load_timeline(const char *path) {
    FILE *fp = fopen(path, "rb");
    if (!fp) {
        fprintf(stderr, "fake_nvml: cannot open timeline %s\n", path);
        return 0;
    }
    char magic[8];
    uint32_t n_gpus, n_fields;
    uint64_t n_cells;
    double t0, dt;
    int ok = fread(magic, 1, 8, fp) == 8 && memcmp(magic, "BWTLINE1", 8) == 0 &&
             fread(&n_gpus, 4, 1, fp) == 1 && fread(&n_fields, 4, 1, fp) == 1 &&
             fread(&n_cells, 8, 1, fp) == 1 && fread(&t0, 8, 1, fp) == 1 &&
             fread(&dt, 8, 1, fp) == 1;
    if (!ok || n_gpus > MAX_GPUS || n_fields < N_FIELDS || n_cells == 0 || !(dt > 0)) {
        fprintf(stderr, "fake_nvml: %s is not a valid timeline file\n", path);
        fclose(fp);
        return 0;
    }
    S.n_gpus = n_gpus;
    S.n_cells = n_cells;
    S.dt_s = dt;
    for (uint32_t g = 0; g < n_gpus; g++) {
        struct fake_device *d = &S.dev[g];
        memset(d, 0, sizeof *d);
        d->index = (int)g;
        ok = fread(d->uuid, 1, 96, fp) == 96 && fread(d->name, 1, 96, fp) == 96 &&
             fread(&d->power_limit_w, 8, 1, fp) == 1 && fread(&d->idle_power_w, 8, 1, fp) == 1;
        d->uuid[95] = d->name[95] = 0;
        if (!ok) break;
    }
    size_t n = (size_t)n_gpus * n_fields * n_cells;
    S.data = ok ? malloc(n * sizeof(float)) : NULL;
    if (!S.data || fread(S.data, sizeof(float), n, fp) != n) {
        fprintf(stderr, "fake_nvml: %s is truncated\n", path);
        fclose(fp);
        S.n_gpus = 0;
        free(S.data);
        S.data = NULL;
        return 0;
    }
    fclose(fp);
    for (uint32_t g = 0; g < n_gpus; g++)
        for (int f = 0; f < N_FIELDS; f++) {
            struct fake_device *d = &S.dev[g];
            d->cells[f] = S.data + ((size_t)g * n_fields + f) * n_cells;
            d->prefix[f] = malloc((n_cells + 1) * sizeof(double));
            d->prefix[f][0] = 0;
            for (uint64_t c = 0; c < n_cells; c++)
                d->prefix[f][c + 1] = d->prefix[f][c] + d->cells[f][c];
        }
    snprintf(S.path, sizeof S.path, "%s", path);
    S.loaded = 1;
    S.start_epoch_s = now_epoch_s();
    return 1;
}

static void read_faults(void) {
    const char *e;
    for (unsigned int g = 0; g < S.n_gpus; g++) {
        struct fake_device *d = &S.dev[g];
        d->no_gpm = in_list(getenv("BUBBLEWATCH_FAKE_NVML_NO_GPM"), (int)g);
        d->no_instant_power = in_list(getenv("BUBBLEWATCH_FAKE_NVML_NO_INSTANT_POWER"), (int)g);
        d->empty_samples = in_list(getenv("BUBBLEWATCH_FAKE_NVML_EMPTY_SAMPLES"), (int)g);
        d->instant_power_usage =
            in_list(getenv("BUBBLEWATCH_FAKE_NVML_INSTANT_POWER_USAGE"), (int)g);
        d->lost = 0;
    }
    if ((e = getenv("BUBBLEWATCH_FAKE_NVML_LOST")) != NULL) {
        const char *p = e;
        while (*p) {
            int gpu;
            double from, until = INFINITY;
            int used = 0;
            if (sscanf(p, "%d@%lf%n", &gpu, &from, &used) < 2) break;
            p += used;
            if (*p == '-') {
                sscanf(p + 1, "%lf%n", &until, &used);
                p += used + 1;
            }
            if (gpu >= 0 && (unsigned)gpu < S.n_gpus) {
                S.dev[gpu].lost = 1;
                S.dev[gpu].lost_from_s = from;
                S.dev[gpu].lost_until_s = until;
            }
            if (*p == ',') p++;
            else break;
        }
    }
    e = getenv("BUBBLEWATCH_FAKE_NVML_NO_GPUS");
    S.no_gpus = e != NULL && strcmp(e, "1") == 0;
    S.slow_ms = 0;
    S.slow_fn[0] = 0;
    if ((e = getenv("BUBBLEWATCH_FAKE_NVML_SLOW")) != NULL) {
        const char *colon = strrchr(e, ':');
        if (colon && (size_t)(colon - e) < sizeof S.slow_fn) {
            memcpy(S.slow_fn, e, (size_t)(colon - e));
            S.slow_fn[colon - e] = 0;
            S.slow_ms = atoi(colon + 1);
        }
    }
    e = getenv("BUBBLEWATCH_FAKE_NVML_SAMPLE_PERIOD_MS");
    S.sample_period_s = (e && atof(e) > 0) ? atof(e) / 1000.0 : 0.1;
    e = getenv("BUBBLEWATCH_FAKE_NVML_NO_MEMORY_V2");
    S.no_memory_v2 = e != NULL && strcmp(e, "1") == 0;
    S.n_procs = 0;
    if ((e = getenv("BUBBLEWATCH_FAKE_NVML_PROCS")) != NULL) {
        const char *p = e;
        while (*p && S.n_procs < MAX_PROCS) {
            int gpu, used = 0;
            unsigned int pid;
            unsigned long long mib = 1024;
            if (sscanf(p, "%d:%u%n", &gpu, &pid, &used) < 2) break;
            p += used;
            if (*p == ':') {
                sscanf(p + 1, "%llu%n", &mib, &used);
                p += used + 1;
            }
            S.procs[S.n_procs].gpu = gpu;
            S.procs[S.n_procs].pid = pid;
            S.procs[S.n_procs].mem = mib << 20;
            S.n_procs++;
            if (*p == ',') p++;
            else break;
        }
    }
    S.n_xids = 0;
    if ((e = getenv("BUBBLEWATCH_FAKE_NVML_XID")) != NULL) {
        const char *p = e;
        while (*p && S.n_xids < MAX_XIDS) {
            int gpu, used = 0;
            double t;
            unsigned long long xid;
            if (sscanf(p, "%d@%lf:%llu%n", &gpu, &t, &xid, &used) < 3) break;
            p += used;
            S.xids[S.n_xids++] = (struct xid){gpu, t, xid};
            if (*p == ',') p++;
            else break;
        }
    }
    e = getenv("BUBBLEWATCH_FAKE_NVML_NVLINK");
    S.nvlink = e != NULL && strcmp(e, "1") == 0;
    e = getenv("BUBBLEWATCH_FAKE_NVML_TOPOLOGY_LEVEL");
    S.topology_level = e ? atoi(e) : 50;
    e = getenv("BUBBLEWATCH_FAKE_NVML_NO_TOPOLOGY");
    S.no_topology = e != NULL && strcmp(e, "1") == 0;
}

/* ---- init and system ---- */

EXPORT int nvmlInitWithFlags(unsigned int flags) {
    (void)flags;
    S.calls++;
    const char *err = getenv("BUBBLEWATCH_FAKE_NVML_INIT_ERROR");
    if (err && atoi(err) != 0) return atoi(err);
    const char *path = getenv("BUBBLEWATCH_FAKE_NVML_TIMELINE");
    if (path == NULL || *path == 0) return NVML_ERROR_DRIVER_NOT_LOADED;
    if (!S.loaded || strcmp(path, S.path) != 0) {
        free_timeline();
        if (!load_timeline(path)) return NVML_ERROR_UNKNOWN;
    }
    read_faults();
    S.refcount++;
    return NVML_SUCCESS;
}

EXPORT int nvmlInit_v2(void) { return nvmlInitWithFlags(0); }
EXPORT int nvmlInit(void) { return nvmlInitWithFlags(0); }

EXPORT int nvmlShutdown(void) {
    S.calls++;
    if (S.refcount <= 0) return NVML_ERROR_UNINITIALIZED;
    S.refcount--;
    return NVML_SUCCESS;
}

EXPORT const char *nvmlErrorString(int result) {
    switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT: return "Timeout";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    default: return "Unknown Error";
    }
}

static int copy_str(char *dst, unsigned int len, const char *src) {
    if (dst == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(src) + 1 > len) return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(dst, src, strlen(src) + 1);
    return NVML_SUCCESS;
}

EXPORT int nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    int rc = enter("nvmlSystemGetDriverVersion");
    return rc != NVML_SUCCESS ? rc : copy_str(version, length, "999.99-fake");
}

EXPORT int nvmlSystemGetNVMLVersion(char *version, unsigned int length) {
    int rc = enter("nvmlSystemGetNVMLVersion");
    return rc != NVML_SUCCESS ? rc : copy_str(version, length, "13.999.99-fake");
}

EXPORT int nvmlDeviceGetCount_v2(unsigned int *count) {
    int rc = enter("nvmlDeviceGetCount_v2");
    if (rc != NVML_SUCCESS) return rc;
    *count = S.no_gpus ? 0 : S.n_gpus;
    return NVML_SUCCESS;
}

EXPORT int nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
    int rc = enter("nvmlDeviceGetHandleByIndex_v2");
    if (rc != NVML_SUCCESS) return rc;
    if (S.no_gpus || index >= S.n_gpus || device == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    if (device_of(&S.dev[index], &rc) == NULL) return rc;
    *device = &S.dev[index];
    return NVML_SUCCESS;
}

/* ---- identity ---- */

EXPORT int nvmlDeviceGetIndex(nvmlDevice_t h, unsigned int *index) {
    ENTER_DEVICE("nvmlDeviceGetIndex", h, d);
    *index = (unsigned int)d->index;
    return NVML_SUCCESS;
}

EXPORT int nvmlDeviceGetUUID(nvmlDevice_t h, char *uuid, unsigned int length) {
    ENTER_DEVICE("nvmlDeviceGetUUID", h, d);
    return copy_str(uuid, length, d->uuid);
}

EXPORT int nvmlDeviceGetName(nvmlDevice_t h, char *name, unsigned int length) {
    ENTER_DEVICE("nvmlDeviceGetName", h, d);
    return copy_str(name, length, d->name);
}

EXPORT int nvmlDeviceGetPciInfo_v3(nvmlDevice_t h, nvmlPciInfo_t *pci) {
    ENTER_DEVICE("nvmlDeviceGetPciInfo_v3", h, d);
    memset(pci, 0, sizeof *pci);
    pci->bus = 0x10u + (unsigned)d->index;
    pci->pciDeviceId = 0x233510DEu;
    snprintf(pci->busId, sizeof pci->busId, "00000000:%02X:00.0", pci->bus);
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "0000:%02X:00.0", pci->bus);
    return NVML_SUCCESS;
}

EXPORT int nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t h, unsigned int *limit_mw) {
    ENTER_DEVICE("nvmlDeviceGetEnforcedPowerLimit", h, d);
    *limit_mw = (unsigned int)lround(d->power_limit_w * 1000.0);
    return NVML_SUCCESS;
}

EXPORT int nvmlDeviceGetPowerManagementLimit(nvmlDevice_t h, unsigned int *limit_mw) {
    ENTER_DEVICE("nvmlDeviceGetPowerManagementLimit", h, d);
    *limit_mw = (unsigned int)lround(d->power_limit_w * 1000.0);
    return NVML_SUCCESS;
}

/* ---- power and energy ---- */

EXPORT int nvmlDeviceGetPowerUsage(nvmlDevice_t h, unsigned int *power_mw) {
    ENTER_DEVICE("nvmlDeviceGetPowerUsage", h, d);
    double t = bwfake_timeline_time();
    double w = d->instant_power_usage ? value_at(d, F_POWER, t) : mean_over(d, F_POWER, t - 1.0, t);
    *power_mw = (unsigned int)lround(w * 1000.0);
    return NVML_SUCCESS;
}

EXPORT int nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t h, unsigned long long *energy_mj) {
    ENTER_DEVICE("nvmlDeviceGetTotalEnergyConsumption", h, d);
    double t = bwfake_timeline_time();
    /* The counter runs since driver load: start it at a non-zero value. */
    *energy_mj = 1000000ULL + (unsigned long long)llround(integral(d, F_POWER, t) * 1000.0);
    return NVML_SUCCESS;
}

EXPORT int nvmlDeviceGetFieldValues(nvmlDevice_t h, int count, nvmlFieldValue_t *values) {
    ENTER_DEVICE("nvmlDeviceGetFieldValues", h, d);
    if (count < 0 || (count > 0 && values == NULL)) return NVML_ERROR_INVALID_ARGUMENT;
    double now = now_epoch_s();
    double t = now - S.start_epoch_s;
    for (int i = 0; i < count; i++) {
        nvmlFieldValue_t *v = &values[i];
        v->timestamp = (long long)llround(now * 1e6);
        v->latencyUsec = 0;
        if (v->fieldId == FI_POWER_INSTANT && !d->no_instant_power) {
            v->valueType = 1; /* NVML_VALUE_TYPE_UNSIGNED_INT */
            v->value.uiVal = (unsigned int)lround(value_at(d, F_POWER, t) * 1000.0);
            v->nvmlReturn = NVML_SUCCESS;
        } else {
            v->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
        }
    }
    return NVML_SUCCESS;
}

/* ---- utilisation, clocks, temperature, PCIe ---- */

static double util_period_mean(const struct fake_device *d, double t) {
    double end = floor(t / UTIL_PERIOD_S) * UTIL_PERIOD_S;
    return mean_over(d, F_BUSY, end - UTIL_PERIOD_S, end);
}

EXPORT int nvmlDeviceGetUtilizationRates(nvmlDevice_t h, nvmlUtilization_t *util) {
    ENTER_DEVICE("nvmlDeviceGetUtilizationRates", h, d);
    double t = bwfake_timeline_time();
    util->gpu = (unsigned int)lround(100.0 * util_period_mean(d, t));
    util->memory = (unsigned int)lround(50.0 * util_period_mean(d, t));
    return NVML_SUCCESS;
}

EXPORT int nvmlDeviceGetClockInfo(nvmlDevice_t h, int type, unsigned int *clock_mhz) {
    ENTER_DEVICE("nvmlDeviceGetClockInfo", h, d);
    if (type != 1 /* NVML_CLOCK_SM */) return NVML_ERROR_NOT_SUPPORTED;
    *clock_mhz = (unsigned int)lround(value_at(d, F_CLOCK, bwfake_timeline_time()));
    return NVML_SUCCESS;
}

EXPORT int nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t h, unsigned long long *reasons) {
    ENTER_DEVICE("nvmlDeviceGetCurrentClocksEventReasons", h, d);
    *reasons = (unsigned long long)llround(value_at(d, F_REASONS, bwfake_timeline_time()));
    return NVML_SUCCESS;
}

EXPORT int nvmlDeviceGetTemperature(nvmlDevice_t h, int sensor, unsigned int *temp_c) {
    ENTER_DEVICE("nvmlDeviceGetTemperature", h, d);
    if (sensor != 0 /* NVML_TEMPERATURE_GPU */) return NVML_ERROR_INVALID_ARGUMENT;
    *temp_c = (unsigned int)lround(value_at(d, F_TEMP, bwfake_timeline_time()));
    return NVML_SUCCESS;
}

EXPORT int nvmlDeviceGetPcieThroughput(nvmlDevice_t h, int counter, unsigned int *kb_per_s) {
    ENTER_DEVICE("nvmlDeviceGetPcieThroughput", h, d);
    if (counter != 0 && counter != 1) return NVML_ERROR_INVALID_ARGUMENT;
    double t = bwfake_timeline_time();
    double bps = mean_over(d, counter == 0 ? F_TX : F_RX, t - 0.02, t);
    *kb_per_s = (unsigned int)lround(bps / 1024.0);
    return NVML_SUCCESS;
}

/* ---- driver sample buffers ---- */

EXPORT int nvmlDeviceGetSamples(nvmlDevice_t h, int type, unsigned long long last_seen_us,
                                int *value_type, unsigned int *count, nvmlSample_t *samples) {
    ENTER_DEVICE("nvmlDeviceGetSamples", h, d);
    if (count == NULL || value_type == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    if (type != 0 && type != 1) return NVML_ERROR_NOT_SUPPORTED;
    if (d->empty_samples) return NVML_ERROR_NOT_FOUND;
    double period = type == 0 ? S.sample_period_s : UTIL_PERIOD_S;
    double t = bwfake_timeline_time();
    /* Samples exist at k * period for 0 < k <= floor(t / period); the ring keeps the last few. */
    long long newest = (long long)floor(t / period);
    long long oldest = newest - SAMPLE_BUFFER_LEN + 1;
    if (oldest < 1) oldest = 1;
    double seen_t = (double)last_seen_us * 1e-6 - S.start_epoch_s;
    long long after = (long long)floor(seen_t / period + 1e-3) + 1;
    if (last_seen_us == 0 || after < oldest) after = oldest;
    if (newest < after) return NVML_ERROR_NOT_FOUND;
    unsigned int available = (unsigned int)(newest - after + 1);
    *value_type = 1; /* NVML_VALUE_TYPE_UNSIGNED_INT */
    if (samples == NULL) {
        *count = available;
        return NVML_SUCCESS;
    }
    unsigned int n = available < *count ? available : *count;
    for (unsigned int i = 0; i < n; i++) {
        double ts = (double)(after + (long long)i) * period;
        samples[i].timeStamp = (unsigned long long)llround((S.start_epoch_s + ts) * 1e6);
        double v = type == 0 ? value_at(d, F_POWER, ts - 1e-9) * 1000.0
                             : 100.0 * mean_over(d, F_BUSY, ts - period, ts);
        samples[i].sampleValue.ullVal = 0;
        samples[i].sampleValue.uiVal = (unsigned int)lround(v);
    }
    *count = n;
    return NVML_SUCCESS;
}

/* ---- GPM ---- */

EXPORT int nvmlGpmQueryDeviceSupport(nvmlDevice_t h, nvmlGpmSupport_t *support) {
    ENTER_DEVICE("nvmlGpmQueryDeviceSupport", h, d);
    if (support == NULL || support->version != 1) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    support->isSupportedDevice = d->no_gpm ? 0 : 1;
    return NVML_SUCCESS;
}

EXPORT int nvmlGpmSampleAlloc(nvmlGpmSample_t *sample) {
    int rc = enter("nvmlGpmSampleAlloc");
    if (rc != NVML_SUCCESS) return rc;
    if (sample == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    *sample = calloc(1, sizeof **sample);
    (*sample)->device = -1;
    return NVML_SUCCESS;
}

EXPORT int nvmlGpmSampleFree(nvmlGpmSample_t sample) {
    S.calls++;
    free(sample);
    return NVML_SUCCESS;
}

EXPORT int nvmlGpmSampleGet(nvmlDevice_t h, nvmlGpmSample_t sample) {
    ENTER_DEVICE("nvmlGpmSampleGet", h, d);
    if (d->no_gpm) return NVML_ERROR_NOT_SUPPORTED;
    if (sample == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    sample->device = d->index;
    sample->t_s = bwfake_timeline_time();
    return NVML_SUCCESS;
}

EXPORT int nvmlGpmMetricsGet(nvmlGpmMetricsGet_t *m) {
    int rc = enter("nvmlGpmMetricsGet");
    if (rc != NVML_SUCCESS) return rc;
    if (m == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    if (m->version != 1) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    if (m->sample1 == NULL || m->sample2 == NULL || m->sample1->device < 0 ||
        m->sample1->device != m->sample2->device || m->numMetrics > GPM_METRICS_MAX)
        return NVML_ERROR_INVALID_ARGUMENT;
    struct fake_device *d = device_of(&S.dev[m->sample1->device], &rc);
    if (d == NULL) return rc;
    double a = m->sample1->t_s, b = m->sample2->t_s;
    if (a > b) { double x = a; a = b; b = x; }
    /* NVML wants the samples more than 100 ms apart; refuse closer ones so a sampler that
     * polls GPM too fast fails loudly here rather than reading noise. */
    if (b - a < GPM_MIN_INTERVAL_S) {
        S.gpm_too_close++;
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    for (unsigned int i = 0; i < m->numMetrics; i++) {
        nvmlGpmMetric_t *x = &m->metrics[i];
        x->nvmlReturn = NVML_SUCCESS;
        x->metricInfo.shortName = x->metricInfo.longName = x->metricInfo.unit = NULL;
        switch (x->metricId) {
        case 2: x->value = 100.0 * mean_over(d, F_SM, a, b); break;
        case 3: x->value = 100.0 * mean_over(d, F_OCC, a, b); break;
        case 5: x->value = 100.0 * mean_over(d, F_TENSOR, a, b); break;
        case 20: x->value = mean_over(d, F_TX, a, b) / 1048576.0; break;
        case 21: x->value = mean_over(d, F_RX, a, b) / 1048576.0; break;
        default: x->value = 0; x->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
        }
    }
    return NVML_SUCCESS;
}

/* ---- memory ---- */

/* Device memory the GPU's compute processes hold. */
static unsigned long long allocated_bytes(const struct fake_device *d) {
    unsigned long long sum = 0;
    for (int i = 0; i < S.n_procs; i++)
        if (S.procs[i].gpu == d->index) sum += S.procs[i].mem;
    if (sum > FB_TOTAL_BYTES - FB_RESERVED_BYTES) sum = FB_TOTAL_BYTES - FB_RESERVED_BYTES;
    return sum;
}

EXPORT int nvmlDeviceGetMemoryInfo(nvmlDevice_t h, nvmlMemory_t *mem) {
    ENTER_DEVICE("nvmlDeviceGetMemoryInfo", h, d);
    if (mem == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned long long used = FB_RESERVED_BYTES + allocated_bytes(d);
    mem->total = FB_TOTAL_BYTES;
    mem->used = used;
    mem->free = FB_TOTAL_BYTES - used;
    return NVML_SUCCESS;
}

EXPORT int nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t h, nvmlMemory_v2_t *mem) {
    ENTER_DEVICE("nvmlDeviceGetMemoryInfo_v2", h, d);
    if (S.no_memory_v2) return NVML_ERROR_FUNCTION_NOT_FOUND;
    if (mem == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    if (mem->version != NVML_MEMORY_V2) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    unsigned long long used = allocated_bytes(d);
    mem->total = FB_TOTAL_BYTES;
    mem->reserved = FB_RESERVED_BYTES;
    mem->used = used;
    mem->free = FB_TOTAL_BYTES - FB_RESERVED_BYTES - used;
    return NVML_SUCCESS;
}

/* ---- processes and topology (for discovery) ---- */

static int processes(nvmlDevice_t h, unsigned int *count, nvmlProcessInfo_t *infos,
                     const char *fn) {
    ENTER_DEVICE(fn, h, d);
    if (count == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned int n = 0;
    for (int i = 0; i < S.n_procs; i++) n += S.procs[i].gpu == d->index;
    if (n == 0) {
        *count = 0;
        return NVML_SUCCESS;
    }
    if (infos == NULL || *count < n) {
        *count = n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    unsigned int k = 0;
    for (int i = 0; i < S.n_procs; i++) {
        if (S.procs[i].gpu != d->index) continue;
        infos[k].pid = S.procs[i].pid;
        infos[k].usedGpuMemory = S.procs[i].mem;
        infos[k].gpuInstanceId = 0xFFFFFFFFu;
        infos[k].computeInstanceId = 0xFFFFFFFFu;
        k++;
    }
    *count = n;
    return NVML_SUCCESS;
}

EXPORT int nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t h, unsigned int *count,
                                                    nvmlProcessInfo_t *infos) {
    return processes(h, count, infos, "nvmlDeviceGetComputeRunningProcesses_v3");
}

EXPORT int nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t h, unsigned int *count,
                                                    nvmlProcessInfo_t *infos) {
    return processes(h, count, infos, "nvmlDeviceGetComputeRunningProcesses_v2");
}

EXPORT int nvmlDeviceGetTopologyCommonAncestor(nvmlDevice_t h1, nvmlDevice_t h2, int *level) {
    ENTER_DEVICE("nvmlDeviceGetTopologyCommonAncestor", h1, d1);
    if (device_of(h2, &rc_) == NULL) return rc_;
    if (S.no_topology) return NVML_ERROR_NOT_SUPPORTED;
    *level = d1 == h2 ? 0 : S.topology_level;
    return NVML_SUCCESS;
}

EXPORT int nvmlDeviceGetP2PStatus(nvmlDevice_t h1, nvmlDevice_t h2, int index, int *status) {
    ENTER_DEVICE("nvmlDeviceGetP2PStatus", h1, d1);
    (void)d1;
    if (device_of(h2, &rc_) == NULL) return rc_;
    if (S.no_topology) return NVML_ERROR_NOT_SUPPORTED;
    if (index == 2 /* NVML_P2P_CAPS_INDEX_NVLINK */)
        *status = S.nvlink ? 0 : 5; /* OK or NOT_SUPPORTED */
    else
        *status = 0;
    return NVML_SUCCESS;
}

/* ---- Xid events ---- */

EXPORT int nvmlEventSetCreate(nvmlEventSet_t *set) {
    int rc = enter("nvmlEventSetCreate");
    if (rc != NVML_SUCCESS) return rc;
    *set = calloc(1, sizeof **set);
    return NVML_SUCCESS;
}

EXPORT int nvmlEventSetFree(nvmlEventSet_t set) {
    S.calls++;
    free(set);
    return NVML_SUCCESS;
}

EXPORT int nvmlDeviceGetSupportedEventTypes(nvmlDevice_t h, unsigned long long *types) {
    ENTER_DEVICE("nvmlDeviceGetSupportedEventTypes", h, d);
    (void)d;
    *types = XID_EVENT;
    return NVML_SUCCESS;
}

EXPORT int nvmlDeviceRegisterEvents(nvmlDevice_t h, unsigned long long types, nvmlEventSet_t set) {
    ENTER_DEVICE("nvmlDeviceRegisterEvents", h, d);
    if (set == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    if (types & ~XID_EVENT) return NVML_ERROR_NOT_SUPPORTED;
    set->mask[d->index] |= types;
    return NVML_SUCCESS;
}

static int pending_xid(nvmlEventSet_t set, nvmlEventData_t *data) {
    double t = bwfake_timeline_time();
    for (int i = 0; i < S.n_xids; i++) {
        struct xid *x = &S.xids[i];
        if (set->delivered[i] || x->t_s > t || x->gpu < 0 || (unsigned)x->gpu >= S.n_gpus) continue;
        if (!(set->mask[x->gpu] & XID_EVENT)) continue;
        set->delivered[i] = 1;
        data->device = &S.dev[x->gpu];
        data->eventType = XID_EVENT;
        data->eventData = x->xid;
        data->gpuInstanceId = data->computeInstanceId = 0xFFFFFFFFu;
        return 1;
    }
    return 0;
}

EXPORT int nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeout_ms) {
    int rc = enter("nvmlEventSetWait_v2");
    if (rc != NVML_SUCCESS) return rc;
    if (set == NULL || data == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    if (pending_xid(set, data)) return NVML_SUCCESS;
    if (!S.manual_clock) {
        sleep_ms(timeout_ms);
        if (pending_xid(set, data)) return NVML_SUCCESS;
    }
    return NVML_ERROR_TIMEOUT;
}
