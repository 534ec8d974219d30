/* comm.c: the public communicator calls (remat.h, "several processes"),
 * the agreement at known points, and the deterministic sum across ranks
 * (recursive doubling, see comm.h), driven as a state machine.
 */
#include "comm.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

int remat__comm_launcher_size(void) {
    /* Open MPI's mpirun, then PMI (MPICH's hydra, srun --mpi=pmi2); PMIx
     * alone (srun --mpi=pmix) gives the rank without the size */
    static const char *const sizes[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        const char *v = getenv(sizes[i]);
        if (v && atoi(v) > 0) return atoi(v);
    }
    return getenv("PMIX_RANK") || getenv("PMI_RANK") ? 1 : 0;
}

int remat_comm_mpi_built(void) {
#ifdef REMAT_HAVE_MPI
    return 1;
#else
    return 0;
#endif
}

remat_status remat_comm_create_single(remat_comm **out) {
    if (!out) return remat__err(REMAT_INVALID, "remat_comm_create_single: out is NULL");
    return remat__comm_single(out);
}

remat_status remat_comm_create_mpi(remat_comm **out, const void *mpi_comm) {
    if (!out) return remat__err(REMAT_INVALID, "remat_comm_create_mpi: out is NULL");
    *out = NULL;
#ifdef REMAT_HAVE_MPI
    return remat__comm_mpi(out, mpi_comm);
#else
    (void)mpi_comm;
    return remat__err(REMAT_UNSUPPORTED, "this libremat was built without MPI (cmake -DREMAT_MPI=ON with an MPI "
                                         "such as Debian's libopenmpi-dev installed)");
#endif
}

remat_status remat_comm_create_env(remat_comm **out) {
    if (!out) return remat__err(REMAT_INVALID, "remat_comm_create_env: out is NULL");
    *out = NULL;
    int n = remat__comm_launcher_size();
    if (n == 0) return remat__comm_single(out);
#ifdef REMAT_HAVE_MPI
    return remat__comm_mpi(out, NULL);
#else
    if (n == 1) return remat__comm_single(out);
    return remat__err(REMAT_UNSUPPORTED,
                      "this process was started by a launcher (mpirun) as one of %d ranks, but "
                      "this libremat was built without MPI, so each rank would train alone: build it with MPI "
                      "(Debian: apt-get install libopenmpi-dev, then cmake -DREMAT_MPI=ON)",
                      n);
#endif
}

void remat_comm_destroy(remat_comm *c) {
    if (!c) return;
    c->ops->destroy(c->impl);
    free(c);
}

int remat_comm_rank(const remat_comm *c) { return c ? c->rank : 0; }
int remat_comm_size(const remat_comm *c) { return c ? c->size : 1; }
int remat_comm_hosts(const remat_comm *c) { return c ? c->hosts : 1; }
const char *remat_comm_host(const remat_comm *c) { return c ? c->host : "?"; }
const char *remat_comm_kind(const remat_comm *c) { return c ? c->ops->kind : "single"; }

remat_status remat_comm_split(remat_comm *c, int color, remat_comm **out) {
    if (!c || !out) return remat__err(REMAT_INVALID, "remat_comm_split: NULL communicator or out");
    *out = NULL;
    if (color < 0) return remat__err(REMAT_INVALID, "remat_comm_split: color %d is negative", color);
    void *impl = NULL;
    int rank = 0, size = 1;
    remat_status st = c->ops->split(c->impl, color, &impl, &rank, &size);
    if (st != REMAT_OK) return st;
    return remat__comm_wrap(c->ops, impl, rank, size, c->host, out);
}

remat_status remat_comm_allgather(remat_comm *c, const void *mine, size_t bytes, void *all) {
    if (!c || (!mine && bytes) || (!all && bytes))
        return remat__err(REMAT_INVALID, "remat_comm_allgather: NULL argument");
    return c->ops->allgather(c->impl, mine, bytes, all);
}

remat_status remat_comm_bcast(remat_comm *c, void *buf, size_t bytes, int root) {
    if (!c || (!buf && bytes)) return remat__err(REMAT_INVALID, "remat_comm_bcast: NULL argument");
    if (root < 0 || root >= c->size)
        return remat__err(REMAT_INVALID, "remat_comm_bcast: root %d is not a rank of %d", root, c->size);
    return c->ops->bcast(c->impl, buf, bytes, root);
}

void remat_comm_abort(remat_comm *c, int code) {
    fflush(stdout);
    fflush(stderr);
    if (c) c->ops->abort(c->impl, code);
    _Exit(code); /* the single process's abort, and a fallback */
}

/* What a rank tells the others at an agreement. */
typedef struct {
    int32_t status;
    char host[REMAT__HOST_MAX];
    char msg[960];
} agree_rec;

int remat_comm_agreed_failure(const remat_comm *c) { return c ? c->failed : 0; }

remat_status remat_comm_agree(remat_comm *c, remat_status st) {
    if (!c) return st;
    c->failed = st != REMAT_OK;
    if (c->size == 1) return st; /* one process: its own status, its own message */
    c->failed = 0;
    agree_rec mine = {.status = (int32_t)st};
    snprintf(mine.host, sizeof mine.host, "%s", c->host);
    if (st != REMAT_OK) snprintf(mine.msg, sizeof mine.msg, "%s", remat_last_error());
    agree_rec *all = malloc((size_t)c->size * sizeof *all);
    if (!all) return remat__err(REMAT_NOMEM, "out of memory agreeing with the other ranks");
    remat_status rc = c->ops->allgather(c->impl, &mine, sizeof mine, all);
    int f = -1;
    for (int i = 0; rc == REMAT_OK && i < c->size && f < 0; i++)
        if (all[i].status != REMAT_OK) f = i;
    if (rc == REMAT_OK && f >= 0) {
        all[f].msg[sizeof all[f].msg - 1] = 0;
        all[f].host[sizeof all[f].host - 1] = 0;
        rc = remat__err((remat_status)all[f].status, "rank %d of %d (%s): %s", f, c->size, all[f].host, all[f].msg);
        c->failed = 1;
    }
    free(all);
    return rc;
}

/* ------------------------------------------------------- same options */

static uint64_t fnv1a(uint64_t h, const char *s) {
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) h = (h ^ *c) * 1099511628211ull;
    return (h ^ 0xff) * 1099511628211ull; /* the terminator: "ab","c" and "a","bc" differ */
}

/* A value for a message: whole up to 120 characters, else its first and
 * last 56 around "...". */
static void shown(char *buf, size_t cap, const char *v) {
    size_t n = strlen(v);
    if (n <= 120) snprintf(buf, cap, "'%s'", v);
    else snprintf(buf, cap, "'%.56s...%s' (%zu characters)", v, v + n - 56, n);
}

/* The ranks were given as many options (exchanged first, so that a rank
 * with more options is told apart before the lists are read as the same
 * length). */
static remat_status same_count(remat_comm *c, int n) {
    int32_t cnt = n, *cnts = malloc((size_t)c->size * sizeof *cnts);
    remat_status rc = cnts ? c->ops->allgather(c->impl, &cnt, sizeof cnt, cnts)
                           : remat__err(REMAT_NOMEM, "out of memory comparing options across ranks");
    int other = -1;
    for (int r = 1; rc == REMAT_OK && r < c->size && other < 0; r++)
        if (cnts[r] != cnts[0]) other = r;
    if (rc == REMAT_OK && other >= 0) {
        rc = remat__err(REMAT_INVALID,
                        "the ranks were given different sets of options: rank 0 %d, rank %d %d "
                        "(another build of remat?)",
                        (int)cnts[0], other, (int)cnts[other]);
        c->failed = 1;
    }
    free(cnts);
    return rc;
}

/* Appends to msg (cap bytes, `at` written) sep and the `count` ranks
 * from r on with rank r's hash of option bad (rank q's at all[q n +
 * bad]): " ranks 0, 3", at most 6 named. Returns the new length. */
static size_t name_ranks(char *msg, size_t cap, size_t at, const char *sep, int size, const uint64_t *all, int n,
                         int bad, int r, int count) {
    uint64_t h = all[(size_t)r * (size_t)n + (size_t)bad];
    at += (size_t)snprintf(msg + at, cap - at, "%s rank%s", sep, count > 1 ? "s" : "");
    int named = 0;
    for (int q = r; q < size && at < cap; q++) {
        if (all[(size_t)q * (size_t)n + (size_t)bad] != h) continue;
        if (named++ == 6) {
            at += (size_t)snprintf(msg + at, cap - at, " and %d more", count - 6);
            break;
        }
        at += (size_t)snprintf(msg + at, cap - at, "%s%d", named > 1 ? ", " : " ", q);
    }
    return at;
}

/* Appends to msg the ranks grouped by their value of option `bad`, in
 * rank order, each group with its value (rank r's at vals + r w): at most
 * 4 groups of 6 ranks named. */
static void name_groups(char *msg, size_t cap, size_t at, int size, const uint64_t *all, int n, int bad,
                        const char *vals, int w) {
    int groups = 0;
    for (int r = 0; r < size && at < cap; r++) {
        uint64_t h = all[(size_t)r * (size_t)n + (size_t)bad];
        int first = 1;
        for (int q = 0; q < r && first; q++) first = all[(size_t)q * (size_t)n + (size_t)bad] != h;
        if (!first) continue;
        if (++groups > 4) {
            at += (size_t)snprintf(msg + at, cap - at, "; ...");
            break;
        }
        int count = 0;
        for (int q = r; q < size; q++) count += all[(size_t)q * (size_t)n + (size_t)bad] == h;
        at = name_ranks(msg, cap, at, groups > 1 ? ";" : "", size, all, n, bad, r, count);
        if (at < cap)
            at += (size_t)snprintf(msg + at, cap - at, " %s %.*s", count > 1 ? "have" : "has", w - 1,
                                   vals + (size_t)r * (size_t)w);
    }
}

/* REMAT_INVALID naming every rank's value of option `bad` (the first
 * whose hashes differ), exchanged shortened. */
static remat_status disagreement(remat_comm *c, const char *const *kv, int n, const uint64_t *all, int bad,
                                 const char *why) {
    enum { W = 160 };
    char me[W], *vals = malloc((size_t)c->size * W);
    shown(me, sizeof me, kv[2 * bad + 1]);
    remat_status rc = vals ? c->ops->allgather(c->impl, me, W, vals)
                           : remat__err(REMAT_NOMEM, "out of memory comparing options across ranks");
    if (rc == REMAT_OK) {
        char msg[1400];
        size_t at = (size_t)snprintf(msg, sizeof msg, "the ranks disagree on %s:", kv[2 * bad]);
        name_groups(msg, sizeof msg, at, c->size, all, n, bad, vals, W);
        rc = remat__err(REMAT_INVALID, "%s (%s)", msg,
                        why ? why
                            : "every rank must be given the same options that define the math and the "
                              "course of the run");
        c->failed = 1;
    }
    free(vals);
    return rc;
}

remat_status remat_comm_same(remat_comm *c, const char *const *kv, const char *why) {
    if (!c) return remat__err(REMAT_INVALID, "remat_comm_same: NULL communicator");
    c->failed = 0;
    if (c->size == 1) return REMAT_OK;
    int n = 0;
    while (kv && kv[2 * n] && kv[2 * n + 1]) n++;
    /* one exchange of a hash per option (and the count) in the common
     * case; the values of the first option that differs only then */
    uint64_t *mine = malloc((size_t)(n + 1) * sizeof *mine);
    uint64_t *all = malloc((size_t)(n + 1) * (size_t)c->size * sizeof *all);
    if (!mine || !all) {
        free(mine), free(all);
        return remat__err(REMAT_NOMEM, "out of memory comparing options across ranks"); /* the others wait: abort */
    }
    remat_status rc = same_count(c, n);
    for (int i = 0; i < n; i++) mine[i] = fnv1a(fnv1a(14695981039346656037ull, kv[2 * i]), kv[2 * i + 1]);
    if (rc == REMAT_OK) rc = c->ops->allgather(c->impl, mine, (size_t)n * sizeof *mine, all);
    int bad = -1;
    for (int i = 0; rc == REMAT_OK && !c->failed && i < n && bad < 0; i++)
        for (int r = 1; r < c->size && bad < 0; r++)
            if (all[(size_t)r * (size_t)n + (size_t)i] != all[i]) bad = i;
    if (rc == REMAT_OK && bad >= 0) rc = disagreement(c, kv, n, all, bad, why);
    free(mine), free(all);
    return rc;
}

/* ------------------------------------------------------------------ sum */

/* x += tmp, element by element: both partners of a round compute their
 * own + the other's, which IEEE addition makes the same bits. */
static void add_into(float *x, const float *tmp, int64_t n) {
    for (int64_t i = 0; i < n; i++) x[i] = x[i] + tmp[i];
}

static remat_status post_round(remat__allreduce *a) {
    int peer = a->c->rank ^ (1 << a->round);
    /* tags: 32 rounds per sum, sums told apart by the caller's tag */
    return a->c->ops->exchange_start(a->c->impl, peer, (a->tag & 0xfff) * 32 + a->round, a->x, a->tmp, a->n, &a->req);
}

remat_status remat__allreduce_start(remat__allreduce *a, remat_comm *c, float *x, float *tmp, int64_t n, int tag) {
    memset(a, 0, sizeof *a);
    a->c = c, a->x = x, a->tmp = tmp, a->n = n, a->tag = tag;
    if (!remat__pow2(c->size))
        return remat__err(REMAT_INVALID,
                          "a deterministic sum across ranks needs a power-of-two number of ranks "
                          "(1, 2, 4, 8, ...), not %d",
                          c->size);
    while ((1 << a->rounds) < c->size) a->rounds++;
    if (a->rounds == 0 || n == 0) {
        a->done = 1;
        return REMAT_OK;
    }
    return post_round(a);
}

remat_status remat__allreduce_test(remat__allreduce *a, int *done) {
    while (!a->done) {
        int fin = 0;
        remat_status st = a->c->ops->exchange_test(a->c->impl, a->req, &fin);
        if (st != REMAT_OK) return st;
        if (!fin) break;
        a->req = NULL;
        add_into(a->x, a->tmp, a->n);
        if (++a->round == a->rounds) a->done = 1;
        else if ((st = post_round(a)) != REMAT_OK) return st;
    }
    *done = a->done;
    return REMAT_OK;
}

/* Waiting polls with a short sleep between tests (10 us, doubling up to
 * 200 us) instead of MPI's busy wait: ranks that share cores (more ranks
 * than cores, or other work on the host) then leave the cores to the
 * ranks still computing, which are the ones being waited for. It costs at
 * most the last sleep after the data has arrived. */
remat_status remat__allreduce_wait(remat__allreduce *a) {
    long ns = 10000;
    for (int done = 0;;) {
        remat_status st = remat__allreduce_test(a, &done);
        if (st != REMAT_OK || done) return st;
        struct timespec ts = {0, ns};
        nanosleep(&ts, NULL);
        if (ns < 200000) ns *= 2;
    }
}

remat_status remat_comm_sum(remat_comm *c, float *x, int64_t n) {
    if (!c || (!x && n)) return remat__err(REMAT_INVALID, "remat_comm_sum: NULL argument");
    if (n < 0) return remat__err(REMAT_INVALID, "remat_comm_sum: %lld elements", (long long)n);
    if (c->size == 1 || n == 0) return REMAT_OK;
    float *tmp = malloc((size_t)n * sizeof *tmp);
    if (!tmp) return remat__err(REMAT_NOMEM, "out of memory for a sum of %lld floats", (long long)n);
    remat__allreduce a;
    remat_status st = remat__allreduce_start(&a, c, x, tmp, n, 0);
    if (st == REMAT_OK) st = remat__allreduce_wait(&a);
    free(tmp);
    return st;
}
