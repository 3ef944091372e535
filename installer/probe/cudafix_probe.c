/* cudafix-probe: the live check `cudafix verify` (and later `apply`) runs as a child process.
 *
 * Written in C against libc (and libdl) only: the process it measures must hold nothing a CUDA
 * library could bind to by accident (no libstdc++, none of cudafix's own libraries), and it
 * uses no signal-based timer: on the H200 an interval timer around cuInit changed the result.
 * The parent owns the deadline.
 *
 * It reports every stage on standard output before the call and after it, one write(2) per
 * record, so a hang or a crash still leaves the stage it happened in. The record format is
 * documented in installer/probe/protocol.hpp, which parses it.
 *
 * Usage: cudafix-probe [--open PATH]... [--consumer PATH | --cudnn PATH] [--cudnn-soname SONAME] [--nccl PATH]
 *   --open PATH      once libcuda.so.1 is in, dlopen this library (RTLD_LAZY|RTLD_LOCAL) and keep
 *                    it loaded, one "dlopen library" stage each, in the order given; a failure is
 *                    reported and the next one is tried (up to MAX_OPENS): what a transaction's
 *                    step wrote is opened even where the rest of the tree is not there yet
 *   --consumer PATH  dlopen this cuDNN consumer (RTLD_LAZY|RTLD_LOCAL), so the real loader
 *                    resolves its whole NEEDED tree, then use the cuDNN it brought in
 *   --cudnn PATH     no consumer: dlopen this libcudnn itself
 *                    (either way, on each device: cudnnCreate, one small convolution where cuDNN
 *                    and the driver have the calls for it, and cudnnDestroy)
 *   --nccl PATH      where two or more devices came up, dlopen this libnccl.so.2 and run one
 *                    all-reduce of a float buffer across all of them (driver API memory, the
 *                    default stream), checking the sum; NCCL_NVLS_ENABLE=0 is set first, so
 *                    that NVLink multicast stays off on shared hosts
 * Without --consumer or --cudnn, the cuDNN stages are skipped.
 *
 * A device whose stage fails is named and left out of the later stages; the others go on, and
 * the probe ends "stopped" when any failed.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MAX_DEVICES 64
#define MAX_OPENS 4096
#define NO_DEVICE (-1)

/* The driver API's ABI, as far as the probe uses it (cuda.h: CUresult is an enum, CUdevice an
 * int, CUcontext a pointer). */
typedef int CUresult;
typedef int CUdevice;
typedef void* CUcontext;
typedef struct {
  unsigned char bytes[16];
} CUuuid;
typedef unsigned long long CUdeviceptr;
enum {
  CU_DEVICE_ATTRIBUTE_PCI_BUS_ID = 33,
  CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID = 34,
  CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID = 50,
  CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75,
  CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76
};
typedef void* cudnnHandle_t;
typedef CUresult (*GetIntFn)(int*);
typedef CUresult (*InitFn)(unsigned);
typedef CUresult (*DeviceGetFn)(CUdevice*, int);
typedef CUresult (*GetNameFn)(char*, int, CUdevice);
typedef CUresult (*GetAttributeFn)(int*, int, CUdevice);
typedef CUresult (*GetUuidFn)(CUuuid*, CUdevice);
typedef CUresult (*RetainFn)(CUcontext*, CUdevice);
typedef CUresult (*SetCurrentFn)(CUcontext);
typedef size_t (*CudnnVersionFn)(void);
typedef int (*CudnnCreateFn)(cudnnHandle_t*);
typedef int (*CudnnDestroyFn)(cudnnHandle_t);
typedef CUresult (*MemAllocFn)(CUdeviceptr*, size_t);
typedef CUresult (*MemFreeFn)(CUdeviceptr);
typedef CUresult (*MemcpyHtoDFn)(CUdeviceptr, const void*, size_t);
typedef CUresult (*MemcpyDtoHFn)(void*, CUdeviceptr, size_t);
typedef CUresult (*SyncFn)(void);
/* NCCL's ABI as far as the probe uses it (nccl.h: ncclResult_t, ncclDataType_t and ncclRedOp_t
 * are enums; ncclFloat32 is 7, ncclSum 0; a stream is a CUstream, NULL the default one). */
typedef struct ncclComm* ncclComm_t;
enum { NCCL_FLOAT32 = 7, NCCL_SUM = 0 };
typedef int (*NcclGetVersionFn)(int*);
typedef int (*NcclCommInitAllFn)(ncclComm_t*, int, const int*);
typedef int (*NcclAllReduceFn)(const void*, void*, size_t, int, int, ncclComm_t, void*);
typedef int (*NcclGroupFn)(void);
typedef int (*NcclCommDestroyFn)(ncclComm_t);

static void write_all(const char* buf, size_t len) {
  while (len > 0) {
    ssize_t n = write(STDOUT_FILENO, buf, len);
    if (n < 0 && errno == EINTR) continue; /* a library's own timer must not cost a record */
    if (n <= 0) _exit(120);                /* the parent is gone: nobody to report to */
    buf += n;
    len -= (size_t)n;
  }
}

/* One record: fields joined by tabs, one line. Tabs, newlines and backslashes in a field are
 * escaped (\t \n \\) so a hostile path or error text cannot forge a record. */
static void emit(int nfields, ...) {
  char line[8192];
  size_t at = 0;
  va_list ap;
  va_start(ap, nfields);
  for (int i = 0; i < nfields; ++i) {
    const char* f = va_arg(ap, const char*);
    if (i > 0 && at < sizeof line - 1) line[at++] = '\t';
    for (; f && *f && at < sizeof line - 3; ++f) {
      char c = *f;
      if (c == '\t' || c == '\n' || c == '\\') {
        line[at++] = '\\';
        c = c == '\t' ? 't' : c == '\n' ? 'n' : '\\';
      }
      line[at++] = c;
    }
  }
  va_end(ap);
  line[at++] = '\n';
  write_all(line, at);
}

static long long now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static const char* device_field(int device, char* buf, size_t size) {
  if (device == NO_DEVICE) return "-";
  snprintf(buf, size, "%d", device);
  return buf;
}

static long long stage_start;

static void begin(const char* stage, int device) {
  char dev[16];
  emit(3, "B", stage, device_field(device, dev, sizeof dev));
  stage_start = now_ns();
}

/* code: the CUresult / cudnnStatus_t, or NULL for stages that have none (dlopen). */
static void end(const char* stage, int device, int ok, const long long* code, const char* detail) {
  long long ns = now_ns() - stage_start;
  char dev[16], okf[2] = {ok ? '1' : '0', 0}, nsf[32], codef[32];
  snprintf(nsf, sizeof nsf, "%lld", ns);
  if (code)
    snprintf(codef, sizeof codef, "%lld", *code);
  else
    strcpy(codef, "-");
  emit(7, "E", stage, device_field(device, dev, sizeof dev), okf, nsf, codef, detail ? detail : "");
}

static int report_mapped_object(struct dl_phdr_info* info, size_t size, void* data) {
  (void)size;
  (void)data;
  struct stat st;
  if (!info->dlpi_name || !info->dlpi_name[0] || stat(info->dlpi_name, &st) != 0) return 0;
  char devf[32], inof[32];
  snprintf(devf, sizeof devf, "%llu", (unsigned long long)st.st_dev);
  snprintf(inof, sizeof inof, "%llu", (unsigned long long)st.st_ino);
  emit(4, "M", devf, inof, info->dlpi_name);
  return 0;
}

/* Every file mapped into the process, then the end marker. Called on every way out. */
static void finish(int stop) {
  dl_iterate_phdr(report_mapped_object, NULL);
  emit(2, "X", stop ? "stopped" : "done");
  exit(0);
}

static void* sym(void* lib, const char* name, const char* fallback) {
  void* p = dlsym(lib, name);
  if (!p && fallback) p = dlsym(lib, fallback);
  return p;
}

/* A CUDA call as one stage: ends it with the code, and stops the probe on failure. */
static void cu_stage_end(const char* stage, int device, CUresult rc, const char* detail) {
  long long code = rc;
  end(stage, device, rc == 0, &code, detail);
  if (rc != 0) finish(1);
}

/* A device's stage: ends it with the code and, on failure, marks the device failed instead of
 * stopping, so that the other devices are still checked. Returns whether it succeeded. */
static int device_failed[MAX_DEVICES];
static int any_device_failed;
static int device_stage_end(const char* stage, int device, long long code, const char* detail) {
  end(stage, device, code == 0, &code, detail);
  if (code != 0) device_failed[device] = any_device_failed = 1;
  return code == 0;
}

static void missing_symbol(const char* stage, int device, const char* name) {
  char msg[256];
  snprintf(msg, sizeof msg, "symbol %s not found", name);
  end(stage, device, 0, NULL, msg);
  finish(1);
}

#define CU_FN(lib, type, var, name, fallback, stage, device) \
  type var = (type)sym(lib, name, fallback);                 \
  if (!var) missing_symbol(stage, device, name)

static void cudnn_stages(const char* consumer, const char* cudnn_path, const char* cudnn_soname, void* cuda, int count,
                         CUcontext* contexts, SetCurrentFn set_current);
static void nccl_stages(const char* nccl_path, void* cuda, int count, CUcontext* contexts, SetCurrentFn set_current);

/* The command line: the libraries to open beside libcuda, the consumer, cuDNN's path and soname,
 * NCCL's path (none: no all-reduce). */
struct probe_args {
  const char* nccl_path;
  const char* consumer;
  const char* cudnn_path;
  const char* cudnn_soname;
  const char* opens[MAX_OPENS];
  int nopens;
};

static void parse_args(int argc, char** argv, struct probe_args* a) {
  memset(a, 0, sizeof *a);
  a->cudnn_soname = "libcudnn.so.9";
  for (int i = 1; i + 1 < argc; i += 2) {
    if (strcmp(argv[i], "--open") == 0) {
      if (a->nopens < MAX_OPENS) a->opens[a->nopens++] = argv[i + 1];
    } else if (strcmp(argv[i], "--consumer") == 0)
      a->consumer = argv[i + 1];
    else if (strcmp(argv[i], "--cudnn") == 0)
      a->cudnn_path = argv[i + 1];
    else if (strcmp(argv[i], "--cudnn-soname") == 0)
      a->cudnn_soname = argv[i + 1];
    else if (strcmp(argv[i], "--nccl") == 0)
      a->nccl_path = argv[i + 1];
  }
}

/* libcuda.so.1 dlopened (the probe ends where it does not open), then each library asked for. */
static void* open_libraries(const struct probe_args* a) {
  begin("dlopen libcuda.so.1", NO_DEVICE);
  void* cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!cuda) {
    const char* err = dlerror();
    end("dlopen libcuda.so.1", NO_DEVICE, 0, NULL, err ? err : "dlopen failed");
    finish(1);
  }
  struct link_map* lm = NULL;
  end("dlopen libcuda.so.1", NO_DEVICE, 1, NULL, dlinfo(cuda, RTLD_DI_LINKMAP, &lm) == 0 && lm ? lm->l_name : "");

  for (int i = 0; i < a->nopens; ++i) {
    begin("dlopen library", NO_DEVICE);
    void* lib = dlopen(a->opens[i], RTLD_LAZY | RTLD_LOCAL);
    const char* err = lib ? NULL : dlerror();
    end("dlopen library", NO_DEVICE, lib != NULL, NULL, lib ? a->opens[i] : (err ? err : "dlopen failed"));
  }
  return cuda;
}

/* The driver's version, its initialisation, and how many devices it has (at most MAX_DEVICES). */
static int driver_stages(void* cuda) {
  char buf[512];
  begin("cuDriverGetVersion", NO_DEVICE);
  CU_FN(cuda, GetIntFn, get_version, "cuDriverGetVersion", NULL, "cuDriverGetVersion", NO_DEVICE);
  int version = 0;
  CUresult rc = get_version(&version);
  snprintf(buf, sizeof buf, "%d", version);
  cu_stage_end("cuDriverGetVersion", NO_DEVICE, rc, buf);

  begin("cuInit", NO_DEVICE);
  CU_FN(cuda, InitFn, cu_init, "cuInit", NULL, "cuInit", NO_DEVICE);
  cu_stage_end("cuInit", NO_DEVICE, cu_init(0), "");

  begin("cuDeviceGetCount", NO_DEVICE);
  CU_FN(cuda, GetIntFn, get_count, "cuDeviceGetCount", NULL, "cuDeviceGetCount", NO_DEVICE);
  int count = 0;
  rc = get_count(&count);
  snprintf(buf, sizeof buf, "%d", count);
  cu_stage_end("cuDeviceGetCount", NO_DEVICE, rc, buf);
  return count > MAX_DEVICES ? MAX_DEVICES : count;
}

/* A device's record: its ordinal, name, compute capability, UUID (MIG where the instance's
 * differs from its parent GPU's; empty where the driver has no cuDeviceGetUuid) and PCI address. */
static void emit_device(int d, const char* name, int major, int minor, int domain, int bus, int slot,
                        const CUuuid* uuid, const CUuuid* parent, int have_uuid) {
  char ordf[16], ccf[32], uuidf[64], pcif[32];
  snprintf(ordf, sizeof ordf, "%d", d);
  snprintf(ccf, sizeof ccf, "%d.%d", major, minor);
  snprintf(pcif, sizeof pcif, "%04x:%02x:%02x.0", (unsigned)domain & 0xffff, (unsigned)bus & 0xff,
           (unsigned)slot & 0x1f);
  const unsigned char* u = uuid->bytes;
  snprintf(uuidf, sizeof uuidf, "%s-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
           memcmp(parent->bytes, uuid->bytes, sizeof uuid->bytes) != 0 ? "MIG" : "GPU", u[0], u[1], u[2], u[3], u[4],
           u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
  emit(6, "D", ordf, name, ccf, have_uuid ? uuidf : "", pcif);
}

/* Each device described and its primary context made current, each on its own: a device whose
 * stage fails is marked and left out of its later stages. Returns cuCtxSetCurrent, which the
 * later stages use. */
static SetCurrentFn device_stages(void* cuda, int count, CUcontext* contexts) {
  char buf[512];
  CU_FN(cuda, DeviceGetFn, device_get, "cuDeviceGet", NULL, "cuDeviceGet", 0);
  CU_FN(cuda, GetNameFn, get_name, "cuDeviceGetName", NULL, "cuDeviceGet", 0);
  CU_FN(cuda, GetAttributeFn, get_attr, "cuDeviceGetAttribute", NULL, "cuDeviceGet", 0);
  GetUuidFn get_uuid = (GetUuidFn)sym(cuda, "cuDeviceGetUuid_v2", "cuDeviceGetUuid");
  /* v1 gives a MIG instance's parent GPU, v2 the instance itself: when they differ, it is MIG. */
  GetUuidFn get_parent_uuid = (GetUuidFn)sym(cuda, "cuDeviceGetUuid", NULL);
  CU_FN(cuda, RetainFn, retain, "cuDevicePrimaryCtxRetain", NULL, "cuDevicePrimaryCtxRetain", 0);
  CU_FN(cuda, SetCurrentFn, set_current, "cuCtxSetCurrent", NULL, "cuDevicePrimaryCtxRetain", 0);
  for (int d = 0; d < count; ++d) {
    CUdevice dev = 0;
    begin("cuDeviceGet", d);
    CUresult rc = device_get(&dev, d);
    char name[256] = "";
    int major = 0, minor = 0, bus = 0, slot = 0, domain = 0;
    CUuuid uuid;
    memset(&uuid, 0, sizeof uuid);
    if (rc == 0) rc = get_name(name, (int)sizeof name, dev);
    if (rc == 0) rc = get_attr(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
    if (rc == 0) rc = get_attr(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
    if (rc == 0) rc = get_attr(&bus, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, dev);
    if (rc == 0) rc = get_attr(&slot, CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID, dev);
    if (rc == 0) rc = get_attr(&domain, CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, dev);
    if (rc == 0 && get_uuid) rc = get_uuid(&uuid, dev);
    CUuuid parent = uuid;
    if (rc == 0 && get_parent_uuid && get_parent_uuid != get_uuid && get_parent_uuid(&parent, dev) != 0) parent = uuid;
    snprintf(buf, sizeof buf, "%s", name);
    if (!device_stage_end("cuDeviceGet", d, rc, buf)) continue;
    emit_device(d, name, major, minor, domain, bus, slot, &uuid, &parent, get_uuid != NULL);

    begin("cuDevicePrimaryCtxRetain", d);
    rc = retain(&contexts[d], dev);
    if (rc == 0) rc = set_current(contexts[d]);
    device_stage_end("cuDevicePrimaryCtxRetain", d, rc, "");
  }
  return set_current;
}

int main(int argc, char** argv) {
  struct probe_args a;
  parse_args(argc, argv, &a);
  void* cuda = open_libraries(&a);
  const int count = driver_stages(cuda);
  CUcontext contexts[MAX_DEVICES];
  SetCurrentFn set_current = device_stages(cuda, count, contexts);
  if (a.consumer || a.cudnn_path)
    cudnn_stages(a.consumer, a.cudnn_path, a.cudnn_soname, cuda, count, contexts, set_current);
  if (a.nccl_path) nccl_stages(a.nccl_path, cuda, count, contexts, set_current);
  finish(any_device_failed);
  return 0;
}

/* The cuDNN stages: the consumer (or cuDNN) dlopened, its version, a handle on each device. */
/* cuDNN's tensor, filter and convolution descriptors and its legacy forward convolution, as far as
 * the probe uses them (cudnn_graph.h, cudnn_ops.h, cudnn_cnn.h: descriptors are pointers;
 * CUDNN_TENSOR_NCHW and CUDNN_DATA_FLOAT are 0, CUDNN_CROSS_CORRELATION 1,
 * CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM 0), and the driver calls its buffers need. */
typedef int (*CudnnCreateDescFn)(void**);
typedef int (*CudnnDestroyDescFn)(void*);
typedef int (*CudnnSet4dFn)(void*, int, int, int, int, int, int);
typedef int (*CudnnSetConv2dFn)(void*, int, int, int, int, int, int, int, int);
typedef int (*CudnnConvForwardFn)(cudnnHandle_t, const void*, void*, CUdeviceptr, void*, CUdeviceptr, void*, int, void*,
                                  size_t, const void*, void*, CUdeviceptr);
struct ConvApi {
  CudnnCreateDescFn create_tensor, create_filter, create_conv;
  CudnnDestroyDescFn destroy_tensor, destroy_filter, destroy_conv;
  CudnnSet4dFn set_tensor, set_filter;
  CudnnSetConv2dFn set_conv;
  CudnnConvForwardFn forward;
  MemAllocFn alloc;
  MemFreeFn free;
  SyncFn sync;
};

/* Whether this cuDNN and driver have every call the convolution needs (a test double may not). */
static int conv_api(void* cudnn, void* cuda, struct ConvApi* a) {
  a->create_tensor = (CudnnCreateDescFn)sym(cudnn, "cudnnCreateTensorDescriptor", NULL);
  a->create_filter = (CudnnCreateDescFn)sym(cudnn, "cudnnCreateFilterDescriptor", NULL);
  a->create_conv = (CudnnCreateDescFn)sym(cudnn, "cudnnCreateConvolutionDescriptor", NULL);
  a->destroy_tensor = (CudnnDestroyDescFn)sym(cudnn, "cudnnDestroyTensorDescriptor", NULL);
  a->destroy_filter = (CudnnDestroyDescFn)sym(cudnn, "cudnnDestroyFilterDescriptor", NULL);
  a->destroy_conv = (CudnnDestroyDescFn)sym(cudnn, "cudnnDestroyConvolutionDescriptor", NULL);
  a->set_tensor = (CudnnSet4dFn)sym(cudnn, "cudnnSetTensor4dDescriptor", NULL);
  a->set_filter = (CudnnSet4dFn)sym(cudnn, "cudnnSetFilter4dDescriptor", NULL);
  a->set_conv = (CudnnSetConv2dFn)sym(cudnn, "cudnnSetConvolution2dDescriptor", NULL);
  a->forward = (CudnnConvForwardFn)sym(cudnn, "cudnnConvolutionForward", NULL);
  a->alloc = (MemAllocFn)sym(cuda, "cuMemAlloc_v2", "cuMemAlloc");
  a->free = (MemFreeFn)sym(cuda, "cuMemFree_v2", "cuMemFree");
  a->sync = (SyncFn)sym(cuda, "cuCtxSynchronize", NULL);
  return a->create_tensor && a->create_filter && a->create_conv && a->destroy_tensor && a->destroy_filter &&
         a->destroy_conv && a->set_tensor && a->set_filter && a->set_conv && a->forward && a->alloc && a->free &&
         a->sync;
}

/* One 3x3 convolution of a 1x3x16x16 float tensor into 1x4x14x14, no workspace: cudnnCreate loads
 * only the dispatcher's graph library; the first convolution loads cuDNN's heuristics and engine
 * libraries (from the graph library's dlopen), which is where a sub-library of another build
 * fails (CUDNN_STATUS_NOT_SUPPORTED when no engine is left). The buffers' contents do not matter. */
static long long convolve(cudnnHandle_t h, const struct ConvApi* a) {
  void *x = NULL, *y = NULL, *w = NULL, *c = NULL;
  CUdeviceptr dx = 0, dy = 0, dw = 0;
  const float one = 1.0f, zero = 0.0f;
  long long rc = a->create_tensor(&x);
  if (rc == 0) rc = a->set_tensor(x, 0, 0, 1, 3, 16, 16);
  if (rc == 0) rc = a->create_tensor(&y);
  if (rc == 0) rc = a->set_tensor(y, 0, 0, 1, 4, 14, 14);
  if (rc == 0) rc = a->create_filter(&w);
  if (rc == 0) rc = a->set_filter(w, 0, 0, 4, 3, 3, 3);
  if (rc == 0) rc = a->create_conv(&c);
  if (rc == 0) rc = a->set_conv(c, 0, 0, 1, 1, 1, 1, 1, 0);
  if (rc == 0) rc = a->alloc(&dx, 4 * 3 * 16 * 16);
  if (rc == 0) rc = a->alloc(&dy, 4 * 4 * 14 * 14);
  if (rc == 0) rc = a->alloc(&dw, 4 * 4 * 3 * 3 * 3);
  if (rc == 0) rc = a->forward(h, &one, x, dx, w, dw, c, 0, NULL, 0, &zero, y, dy);
  if (rc == 0) rc = a->sync();
  if (dx) a->free(dx);
  if (dy) a->free(dy);
  if (dw) a->free(dw);
  if (c) a->destroy_conv(c);
  if (w) a->destroy_filter(w);
  if (y) a->destroy_tensor(y);
  if (x) a->destroy_tensor(x);
  return rc;
}

static void cudnn_stages(const char* consumer, const char* cudnn_path, const char* cudnn_soname, void* cuda, int count,
                         CUcontext* contexts, SetCurrentFn set_current) {
  char buf[512];
  void* cudnn = NULL;
  if (consumer) {
    begin("dlopen consumer", NO_DEVICE);
    void* lib = dlopen(consumer, RTLD_LAZY | RTLD_LOCAL);
    const char* err = lib ? NULL : dlerror();
    end("dlopen consumer", NO_DEVICE, lib != NULL, NULL, lib ? consumer : (err ? err : "dlopen failed"));
    if (!lib) finish(1);
    /* The cuDNN the consumer's NEEDED tree brought in, found by its SONAME. */
    cudnn = dlopen(cudnn_soname, RTLD_LAZY | RTLD_NOLOAD);
  } else {
    begin("dlopen cuDNN", NO_DEVICE);
    cudnn = dlopen(cudnn_path, RTLD_LAZY | RTLD_LOCAL);
    const char* err = cudnn ? NULL : dlerror();
    end("dlopen cuDNN", NO_DEVICE, cudnn != NULL, NULL, cudnn ? cudnn_path : (err ? err : "dlopen failed"));
    if (!cudnn) finish(1);
  }

  begin("cudnnGetVersion", NO_DEVICE);
  if (!cudnn) {
    snprintf(buf, sizeof buf, "%s is not loaded: the consumer does not bring it in", cudnn_soname);
    end("cudnnGetVersion", NO_DEVICE, 0, NULL, buf);
    finish(1);
  }
  CudnnVersionFn get_cudnn_version = (CudnnVersionFn)sym(cudnn, "cudnnGetVersion", NULL);
  if (!get_cudnn_version) missing_symbol("cudnnGetVersion", NO_DEVICE, "cudnnGetVersion");
  snprintf(buf, sizeof buf, "%zu", get_cudnn_version());
  end("cudnnGetVersion", NO_DEVICE, 1, NULL, buf);

  CudnnCreateFn create = (CudnnCreateFn)sym(cudnn, "cudnnCreate", NULL);
  CudnnDestroyFn destroy = (CudnnDestroyFn)sym(cudnn, "cudnnDestroy", NULL);
  struct ConvApi conv;
  const int can_convolve = conv_api(cudnn, cuda, &conv);
  for (int d = 0; d < count; ++d) {
    if (device_failed[d]) continue;
    set_current(contexts[d]);
    begin("cudnnCreate", d);
    if (!create) missing_symbol("cudnnCreate", d, "cudnnCreate");
    cudnnHandle_t handle = NULL;
    if (!device_stage_end("cudnnCreate", d, create(&handle), "")) continue;
    if (can_convolve) {
      begin("cudnnConvolutionForward", d);
      device_stage_end("cudnnConvolutionForward", d, convolve(handle, &conv), "3x3 on 1x3x16x16, implicit GEMM");
    }
    begin("cudnnDestroy", d);
    if (!destroy) missing_symbol("cudnnDestroy", d, "cudnnDestroy");
    device_stage_end("cudnnDestroy", d, destroy(handle), "");
  }
}

#define NCCL_COUNT 1024

/* One all-reduce (sum) across every device that came up: device d contributes d + 1 in each of
 * NCCL_COUNT floats, so each element must come back as n(n+1)/2. */
static void nccl_stages(const char* nccl_path, void* cuda, int count, CUcontext* contexts, SetCurrentFn set_current) {
  int devices[MAX_DEVICES], n = 0;
  for (int d = 0; d < count; ++d)
    if (!device_failed[d]) devices[n++] = d;
  if (n < 2) return; /* cudafix says the check needs two */
  char buf[512];
  setenv("NCCL_NVLS_ENABLE", "0", 1);
  begin("dlopen libnccl.so.2", NO_DEVICE);
  void* nccl = dlopen(nccl_path, RTLD_NOW | RTLD_LOCAL);
  if (!nccl) {
    const char* err = dlerror();
    end("dlopen libnccl.so.2", NO_DEVICE, 0, NULL, err ? err : "dlopen failed");
    finish(1);
  }
  struct link_map* lm = NULL;
  end("dlopen libnccl.so.2", NO_DEVICE, 1, NULL, dlinfo(nccl, RTLD_DI_LINKMAP, &lm) == 0 && lm ? lm->l_name : "");
  begin("ncclGetVersion", NO_DEVICE);
  CU_FN(nccl, NcclGetVersionFn, get_version, "ncclGetVersion", NULL, "ncclGetVersion", NO_DEVICE);
  int version = 0;
  long long code = get_version(&version);
  snprintf(buf, sizeof buf, "%d", version);
  end("ncclGetVersion", NO_DEVICE, code == 0, &code, buf);
  if (code != 0) finish(1);

  CU_FN(cuda, MemAllocFn, mem_alloc, "cuMemAlloc_v2", "cuMemAlloc", "nccl buffers", NO_DEVICE);
  CU_FN(cuda, MemFreeFn, mem_free, "cuMemFree_v2", "cuMemFree", "nccl buffers", NO_DEVICE);
  CU_FN(cuda, MemcpyHtoDFn, to_device, "cuMemcpyHtoD_v2", "cuMemcpyHtoD", "nccl buffers", NO_DEVICE);
  CU_FN(cuda, MemcpyDtoHFn, to_host, "cuMemcpyDtoH_v2", "cuMemcpyDtoH", "nccl buffers", NO_DEVICE);
  CU_FN(cuda, SyncFn, synchronize, "cuCtxSynchronize", NULL, "nccl buffers", NO_DEVICE);
  static float host[NCCL_COUNT];
  CUdeviceptr send[MAX_DEVICES], recv[MAX_DEVICES];
  for (int i = 0; i < n; ++i) {
    begin("nccl buffers", devices[i]);
    for (int k = 0; k < NCCL_COUNT; ++k) host[k] = (float)(devices[i] + 1);
    set_current(contexts[devices[i]]);
    CUresult rc = mem_alloc(&send[i], sizeof host);
    if (rc == 0) rc = mem_alloc(&recv[i], sizeof host);
    if (rc == 0) rc = to_device(send[i], host, sizeof host);
    cu_stage_end("nccl buffers", devices[i], rc, "");
  }

  begin("ncclCommInitAll", NO_DEVICE);
  CU_FN(nccl, NcclCommInitAllFn, init_all, "ncclCommInitAll", NULL, "ncclCommInitAll", NO_DEVICE);
  ncclComm_t comms[MAX_DEVICES];
  code = init_all(comms, n, devices);
  snprintf(buf, sizeof buf, "%d devices", n);
  end("ncclCommInitAll", NO_DEVICE, code == 0, &code, buf);
  if (code != 0) finish(1);

  begin("ncclAllReduce", NO_DEVICE);
  CU_FN(nccl, NcclGroupFn, group_start, "ncclGroupStart", NULL, "ncclAllReduce", NO_DEVICE);
  CU_FN(nccl, NcclGroupFn, group_end, "ncclGroupEnd", NULL, "ncclAllReduce", NO_DEVICE);
  CU_FN(nccl, NcclAllReduceFn, all_reduce, "ncclAllReduce", NULL, "ncclAllReduce", NO_DEVICE);
  code = group_start();
  for (int i = 0; i < n && code == 0; ++i) {
    set_current(contexts[devices[i]]);
    code = all_reduce((const void*)(uintptr_t)send[i], (void*)(uintptr_t)recv[i], NCCL_COUNT, NCCL_FLOAT32, NCCL_SUM,
                      comms[i], NULL);
  }
  if (code == 0) code = group_end();
  end("ncclAllReduce", NO_DEVICE, code == 0, &code, "");
  if (code != 0) finish(1);

  begin("nccl sum", NO_DEVICE);
  float expected = 0;
  for (int i = 0; i < n; ++i) expected += (float)(devices[i] + 1);
  int wrong = 0;
  for (int i = 0; i < n && !wrong; ++i) {
    set_current(contexts[devices[i]]);
    CUresult rc = synchronize();
    if (rc == 0) rc = to_host(host, recv[i], sizeof host);
    if (rc != 0) {
      snprintf(buf, sizeof buf, "waiting for device %d's all-reduce or copying it back returned %d", devices[i], rc);
      wrong = 1;
    }
    for (int k = 0; k < NCCL_COUNT && !wrong; ++k)
      if (host[k] != expected) {
        snprintf(buf, sizeof buf, "device %d element %d is %g, not the sum %g", devices[i], k, (double)host[k],
                 (double)expected);
        wrong = 1;
      }
  }
  if (!wrong)
    snprintf(buf, sizeof buf, "%d floats summed over %d devices: %g each, as expected", NCCL_COUNT, n,
             (double)expected);
  end("nccl sum", NO_DEVICE, !wrong, NULL, buf);
  CU_FN(nccl, NcclCommDestroyFn, destroy, "ncclCommDestroy", NULL, "nccl sum", NO_DEVICE);
  for (int i = 0; i < n; ++i) {
    destroy(comms[i]);
    mem_free(send[i]);
    mem_free(recv[i]);
  }
  if (wrong) finish(1);
}
