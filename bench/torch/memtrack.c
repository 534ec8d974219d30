/* memtrack.c: heap accounting for the PyTorch reference benchmark.
 *
 * Preloaded into the Python process (LD_PRELOAD), it wraps glibc's
 * allocator and keeps the live and peak bytes of the blocks of 64 KiB or
 * more (tensors; the interpreter's small objects stay out), measured as
 * malloc_usable_size so that allocation and free count the same. Python
 * reads and resets the counters through ctypes. PyTorch's CPU allocator
 * (c10::alloc_cpu) uses posix_memalign and free, so every tensor buffer of
 * that size is counted, with no sampling and no profiler.
 *
 *   cc -O2 -shared -fPIC -o memtrack.so memtrack.c
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <malloc.h>
#include <stddef.h>
#include <stdint.h>

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
extern void __libc_free(void *);

#define BIG ((size_t)64 << 10)

static int64_t live, peak;

static void add(void *p) {
    if (!p) return;
    size_t n = malloc_usable_size(p);
    if (n < BIG) return;
    int64_t now = __atomic_add_fetch(&live, (int64_t)n, __ATOMIC_RELAXED);
    int64_t old = __atomic_load_n(&peak, __ATOMIC_RELAXED);
    while (now > old && !__atomic_compare_exchange_n(&peak, &old, now, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    }
}

static void sub(void *p) {
    if (!p) return;
    size_t n = malloc_usable_size(p);
    if (n >= BIG) __atomic_sub_fetch(&live, (int64_t)n, __ATOMIC_RELAXED);
}

void *malloc(size_t n) {
    void *p = __libc_malloc(n);
    add(p);
    return p;
}
void *calloc(size_t a, size_t b) {
    void *p = __libc_calloc(a, b);
    add(p);
    return p;
}
void *realloc(void *q, size_t n) {
    sub(q);
    void *p = __libc_realloc(q, n);
    add(p ? p : (n ? q : NULL));
    return p;
}
void free(void *p) {
    sub(p);
    __libc_free(p);
}
void *memalign(size_t a, size_t n) {
    void *p = __libc_memalign(a, n);
    add(p);
    return p;
}
void *aligned_alloc(size_t a, size_t n) { return memalign(a, n); }
int posix_memalign(void **out, size_t a, size_t n) {
    void *p = __libc_memalign(a, n);
    if (!p) return 12; /* ENOMEM */
    add(p);
    *out = p;
    return 0;
}

int64_t memtrack_live(void) { return __atomic_load_n(&live, __ATOMIC_RELAXED); }
int64_t memtrack_peak(void) { return __atomic_load_n(&peak, __ATOMIC_RELAXED); }
void memtrack_reset_peak(void) { __atomic_store_n(&peak, __atomic_load_n(&live, __ATOMIC_RELAXED), __ATOMIC_RELAXED); }
