/* memtrack.c: heap accounting for PyTorch's CPU tensors.
 *
 * Preloaded into the Python process (LD_PRELOAD), it wraps glibc's
 * allocations and keeps the live and peak bytes of the heap that holds
 * data: the CPU's counterpart of torch.cuda.max_memory_allocated, and more.
 * PyTorch's CPU allocator (c10::alloc_cpu) takes every tensor's buffer from
 * posix_memalign and gives it back with free; so do oneDNN's scratchpads.
 * Every aligned block is counted at the bytes asked for, whatever its size
 * (a scalar's 4 bytes as a 4 MiB activation's). Every block of MALLOC_MIN
 * (64 KiB) or more from malloc, calloc or realloc is counted too: what a
 * kernel library (BLAS packing, a oneDNN primitive's own buffers) takes
 * outside PyTorch's allocator, which a plan must also hold. Smaller ones
 * (the interpreter's objects, the autograd engine's nodes and queues) are
 * not counted. Each counted block is remembered in a table of addresses so
 * that its free subtracts the same bytes. No sampling and no profiler.
 * Python reads and resets the counters through ctypes. With
 * REMAT_MEMTRACK_REPORT set in the environment, the process writes
 * "memtrack: peak P live L dropped D" (bytes) to stderr as it exits: how
 * remat's tests compare a CLI run's heap with the peak it reports.
 *
 *   cc -O2 -shared -fPIC -o memtrack.so memtrack.c
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stddef.h>
#include <stdint.h>

extern void *__libc_memalign(size_t, size_t);
extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void __libc_free(void *);

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The smallest malloc, calloc or realloc block counted: 64 KiB, or none
 * with REMAT_MEMTRACK_MALLOC=off in the environment (tensor memory alone,
 * as remat's own test of its executor's bytes measures). */
static size_t malloc_min = (size_t)64 << 10;
__attribute__((constructor)) static void read_env(void) {
    const char *e = getenv("REMAT_MEMTRACK_MALLOC");
    if (e && strcmp(e, "off") == 0) malloc_min = SIZE_MAX;
}

static int64_t live, peak;

static void count(int64_t n) {
    int64_t now = __atomic_add_fetch(&live, n, __ATOMIC_RELAXED);
    int64_t old = __atomic_load_n(&peak, __ATOMIC_RELAXED);
    while (now > old && !__atomic_compare_exchange_n(&peak, &old, now, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {}
}

/* The counted blocks: open addressing on the address, linear probing,
 * deletion by backward shift; one spin lock (tensor allocations are few
 * next to the work on them). 2^22 slots, touched only as they fill. */
#define SLOTS ((size_t)1 << 22)
static struct {
    uintptr_t p;
    size_t n;
} slot[SLOTS];
static size_t used;
static int lock, dropped;

static size_t home(uintptr_t p) { return (size_t)((p >> 4) * 0x9E3779B97F4A7C15ull >> 42) & (SLOTS - 1); }
static void acquire(void) {
    while (__atomic_exchange_n(&lock, 1, __ATOMIC_ACQUIRE)) {}
}
static void release(void) { __atomic_store_n(&lock, 0, __ATOMIC_RELEASE); }

/* Puts q in the table at n bytes; 0 when the table is full. */
static int insert(uintptr_t p, size_t n) {
    acquire();
    int room = used < SLOTS / 2;
    if (room) {
        size_t i = home(p);
        while (slot[i].p) i = (i + 1) & (SLOTS - 1);
        slot[i].p = p, slot[i].n = n, used++;
    }
    release();
    return room;
}

static void remember(void *q, size_t n) {
    if (!q) return;
    if (insert((uintptr_t)q, n)) count((int64_t)n);
    else
        __atomic_store_n(&dropped, 1,
                         __ATOMIC_RELAXED); /* a full table: this block is not counted (memtrack_dropped says so) */
}

/* The bytes a block was counted at, forgotten; -1 when q is not counted. */
static int64_t forget(void *q) {
    uintptr_t p = (uintptr_t)q;
    int64_t n = -1;
    acquire();
    size_t i = home(p);
    while (slot[i].p && slot[i].p != p) i = (i + 1) & (SLOTS - 1);
    if (slot[i].p) {
        n = (int64_t)slot[i].n;
        used--;
        for (size_t j = (i + 1) & (SLOTS - 1); slot[j].p; j = (j + 1) & (SLOTS - 1)) {
            size_t h = home(slot[j].p); /* move j back to i when its home is not in (i, j] */
            if ((j > i && (h <= i || h > j)) || (j < i && h <= i && h > j)) {
                slot[i] = slot[j];
                i = j;
            }
        }
        slot[i].p = 0, slot[i].n = 0;
    }
    release();
    return n;
}

static void sub(void *p) {
    if (!p) return;
    int64_t a = forget(p);
    if (a >= 0) __atomic_sub_fetch(&live, a, __ATOMIC_RELAXED);
}

void free(void *p) {
    sub(p);
    __libc_free(p);
}
void *malloc(size_t n) {
    void *p = __libc_malloc(n);
    if (n >= malloc_min) remember(p, n);
    return p;
}
void *calloc(size_t k, size_t n) {
    void *p = __libc_calloc(k, n);
    if (n && k >= malloc_min / n) remember(p, k * n); /* no overflow: calloc refused it */
    return p;
}
void *realloc(void *q, size_t n) { /* counted again at its new size, if it is counted at all */
    int64_t old = q ? forget(q) : -1;
    void *p = __libc_realloc(q, n);
    if (!p && q && n) { /* refused: q stays as it was, and so does its count */
        if (old >= 0 && !insert((uintptr_t)q, (size_t)old)) {
            __atomic_sub_fetch(&live, old, __ATOMIC_RELAXED);
            __atomic_store_n(&dropped, 1, __ATOMIC_RELAXED);
        }
        return p;
    }
    if (old >= 0) __atomic_sub_fetch(&live, old, __ATOMIC_RELAXED);
    if (n >= malloc_min) remember(p, n);
    return p;
}
void *memalign(size_t a, size_t n) {
    void *p = __libc_memalign(a, n);
    remember(p, n);
    return p;
}
void *aligned_alloc(size_t a, size_t n) { return memalign(a, n); }
int posix_memalign(void **out, size_t a, size_t n) {
    void *p = __libc_memalign(a, n);
    if (!p) return 12; /* ENOMEM */
    remember(p, n);
    *out = p;
    return 0;
}

int64_t memtrack_live(void) { return __atomic_load_n(&live, __ATOMIC_RELAXED); }
int64_t memtrack_peak(void) { return __atomic_load_n(&peak, __ATOMIC_RELAXED); }
int memtrack_dropped(void) { return __atomic_load_n(&dropped, __ATOMIC_RELAXED); }
/* Counts malloc, calloc and realloc blocks of 64 KiB or more from now on
 * (on), or aligned blocks only (off); blocks already counted stay so until
 * freed. */
void memtrack_count_malloc(int on) { malloc_min = on ? (size_t)64 << 10 : SIZE_MAX; }

/* The exit report (REMAT_MEMTRACK_REPORT set): one line on stderr. */
__attribute__((destructor)) static void report(void) {
    if (!getenv("REMAT_MEMTRACK_REPORT")) return;
    char line[128];
    int n = snprintf(line, sizeof line, "memtrack: peak %lld live %lld dropped %d\n", (long long)memtrack_peak(),
                     (long long)memtrack_live(), memtrack_dropped());
    if (n > 0 && write(2, line, (size_t)n) < 0) return;
}
void memtrack_reset_peak(void) { __atomic_store_n(&peak, __atomic_load_n(&live, __ATOMIC_RELAXED), __ATOMIC_RELAXED); }
