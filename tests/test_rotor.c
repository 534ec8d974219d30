/* test_rotor.c: the chain planner (rotor's persistent DP), its simulator
 * and the chain JSON reader.
 *
 * Oracles (PLANNING.md): the heterogeneous instances U1, U2 and H1 of
 * section 9.2 at every listed budget, the unit-chain yardstick of section
 * 8.4, and revolve's table of section 9.1 through a chain on which the
 * two models coincide (see test_revolve). With slots >= budget the slot is
 * one unit, so the discretization is exact and the DP column must match.
 * Properties on 200 seeded random chains: the floor named by REMAT_BUDGET
 * is feasible and one unit less is not; cost does not grow with the
 * budget; at the store-all peak the cost is sum(f) + sum(b); every plan
 * passes the simulator within its budget with the plan's cost; the DP is
 * never cheaper than an exhaustive search over all schedules (tiny
 * chains). With coarse slots the named budget is the least that the same
 * slot count accepts. Storage options (src/plan/rotor.h): on random
 * chains with two options per stage, the one-option internal API equals the
 * public one, the DP with options is never cheaper than an exhaustive
 * search extended with options (tiny chains), never dearer than either
 * chain with every stage fixed to one option, and its floor is at most
 * theirs; a hand-made chain where a cheap-memory option makes small
 * budgets feasible and option 0 wins at large ones; every plan passes the
 * simulator with options. Then simulator errors and JSON errors.
 */
#include "check.h"

#include "remat.h"
#include "plan/rotor.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A chain in PLANNING.md's notation: f, b (L entries), a = omega_x
 * (L+1 entries, a[L] the loss input), ab = omega_xbar (entries 1..L). */
typedef struct {
    int L;
    remat_stage st[128];
    int64_t output;
} chain;

static void make_chain(chain *c, int L, const double *f, const double *b, const int64_t *a, const int64_t *ab) {
    memset(c, 0, sizeof *c);
    c->L = L;
    for (int i = 0; i < L; i++) c->st[i] = (remat_stage){f[i], b[i], a[i], ab[i + 1]};
    c->output = a[L];
}

/* The budget named by a REMAT_BUDGET message, or -1. */
static int64_t named_budget(const char *msg) {
    const char *k = "the smallest budget that fits is ";
    const char *p = strstr(msg, k);
    return p ? strtoll(p + strlen(k), NULL, 10) : -1;
}

/* Solves and checks the plan against the simulator; returns the status
 * and the cost (or -1). */
static remat_status solve_checked(const chain *c, int64_t budget, int slots, double *cost) {
    remat_chain_plan *p = NULL;
    remat_status st = remat_chain_solve(c->st, c->L, c->output, budget, slots, &p);
    *cost = -1;
    if (st != REMAT_OK) {
        CHECK(p == NULL);
        return st;
    }
    int n = remat_chain_plan_length(p);
    remat_chain_op *ops = malloc((size_t)n * sizeof *ops);
    for (int i = 0; i < n; i++) ops[i] = remat_chain_plan_op(p, i);
    double sc = -1;
    int64_t sp = -1;
    CHECK_OK(remat_chain_simulate(c->st, c->L, c->output, ops, n, &sc, &sp));
    CHECK_MSG(sp <= budget, "peak %" PRId64 " > budget %" PRId64, sp, budget);
    CHECK(sp == remat_chain_plan_peak(p));
    CHECK(sc == remat_chain_plan_cost(p));
    /* the schedule ends with B_0 (y_0 made) */
    CHECK(n > 0 && ops[n - 1].kind == REMAT_CHAIN_B && ops[n - 1].stage == 0);
    free(ops);
    *cost = remat_chain_plan_cost(p);
    remat_chain_plan_destroy(p);
    return st;
}

/* Exact cost at budget M (slot = 1 unit); -1 when infeasible. */
static double exact_cost(const chain *c, int64_t M) {
    double cost;
    remat_status st = solve_checked(c, M, M > 0 ? (int)M : 1, &cost);
    return st == REMAT_OK ? cost : -1;
}

/* The undiscretized floor: the budget named for budget 0 with many slots. */
static int64_t exact_floor(const chain *c) {
    remat_chain_plan *p = NULL;
    remat_status st = remat_chain_solve(c->st, c->L, c->output, 0, 1 << 30, &p);
    if (st == REMAT_OK) {
        remat_chain_plan_destroy(p);
        return 0;
    }
    CHECK(st == REMAT_BUDGET);
    return named_budget(remat_last_error());
}

/* Store-all peak: simulate Fe_0..Fe_{L-1}, Loss, B_{L-1}..B_0. */
static int64_t store_all_peak(const chain *c, double *cost) {
    remat_chain_op ops[300];
    int n = 0;
    for (int i = 0; i < c->L; i++) ops[n++] = (remat_chain_op){REMAT_CHAIN_FE, i, 0};
    ops[n++] = (remat_chain_op){REMAT_CHAIN_LOSS, c->L, 0};
    for (int i = c->L - 1; i >= 0; i--) ops[n++] = (remat_chain_op){REMAT_CHAIN_B, i, 0};
    int64_t peak = -1;
    CHECK_OK(remat_chain_simulate(c->st, c->L, c->output, ops, n, cost, &peak));
    return peak;
}

/* ---------------------------------------------------------------- oracles */

typedef struct {
    int64_t from; /* budgets from here up to the next row's `from` */
    double cost;
} row;

/* Checks every budget from 0 to the last row + 3 against the rows; the
 * first row's `from` is the floor (below: REMAT_BUDGET naming it). */
static void check_oracle(const char *name, const chain *c, const row *rows, int nrows) {
    int64_t floor = rows[0].from, top = rows[nrows - 1].from + 3;
    CHECK_MSG(exact_floor(c) == floor, "%s: floor %" PRId64, name, floor);
    for (int64_t M = 0; M <= top; M++) {
        double want = -1;
        for (int r = 0; r < nrows; r++)
            if (M >= rows[r].from) want = rows[r].cost;
        if (M < floor) {
            /* with 1000 slots the unit is 1 and the floor is named */
            remat_chain_plan *p = NULL;
            remat_status st = remat_chain_solve(c->st, c->L, c->output, M, 1000, &p);
            CHECK_MSG(st == REMAT_BUDGET && named_budget(remat_last_error()) == floor, "%s M=%" PRId64 ": %s", name, M,
                      remat_last_error());
            /* and with slots = budget it is infeasible too */
            st = remat_chain_solve(c->st, c->L, c->output, M, M > 0 ? (int)M : 1, &p);
            CHECK_MSG(st == REMAT_BUDGET, "%s M=%" PRId64, name, M);
            continue;
        }
        double got = exact_cost(c, M);
        CHECK_MSG(got == want, "%s M=%" PRId64 ": cost %g, oracle %g (%s)", name, M, got, want,
                  got < 0 ? remat_last_error() : "");
        printf("  %s M=%" PRId64 ": %g (oracle %g)\n", name, M, got, want);
    }
}

static void test_oracles(void) {
    chain c;
    double f6[6] = {1, 1, 1, 1, 1, 1}, b6[6] = {2, 2, 2, 2, 2, 2};
    int64_t a7[7] = {1, 1, 1, 1, 1, 1, 1}, ab1[7] = {0, 1, 1, 1, 1, 1, 1}, ab2[7] = {0, 2, 2, 2, 2, 2, 2};
    make_chain(&c, 6, f6, b6, a7, ab1);
    row u1[] = {{5, 32}, {6, 23}, {7, 21}, {8, 20}, {9, 18}};
    check_oracle("U1", &c, u1, 5);
    make_chain(&c, 6, f6, b6, a7, ab2);
    row u2[] = {{6, 33}, {7, 26}, {8, 23}, {9, 22}, {10, 21}, {12, 20}, {14, 19}, {15, 18}};
    check_oracle("U2", &c, u2, 8);
    double hf[5] = {2, 3, 1, 4, 2}, hb[5] = {4, 6, 2, 8, 4};
    int64_t ha[6] = {2, 3, 3, 1, 2, 1}, hab[6] = {0, 5, 4, 3, 4, 2};
    make_chain(&c, 5, hf, hb, ha, hab);
    row h1[] = {{15, 44}, {16, 42}, {17, 41}, {18, 40}, {19, 39}, {21, 37}, {23, 36}};
    check_oracle("H1", &c, h1, 7);
}

/* PLANNING.md 8.4: unit chains (f=1, b=2, all sizes 1), DP-optimal costs. */
static void test_unit_chains(void) {
    static const struct {
        int L;
        int64_t M;
        double cost;
    } t[] = {
        {16, 6, 88},    {16, 8, 65},    {16, 10, 59},   {16, 12, 56},   {36, 6, 268},   {36, 8, 176},
        {36, 12, 140},  {36, 14, 136},  {36, 18, 131},  {64, 6, 601},   {64, 10, 300},  {64, 16, 249},
        {64, 18, 245},  {64, 24, 238},  {64, 32, 229},  {100, 5, 5249}, {100, 6, 1131}, {100, 10, 511},
        {100, 12, 463}, {100, 20, 390}, {100, 22, 387}, {100, 30, 376}, {100, 50, 355}, {100, 103, 300},
    };
    for (size_t k = 0; k < sizeof t / sizeof t[0]; k++) {
        chain c;
        double f[100], b[100];
        int64_t a[101], ab[101];
        for (int i = 0; i < t[k].L; i++) f[i] = 1, b[i] = 2;
        for (int i = 0; i <= t[k].L; i++) a[i] = 1, ab[i] = i ? 1 : 0;
        make_chain(&c, t[k].L, f, b, a, ab);
        double got = exact_cost(&c, t[k].M);
        CHECK_MSG(got == t[k].cost, "unit L=%d M=%" PRId64 ": %g, oracle %g", t[k].L, t[k].M, got, t[k].cost);
        if (t[k].M == 5) CHECK(exact_floor(&c) == 5);
    }
}

/* Revolve (PLANNING.md 9.1) as a rotor chain. Take n stages with f = 1,
 * b = 2, every x of size 1 and every xbar of size K = 16, and the budget
 * M = s + K + 3. Then:
 * - two xbar never fit together (2K + 2 > M for s < K), so Fe_i is always
 *   followed at once by its B_i (by Loss, B_{n-1} for the last stage):
 *   exactly revolve's turn, which re-runs a step with taping and reverses
 *   it; rotor's "store all" option, which revolve lacks, is unusable;
 * - at a turn of stage i the resident values are the stored x's, x_i
 *   among them, xbar_{i+1}, y_{i+1} and y_i, so the memory left for x's is
 *   c = M - K - 2 = s + 1: revolve's s snapshots plus the x the turn
 *   starts from (revolve's working state), which rotor must also hold;
 * - forwards between turns (CF, Fn) need at most 4 units, never binding.
 * Rotor's leaf recurrence then is revolve's: R(d, c) = min_m [m + R(d-m,
 * c-1) + R(m, c)], R(1, c) = one turn, R(d >= 2, 1) infeasible, which is
 * T(d, c-1) + d turns. So the optimal cost is T(n, s) advances + n turn
 * forwards + 2n backward = T(n, s) + 3n. */
static void test_revolve(void) {
    static const int ns[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 15, 20, 30, 50, 100};
    static const int T[][6] = {
        {0, 0, 0, 0, 0, 0},
        {1, 1, 1, 1, 1, 1},
        {3, 2, 2, 2, 2, 2},
        {6, 4, 3, 3, 3, 3},
        {10, 6, 5, 4, 4, 4},
        {15, 8, 7, 6, 5, 5},
        {21, 11, 9, 8, 7, 6},
        {28, 14, 11, 10, 9, 8},
        {36, 17, 13, 12, 11, 10},
        {45, 20, 15, 14, 13, 12},
        {55, 24, 18, 16, 15, 14},
        {66, 28, 21, 18, 17, 16},
        {105, 40, 30, 24, 23, 22},
        {190, 65, 45, 39, 33, 32},
        {435, 126, 85, 69, 62, 54},
        {1225, 285, 180, 144, 122, 114},
        {4950, 845, 490, 374, 316, 280},
    };
    const int64_t K = 16;
    int bad = 0;
    for (size_t r = 0; r < sizeof ns / sizeof ns[0]; r++) {
        int n = ns[r];
        chain c;
        double f[100], b[100];
        int64_t a[101], ab[101];
        for (int i = 0; i < n; i++) f[i] = 1, b[i] = 2;
        for (int i = 0; i <= n; i++) a[i] = 1, ab[i] = i ? K : 0;
        make_chain(&c, n, f, b, a, ab);
        for (int s = 1; s <= 6; s++) {
            double got = exact_cost(&c, s + K + 3);
            double want = T[r][s - 1] + 3.0 * n;
            CHECK_MSG(got == want, "revolve n=%d s=%d: %g, want T=%d + 3n = %g", n, s, got, T[r][s - 1], want);
            bad += got != want;
        }
    }
    printf("  revolve table: %zu x 6 entries, %d mismatches\n", sizeof ns / sizeof ns[0], bad);
}

/* ------------------------------------------------------ exhaustive search */

/* A binary min-heap of (cost, state) for the search, lazy deletion. */
typedef struct {
    double d;
    uint32_t s;
} hent;
typedef struct {
    hent *v;
    size_t n, cap;
    double *dist;
    int64_t M;
} search;

static void heap_push(search *h, double d, uint32_t s) {
    if (h->n == h->cap) h->cap = h->cap ? 2 * h->cap : 1024, h->v = realloc(h->v, h->cap * sizeof *h->v);
    size_t i = h->n++;
    while (i > 0 && h->v[(i - 1) / 2].d > d) h->v[i] = h->v[(i - 1) / 2], i = (i - 1) / 2;
    h->v[i] = (hent){d, s};
}

static hent heap_pop(search *h) {
    hent top = h->v[0], last = h->v[--h->n];
    size_t i = 0;
    for (;;) {
        size_t ch = 2 * i + 1;
        if (ch >= h->n) break;
        if (ch + 1 < h->n && h->v[ch + 1].d < h->v[ch].d) ch++;
        if (h->v[ch].d >= last.d) break;
        h->v[i] = h->v[ch], i = ch;
    }
    if (h->n > 0) h->v[i] = last;
    return top;
}

/* An edge to state ns costing `cost`, legal if its peak fits. */
static void relax(search *h, double d, uint32_t ns, double cost, int64_t peak) {
    if (peak <= h->M && d + cost < h->dist[ns]) h->dist[ns] = d + cost, heap_push(h, d + cost, ns);
}

/* Dijkstra over resident sets (PLANNING.md 9.2): ops CF, Fe, Loss, B (B
 * frees y_{i+1} and xbar_{i+1}), plus freeing any value for free, except
 * x_k or xbar_k while xbar_{k+1} is resident. Fn is CF then a free. The
 * least cost to make y_0 within M, or -1. Bits: x_k = k, xbar_k =
 * L+1+k, y_k = 2(L+1)+k. */
static double exhaustive(const chain *c, int64_t M) {
    int L = c->L, nb = 3 * (L + 1);
    uint32_t nstates = 1u << nb;
    int64_t size[64];
    for (int k = 0; k <= L; k++) {
        int64_t x = k < L ? c->st[k].input : c->output;
        size[k] = x;
        size[L + 1 + k] = k ? c->st[k - 1].saved : 0;
        size[2 * (L + 1) + k] = x;
    }
    uint32_t XB[32], Y[32];
    for (int k = 0; k <= L; k++) XB[k] = 1u << (L + 1 + k), Y[k] = 1u << (2 * (L + 1) + k);
    int64_t *mem = malloc(nstates * sizeof *mem);
    search h = {.dist = malloc(nstates * sizeof(double)), .M = M};
    for (uint32_t s = 0; s < nstates; s++) {
        h.dist[s] = 1e300;
        int64_t m = 0;
        for (int q = 0; q < nb; q++)
            if (s >> q & 1) m += size[q];
        mem[s] = m;
    }
    double result = -1;
    if (size[0] <= M) h.dist[1] = 0, heap_push(&h, 0.0, 1u);
    while (h.n > 0) {
        hent top = heap_pop(&h);
        uint32_t s = top.s;
        double d = top.d;
        if (d > h.dist[s]) continue;
        if (s & Y[0]) {
            result = d;
            break;
        }
        for (int k = 0; k <= L; k++) {
            if (!(s & (1u << k)) && !(k > 0 && (s & XB[k]))) continue; /* no input */
            if (k == L) {
                if (!(s & Y[L])) relax(&h, d, s | Y[L], 0.0, mem[s] + size[2 * (L + 1) + L]);
                continue;
            }
            double f = c->st[k].forward;
            if (!(s & (1u << (k + 1)))) relax(&h, d, s | (1u << (k + 1)), f, mem[s] + size[k + 1]);
            if (!(s & XB[k + 1])) relax(&h, d, s | XB[k + 1], f, mem[s] + size[L + 1 + k + 1]);
            if ((s & Y[k + 1]) && (s & XB[k + 1]) && !(s & Y[k]))
                relax(&h, d, (s | Y[k]) & ~(Y[k + 1] | XB[k + 1]), c->st[k].backward, mem[s] + size[2 * (L + 1) + k]);
        }
        for (int q = 0; q < nb; q++) {
            if (!(s >> q & 1)) continue;
            int k = q <= L ? q : q - (L + 1);
            if (q < 2 * (L + 1) && k < L && (s & XB[k + 1])) continue; /* x_k, xbar_k held by xbar_{k+1} */
            relax(&h, d, s & ~(1u << q), 0.0, 0);
        }
    }
    free(h.v), free(h.dist), free(mem);
    return result;
}

/* ------------------------------------------------------------ properties */

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint64_t rnd(void) { /* splitmix64 */
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static int64_t rnd_in(int64_t lo, int64_t hi) { return lo + (int64_t)(rnd() % (uint64_t)(hi - lo + 1)); }
/* A stream of its own for the stages that drop their input, so that the
 * chains drawn from rnd() are the ones they were before there were any. */
static uint64_t drop_state = 0x2545F4914F6CDD1Dull;
static int rnd_drop(void) { /* xorshift64: 1 in 3 */
    drop_state ^= drop_state << 13, drop_state ^= drop_state >> 7, drop_state ^= drop_state << 17;
    return drop_state % 3 == 0;
}

static void random_chain(chain *c, int L, int64_t size_lo, int64_t size_hi) {
    double f[16], b[16];
    int64_t a[17], ab[17];
    for (int i = 0; i < L; i++) f[i] = (double)rnd_in(0, 5), b[i] = (double)rnd_in(0, 9);
    for (int i = 0; i <= L; i++) a[i] = rnd_in(size_lo, size_hi);
    ab[0] = 0;
    for (int i = 1; i <= L; i++) ab[i] = a[i] + (rnd() % 3 ? rnd_in(0, size_hi) : 0);
    make_chain(c, L, f, b, a, ab);
}

static void test_random(void) {
    int instances = 0, budgets = 0, brute = 0, brute_equal = 0, brute_better = 0, brute_lower_floor = 0;
    for (int it = 0; it < 200; it++) {
        chain c;
        int L = (int)rnd_in(1, 8);
        random_chain(&c, L, it % 7 == 0 ? 0 : 1, 4);
        double sum = 0;
        for (int i = 0; i < L; i++) sum += c.st[i].forward + c.st[i].backward;
        double all_cost = -1;
        int64_t all_peak = store_all_peak(&c, &all_cost);
        CHECK(all_cost == sum);
        int64_t floor = exact_floor(&c);
        CHECK_MSG(floor >= 0 && floor <= all_peak, "instance %d: floor %" PRId64 ", store-all %" PRId64, it, floor,
                  all_peak);
        if (floor > 0) {
            double cst;
            CHECK_MSG(solve_checked(&c, floor - 1, 1000, &cst) == REMAT_BUDGET &&
                          named_budget(remat_last_error()) == floor,
                      "instance %d: floor - 1", it);
        }
        double prev = 1e300;
        int do_brute = L <= 4;
        for (int64_t M = floor; M <= all_peak + 2; M++) {
            double cost = exact_cost(&c, M);
            CHECK_MSG(cost >= 0, "instance %d M=%" PRId64 ": %s", it, M, remat_last_error());
            CHECK_MSG(cost <= prev, "instance %d: cost %g at M=%" PRId64 " > %g below", it, cost, M, prev);
            if (M >= all_peak) CHECK_MSG(cost == sum, "instance %d M=%" PRId64 ": %g != %g", it, M, cost, sum);
            CHECK(cost >= sum);
            prev = cost;
            budgets++;
            if (do_brute) {
                double ex = exhaustive(&c, M);
                CHECK_MSG(ex >= 0 && ex <= cost, "instance %d M=%" PRId64 ": exhaustive %g, DP %g", it, M, ex, cost);
                brute++;
                brute_equal += ex == cost;
                brute_better += ex < cost;
            }
        }
        if (do_brute && floor > 0 && exhaustive(&c, floor - 1) >= 0) brute_lower_floor++;
        instances++;
    }
    printf("  random: %d chains, %d budgets; exhaustive on %d (chain, budget) pairs: DP = exact on %d, "
           "exact cheaper (non-persistent) on %d; exact feasible below the DP floor on %d chains\n",
           instances, budgets, brute, brute_equal, brute_better, brute_lower_floor);
}

/* Coarse slots: sizes in the thousands, few slots. The named budget is
 * accepted with the same slot count and one unit less is not; plans never
 * exceed their budget. */
static void test_discretized(void) {
    int named = 0;
    for (int it = 0; it < 150; it++) {
        chain c;
        int L = (int)rnd_in(1, 12);
        random_chain(&c, L, 100, 5000);
        int slots = (int)rnd_in(8, 300);
        int64_t exact = exact_floor(&c);
        remat_chain_plan *p = NULL;
        remat_status st = remat_chain_solve(c.st, L, c.output, 1, slots, &p);
        CHECK(st == REMAT_BUDGET);
        int64_t best = named_budget(remat_last_error());
        if (best < 0) {
            CHECK_MSG(strstr(remat_last_error(), "no budget fits") != NULL, "%s", remat_last_error());
            continue;
        }
        named++;
        CHECK_MSG(best >= exact, "named %" PRId64 " below the exact floor %" PRId64, best, exact);
        double cost;
        CHECK_MSG(solve_checked(&c, best, slots, &cost) == REMAT_OK, "instance %d: named %" PRId64 ": %s", it, best,
                  remat_last_error());
        CHECK_MSG(solve_checked(&c, best - 1, slots, &cost) == REMAT_BUDGET, "instance %d: named - 1 = %" PRId64, it,
                  best - 1);
        CHECK(named_budget(remat_last_error()) == best);
        /* Every budget from the named one up is feasible and within budget
         * (checked inside), notably at the edges where the slot size grows
         * (u*slots and u*slots + 1) and the rounding gets coarser. */
        int64_t u0 = (best + slots - 1) / slots;
        for (int64_t u = u0; u < u0 + 6; u++)
            for (int64_t M = u * slots - 1; M <= u * slots + 1; M++)
                if (M >= best)
                    CHECK_MSG(solve_checked(&c, M, slots, &cost) == REMAT_OK, "M=%" PRId64 " slots %d: %s", M, slots,
                              remat_last_error());
        for (int k = 0; k < 5; k++) {
            int64_t M = best + rnd_in(0, 4 * best);
            CHECK_MSG(solve_checked(&c, M, slots, &cost) == REMAT_OK, "M=%" PRId64 ": %s", M, remat_last_error());
        }
        /* the default slot count (500) names its own least budget */
        CHECK(remat_chain_solve(c.st, L, c.output, 0, 0, &p) == REMAT_BUDGET);
        int64_t best500 = named_budget(remat_last_error());
        CHECK(best500 >= exact);
        CHECK(solve_checked(&c, best500, 0, &cost) == REMAT_OK);
        CHECK(solve_checked(&c, best500 + rnd_in(0, 3 * exact), 0, &cost) == REMAT_OK);
        if (best500 > 0) CHECK(solve_checked(&c, best500 - 1, 0, &cost) == REMAT_BUDGET);
    }
    printf("  discretized: %d chains with a named budget checked\n", named);
    /* too few slots for any budget: 3 stages need far more than 4 slots */
    chain c;
    double f[3] = {1, 1, 1}, b[3] = {1, 1, 1};
    int64_t a[4] = {10, 10, 10, 10}, ab[4] = {0, 10, 10, 10};
    make_chain(&c, 3, f, b, a, ab);
    remat_chain_plan *p = NULL;
    CHECK(remat_chain_solve(c.st, 3, c.output, 1000, 4, &p) == REMAT_BUDGET);
    CHECK_MSG(strstr(remat_last_error(), "no budget fits the chain with 4 memory slots") != NULL, "%s",
              remat_last_error());
}

/* ------------------------------------------------- storage options (ex) */

/* A chain whose stages have storage options (src/plan/rotor.h). */
typedef struct {
    int L;
    remat__stage_ex st[16];
    int64_t output;
} chain_ex;

/* One option per stage: option o of every stage that has it (else 0). */
static void fix_option(const chain_ex *e, int o, chain_ex *out) {
    *out = *e;
    for (int i = 0; i < e->L; i++) {
        int k = o < e->st[i].n_options ? o : 0;
        out->st[i].opt[0] = e->st[i].opt[k];
        out->st[i].n_options = 1;
    }
}

static int options_used; /* Fe ops with option > 0 in checked plans */

/* Solves with options and checks the plan against remat__chain_simulate_ex:
 * peak within the budget and equal to the plan's, cost equal to the
 * plan's, ends with B_0, Fe_i and B_i of a stage with the same option,
 * other ops option 0. Returns the status and the cost (or -1). */
static remat_status solve_ex_checked(const chain_ex *e, int64_t budget, int slots, double *cost) {
    remat_chain_plan *p = NULL;
    remat_status st = remat__chain_solve_ex(e->st, e->L, e->output, budget, slots, &p);
    *cost = -1;
    if (st != REMAT_OK) {
        CHECK(p == NULL);
        return st;
    }
    int n = remat_chain_plan_length(p);
    remat_chain_op *ops = malloc((size_t)n * sizeof *ops);
    int fe_opt[16];
    for (int i = 0; i < 16; i++) fe_opt[i] = -1;
    for (int i = 0; i < n; i++) {
        ops[i] = remat_chain_plan_op(p, i);
        if (ops[i].kind == REMAT_CHAIN_FE) {
            fe_opt[ops[i].stage] = ops[i].option;
            options_used += ops[i].option > 0;
        } else if (ops[i].kind == REMAT_CHAIN_B) {
            CHECK_MSG(ops[i].option == fe_opt[ops[i].stage], "B_%d option %d, its Fe's %d", ops[i].stage, ops[i].option,
                      fe_opt[ops[i].stage]);
        } else {
            CHECK(ops[i].option == 0);
        }
    }
    double sc = -1;
    int64_t sp = -1;
    CHECK_OK(remat__chain_simulate_ex(e->st, e->L, e->output, ops, n, &sc, &sp));
    CHECK_MSG(sp <= budget, "peak %" PRId64 " > budget %" PRId64, sp, budget);
    CHECK(sp == remat_chain_plan_peak(p));
    CHECK(sc == remat_chain_plan_cost(p));
    CHECK(n > 0 && ops[n - 1].kind == REMAT_CHAIN_B && ops[n - 1].stage == 0);
    free(ops);
    *cost = remat_chain_plan_cost(p);
    remat_chain_plan_destroy(p);
    return st;
}

static double exact_cost_ex(const chain_ex *e, int64_t M) {
    double cost;
    remat_status st = solve_ex_checked(e, M, M > 0 ? (int)M : 1, &cost);
    return st == REMAT_OK ? cost : -1;
}

static int64_t exact_floor_ex(const chain_ex *e) {
    remat_chain_plan *p = NULL;
    remat_status st = remat__chain_solve_ex(e->st, e->L, e->output, 0, 1 << 30, &p);
    if (st == REMAT_OK) {
        remat_chain_plan_destroy(p);
        return 0;
    }
    CHECK(st == REMAT_BUDGET);
    return named_budget(remat_last_error());
}

/* The store-all peak with option 0 everywhere. */
static int64_t store_all_peak_ex(const chain_ex *e) {
    remat_chain_op ops[64];
    int n = 0;
    for (int i = 0; i < e->L; i++) ops[n++] = (remat_chain_op){REMAT_CHAIN_FE, i, 0};
    ops[n++] = (remat_chain_op){REMAT_CHAIN_LOSS, e->L, 0};
    for (int i = e->L - 1; i >= 0; i--) ops[n++] = (remat_chain_op){REMAT_CHAIN_B, i, 0};
    double cost;
    int64_t peak = -1;
    CHECK_OK(remat__chain_simulate_ex(e->st, e->L, e->output, ops, n, &cost, &peak));
    return peak;
}

/* The exhaustive search of `exhaustive`, with options: xbar_k of each
 * option of stage k-1 is its own value (at most one of them resident);
 * Fe_k^o makes xbar_{k+1}^o; B_k^o needs xbar_{k+1}^o and holds bwd_tmp_o
 * at its peak. Bits: x_k = k, y_k = L+1+k, then the xbar_k^o in order. */
static double exhaustive_ex(const chain_ex *e, int64_t M) {
    int L = e->L, nb = 2 * (L + 1);
    int64_t size[32];
    uint32_t X[16], Y[16], XB[16][REMAT__MAX_OPTIONS], XBA[16];
    for (int k = 0; k <= L; k++) {
        int64_t x = k < L ? e->st[k].input : e->output;
        X[k] = 1u << k, size[k] = x;
        Y[k] = 1u << (L + 1 + k), size[L + 1 + k] = x;
        XBA[k] = 0;
    }
    for (int k = 1; k <= L; k++)
        for (int o = 0; o < e->st[k - 1].n_options; o++) {
            XB[k][o] = 1u << nb, XBA[k] |= XB[k][o];
            size[nb++] = e->st[k - 1].opt[o].saved;
        }
    XBA[L + 1] = 0;
    uint32_t nstates = 1u << nb;
    int64_t *mem = malloc(nstates * sizeof *mem);
    search h = {.dist = malloc(nstates * sizeof(double)), .M = M};
    for (uint32_t s = 0; s < nstates; s++) {
        h.dist[s] = 1e300;
        int64_t m = 0;
        for (int q = 0; q < nb; q++)
            if (s >> q & 1) m += size[q];
        mem[s] = m;
    }
    double result = -1;
    if (size[0] <= M) h.dist[1] = 0, heap_push(&h, 0.0, 1u);
    while (h.n > 0) {
        hent top = heap_pop(&h);
        uint32_t s = top.s;
        double d = top.d;
        if (d > h.dist[s]) continue;
        if (s & Y[0]) {
            result = d;
            break;
        }
        for (int k = 0; k <= L; k++) {
            if (!(s & X[k]) && !(s & XBA[k])) continue; /* no input */
            if (k == L) {
                if (!(s & Y[L])) relax(&h, d, s | Y[L], 0.0, mem[s] + size[L + 1 + L]);
                continue;
            }
            const remat__stage_ex *g = &e->st[k];
            if (!(s & X[k + 1])) relax(&h, d, s | X[k + 1], g->forward, mem[s] + size[k + 1]);
            for (int o = 0; o < g->n_options; o++) {
                if (!(s & XBA[k + 1])) relax(&h, d, s | XB[k + 1][o], g->forward, mem[s] + g->opt[o].saved);
                if ((s & Y[k + 1]) && (s & XB[k + 1][o]) && !(s & Y[k]))
                    relax(&h, d, (s | Y[k]) & ~(Y[k + 1] | XB[k + 1][o]), g->opt[o].backward,
                          mem[s] + size[L + 1 + k] + g->opt[o].bwd_tmp);
            }
        }
        /* free any value, except x_k or xbar_k while xbar_{k+1} is resident */
        for (int k = 0; k <= L; k++) {
            int held = (s & XBA[k + 1]) != 0;
            if ((s & X[k]) && !held) relax(&h, d, s & ~X[k], 0.0, 0);
            if (s & Y[k]) relax(&h, d, s & ~Y[k], 0.0, 0);
            for (int o = 0; k > 0 && o < e->st[k - 1].n_options; o++)
                if ((s & XB[k][o]) && !held) relax(&h, d, s & ~XB[k][o], 0.0, 0);
        }
    }
    free(h.v), free(h.dist), free(mem);
    return result;
}

/* A random chain with options: option 0 as random_chain makes it; on most
 * stages an option 1 that keeps less (between the output and option 0's
 * saved), costs more backward and holds some bwd_tmp. */
static void random_chain_ex(chain_ex *e, int L, int64_t size_lo, int64_t size_hi, int with_tmp) {
    chain c;
    random_chain(&c, L, size_lo, size_hi);
    memset(e, 0, sizeof *e);
    e->L = L, e->output = c.output;
    for (int i = 0; i < L; i++) {
        remat__stage_ex *s = &e->st[i];
        s->forward = c.st[i].forward, s->input = c.st[i].input;
        s->opt[0] = (remat__stage_option){c.st[i].saved, c.st[i].backward, 0, 0};
        s->n_options = 1;
        int64_t out = i + 1 < L ? c.st[i + 1].input : c.output;
        if (rnd() % 4) {
            s->n_options = 2;
            s->opt[1] = (remat__stage_option){rnd_in(out, c.st[i].saved), c.st[i].backward + (double)rnd_in(0, 6),
                                              rnd_in(0, size_hi), 0};
        }
        /* transient bytes of the forwards on half the chains, and on half
         * their stages bytes the backward keeps to the end (a traced
         * step's parameter gradients), counted in its bwd_tmp too on half
         * of those (as chain.c counts them) */
        if (with_tmp) {
            s->fwd_tmp = rnd_in(0, size_hi);
            for (int o = 0; o < s->n_options; o++) s->opt[o].fe_tmp = rnd_in(0, size_hi);
            s->grads = rnd() % 2 ? rnd_in(1, size_hi) : 0;
            int counted = rnd() % 2;
            for (int o = 0; o < s->n_options && counted; o++) s->opt[o].bwd_tmp += s->grads;
        }
        /* and on a third of their stages after the first, an input no
         * backward reads (drop_input: freed after the stage's Fe; such
         * chains have no public twin and exhaustive_ex does not model it) */
        s->drop_input = with_tmp && i > 0 && rnd_drop();
    }
}

/* Dijkstra over resident sets under the simulator's own semantics (the
 * chain model's operations and nothing else: a value is freed only by the
 * operation that consumes it, so every schedule it reaches is persistent):
 * the least cost to make y_0 within M, or -1. The DP must equal it.
 * Bits: x_k = k, y_k = L+1+k, then xbar_k^o. What the B's keep to the end
 * (grads) is held from B_k on: with y_j the lowest gradient resident (a
 * persistent schedule holds one), the grads of stages j..L-1. */
static double exhaustive_persistent(const chain_ex *e, int64_t M) {
    int L = e->L, nb = 2 * (L + 1);
    int64_t size[32];
    uint32_t X[16], Y[16], XB[16][REMAT__MAX_OPTIONS], XBA[16];
    for (int k = 0; k <= L; k++) {
        int64_t x = k < L ? e->st[k].input : e->output;
        X[k] = 1u << k, size[k] = x;
        Y[k] = 1u << (L + 1 + k), size[L + 1 + k] = x;
        XBA[k] = 0;
    }
    /* where stage k drops its input, xbar_k is the option's saved less x_k
     * (Fe_{k-1} makes x_k apart) */
    int drop[17] = {0};
    for (int k = 1; k < L; k++) drop[k] = e->st[k].drop_input;
    for (int k = 1; k <= L; k++)
        for (int o = 0; o < e->st[k - 1].n_options; o++) {
            XB[k][o] = 1u << nb, XBA[k] |= XB[k][o];
            size[nb++] = e->st[k - 1].opt[o].saved - (drop[k] ? e->st[k].input : 0);
        }
    XBA[L + 1] = 0;
    uint32_t nstates = 1u << nb;
    int64_t *mem = malloc(nstates * sizeof *mem), kept[17] = {0};
    for (int k = L - 1; k >= 0; k--) kept[k] = kept[k + 1] + e->st[k].grads;
    search h = {.dist = malloc(nstates * sizeof(double)), .M = M};
    for (uint32_t s = 0; s < nstates; s++) {
        h.dist[s] = 1e300;
        int64_t m = 0;
        for (int q = 0; q < nb; q++)
            if (s >> q & 1) m += size[q];
        for (int k = 0; k <= L; k++)
            if (s & Y[k]) {
                m += kept[k];
                break;
            }
        mem[s] = m;
    }
    double result = -1;
    if (size[0] <= M) h.dist[1] = 0, heap_push(&h, 0.0, 1u);
    while (h.n > 0) {
        hent top = heap_pop(&h);
        uint32_t s = top.s;
        double d = top.d;
        if (d > h.dist[s]) continue;
        if (s & Y[0]) {
            result = d;
            break;
        }
        for (int k = 0; k <= L; k++) {
            /* the forwards need x_k (itself, where stage k drops it), B_k
             * x_k or xbar_k unless stage k drops x_k */
            int fwd = drop[k] ? (s & X[k]) != 0 : (s & X[k]) || (s & XBA[k]);
            if (!fwd && !drop[k]) continue; /* no input */
            if (k == L) {                   /* Loss: frees x_L when resident */
                if (!(s & Y[L])) relax(&h, d, (s | Y[L]) & ~X[L], 0.0, mem[s] + size[L + 1 + L]);
                continue;
            }
            const remat__stage_ex *g = &e->st[k];
            uint32_t in = (s & X[k]) ? X[k] : (s & XBA[k]); /* what Fn frees: x_k, else xbar_k */
            uint32_t xn = drop[k + 1] ? X[k + 1] : 0;       /* what Fe_k makes apart from xbar_{k+1} */
            if (fwd && !(s & X[k + 1])) {
                int64_t pk = mem[s] + size[k + 1] + g->fwd_tmp;
                relax(&h, d, (s | X[k + 1]) & ~in, g->forward, pk); /* Fn_k */
                relax(&h, d, s | X[k + 1], g->forward, pk);         /* CF_k */
            }
            for (int o = 0; o < g->n_options; o++) {
                if (fwd && !(s & XBA[k + 1]) && !(s & xn)) /* Fe_k: frees x_k where stage k drops it */
                    relax(&h, d, (s | XB[k + 1][o] | xn) & ~(drop[k] ? X[k] : 0), g->forward,
                          mem[s] + g->opt[o].saved + g->opt[o].fe_tmp);
                if ((s & Y[k + 1]) && (s & XB[k + 1][o]) && !(s & Y[k])) {
                    uint32_t ns = (s | Y[k]) & ~(Y[k + 1] | XB[k + 1][o] | X[k] | xn);
                    int64_t pk = mem[s] + size[L + 1 + k] + g->opt[o].bwd_tmp;
                    relax(&h, d, ns, g->opt[o].backward, pk > mem[ns] ? pk : mem[ns]);
                }
            }
        }
    }
    free(h.v), free(h.dist), free(mem);
    return result;
}

/* (1) the one-option API equals the public one; (2) with two options the
 * DP is never cheaper than the exhaustive search with options, never
 * dearer than either chain with every stage fixed to one option, and its
 * floor is at most theirs; (4) every plan passes the simulator. */
static void test_options_random(void) {
    int instances = 0, budgets = 0, brute = 0, brute_equal = 0, better0 = 0, below0 = 0, drop_pairs = 0, drop_equal = 0;
    options_used = 0;
    for (int it = 0; it < 150; it++) {
        chain_ex e;
        int L = (int)rnd_in(1, 6);
        random_chain_ex(&e, L, it % 9 == 0 ? 0 : 1, 4, it % 2);
        chain_ex f0, f1;
        fix_option(&e, 0, &f0);
        fix_option(&e, 1, &f1);
        /* the public chain of f0 */
        chain c = {.L = L, .output = e.output};
        for (int i = 0; i < L; i++)
            c.st[i] = (remat_stage){e.st[i].forward, e.st[i].opt[0].backward, e.st[i].input, e.st[i].opt[0].saved};
        int tmp = it % 2; /* chains with transient bytes have no public twin */
        int64_t floor = exact_floor_ex(&e), fl0 = tmp ? exact_floor_ex(&f0) : exact_floor(&c),
                fl1 = exact_floor_ex(&f1);
        CHECK(exact_floor_ex(&f0) == fl0);
        CHECK_MSG(floor <= fl0 && floor <= fl1, "instance %d: floor %" PRId64 ", fixed %" PRId64 " %" PRId64, it, floor,
                  fl0, fl1);
        below0 += floor < fl0;
        if (floor > 0) {
            double cst;
            CHECK_MSG(solve_ex_checked(&e, floor - 1, 1000, &cst) == REMAT_BUDGET &&
                          named_budget(remat_last_error()) == floor,
                      "instance %d: floor - 1", it);
        }
        int64_t top = store_all_peak_ex(&e);
        /* the all-budgets table (unit 1) gives the solver's plan at every
         * budget, and the same floor */
        remat__chain_tab *tab = NULL;
        CHECK_OK(remat__chain_tab_build(e.st, L, e.output, 1, top + 2, &tab));
        if (tab)
            CHECK_MSG(remat__chain_tab_floor(tab) == floor, "instance %d: table floor %lld, solver %lld", it,
                      (long long)remat__chain_tab_floor(tab), (long long)floor);
        double prev = 1e300;
        int do_brute = L <= 3;
        for (int64_t M = floor; M <= top + 2; M++) {
            double cost = exact_cost_ex(&e, M);
            CHECK_MSG(cost >= 0, "instance %d M=%" PRId64 ": %s", it, M, remat_last_error());
            CHECK_MSG(cost <= prev, "instance %d: cost %g at M=%" PRId64 " > %g below", it, cost, M, prev);
            prev = cost;
            remat_chain_plan *tp = NULL;
            if (tab) {
                CHECK_OK(remat__chain_tab_plan(tab, M, &tp));
                CHECK_MSG(tp && remat_chain_plan_cost(tp) == cost && remat_chain_plan_peak(tp) <= M,
                          "instance %d M=%" PRId64 ": table plan %g, solver %g", it, M,
                          tp ? remat_chain_plan_cost(tp) : -1.0, cost);
                remat_chain_plan_destroy(tp);
            }
            double c0x = exact_cost_ex(&f0, M), c0 = tmp ? c0x : exact_cost(&c, M), c1 = exact_cost_ex(&f1, M);
            CHECK_MSG(c0 == c0x, "instance %d M=%" PRId64 ": public %g, one-option ex %g", it, M, c0, c0x);
            CHECK_MSG(c0 < 0 || cost <= c0, "instance %d M=%" PRId64 ": options %g > option 0 %g", it, M, cost, c0);
            CHECK_MSG(c1 < 0 || cost <= c1, "instance %d M=%" PRId64 ": options %g > option 1 %g", it, M, cost, c1);
            better0 += c0 < 0 || cost < c0;
            if (M >= top && !tmp) {
                double sum = 0;
                for (int i = 0; i < L; i++) sum += e.st[i].forward + e.st[i].opt[0].backward;
                CHECK_MSG(cost <= sum, "instance %d M=%" PRId64 ": %g > store-all %g", it, M, cost, sum);
            }
            budgets++;
            if (do_brute) {
                /* equal to the best persistent schedule (the class the DP
                 * is optimal over); the search over every schedule
                 * (values freed at will) may only be cheaper */
                double ep = exhaustive_persistent(&e, M);
                /* with dropped inputs the search also finds schedules
                 * outside the DP's recursion (a stage's Fe before a later
                 * stage's B, a Fn run only to free its input): the DP's
                 * plan is never cheaper (the simulator checks it fits), and
                 * equal on nearly all */
                int drops = 0;
                for (int i = 0; i < L; i++) drops |= e.st[i].drop_input;
                if (drops) {
                    CHECK_MSG(ep >= 0 && ep <= cost, "instance %d M=%" PRId64 ": persistent exhaustive %g, DP %g", it,
                              M, ep, cost);
                    drop_pairs++, drop_equal += ep == cost;
                } else {
                    CHECK_MSG(ep == cost, "instance %d M=%" PRId64 ": persistent exhaustive %g, DP %g", it, M, ep,
                              cost);
                }
                if (ep != cost && getenv("ROTOR_DEBUG")) {
                    fprintf(stderr, "L=%d output=%lld\n", L, (long long)e.output);
                    for (int i = 0; i < L; i++) {
                        fprintf(stderr, " st%d f=%g in=%lld%s g=%lld ftmp=%lld:", i, e.st[i].forward,
                                (long long)e.st[i].input, e.st[i].drop_input ? " drop" : "", (long long)e.st[i].grads,
                                (long long)e.st[i].fwd_tmp);
                        for (int o = 0; o < e.st[i].n_options; o++)
                            fprintf(stderr, " [sv=%lld b=%g bt=%lld ft=%lld]", (long long)e.st[i].opt[o].saved,
                                    e.st[i].opt[o].backward, (long long)e.st[i].opt[o].bwd_tmp,
                                    (long long)e.st[i].opt[o].fe_tmp);
                        fprintf(stderr, "\n");
                    }
                    remat_chain_plan *pl = NULL;
                    if (remat__chain_solve_ex(e.st, L, e.output, M, (int)M, &pl) == REMAT_OK) {
                        for (int q = 0; q < remat_chain_plan_length(pl); q++) {
                            remat_chain_op op = remat_chain_plan_op(pl, q);
                            fprintf(stderr, " %d:%d/%d", (int)op.kind, op.stage, op.option);
                        }
                        fprintf(stderr, "\n");
                        remat_chain_plan_destroy(pl);
                    }
                }
                if (it % 2 == 0) { /* no transient bytes: exhaustive_ex does not model them */
                    double ex = exhaustive_ex(&e, M);
                    CHECK_MSG(ex >= 0 && ex <= cost, "instance %d M=%" PRId64 ": exhaustive %g, DP %g", it, M, ex,
                              cost);
                    brute_equal += ex == cost;
                }
                brute++;
            }
        }
        remat__chain_tab_free(tab);
        instances++;
    }
    printf("  options: %d chains, %d budgets; cheaper than option 0 alone (or feasible only with options) on %d; "
           "floor below option 0's on %d chains; %d Fe with option > 0; the DP equals the exhaustive search over "
           "persistent schedules on all %d pairs but those with dropped inputs (asserted; half the chains with "
           "transient bytes); the search that frees "
           "values at will equals it on %d of those without; with stages that drop their input, equal on %d of "
           "%d (at least 95%% asserted)\n",
           instances, budgets, better0, below0, options_used, brute, brute_equal, drop_equal, drop_pairs);
    CHECK(better0 > 0 && below0 > 0 && options_used > 0);
    CHECK_MSG(drop_pairs > 50 && drop_equal >= 0.95 * drop_pairs, "dropped inputs: DP equal on %d of %d", drop_equal,
              drop_pairs);

    /* coarse slots: the named budget is feasible with the same slot count
     * and one unit less is not */
    for (int it = 0; it < 100; it++) {
        chain_ex e;
        int L = (int)rnd_in(1, 12);
        random_chain_ex(&e, L, 100, 5000, 0);
        int slots = (int)rnd_in(8, 300);
        remat_chain_plan *p = NULL;
        CHECK(remat__chain_solve_ex(e.st, L, e.output, 1, slots, &p) == REMAT_BUDGET);
        int64_t best = named_budget(remat_last_error());
        if (best < 0) continue;
        CHECK(best >= exact_floor_ex(&e));
        double cost;
        CHECK_MSG(solve_ex_checked(&e, best, slots, &cost) == REMAT_OK, "named %" PRId64 ": %s", best,
                  remat_last_error());
        CHECK(solve_ex_checked(&e, best - 1, slots, &cost) == REMAT_BUDGET);
        for (int k = 0; k < 5; k++) {
            int64_t M = best + rnd_in(0, 4 * best);
            CHECK_MSG(solve_ex_checked(&e, M, slots, &cost) == REMAT_OK, "M=%" PRId64 ": %s", M, remat_last_error());
        }
    }
}

/* (3) By hand: stages of f = 1 on sizes 1; stage 0 keeps 1 (b = 2);
 * stage 1's option 0 keeps 8 (b = 2), its option 1 keeps only its output
 * (1) and recomputes: b = 4 with 2 more bytes during B_1. With option 0
 * B_1 holds x_0, x_1 (or xbar_1), xbar_2, y_2, y_1: 1+1+8+1+1 = 12, the
 * floor; with option 1: 1+1+1+1+1+2 = 7. So budgets 7..11 need option 1
 * (cost 1+1+4+2 = 8) and from 12 on option 0 is chosen (cost 6). */
static void test_options_by_hand(void) {
    chain_ex e = {.L = 2, .output = 1};
    e.st[0] = (remat__stage_ex){.forward = 1, .input = 1, .n_options = 1, .opt = {{1, 2, 0}}};
    e.st[1] = (remat__stage_ex){.forward = 1, .input = 1, .n_options = 2, .opt = {{8, 2, 0}, {1, 4, 2}}};
    chain_ex f0;
    fix_option(&e, 0, &f0);
    CHECK(exact_floor_ex(&f0) == 12);
    CHECK(exact_floor_ex(&e) == 7);
    for (int64_t M = 0; M <= 16; M++) {
        double c = exact_cost_ex(&e, M), c0 = exact_cost_ex(&f0, M);
        double want = M < 7 ? -1 : M < 12 ? 8 : 6, want0 = M < 12 ? -1 : 6;
        CHECK_MSG(c == want && c0 == want0, "M=%" PRId64 ": %g (want %g), option 0 alone %g (want %g)", M, c, want, c0,
                  want0);
        remat_chain_plan *p = NULL;
        if (M < 7 || remat__chain_solve_ex(e.st, 2, e.output, M, (int)M, &p) != REMAT_OK) continue;
        /* the option of B_1 (and Fe_1) */
        int o = -1;
        for (int i = 0; i < remat_chain_plan_length(p); i++) {
            remat_chain_op op = remat_chain_plan_op(p, i);
            if (op.stage == 1 && (op.kind == REMAT_CHAIN_FE || op.kind == REMAT_CHAIN_B)) {
                CHECK(o < 0 || op.option == o);
                o = op.option;
            }
        }
        CHECK_MSG(o == (M < 12 ? 1 : 0), "M=%" PRId64 ": stage 1 uses option %d", M, o);
        CHECK(remat_chain_plan_peak(p) == (M < 12 ? 7 : 12));
        remat_chain_plan_destroy(p);
    }
    remat_chain_plan *p = NULL;
    CHECK(remat__chain_solve_ex(e.st, 2, e.output, 6, 1000, &p) == REMAT_BUDGET);
    CHECK_MSG(named_budget(remat_last_error()) == 7, "%s", remat_last_error());

    /* the simulator honours options: sizes, tmp, cost, and consistency */
    remat_chain_op ops[] = {{REMAT_CHAIN_FE, 0, 0},
                            {REMAT_CHAIN_FE, 1, 1},
                            {REMAT_CHAIN_LOSS, 2, 0},
                            {REMAT_CHAIN_B, 1, 1},
                            {REMAT_CHAIN_B, 0, 0}};
    double cost;
    int64_t peak;
    CHECK_OK(remat__chain_simulate_ex(e.st, 2, e.output, ops, 5, &cost, &peak));
    CHECK(cost == 8 && peak == 7);
    ops[3].option = 0; /* xbar_2 was made with option 1 */
    CHECK(remat__chain_simulate_ex(e.st, 2, e.output, ops, 5, &cost, &peak) == REMAT_INVALID);
    CHECK_MSG(strstr(remat_last_error(), "op 3 (B, stage 1, option 0): xbar_2 was made with option 1") != NULL, "%s",
              remat_last_error());
    ops[3].option = 1, ops[1].option = 2;
    CHECK(remat__chain_simulate_ex(e.st, 2, e.output, ops, 5, &cost, &peak) == REMAT_INVALID);
    CHECK_MSG(strstr(remat_last_error(), "option 2 out of range 0..1") != NULL, "%s", remat_last_error());
    /* the public simulator has one option per stage */
    remat_stage pub[2] = {{1, 2, 1, 1}, {1, 2, 1, 8}};
    ops[1].option = 1;
    CHECK(remat_chain_simulate(pub, 2, 1, ops, 5, &cost, &peak) == REMAT_INVALID);
    /* bad options are named */
    chain_ex d = e;
    d.st[1].opt[1].saved = 0; /* below the output (1) */
    CHECK(remat__chain_solve_ex(d.st, 2, d.output, 100, 0, &p) == REMAT_INVALID);
    CHECK_MSG(strstr(remat_last_error(), "stage 1, option 1: 'saved'") != NULL, "%s", remat_last_error());
    d = e;
    d.st[1].opt[1].bwd_tmp = -1;
    CHECK(remat__chain_solve_ex(d.st, 2, d.output, 100, 0, &p) == REMAT_INVALID);
    d = e;
    d.st[0].n_options = REMAT__MAX_OPTIONS + 1;
    CHECK(remat__chain_solve_ex(d.st, 2, d.output, 100, 0, &p) == REMAT_INVALID);
    CHECK(p == NULL);
}

/* ------------------------------------------------------- simulator, args */

static void test_simulator_errors(void) {
    double hf[5] = {2, 3, 1, 4, 2}, hb[5] = {4, 6, 2, 8, 4};
    int64_t ha[6] = {2, 3, 3, 1, 2, 1}, hab[6] = {0, 5, 4, 3, 4, 2};
    chain c;
    make_chain(&c, 5, hf, hb, ha, hab);
    double cost;
    int64_t peak;
    /* Fn_0 makes x_1 and frees x_0, Fn_1 makes x_2 and frees x_1: Fe_1
     * then has no input */
    remat_chain_op ops1[] = {{REMAT_CHAIN_FN, 0, 0}, {REMAT_CHAIN_FN, 1, 0}, {REMAT_CHAIN_FE, 1, 0}};
    CHECK(remat_chain_simulate(c.st, 5, c.output, ops1, 3, &cost, &peak) == REMAT_INVALID);
    CHECK_MSG(strstr(remat_last_error(), "op 2 (Fe, stage 1)") != NULL, "%s", remat_last_error());
    /* B_0 before anything */
    remat_chain_op ops2[] = {{REMAT_CHAIN_B, 0, 0}};
    CHECK(remat_chain_simulate(c.st, 5, c.output, ops2, 1, &cost, &peak) == REMAT_INVALID);
    CHECK_MSG(strstr(remat_last_error(), "op 0 (B, stage 0)") != NULL, "%s", remat_last_error());
    /* the loss is stage 5 */
    remat_chain_op ops3[] = {{REMAT_CHAIN_LOSS, 4, 0}};
    CHECK(remat_chain_simulate(c.st, 5, c.output, ops3, 1, &cost, &peak) == REMAT_INVALID);
    /* an exact count: CF_0 Fn_1 keeps x_0 and x_2: peak 2+3+3 during Fn_1 */
    remat_chain_op ops4[] = {{REMAT_CHAIN_CF, 0, 0}, {REMAT_CHAIN_FN, 1, 0}};
    CHECK_OK(remat_chain_simulate(c.st, 5, c.output, ops4, 2, &cost, &peak));
    CHECK(cost == 5 && peak == 8);
    /* recomputing a resident value is an error */
    remat_chain_op ops5[] = {{REMAT_CHAIN_CF, 0, 0}, {REMAT_CHAIN_CF, 0, 0}};
    CHECK(remat_chain_simulate(c.st, 5, c.output, ops5, 2, &cost, &peak) == REMAT_INVALID);
    CHECK_MSG(strstr(remat_last_error(), "op 1 (CF, stage 0): x_1 is already resident") != NULL, "%s",
              remat_last_error());
    /* H1 store-all: peak x_0 + all xbar + y_5 + y_4 = 2+18+1+2 = 23 */
    double all;
    CHECK(store_all_peak(&c, &all) == 23 && all == 36);

    /* invalid chains */
    remat_chain_plan *p = NULL;
    CHECK(remat_chain_solve(c.st, 0, 1, 100, 0, &p) == REMAT_INVALID);
    chain d = c;
    d.st[2].saved = 0; /* below stage 3's input (1) */
    CHECK(remat_chain_solve(d.st, 5, d.output, 100, 0, &p) == REMAT_INVALID);
    CHECK_MSG(strstr(remat_last_error(), "stage 2: 'saved'") != NULL, "%s", remat_last_error());
    d = c;
    d.st[1].forward = -1;
    CHECK(remat_chain_solve(d.st, 5, d.output, 100, 0, &p) == REMAT_INVALID);
    CHECK_MSG(strstr(remat_last_error(), "stage 1: 'forward'") != NULL, "%s", remat_last_error());
    CHECK(remat_chain_solve(c.st, 5, c.output, -1, 0, &p) == REMAT_INVALID);
    CHECK(p == NULL);
    /* the default slot count plans H1 within a byte-sized budget */
    double cst;
    CHECK_OK(solve_checked(&c, 15, 0, &cst));
    CHECK(cst == 44);
}

/* ------------------------------------------------------------------ JSON */

static void expect_json_error(const char *text, const char *needle) {
    remat_stage *st = (remat_stage *)1;
    int n = -1;
    int64_t out = -1;
    remat_status s = remat_chain_parse_json(text, &st, &n, &out);
    CHECK_MSG(s != REMAT_OK && st == NULL, "accepted: %s", text);
    CHECK_MSG(strstr(remat_last_error(), needle) != NULL, "message '%s' lacks '%s'", remat_last_error(), needle);
}

static void test_json(void) {
    const char *ok = "{\"stages\": [\n"
                     "  {\"forward\": 2, \"backward\": 4, \"input\": 2, \"saved\": 5},\n"
                     "  {\"forward\": 3.5, \"backward\": 6, \"input\": 3, \"saved\": 4}\n"
                     "], \"output\": 3}";
    remat_stage *st = NULL;
    int n = 0;
    int64_t out = 0;
    CHECK_OK(remat_chain_parse_json(ok, &st, &n, &out));
    CHECK(n == 2 && out == 3);
    if (st && n == 2) {
        CHECK(st[0].forward == 2 && st[0].backward == 4 && st[0].input == 2 && st[0].saved == 5);
        CHECK(st[1].forward == 3.5 && st[1].input == 3 && st[1].saved == 4);
        remat_chain_plan *p = NULL;
        CHECK_OK(remat_chain_solve(st, n, out, 100, 0, &p));
        remat_chain_plan_destroy(p);
    }
    free(st);
    /* the second ',' is column 17; cJSON may point one character past it */
    expect_json_error("{\"stages\": [\n  {\"forward\": 1,, }\n]}", "JSON syntax error at line 2, column 1");
    expect_json_error("{\"stages\": [\n  {\"forward\": 1, \"backward\": 1, \"input\": 1, \"saved\": 1}\n",
                      "JSON syntax error at line 3");
    expect_json_error("{\"stages\": []} trailing", "line 1, column 16");
    expect_json_error("{\"stages\": [{\"forward\": 1, \"backward\": 1, \"input\": 1, \"saved\": 1},"
                      " {\"forward\": 1, \"backward\": 1, \"input\": 1}], \"output\": 1}",
                      "stage 1: 'saved' is missing");
    expect_json_error("{\"stages\": [{\"forward\": 1, \"backward\": 1, \"input\": -2, \"saved\": 1}], \"output\": 1}",
                      "stage 0: 'input' is negative");
    expect_json_error("{\"stages\": [{\"forward\": \"fast\", \"backward\": 1, \"input\": 2, \"saved\": 1}], "
                      "\"output\": 1}",
                      "stage 0: 'forward' is not a number");
    expect_json_error("{\"stages\": [{\"forward\": 1, \"backward\": -1, \"input\": 2, \"saved\": 1}], \"output\": 1}",
                      "stage 0: 'backward' is negative");
    expect_json_error("{\"stages\": [{\"forward\": 1, \"backward\": 1, \"input\": 2.5, \"saved\": 3}], \"output\": 1}",
                      "stage 0: 'input' is not an integer");
    expect_json_error(
        "{\"stages\": [{\"forward\": 1, \"backward\": 1e999, \"input\": 2, \"saved\": 3}], \"output\": 1}",
        "stage 0: 'backward' is not finite");
    expect_json_error("{\"stages\": [{\"forward\": 1, \"backward\": 1, \"input\": 2, \"saved\": 3}]}",
                      "'output' is missing");
    expect_json_error("{\"stages\": [{\"forward\": 1, \"backward\": 1, \"input\": 2, \"saved\": 3}], \"output\": null}",
                      "'output' is not a number");
    expect_json_error("{\"stages\": [], \"output\": 1}", "at least one stage");
    expect_json_error("{\"output\": 1}", "'stages' is missing");
    expect_json_error("[1, 2]", "JSON object");
    expect_json_error("{\"stages\": [{\"forward\": 1, \"backward\": 1, \"input\": 2, \"saved\": 3},"
                      " {\"forward\": 1, \"backward\": 1, \"input\": 4, \"saved\": 4}], \"output\": 1}",
                      "stage 0: 'saved' (3) is less than the stage's output");
    expect_json_error("{\"stages\": [{\"forward\": 1, \"backward\": 1, \"input\": 2, \"saved\": 3}], \"output\": 9}",
                      "stage 0: 'saved' (3) is less than the chain's 'output'");
}

/* Huge chains (fuzzed): three stages with inputs up to 2^52 bytes and 22
 * slots. With forward costs near 1e308 a schedule's cost overflows, and
 * the chain is refused as such (infinite cost is the DP's mark of an
 * infeasible state: a named floor once came out refused); with costs
 * near 1e305, every floor named is feasible and one byte less is refused
 * naming the same floor. */
static void test_huge_chains(void) {
    int refused = 0, floors = 0;
    for (int it = 0; it < 3000; it++) {
        int huge = it % 2 == 0;
        remat_stage st[3];
        const int64_t big = (int64_t)1 << 52;
        for (int i = 0; i < 3; i++) {
            st[i].forward = (huge ? 1e308 : 1e305) * (0.5 + (double)rnd_in(0, 49) / 100.0);
            st[i].backward = rnd_in(0, 3) == 0 ? (huge ? 1e307 : 1e304) : (double)rnd_in(0, 99);
            st[i].input = rnd_in(0, 1) ? big : rnd_in(0, big);
        }
        int64_t out = rnd_in(0, big);
        for (int i = 0; i < 3; i++) st[i].saved = (i + 1 < 3 ? st[i + 1].input : out) + rnd_in(0, big);
        int64_t budget = rnd_in(0, 4 * big);
        remat_chain_plan *p = NULL;
        remat_status r = remat_chain_solve(st, 3, out, budget, 22, &p);
        remat_chain_plan_destroy(p), p = NULL;
        if (huge) {
            CHECK_MSG(r == REMAT_INVALID && strstr(remat_last_error(), "costs are too large"), "%d: %s", it,
                      remat_last_error());
            refused++;
            continue;
        }
        if (r != REMAT_BUDGET) continue;
        int64_t f = named_budget(remat_last_error());
        CHECK_MSG(f > 0, "%d: %s", it, remat_last_error());
        if (f <= 0) continue;
        floors++;
        r = remat_chain_solve(st, 3, out, f, 22, &p);
        CHECK_MSG(r == REMAT_OK, "%d: the named floor %lld is refused: %s", it, (long long)f, remat_last_error());
        remat_chain_plan_destroy(p), p = NULL;
        r = remat_chain_solve(st, 3, out, f - 1, 22, &p);
        remat_chain_plan_destroy(p), p = NULL;
        CHECK_MSG(r == REMAT_BUDGET && named_budget(remat_last_error()) == f, "%d: floor %lld - 1: %s", it,
                  (long long)f, remat_last_error());
    }
    CHECK(refused > 1000 && floors > 100);
    printf("huge chains: %d refused as overflowing, %d floors checked\n", refused, floors);
}

int main(void) {
    test_oracles();
    test_unit_chains();
    test_revolve();
    test_random();
    test_discretized();
    test_options_random();
    test_options_by_hand();
    test_simulator_errors();
    test_json();
    test_huge_chains();
    return check_exit("test_rotor");
}
