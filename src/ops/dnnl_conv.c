/* dnnl_conv.c: convolutions through oneDNN (see dnnl.h).
 *
 * A convolution on nth threads: thread ith takes the images remat__split
 * gives it, in chunks of m images (chunk_images: about 1 MiB of input and
 * output per chunk). Per chunk, the images are reordered from NCHW into the
 * layout oneDNN's direct convolution wants (nChw16c and the like), the
 * primitive runs, and the result is reordered back (backward-data adds
 * into dx through a reorder with a sum post-op). Weights are reordered
 * once per call by thread 0 into a shared buffer. Backward-weights writes
 * each chunk's dW and db into the thread's partial (its first chunk) or
 * adds it there (later chunks); after a barrier the partials are summed in
 * thread order, elements split over the threads, and thread 0 adds the
 * total into dw and db. Every buffer, oneDNN's scratchpads included
 * (dnnl_scratchpad_mode_user), is a slice of the op's planned workspace.
 *
 * The chunk sizes, the layouts and the implementations are fixed by the
 * dims and nth, so the arithmetic (and the rounding) is the same in every
 * schedule. A layout is chosen for the full chunk (m images); the smaller
 * chunks at the end of a slice are held to the full chunk's weight
 * layouts, so one weight buffer serves them all.
 */
#include "dnnl.h"

#include "../core/bf16.h"

#include <stdlib.h>

#ifndef REMAT_HAVE_DNNL

int remat__dnnl_conv_uses(remat__dnnl *d, const remat__conv_dims *cd, int nth) {
    (void)d, (void)cd, (void)nth;
    return 0;
}
int remat__dnnl_conv_use(const remat__conv_dims *cd, int nth, size_t *fwd_ws, size_t *bwd_ws) {
    (void)cd, (void)nth;
    *fwd_ws = *bwd_ws = 0;
    return 0;
}
void remat__dnnl_conv_forward(remat__dnnl *d, const remat__conv_dims *cd, const void *x, const float *w, const float *b,
                              void *y, void *ws, remat__pool *pool, int ith, int nth) {
    (void)d, (void)cd, (void)x, (void)w, (void)b, (void)y, (void)ws, (void)pool, (void)ith, (void)nth;
}
void remat__dnnl_conv_backward(remat__dnnl *d, const remat__conv_dims *cd, const void *x, const float *w,
                               const void *dy, void *dx, float *dw, float *db, void *ws, remat__pool *pool, int ith,
                               int nth) {
    (void)d, (void)cd, (void)x, (void)w, (void)dy, (void)dx, (void)dw, (void)db, (void)ws, (void)pool;
    (void)ith, (void)nth;
}

#else /* REMAT_HAVE_DNNL */

#include "dnnl-impl.h"

/* One chunk size's primitives and buffers. Reorders that are NULL are the
 * identity (the user's NCHW memory is used in place); rdx is never NULL
 * (backward-data writes a buffer that is then added into dx). */
typedef struct {
    int64_t mb;
    dnnl_primitive_desc_t pf, pd, pw; /* forward, backward-data, backward-weights */
    dnnl_primitive_t f, bd, bw;
    dnnl_memory_desc_t ux, uy;                    /* user x (mb, C, H, W), y (mb, O, OH, OW): NCHW */
    dnnl_memory_desc_t xf, yf, dyd, dxd, xw, dyw; /* the primitives' layouts */
    dnnl_primitive_t rxf, ryf, rdyd, rdxd, rxw, rdyw;
    size_t bxf, byf, bdyd, bdxd, bxw, bdyw; /* buffer bytes (0: identity) */
} chunk;

typedef struct conv_plan {
    remat__conv_dims cd;
    int nth;
    int use;
    int64_t m; /* images per full chunk */
    int nch;
    chunk ch[3];                            /* distinct chunk sizes, ch[0].mb == m */
    dnnl_memory_desc_t uw, ub, wf, wd, dww; /* user weights (OIHW), bias (x); layouts */
    dnnl_memory_desc_t uwb;                 /* bf16: dW rounded, (O, C, KH, KW) bf16 */
    dnnl_primitive_t rwf, rwd, rdw;         /* weights in (NULL: identity), dw out (with sum
                                             * in float32; into uwb in bf16) */
    size_t bwf, bwd, bdw, bdb;
    size_t bbr;              /* bf16: the bias rounded through bf16 (forward) */
    size_t scratch;          /* the largest scratchpad of every primitive above */
    size_t fwd_per, bwd_per; /* per-thread bytes, scratch included */
    size_t fwd_ws, bwd_ws;
    struct conv_plan *next;   /* in remat__dnnl.plans */
    struct conv_plan *bucket; /* the next in its bucket of remat__dnnl.conv_tab */
} conv_plan;

static int same_md(const dnnl_memory_desc_t *a, const dnnl_memory_desc_t *b) { return dnnl_memory_desc_equal(a, b); }

/* A reorder from `from` to `to` (adding into `to` when sum), or NULL with
 * *ok set when they are the same layout and no sum is asked. With
 * prims = 0 only its scratchpad is measured. Returns 0 on failure. */
static int make_reorder(dnnl_engine_t eng, const dnnl_memory_desc_t *from, const dnnl_memory_desc_t *to, int sum,
                        int prims, dnnl_primitive_t *out, size_t *scratch) {
    *out = NULL;
    if (!sum && same_md(from, to)) return 1;
    dnnl_primitive_attr_t a = remat__dnnl_user_scratch_attr(sum);
    dnnl_primitive_desc_t pd = NULL;
    int ok = a && dnnl_reorder_primitive_desc_create(&pd, from, eng, to, eng, a) == dnnl_success;
    dnnl_primitive_attr_destroy(a);
    if (!ok) return 0;
    size_t s = remat__dnnl_pd_scratch(pd);
    if (s > *scratch) *scratch = s;
    if (prims && dnnl_primitive_create(out, pd) != dnnl_success) ok = 0;
    dnnl_primitive_desc_destroy(pd);
    return ok;
}

static const dnnl_memory_desc_t *qmd(const_dnnl_primitive_desc_t pd, dnnl_query_t what) {
    return dnnl_primitive_desc_query_md(pd, what, 0);
}

/* A direct (JIT) implementation, not oneDNN's own im2col+GEMM or its
 * reference loops: only those beat im2col+OpenBLAS (docs/benchmarks.md).
 * Where the machine has AMX, oneDNN's direct bf16 convolutions are its
 * brgemm-based ones ("brgconv:avx512_core_amx_bf16"), named without
 * "jit". */
static int direct_impl(const_dnnl_primitive_desc_t pd) {
    const char *s = remat__dnnl_impl_of(pd);
    if (strncmp(s, "brgconv", 7) == 0) return 1;
    return strstr(s, "jit") && !strstr(s, "gemm") && !strstr(s, "ref");
}

/* Images per chunk: about 1 MiB of NCHW input and output per chunk (the
 * size of im2col's band, so that the workspace, which the budget counts,
 * stays near im2col's), at least one image, at most the largest slice. */
static int64_t chunk_images(const remat__conv_dims *cd, int nth) {
    int64_t per = (cd->C * cd->H * cd->W + cd->O * cd->OH * cd->OW) * (int64_t)sizeof(float);
    int64_t m = ((int64_t)1 << 20) / (per > 0 ? per : 1);
    int64_t q = (cd->N + nth - 1) / nth;
    if (m > q) m = q;
    return m < 1 ? 1 : m;
}

static void chunk_free(chunk *c) {
    dnnl_primitive_t *ps[] = {&c->f, &c->bd, &c->bw, &c->rxf, &c->ryf, &c->rdyd, &c->rdxd, &c->rxw, &c->rdyw};
    for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++)
        if (*ps[i]) dnnl_primitive_destroy(*ps[i]), *ps[i] = NULL;
    dnnl_primitive_desc_t *ds[] = {&c->pf, &c->pd, &c->pw};
    for (size_t i = 0; i < 3; i++)
        if (*ds[i]) dnnl_primitive_desc_destroy(*ds[i]), *ds[i] = NULL;
}

static void plan_free(conv_plan *p) {
    for (int i = 0; i < p->nch; i++) chunk_free(&p->ch[i]);
    dnnl_primitive_t *ps[] = {&p->rwf, &p->rwd, &p->rdw};
    for (size_t i = 0; i < 3; i++)
        if (*ps[i]) dnnl_primitive_destroy(*ps[i]), *ps[i] = NULL;
}

/* Makes chunk c's descriptors for c->mb images. The full chunk (lead)
 * chooses every layout; the others take the lead's weight layouts. */
static int chunk_make(dnnl_engine_t eng, conv_plan *p, chunk *c, int lead) {
    const remat__conv_dims *cd = &p->cd;
    dnnl_dims_t xd = {c->mb, cd->C, cd->H, cd->W}, yd = {c->mb, cd->O, cd->OH, cd->OW};
    dnnl_dims_t wdim = {cd->O, cd->C, cd->KH, cd->KW}, bdim = {cd->O};
    dnnl_dims_t st = {cd->s, cd->s}, pad = {cd->p, cd->p};
    /* bf16: products on bf16, dW and db accumulated in float32 */
    dnnl_data_type_t t = cd->bf16 ? dnnl_bf16 : dnnl_f32, tx = cd->xbf16 ? dnnl_bf16 : dnnl_f32;
    dnnl_memory_desc_t ax, ay, aw, adw, b;
    if (dnnl_memory_desc_init_by_tag(&c->ux, 4, xd, tx, dnnl_nchw) != dnnl_success ||
        dnnl_memory_desc_init_by_tag(&c->uy, 4, yd, t, dnnl_nchw) != dnnl_success ||
        dnnl_memory_desc_init_by_tag(&ax, 4, xd, t, dnnl_format_tag_any) != dnnl_success ||
        dnnl_memory_desc_init_by_tag(&ay, 4, yd, t, dnnl_format_tag_any) != dnnl_success ||
        dnnl_memory_desc_init_by_tag(&aw, 4, wdim, t, dnnl_format_tag_any) != dnnl_success ||
        dnnl_memory_desc_init_by_tag(&adw, 4, wdim, dnnl_f32, dnnl_format_tag_any) != dnnl_success ||
        dnnl_memory_desc_init_by_tag(&b, 1, bdim, dnnl_f32, dnnl_x) != dnnl_success)
        return 0;
    if (lead) {
        if (dnnl_memory_desc_init_by_tag(&p->uw, 4, wdim, dnnl_f32, dnnl_oihw) != dnnl_success ||
            dnnl_memory_desc_init_by_tag(&p->uwb, 4, wdim, dnnl_bf16, dnnl_oihw) != dnnl_success)
            return 0;
        p->ub = b;
    }
    dnnl_convolution_desc_t df, dd, dw;
    const dnnl_memory_desc_t *bias = cd->bias ? &b : NULL;
    if (dnnl_convolution_forward_desc_init(&df, dnnl_forward_training, dnnl_convolution_direct, &ax,
                                           lead ? &aw : &p->wf, bias, &ay, st, pad, pad) != dnnl_success ||
        !(c->pf = remat__dnnl_make_pd(eng, &df, NULL)))
        return 0;
    if (dnnl_convolution_backward_data_desc_init(&dd, dnnl_convolution_direct, &ax, lead ? &aw : &p->wd, &ay, st, pad,
                                                 pad) != dnnl_success ||
        !(c->pd = remat__dnnl_make_pd(eng, &dd, c->pf)))
        return 0;
    if (dnnl_convolution_backward_weights_desc_init(&dw, dnnl_convolution_direct, &ax, lead ? &adw : &p->dww, bias, &ay,
                                                    st, pad, pad) != dnnl_success ||
        !(c->pw = remat__dnnl_make_pd(eng, &dw, c->pf)))
        return 0;
    if (lead) {
        p->wf = *qmd(c->pf, dnnl_query_weights_md);
        p->wd = *qmd(c->pd, dnnl_query_weights_md);
        p->dww = *qmd(c->pw, dnnl_query_diff_weights_md);
    } else if (!same_md(qmd(c->pf, dnnl_query_weights_md), &p->wf) ||
               !same_md(qmd(c->pd, dnnl_query_weights_md), &p->wd) ||
               !same_md(qmd(c->pw, dnnl_query_diff_weights_md), &p->dww)) {
        return 0;
    }
    c->xf = *qmd(c->pf, dnnl_query_src_md);
    c->yf = *qmd(c->pf, dnnl_query_dst_md);
    c->dyd = *qmd(c->pd, dnnl_query_diff_dst_md);
    c->dxd = *qmd(c->pd, dnnl_query_diff_src_md);
    c->xw = *qmd(c->pw, dnnl_query_src_md);
    c->dyw = *qmd(c->pw, dnnl_query_diff_dst_md);
    return 1;
}

/* The chunk's reorders (prims = 1) or only their scratchpads, and its
 * buffer sizes. */
static int chunk_reorders(dnnl_engine_t eng, conv_plan *p, chunk *c, int prims) {
    size_t *s = &p->scratch;
    if (!make_reorder(eng, &c->ux, &c->xf, 0, prims, &c->rxf, s) ||
        !make_reorder(eng, &c->yf, &c->uy, 0, prims, &c->ryf, s) ||
        !make_reorder(eng, &c->uy, &c->dyd, 0, prims, &c->rdyd, s) ||
        !make_reorder(eng, &c->dxd, &c->ux, 1, prims, &c->rdxd, s) ||
        !make_reorder(eng, &c->ux, &c->xw, 0, prims, &c->rxw, s) ||
        !make_reorder(eng, &c->uy, &c->dyw, 0, prims, &c->rdyw, s))
        return 0;
    c->bxf = same_md(&c->ux, &c->xf) ? 0 : remat__dnnl_up(dnnl_memory_desc_get_size(&c->xf));
    c->byf = same_md(&c->uy, &c->yf) ? 0 : remat__dnnl_up(dnnl_memory_desc_get_size(&c->yf));
    c->bdyd = same_md(&c->uy, &c->dyd) ? 0 : remat__dnnl_up(dnnl_memory_desc_get_size(&c->dyd));
    c->bdxd = remat__dnnl_up(dnnl_memory_desc_get_size(&c->dxd));
    c->bxw = same_md(&c->ux, &c->xw) ? 0 : remat__dnnl_up(dnnl_memory_desc_get_size(&c->xw));
    /* backward-weights reads dy in backward-data's layout when they agree */
    c->bdyw =
        same_md(&c->uy, &c->dyw) || same_md(&c->dyd, &c->dyw) ? 0 : remat__dnnl_up(dnnl_memory_desc_get_size(&c->dyw));
    size_t sc[] = {remat__dnnl_pd_scratch(c->pf), remat__dnnl_pd_scratch(c->pd), remat__dnnl_pd_scratch(c->pw)};
    for (int i = 0; i < 3; i++)
        if (sc[i] > *s) *s = sc[i];
    if (prims &&
        (dnnl_primitive_create(&c->f, c->pf) != dnnl_success || dnnl_primitive_create(&c->bd, c->pd) != dnnl_success ||
         dnnl_primitive_create(&c->bw, c->pw) != dnnl_success))
        return 0;
    return 1;
}

/* Decides whether the convolution runs through oneDNN and, if so, fills
 * the plan (its primitives too when prims). Returns 0 on a oneDNN failure
 * (then p->use = 0); "not used" is a success. */
static int plan_make(dnnl_engine_t eng, remat__products mode, const remat__conv_dims *cd, int nth, int prims,
                     conv_plan *p) {
    memset(p, 0, sizeof *p);
    p->cd = *cd;
    p->nth = nth;
    if (mode == REMAT__PRODUCTS_BLAS) return 1;
    p->m = chunk_images(cd, nth);
    int64_t q = cd->N / nth, mbs[3] = {p->m, q % p->m, (q + 1) % p->m};
    if (q == 0) mbs[1] = 0;           /* threads beyond N have no images */
    if (cd->N % nth == 0) mbs[2] = 0; /* no thread has q + 1: no primitives for its last chunk */
    for (int i = 0; i < 3; i++) {
        int seen = mbs[i] == 0;
        for (int j = 0; j < p->nch; j++) seen |= p->ch[j].mb == mbs[i];
        if (!seen) p->ch[p->nch++].mb = mbs[i];
    }
    int ok = 1;
    for (int i = 0; i < p->nch && ok; i++) ok = chunk_make(eng, p, &p->ch[i], i == 0);
    int direct = ok;
    for (int i = 0; i < p->nch && direct; i++)
        direct = direct_impl(p->ch[i].pf) && direct_impl(p->ch[i].pd) && direct_impl(p->ch[i].pw);
    /* The rule (docs/benchmarks.md, "oneDNN against im2col+OpenBLAS"):
     * oneDNN's direct convolutions where it has them for every pass, the
     * input has at least 16 channels and the kernel is larger than 1x1
     * (1.2-1.8x faster there); im2col+OpenBLAS otherwise: the first layers
     * of image models (oneDNN 0.3-0.8x), 1x1 convolutions (plain GEMMs on
     * NCHW, where oneDNN's reorders cost more than its kernels save:
     * 0.7-0.97x). In bf16, where the machine multiplies bf16 in hardware,
     * 1x1 convolutions too (their alternative is float32 views and an
     * sgemm at half bf16's rate); without that hardware oneDNN emulates
     * bf16 at 0.2-0.35x its float32 speed (docs/precision.md), so float32
     * views run instead. */
    int fast = cd->C >= 16 && (cd->bf16 ? remat__dnnl_bf16_hardware() : cd->KH * cd->KW > 1);
    int want = direct && (mode == REMAT__PRODUCTS_DNNL || fast);
    if (!want) {
        plan_free(p);
        p->nch = 0;
        return 1;
    }
    for (int i = 0; i < p->nch && ok; i++) ok = chunk_reorders(eng, p, &p->ch[i], prims);
    ok = ok && make_reorder(eng, &p->uw, &p->wf, 0, prims, &p->rwf, &p->scratch) &&
         make_reorder(eng, &p->uw, &p->wd, 0, prims, &p->rwd, &p->scratch) &&
         make_reorder(eng, &p->dww, cd->bf16 ? &p->uwb : &p->uw, !cd->bf16, prims, &p->rdw, &p->scratch);
    if (!ok) {
        plan_free(p);
        p->nch = 0;
        return 0;
    }
    p->bwf = same_md(&p->uw, &p->wf) ? 0 : remat__dnnl_up(dnnl_memory_desc_get_size(&p->wf));
    p->bwd = same_md(&p->uw, &p->wd) ? 0 : remat__dnnl_up(dnnl_memory_desc_get_size(&p->wd));
    p->bdw = remat__dnnl_up(dnnl_memory_desc_get_size(&p->dww));
    p->bdb = cd->bias ? remat__dnnl_up((size_t)cd->O * sizeof(float)) : 0;
    p->bbr = cd->bf16 ? p->bdb : 0;
    size_t fper = 0, bper = 0;
    for (int i = 0; i < p->nch; i++) {
        chunk *c = &p->ch[i];
        size_t f = c->bxf + c->byf, b = c->bdyd + c->bdxd + c->bxw + c->bdyw;
        if (f > fper) fper = f;
        if (b > bper) bper = b;
    }
    size_t sc = remat__dnnl_up(p->scratch);
    p->fwd_per = fper + sc;
    /* backward, per thread: partial dW and db, a chunk's dW and db, the
     * chunk buffers, the scratchpad */
    p->bwd_per = 2 * (p->bdw + p->bdb) + bper + sc;
    int64_t S = cd->N < nth ? cd->N : nth;
    p->fwd_ws = p->bwf + p->bbr + (size_t)S * p->fwd_per;
    p->bwd_ws = p->bwd + (size_t)S * p->bwd_per;
    p->use = 1;
    return 1;
}

void remat__dnnl_conv_plans_free(remat__dnnl *d) {
    for (struct conv_plan *p = d->plans, *nx; p; p = nx) {
        nx = p->next;
        plan_free(p);
        free(p);
    }
}

/* The bucket of (cd, nth) in remat__dnnl.conv_tab: FNV-1a over its
 * fields. */
static unsigned plan_bucket(const remat__conv_dims *cd, int nth) {
    const int64_t f[] = {cd->N,  cd->C, cd->H, cd->W,    cd->O,    cd->KH,    cd->KW, cd->OH,
                         cd->OW, cd->s, cd->p, cd->bias, cd->bf16, cd->xbf16, nth};
    uint64_t h = 14695981039346656037ull;
    for (size_t i = 0; i < sizeof f / sizeof *f; i++) h = (h ^ (uint64_t)f[i]) * 1099511628211ull;
    return (unsigned)(h % REMAT__DNNL_CONV_BUCKETS);
}

/* The plan for (cd, nth), made on first use (with its primitives when
 * oneDNN runs it), and with stream set, thread ith's stream. NULL after
 * recording a failure. */
static conv_plan *get_plan(remat__dnnl *d, const remat__conv_dims *cd, int nth, int ith, dnnl_stream_t *stream) {
    pthread_mutex_lock(&d->mu);
    conv_plan **bucket = &d->conv_tab[plan_bucket(cd, nth)], *p = *bucket;
    for (; p; p = p->bucket)
        if (p->nth == nth && !memcmp(&p->cd, cd, sizeof *cd)) break;
    if (!p) {
        p = calloc(1, sizeof *p);
        int t = remat__dnnl_single_enter();
        int ok = p && plan_make(d->eng, d->mode, cd, nth, 1, p);
        remat__dnnl_single_leave(t);
        if (!ok) {
            if (p) plan_free(p);
            free(p);
            p = NULL;
            remat__dnnl_fail(d, "making a convolution's primitives");
        } else {
            p->next = d->plans, d->plans = p;
            p->bucket = *bucket, *bucket = p;
        }
    }
    if (p && stream) {
        int have = remat__dnnl_stream_locked(d, ith, stream);
        if (!have || !p->use) {
            remat__dnnl_fail(d, p->use ? "creating a stream" : "a convolution oneDNN was not planned for");
            p = NULL;
            *stream = NULL;
        }
    }
    pthread_mutex_unlock(&d->mu);
    return p;
}

int remat__dnnl_conv_uses(remat__dnnl *d, const remat__conv_dims *cd, int nth) {
    if (!d) return 0;
    conv_plan *p = get_plan(d, cd, nth, 0, NULL);
    return p && p->use;
}

int remat__dnnl_conv_use(const remat__conv_dims *cd, int nth, size_t *fwd_ws, size_t *bwd_ws) {
    if (remat__dnnl_conv1x1_use(cd, nth, fwd_ws, bwd_ws)) return 1;
    *fwd_ws = *bwd_ws = 0;
    remat__products mode = remat__products_mode();
    if (mode == REMAT__PRODUCTS_BLAS) return 0;
    dnnl_engine_t eng;
    if (dnnl_engine_create(&eng, dnnl_cpu, 0) != dnnl_success) return 0;
    conv_plan p;
    int t = remat__dnnl_single_enter();
    int ok = plan_make(eng, mode, cd, nth, 0, &p);
    remat__dnnl_single_leave(t);
    int use = ok && p.use;
    if (use) *fwd_ws = p.fwd_ws, *bwd_ws = p.bwd_ws;
    plan_free(&p);
    dnnl_engine_destroy(eng);
    return use;
}

/* A reorder from (fmd, from) to (tmd, to), with scratchpad sc. */
static int reorder(remat__dnnl *d, dnnl_stream_t s, dnnl_primitive_t r, const dnnl_memory_desc_t *fmd, const void *from,
                   const dnnl_memory_desc_t *tmd, void *to, const dnnl_memory_desc_t *smd, void *sc) {
    int ids[] = {DNNL_ARG_FROM, DNNL_ARG_TO, DNNL_ARG_SCRATCHPAD};
    const dnnl_memory_desc_t *mds[] = {fmd, tmd, smd};
    void *ptrs[] = {(void *)from, to, sc};
    return remat__dnnl_run(d, s, r, 3, ids, mds, ptrs);
}

static const chunk *chunk_for(const conv_plan *p, int64_t mb) {
    for (int i = 0; i < p->nch; i++)
        if (p->ch[i].mb == mb) return &p->ch[i];
    return NULL;
}

/* Bytes of an element of x (and dx) and of y (and dy). */
static size_t xsize(const remat__conv_dims *cd) { return cd->xbf16 ? 2 : sizeof(float); }
static size_t ysize(const remat__conv_dims *cd) { return cd->bf16 ? 2 : sizeof(float); }

void remat__dnnl_conv_forward(remat__dnnl *d, const remat__conv_dims *cd, const void *x, const float *w, const float *b,
                              void *y, void *ws, remat__pool *pool, int ith, int nth) {
    if (remat__dnnl_conv1x1_forward(d, cd, x, w, y, ws, pool, ith, nth)) return;
    dnnl_stream_t s;
    conv_plan *p = get_plan(d, cd, nth, ith, &s);
    if (!p) { /* failed (recorded): keep the barrier count */
        remat__pool_barrier(pool);
        return;
    }
    int t = remat__dnnl_single_enter();
    char *base = ws;
    char *wf = p->bwf ? base : (char *)w;                       /* (O, C, KH, KW) in the forward's layout */
    float *br = p->bbr ? (float *)(base + p->bwf) : (float *)b; /* bf16: the bias rounded */
    char *mine = base + p->bwf + p->bbr + (size_t)ith * p->fwd_per;
    dnnl_memory_desc_t smd = remat__dnnl_scratch_md(p->scratch);
    char *sc = mine + p->fwd_per - remat__dnnl_up(p->scratch);
    if (ith == 0 && p->rwf) reorder(d, s, p->rwf, &p->uw, w, &p->wf, wf, &smd, sc);
    if (ith == 0 && p->bbr)
        for (int64_t o = 0; o < cd->O; o++) br[o] = remat__bf16_round(b[o]);
    remat__pool_barrier(pool);
    int64_t lo, hi;
    remat__split(cd->N, ith, nth, &lo, &hi);
    const size_t xi = (size_t)(cd->C * cd->H * cd->W) * xsize(cd), yi = (size_t)(cd->O * cd->OH * cd->OW) * ysize(cd);
    for (int64_t n0 = lo; n0 < hi; n0 += p->m) {
        int64_t mb = hi - n0 < p->m ? hi - n0 : p->m;
        const chunk *c = chunk_for(p, mb);
        const char *xn = (const char *)x + (size_t)n0 * xi;
        char *yn = (char *)y + (size_t)n0 * yi;
        void *xb = c->rxf ? mine : (void *)xn, *yb = c->ryf ? mine + c->bxf : (void *)yn;
        if (c->rxf && !reorder(d, s, c->rxf, &c->ux, xn, &c->xf, xb, &smd, sc)) break;
        int ids[] = {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_BIAS, DNNL_ARG_DST, DNNL_ARG_SCRATCHPAD};
        const dnnl_memory_desc_t *mds[] = {&c->xf, &p->wf, &p->ub, &c->yf, &smd};
        void *ptrs[] = {xb, wf, b ? br : NULL, yb, sc};
        if (!remat__dnnl_run(d, s, c->f, 5, ids, mds, ptrs)) break;
        if (c->ryf && !reorder(d, s, c->ryf, &c->yf, yb, &c->uy, yn, &smd, sc)) break;
    }
    remat__dnnl_single_leave(t);
}

/* Conv backward's places in its workspace for thread ith: the weights in
 * backward-data's layout (shared, or the user's), then per thread its
 * partial dW and db, one chunk's dW and db, the chunk's buffers and the
 * scratchpad. */
typedef struct {
    char *wd;
    char *pdw, *pdb; /* this thread's partial dW, db */
    char *cdw, *cdb; /* a chunk's dW, db */
    char *buf;
    char *sc;
    dnnl_memory_desc_t smd;
} bwd_bufs;

static bwd_bufs bwd_bufs_of(const conv_plan *p, const float *w, void *ws, int ith) {
    bwd_bufs b;
    char *base = ws;
    b.wd = p->bwd ? base : (char *)w;
    char *mine = base + p->bwd + (size_t)ith * p->bwd_per;
    b.pdw = mine, b.pdb = mine + p->bdw;
    b.cdw = b.pdb + p->bdb, b.cdb = b.cdw + p->bdw;
    b.buf = b.cdb + p->bdb;
    b.smd = remat__dnnl_scratch_md(p->scratch);
    b.sc = mine + p->bwd_per - remat__dnnl_up(p->scratch);
    return b;
}

/* dx (the chunk's images, NCHW) += backward-data of dyd (in its layout),
 * through the buffer dxd. 0 on failure (recorded). */
static int bwd_data(remat__dnnl *d, dnnl_stream_t s, const conv_plan *p, const chunk *c, const bwd_bufs *b, char *dyd,
                    char *dxd, void *dx) {
    int ids[] = {DNNL_ARG_DIFF_DST, DNNL_ARG_WEIGHTS, DNNL_ARG_DIFF_SRC, DNNL_ARG_SCRATCHPAD};
    const dnnl_memory_desc_t *mds[] = {&c->dyd, &p->wd, &c->dxd, &b->smd};
    void *ptrs[] = {dyd, b->wd, dxd, b->sc};
    if (!remat__dnnl_run(d, s, c->bd, 4, ids, mds, ptrs)) return 0;
    return reorder(d, s, c->rdxd, &c->dxd, dxd, &c->ux, dx, &b->smd, b->sc);
}

/* The chunk's dW and db (x and dy moved into backward-weights' layouts
 * xw and dyw where they differ): written into the thread's partials by
 * its first chunk, added to them by the others. 0 on failure (recorded). */
static int bwd_weights(remat__dnnl *d, dnnl_stream_t s, const conv_plan *p, const chunk *c, const bwd_bufs *b,
                       const void *xn, const void *dyn, char *xw, char *dyw, int bias, int first) {
    if (c->rxw && !reorder(d, s, c->rxw, &c->ux, xn, &c->xw, xw, &b->smd, b->sc)) return 0;
    if (c->rdyw && c->bdyw && !reorder(d, s, c->rdyw, &c->uy, dyn, &c->dyw, dyw, &b->smd, b->sc)) return 0;
    int ids[] = {DNNL_ARG_SRC, DNNL_ARG_DIFF_DST, DNNL_ARG_DIFF_WEIGHTS, DNNL_ARG_DIFF_BIAS, DNNL_ARG_SCRATCHPAD};
    const dnnl_memory_desc_t *mds[] = {&c->xw, &c->dyw, &p->dww, &p->ub, &b->smd};
    void *ptrs[] = {xw, dyw, first ? b->pdw : b->cdw, bias ? (first ? b->pdb : b->cdb) : NULL, b->sc};
    if (!remat__dnnl_run(d, s, c->bw, 5, ids, mds, ptrs)) return 0;
    if (!first) {
        float *a = (float *)b->pdw, *e = (float *)b->cdw;
        for (size_t i = 0; i < p->bdw / sizeof(float); i++) a[i] += e[i];
        a = (float *)b->pdb, e = (float *)b->cdb;
        for (size_t i = 0; i < p->bdb / sizeof(float); i++) a[i] += e[i];
    }
    return 1;
}

/* Backward of the chunk c of images from n0: dx when wanted, the thread's
 * dW and db partials when wgrad (`first`: its first chunk). 0 on failure
 * (recorded). */
static int bwd_chunk(remat__dnnl *d, dnnl_stream_t s, const remat__conv_dims *cd, const conv_plan *p, const chunk *c,
                     const bwd_bufs *b, const char *x, const char *dy, char *dx, int wgrad, int64_t n0, int first) {
    const size_t xi = (size_t)(cd->C * cd->H * cd->W) * xsize(cd), yi = (size_t)(cd->O * cd->OH * cd->OW) * ysize(cd);
    const char *xn = x + (size_t)n0 * xi, *dyn = dy + (size_t)n0 * yi;
    char *dyd = c->rdyd ? b->buf : (char *)dyn, *dxd = b->buf + c->bdyd;
    char *xw = c->rxw ? dxd + c->bdxd : (char *)xn;
    char *dyw = c->rdyw ? (c->bdyw ? xw + c->bxw : NULL) : (char *)dyn;
    if (c->rdyw && !c->bdyw) dyw = dyd; /* the same layout as backward-data's */
    if (c->rdyd && (dx || (wgrad && !c->bdyw && c->rdyw)) &&
        !reorder(d, s, c->rdyd, &c->uy, dyn, &c->dyd, dyd, &b->smd, b->sc))
        return 0;
    if (dx && !bwd_data(d, s, p, c, b, dyd, dxd, dx + (size_t)n0 * xi)) return 0;
    if (wgrad && !bwd_weights(d, s, p, c, b, xn, dyn, xw, dyw, cd->bias, first)) return 0;
    return 1;
}

/* Sums the threads' dW and db partials in thread order 0..S-1 into thread
 * 0's, elements split over the threads. The buffers' padding sums zeros. */
static void sum_partials(const conv_plan *p, const remat__conv_dims *cd, void *ws, int ith, int nth) {
    char *base = ws;
    int64_t S = cd->N < nth ? cd->N : nth;
    size_t nf = (p->bdw + p->bdb) / sizeof(float); /* dW then db, contiguous in each slice */
    float *p0 = (float *)(base + p->bwd);
    int64_t e0, e1;
    remat__split((int64_t)nf, ith, nth, &e0, &e1);
    for (int64_t e = e0; e < e1; e++) {
        float acc = p0[e];
        for (int64_t th = 1; th < S; th++) acc += ((float *)(base + p->bwd + (size_t)th * p->bwd_per))[e];
        p0[e] = acc;
    }
}

/* Thread 0, after the partials are summed: dw and db += the sums (rounded
 * through bf16 first in bf16, through thread 0's chunk buffer). */
static void add_wgrad(remat__dnnl *d, dnnl_stream_t s, const conv_plan *p, const bwd_bufs *b, void *ws, float *dw,
                      float *db) {
    char *p0 = (char *)ws + p->bwd; /* thread 0's partials: the sums */
    const float *b0 = (const float *)(p0 + p->bdw);
    int64_t nw = p->cd.O * p->cd.C * p->cd.KH * p->cd.KW;
    if (dw && !p->cd.bf16) reorder(d, s, p->rdw, &p->dww, p0, &p->uw, dw, &b->smd, b->sc);
    if (dw && p->cd.bf16 && reorder(d, s, p->rdw, &p->dww, p0, &p->uwb, b->cdw, &b->smd, b->sc))
        for (int64_t i = 0; i < nw; i++) dw[i] += remat__f32_of(((const uint16_t *)b->cdw)[i]);
    if (db)
        for (int64_t o = 0; o < p->cd.O; o++) db[o] += p->cd.bf16 ? remat__bf16_round(b0[o]) : b0[o];
}

void remat__dnnl_conv_backward(remat__dnnl *d, const remat__conv_dims *cd, const void *x, const float *w,
                               const void *dy, void *dx, float *dw, float *db, void *ws, remat__pool *pool, int ith,
                               int nth) {
    if (remat__dnnl_conv1x1_backward(d, cd, x, w, dy, dx, dw, ws, pool, ith, nth)) return; /* no bias: db NULL */
    dnnl_stream_t s;
    conv_plan *p = get_plan(d, cd, nth, ith, &s);
    int wgrad = dw || db;
    if (!p) { /* failed (recorded): keep the barrier count */
        remat__pool_barrier(pool);
        if (wgrad) remat__pool_barrier(pool), remat__pool_barrier(pool);
        return;
    }
    int t = remat__dnnl_single_enter();
    bwd_bufs b = bwd_bufs_of(p, w, ws, ith);
    if (dx && ith == 0 && p->rwd) reorder(d, s, p->rwd, &p->uw, w, &p->wd, b.wd, &b.smd, b.sc);
    remat__pool_barrier(pool);
    int64_t lo, hi;
    remat__split(cd->N, ith, nth, &lo, &hi);
    for (int64_t n0 = lo; n0 < hi; n0 += p->m) {
        int64_t mb = hi - n0 < p->m ? hi - n0 : p->m;
        if (!bwd_chunk(d, s, cd, p, chunk_for(p, mb), &b, x, dy, dx, wgrad, n0, n0 == lo)) break;
    }
    remat__dnnl_single_leave(t);
    if (!wgrad) return; /* the same on every thread: no barrier needed */
    remat__pool_barrier(pool);
    sum_partials(p, cd, ws, ith, nth);
    remat__pool_barrier(pool);
    if (ith != 0) return;
    t = remat__dnnl_single_enter();
    add_wgrad(d, s, p, &b, ws, dw, db);
    remat__dnnl_single_leave(t);
}

#endif /* REMAT_HAVE_DNNL */
