/* test_core.c: status codes and messages, the accounting allocator, Philox
 * against the Random123 known-answer vectors, and the thread pool. */
#include "../src/remat-impl.h"
#include "check.h"

#include <stdatomic.h>
#include <string.h>

static void test_status(void) {
    CHECK(strcmp(remat_status_str(REMAT_OK), "ok") == 0);
    CHECK(strcmp(remat_status_str(REMAT_SHAPE), "shape mismatch") == 0);
    CHECK(strcmp(remat_status_str((remat_status)-999), "unknown status") == 0);
    CHECK(strcmp(remat_mem_str(REMAT_MEM_ACT), "activations") == 0);
    CHECK(strcmp(remat_mem_str(REMAT_MEM_TOTAL), "total") == 0);
    CHECK(remat__err(REMAT_IO, "file %s: %d", "x.bin", 7) == REMAT_IO);
    CHECK(strcmp(remat_last_error(), "file x.bin: 7") == 0);
}

static void test_alloc(void) {
    remat__alloc a;
    remat__alloc_init(&a);
    void *p1 = remat__alloc_get(&a, REMAT_MEM_ACT, 1000);
    void *p2 = remat__alloc_zeroed(&a, REMAT_MEM_PARAM, 24);
    CHECK(p1 && p2 && ((uintptr_t)p1 % 64) == 0);
    CHECK(((unsigned char *)p2)[23] == 0);
    CHECK(a.st.live[REMAT_MEM_ACT] == 1000 && a.st.live[REMAT_MEM_PARAM] == 24);
    CHECK(a.st.live[REMAT_MEM_TOTAL] == 1024 && a.st.peak[REMAT_MEM_TOTAL] == 1024);
    remat__alloc_put(&a, REMAT_MEM_ACT, p1, 1000);
    void *p3 = remat__alloc_get(&a, REMAT_MEM_WORKSPACE, 500);
    CHECK(a.st.live[REMAT_MEM_TOTAL] == 524);
    CHECK(a.st.peak[REMAT_MEM_ACT] == 1000 && a.st.peak[REMAT_MEM_WORKSPACE] == 500);
    CHECK(a.st.peak[REMAT_MEM_TOTAL] == 1024); /* the peak of the sum, not a sum of peaks */
    remat__alloc_reset_peaks(&a);
    CHECK(a.st.peak[REMAT_MEM_ACT] == 0 && a.st.peak[REMAT_MEM_TOTAL] == 524);
    remat__alloc_put(&a, REMAT_MEM_WORKSPACE, p3, 500);
    remat__alloc_put(&a, REMAT_MEM_PARAM, p2, 24);
    CHECK(a.st.live[REMAT_MEM_TOTAL] == 0);
    CHECK(a.n_allocs == 3);
}

/* Known-answer vectors from Random123's kat_vectors (philox4x32 R=10). */
static void test_philox(void) {
    struct {
        uint32_t ctr[4], key[2], out[4];
    } kat[] = {
        {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
        {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
         {0xffffffff, 0xffffffff},
         {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
        {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
         {0xa4093822, 0x299f31d0},
         {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
    };
    for (int i = 0; i < 3; i++) {
        uint32_t out[4];
        remat__philox(kat[i].ctr, kat[i].key, out);
        for (int j = 0; j < 4; j++)
            CHECK_MSG(out[j] == kat[i].out[j], "vector %d word %d: %08x != %08x", i, j, out[j], kat[i].out[j]);
    }
    CHECK(remat__u01(0) == 0.0f && remat__u01(0xffffffffu) < 1.0f);
}

typedef struct {
    atomic_int hits[8];
    int64_t sum_phase1[8];
    int64_t seen[8];
} pool_ctx;

static void task(void *vctx, int ith, int nth) {
    pool_ctx *c = vctx;
    atomic_fetch_add(&c->hits[ith], 1);
    c->sum_phase1[ith] = ith + 1;
    extern remat__pool *test_pool;
    remat__pool_barrier(test_pool);
    /* after the barrier every thread sees every phase-1 value */
    int64_t s = 0;
    for (int j = 0; j < nth; j++) s += c->sum_phase1[j];
    c->seen[ith] = s;
}

remat__pool *test_pool;

static void test_pool_run(void) {
    for (int n = 1; n <= 4; n++) {
        CHECK_OK(remat__pool_create(&test_pool, n));
        if (!test_pool) continue;
        CHECK(remat__pool_size(test_pool) == n);
        for (int rep = 0; rep < 50; rep++) {
            pool_ctx c;
            memset(&c, 0, sizeof c);
            remat__pool_run(test_pool, task, &c);
            for (int i = 0; i < n; i++) {
                CHECK(atomic_load(&c.hits[i]) == 1);
                CHECK(c.seen[i] == (int64_t)n * (n + 1) / 2);
            }
        }
        remat__pool_destroy(test_pool);
    }
    remat__pool *bad = NULL;
    CHECK(remat__pool_create(&bad, 0) == REMAT_INVALID && bad == NULL);
}

static void test_split(void) {
    for (int64_t n = 0; n < 20; n++)
        for (int nth = 1; nth <= 5; nth++) {
            int64_t covered = 0, prev_hi = 0;
            for (int i = 0; i < nth; i++) {
                int64_t lo, hi;
                remat__split(n, i, nth, &lo, &hi);
                CHECK(lo == prev_hi && hi >= lo);
                covered += hi - lo;
                prev_hi = hi;
            }
            CHECK(covered == n);
        }
}

int main(void) {
    test_status();
    test_alloc();
    test_philox();
    test_pool_run();
    test_split();
    return check_exit("test_core");
}
