/* state_meta.c: a training state's metadata (state.c's header comment):
 * the one list of entries (remat__meta_build), written with a state and,
 * built again from the running session, compared on load
 * (remat__meta_compare: `compared` says which entries must match and how
 * a difference is named); and the options every rank of a run must share
 * (remat__state_same_run).
 */
#include "state-impl.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

void remat__meta_add(remat__state_meta *m, const char *key, const char *fmt, ...) {
    if (m->oom) return;
    if (m->n + 3 > m->cap) {
        int cap = m->cap ? 2 * m->cap : 64;
        char **kv = realloc(m->kv, (size_t)cap * sizeof *kv);
        if (!kv) {
            m->oom = 1;
            return;
        }
        m->kv = kv, m->cap = cap;
    }
    va_list ap;
    va_start(ap, fmt);
    int len = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *k = malloc(strlen(key) + 1), *v = len >= 0 ? malloc((size_t)len + 1) : NULL;
    if (!k || !v) {
        free(k), free(v);
        m->oom = 1;
        return;
    }
    strcpy(k, key);
    va_start(ap, fmt);
    vsnprintf(v, (size_t)len + 1, fmt, ap);
    va_end(ap);
    m->kv[m->n++] = k;
    m->kv[m->n++] = v;
    m->kv[m->n] = NULL;
}

void remat__meta_free(remat__state_meta *m) {
    for (int i = 0; i < m->n; i++) free(m->kv[i]);
    free(m->kv);
    memset(m, 0, sizeof *m);
}

const char *remat__meta_get(const remat__state_meta *m, const char *key) {
    for (int i = 0; i + 1 < m->n; i += 2)
        if (strcmp(m->kv[i], key) == 0) return m->kv[i + 1];
    return NULL;
}

/* CRC-32 of the graph's math: per node its op, leaf kind, inputs, shape,
 * dtype and attributes, and the names of leaves (parameter names matter;
 * op names are cosmetic). Initializers (the state's weights replace
 * them) and remat_checkpoint marks (plans do not change bits) are left
 * out. */
static uint32_t graph_crc(const remat_session *s) {
    const remat_graph *g = remat_session_graph(s);
    remat_node loss = remat__session_loss(s);
    uint32_t crc = (uint32_t)crc32(0, NULL, 0);
    for (int v = 0; v < g->n; v++) {
        const remat__node *n = &g->nodes[v];
        const char *op = remat__ops[n->op]->name;
        crc = (uint32_t)crc32(crc, (const unsigned char *)op, (uInt)strlen(op) + 1);
        if (n->leaf != REMAT__LEAF_NONE && n->name)
            crc = (uint32_t)crc32(crc, (const unsigned char *)n->name, (uInt)strlen(n->name) + 1);
        int64_t w[3 + REMAT__MAX_IN + 1 + REMAT_MAX_DIMS + 1 + 6 + 2];
        int k = 0;
        w[k++] = n->leaf;
        w[k++] = n->n_in;
        w[k++] = v == loss;
        for (int i = 0; i < n->n_in && i < REMAT__MAX_IN; i++) w[k++] = n->in[i];
        w[k++] = n->shape.ndim;
        for (int i = 0; i < n->shape.ndim && i < REMAT_MAX_DIMS; i++) w[k++] = n->shape.d[i];
        w[k++] = n->dtype;
        for (int i = 0; i < 6; i++) w[k++] = n->iattr[i];
        for (int i = 0; i < 2; i++) {
            uint32_t bits;
            memcpy(&bits, &n->fattr[i], 4);
            w[k++] = bits;
        }
        unsigned char le[8 * (int)(sizeof w / sizeof w[0])];
        for (int i = 0; i < k; i++)
            for (int b = 0; b < 8; b++) le[8 * i + b] = (unsigned char)((uint64_t)w[i] >> (8 * b));
        crc = (uint32_t)crc32(crc, le, (uInt)(8 * k));
    }
    return crc;
}

/* The micro-batch: the first input's first dimension. */
static int64_t micro_batch_of(const remat_session *s) {
    const remat_graph *g = remat_session_graph(s);
    for (int v = 0; v < g->n; v++)
        if (g->nodes[v].leaf == REMAT__LEAF_INPUT && g->nodes[v].shape.ndim > 0) return g->nodes[v].shape.d[0];
    return 0;
}

/* The (global) batch: o->batch, or the step's micro-batches of the graph's. */
static int64_t batch_of(const remat_session *s, const remat_state_opts *o) {
    if (o && o->batch > 0) return o->batch;
    remat_dist_info di;
    remat_session_dist(s, &di);
    return di.micro_batches * micro_batch_of(s);
}

/* Everything a state's metadata holds, from the session, o and at (NULL:
 * the data step is the session's step). The checksum's two entries lead
 * the file's metadata (the writer adds them). */
void remat__meta_build(const remat_session *s, const remat_state_opts *o, const remat_train_progress *at,
                       remat__state_meta *m) {
    int64_t step, optim_t;
    remat__optim_counters(s, &step, &optim_t);
    remat_train_progress p = at ? *at : (remat_train_progress){step, 0, step};
    const remat_optim_opts *op = remat__optim_opts(s);
    const remat_session_opts *so = remat__session_opts(s);
    int64_t batch = batch_of(s, o);
    char fb[32];
    remat__meta_add(m, "format", "pt"); /* what PyTorch-side loaders expect */
    remat__meta_add(m, "remat.state", STATE_FORMAT);
    remat__meta_add(m, "remat.version", "%s", REMAT_VERSION);
    remat__meta_add(m, "step", "%lld", (long long)step);
    remat__meta_add(m, "optim.step", "%lld", (long long)optim_t);
    remat__meta_add(m, "rng", "philox4x32-10");
    remat__meta_add(m, "rng.seed", "%llu", (unsigned long long)so->seed);
    remat__meta_add(m, "rng.step", "%lld", (long long)step);
    remat__meta_add(m, "data.step", "%lld", (long long)p.data_step);
    remat__meta_add(m, "data.epoch", "%lld", (long long)p.epoch);
    remat__meta_add(m, "data.position", "%lld", (long long)p.position);
    remat__meta_add(m, "data.batches_per_epoch", "%lld", (long long)(o ? o->batches_per_epoch : 0));
    remat__meta_add(m, "data.seed", "%llu", (unsigned long long)(o ? o->data_seed : 0));
    remat__meta_add(m, "data", "%s", o && o->data ? o->data : "");
    remat__meta_add(m, "batch", "%lld", (long long)batch);
    remat__meta_add(m, "micro_batch", "%lld", (long long)micro_batch_of(s));
    remat__meta_add(m, "ranks", "%d", remat_comm_size(remat__session_comm(s)));
    remat__meta_add(m, "device", "%s", remat_device_str(so->device));
    remat__meta_add(m, "precision", "%s", remat_precision_str(so->precision));
    if (so->device == REMAT_DEVICE_CPU) remat__meta_add(m, "threads", "%d", so->threads);
    else remat__meta_add(m, "tf32", "%d", so->tf32 ? 1 : 0);
    if (so->least_workspace) /* only when on: states saved before it existed resume */
        remat__meta_add(m, "least_workspace", "1");
    remat__meta_add(m, "graph", "%08x", (unsigned)graph_crc(s));
    remat__meta_add(m, "optim", "%s", !op ? "none" : op->kind == REMAT_OPTIM_SGD ? "sgd" : "adamw");
    if (op) {
        remat__meta_add(m, "optim.lr", "%s", remat_float_str(op->lr, fb, sizeof fb));
        remat__meta_add(m, "optim.weight_decay", "%s", remat_float_str(op->weight_decay, fb, sizeof fb));
        if (op->kind == REMAT_OPTIM_SGD) {
            remat__meta_add(m, "optim.momentum", "%s", remat_float_str(op->momentum, fb, sizeof fb));
            remat__meta_add(m, "optim.dampening", "%s", remat_float_str(op->dampening, fb, sizeof fb));
            remat__meta_add(m, "optim.nesterov", "%d", op->nesterov ? 1 : 0);
        } else {
            remat__meta_add(m, "optim.beta1", "%s", remat_float_str(op->beta1, fb, sizeof fb));
            remat__meta_add(m, "optim.beta2", "%s", remat_float_str(op->beta2, fb, sizeof fb));
            remat__meta_add(m, "optim.eps", "%s", remat_float_str(op->eps, fb, sizeof fb));
        }
    }
    for (int i = 0; o && o->run && o->run[i] && o->run[i + 1]; i += 2) {
        char key[256];
        snprintf(key, sizeof key, "run.%s", o->run[i]);
        remat__meta_add(m, key, "%s", o->run[i + 1]);
    }
}

/* Entries that must match on resume, in the order they are checked, and
 * how a difference is named. The caller's run options come before them
 * (their keys name themselves, "--batch"); the graph comes after the
 * tensors (another model fails there first, naming a tensor). */
static const struct {
    const char *key, *what;
} compared[] = {
    {"batch", "the batch (rows per optimizer step)"},
    {"micro_batch", "the micro-batch"},
    {"device", "the device (CPU and CUDA kernels give different bits)"},
    {"precision", "the precision (--precision: bf16 rounds what fp32 keeps)"},
    {"threads", "the number of CPU threads (the kernels' bits depend on it)"},
    {"tf32", "TF32"},
    {"least_workspace", "the convolutions' algorithms (--least-workspace)"},
    {"optim", "the optimizer"},
    {"optim.lr", "the learning rate"},
    {"optim.weight_decay", "the weight decay"},
    {"optim.momentum", "the momentum"},
    {"optim.dampening", "the dampening"},
    {"optim.nesterov", "Nesterov momentum"},
    {"optim.beta1", "AdamW's beta1"},
    {"optim.beta2", "AdamW's beta2"},
    {"optim.eps", "AdamW's eps"},
    {"rng.seed", "the seed"},
    {"data.seed", "the data order's seed"},
    {"data", "the training data"},
};

#define RESUME_RULE                                                                                                    \
    "a resumed run must keep every option that defines the math; the strategy, budget and cost model "                 \
    "may change"

/* REMAT_INVALID naming `what`, with both values ("(none)" when absent). */
remat_status remat__meta_differs(const char *path, const char *what, const char *was, const char *now) {
    return remat__err(REMAT_INVALID, "%s: cannot resume: %s differs: the state has %s%s%s, this run %s%s%s (%s)", path,
                      what, was ? "'" : "", was ? was : "none", was ? "'" : "", now ? "'" : "", now ? now : "none",
                      now ? "'" : "", RESUME_RULE);
}

int remat__meta_same(const char *a, const char *b) { return (!a && !b) || (a && b && strcmp(a, b) == 0); }

remat_status remat__meta_compare(const remat__st *f, const remat__state_meta *now) {
    const char *path = remat__st_path(f);
    /* the caller's options, both ways */
    for (int i = 0; i + 1 < now->n; i += 2) {
        if (strncmp(now->kv[i], "run.", 4) != 0) continue;
        const char *was = remat__st_metadata(f, now->kv[i]);
        if (!remat__meta_same(was, now->kv[i + 1]))
            return remat__meta_differs(path, now->kv[i] + 4, was, now->kv[i + 1]);
    }
    for (int i = 0;; i++) {
        const char *key = remat__st_metadata_key(f, i);
        if (!key) break;
        if (strncmp(key, "run.", 4) == 0 && !remat__meta_get(now, key))
            return remat__meta_differs(path, key + 4, remat__st_metadata(f, key), NULL);
    }
    for (size_t i = 0; i < sizeof compared / sizeof compared[0]; i++) {
        const char *was = remat__st_metadata(f, compared[i].key), *is = remat__meta_get(now, compared[i].key);
        if (!was && !strcmp(compared[i].key, "precision")) was = "fp32"; /* saved before the policy existed */
        if (!remat__meta_same(was, is)) return remat__meta_differs(path, compared[i].what, was, is);
    }
    return REMAT_OK;
}

/* Several ranks: the options that define the math and the run's course
 * are every rank's the same (remat_comm_same), before anything that a
 * difference could hang (a rank that saves when another does not, one
 * that runs more steps) or silently corrupt (another seed or learning
 * rate: gradients summed over different models). The caller's run
 * options (the command line's flags) first, under their own names. */
remat_status remat__state_same_run(remat_session *s, const remat_train_opts *o, int64_t batch, int64_t per_epoch,
                                   const char *data) {
    remat__state_meta m = {0};
    for (int i = 0; o->run && o->run[i] && o->run[i + 1]; i += 2) remat__meta_add(&m, o->run[i], "%s", o->run[i + 1]);
    remat__meta_add(&m, "the seed (seed)", "%llu", (unsigned long long)o->seed);
    remat__meta_add(&m, "the steps (steps)", "%lld", (long long)o->steps);
    remat__meta_add(&m, "the epochs (epochs)", "%lld", (long long)o->epochs);
    remat__meta_add(&m, "the batch", "%lld", (long long)batch);
    remat__meta_add(&m, "the batches per epoch", "%lld", (long long)per_epoch);
    remat__meta_add(&m, "the training data", "%s", data ? data : "(the caller's)");
    remat__meta_add(&m, "the state directory (state_dir)", "%s", o->state_dir ? o->state_dir : "(none)");
    remat__meta_add(&m, "the save cadence (save_every)", "%lld", (long long)o->save_every);
    remat__meta_add(&m, "the states kept (keep)", "%d", o->keep);
    remat__meta_add(&m, "the resume (resume)", "%s", o->resume ? o->resume : "(none)");
    remat__meta_add(&m, "a stop flag (stop)", "%s", o->stop ? "given" : "none");
    remat__state_meta now = {0};
    remat__meta_build(s, NULL, NULL, &now);
    static const char *const session_keys[] = {"rng.seed",
                                               "device",
                                               "precision",
                                               "threads",
                                               "tf32",
                                               "least_workspace",
                                               "optim",
                                               "optim.lr",
                                               "optim.weight_decay",
                                               "optim.momentum",
                                               "optim.dampening",
                                               "optim.nesterov",
                                               "optim.beta1",
                                               "optim.beta2",
                                               "optim.eps",
                                               "optim.step",
                                               "step",
                                               "graph"};
    for (size_t i = 0; i < sizeof session_keys / sizeof session_keys[0]; i++) {
        const char *v = remat__meta_get(&now, session_keys[i]);
        for (size_t k = 0; k < sizeof compared / sizeof compared[0]; k++)
            if (strcmp(compared[k].key, session_keys[i]) == 0) {
                remat__meta_add(&m, compared[k].what, "%s", v ? v : "(none)");
                break;
            }
        if (!strcmp(session_keys[i], "optim.step") || !strcmp(session_keys[i], "step") ||
            !strcmp(session_keys[i], "graph"))
            remat__meta_add(&m, !strcmp(session_keys[i], "graph") ? "the model's graph" : session_keys[i], "%s",
                            v ? v : "(none)");
    }
    remat_status rc = REMAT_OK;
    if (m.oom || now.oom) rc = remat__err(REMAT_NOMEM, "out of memory"); /* the others wait: the caller aborts */
    if (rc == REMAT_OK) rc = remat_comm_same(remat__session_comm(s), (const char *const *)m.kv, NULL);
    remat__meta_free(&m);
    remat__meta_free(&now);
    return rc;
}
