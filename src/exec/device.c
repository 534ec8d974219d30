/* device.c: what this build and machine can run (the devices' names are
 * core/status.c's). */
#include "backend.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

remat_status remat_device_available(remat_device d) {
    if (d == REMAT_DEVICE_CPU) return REMAT_OK;
    if (d != REMAT_DEVICE_CUDA) return remat__err(REMAT_INVALID, "unknown device %d", (int)d);
#ifdef REMAT_HAVE_CUDA
    return remat__cuda_available();
#else
    return remat__err(REMAT_UNSUPPORTED, "this libremat was built without CUDA (configure with nvcc on the PATH "
                                         "and -DREMAT_CUDA=ON)");
#endif
}

remat_status remat_device_memory(remat_device d, size_t *free_bytes, size_t *total_bytes) {
    if (d == REMAT_DEVICE_CPU) {
        long page = sysconf(_SC_PAGESIZE), avail = sysconf(_SC_AVPHYS_PAGES), all = sysconf(_SC_PHYS_PAGES);
        if (page <= 0 || avail < 0 || all <= 0) return remat__err(REMAT_IO, "cannot read the system's memory size");
        *free_bytes = (size_t)avail * (size_t)page;
        *total_bytes = (size_t)all * (size_t)page;
        return REMAT_OK;
    }
    remat_status st = remat_device_available(d);
    if (st != REMAT_OK) return st;
#ifdef REMAT_HAVE_CUDA
    return remat__cuda_memory(free_bytes, total_bytes);
#else
    return REMAT_UNSUPPORTED;
#endif
}

void *remat_host_alloc(remat_device d, size_t bytes) {
#ifdef REMAT_HAVE_CUDA
    if (d == REMAT_DEVICE_CUDA) {
        void *p = remat__cuda_host_alloc(bytes);
        if (p) return p;
    }
#else
    (void)d;
#endif
    return malloc(bytes ? bytes : 1);
}

/* Page-locked memory came from cudaHostAlloc (remat_host_alloc never
 * pins what it got from malloc), the rest from malloc. */
void remat_host_free(remat_device d, void *p) {
    if (!p) return;
#ifdef REMAT_HAVE_CUDA
    if (d == REMAT_DEVICE_CUDA && remat__cuda_host_pinned(p)) {
        remat__cuda_host_free(p);
        return;
    }
#else
    (void)d;
#endif
    free(p);
}
