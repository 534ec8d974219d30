/* alloc.c: the accounting allocator.
 *
 * Every tensor remat holds is allocated here with a category tag. Live and
 * peak bytes are tracked per category and in total; the total's peak is the
 * peak of the sum. Counted bytes are exactly the bytes asked for, so the
 * simulator can predict them from shapes alone. The executor places a
 * step's large values in an arena of its own (exec.c) and counts them here
 * with remat__alloc_count / _uncount, so they are counted the same way.
 */
#include "../remat-impl.h"

#include <stdlib.h>

void remat__alloc_init(remat__alloc *a) { memset(a, 0, sizeof *a); }

/* Host memory (REMAT_MEM_HOST) is counted apart from the device's total. */
static void count(remat__alloc *a, remat_mem cat, size_t bytes) {
    a->st.live[cat] += bytes;
    if (cat > REMAT_MEM_TOTAL) {
        if (a->st.live[cat] > a->st.peak[cat]) a->st.peak[cat] = a->st.live[cat];
        return;
    }
    a->st.live[REMAT_MEM_TOTAL] += bytes;
    if (a->st.live[cat] > a->st.peak[cat]) a->st.peak[cat] = a->st.live[cat];
    if (a->st.live[REMAT_MEM_TOTAL] > a->st.peak[REMAT_MEM_TOTAL])
        a->st.peak[REMAT_MEM_TOTAL] = a->st.live[REMAT_MEM_TOTAL];
}

void *remat__alloc_get(remat__alloc *a, remat_mem cat, size_t bytes) {
    /* Round the request up for the C library, never for the accounting. */
    size_t padded = (bytes + 63) & ~(size_t)63;
    if (padded == 0) padded = 64;
    void *p = aligned_alloc(64, padded);
    if (!p) {
        remat__err(REMAT_NOMEM, "out of memory allocating %zu bytes of %s", bytes, remat_mem_str(cat));
        return NULL;
    }
    count(a, cat, bytes);
    a->n_allocs++;
    return p;
}

void *remat__alloc_zeroed(remat__alloc *a, remat_mem cat, size_t bytes) {
    void *p = remat__alloc_get(a, cat, bytes);
    if (p) memset(p, 0, bytes);
    return p;
}

void remat__alloc_put(remat__alloc *a, remat_mem cat, void *p, size_t bytes) {
    if (!p) return;
    remat__alloc_uncount(a, cat, bytes);
    free(p);
}

void remat__alloc_count(remat__alloc *a, remat_mem cat, size_t bytes) { count(a, cat, bytes); }

void remat__alloc_uncount(remat__alloc *a, remat_mem cat, size_t bytes) {
    a->st.live[cat] -= bytes;
    if (cat < REMAT_MEM_TOTAL) a->st.live[REMAT_MEM_TOTAL] -= bytes;
}

void remat__alloc_reset_peaks(remat__alloc *a) {
    for (int i = 0; i < REMAT_MEM_COUNT; i++) a->st.peak[i] = a->st.live[i];
}
