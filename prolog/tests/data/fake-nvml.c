/* A stand-in for the NVIDIA driver's libnvidia-ml.so.1 in tests (no GPU on the test hosts): the
 * prolog asks NVML what a kernel record implies before it drains, and finds this library through
 * LD_LIBRARY_PATH. Only the few symbols the prolog needs; nvml-wrapper loads each symbol on its
 * own, so a missing one is an error value, as on an old driver.
 * NCCL_CHECK_FAKE_NVML=lost (default): every GPU is lost (NVML_ERROR_GPU_IS_LOST, what a GPU
 * that fell off the bus answers); =answers: every GPU answers and gives no other fact.
 * NCCL_CHECK_FAKE_NVML_GPUS: the GPUs' bus ids (`0000:18:00.0 ...`); any other address is
 * NVML_ERROR_NOT_FOUND (an NVSwitch, a GPU of another driver).
 * Build: cc -shared -fPIC -o DIR/libnvidia-ml.so.1 fake-nvml.c */
#include <stdlib.h>
#include <string.h>

typedef int nvmlReturn_t;
typedef struct nvmlDevice_st *nvmlDevice_t;
struct nvmlDevice_st {
    int unused;
};
static struct nvmlDevice_st gpu;

#define NVML_SUCCESS 0
#define NVML_ERROR_NOT_FOUND 6
#define NVML_ERROR_GPU_IS_LOST 15

nvmlReturn_t nvmlInit_v2(void) { return NVML_SUCCESS; }
nvmlReturn_t nvmlShutdown(void) { return NVML_SUCCESS; }
const char *nvmlErrorString(nvmlReturn_t r) { return r == NVML_ERROR_GPU_IS_LOST ? "GPU is lost" : "fake NVML"; }

nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *bus, nvmlDevice_t *device) {
    const char *mode = getenv("NCCL_CHECK_FAKE_NVML");
    const char *gpus = getenv("NCCL_CHECK_FAKE_NVML_GPUS");
    if (gpus != NULL && (bus == NULL || strstr(gpus, bus) == NULL))
        return NVML_ERROR_NOT_FOUND;
    if (mode != NULL && strcmp(mode, "answers") == 0) {
        *device = &gpu;
        return NVML_SUCCESS;
    }
    return NVML_ERROR_GPU_IS_LOST;
}
