/* dp_plan.c: data parallelism's layout and plan (dp.h has the whole
 * story): the options checked, the gradient buckets and the statistics
 * laid out, the communication block allocated, the REDUCE instructions
 * placed in a training schedule, and the ranks' agreement that they run
 * the same plan. At the end, what the session reports of its ranks and
 * its last step (remat_session_dist, remat__session_comm).
 */
#include "../session/session.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_BUCKET_BYTES ((size_t)1 << 20)

/* Buckets: consecutive trainable parameters, taken from the last to the
 * first (the order in which a backward pass finishes their gradients, so
 * that the first bucket can leave early), each closed once it holds
 * bucket_bytes; a bucket is one range of the gradient block (tensors at
 * their aligned offsets, the zero padding between them included, which
 * sums to zero). */
static remat_status lay_out_buckets(remat_session *s) {
    remat__dp *d = &s->dp;
    const remat_graph *g = s->g;
    d->bucket_of = malloc((size_t)g->n * sizeof *d->bucket_of);
    size_t *off = malloc(((size_t)s->n_params + 1) * sizeof *off); /* per slot: its gradient's offset */
    d->blo = malloc(((size_t)s->n_params + 1) * sizeof *d->blo);
    d->bhi = malloc(((size_t)s->n_params + 1) * sizeof *d->bhi);
    if (!d->bucket_of || !off || !d->blo || !d->bhi) {
        free(off);
        return remat__err(REMAT_NOMEM, "out of memory laying out gradient buckets");
    }
    for (int u = 0; u < g->n; u++) d->bucket_of[u] = -1;
    size_t end = 0; /* as remat__block_alloc carves the block */
    for (int i = 0; i < s->n_params; i++) {
        off[i] = end;
        if (remat__trainable(s, i)) end += remat__arena_rounded(remat__out_bytes(&g->nodes[s->params[i].node]));
    }
    if (end != s->blk_bytes[REMAT__BLK_GRAD]) {
        free(off);
        return remat__err(REMAT_INTERNAL, "gradient buckets cover %zu bytes of the %zu-byte gradient block", end,
                          s->blk_bytes[REMAT__BLK_GRAD]);
    }
    d->nb = 0;
    size_t hi = end;
    for (int i = s->n_params - 1; i >= 0; i--) {
        if (!remat__trainable(s, i)) continue;
        d->bucket_of[s->params[i].node] = d->nb;
        if (hi - off[i] >= d->bucket_bytes) d->blo[d->nb] = off[i], d->bhi[d->nb++] = hi, hi = off[i];
    }
    if (hi > 0) d->blo[d->nb] = 0, d->bhi[d->nb++] = hi;
    free(off);
    d->gfloats = end / sizeof(float);
    return REMAT_OK;
}

/* The statistics every stateful node the loss needs exports per
 * micro-batch (several ranks only: one process commits in order itself). */
static remat_status lay_out_stats(remat_session *s) {
    remat__dp *d = &s->dp;
    const remat_graph *g = s->g;
    d->soff = malloc((size_t)g->n * sizeof *d->soff);
    uint8_t *needed = calloc((size_t)g->n + 1, 1);
    int32_t *stack = malloc(((size_t)g->n + 1) * sizeof *stack);
    remat_status st = REMAT_OK;
    if (!d->soff || !needed || !stack) st = remat__err(REMAT_NOMEM, "out of memory laying out statistics");
    if (st == REMAT_OK) remat__mark_needed(g, s->loss, needed, stack);
    size_t off = 0;
    for (int u = 0; st == REMAT_OK && u < g->n; u++) {
        const remat__op *op = remat__ops[g->nodes[u].op];
        d->soff[u] = SIZE_MAX;
        if (!(op->flags & REMAT__OP_STATEFUL) || !needed[u] || d->ranks == 1) continue;
        if (!op->stats_bytes || !op->commit) {
            st = remat__err(REMAT_UNSUPPORTED,
                            "op '%s' keeps state but cannot export it, so %d ranks cannot keep "
                            "it the same",
                            op->name, d->ranks);
            break;
        }
        d->soff[u] = off;
        off += op->stats_bytes(g, &g->nodes[u]) / sizeof(double);
    }
    d->sdoubles = off;
    free(needed), free(stack);
    return st;
}

/* REMAT_DP_STAGING: "host" runs the staged path (a device's) on any
 * backend, for tests that compare it with the CPU's direct one. */
static remat_status staging_forced(int *forced) {
    const char *v = getenv("REMAT_DP_STAGING");
    *forced = v && strcmp(v, "host") == 0;
    if (v && *v && !*forced)
        return remat__err(REMAT_INVALID,
                          "REMAT_DP_STAGING='%s': the one value is 'host' (the reduction across "
                          "ranks through host buffers, as on a GPU, on any device); unset it otherwise",
                          v);
    return REMAT_OK;
}

/* Host staging of several ranks (dp.h): the exchanges' buffers, the
 * statistics, and host copies of the stateful ops' resident inputs (one
 * per parameter slot, so that ops that share a buffer share its copy).
 * Sized also when planning only, allocated only when running. */
static remat_status lay_out_staging(remat_session *s) {
    remat__dp *d = &s->dp;
    const remat_graph *g = s->g;
    d->hoff = malloc(((size_t)s->n_params + 1) * sizeof *d->hoff);
    if (!d->hoff) return remat__err(REMAT_NOMEM, "out of memory laying out host staging");
    for (int i = 0; i < s->n_params; i++) d->hoff[i] = SIZE_MAX;
    size_t nstate = 0;
    for (int u = 0; u < g->n; u++) {
        if (d->soff[u] == SIZE_MAX) continue;
        const remat__node *n = &g->nodes[u];
        for (int i = 0; i < n->n_in; i++) {
            const remat__node *src = &g->nodes[n->in[i]];
            int32_t p = remat__is_resident(src) ? s->pindex[n->in[i]] : -1;
            if (p < 0 || d->hoff[p] != SIZE_MAX) continue;
            d->hoff[p] = nstate;
            nstate += remat__out_bytes(src) / sizeof(float);
        }
    }
    size_t fl = 2 * d->gfloats, db = (size_t)(d->q + d->K) * d->sdoubles;
    d->host_bytes = fl * sizeof(float) + db * sizeof(double) + nstate * sizeof(float);
    if (s->opts.plan_only) return REMAT_OK;
    d->hx = malloc(d->gfloats * sizeof(float) + 1);
    d->hrecv = malloc(d->gfloats * sizeof(float) + 1);
    d->hstats = malloc(db * sizeof(double) + 1);
    d->hstate = malloc(nstate * sizeof(float) + 1);
    if (!d->hx || !d->hrecv || !d->hstats || !d->hstate)
        return remat__err(REMAT_NOMEM, "out of memory for %zu bytes of host staging of the gradients' reduction",
                          d->host_bytes);
    d->stats_all = d->hstats + (size_t)d->q * d->sdoubles;
    return REMAT_OK;
}

remat_status remat__dp_init(remat_session *s) {
    remat__dp *d = &s->dp;
    const remat_session_opts *o = &s->opts;
    memset(d, 0, sizeof *d);
    d->comm = o->comm;
    d->rank = remat_comm_rank(o->comm);
    d->ranks = remat_comm_size(o->comm);
    if (o->micro_batches < 0)
        return remat__err(REMAT_INVALID, "micro_batches %lld is negative (0: one per rank)",
                          (long long)o->micro_batches);
    d->K = o->micro_batches ? o->micro_batches : d->ranks;
    if (!remat__pow2(d->ranks))
        return remat__err(REMAT_INVALID,
                          "data-parallel training needs a power-of-two number of ranks (1, 2, 4, "
                          "8, ...), not %d: gradients are summed in one fixed binary tree over the micro-batches, "
                          "and each rank must hold a whole subtree of it",
                          d->ranks);
    if (d->K % d->ranks)
        return remat__err(REMAT_INVALID,
                          "the %lld micro-batches of a step do not split evenly over %d ranks: the "
                          "global batch must be a multiple of micro-batch x ranks",
                          (long long)d->K, d->ranks);
    d->q = d->K / d->ranks;
    d->first = (int64_t)d->rank * d->q;
    d->active = d->K > 1;
    d->at_end = o->reduce_after_backward != 0;
    d->bucket_bytes = o->bucket_bytes ? o->bucket_bytes : DEFAULT_BUCKET_BYTES;
    if (!d->active) return REMAT_OK;
    if (!s->be->copy || !s->be->add || !s->be->div)
        return remat__err(REMAT_UNSUPPORTED,
                          "micro-batches and several ranks do not run on the %s in this build (its "
                          "backend has no gradient accumulation)",
                          remat_device_str(o->device));
    int forced = 0;
    remat_status st = staging_forced(&forced);
    if (st != REMAT_OK) return st;
    /* a device's memory is not the host's: exchanges and statistics go
     * through host buffers (dp.h) */
    d->staged = o->device != REMAT_DEVICE_CPU || forced;
    st = lay_out_buckets(s);
    if (st == REMAT_OK) st = lay_out_stats(s);
    if (st != REMAT_OK) return st;
    while (((int64_t)1 << d->depth) < d->q) d->depth++;
    /* The block: the accumulators, the exchanges' receive buffer and every
     * rank's statistics (staged: host memory instead, but for this rank's
     * statistics, which its kernels write). */
    int direct = d->ranks > 1 && !d->staged;
    size_t bytes[3] = {(size_t)d->depth * d->gfloats * sizeof(float), direct ? d->gfloats * sizeof(float) : 0,
                       (size_t)(d->q + (d->staged ? 0 : d->K)) * d->sdoubles * sizeof(double)};
    void *ptr[3];
    st = remat__block_alloc(s, REMAT__BLK_COMM, REMAT_MEM_COMM, 3, bytes, ptr, 0);
    if (st != REMAT_OK) return st;
    d->comm_counted = bytes[0] + bytes[1] + bytes[2];
    d->acc = ptr[0], d->recv = ptr[1];
    d->stats = ptr[2];
    d->stats_all = d->stats && !d->staged ? d->stats + (size_t)d->q * d->sdoubles : NULL;
    if (d->staged && d->ranks > 1 && (st = lay_out_staging(s)) != REMAT_OK) return st;
    d->losses = calloc((size_t)(d->K + d->q), sizeof *d->losses);
    d->ar = calloc((size_t)d->nb + 1, sizeof *d->ar);
    d->flying = calloc((size_t)d->nb + 1, 1);
    d->ends = calloc((size_t)d->ranks, sizeof *d->ends);
    if (!d->losses || !d->ar || !d->flying || !d->ends)
        return remat__err(REMAT_NOMEM, "out of memory creating a session");
    return REMAT_OK;
}

void remat__dp_free(remat_session *s) {
    remat__dp *d = &s->dp;
    remat__block_free(s, REMAT__BLK_COMM, REMAT_MEM_COMM, d->comm_counted);
    free(d->blo), free(d->bhi), free(d->bucket_of), free(d->soff), free(d->losses), free(d->ar), free(d->flying),
        free(d->ends);
    free(d->hx), free(d->hrecv), free(d->hstats), free(d->hstate), free(d->hoff);
    memset(d, 0, sizeof *d);
}

/* ------------------------------------------------------ the plan's hash */

typedef struct {
    uint64_t h;
} fnv;

static void fnv_add(fnv *f, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) f->h = (f->h ^ b[i]) * 0x100000001b3ull;
}

static void fnv_i64(fnv *f, int64_t v) {
    unsigned char le[8];
    for (int i = 0; i < 8; i++) le[i] = (unsigned char)((uint64_t)v >> (8 * i));
    fnv_add(f, le, 8);
}

/* Everything that makes two ranks' steps the same computation: the
 * instructions, the memory plan's placement, the micro-batches, the
 * buckets and the resident blocks. */
static uint64_t plan_hash(const remat_session *s) {
    fnv f = {0xcbf29ce484222325ull};
    const remat__schedule *sc = &s->train.sc;
    fnv_i64(&f, sc->n);
    for (int i = 0; i < sc->n; i++) {
        const remat__instr *in = &sc->ins[i];
        fnv_i64(&f, ((int64_t)in->kind << 24) | ((int64_t)in->cat << 16) | ((int64_t)in->aux_cat << 8) | in->first);
        fnv_i64(&f, in->node);
        fnv_i64(&f, in->value);
    }
    const remat__memplan *m = &s->train.mem;
    fnv_i64(&f, (int64_t)m->arena);
    for (int32_t e = 0; e < m->n; e++) fnv_i64(&f, m->ev[e].off);
    fnv_i64(&f, s->dp.K);
    fnv_i64(&f, s->opts.threads);
    for (int b = 0; b < s->dp.nb; b++) fnv_i64(&f, (int64_t)s->dp.blo[b]), fnv_i64(&f, (int64_t)s->dp.bhi[b]);
    for (int i = 0; i < REMAT__N_BLK; i++) fnv_i64(&f, (int64_t)s->blk_bytes[i]);
    return f.h;
}

remat_status remat__dp_agree_plan(remat_session *s, remat_status st) {
    remat__dp *d = &s->dp;
    if (st == REMAT_OK) d->hash = plan_hash(s);
    if (d->ranks == 1) return st;
    st = remat_comm_agree(d->comm, st);
    if (st != REMAT_OK) return st;
    uint64_t *all = malloc((size_t)d->ranks * sizeof *all);
    if (!all) return remat__err(REMAT_NOMEM, "out of memory comparing plans"); /* the others may wait: abort */
    st = remat_comm_allgather(d->comm, &d->hash, sizeof d->hash, all);
    for (int r = 1; st == REMAT_OK && r < d->ranks; r++)
        if (all[r] != all[0])
            st = remat__err(REMAT_INVALID,
                            "the ranks would run different plans: rank 0's training step hashes to "
                            "%016llx, rank %d's to %016llx (every rank needs the same model, batch, strategy, "
                            "budget, cost model, threads and options)",
                            (unsigned long long)all[0], r, (unsigned long long)all[r]);
    if (st != REMAT_OK) remat__comm_failed_together(d->comm);
    free(all);
    return st;
}

/* ---------------------------------------------- what the session reports */

remat_comm *remat__session_comm(const remat_session *s) { return s->dp.comm; }

remat_status remat_session_dist(const remat_session *s, remat_dist_info *out) {
    if (!s || !out) return remat__err(REMAT_INVALID, "remat_session_dist: NULL argument");
    const remat__dp *d = &s->dp;
    memset(out, 0, sizeof *out);
    out->rank = d->rank, out->ranks = d->ranks, out->hosts = remat_comm_hosts(d->comm);
    out->micro_batches = d->K, out->local_micro_batches = d->q, out->first_micro_batch = d->first;
    out->buckets = d->nb;
    out->comm_bytes = d->comm_counted;
    out->host_staging = d->active && d->staged;
    out->host_staging_bytes = d->host_bytes;
    out->overlap = d->active && d->ranks > 1 && !d->at_end;
    out->plan_hash = d->hash;
    out->reduce_seconds = d->t_reduce, out->wait_seconds = d->t_wait;
    out->exposed_seconds = d->t_exposed, out->skew_seconds = d->t_skew;
    return REMAT_OK;
}
