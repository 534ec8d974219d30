/* k_shape.cu: reshape, concat, permute, slice and embedding on the GPU.
 *
 * Semantics are the CPU's (src/ops/shape_ops.c, tensor_ops.c,
 * embedding.c): every output is a copy, and backward accumulates (+=)
 * into din[i]. None of these do arithmetic in forward, so the outputs are
 * the CPU's bits; backward adds one gradient per element, or, for
 * embedding, the rows of each id in position order, as the CPU does.
 *
 * Strided row copies (concat, slice, reshape's backward) go through one
 * kernel over a table of up to 32 parts, each a (rows, width) block with
 * its own row strides. Blocks are dealt to the parts in proportion to
 * their sizes, so one launch moves every part of a concat. Two din[] of a
 * concat may be one buffer (concat(x, x)); its backward then runs part by
 * part, in input order, as the CPU's loop adds them.
 *
 * permute first drops dimensions of size 1 and merges dimensions that stay
 * adjacent, then: one dimension left is a copy; the last input dimension
 * staying last is a row gather (float4 rows where they allow); otherwise
 * it tiles the two dimensions that are contiguous in input and output
 * through shared memory, 32 x 32, so that reads and writes are both
 * coalesced. Backward is the inverse permutation of dy, accumulated.
 *
 * embedding's backward sorts the positions by id (a stable radix sort, so
 * positions of one id stay in order), then one warp per (run of equal ids,
 * 128 columns) adds the run's dy rows to dW in position order: the CPU's
 * sum, operation for operation, with no atomics.
 */
#include "cuda-impl.h"
#include "pw16.cuh"
#include "reduce.cuh"

#include <cub/device/device_radix_sort.cuh>

#include <math.h>

/* -------------------------------------------------------------- helpers */

static int sh_aligned(const void *p) { return ((uintptr_t)p & 15) == 0; }
static size_t sh_align256(size_t b) { return (b + 255) & ~(size_t)255; }

/* ------------------------------------------------------ strided row copy */

/* One part: dst row r, element c (dst + r dstride + c) = or += src row r,
 * element c, for rows x w elements; in float4 units when v4 (w, the
 * strides and both pointers then multiples of 4 elements / 16 bytes). */
typedef struct {
    const float *src;
    float *dst;
    int64_t w, sstride, dstride; /* in units */
    int64_t units;               /* rows * w */
    int64_t first_block;         /* the part's first block in the grid */
    int v4;
} sh_part;

typedef struct {
    int n;
    int64_t chunk; /* units per block */
    sh_part p[REMAT__MAX_IN];
} sh_parts;

/* I: the index type, 32-bit when every part has fewer than 2^31 units (the
 * per-element division by w is then 32-bit); offsets are 64-bit. */
template <typename I, bool ACC> static __global__ void sh_parts_kernel(const __grid_constant__ sh_parts t) {
    int s = 0;
    while (s + 1 < t.n && (int64_t)blockIdx.x >= t.p[s + 1].first_block) s++;
    const sh_part *p = &t.p[s];
    int64_t lo64 = ((int64_t)blockIdx.x - p->first_block) * t.chunk;
    int64_t hi64 = lo64 + t.chunk < p->units ? lo64 + t.chunk : p->units;
    const I w = (I)p->w, hi = (I)hi64;
    for (I i = (I)lo64 + threadIdx.x; i < hi; i += blockDim.x) {
        I r = i / w, c = i - r * w;
        int64_t so = (int64_t)r * p->sstride + c, d = (int64_t)r * p->dstride + c;
        if (p->v4) {
            float4 v = ld4(p->src, so);
            if (ACC) v = add4(ld4(p->dst, d), v);
            st4(p->dst, d, v);
        } else {
            float v = p->src[so];
            p->dst[d] = ACC ? __fadd_rn(p->dst[d], v) : v;
        }
    }
}

/* Adds a part of rows x w elements, starting at src and dst, with row
 * strides ss and ds (elements). */
static void sh_add_part(sh_parts *t, const float *src, float *dst, int64_t rows, int64_t w, int64_t ss, int64_t ds) {
    if (rows <= 0 || w <= 0) return;
    sh_part *p = &t->p[t->n++];
    p->v4 = w % 4 == 0 && ss % 4 == 0 && ds % 4 == 0 && sh_aligned(src) && sh_aligned(dst);
    int64_t u = p->v4 ? 4 : 1;
    p->src = src, p->dst = dst, p->w = w / u, p->sstride = ss / u, p->dstride = ds / u;
    p->units = rows * p->w;
}

/* Deals blocks to the parts (about 16 per multiprocessor in all, at least
 * 1024 units each) and launches. */
static remat_status sh_run_parts(const remat__kctx *k, sh_parts *t, int acc) {
    remat__cuda *cu = remat__cu(k);
    if (t->n == 0) return REMAT_OK;
    int64_t total = 0, maxu = 0;
    for (int i = 0; i < t->n; i++) {
        total += t->p[i].units;
        if (t->p[i].units > maxu) maxu = t->p[i].units;
    }
    int64_t target = (int64_t)cu->sms * 16, chunk = (total + target - 1) / target;
    if (chunk < 1024) chunk = 1024;
    chunk = (chunk + REMAT__CU_THREADS - 1) / REMAT__CU_THREADS * REMAT__CU_THREADS;
    int64_t blocks = 0;
    for (int i = 0; i < t->n; i++) {
        t->p[i].first_block = blocks;
        blocks += (t->p[i].units + chunk - 1) / chunk;
    }
    t->chunk = chunk;
    int small = maxu < ((int64_t)1 << 31) - chunk;
    unsigned nb = (unsigned)blocks;
    if (small && acc) sh_parts_kernel<uint32_t, true><<<nb, REMAT__CU_THREADS, 0, cu->stream>>>(*t);
    else if (small) sh_parts_kernel<uint32_t, false><<<nb, REMAT__CU_THREADS, 0, cu->stream>>>(*t);
    else if (acc) sh_parts_kernel<uint64_t, true><<<nb, REMAT__CU_THREADS, 0, cu->stream>>>(*t);
    else sh_parts_kernel<uint64_t, false><<<nb, REMAT__CU_THREADS, 0, cu->stream>>>(*t);
    return remat__cu_launched(k, "sh_parts_kernel");
}

/* dst (n) = or += src (n). */
static remat_status sh_copy(const remat__kctx *k, const float *src, float *dst, int64_t n, int acc) {
    if (n == 0) return REMAT_OK;
    if (!acc)
        return remat__cu_rt_ok(
            cudaMemcpyAsync(dst, src, (size_t)n * sizeof(float), cudaMemcpyDeviceToDevice, remat__cu(k)->stream), k,
            "cudaMemcpyAsync");
    sh_parts t;
    t.n = 0;
    sh_add_part(&t, src, dst, 1, n, n, n);
    return sh_run_parts(k, &t, 1);
}

/* --------------------------------------------------------------- reshape */

/* Under the bf16 policy a bf16 reshape runs on its stored values
 * (pw16.cuh): widened and rounded back (the same bits), and its gradient
 * added as the views add it. */
struct reshape16 {
    __device__ float fwd(float a, float, int64_t) const { return a; }
    __device__ float grad(int, float d, float, float, float, float g, int64_t) const { return __fadd_rn(d, g); }
};

/* The values are separate buffers: a copy (int32 ids too: bits moved as
 * they are). */
static remat_status reshape_forward(const remat__kctx *k) {
    if (k->dt) return pw16_run(k, reshape16(), 0, "pw16_fwd_kernel<reshape>");
    return sh_copy(k, (const float *)k->in[0]->data, (float *)k->out->data, remat__numel(&k->node->shape), 0);
}

static remat_status reshape_backward(const remat__kctx *k) {
    if (k->dt) return pw16_run(k, reshape16(), 1, "pw16_bwd_kernel<reshape>");
    if (!k->din[0]) return REMAT_OK;
    return sh_copy(k, k->dout, k->din[0], remat__numel(&k->node->shape), 1);
}

extern "C" const remat__dev_kernels remat__cuda_reshape = {reshape_forward, reshape_backward, NULL, NULL, NULL,
                                                           pw16_ws_dev};

/* ---------------------------------------------------------------- concat */

/* Elements per batch item and channel: the product of dimensions 2.. */
static int64_t concat_inner(const remat__shape *s) {
    int64_t r = 1;
    for (int d = 2; d < s->ndim; d++) r *= s->d[d];
    return r;
}

/* Input i (N, C_i, ...) is rows N of C_i inner elements; in y (N, sum C,
 * ...) those rows start at channel off_i with stride (sum C) inner. */
static remat_status concat_forward(const remat__kctx *k) {
    const remat__shape *os = &k->node->shape;
    int64_t N = os->d[0], inner = concat_inner(os), Ct = os->d[1], off = 0;
    float *y = (float *)k->out->data; // (N, sum C_i, ...)
    sh_parts t;
    t.n = 0;
    for (int i = 0; i < k->node->n_in; i++) {
        int64_t c = k->in[i]->shape->d[1];
        sh_add_part(&t, (const float *)k->in[i]->data, y + off * inner, N, c * inner, c * inner, Ct * inner);
        off += c;
    }
    return sh_run_parts(k, &t, 0);
}

static remat_status concat_backward(const remat__kctx *k) {
    const remat__shape *os = &k->node->shape;
    int64_t N = os->d[0], inner = concat_inner(os), Ct = os->d[1], off = 0;
    const float *dy = k->dout; // (N, sum C_i, ...)
    int n = k->node->n_in, shared = 0;
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++) shared |= k->din[i] && k->din[i] == k->din[j];
    sh_parts t;
    t.n = 0;
    for (int i = 0; i < n; i++) {
        int64_t c = k->in[i]->shape->d[1];
        if (k->din[i]) sh_add_part(&t, dy + off * inner, k->din[i], N, c * inner, Ct * inner, c * inner);
        off += c;
        /* One buffer for two inputs: each part in its own launch, in input
         * order, so its sums are the CPU's (dx + part i) + part j. */
        if (shared && t.n) {
            REMAT__CU_TRY(sh_run_parts(k, &t, 1));
            t.n = 0;
        }
    }
    return sh_run_parts(k, &t, 1);
}

extern "C" const remat__dev_kernels remat__cuda_concat = {concat_forward, concat_backward, NULL, NULL, NULL, NULL};

/* ----------------------------------------------------------------- slice */

/* x as (outer, D inner), y as (outer, len inner): y row o is x row o from
 * element start inner. */
static void slice_geom(const remat__kctx *k, int64_t *outer, int64_t *xw, int64_t *yw, int64_t *off) {
    const remat__shape *x = k->in[0]->shape;
    int64_t dim = k->node->iattr[0], inner = 1, o = 1;
    for (int i = 0; i < dim; i++) o *= x->d[i];
    for (int i = (int)dim + 1; i < x->ndim; i++) inner *= x->d[i];
    *outer = o, *xw = x->d[dim] * inner, *yw = k->node->iattr[2] * inner, *off = k->node->iattr[1] * inner;
}

static remat_status slice_forward(const remat__kctx *k) {
    int64_t outer, xw, yw, off;
    slice_geom(k, &outer, &xw, &yw, &off);
    sh_parts t;
    t.n = 0;
    sh_add_part(&t, (const float *)k->in[0]->data + off, (float *)k->out->data, outer, yw, xw, yw);
    return sh_run_parts(k, &t, 0);
}

static remat_status slice_backward(const remat__kctx *k) {
    if (!k->din[0]) return REMAT_OK;
    int64_t outer, xw, yw, off;
    slice_geom(k, &outer, &xw, &yw, &off);
    sh_parts t;
    t.n = 0;
    sh_add_part(&t, k->dout, k->din[0] + off, outer, yw, yw, xw);
    return sh_run_parts(k, &t, 1);
}

extern "C" const remat__dev_kernels remat__cuda_slice = {slice_forward, slice_backward, NULL, NULL, NULL, NULL};

/* --------------------------------------------------------------- permute */

/* A permutation of a contiguous source: dst dimension i is src dimension
 * p[i] (dst shape d[p[i]]). */
typedef struct {
    int nd;
    int64_t d[REMAT_MAX_DIMS];
    int p[REMAT_MAX_DIMS];
} perm_geom;

/* Drops dimensions of size 1, then merges runs of dst dimensions whose
 * src dimensions are consecutive (src k, k + 1, ... in that order): the
 * same copy with fewer, larger dimensions. */
static perm_geom perm_simplify(const remat__shape *s, const int *p) {
    int keep[REMAT_MAX_DIMS], nk = 0, idx[REMAT_MAX_DIMS], q[REMAT_MAX_DIMS], nq = 0;
    for (int d = 0; d < s->ndim; d++) {
        idx[d] = nk;
        if (s->d[d] != 1) keep[nk++] = d;
    }
    for (int i = 0; i < s->ndim; i++)
        if (s->d[p[i]] != 1) q[nq++] = idx[p[i]]; /* dst order, renumbered src dims */
    /* groups: runs of q with q[i+1] == q[i] + 1 */
    int gs[REMAT_MAX_DIMS], gl[REMAT_MAX_DIMS], ng = 0;
    for (int i = 0; i < nq; i++) {
        if (ng && q[i] == gs[ng - 1] + gl[ng - 1]) gl[ng - 1]++;
        else gs[ng] = q[i], gl[ng] = 1, ng++;
    }
    perm_geom g;
    g.nd = ng;
    for (int a = 0; a < ng; a++) {
        int rank = 0; /* the group's place in src order */
        for (int b = 0; b < ng; b++) rank += gs[b] < gs[a];
        int64_t sz = 1;
        for (int m = 0; m < gl[a]; m++) sz *= s->d[keep[gs[a] + m]];
        g.d[rank] = sz;
        g.p[a] = rank;
    }
    if (ng == 0) g.nd = 1, g.d[0] = 1, g.p[0] = 0;
    return g;
}

/* The last src dimension stays last: dst rows of L elements (lu units:
 * float4 when v4) gathered from src. Row r's dst index over dims
 * 0..nr-1 (sizes rd) gives its src offset through the strides rs. */
typedef struct {
    int nr;
    int64_t rd[REMAT_MAX_DIMS - 1], rs[REMAT_MAX_DIMS - 1];
    int64_t lu, total; /* units per row, units in all */
    int v4;
} perm_rows;

template <typename I, bool ACC>
static __global__ void perm_rows_kernel(const float *__restrict__ src, float *__restrict__ dst, perm_rows g) {
    const I lu = (I)g.lu, total = (I)g.total, stride = (I)gridDim.x * blockDim.x;
    for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
        I row = i / lu, c = i - row * lu;
        int64_t off = 0;
#pragma unroll
        for (int k = REMAT_MAX_DIMS - 2; k >= 0; k--)
            if (k < g.nr) {
                I dk = (I)g.rd[k], q = row / dk;
                off += (int64_t)(row - q * dk) * g.rs[k];
                row = q;
            }
        if (g.v4) {
            float4 v = ld4(src, off / 4 + c);
            if (ACC) v = add4(ld4(dst, i), v);
            st4(dst, i, v);
        } else {
            float v = src[off + c];
            dst[i] = ACC ? __fadd_rn(dst[i], v) : v;
        }
    }
}

/* The last src dimension (a, src stride 1) moves: tiles of 32 (b) x 32 (a)
 * where b is the src dimension that is last in dst (dst stride 1). The
 * other dimensions (at most 2) index the tile's batch, with src strides bs
 * and dst strides bo. */
typedef struct {
    int nb;
    int64_t bd[2], bs[2], bo[2];
    int64_t na, nbd; /* sizes of a and b */
    int64_t sb, da;  /* src stride of b, dst stride of a */
    int64_t ta, tb;  /* tiles along a and b */
    int64_t ntiles;
} perm_tiles;

#define PERM_TILE 32
#define PERM_ROWS 8

template <bool ACC>
static __global__ void perm_tile_kernel(const float *__restrict__ src, float *__restrict__ dst, perm_tiles g) {
    __shared__ float tile[PERM_TILE][PERM_TILE + 1]; /* [b][a], padded: no bank conflicts */
    const int tx = threadIdx.x, ty = threadIdx.y;
    for (int64_t t = blockIdx.x; t < g.ntiles; t += gridDim.x) {
        int64_t ia0 = (t % g.ta) * PERM_TILE, r = t / g.ta, ib0 = (r % g.tb) * PERM_TILE, bt = r / g.tb;
        int64_t so = 0, dof = 0;
#pragma unroll /* constant indices: g stays in parameter space (unused dimensions have size 1) */
        for (int k = 1; k >= 0; k--) {
            int64_t x = bt % g.bd[k];
            bt /= g.bd[k];
            so += x * g.bs[k], dof += x * g.bo[k];
        }
        /* read: lanes along a (contiguous in src) */
        for (int y = ty; y < PERM_TILE; y += PERM_ROWS) {
            int64_t ib = ib0 + y, ia = ia0 + tx;
            if (ib < g.nbd && ia < g.na) tile[y][tx] = src[so + ib * g.sb + ia];
        }
        __syncthreads();
        /* write: lanes along b (contiguous in dst) */
        for (int y = ty; y < PERM_TILE; y += PERM_ROWS) {
            int64_t ia = ia0 + y, ib = ib0 + tx;
            if (ia < g.na && ib < g.nbd) {
                float *d = dst + dof + ia * g.da + ib;
                float v = tile[tx][y];
                *d = ACC ? __fadd_rn(*d, v) : v;
            }
        }
        __syncthreads();
    }
}

/* dst = or += src permuted: src contiguous with shape s, dst dimension i
 * being src dimension p[i]. */
static remat_status perm_run(const remat__kctx *k, const float *src, float *dst, const remat__shape *s, const int *p,
                             int acc) {
    remat__cuda *cu = remat__cu(k);
    perm_geom g = perm_simplify(s, p);
    int64_t n = 1;
    for (int i = 0; i < g.nd; i++) n *= g.d[i];
    if (n == 0) return REMAT_OK;
    if (g.nd == 1) return sh_copy(k, src, dst, n, acc);
    int nd = g.nd;
    int64_t ss[REMAT_MAX_DIMS], ds[REMAT_MAX_DIMS], st = 1;
    for (int d = nd - 1; d >= 0; d--) ss[d] = st, st *= g.d[d];
    st = 1;
    for (int i = nd - 1; i >= 0; i--) ds[g.p[i]] = st, st *= g.d[g.p[i]]; /* dst stride of src dim p[i] */
    if (g.p[nd - 1] == nd - 1) {
        perm_rows r;
        int64_t L = g.d[nd - 1];
        r.nr = nd - 1;
        for (int i = 0; i < nd - 1; i++) r.rd[i] = g.d[g.p[i]], r.rs[i] = ss[g.p[i]];
        for (int i = nd - 1; i < REMAT_MAX_DIMS - 1; i++) r.rd[i] = 1, r.rs[i] = 0;
        r.v4 = L % 4 == 0 && sh_aligned(src) && sh_aligned(dst);
        r.lu = r.v4 ? L / 4 : L;
        r.total = n / L * r.lu;
        unsigned nb = remat__cu_blocks(cu, r.total);
        int small = r.total < ((int64_t)1 << 31);
        if (small && acc) perm_rows_kernel<uint32_t, true><<<nb, REMAT__CU_THREADS, 0, cu->stream>>>(src, dst, r);
        else if (small) perm_rows_kernel<uint32_t, false><<<nb, REMAT__CU_THREADS, 0, cu->stream>>>(src, dst, r);
        else if (acc) perm_rows_kernel<uint64_t, true><<<nb, REMAT__CU_THREADS, 0, cu->stream>>>(src, dst, r);
        else perm_rows_kernel<uint64_t, false><<<nb, REMAT__CU_THREADS, 0, cu->stream>>>(src, dst, r);
        return remat__cu_launched(k, "perm_rows_kernel");
    }
    perm_tiles tg;
    int a = nd - 1, b = g.p[nd - 1];
    tg.nb = 0;
    for (int d = 0; d < nd; d++)
        if (d != a && d != b) tg.bd[tg.nb] = g.d[d], tg.bs[tg.nb] = ss[d], tg.bo[tg.nb] = ds[d], tg.nb++;
    for (int i = tg.nb; i < 2; i++) tg.bd[i] = 1, tg.bs[i] = tg.bo[i] = 0;
    tg.na = g.d[a], tg.nbd = g.d[b], tg.sb = ss[b], tg.da = ds[a];
    tg.ta = (tg.na + PERM_TILE - 1) / PERM_TILE, tg.tb = (tg.nbd + PERM_TILE - 1) / PERM_TILE;
    tg.ntiles = tg.ta * tg.tb * (n / (tg.na * tg.nbd));
    int64_t cap = (int64_t)cu->sms * 16;
    unsigned nb = (unsigned)(tg.ntiles < cap ? tg.ntiles : cap);
    dim3 block(PERM_TILE, PERM_ROWS);
    if (acc) perm_tile_kernel<true><<<nb, block, 0, cu->stream>>>(src, dst, tg);
    else perm_tile_kernel<false><<<nb, block, 0, cu->stream>>>(src, dst, tg);
    return remat__cu_launched(k, "perm_tile_kernel");
}

/* iattr[0..ndim) is the permutation: y dimension i is x dimension p[i]. */
static remat_status permute_forward(const remat__kctx *k) {
    const remat__shape *xs = k->in[0]->shape;
    int p[REMAT_MAX_DIMS];
    for (int i = 0; i < xs->ndim; i++) p[i] = (int)k->node->iattr[i];
    return perm_run(k, (const float *)k->in[0]->data, (float *)k->out->data, xs, p, 0);
}

/* dx += dy permuted by the inverse: dx dimension p[i] is dy dimension i. */
static remat_status permute_backward(const remat__kctx *k) {
    if (!k->din[0]) return REMAT_OK;
    const remat__shape *ys = &k->node->shape;
    int inv[REMAT_MAX_DIMS];
    for (int i = 0; i < ys->ndim; i++) inv[k->node->iattr[i]] = i;
    return perm_run(k, k->dout, k->din[0], ys, inv, 1);
}

extern "C" const remat__dev_kernels remat__cuda_permute = {permute_forward, permute_backward, NULL, NULL, NULL, NULL};

/* ------------------------------------------------------------- embedding */

/* y (N, D): row t = w row ids[t] (w (num, D)), or NaN for an id outside
 * [0, num). Units are float4 when v4 (D % 4 == 0). */
template <typename I>
static __global__ void emb_fwd_kernel(const int32_t *__restrict__ ids, const float *__restrict__ w,
                                      float *__restrict__ y, I total, I du, int64_t num, int v4) {
    const I stride = (I)gridDim.x * blockDim.x;
    for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
        I t = i / du, c = i - t * du;
        int64_t id = ids[t];
        int ok = id >= 0 && id < num;
        if (v4) st4(y, (int64_t)i, ok ? ld4(w, id * du + c) : make_float4(NAN, NAN, NAN, NAN));
        else y[i] = ok ? w[id * du + c] : NAN;
    }
}

static remat_status emb_forward(const remat__kctx *k) {
    remat__cuda *cu = remat__cu(k);
    const int32_t *ids = (const int32_t *)k->in[0]->data; // (N)
    const float *w = (const float *)k->in[1]->data;       // (num, D)
    float *y = (float *)k->out->data;                     // (N, D)
    int64_t N = remat__numel(k->in[0]->shape), num = k->in[1]->shape->d[0], D = k->in[1]->shape->d[1];
    if (N == 0 || D == 0) return REMAT_OK;
    int v4 = D % 4 == 0 && sh_aligned(w) && sh_aligned(y);
    int64_t du = v4 ? D / 4 : D, total = N * du;
    unsigned nb = remat__cu_blocks(cu, total);
    if (total < ((int64_t)1 << 31))
        emb_fwd_kernel<uint32_t>
            <<<nb, REMAT__CU_THREADS, 0, cu->stream>>>(ids, w, y, (uint32_t)total, (uint32_t)du, num, v4);
    else
        emb_fwd_kernel<uint64_t>
            <<<nb, REMAT__CU_THREADS, 0, cu->stream>>>(ids, w, y, (uint64_t)total, (uint64_t)du, num, v4);
    REMAT__CU_TRY(remat__cu_launched(k, "emb_fwd_kernel"));
    return REMAT_OK;
}

/* Sort keys: the id, or num for an id outside [0, num) (sorted last and
 * skipped). Bits to sort: enough for num. */
static int emb_key_bits(int64_t num) {
    int b = 1;
    while (b < 32 && ((int64_t)1 << b) <= num) b++;
    return b;
}

/* CUB's temporary bytes for sorting N pairs (host only: no launch). */
static size_t emb_sort_bytes(int64_t N, int64_t num, cudaStream_t stream, cudaError_t *err) {
    size_t bytes = 0;
    *err = cub::DeviceRadixSort::SortPairs(NULL, bytes, (const uint32_t *)NULL, (uint32_t *)NULL, (const int32_t *)NULL,
                                           (int32_t *)NULL, (int)N, 0, emb_key_bits(num), stream);
    return bytes;
}

/* Workspace (each piece 256-byte aligned): keys in, keys out (N uint32),
 * positions in, positions out (N int32), CUB's temporary storage. */
typedef struct {
    uint32_t *kin, *kout;
    int32_t *pin, *pout;
    void *tmp;
    size_t tmp_bytes;
} emb_ws;

static size_t emb_ws_bytes(int64_t N, size_t tmp_bytes) {
    return 4 * sh_align256((size_t)N * 4) + sh_align256(tmp_bytes);
}

static emb_ws emb_ws_layout(char *base, int64_t N, size_t tmp_bytes) {
    emb_ws w;
    size_t a = sh_align256((size_t)N * 4), o = 0;
    w.kin = (uint32_t *)(base + o), o += a;
    w.kout = (uint32_t *)(base + o), o += a;
    w.pin = (int32_t *)(base + o), o += a;
    w.pout = (int32_t *)(base + o), o += a;
    w.tmp = base + o, w.tmp_bytes = tmp_bytes;
    return w;
}

static size_t emb_bwd_ws(void *dev, const remat_graph *g, const remat__node *n) {
    remat__cuda *cu = (remat__cuda *)dev;
    int64_t N = remat__numel(remat__in_shape(g, n, 0)), num = remat__in_shape(g, n, 1)->d[0];
    if (N == 0 || N > INT32_MAX) return 0;
    cudaError_t err;
    size_t tmp = emb_sort_bytes(N, num, cu ? cu->stream : 0, &err);
    if (err != cudaSuccess) tmp = 0; /* backward repeats the query and reports it */
    return emb_ws_bytes(N, tmp);
}

static __global__ void emb_keys_kernel(const int32_t *__restrict__ ids, uint32_t *__restrict__ kin,
                                       int32_t *__restrict__ pin, int32_t N, int64_t num) {
    for (int32_t t = blockIdx.x * blockDim.x + threadIdx.x; t < N; t += gridDim.x * blockDim.x) {
        int64_t id = ids[t];
        kin[t] = id >= 0 && id < num ? (uint32_t)id : (uint32_t)num;
        pin[t] = t;
    }
}

/* One warp per (sorted position s, column chunk c of 32 V columns): when s
 * starts a run of equal valid ids, it adds the run's dy rows (N, D), in
 * position order, to dW (num, D) row id: acc = dW; acc += dy row, ...;
 * dW = acc (the CPU's order: row[j] += g[j] position by position). The
 * run's end is found first (a ballot over 32 keys at a time), then the
 * rows are loaded EMB_BATCH at a time and added in order: a frequent id's
 * long run (a few hundred positions in GPT-2 text) costs one load latency
 * per batch, not per row. */
#define EMB_BATCH 16
template <int V>
static __global__ void emb_runs_kernel(const uint32_t *__restrict__ key, const int32_t *__restrict__ pos,
                                       const float *__restrict__ dy, float *__restrict__ dw, int64_t N, int64_t D,
                                       int64_t num, int64_t chunks) {
    const unsigned full = 0xffffffffu;
    const int lane = threadIdx.x & 31;
    const int64_t warps = (int64_t)gridDim.x * (blockDim.x >> 5);
    const int64_t items = N * chunks;
    for (int64_t it = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); it < items; it += warps) {
        int64_t s = it / chunks, c = it - s * chunks; /* the same for the whole warp */
        uint32_t id = key[s];
        if ((int64_t)id >= num || (s > 0 && key[s - 1] == id)) continue; /* invalid, or not a run's start */
        int64_t e = s;                                                   /* keys are sorted: the run is [s, e) */
        for (;;) {
            unsigned same = __ballot_sync(full, e + lane < N && key[e + lane] == id);
            if (same == full) {
                e += 32;
                continue;
            }
            e += __ffs(~same) - 1;
            break;
        }
        int64_t col = (c * 32 + lane) * V;
        const bool act = col < D;
        float *row = dw + (int64_t)id * D + (act ? col : 0);
        if constexpr (V == 4) {
            const float4 zero = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            float4 acc = act ? ld4(row, 0) : zero;
            for (int64_t q0 = s; q0 < e; q0 += 32) {
                int32_t mine = q0 + lane < e ? pos[q0 + lane] : 0; /* 32 positions, one per lane */
                int cnt = e - q0 < 32 ? (int)(e - q0) : 32, j = 0;
                for (; j + EMB_BATCH <= cnt; j += EMB_BATCH) {
                    float4 r[EMB_BATCH]; /* loaded together, added in order */
#pragma unroll
                    for (int u = 0; u < EMB_BATCH; u++) {
                        int64_t t = __shfl_sync(full, mine, j + u);
                        r[u] = act ? ld4(dy + t * D + col, 0) : zero;
                    }
#pragma unroll
                    for (int u = 0; u < EMB_BATCH; u++) acc = add4(acc, r[u]);
                }
                for (; j < cnt; j++) {
                    int64_t t = __shfl_sync(full, mine, j);
                    if (act) acc = add4(acc, ld4(dy + t * D + col, 0));
                }
            }
            if (act) st4(row, 0, acc);
        } else {
            float acc = act ? row[0] : 0.0f;
            for (int64_t q0 = s; q0 < e; q0 += 32) {
                int32_t mine = q0 + lane < e ? pos[q0 + lane] : 0;
                int cnt = e - q0 < 32 ? (int)(e - q0) : 32, j = 0;
                for (; j + EMB_BATCH <= cnt; j += EMB_BATCH) {
                    float r[EMB_BATCH];
#pragma unroll
                    for (int u = 0; u < EMB_BATCH; u++) {
                        int64_t t = __shfl_sync(full, mine, j + u);
                        r[u] = act ? dy[t * D + col] : 0.0f;
                    }
#pragma unroll
                    for (int u = 0; u < EMB_BATCH; u++) acc = __fadd_rn(acc, r[u]);
                }
                for (; j < cnt; j++) {
                    int64_t t = __shfl_sync(full, mine, j);
                    if (act) acc = __fadd_rn(acc, dy[t * D + col]);
                }
            }
            if (act) row[0] = acc;
        }
    }
}

/* dW += dy rows summed per id in position order; ids get no gradient. */
static remat_status emb_backward(const remat__kctx *k) {
    remat__cuda *cu = remat__cu(k);
    const int32_t *ids = (const int32_t *)k->in[0]->data; // (N)
    const float *dy = k->dout;                            // (N, D)
    float *dw = k->din[1];                                // (num, D)
    int64_t N = remat__numel(k->in[0]->shape), num = k->in[1]->shape->d[0], D = k->in[1]->shape->d[1];
    if (!dw || N == 0 || D == 0) return REMAT_OK;
    if (N > INT32_MAX)
        return remat__err(REMAT_INTERNAL, "embedding backward: %lld positions exceed int32", (long long)N);
    cudaError_t err;
    size_t tmp = emb_sort_bytes(N, num, cu->stream, &err);
    REMAT__CU_TRY(remat__cu_rt_ok(err, k, "cub::DeviceRadixSort::SortPairs (size)"));
    emb_ws w = emb_ws_layout((char *)k->ws, N, tmp);
    emb_keys_kernel<<<remat__cu_blocks(cu, N), REMAT__CU_THREADS, 0, cu->stream>>>(ids, w.kin, w.pin, (int32_t)N, num);
    REMAT__CU_TRY(remat__cu_launched(k, "emb_keys_kernel"));
    size_t tb = w.tmp_bytes;
    REMAT__CU_TRY(remat__cu_rt_ok(cub::DeviceRadixSort::SortPairs(w.tmp, tb, w.kin, w.kout, w.pin, w.pout, (int)N, 0,
                                                                  emb_key_bits(num), cu->stream),
                                  k, "cub::DeviceRadixSort::SortPairs"));
    int v4 = D % 4 == 0 && sh_aligned(dy) && sh_aligned(dw);
    int64_t chunks = (D + 32 * (v4 ? 4 : 1) - 1) / (32 * (v4 ? 4 : 1)), items = N * chunks;
    int64_t wpb = REMAT__CU_THREADS / 32, blocks = (items + wpb - 1) / wpb, cap = (int64_t)cu->sms * 32;
    unsigned nb = (unsigned)(blocks < cap ? blocks : cap);
    if (v4) emb_runs_kernel<4><<<nb, REMAT__CU_THREADS, 0, cu->stream>>>(w.kout, w.pout, dy, dw, N, D, num, chunks);
    else emb_runs_kernel<1><<<nb, REMAT__CU_THREADS, 0, cu->stream>>>(w.kout, w.pout, dy, dw, N, D, num, chunks);
    REMAT__CU_TRY(remat__cu_launched(k, "emb_runs_kernel"));
    return REMAT_OK;
}

extern "C" const remat__dev_kernels remat__cuda_embedding = {emb_forward, emb_backward, NULL, emb_bwd_ws, NULL, NULL};
