/*
 * A fake libnvidia-ml.so.1 for tests on machines without a GPU.
 *
 * Built against NVIDIA's official nvml.h (PyPI nvidia-nvml-dev), so every struct layout and
 * constant is the real one. The GPUs it reports come from a line-based scenario file named by
 * the environment variable FAKE_NVML_SCENARIO; the file is re-read whenever its inode, size or
 * mtime changes, so a test can flip faults (lost GPU, unsupported functions, XID events) while
 * the library is loaded. The format is documented in README.md next to this file.
 *
 * Every exported nvml* function takes one global lock, so the library is safe to call from the
 * agent's worker thread and an event-waiting thread at the same time.
 */
#define NVML_NO_UNVERSIONED_FUNC_DEFS
#include <nvml.h>

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MAX_GPUS 64
#define MAX_SEGMENTS 64
#define MAX_PROCESSES 64
#define MAX_UNSUPPORTED 64
#define MAX_GPM_METRICS 32
#define MAX_PAIRS 256
#define MAX_XIDS 1024
#define MAX_EVENT_SETS 64
#define NAME_LEN 96
#define FUNCTION_NAME_LEN 80

#define SAMPLE_PERIOD_US 166667ULL /* NVML keeps utilization samples 1/6 s apart */
#define SAMPLE_BUFFER_LEN 120ULL   /* samples kept by the "driver" (20 s) */
#define GPM_SAMPLE_MAGIC 0x47504d53u
#define EVENT_POLL_US 2000
#define NOT_MIG 0xFFFFFFFFu
#define SUPPORTED_EVENT_TYPES                                                              \
    (nvmlEventTypeSingleBitEccError | nvmlEventTypeDoubleBitEccError | nvmlEventTypePState | \
     nvmlEventTypeXidCriticalError | nvmlEventTypeClock)

typedef struct {
    long long offset_us; /* from the scenario epoch */
    unsigned int percent;
} segment_t;

typedef struct {
    unsigned int pid;
    unsigned long long used_bytes;
} process_t;

typedef struct {
    int present;
    unsigned int id;
    unsigned int slices;
    unsigned int instances;
    unsigned int remaining;
    unsigned long long memory_mb;
    char name[NAME_LEN];
} mig_profile_t;

typedef struct {
    unsigned int id;
    double value;
} gpm_metric_t;

struct nvmlDevice_st {
    unsigned int index;
    char uuid[NAME_LEN];
    char name[NAME_LEN];
    char pci_bus_id[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE];
    unsigned int pci_device_id;
    unsigned int pci_subsystem_id;
    unsigned long long memory_total_bytes;
    unsigned long long memory_used_bytes;
    unsigned long long memory_reserved_bytes;
    unsigned int power_mw;
    unsigned long long energy_mj;
    segment_t util[MAX_SEGMENTS];
    int n_util;
    segment_t memory_util[MAX_SEGMENTS];
    int n_memory_util;
    process_t processes[MAX_PROCESSES];
    int n_processes;
    int mig_capable;
    unsigned int mig_current;
    unsigned int mig_pending;
    mig_profile_t mig_profiles[NVML_GPU_INSTANCE_PROFILE_COUNT];
    char unsupported[MAX_UNSUPPORTED][FUNCTION_NAME_LEN];
    int n_unsupported;
    int lost;
    int gpm_supported;
    gpm_metric_t gpm_metrics[MAX_GPM_METRICS];
    int n_gpm_metrics;
    int topology_group;
};

typedef struct {
    unsigned int a;
    unsigned int b;
    unsigned int level;
} topology_pair_t;

typedef struct {
    unsigned int gpu;
    unsigned long long xid;
} xid_event_t;

typedef struct {
    char driver_version[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE];
    int cuda_driver_version;
    int driver_loaded;
    unsigned long long epoch_us;
    unsigned long long clock_us; /* 0: the real clock */
    unsigned int topology_in_group;
    unsigned int topology_across_groups;
    topology_pair_t pairs[MAX_PAIRS];
    int n_pairs;
    xid_event_t xids[MAX_XIDS];
    int n_xids;
    struct nvmlDevice_st gpus[MAX_GPUS];
    unsigned int n_gpus;
} scenario_t;

struct nvmlEventSet_st {
    int in_use;
    unsigned long long masks[MAX_GPUS];
    int cursor; /* index into scenario.xids of the next event not yet considered */
};

struct nvmlGpmSample_st {
    unsigned int magic;
    int device; /* -1 until nvmlGpmSampleGet fills it */
    unsigned long long timestamp_us;
};

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static scenario_t g_live;
static scenario_t g_next;
static int g_have_scenario;
static int g_init_count;
static char g_loaded_path[4096];
static struct stat g_loaded_stat;
static struct nvmlEventSet_st g_event_sets[MAX_EVENT_SETS];

/* ---------------------------------------------------------------------------------------- */
/* Scenario parsing                                                                         */
/* ---------------------------------------------------------------------------------------- */

static int parse_fail(const char *path, int line, const char *what)
{
    fprintf(stderr, "fake_nvml: %s:%d: %s\n", path, line, what);
    return -1;
}

static char *skip_space(char *s)
{
    while (*s == ' ' || *s == '\t') {
        s++;
    }
    return s;
}

static void copy_text(char *dst, size_t size, const char *src)
{
    snprintf(dst, size, "%s", src);
}

static int parse_segment(char *rest, segment_t *out, int *count)
{
    double offset_s;
    unsigned int percent;
    if (*count >= MAX_SEGMENTS || sscanf(rest, "%lf %u", &offset_s, &percent) != 2 ||
        percent > 100) {
        return -1;
    }
    out[*count].offset_us = (long long)(offset_s * 1e6 + (offset_s >= 0 ? 0.5 : -0.5));
    out[*count].percent = percent;
    (*count)++;
    return 0;
}

static int parse_gpu_key(struct nvmlDevice_st *gpu, const char *key, char *rest)
{
    if (strcmp(key, "uuid") == 0) {
        copy_text(gpu->uuid, sizeof gpu->uuid, rest);
    } else if (strcmp(key, "name") == 0) {
        copy_text(gpu->name, sizeof gpu->name, rest);
    } else if (strcmp(key, "pci_bus_id") == 0) {
        copy_text(gpu->pci_bus_id, sizeof gpu->pci_bus_id, rest);
    } else if (strcmp(key, "pci_device_id") == 0) {
        gpu->pci_device_id = (unsigned int)strtoul(rest, NULL, 0);
    } else if (strcmp(key, "pci_subsystem_id") == 0) {
        gpu->pci_subsystem_id = (unsigned int)strtoul(rest, NULL, 0);
    } else if (strcmp(key, "memory_total_bytes") == 0) {
        gpu->memory_total_bytes = strtoull(rest, NULL, 0);
    } else if (strcmp(key, "memory_used_bytes") == 0) {
        gpu->memory_used_bytes = strtoull(rest, NULL, 0);
    } else if (strcmp(key, "memory_reserved_bytes") == 0) {
        gpu->memory_reserved_bytes = strtoull(rest, NULL, 0);
    } else if (strcmp(key, "power_mw") == 0) {
        gpu->power_mw = (unsigned int)strtoul(rest, NULL, 0);
    } else if (strcmp(key, "energy_mj") == 0) {
        gpu->energy_mj = strtoull(rest, NULL, 0);
    } else if (strcmp(key, "util") == 0) {
        return parse_segment(rest, gpu->util, &gpu->n_util);
    } else if (strcmp(key, "memory_util") == 0) {
        return parse_segment(rest, gpu->memory_util, &gpu->n_memory_util);
    } else if (strcmp(key, "process") == 0) {
        process_t *p = &gpu->processes[gpu->n_processes];
        if (gpu->n_processes >= MAX_PROCESSES ||
            sscanf(rest, "%u %llu", &p->pid, &p->used_bytes) != 2) {
            return -1;
        }
        gpu->n_processes++;
    } else if (strcmp(key, "mig_mode") == 0) {
        if (sscanf(rest, "%u %u", &gpu->mig_current, &gpu->mig_pending) != 2 ||
            gpu->mig_current > 1 || gpu->mig_pending > 1) {
            return -1;
        }
        gpu->mig_capable = 1;
    } else if (strcmp(key, "mig_profile") == 0) {
        unsigned int index;
        int name_at = 0;
        mig_profile_t p;
        memset(&p, 0, sizeof p);
        if (sscanf(rest, "%u %u %u %u %u %llu %n", &index, &p.id, &p.slices, &p.instances,
                   &p.remaining, &p.memory_mb, &name_at) < 6 ||
            index >= NVML_GPU_INSTANCE_PROFILE_COUNT || name_at == 0 || rest[name_at] == '\0') {
            return -1;
        }
        copy_text(p.name, sizeof p.name, rest + name_at);
        p.present = 1;
        gpu->mig_profiles[index] = p;
    } else if (strcmp(key, "unsupported") == 0) {
        char *save = NULL;
        for (char *tok = strtok_r(rest, " \t", &save); tok; tok = strtok_r(NULL, " \t", &save)) {
            if (gpu->n_unsupported >= MAX_UNSUPPORTED) {
                return -1;
            }
            copy_text(gpu->unsupported[gpu->n_unsupported++], FUNCTION_NAME_LEN, tok);
        }
    } else if (strcmp(key, "lost") == 0) {
        gpu->lost = atoi(rest) != 0;
    } else if (strcmp(key, "gpm") == 0) {
        gpu->gpm_supported = atoi(rest) != 0;
    } else if (strcmp(key, "gpm_metric") == 0) {
        gpm_metric_t *m = &gpu->gpm_metrics[gpu->n_gpm_metrics];
        if (gpu->n_gpm_metrics >= MAX_GPM_METRICS ||
            sscanf(rest, "%u %lf", &m->id, &m->value) != 2) {
            return -1;
        }
        gpu->n_gpm_metrics++;
    } else if (strcmp(key, "topology_group") == 0) {
        gpu->topology_group = atoi(rest);
    } else {
        return -2;
    }
    return 0;
}

static void default_gpu(struct nvmlDevice_st *gpu, unsigned int index)
{
    memset(gpu, 0, sizeof *gpu);
    gpu->index = index;
    snprintf(gpu->uuid, sizeof gpu->uuid, "GPU-00000000-0000-0000-0000-%012x", index);
    copy_text(gpu->name, sizeof gpu->name, "NVIDIA Fake GPU");
    snprintf(gpu->pci_bus_id, sizeof gpu->pci_bus_id, "00000000:%02X:00.0", (index + 1) & 0xff);
    gpu->pci_device_id = 0x233010DE;
    gpu->topology_group = (int)index;
}

/* Parses path into g_next. Returns 0 on success. */
static int parse_scenario(const char *path)
{
    FILE *f = fopen(path, "r");
    char line[1024];
    int lineno = 0;
    struct nvmlDevice_st *gpu = NULL;
    scenario_t *s = &g_next;

    if (!f) {
        fprintf(stderr, "fake_nvml: cannot open %s: %s\n", path, strerror(errno));
        return -1;
    }
    memset(s, 0, sizeof *s);
    copy_text(s->driver_version, sizeof s->driver_version, "550.54.15");
    s->cuda_driver_version = 12040;
    s->driver_loaded = 1;
    s->topology_in_group = NVML_TOPOLOGY_SINGLE;
    s->topology_across_groups = NVML_TOPOLOGY_SYSTEM;

    while (fgets(line, sizeof line, f)) {
        char *key;
        char *rest;
        size_t len;
        int rc = 0;
        lineno++;
        len = strlen(line);
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r' ||
                           line[len - 1] == ' ' || line[len - 1] == '\t')) {
            line[--len] = '\0';
        }
        key = skip_space(line);
        if (*key == '\0' || *key == '#') {
            continue;
        }
        rest = key;
        while (*rest && *rest != ' ' && *rest != '\t') {
            rest++;
        }
        if (*rest) {
            *rest++ = '\0';
        }
        rest = skip_space(rest);

        if (strcmp(key, "gpu") == 0) {
            unsigned int index = (unsigned int)strtoul(rest, NULL, 10);
            if (index != s->n_gpus || s->n_gpus >= MAX_GPUS) {
                fclose(f);
                return parse_fail(path, lineno, "gpu blocks must be numbered 0, 1, 2, ...");
            }
            gpu = &s->gpus[s->n_gpus++];
            default_gpu(gpu, index);
        } else if (strcmp(key, "driver_version") == 0) {
            copy_text(s->driver_version, sizeof s->driver_version, rest);
        } else if (strcmp(key, "cuda_driver_version") == 0) {
            s->cuda_driver_version = atoi(rest);
        } else if (strcmp(key, "driver_loaded") == 0) {
            s->driver_loaded = atoi(rest) != 0;
        } else if (strcmp(key, "epoch_us") == 0) {
            s->epoch_us = strtoull(rest, NULL, 10);
        } else if (strcmp(key, "clock_us") == 0) {
            s->clock_us = strtoull(rest, NULL, 10);
        } else if (strcmp(key, "topology_in_group") == 0) {
            s->topology_in_group = (unsigned int)strtoul(rest, NULL, 10);
        } else if (strcmp(key, "topology_across_groups") == 0) {
            s->topology_across_groups = (unsigned int)strtoul(rest, NULL, 10);
        } else if (strcmp(key, "topology") == 0) {
            topology_pair_t *p = &s->pairs[s->n_pairs];
            if (s->n_pairs >= MAX_PAIRS || sscanf(rest, "%u %u %u", &p->a, &p->b, &p->level) != 3) {
                rc = -1;
            } else {
                s->n_pairs++;
            }
        } else if (strcmp(key, "xid") == 0) {
            xid_event_t *e = &s->xids[s->n_xids];
            if (s->n_xids >= MAX_XIDS || sscanf(rest, "%u %llu", &e->gpu, &e->xid) != 2) {
                rc = -1;
            } else {
                s->n_xids++;
            }
        } else if (gpu != NULL) {
            rc = parse_gpu_key(gpu, key, rest);
        } else {
            rc = -2;
        }
        if (rc == -2) {
            fclose(f);
            return parse_fail(path, lineno, "unknown key (GPU keys must follow a 'gpu N' line)");
        }
        if (rc != 0) {
            fclose(f);
            return parse_fail(path, lineno, "malformed value");
        }
    }
    fclose(f);
    return 0;
}

/* Re-reads the scenario when FAKE_NVML_SCENARIO names another file or the file changed. */
static void refresh_scenario(void)
{
    const char *path = getenv("FAKE_NVML_SCENARIO");
    struct stat st;
    if (path == NULL || *path == '\0' || stat(path, &st) != 0) {
        return; /* keep what was loaded; nvmlInit reports a missing scenario */
    }
    if (g_have_scenario && strcmp(path, g_loaded_path) == 0 && st.st_ino == g_loaded_stat.st_ino &&
        st.st_dev == g_loaded_stat.st_dev && st.st_size == g_loaded_stat.st_size &&
        st.st_mtim.tv_sec == g_loaded_stat.st_mtim.tv_sec &&
        st.st_mtim.tv_nsec == g_loaded_stat.st_mtim.tv_nsec) {
        return;
    }
    if (parse_scenario(path) != 0) {
        return; /* a broken rewrite keeps the previous scenario */
    }
    memcpy(&g_live, &g_next, sizeof g_live);
    g_have_scenario = 1;
    copy_text(g_loaded_path, sizeof g_loaded_path, path);
    g_loaded_stat = st;
}

/* ---------------------------------------------------------------------------------------- */
/* Helpers shared by the entry points                                                       */
/* ---------------------------------------------------------------------------------------- */

static int lock_and_refresh(void)
{
    pthread_mutex_lock(&g_lock);
    refresh_scenario();
    return 0;
}

static void unlock_at_scope_exit(int *unused)
{
    (void)unused;
    pthread_mutex_unlock(&g_lock);
}

/* Takes the global lock for the rest of the enclosing function. */
#define LOCKED                                                                    \
    int locked_guard_ __attribute__((cleanup(unlock_at_scope_exit))) = lock_and_refresh(); \
    (void)locked_guard_

static unsigned long long now_us(void)
{
    struct timespec ts;
    if (g_live.clock_us != 0) {
        return g_live.clock_us;
    }
    clock_gettime(CLOCK_REALTIME, &ts);
    return (unsigned long long)ts.tv_sec * 1000000ULL + (unsigned long long)ts.tv_nsec / 1000ULL;
}

static int is_device(nvmlDevice_t device)
{
    uintptr_t base = (uintptr_t)g_live.gpus;
    uintptr_t at = (uintptr_t)device;
    return at >= base && (at - base) % sizeof g_live.gpus[0] == 0 &&
           (at - base) / sizeof g_live.gpus[0] < g_live.n_gpus;
}

/* "nvmlDeviceGetMemoryInfo" in a scenario also covers nvmlDeviceGetMemoryInfo_v2. */
static int is_unsupported(const struct nvmlDevice_st *gpu, const char *function)
{
    size_t base = strlen(function);
    const char *suffix = strrchr(function, '_');
    if (suffix && suffix[1] == 'v' && suffix[2] >= '0' && suffix[2] <= '9') {
        base = (size_t)(suffix - function);
    }
    for (int i = 0; i < gpu->n_unsupported; i++) {
        const char *entry = gpu->unsupported[i];
        if (strcmp(entry, function) == 0 ||
            (strlen(entry) == base && strncmp(entry, function, base) == 0)) {
            return 1;
        }
    }
    return 0;
}

static nvmlReturn_t check_device(nvmlDevice_t device, const char *function)
{
    if (g_init_count == 0) {
        return NVML_ERROR_UNINITIALIZED;
    }
    if (!is_device(device)) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    if (device->lost) {
        return NVML_ERROR_GPU_IS_LOST;
    }
    if (is_unsupported(device, function)) {
        return NVML_ERROR_NOT_SUPPORTED;
    }
    return NVML_SUCCESS;
}

#define CHECK_DEVICE(device)                                     \
    do {                                                         \
        nvmlReturn_t check_rc_ = check_device((device), __func__); \
        if (check_rc_ != NVML_SUCCESS) {                         \
            return check_rc_;                                    \
        }                                                        \
    } while (0)

static nvmlReturn_t copy_string(char *dst, unsigned int length, const char *src)
{
    if (dst == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    if (strlen(src) + 1 > length) {
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    memcpy(dst, src, strlen(src) + 1);
    return NVML_SUCCESS;
}

static unsigned int segment_value(const segment_t *segments, int n, unsigned long long t_us)
{
    unsigned int value = n > 0 ? segments[0].percent : 0;
    long long since_epoch = (long long)t_us - (long long)g_live.epoch_us;
    for (int i = 0; i < n; i++) {
        if (segments[i].offset_us <= since_epoch) {
            value = segments[i].percent;
        }
    }
    return value;
}

/* ---------------------------------------------------------------------------------------- */
/* Initialization, errors, system queries                                                   */
/* ---------------------------------------------------------------------------------------- */

static nvmlReturn_t init_locked(void)
{
    const char *path = getenv("FAKE_NVML_SCENARIO");
    if (path == NULL || *path == '\0') {
        fprintf(stderr, "fake_nvml: FAKE_NVML_SCENARIO is not set\n");
        return NVML_ERROR_DRIVER_NOT_LOADED;
    }
    if (!g_have_scenario || strcmp(path, g_loaded_path) != 0) {
        return NVML_ERROR_DRIVER_NOT_LOADED;
    }
    if (!g_live.driver_loaded) {
        return NVML_ERROR_DRIVER_NOT_LOADED;
    }
    g_init_count++;
    return NVML_SUCCESS;
}

nvmlReturn_t DECLDIR nvmlInit_v2(void)
{
    LOCKED;
    return init_locked();
}

nvmlReturn_t DECLDIR nvmlInit(void)
{
    LOCKED;
    return init_locked();
}

nvmlReturn_t DECLDIR nvmlInitWithFlags(unsigned int flags)
{
    LOCKED;
    (void)flags;
    return init_locked();
}

nvmlReturn_t DECLDIR nvmlShutdown(void)
{
    LOCKED;
    if (g_init_count == 0) {
        return NVML_ERROR_UNINITIALIZED;
    }
    g_init_count--;
    return NVML_SUCCESS;
}

/* Not part of NVML: forget all state so in-process tests start clean. */
void fake_nvml_reset(void)
{
    pthread_mutex_lock(&g_lock);
    g_init_count = 0;
    g_have_scenario = 0;
    g_loaded_path[0] = '\0';
    memset(g_event_sets, 0, sizeof g_event_sets);
    pthread_mutex_unlock(&g_lock);
}

const DECLDIR char *nvmlErrorString(nvmlReturn_t result)
{
    switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
    case NVML_ERROR_ALREADY_INITIALIZED: return "Already Initialized";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT: return "Timeout";
    case NVML_ERROR_FUNCTION_NOT_FOUND: return "Function Not Found";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    case NVML_ERROR_MEMORY: return "Insufficient Memory";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH: return "Argument version mismatch";
    case NVML_ERROR_INVALID_STATE: return "Invalid State";
    default: return "Unknown Error";
    }
}

nvmlReturn_t DECLDIR nvmlSystemGetDriverVersion(char *version, unsigned int length)
{
    LOCKED;
    if (g_init_count == 0) {
        return NVML_ERROR_UNINITIALIZED;
    }
    return copy_string(version, length, g_live.driver_version);
}

nvmlReturn_t DECLDIR nvmlSystemGetCudaDriverVersion(int *cudaDriverVersion)
{
    LOCKED;
    if (cudaDriverVersion == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    if (!g_have_scenario || !g_live.driver_loaded) {
        return NVML_ERROR_LIBRARY_NOT_FOUND;
    }
    *cudaDriverVersion = g_live.cuda_driver_version;
    return NVML_SUCCESS;
}

nvmlReturn_t DECLDIR nvmlSystemGetCudaDriverVersion_v2(int *cudaDriverVersion)
{
    return nvmlSystemGetCudaDriverVersion(cudaDriverVersion);
}

/* ---------------------------------------------------------------------------------------- */
/* Device enumeration and identity                                                          */
/* ---------------------------------------------------------------------------------------- */

static nvmlReturn_t device_count_locked(unsigned int *deviceCount)
{
    if (g_init_count == 0) {
        return NVML_ERROR_UNINITIALIZED;
    }
    if (deviceCount == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    *deviceCount = g_live.n_gpus;
    return NVML_SUCCESS;
}

nvmlReturn_t DECLDIR nvmlDeviceGetCount_v2(unsigned int *deviceCount)
{
    LOCKED;
    return device_count_locked(deviceCount);
}

nvmlReturn_t DECLDIR nvmlDeviceGetCount(unsigned int *deviceCount)
{
    LOCKED;
    return device_count_locked(deviceCount);
}

static nvmlReturn_t handle_by_index_locked(unsigned int index, nvmlDevice_t *device)
{
    if (g_init_count == 0) {
        return NVML_ERROR_UNINITIALIZED;
    }
    if (device == NULL || index >= g_live.n_gpus) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    if (g_live.gpus[index].lost) {
        return NVML_ERROR_GPU_IS_LOST;
    }
    *device = &g_live.gpus[index];
    return NVML_SUCCESS;
}

nvmlReturn_t DECLDIR nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
    LOCKED;
    return handle_by_index_locked(index, device);
}

nvmlReturn_t DECLDIR nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device)
{
    LOCKED;
    return handle_by_index_locked(index, device);
}

nvmlReturn_t DECLDIR nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length)
{
    LOCKED;
    CHECK_DEVICE(device);
    return copy_string(uuid, length, device->uuid);
}

nvmlReturn_t DECLDIR nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length)
{
    LOCKED;
    CHECK_DEVICE(device);
    return copy_string(name, length, device->name);
}

nvmlReturn_t DECLDIR nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index)
{
    LOCKED;
    CHECK_DEVICE(device);
    if (index == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    *index = device->index;
    return NVML_SUCCESS;
}

static nvmlReturn_t fill_pci(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
    unsigned int domain = 0, bus = 0, dev = 0, function = 0;
    if (pci == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    if (sscanf(device->pci_bus_id, "%x:%x:%x.%x", &domain, &bus, &dev, &function) != 4) {
        return NVML_ERROR_UNKNOWN;
    }
    memset(pci, 0, sizeof *pci);
    pci->domain = domain;
    pci->bus = bus & 0xff;
    pci->device = dev & 0x1f;
    pci->pciDeviceId = device->pci_device_id;
    pci->pciSubSystemId = device->pci_subsystem_id;
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, NVML_DEVICE_PCI_BUS_ID_LEGACY_FMT,
             domain & 0xffff, bus & 0xff, dev & 0x1f);
    snprintf(pci->busId, sizeof pci->busId, NVML_DEVICE_PCI_BUS_ID_FMT, domain, bus & 0xff,
             dev & 0x1f);
    return NVML_SUCCESS;
}

nvmlReturn_t DECLDIR nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
    LOCKED;
    CHECK_DEVICE(device);
    return fill_pci(device, pci);
}

nvmlReturn_t DECLDIR nvmlDeviceGetPciInfo_v2(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
    LOCKED;
    CHECK_DEVICE(device);
    return fill_pci(device, pci);
}

nvmlReturn_t DECLDIR nvmlDeviceGetPciInfo(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
    LOCKED;
    CHECK_DEVICE(device);
    return fill_pci(device, pci);
}

/* ---------------------------------------------------------------------------------------- */
/* Memory, power, energy                                                                    */
/* ---------------------------------------------------------------------------------------- */

nvmlReturn_t DECLDIR nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
    LOCKED;
    unsigned long long used;
    CHECK_DEVICE(device);
    if (memory == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    /* v1 counts reserved memory as used */
    used = device->memory_used_bytes + device->memory_reserved_bytes;
    memory->total = device->memory_total_bytes;
    memory->used = used;
    memory->free = device->memory_total_bytes > used ? device->memory_total_bytes - used : 0;
    return NVML_SUCCESS;
}

nvmlReturn_t DECLDIR nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory)
{
    LOCKED;
    unsigned long long taken;
    CHECK_DEVICE(device);
    if (memory == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    if (memory->version != nvmlMemory_v2) {
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    }
    taken = device->memory_used_bytes + device->memory_reserved_bytes;
    memory->total = device->memory_total_bytes;
    memory->reserved = device->memory_reserved_bytes;
    memory->used = device->memory_used_bytes;
    memory->free = device->memory_total_bytes > taken ? device->memory_total_bytes - taken : 0;
    return NVML_SUCCESS;
}

nvmlReturn_t DECLDIR nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int *power)
{
    LOCKED;
    CHECK_DEVICE(device);
    if (power == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    *power = device->power_mw;
    return NVML_SUCCESS;
}

/* The counter grows at power_mw from energy_mj at the scenario epoch. */
nvmlReturn_t DECLDIR nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t device,
                                                         unsigned long long *energy)
{
    LOCKED;
    unsigned long long now = now_us();
    unsigned long long elapsed_us = now > g_live.epoch_us ? now - g_live.epoch_us : 0;
    CHECK_DEVICE(device);
    if (energy == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    *energy = device->energy_mj + (unsigned long long)device->power_mw * elapsed_us / 1000000ULL;
    return NVML_SUCCESS;
}

/* ---------------------------------------------------------------------------------------- */
/* Utilization                                                                              */
/* ---------------------------------------------------------------------------------------- */

nvmlReturn_t DECLDIR nvmlDeviceGetUtilizationRates(nvmlDevice_t device,
                                                   nvmlUtilization_t *utilization)
{
    LOCKED;
    unsigned long long now = now_us();
    CHECK_DEVICE(device);
    if (utilization == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    if (device->mig_current == NVML_DEVICE_MIG_ENABLE) {
        return NVML_ERROR_NOT_SUPPORTED;
    }
    utilization->gpu = segment_value(device->util, device->n_util, now);
    utilization->memory = segment_value(device->memory_util, device->n_memory_util, now);
    return NVML_SUCCESS;
}

/*
 * The "driver" takes a sample at every multiple of SAMPLE_PERIOD_US since the Unix epoch, from
 * the scenario epoch on, and keeps the last SAMPLE_BUFFER_LEN of them.
 */
nvmlReturn_t DECLDIR nvmlDeviceGetSamples(nvmlDevice_t device, nvmlSamplingType_t type,
                                          unsigned long long lastSeenTimeStamp,
                                          nvmlValueType_t *sampleValType,
                                          unsigned int *sampleCount, nvmlSample_t *samples)
{
    LOCKED;
    const segment_t *segments;
    int n_segments;
    unsigned long long now = now_us();
    unsigned long long newest, oldest, first_kept, first_new;
    unsigned int available, count;

    CHECK_DEVICE(device);
    if (sampleValType == NULL || sampleCount == NULL || (samples != NULL && *sampleCount == 0)) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    if (type == NVML_GPU_UTILIZATION_SAMPLES) {
        segments = device->util;
        n_segments = device->n_util;
    } else if (type == NVML_MEMORY_UTILIZATION_SAMPLES) {
        segments = device->memory_util;
        n_segments = device->n_memory_util;
    } else {
        return NVML_ERROR_NOT_SUPPORTED;
    }
    if (device->mig_current == NVML_DEVICE_MIG_ENABLE) {
        return NVML_ERROR_NOT_SUPPORTED;
    }
    if (now < g_live.epoch_us) {
        return NVML_ERROR_NOT_FOUND;
    }
    newest = now / SAMPLE_PERIOD_US;
    oldest = (g_live.epoch_us + SAMPLE_PERIOD_US - 1) / SAMPLE_PERIOD_US;
    if (newest + 1 > SAMPLE_BUFFER_LEN && newest + 1 - SAMPLE_BUFFER_LEN > oldest) {
        oldest = newest + 1 - SAMPLE_BUFFER_LEN;
    }
    first_new = lastSeenTimeStamp / SAMPLE_PERIOD_US + 1;
    first_kept = first_new > oldest ? first_new : oldest;
    if (first_kept > newest) {
        return NVML_ERROR_NOT_FOUND;
    }
    available = (unsigned int)(newest - first_kept + 1);
    *sampleValType = NVML_VALUE_TYPE_UNSIGNED_INT;
    if (samples == NULL) {
        *sampleCount = available;
        return NVML_SUCCESS;
    }
    count = *sampleCount < available ? *sampleCount : available;
    for (unsigned int i = 0; i < count; i++) {
        unsigned long long t = (first_kept + i) * SAMPLE_PERIOD_US;
        samples[i].timeStamp = t;
        samples[i].sampleValue.uiVal = segment_value(segments, n_segments, t);
    }
    *sampleCount = count;
    return NVML_SUCCESS;
}

/* ---------------------------------------------------------------------------------------- */
/* Processes                                                                                */
/* ---------------------------------------------------------------------------------------- */

static nvmlReturn_t running_processes(nvmlDevice_t device, unsigned int *infoCount,
                                      nvmlProcessInfo_v2_t *infos_v2,
                                      nvmlProcessInfo_v1_t *infos_v1)
{
    unsigned int n = (unsigned int)device->n_processes;
    if (infoCount == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    if (*infoCount < n) {
        *infoCount = n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    if (n > 0 && infos_v2 == NULL && infos_v1 == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    for (unsigned int i = 0; i < n; i++) {
        if (infos_v2 != NULL) {
            infos_v2[i].pid = device->processes[i].pid;
            infos_v2[i].usedGpuMemory = device->processes[i].used_bytes;
            infos_v2[i].gpuInstanceId = NOT_MIG;
            infos_v2[i].computeInstanceId = NOT_MIG;
        } else {
            infos_v1[i].pid = device->processes[i].pid;
            infos_v1[i].usedGpuMemory = device->processes[i].used_bytes;
        }
    }
    *infoCount = n;
    return NVML_SUCCESS;
}

nvmlReturn_t DECLDIR nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device,
                                                             unsigned int *infoCount,
                                                             nvmlProcessInfo_t *infos)
{
    LOCKED;
    CHECK_DEVICE(device);
    return running_processes(device, infoCount, infos, NULL);
}

nvmlReturn_t DECLDIR nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t device,
                                                             unsigned int *infoCount,
                                                             nvmlProcessInfo_v2_t *infos)
{
    LOCKED;
    CHECK_DEVICE(device);
    return running_processes(device, infoCount, infos, NULL);
}

nvmlReturn_t DECLDIR nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t device,
                                                          unsigned int *infoCount,
                                                          nvmlProcessInfo_v1_t *infos)
{
    LOCKED;
    CHECK_DEVICE(device);
    return running_processes(device, infoCount, NULL, infos);
}

/* ---------------------------------------------------------------------------------------- */
/* MIG and topology                                                                         */
/* ---------------------------------------------------------------------------------------- */

nvmlReturn_t DECLDIR nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *currentMode,
                                          unsigned int *pendingMode)
{
    LOCKED;
    CHECK_DEVICE(device);
    if (currentMode == NULL || pendingMode == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    if (!device->mig_capable) {
        return NVML_ERROR_NOT_SUPPORTED;
    }
    *currentMode = device->mig_current;
    *pendingMode = device->mig_pending;
    return NVML_SUCCESS;
}

static nvmlReturn_t find_profile(nvmlDevice_t device, unsigned int profile, int need_enabled,
                                 const mig_profile_t **out)
{
    if (profile >= NVML_GPU_INSTANCE_PROFILE_COUNT) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    if (!device->mig_capable || (need_enabled && device->mig_current != NVML_DEVICE_MIG_ENABLE) ||
        !device->mig_profiles[profile].present) {
        return NVML_ERROR_NOT_SUPPORTED;
    }
    *out = &device->mig_profiles[profile];
    return NVML_SUCCESS;
}

nvmlReturn_t DECLDIR nvmlDeviceGetGpuInstanceProfileInfo(nvmlDevice_t device, unsigned int profile,
                                                         nvmlGpuInstanceProfileInfo_t *info)
{
    LOCKED;
    const mig_profile_t *p = NULL;
    nvmlReturn_t rc;
    CHECK_DEVICE(device);
    if (info == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    rc = find_profile(device, profile, 0, &p);
    if (rc != NVML_SUCCESS) {
        return rc;
    }
    memset(info, 0, sizeof *info);
    info->id = p->id;
    info->sliceCount = p->slices;
    info->instanceCount = p->instances;
    info->memorySizeMB = p->memory_mb;
    return NVML_SUCCESS;
}

nvmlReturn_t DECLDIR nvmlDeviceGetGpuInstanceProfileInfoV(nvmlDevice_t device, unsigned int profile,
                                                          nvmlGpuInstanceProfileInfo_v2_t *info)
{
    LOCKED;
    const mig_profile_t *p = NULL;
    nvmlReturn_t rc;
    CHECK_DEVICE(device);
    if (info == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    if (info->version != nvmlGpuInstanceProfileInfo_v2) {
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    }
    rc = find_profile(device, profile, 1, &p);
    if (rc != NVML_SUCCESS) {
        return rc;
    }
    memset(info, 0, sizeof *info);
    info->version = nvmlGpuInstanceProfileInfo_v2;
    info->id = p->id;
    info->sliceCount = p->slices;
    info->instanceCount = p->instances;
    info->memorySizeMB = p->memory_mb;
    copy_text(info->name, sizeof info->name, p->name);
    return NVML_SUCCESS;
}

nvmlReturn_t DECLDIR nvmlDeviceGetGpuInstanceRemainingCapacity(nvmlDevice_t device,
                                                               unsigned int profileId,
                                                               unsigned int *count)
{
    LOCKED;
    CHECK_DEVICE(device);
    if (count == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    if (!device->mig_capable || device->mig_current != NVML_DEVICE_MIG_ENABLE) {
        return NVML_ERROR_NOT_SUPPORTED;
    }
    for (int i = 0; i < NVML_GPU_INSTANCE_PROFILE_COUNT; i++) {
        const mig_profile_t *p = &device->mig_profiles[i];
        if (p->present && p->id == profileId) {
            *count = p->remaining;
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_SUPPORTED;
}

nvmlReturn_t DECLDIR nvmlDeviceGetTopologyCommonAncestor(nvmlDevice_t device1,
                                                         nvmlDevice_t device2,
                                                         nvmlGpuTopologyLevel_t *pathInfo)
{
    LOCKED;
    CHECK_DEVICE(device1);
    CHECK_DEVICE(device2);
    if (pathInfo == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    if (device1 == device2) {
        *pathInfo = NVML_TOPOLOGY_INTERNAL;
        return NVML_SUCCESS;
    }
    for (int i = 0; i < g_live.n_pairs; i++) {
        const topology_pair_t *p = &g_live.pairs[i];
        if ((p->a == device1->index && p->b == device2->index) ||
            (p->a == device2->index && p->b == device1->index)) {
            *pathInfo = (nvmlGpuTopologyLevel_t)p->level;
            return NVML_SUCCESS;
        }
    }
    *pathInfo = (nvmlGpuTopologyLevel_t)(device1->topology_group == device2->topology_group
                                             ? g_live.topology_in_group
                                             : g_live.topology_across_groups);
    return NVML_SUCCESS;
}

/* ---------------------------------------------------------------------------------------- */
/* Events (XID)                                                                             */
/* ---------------------------------------------------------------------------------------- */

static int is_event_set(nvmlEventSet_t set)
{
    uintptr_t base = (uintptr_t)g_event_sets;
    uintptr_t at = (uintptr_t)set;
    return at >= base && (at - base) % sizeof g_event_sets[0] == 0 &&
           (at - base) / sizeof g_event_sets[0] < MAX_EVENT_SETS && set->in_use;
}

nvmlReturn_t DECLDIR nvmlEventSetCreate(nvmlEventSet_t *set)
{
    LOCKED;
    if (g_init_count == 0) {
        return NVML_ERROR_UNINITIALIZED;
    }
    if (set == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    for (int i = 0; i < MAX_EVENT_SETS; i++) {
        if (!g_event_sets[i].in_use) {
            memset(&g_event_sets[i], 0, sizeof g_event_sets[i]);
            g_event_sets[i].in_use = 1;
            /* only events that happen after the set exists are delivered */
            g_event_sets[i].cursor = g_live.n_xids;
            *set = &g_event_sets[i];
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_MEMORY;
}

nvmlReturn_t DECLDIR nvmlDeviceGetSupportedEventTypes(nvmlDevice_t device,
                                                      unsigned long long *eventTypes)
{
    LOCKED;
    CHECK_DEVICE(device);
    if (eventTypes == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    *eventTypes = SUPPORTED_EVENT_TYPES;
    return NVML_SUCCESS;
}

nvmlReturn_t DECLDIR nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long eventTypes,
                                              nvmlEventSet_t set)
{
    LOCKED;
    CHECK_DEVICE(device);
    if (!is_event_set(set)) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    if ((eventTypes & ~(unsigned long long)SUPPORTED_EVENT_TYPES) != 0) {
        return NVML_ERROR_NOT_SUPPORTED;
    }
    set->masks[device->index] |= eventTypes;
    return NVML_SUCCESS;
}

static unsigned long long monotonic_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (unsigned long long)ts.tv_sec * 1000ULL + (unsigned long long)ts.tv_nsec / 1000000ULL;
}

/* One pass over pending events; NVML_ERROR_TIMEOUT means "nothing yet". */
static nvmlReturn_t next_event(nvmlEventSet_t set, nvmlEventData_t *data)
{
    if (g_init_count == 0) {
        return NVML_ERROR_UNINITIALIZED;
    }
    if (!is_event_set(set)) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    if (set->cursor > g_live.n_xids) {
        set->cursor = g_live.n_xids;
    }
    while (set->cursor < g_live.n_xids) {
        const xid_event_t *e = &g_live.xids[set->cursor++];
        if (e->gpu < g_live.n_gpus && e->gpu < MAX_GPUS &&
            (set->masks[e->gpu] & nvmlEventTypeXidCriticalError)) {
            memset(data, 0, sizeof *data);
            data->device = &g_live.gpus[e->gpu];
            data->eventType = nvmlEventTypeXidCriticalError;
            data->eventData = e->xid;
            data->gpuInstanceId = NOT_MIG;
            data->computeInstanceId = NOT_MIG;
            return NVML_SUCCESS;
        }
    }
    for (unsigned int i = 0; i < g_live.n_gpus; i++) {
        if (set->masks[i] != 0 && g_live.gpus[i].lost) {
            return NVML_ERROR_GPU_IS_LOST;
        }
    }
    return NVML_ERROR_TIMEOUT;
}

static nvmlReturn_t event_wait(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms)
{
    LOCKED;
    unsigned long long deadline = monotonic_ms() + timeoutms;
    if (data == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    for (;;) {
        nvmlReturn_t rc = next_event(set, data);
        if (rc != NVML_ERROR_TIMEOUT || monotonic_ms() >= deadline) {
            return rc;
        }
        pthread_mutex_unlock(&g_lock);
        usleep(EVENT_POLL_US);
        pthread_mutex_lock(&g_lock);
        refresh_scenario();
    }
}

nvmlReturn_t DECLDIR nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data,
                                         unsigned int timeoutms)
{
    return event_wait(set, data, timeoutms);
}

nvmlReturn_t DECLDIR nvmlEventSetWait(nvmlEventSet_t set, nvmlEventData_t *data,
                                      unsigned int timeoutms)
{
    return event_wait(set, data, timeoutms);
}

nvmlReturn_t DECLDIR nvmlEventSetFree(nvmlEventSet_t set)
{
    LOCKED;
    if (g_init_count == 0) {
        return NVML_ERROR_UNINITIALIZED;
    }
    if (!is_event_set(set)) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    set->in_use = 0;
    return NVML_SUCCESS;
}

/* ---------------------------------------------------------------------------------------- */
/* GPM (Hopper and newer)                                                                   */
/* ---------------------------------------------------------------------------------------- */

nvmlReturn_t DECLDIR nvmlGpmQueryDeviceSupport(nvmlDevice_t device, nvmlGpmSupport_t *gpmSupport)
{
    LOCKED;
    CHECK_DEVICE(device);
    if (gpmSupport == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    if (gpmSupport->version != NVML_GPM_SUPPORT_VERSION) {
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    }
    gpmSupport->isSupportedDevice = (unsigned int)device->gpm_supported;
    return NVML_SUCCESS;
}

static int is_gpm_sample(nvmlGpmSample_t sample)
{
    return sample != NULL && sample->magic == GPM_SAMPLE_MAGIC;
}

nvmlReturn_t DECLDIR nvmlGpmSampleAlloc(nvmlGpmSample_t *gpmSample)
{
    LOCKED;
    nvmlGpmSample_t sample;
    if (g_init_count == 0) {
        return NVML_ERROR_UNINITIALIZED;
    }
    if (gpmSample == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    sample = calloc(1, sizeof *sample);
    if (sample == NULL) {
        return NVML_ERROR_MEMORY;
    }
    sample->magic = GPM_SAMPLE_MAGIC;
    sample->device = -1;
    *gpmSample = sample;
    return NVML_SUCCESS;
}

nvmlReturn_t DECLDIR nvmlGpmSampleFree(nvmlGpmSample_t gpmSample)
{
    LOCKED;
    if (!is_gpm_sample(gpmSample)) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    gpmSample->magic = 0;
    free(gpmSample);
    return NVML_SUCCESS;
}

nvmlReturn_t DECLDIR nvmlGpmSampleGet(nvmlDevice_t device, nvmlGpmSample_t gpmSample)
{
    LOCKED;
    CHECK_DEVICE(device);
    if (!is_gpm_sample(gpmSample)) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    if (!device->gpm_supported) {
        return NVML_ERROR_NOT_SUPPORTED;
    }
    gpmSample->device = (int)device->index;
    gpmSample->timestamp_us = now_us();
    return NVML_SUCCESS;
}

static void describe_metric(nvmlGpmMetric_t *metric)
{
    static char percent[] = "%";
    static char gr_util[] = "gr_util", gr_util_long[] = "graphics utilization";
    static char sm_util[] = "sm_util", sm_util_long[] = "SM utilization";
    static char sm_occ[] = "sm_occupancy", sm_occ_long[] = "SM occupancy";
    static char tensor[] = "any_tensor_util", tensor_long[] = "any tensor utilization";
    static char dram[] = "dram_bw_util", dram_long[] = "DRAM bandwidth utilization";
    char *short_name = NULL, *long_name = NULL;
    switch (metric->metricId) {
    case NVML_GPM_METRIC_GRAPHICS_UTIL: short_name = gr_util; long_name = gr_util_long; break;
    case NVML_GPM_METRIC_SM_UTIL: short_name = sm_util; long_name = sm_util_long; break;
    case NVML_GPM_METRIC_SM_OCCUPANCY: short_name = sm_occ; long_name = sm_occ_long; break;
    case NVML_GPM_METRIC_ANY_TENSOR_UTIL: short_name = tensor; long_name = tensor_long; break;
    case NVML_GPM_METRIC_DRAM_BW_UTIL: short_name = dram; long_name = dram_long; break;
    default: break;
    }
    metric->metricInfo.shortName = short_name;
    metric->metricInfo.longName = long_name;
    metric->metricInfo.unit = short_name ? percent : NULL;
}

nvmlReturn_t DECLDIR nvmlGpmMetricsGet(nvmlGpmMetricsGet_t *metricsGet)
{
    LOCKED;
    const struct nvmlDevice_st *gpu;
    if (g_init_count == 0) {
        return NVML_ERROR_UNINITIALIZED;
    }
    if (metricsGet == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    if (metricsGet->version != NVML_GPM_METRICS_GET_VERSION) {
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    }
    if (metricsGet->numMetrics > NVML_GPM_METRIC_MAX || !is_gpm_sample(metricsGet->sample1) ||
        !is_gpm_sample(metricsGet->sample2) || metricsGet->sample1->device < 0 ||
        metricsGet->sample1->device != metricsGet->sample2->device ||
        (unsigned int)metricsGet->sample1->device >= g_live.n_gpus) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    gpu = &g_live.gpus[metricsGet->sample1->device];
    if (gpu->lost) {
        return NVML_ERROR_GPU_IS_LOST;
    }
    for (unsigned int i = 0; i < metricsGet->numMetrics; i++) {
        nvmlGpmMetric_t *metric = &metricsGet->metrics[i];
        metric->nvmlReturn = metric->metricId == 0 || metric->metricId >= NVML_GPM_METRIC_MAX
                                 ? NVML_ERROR_INVALID_ARGUMENT
                                 : NVML_ERROR_NOT_SUPPORTED;
        metric->value = 0.0;
        for (int j = 0; j < gpu->n_gpm_metrics; j++) {
            if (gpu->gpm_metrics[j].id == metric->metricId) {
                metric->nvmlReturn = NVML_SUCCESS;
                metric->value = gpu->gpm_metrics[j].value;
            }
        }
        describe_metric(metric);
    }
    return NVML_SUCCESS;
}
