/* precision.c: a kernel run through the float32 views of the bf16
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
#include "session.h"

static remat_status cvt(remat_session *s, void *dst, const void *src, int64_t n, remat__cvt kind) {
    return s->be->convert(s->dev, dst, src, n, kind);
}

/* Points input i at its float32 view in the workspace. */
static remat_status view_in(remat_session *s, remat__kctx *k, const remat__shim *L, int i, remat__tensor *t) {
    const remat__tensor *x = k->in[i];
    *t = *x;
    if (L->in[i] < 0 || !x->data) return REMAT_OK;
    t->data = (unsigned char *)k->ws + L->in[i];
    remat__cvt kind = remat__val_dtype(&s->prog, k->node->in[i]) == REMAT_BF16 ? REMAT__CVT_UP : REMAT__CVT_ROUND;
    k->in[i] = t;
    return cvt(s, t->data, x->data, remat__numel(x->shape), kind);
}

remat_status remat__run_precise(remat_session *s, remat__kctx *k, int backward) {
    remat__shim L;
    remat__shim_layout(&s->prog, k->node_id, backward, &L);
    if (!L.any) return s->be->run(s->dev, k, backward);
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
        int bf16 = remat__val_dtype(&s->prog, n->in[i]) == REMAT_BF16 && !remat__is_resident(&s->g->nodes[n->in[i]]);
        st = cvt(s, din[i], k->din[i], remat__numel(in[i].shape), bf16 ? REMAT__CVT_ACC_BF16 : REMAT__CVT_ACC_F32);
    }
    k->out->data = out;
    return st;
}
