/* views.c: a kernel run through the float32 views of the bf16
 * policy (plan/precision.c makes the layout and the plan counts it).
 *
 * Before the kernel: each input it reads through bf16 is copied into its
 * workspace as float32 (a bf16 value widened, or a float32 value rounded
 * through bf16: a product's view), and so are a bf16 output it reads
 * (backward) and a bf16 output gradient; an input gradient it rounds
 * through bf16 starts as a zeroed float32 buffer. After it: a bf16 output
 * is rounded from the float32 the kernel wrote, and each such input
 * gradient is rounded through bf16 and added into the gradient (rounded
 * again when the gradient is bf16). Every step is elementwise, so the
 * bits depend on the values alone, never on a plan or a thread count.
 */
#include "../session/session.h"

static remat_status cvt(remat_session *s, void *dst, const void *src, int64_t n, remat__cvt kind) {
    return s->be->convert(s->dev, dst, src, n, kind);
}

static remat_dtype dtype_of(remat_session *s, int32_t node) { return remat__val_dtype(&s->prog, node); }

/* Points input i at its float32 view in the workspace. */
static remat_status view_in(remat_session *s, remat__kctx *k, const remat__shim *L, int i, remat__tensor *t) {
    const remat__tensor *x = k->in[i];
    *t = *x;
    if (L->in[i] < 0 || !x->data) return REMAT_OK;
    t->data = (unsigned char *)k->ws + L->in[i];
    remat__cvt kind = dtype_of(s, k->node->in[i]) == REMAT_BF16 ? REMAT__CVT_UP : REMAT__CVT_ROUND;
    k->in[i] = t;
    return cvt(s, t->data, x->data, remat__numel(x->shape), kind);
}

/* Element off of a value stored in dtype d (NULL stays NULL). */
static void *at(const void *p, remat_dtype d, int64_t off) {
    return p ? (unsigned char *)p + (size_t)off * remat__dtype_size(d) : NULL;
}

/* How a sliced kernel's tensors split into blocks (remat__shim.slice
 * units each): an elementwise op's units are elements, a plane-wise op's
 * the (n, c) planes of its input; per tensor, its elements per unit. */
typedef struct {
    int64_t units;
    int64_t per_in[REMAT__MAX_IN], per_out;
} blocks;

static blocks blocks_of(const remat__kctx *k0, const remat__shim *L) {
    const remat__node *n = k0->node;
    int64_t numel = remat__numel(&n->shape);
    blocks b;
    b.units = L->planes ? k0->in[0]->shape->d[0] * k0->in[0]->shape->d[1] : numel;
    b.per_out = numel / b.units;
    for (int i = 0; i < n->n_in; i++) b.per_in[i] = remat__numel(k0->in[i]->shape) / b.units;
    return b;
}

/* A block of c units of a tensor of shape `full`: elements (1-D), or c
 * planes (c, 1, ...). */
static remat__shape block_shape(const remat__shape *full, int planes, int64_t c, int64_t per) {
    if (!planes) return (remat__shape){.ndim = 1, .d = {c * per}};
    remat__shape sh = *full;
    sh.d[0] = c, sh.d[1] = 1;
    return sh;
}

/* Units [u0, u0 + c) of a sliced kernel's inputs into k (views filled
 * from the values), shapes in sh (per input, then the output). */
static remat_status block_in(remat_session *s, const remat__kctx *k0, const remat__shim *L, const blocks *b, int64_t u0,
                             int64_t c, remat__kctx *k, remat__tensor *t, remat__shape *sh) {
    const remat__node *n = k0->node;
    unsigned char *ws = k0->ws;
    remat_status st = REMAT_OK;
    for (int i = 0; i < n->n_in && st == REMAT_OK; i++) {
        remat_dtype d = dtype_of(s, n->in[i]);
        int64_t off = u0 * b->per_in[i], len = c * b->per_in[i];
        sh[i] = block_shape(k0->in[i]->shape, L->planes != 0, c, b->per_in[i]);
        t[i] = (remat__tensor){at(k0->in[i]->data, d, off), &sh[i]};
        if (L->in[i] >= 0 && t[i].data) {
            void *v = ws + L->in[i];
            st = cvt(s, v, t[i].data, len, d == REMAT_BF16 ? REMAT__CVT_UP : REMAT__CVT_ROUND);
            t[i].data = v;
        }
        k->in[i] = &t[i];
        if (!k0->din[i]) continue;
        k->din[i] = at(k0->din[i], REMAT_F32, off); /* no view: a float32 gradient */
        if (L->din[i] >= 0) {
            k->din[i] = (float *)(ws + L->din[i]);
            if (st == REMAT_OK) st = s->be->zero(s->dev, k->din[i], (size_t)len * sizeof(float));
        }
    }
    return st;
}

/* The same for the output and its gradient, of len elements at off. */
static remat_status block_out(remat_session *s, const remat__kctx *k0, const remat__shim *L, int backward, int64_t off,
                              int64_t len, remat__kctx *k, remat__tensor *out) {
    unsigned char *ws = k0->ws;
    remat_status st = REMAT_OK;
    *out = (remat__tensor){at(k0->out->data, dtype_of(s, k0->node_id), off), &k->node->shape};
    if (L->out >= 0) {
        void *v = ws + L->out;
        if (backward && out->data) st = cvt(s, v, out->data, len, REMAT__CVT_UP);
        out->data = v;
    }
    k->out = out;
    if (backward) {
        k->dout = at(k0->dout, dtype_of(s, k0->node_id), off);
        if (L->dout >= 0 && st == REMAT_OK) {
            st = cvt(s, ws + L->dout, k->dout, len, REMAT__CVT_UP);
            k->dout = (const float *)(ws + L->dout);
        }
    }
    return st;
}

/* A kernel block by block: an elementwise op (REMAT__OP_ELEMENTWISE) a
 * slice of elements, a plane-wise op (REMAT__OP_PLANEWISE) a block of
 * planes at a time, each through views one block long. */
static remat_status run_sliced(remat_session *s, const remat__kctx *k0, const remat__shim *L, int backward) {
    const remat__node *n = k0->node;
    const blocks b = blocks_of(k0, L);
    remat__node fake = *n;
    remat__tensor t[REMAT__MAX_IN + 1];
    remat__shape sh[REMAT__MAX_IN];
    remat_status st = REMAT_OK;
    for (int64_t u0 = 0; u0 < b.units && st == REMAT_OK; u0 += L->slice) {
        int64_t c = b.units - u0 < L->slice ? b.units - u0 : L->slice, off = u0 * b.per_out;
        fake.shape = block_shape(&n->shape, L->planes != 0, c, b.per_out);
        remat__kctx k = *k0;
        k.node = &fake, k.elem0 = k0->elem0 + off, k.ws = (unsigned char *)k0->ws + L->kernel;
        st = block_in(s, k0, L, &b, u0, c, &k, t, sh);
        if (st == REMAT_OK) st = block_out(s, k0, L, backward, off, c * b.per_out, &k, &t[n->n_in]);
        if (st == REMAT_OK) st = s->be->run(s->dev, &k, backward);
        if (st == REMAT_OK && !backward && L->out >= 0)
            st = cvt(s, at(k0->out->data, REMAT_BF16, off), k.out->data, c * b.per_out, REMAT__CVT_DOWN);
        for (int i = 0; i < n->n_in && st == REMAT_OK; i++) {
            if (L->din[i] < 0 || !k0->din[i]) continue;
            int bf16 = dtype_of(s, n->in[i]) == REMAT_BF16; /* a parameter's gradient is float32 */
            st = cvt(s, at(k0->din[i], bf16 ? REMAT_BF16 : REMAT_F32, u0 * b.per_in[i]), k.din[i], c * b.per_in[i],
                     bf16 ? REMAT__CVT_ACC_BF16 : REMAT__CVT_ACC_F32);
        }
    }
    return st;
}

/* A kernel once, through whole-tensor views. */
static remat_status run_whole(remat_session *s, remat__kctx *k, const remat__shim *lp, int backward) {
    const remat__shim L = *lp;
    const remat__node *n = k->node;
    unsigned char *ws = k->ws;
    int64_t numel = remat__numel(&n->shape);
    remat__tensor in[REMAT__MAX_IN];
    float *din[REMAT__MAX_IN] = {0};
    void *out = k->out->data;
    remat_status st = REMAT_OK;
    for (int i = 0; i < n->n_in && st == REMAT_OK; i++) st = view_in(s, k, &L, i, &in[i]);
    if (st == REMAT_OK && L.out >= 0) {
        k->out->data = ws + L.out;
        if (backward && out) st = cvt(s, k->out->data, out, numel, REMAT__CVT_UP);
    }
    if (st == REMAT_OK && L.dout >= 0) {
        float *d = (float *)(ws + L.dout);
        st = cvt(s, d, k->dout, numel, REMAT__CVT_UP);
        k->dout = d;
    }
    for (int i = 0; i < n->n_in && st == REMAT_OK; i++) {
        if (L.din[i] < 0 || !k->din[i]) continue;
        din[i] = k->din[i];
        k->din[i] = (float *)(ws + L.din[i]);
        st = s->be->zero(s->dev, k->din[i], (size_t)remat__numel(in[i].shape) * sizeof(float));
    }
    k->ws = ws + L.kernel;
    if (st == REMAT_OK) st = s->be->run(s->dev, k, backward);
    if (st == REMAT_OK && !backward && L.out >= 0) st = cvt(s, out, k->out->data, numel, REMAT__CVT_DOWN);
    for (int i = 0; i < n->n_in && st == REMAT_OK; i++) {
        if (!din[i]) continue;
        int bf16 = dtype_of(s, n->in[i]) == REMAT_BF16; /* a parameter's gradient is float32 */
        st = cvt(s, din[i], k->din[i], remat__numel(in[i].shape), bf16 ? REMAT__CVT_ACC_BF16 : REMAT__CVT_ACC_F32);
    }
    k->out->data = out;
    return st;
}

remat_status remat__run_precise(remat_session *s, remat__kctx *k, int backward) {
    if (!s->prog.dt) return s->be->run(s->dev, k, backward); /* fp32: no views, nothing to lay out */
    if (s->prog.native[k->node_id]) {                        /* kernels on the stored dtypes */
        k->dt = s->prog.dt;
        return s->be->run(s->dev, k, backward);
    }
    remat__shim L;
    remat__shim_layout(&s->prog, k->node_id, backward, &L);
    if (!L.any) return s->be->run(s->dev, k, backward);
    return L.slice ? run_sliced(s, k, &L, backward) : run_whole(s, k, &L, backward);
}
