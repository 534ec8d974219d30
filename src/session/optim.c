/* optim.c: the session's optimizer: SGD (momentum, dampening, nesterov,
 * weight decay) and AdamW, with the options and update rules of
 * torch.optim.SGD and torch.optim.AdamW.
 *
 * Here: the options (defaults, their check), the optimizer's state, and
 * the update dispatched to the backend. The state is allocated (zeroed)
 * and freed here only: one resident block (category OPTIM, blocks.c)
 * carved into a momentum tensor per trainable parameter (SGD with
 * momentum, AdamW) and a second-moment tensor (AdamW). The update's
 * arithmetic is the backend's (the CPU's in cpu.c, elementwise, so
 * deterministic and independent of the thread count; the CUDA one in
 * src/cuda/k_optim.cu, the same bits).
 */
#include "session.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

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

/* Bytes counted for the state: per trainable parameter, m and/or v. */
static size_t state_counted(const remat_session *s) {
    size_t b = 0;
    for (int i = 0; i < s->n_params; i++) {
        const remat__pslot *p = &s->params[i];
        size_t bytes = remat__out_bytes(&s->g->nodes[p->node]);
        if (p->m) b += bytes;
        if (p->v) b += bytes;
    }
    return b;
}

void remat__optim_state_free(remat_session *s) {
    remat__block_free(s, REMAT__BLK_OPTIM, REMAT_MEM_OPTIM, state_counted(s));
    for (int i = 0; i < s->n_params; i++) s->params[i].m = s->params[i].v = NULL;
}

remat_status remat__optim_state_alloc(remat_session *s, const remat_optim_opts *o) {
    remat__optim_state_free(s);
    int need_m = o->kind == REMAT_OPTIM_ADAMW || o->momentum != 0.0f, need_v = o->kind == REMAT_OPTIM_ADAMW;
    size_t *bytes = calloc(2 * (size_t)s->n_params + 1, sizeof *bytes);
    void **ptr = calloc(2 * (size_t)s->n_params + 1, sizeof *ptr);
    if (!bytes || !ptr) {
        free(bytes), free(ptr);
        return remat__err(REMAT_NOMEM, "out of memory allocating the optimizer's state");
    }
    int n = 0;
    for (int i = 0; i < s->n_params; i++) {
        if (!remat__trainable(s, i)) continue;
        size_t b = remat__out_bytes(&s->g->nodes[s->params[i].node]);
        if (need_m) bytes[n++] = b;
        if (need_v) bytes[n++] = b;
    }
    remat_status st = n ? remat__block_alloc(s, REMAT__BLK_OPTIM, REMAT_MEM_OPTIM, n, bytes, ptr, 1) : REMAT_OK;
    for (int i = 0, k = 0; st == REMAT_OK && i < s->n_params; i++) {
        if (!remat__trainable(s, i)) continue;
        if (need_m) s->params[i].m = ptr[k++];
        if (need_v) s->params[i].v = ptr[k++];
    }
    free(bytes), free(ptr);
    return st;
}

/* Checks an optimizer's options; REMAT_INVALID naming the first bad one.
 * Every hyper-parameter must be finite, the unused ones too (AdamW's betas
 * under SGD): an infinity or NaN there is a mistake, and in a used one it
 * turns every weight into NaN at the first update. */
static remat_status check_opts(const remat_optim_opts *o) {
    if (o->kind != REMAT_OPTIM_SGD && o->kind != REMAT_OPTIM_ADAMW)
        return remat__err(REMAT_INVALID, "unknown optimizer kind %d", (int)o->kind);
    const struct {
        const char *name;
        float v;
    } hp[] = {{"lr", o->lr},
              {"weight_decay", o->weight_decay},
              {"momentum", o->momentum},
              {"dampening", o->dampening},
              {"beta1", o->beta1},
              {"beta2", o->beta2},
              {"eps", o->eps}};
    for (size_t i = 0; i < sizeof hp / sizeof hp[0]; i++)
        if (!isfinite(hp[i].v))
            return remat__err(REMAT_INVALID, "optimizer option %s is %g: every hyper-parameter must be a finite number",
                              hp[i].name, (double)hp[i].v);
    if (!(o->lr > 0.0f) || !isfinite(o->lr))
        return remat__err(REMAT_INVALID, "learning rate %g must be positive", (double)o->lr);
    if (o->weight_decay < 0.0f || o->momentum < 0.0f)
        return remat__err(REMAT_INVALID, "weight decay and momentum must be non-negative");
    if (o->kind == REMAT_OPTIM_SGD && o->nesterov && (o->momentum <= 0.0f || o->dampening != 0.0f))
        return remat__err(REMAT_INVALID, "nesterov momentum requires a momentum and zero dampening");
    if (o->kind == REMAT_OPTIM_ADAMW &&
        !(o->beta1 >= 0.0f && o->beta1 < 1.0f && o->beta2 >= 0.0f && o->beta2 < 1.0f && o->eps > 0.0f))
        return remat__err(REMAT_INVALID, "AdamW needs betas in [0, 1) and a positive eps");
    return REMAT_OK;
}

remat_status remat__optim_install(remat_session *s, const remat_optim_opts *o) {
    remat_status st = check_opts(o);
    s->has_optim = 0;
    if (st == REMAT_OK) st = remat__optim_state_alloc(s, o);
    if (st != REMAT_OK) return st;
    s->optim = *o;
    s->has_optim = 1;
    s->optim_t = 0;
    return REMAT_OK;
}

/* ------------------------------------------- state for training states */

const remat_optim_opts *remat__optim_opts(const remat_session *s) { return s->has_optim ? &s->optim : NULL; }

static float *state_tensor(const remat_session *s, int i, int which) {
    if (i < 0 || i >= s->n_params) return NULL;
    return which == 0 ? s->params[i].m : which == 1 ? s->params[i].v : NULL;
}

int remat__optim_has_state(const remat_session *s, int i, int which) { return state_tensor(s, i, which) != NULL; }

remat_status remat__optim_state_read(remat_session *s, int i, int which, float *dst) {
    float *t = state_tensor(s, i, which);
    if (!t) return remat__err(REMAT_INVALID, "parameter %d has no optimizer state %d", i, which);
    remat_status st = s->be->download(s->dev, dst, t, remat__out_bytes(&s->g->nodes[s->params[i].node]));
    remat_status sy = s->be->sync(s->dev);
    return st != REMAT_OK ? st : sy;
}

remat_status remat__optim_state_write(remat_session *s, int i, int which, const float *src) {
    float *t = state_tensor(s, i, which);
    if (!t) return remat__err(REMAT_INVALID, "parameter %d has no optimizer state %d", i, which);
    remat_status st = s->be->upload(s->dev, t, src, remat__out_bytes(&s->g->nodes[s->params[i].node]));
    remat_status sy = s->be->sync(s->dev);
    return st != REMAT_OK ? st : sy;
}

void remat__optim_counters(const remat_session *s, int64_t *step, int64_t *optim_t) {
    *step = s->step;
    *optim_t = s->optim_t;
}

void remat__optim_set_counters(remat_session *s, int64_t step, int64_t optim_t) {
    s->step = step;
    s->optim_t = optim_t;
}

remat_status remat_session_update(remat_session *s) {
    remat_status rs = remat__session_runnable(s, "remat_session_update");
    if (rs != REMAT_OK) return rs;
    if (!s->has_optim) return remat__err(REMAT_INVALID, "no optimizer: call remat_session_set_optimizer first");
    int n = 0;
    float **w = malloc(4 * ((size_t)s->n_params + 1) * sizeof *w);
    int64_t *numel = malloc(((size_t)s->n_params + 1) * sizeof *numel);
    if (!w || !numel) {
        free(w), free(numel);
        return remat__err(REMAT_NOMEM, "out of memory updating the parameters");
    }
    float **g = w + s->n_params, **m = g + s->n_params, **v = m + s->n_params;
    for (int i = 0; i < s->n_params; i++) {
        remat__pslot *p = &s->params[i];
        if (!p->grad) continue;
        w[n] = p->data, g[n] = p->grad, m[n] = p->m, v[n] = p->v;
        numel[n++] = remat__numel(&s->g->nodes[p->node].shape);
    }
    s->optim_t++;
    remat_status st = s->be->update(s->dev, &s->optim, s->optim_t, n, w, g, m, v, numel);
    free(w), free(numel);
    if (st == REMAT_OK) s->step++;
    return st;
}
