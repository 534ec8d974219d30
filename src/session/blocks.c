/* blocks.c: the session's resident blocks.
 *
 * Parameters and buffers live in one block (category PARAM), their
 * gradients in another (GRAD), the optimizer's state in a third (OPTIM,
 * optim.c carves it), the data-parallel accumulators and buffers in a
 * fourth (COMM, dp_plan.c). Each is one backend allocation carved into
 * tensors at REMAT__ARENA_ALIGN offsets; the padding between tensors is
 * zeros. Here: carving and freeing a block, and what is done to a block
 * whole (zeroing the gradients, checking for non-finite values).
 */
#include "session.h"

#include <math.h>

remat_status remat__block_alloc(remat_session *s, int blk, remat_mem cat, int n, const size_t *bytes, void **ptrs,
                                int zero) {
    size_t total = 0;
    /* a traced step (counted, never allocated): its framework allocates
     * tensor by tensor, so its bytes count, not this block's 256-byte slots */
    int exact = s->g->traced && s->opts.plan_only;
    for (int i = 0; i < n; i++) total += exact ? bytes[i] : remat__arena_rounded(bytes[i]);
    if (s->opts.plan_only) { /* counted, not allocated: the plan sees the same bytes */
        for (int i = 0; i < n; i++) {
            ptrs[i] = NULL;
            remat__alloc_count(&s->alloc, cat, bytes[i]);
        }
        s->blk_bytes[blk] = total;
        return REMAT_OK;
    }
    void *b = NULL;
    remat_status st = s->be->alloc(s->dev, total, &b);
    if (st != REMAT_OK)
        return remat__err(st, "cannot allocate %zu bytes of %s on the %s: %s", total, remat_mem_str(cat),
                          remat_device_str(s->opts.device), remat_last_error());
    if (zero && (st = s->be->zero(s->dev, b, total)) != REMAT_OK) {
        s->be->release(s->dev, b);
        return st;
    }
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        ptrs[i] = bytes[i] ? (unsigned char *)b + off : NULL;
        off += remat__arena_rounded(bytes[i]);
        remat__alloc_count(&s->alloc, cat, bytes[i]);
    }
    s->blk[blk] = b;
    s->blk_bytes[blk] = total;
    return REMAT_OK;
}

void remat__block_free(remat_session *s, int blk, remat_mem cat, size_t counted) {
    if (!s->blk[blk] && !s->blk_bytes[blk]) return;
    remat__alloc_uncount(&s->alloc, cat, counted);
    if (s->blk[blk]) s->be->release(s->dev, s->blk[blk]);
    s->blk[blk] = NULL;
    s->blk_bytes[blk] = 0;
}

size_t remat__session_blocks_bytes(const remat_session *s) {
    size_t b = 0;
    for (int i = 0; i < REMAT__N_BLK; i++) b += s->blk_bytes[i];
    return b;
}

remat_status remat__session_zero_grads(remat_session *s) {
    return s->be->zero(s->dev, s->blk[REMAT__BLK_GRAD], s->blk_bytes[REMAT__BLK_GRAD]);
}

int64_t remat__session_trainable_numel(const remat_session *s) {
    int64_t n = 0;
    for (int i = 0; i < s->n_params; i++)
        if (remat__trainable(s, i)) n += remat__numel(&s->g->nodes[s->params[i].node].shape);
    return n;
}

/* One backend pass per tensor (the CPU's shared by the pool when large):
 * at the training loops' one call per step, a read of the weights and
 * gradients, small next to the step that wrote them: on cnn at batch 128
 * (2 x 6.8 MB), 0.44 ms against 0.38 s for the step and update, 0.1%
 * (2 threads, measured in one run). */
remat_status remat_session_check_finite(remat_session *s) {
    remat_status rs = remat__session_runnable(s, "remat_session_check_finite");
    if (rs != REMAT_OK) return rs;
    /* One pass over each resident block (values, then gradients): one
     * launch and one wait on a device. Their padding is zeros, so a bad
     * element is always some tensor's. */
    static const int blocks[2] = {REMAT__BLK_PARAM, REMAT__BLK_GRAD};
    for (int part = 0; part < 2; part++) {
        const float *b = s->blk[blocks[part]];
        size_t n = s->blk_bytes[blocks[part]] / sizeof(float);
        int64_t bad = -1;
        remat_status st = b ? s->be->finite(s->dev, b, n, &bad) : REMAT_OK;
        if (st != REMAT_OK) return st;
        if (bad < 0) continue;
        float v = 0.0f;
        st = s->be->download(s->dev, &v, b + bad, sizeof v);
        if (st == REMAT_OK) st = s->be->sync(s->dev);
        if (st != REMAT_OK) return st;
        for (int i = 0; i < s->n_params; i++) {
            const remat__pslot *p = &s->params[i];
            const float *x = part ? p->grad : p->data; /* buffers have no gradient */
            const remat__node *nd = &s->g->nodes[p->node];
            int64_t numel = remat__numel(&nd->shape);
            if (!x || b + bad < x || b + bad >= x + numel) continue;
            return remat__err(REMAT_INVALID, "%s%s '%s' (index %d of %d) is not finite: element %lld of %lld is %s",
                              part ? "the gradient of " : "", nd->leaf == REMAT__LEAF_PARAM ? "parameter" : "buffer",
                              nd->name, i, s->n_params, (long long)(b + bad - x), (long long)numel,
                              isnan(v) ? "NaN"
                              : v > 0  ? "+inf"
                                       : "-inf");
        }
        return remat__err(REMAT_INTERNAL, "a non-finite value at element %lld of the %s block lies in no tensor",
                          (long long)bad, part ? "gradient" : "parameter");
    }
    return REMAT_OK;
}
