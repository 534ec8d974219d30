/* optim.c: SGD (momentum, dampening, nesterov, weight decay) and AdamW, with
 * the update rules of torch.optim.SGD and torch.optim.AdamW.
 *
 * State tensors are allocated through the session's allocator (category
 * OPTIM) when the optimizer is set. Updates are elementwise and run on one
 * thread in index order, so they are deterministic.
 */
#include "../exec/session.h"

#include <math.h>
#include <stdio.h>

void remat_optim_opts_default(remat_optim_opts *o, remat_optim_kind kind) {
    memset(o, 0, sizeof *o);
    o->kind = kind;
    o->beta1 = 0.9f;
    o->beta2 = 0.999f;
    o->eps = 1e-8f;
    if (kind == REMAT_OPTIM_ADAMW) {
        o->lr = 1e-3f;
        o->weight_decay = 1e-2f;
    } else {
        o->lr = 1e-2f;
    }
}

static void free_state(remat_session *s) {
    for (int i = 0; i < s->n_params; i++) {
        remat__pslot *p = &s->params[i];
        size_t bytes = remat__out_bytes(&s->g->nodes[p->node]);
        remat__alloc_put(&s->alloc, REMAT_MEM_OPTIM, p->m, bytes);
        remat__alloc_put(&s->alloc, REMAT_MEM_OPTIM, p->v, bytes);
        p->m = p->v = NULL;
    }
}

remat_status remat_session_set_optimizer(remat_session *s, const remat_optim_opts *o) {
    if (!o) return remat__err(REMAT_INVALID, "remat_session_set_optimizer: options are NULL");
    if (o->kind != REMAT_OPTIM_SGD && o->kind != REMAT_OPTIM_ADAMW)
        return remat__err(REMAT_INVALID, "unknown optimizer kind %d", (int)o->kind);
    if (!(o->lr > 0.0f) || !isfinite(o->lr))
        return remat__err(REMAT_INVALID, "learning rate %g must be positive", (double)o->lr);
    if (o->weight_decay < 0.0f || o->momentum < 0.0f)
        return remat__err(REMAT_INVALID, "weight decay and momentum must be non-negative");
    if (o->kind == REMAT_OPTIM_SGD && o->nesterov && (o->momentum <= 0.0f || o->dampening != 0.0f))
        return remat__err(REMAT_INVALID, "nesterov momentum requires a momentum and zero dampening");
    if (o->kind == REMAT_OPTIM_ADAMW &&
        !(o->beta1 >= 0.0f && o->beta1 < 1.0f && o->beta2 >= 0.0f && o->beta2 < 1.0f && o->eps > 0.0f))
        return remat__err(REMAT_INVALID, "AdamW needs betas in [0, 1) and a positive eps");
    free_state(s);
    int need_m = o->kind == REMAT_OPTIM_ADAMW || o->momentum != 0.0f;
    for (int i = 0; i < s->n_params; i++) {
        remat__pslot *p = &s->params[i];
        if (!p->grad) continue;
        size_t bytes = remat__out_bytes(&s->g->nodes[p->node]);
        if (need_m && !(p->m = remat__alloc_zeroed(&s->alloc, REMAT_MEM_OPTIM, bytes))) goto oom;
        if (o->kind == REMAT_OPTIM_ADAMW && !(p->v = remat__alloc_zeroed(&s->alloc, REMAT_MEM_OPTIM, bytes)))
            goto oom;
    }
    s->optim = *o;
    s->has_optim = 1;
    s->optim_t = 0;
    remat_status st = remat__session_plan_train(s);
    if (st != REMAT_OK) {
        free_state(s);
        s->has_optim = 0;
    }
    return st;
oom:
    free_state(s);
    s->has_optim = 0;
    return REMAT_NOMEM;
}

/* torch.optim.SGD: g += wd*w; b = mu*b + (1-dampening)*g (b = g at the first
 * step); g = nesterov ? g + mu*b : b; w -= lr*g. */
static void sgd(const remat_optim_opts *o, int first, int64_t n, float *w, const float *grad, float *b) {
    for (int64_t i = 0; i < n; i++) {
        float g = grad[i];
        if (o->weight_decay != 0.0f) g = g + o->weight_decay * w[i];
        if (b) {
            b[i] = first ? g : o->momentum * b[i] + (1.0f - o->dampening) * g;
            g = o->nesterov ? g + o->momentum * b[i] : b[i];
        }
        w[i] = w[i] - o->lr * g;
    }
}

/* torch.optim.AdamW (non-amsgrad, single-tensor path): w *= 1 - lr*wd;
 * m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
 * w -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps). */
static void adamw(const remat_optim_opts *o, int64_t t, int64_t n, float *w, const float *grad, float *m,
                  float *v) {
    float bc1 = 1.0f - powf(o->beta1, (float)t);
    float bc2 = 1.0f - powf(o->beta2, (float)t);
    float step_size = o->lr / bc1;
    float bc2_sqrt = sqrtf(bc2);
    for (int64_t i = 0; i < n; i++) {
        float g = grad[i];
        w[i] = w[i] * (1.0f - o->lr * o->weight_decay);
        m[i] = m[i] + (g - m[i]) * (1.0f - o->beta1);
        v[i] = v[i] * o->beta2 + (1.0f - o->beta2) * g * g;
        float denom = sqrtf(v[i]) / bc2_sqrt + o->eps;
        w[i] = w[i] - step_size * (m[i] / denom);
    }
}

/* One update of every parameter, split over the pool: the parameters'
 * elements, taken as one sequence, are cut into one contiguous range per
 * thread. Each element's update reads only its own state, so the result
 * does not depend on the thread count. */
static void update_task(void *ctx, int ith, int nth) {
    remat_session *s = ctx;
    int64_t total = 0, lo, hi, off = 0;
    for (int i = 0; i < s->n_params; i++)
        if (s->params[i].grad) total += remat__numel(&s->g->nodes[s->params[i].node].shape);
    remat__split(total, ith, nth, &lo, &hi);
    for (int i = 0; i < s->n_params && off < hi; i++) {
        remat__pslot *p = &s->params[i];
        if (!p->grad) continue;
        int64_t n = remat__numel(&s->g->nodes[p->node].shape);
        int64_t a = lo > off ? lo - off : 0, b = hi - off < n ? hi - off : n;
        if (a < b) {
            if (s->optim.kind == REMAT_OPTIM_SGD)
                sgd(&s->optim, s->optim_t == 1, b - a, p->data + a, p->grad + a, p->m ? p->m + a : NULL);
            else
                adamw(&s->optim, s->optim_t, b - a, p->data + a, p->grad + a, p->m + a, p->v + a);
        }
        off += n;
    }
}

remat_status remat_session_update(remat_session *s) {
    if (!s->has_optim)
        return remat__err(REMAT_INVALID, "no optimizer: call remat_session_set_optimizer first");
    s->optim_t++;
    remat__pool_run(s->pool, update_task, s);
    s->step++;
    return REMAT_OK;
}
