/* bench_rotor.c: how long rotor's dynamic program takes to plan a chain.
 *
 * Plans seeded random heterogeneous chains (sizes from 100 KB to 10 MB,
 * forward costs from 1 to 10 ms, backward about twice the forward) at a
 * budget a quarter of the way from the chain's least feasible budget to
 * its store-all peak, for several (stages, slots) pairs; the headline case
 * is 200 stages with 500 slots. Prints, per case, the best of 3 planning
 * times, the table's size, the time per DP cell-and-choice, and the
 * plan's cost over the no-recomputation cost (sum of forward and
 * backward). Not a test: it checks nothing but that planning succeeds.
 *
 *   bench_rotor [stages slots]...   (default: the cases below)
 */
#include "remat.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static uint64_t rng = 0x2545F4914F6CDD1Dull;
static uint64_t rnd(void) { /* splitmix64 */
    uint64_t z = (rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static double urand(double lo, double hi) { return lo + (hi - lo) * (double)(rnd() >> 11) / 9007199254740992.0; }

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* A random chain of n stages; *output is the last stage's output. The
 * caller frees the array. */
static remat_stage *random_chain(int n, int64_t *output) {
    if (n < 1) return NULL;
    remat_stage *st = malloc((size_t)n * sizeof *st);
    if (!st) return NULL;
    int64_t *x = malloc(((size_t)n + 1) * sizeof *x);
    if (!x) {
        free(st);
        return NULL;
    }
    for (int i = 0; i <= n; i++) x[i] = (int64_t)urand(1e5, 1e7);
    for (int i = 0; i < n; i++) {
        double f = urand(1e-3, 1e-2);
        st[i] = (remat_stage){f, f * urand(1.5, 2.5), x[i], x[i + 1] + (int64_t)urand(0, 2e7)};
    }
    *output = x[n];
    free(x);
    return st;
}

/* The store-all peak: simulated Fe_0..Fe_{n-1}, Loss, B_{n-1}..B_0. */
static int64_t store_all(const remat_stage *st, int n, int64_t output) {
    remat_chain_op *ops = malloc((2 * (size_t)n + 1) * sizeof *ops);
    if (!ops) return -1;
    int k = 0;
    for (int i = 0; i < n; i++) ops[k++] = (remat_chain_op){REMAT_CHAIN_FE, i, 0};
    ops[k++] = (remat_chain_op){REMAT_CHAIN_LOSS, n, 0};
    for (int i = n - 1; i >= 0; i--) ops[k++] = (remat_chain_op){REMAT_CHAIN_B, i, 0};
    double cost;
    int64_t peak = -1;
    if (remat_chain_simulate(st, n, output, ops, k, &cost, &peak) != REMAT_OK) peak = -1;
    free(ops);
    return peak;
}

static int bench(int n, int slots) {
    int64_t output;
    remat_stage *st = random_chain(n, &output);
    if (!st) return 1;
    double base = 0;
    for (int i = 0; i < n; i++) base += st[i].forward + st[i].backward;
    int64_t top = store_all(st, n, output);
    remat_chain_plan *p = NULL;
    /* the least budget these slots accept, from the error message */
    int64_t floor = 0;
    if (remat_chain_solve(st, n, output, 0, slots, &p) == REMAT_BUDGET) {
        const char *m = strstr(remat_last_error(), "fits is ");
        floor = m ? strtoll(m + 8, NULL, 10) : 0;
    }
    remat_chain_plan_destroy(p);
    int64_t budget = floor + (top - floor) / 4;
    double best = 1e30;
    for (int rep = 0; rep < 3; rep++) {
        double t0 = now();
        remat_status s = remat_chain_solve(st, n, output, budget, slots, &p);
        double t = now() - t0;
        if (s != REMAT_OK) {
            fprintf(stderr, "n=%d slots=%d: %s\n", n, slots, remat_last_error());
            free(st);
            return 1;
        }
        if (t < best) best = t;
        if (rep < 2) remat_chain_plan_destroy(p);
    }
    double cells = (double)(n + 1) * (n + 2) / 2 * (slots + 1);
    double inner = (double)n * n * n / 6 * (slots + 1);
    printf("%6d %6d %10.3f s %9.1f MiB %8.2f ns/(cell*stage) %8.3f x  (budget %.0f%% of store-all, %d ops)\n", n, slots,
           best, cells * 10 / 1048576.0, best * 1e9 / inner, remat_chain_plan_cost(p) / base,
           100.0 * (double)budget / (double)top, remat_chain_plan_length(p));
    remat_chain_plan_destroy(p);
    free(st);
    return 0;
}

int main(int argc, char **argv) {
    printf("%6s %6s %12s %13s %24s %10s\n", "stages", "slots", "plan time", "table", "time/(L^3/6*S)", "cost/nore");
    int rc = 0;
    if (argc > 1) {
        for (int i = 1; i + 1 < argc; i += 2) rc |= bench(atoi(argv[i]), atoi(argv[i + 1]));
        return rc;
    }
    static const int cases[][2] = {{50, 500}, {100, 500}, {200, 100}, {200, 500}, {200, 1000}, {300, 500}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) rc |= bench(cases[k][0], cases[k][1]);
    return rc;
}
