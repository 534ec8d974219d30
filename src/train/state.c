/* state.c: training states (remat.h, "training state"): save, find, load,
 * and the glue that lets the training loops save and resume.
 *
 * A state is a checksummed safetensors file (safetensors.c: its metadata
 * leads with the file's size and a CRC-32 of the whole file). Tensors:
 * every parameter and buffer by name, then per trainable parameter its
 * optimizer state ("optim.<name>.exp_avg" and ".exp_avg_sq" for AdamW,
 * ".momentum_buffer" for SGD with momentum), all F32. Metadata (strings):
 * build_meta below is the one list, used both to write a state and, built
 * again from the running session, to compare on load; `compared` says
 * which entries must match and how a difference is named.
 *
 * Resuming is bitwise because a session's training math is a function of
 * the weights, buffers, optimizer state and two counters (the step index,
 * which keys dropout's Philox stream, and the optimizer's step count),
 * plus the data a step reads, which the loops derive from the data step
 * alone (remat_train: the epoch's seeded permutation and the position in
 * it; streams and token files: a pure function of the step). Plans do not
 * change bits (DESIGN.md invariant 1), so strategy and budget are free.
 *
 * Several ranks (remat.h, "several processes"): a state records "batch"
 * (the global batch, compared), "micro_batch" (the graph's batch,
 * compared) and "ranks" (not compared): gradients are summed in a fixed
 * tree over the global micro-batch index, BatchNorm's running statistics
 * are committed in micro-batch order on every rank, so every rank holds
 * the same state, and a run may resume on any number of ranks. In the
 * loops only rank 0 writes; every rank reads the state it resumes from
 * (the state directory must be reachable from every rank, as the data
 * is), and the ranks agree after each read and each write, so that a
 * failure on one is every rank's, named.
 *
 * Guards (issue 22, docs/training-state.md): rank 0 holds an flock on
 * <state_dir>/remat.lock for the whole loop, so two runs never mix their
 * states; a directory is read in one pass, and a resume takes the newest
 * usable state whatever the names, reading no file before its type and
 * sizes are checked against this session's own state (remat__st_limits);
 * the loops stop on request after a step (remat__loop_state_stop, the
 * flag agreed across ranks) with a state saved; and before anything else
 * the ranks compare the options that define the math and the run's course
 * (same_run).
 */
#include "../dist/comm.h"
#include "../exec/session_api.h"
#include "safetensors.h"

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

#define STATE_FORMAT "1"
#define STATE_PREFIX "state-"
#define STATE_SUFFIX ".safetensors"

/* ------------------------------------------------------------ metadata */

/* Key, value pairs (owned), NULL-terminated once finished. */
typedef struct {
    char **kv;
    int n, cap; /* strings, not pairs */
    int oom;
} meta;

static void meta_add(meta *m, const char *key, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void meta_add(meta *m, const char *key, const char *fmt, ...) {
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

static void meta_free(meta *m) {
    for (int i = 0; i < m->n; i++) free(m->kv[i]);
    free(m->kv);
    memset(m, 0, sizeof *m);
}

static const char *meta_get(const meta *m, const char *key) {
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
        if (g->nodes[v].leaf == REMAT__LEAF_INPUT && g->nodes[v].shape.ndim > 0)
            return g->nodes[v].shape.d[0];
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
static void build_meta(const remat_session *s, const remat_state_opts *o, const remat_train_progress *at, meta *m) {
    int64_t step, optim_t;
    remat__optim_counters(s, &step, &optim_t);
    remat_train_progress p = at ? *at : (remat_train_progress){step, 0, step};
    const remat_optim_opts *op = remat__optim_opts(s);
    const remat_session_opts *so = remat__session_opts(s);
    int64_t batch = batch_of(s, o);
    char fb[32];
    meta_add(m, "format", "pt"); /* what PyTorch-side loaders expect */
    meta_add(m, "remat.state", STATE_FORMAT);
    meta_add(m, "remat.version", "%s", REMAT_VERSION);
    meta_add(m, "step", "%lld", (long long)step);
    meta_add(m, "optim.step", "%lld", (long long)optim_t);
    meta_add(m, "rng", "philox4x32-10");
    meta_add(m, "rng.seed", "%llu", (unsigned long long)so->seed);
    meta_add(m, "rng.step", "%lld", (long long)step);
    meta_add(m, "data.step", "%lld", (long long)p.data_step);
    meta_add(m, "data.epoch", "%lld", (long long)p.epoch);
    meta_add(m, "data.position", "%lld", (long long)p.position);
    meta_add(m, "data.batches_per_epoch", "%lld", (long long)(o ? o->batches_per_epoch : 0));
    meta_add(m, "data.seed", "%llu", (unsigned long long)(o ? o->data_seed : 0));
    meta_add(m, "data", "%s", o && o->data ? o->data : "");
    meta_add(m, "batch", "%lld", (long long)batch);
    meta_add(m, "micro_batch", "%lld", (long long)micro_batch_of(s));
    meta_add(m, "ranks", "%d", remat_comm_size(remat__session_comm(s)));
    meta_add(m, "device", "%s", remat_device_str(so->device));
    meta_add(m, "precision", "%s", remat_precision_str(so->precision));
    if (so->device == REMAT_DEVICE_CPU)
        meta_add(m, "threads", "%d", so->threads);
    else
        meta_add(m, "tf32", "%d", so->tf32 ? 1 : 0);
    if (so->least_workspace) /* only when on: states saved before it existed resume */
        meta_add(m, "least_workspace", "1");
    meta_add(m, "graph", "%08x", (unsigned)graph_crc(s));
    meta_add(m, "optim", "%s", !op ? "none" : op->kind == REMAT_OPTIM_SGD ? "sgd" : "adamw");
    if (op) {
        meta_add(m, "optim.lr", "%s", remat_float_str(op->lr, fb, sizeof fb));
        meta_add(m, "optim.weight_decay", "%s", remat_float_str(op->weight_decay, fb, sizeof fb));
        if (op->kind == REMAT_OPTIM_SGD) {
            meta_add(m, "optim.momentum", "%s", remat_float_str(op->momentum, fb, sizeof fb));
            meta_add(m, "optim.dampening", "%s", remat_float_str(op->dampening, fb, sizeof fb));
            meta_add(m, "optim.nesterov", "%d", op->nesterov ? 1 : 0);
        } else {
            meta_add(m, "optim.beta1", "%s", remat_float_str(op->beta1, fb, sizeof fb));
            meta_add(m, "optim.beta2", "%s", remat_float_str(op->beta2, fb, sizeof fb));
            meta_add(m, "optim.eps", "%s", remat_float_str(op->eps, fb, sizeof fb));
        }
    }
    for (int i = 0; o && o->run && o->run[i] && o->run[i + 1]; i += 2) {
        char key[256];
        snprintf(key, sizeof key, "run.%s", o->run[i]);
        meta_add(m, key, "%s", o->run[i + 1]);
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

#define RESUME_RULE                                                                                       \
    "a resumed run must keep every option that defines the math; the strategy, budget and cost model " \
    "may change"

/* REMAT_INVALID naming `what`, with both values ("(none)" when absent). */
static remat_status differs(const char *path, const char *what, const char *was, const char *now) {
    return remat__err(REMAT_INVALID, "%s: cannot resume: %s differs: the state has %s%s%s, this run %s%s%s (%s)", path,
                      what, was ? "'" : "", was ? was : "none", was ? "'" : "", now ? "'" : "", now ? now : "none",
                      now ? "'" : "", RESUME_RULE);
}

static int same(const char *a, const char *b) { return (!a && !b) || (a && b && strcmp(a, b) == 0); }

static remat_status compare_options(const remat__st *f, const meta *now) {
    const char *path = remat__st_path(f);
    /* the caller's options, both ways */
    for (int i = 0; i + 1 < now->n; i += 2) {
        if (strncmp(now->kv[i], "run.", 4) != 0) continue;
        const char *was = remat__st_metadata(f, now->kv[i]);
        if (!same(was, now->kv[i + 1])) return differs(path, now->kv[i] + 4, was, now->kv[i + 1]);
    }
    for (int i = 0;; i++) {
        const char *key = remat__st_metadata_key(f, i);
        if (!key) break;
        if (strncmp(key, "run.", 4) == 0 && !meta_get(now, key))
            return differs(path, key + 4, remat__st_metadata(f, key), NULL);
    }
    for (size_t i = 0; i < sizeof compared / sizeof compared[0]; i++) {
        const char *was = remat__st_metadata(f, compared[i].key), *is = meta_get(now, compared[i].key);
        if (!was && !strcmp(compared[i].key, "precision")) was = "fp32"; /* saved before the policy existed */
        if (!same(was, is)) return differs(path, compared[i].what, was, is);
    }
    return REMAT_OK;
}

/* ------------------------------------------------------------- tensors */

static const char *state_suffix(const remat_optim_opts *op, int which) {
    if (which == 1) return "exp_avg_sq";
    return op && op->kind == REMAT_OPTIM_ADAMW ? "exp_avg" : "momentum_buffer";
}

/* The tensors of a state: every parameter and buffer, then the optimizer
 * state of each trainable one. names[k] owned (free_tensors). */
typedef struct {
    remat__st_tensor *ts;
    char **names;
    int *param, *which; /* per tensor: parameter index, -1 value or 0/1 optimizer state */
    int n;
} tensor_list;

static void free_tensors(tensor_list *l) {
    for (int i = 0; l->names && i < l->n; i++) free(l->names[i]);
    free(l->ts), free(l->names), free(l->param), free(l->which);
    memset(l, 0, sizeof *l);
}

static remat_status list_tensors(remat_session *s, tensor_list *l) {
    memset(l, 0, sizeof *l);
    int np = remat_session_param_count(s), cap = 3 * np + 1;
    l->ts = calloc((size_t)cap, sizeof *l->ts);
    l->names = calloc((size_t)cap, sizeof *l->names);
    l->param = calloc((size_t)cap, sizeof *l->param);
    l->which = calloc((size_t)cap, sizeof *l->which);
    if (!l->ts || !l->names || !l->param || !l->which) {
        free_tensors(l);
        return remat__err(REMAT_NOMEM, "out of memory listing a state's tensors");
    }
    const remat_optim_opts *op = remat__optim_opts(s);
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < np; i++)
            for (int w = pass ? 0 : -1; w < (pass ? 2 : 0); w++) {
                remat_param_info p;
                remat_session_param(s, i, &p);
                if (w >= 0 && !remat__optim_has_state(s, i, w)) continue;
                const char *sfx = w < 0 ? "" : state_suffix(op, w);
                size_t len = strlen(p.name) + strlen(sfx) + 16;
                char *nm = malloc(len);
                if (!nm) {
                    free_tensors(l);
                    return remat__err(REMAT_NOMEM, "out of memory listing a state's tensors");
                }
                if (w < 0)
                    snprintf(nm, len, "%s", p.name);
                else
                    snprintf(nm, len, "optim.%s.%s", p.name, sfx);
                remat__st_tensor *t = &l->ts[l->n];
                l->names[l->n] = nm;
                t->name = nm;
                t->dtype = "F32";
                t->ndim = p.ndim;
                for (int d = 0; d < p.ndim; d++) t->dims[d] = p.dims[d];
                t->bytes = (size_t)p.numel * sizeof(float);
                l->param[l->n] = i;
                l->which[l->n] = w;
                l->n++;
            }
    return REMAT_OK;
}

/* Every tensor the session needs is in f with dtype F32 and its shape, and
 * f has no other; idx[k] gets the file's index of tensor k. */
static remat_status check_tensors(const remat__st *f, const tensor_list *l, int *idx) {
    const char *path = remat__st_path(f);
    char a[160], b[160];
    for (int k = 0; k < l->n; k++) {
        const remat__st_tensor *want = &l->ts[k];
        int i = remat__st_find(f, want->name);
        if (i < 0)
            return remat__err(REMAT_SHAPE, "%s: cannot resume: the state has no tensor '%s' %s, which this %s needs "
                              "(a state of another model or optimizer?)", path, want->name,
                              remat__dims_str(want->ndim, want->dims, a, sizeof a),
                              l->which[k] < 0 ? "model" : "optimizer");
        remat__st_tensor t;
        remat_status rc = remat__st_get(f, i, &t);
        if (rc != REMAT_OK) return rc;
        if (strcmp(t.dtype, "F32") != 0)
            return remat__err(REMAT_FORMAT, "%s: tensor '%s' has dtype %s, a state's tensors are F32", path,
                              t.name, t.dtype);
        int ok = t.ndim == want->ndim;
        for (int d = 0; ok && d < t.ndim; d++) ok = t.dims[d] == want->dims[d];
        if (!ok)
            return remat__err(REMAT_SHAPE, "%s: cannot resume: tensor '%s' has shape %s in the state but %s in this "
                              "model (a state of another model?)", path, t.name,
                              remat__dims_str(t.ndim, t.dims, a, sizeof a), remat__dims_str(want->ndim, want->dims, b, sizeof b));
        idx[k] = i;
    }
    if (remat__st_count(f) != l->n) /* each listed name found once: the file has others */
        for (int i = 0; i < remat__st_count(f); i++) {
            remat__st_tensor t;
            if (remat__st_get(f, i, &t) != REMAT_OK) break;
            int found = 0;
            for (int k = 0; k < l->n && !found; k++) found = strcmp(l->ts[k].name, t.name) == 0;
            if (!found)
                return remat__err(REMAT_SHAPE, "%s: cannot resume: the state has tensor '%s' %s, which this %s does "
                                  "not have (a state of another model or optimizer?)", path, t.name,
                                  remat__dims_str(t.ndim, t.dims, a, sizeof a),
                                  strncmp(t.name, "optim.", 6) == 0 ? "optimizer" : "model");
        }
    return REMAT_OK;
}

/* ---------------------------------------------------------------- save */

remat_status remat_state_save(remat_session *s, const remat_state_opts *o, const remat_train_progress *at,
                              const char *path) {
    if (!s || !path) return remat__err(REMAT_INVALID, "remat_state_save: NULL session or path");
    remat_status rs = remat__session_runnable(s, "remat_state_save");
    if (rs != REMAT_OK) return rs;
    tensor_list l;
    remat_status rc = list_tensors(s, &l);
    if (rc != REMAT_OK) return rc;
    size_t total = 0;
    for (int k = 0; k < l.n; k++) total += l.ts[k].bytes;
    unsigned char *host = malloc(total ? total : 1);
    if (!host) rc = remat__err(REMAT_NOMEM, "%s: out of memory for %zu bytes of state", path, total);
    size_t off = 0;
    for (int k = 0; k < l.n && rc == REMAT_OK; k++) {
        float *dst = (float *)(host + off);
        rc = l.which[k] < 0 ? remat_session_read_param(s, l.param[k], REMAT_PARAM_VALUE, dst)
                            : remat__optim_state_read(s, l.param[k], l.which[k], dst);
        l.ts[k].data = dst;
        off += l.ts[k].bytes;
    }
    meta m = {0};
    if (rc == REMAT_OK) {
        build_meta(s, o, at, &m);
        if (m.oom) rc = remat__err(REMAT_NOMEM, "%s: out of memory", path);
    }
    if (rc == REMAT_OK) rc = remat__st_write_ex(path, l.n, l.ts, (const char *const *)m.kv, 1);
    meta_free(&m);
    free(host);
    free_tensors(&l);
    return rc;
}

/* --------------------------------------------------------- directories */

/* The step of a state file's name "state-<digits>.safetensors", or -1. */
static int64_t state_step(const char *name) {
    size_t pl = strlen(STATE_PREFIX), sl = strlen(STATE_SUFFIX), n = strlen(name);
    if (n <= pl + sl || strncmp(name, STATE_PREFIX, pl) != 0 || strcmp(name + n - sl, STATE_SUFFIX) != 0) return -1;
    int64_t v = 0;
    for (size_t i = pl; i < n - sl; i++) {
        if (name[i] < '0' || name[i] > '9' || v > (INT64_MAX - 9) / 10) return -1;
        v = v * 10 + (name[i] - '0');
    }
    return v;
}

/* The temporaries of this directory's writers: states, and the probe
 * that checks the directory is writable before the first step. */
static int is_state_base(const char *base, const void *arg) {
    (void)arg;
    return state_step(base) >= 0 || strcmp(base, "probe") == 0;
}

/* A state file found in a directory: its step (from its name) and path. */
typedef struct {
    int64_t step;
    char *path; /* owned */
} state_entry;

static void free_entries(state_entry *e, int n) {
    for (int i = 0; e && i < n; i++) free(e[i].path);
    free(e);
}

/* Newest first; the same step under two names in a fixed order (by path). */
static int by_entry_desc(const void *a, const void *b) {
    const state_entry *x = a, *y = b;
    if (x->step != y->step) return (x->step < y->step) - (x->step > y->step);
    return strcmp(x->path, y->path);
}

/* The state files of dir, newest first (caller frees: free_entries): one
 * pass over the directory and a sort, so that a directory of many states,
 * intact or not, is read in O(n log n), never one pass per state. */
static remat_status list_entries(const char *dir, state_entry **out, int *n) {
    *out = NULL, *n = 0;
    DIR *d = opendir(dir);
    if (!d)
        return errno == ENOENT ? remat__err(REMAT_NOT_FOUND, "%s: no such directory", dir)
                               : remat__err(REMAT_IO, "%s: cannot read the directory: %s", dir, strerror(errno));
    int cap = 0;
    remat_status rc = REMAT_OK;
    size_t dl = strlen(dir);
    for (struct dirent *e; (e = readdir(d));) {
        int64_t st = state_step(e->d_name);
        if (st < 0) continue;
        if (*n == cap) {
            cap = cap ? 2 * cap : 16;
            state_entry *v = realloc(*out, (size_t)cap * sizeof *v);
            if (!v) {
                rc = remat__err(REMAT_NOMEM, "%s: out of memory listing states", dir);
                break;
            }
            *out = v;
        }
        size_t len = dl + strlen(e->d_name) + 2;
        char *path = malloc(len);
        if (!path) {
            rc = remat__err(REMAT_NOMEM, "%s: out of memory listing states", dir);
            break;
        }
        snprintf(path, len, "%s/%s", dir, e->d_name);
        (*out)[(*n)++] = (state_entry){st, path};
    }
    closedir(d);
    if (rc != REMAT_OK) {
        free_entries(*out, *n);
        *out = NULL, *n = 0;
        return rc;
    }
    if (*n) qsort(*out, (size_t)*n, sizeof **out, by_entry_desc);
    return REMAT_OK;
}

remat_status remat_state_list(const char *dir, int64_t **steps, int *n) {
    if (!dir || !steps || !n) return remat__err(REMAT_INVALID, "remat_state_list: NULL argument");
    *steps = NULL, *n = 0;
    state_entry *e;
    int k;
    remat_status rc = list_entries(dir, &e, &k);
    if (rc != REMAT_OK) return rc;
    if (k && !(*steps = malloc((size_t)k * sizeof **steps))) {
        free_entries(e, k);
        return remat__err(REMAT_NOMEM, "%s: out of memory listing states", dir);
    }
    for (int i = 0; i < k; i++) (*steps)[i] = e[i].step;
    *n = k;
    free_entries(e, k);
    return REMAT_OK;
}

/* dir/state-<step>.safetensors, malloc'd; NULL out of memory. */
static char *state_path(const char *dir, int64_t step) {
    size_t len = strlen(dir) + 64;
    char *p = malloc(len);
    if (p) snprintf(p, len, "%s/" STATE_PREFIX "%012lld" STATE_SUFFIX, dir, (long long)step);
    return p;
}

/* Opens a state file and checks that it is intact: a regular file, its
 * size against lim (NULL: none) before it is read, checksum, header, and
 * that it is a state of a format this remat reads. */
static remat_status open_state(remat__st **f, const char *path, const remat__st_limits *lim) {
    remat_status rc = remat__st_open_limited(f, path, lim);
    if (rc != REMAT_OK) return rc;
    const char *fmt = remat__st_metadata(*f, "remat.state");
    if (fmt && strcmp(fmt, STATE_FORMAT) == 0) return REMAT_OK;
    rc = fmt ? remat__err(REMAT_UNSUPPORTED, "%s: a training state of format %s; this remat %s reads format %s", path,
                          fmt, REMAT_VERSION, STATE_FORMAT)
             : remat__err(REMAT_FORMAT, "%s: not a remat training state (no \"remat.state\" in its metadata)", path);
    remat__st_close(*f);
    *f = NULL;
    return rc;
}

/* What a directory search does with an intact state: REMAT_OK takes it;
 * another status skips it (an intact state of another run or model), unless
 * *stop says the failure must end the search (the session was changed). */
typedef remat_status (*accept_fn)(const remat__st *f, void *ctx, int *stop);

/* remat_state_find, keeping the newest usable file open in *f: intact
 * (lim bounds its size) and, with accept, accepted. Every file newer than
 * it is reported through note and skipped, whatever its name: a damaged,
 * oversized or foreign state, or the same step under another name. None
 * usable: the newest intact state's refusal (it names what differs), or,
 * when none is intact, REMAT_FORMAT naming the newest file's damage. */
static remat_status find_open(const char *dir, remat_state_note_fn note, void *user, const remat__st_limits *lim,
                              accept_fn accept, void *actx, remat__st **f, char **path, int64_t *step) {
    *f = NULL, *path = NULL;
    state_entry *e;
    int n;
    remat_status rc = list_entries(dir, &e, &n);
    if (rc != REMAT_OK) return rc;
    remat__remove_stale_tmp(dir, is_state_base, NULL);
    if (!n) {
        free_entries(e, n);
        return remat__err(REMAT_NOT_FOUND, "%s holds no training state", dir);
    }
    char why[2048] = "", refused[2048] = "";
    remat_status refused_rc = REMAT_OK;
    int tried = 0;
    for (int i = 0; i < n; i++) {
        int stop = 0;
        rc = open_state(f, e[i].path, lim);
        if (rc == REMAT_NOT_FOUND) continue; /* removed meanwhile */
        tried++;
        int intact = rc == REMAT_OK;
        if (rc == REMAT_OK && accept) rc = accept(*f, actx, &stop);
        if (rc == REMAT_OK) {
            *path = e[i].path, e[i].path = NULL;
            if (step) *step = e[i].step;
            break;
        }
        remat__st_close(*f);
        *f = NULL;
        if (stop) break;
        if (intact && refused_rc == REMAT_OK) {
            refused_rc = rc;
            snprintf(refused, sizeof refused, "%s", remat_last_error());
        }
        if (!why[0]) snprintf(why, sizeof why, "%s", remat_last_error());
        if (note) {
            char w[2048];
            snprintf(w, sizeof w, "%s", remat_last_error());
            note(e[i].path, w, user);
        }
    }
    if (rc != REMAT_OK && refused_rc != REMAT_OK)
        rc = remat__err(refused_rc, "%s", refused);
    else if (rc != REMAT_OK)
        rc = remat__err(REMAT_FORMAT, "%s: none of its %d training states is intact; the newest: %s", dir, tried,
                        why[0] ? why : "(removed while reading)");
    free_entries(e, n);
    return rc;
}

remat_status remat_state_find(const char *dir, remat_state_note_fn note, void *user, char **path, int64_t *step) {
    if (!dir) return remat__err(REMAT_INVALID, "remat_state_find: no directory");
    remat__st *f;
    char *p;
    remat_status rc = find_open(dir, note, user, NULL, NULL, NULL, &f, &p, step);
    remat__st_close(f);
    if (path) *path = p;
    else free(p);
    return rc;
}

remat_status remat_state_save_dir(remat_session *s, const remat_state_opts *o, const remat_train_progress *at,
                                  const char *dir, int keep, char **path) {
    if (path) *path = NULL;
    if (!s || !dir || !*dir) return remat__err(REMAT_INVALID, "remat_state_save_dir: NULL session or directory");
    if (keep < 0) return remat__err(REMAT_INVALID, "keep must be >= 0 (0 keeps every state), got %d", keep);
    if (mkdir(dir, 0777) != 0 && errno != EEXIST)
        return remat__err(REMAT_IO, "cannot create the state directory %s: %s", dir, strerror(errno));
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return remat__err(REMAT_IO, "cannot save states in %s: not a directory", dir);
    int64_t step = remat_session_step_index(s);
    char *p = state_path(dir, step);
    if (!p) return remat__err(REMAT_NOMEM, "out of memory");
    remat_status rc = remat_state_save(s, o, at, p);
    if (rc == REMAT_OK) remat__remove_stale_tmp(dir, is_state_base, NULL);
    if (rc == REMAT_OK && keep > 0) {
        /* the newest `keep` states up to this one stay; later ones (a
         * damaged newer state skipped by a resume) are left alone */
        state_entry *e;
        int n, kept = 0;
        if (list_entries(dir, &e, &n) == REMAT_OK) {
            for (int i = 0; i < n; i++) {
                if (e[i].step > step) continue;
                if (kept++ < keep) continue;
                if (strcmp(e[i].path, p) != 0) unlink(e[i].path);
            }
            free_entries(e, n);
        }
    }
    if (rc == REMAT_OK && path) *path = p;
    else free(p);
    return rc;
}

/* ---------------------------------------------------------------- load */

static int parse_count(const char *v, int64_t *out) {
    if (!v || !*v) return 0;
    int64_t x = 0;
    for (const char *c = v; *c; c++) {
        if (*c < '0' || *c > '9' || x > (INT64_MAX - 9) / 10) return 0;
        x = x * 10 + (*c - '0');
    }
    *out = x;
    return 1;
}

/* The first element of n floats at p (any alignment) that is not finite,
 * or -1. */
static int64_t first_nonfinite(const void *p, int64_t n) {
    const unsigned char *b = p;
    for (int64_t i = 0; i < n; i++) {
        float v;
        memcpy(&v, b + 4 * i, 4);
        if (!isfinite(v)) return i;
    }
    return -1;
}

/* Loads an open, intact state file into the session: every check first,
 * the session untouched unless all pass. *copying (may be NULL) is set once
 * the copy has begun: a failure after that has changed the session. */
static remat_status load_file(remat_session *s, const remat_state_opts *o, const remat__st *f,
                              remat_train_progress *at, int *copying) {
    const char *path = remat__st_path(f);
    meta now = {0};
    build_meta(s, o, NULL, &now);
    remat_status rc = now.oom ? remat__err(REMAT_NOMEM, "%s: out of memory", path) : REMAT_OK;
    if (rc == REMAT_OK) rc = compare_options(f, &now);
    tensor_list l = {0};
    int *idx = NULL;
    if (rc == REMAT_OK) rc = list_tensors(s, &l);
    if (rc == REMAT_OK && !(idx = malloc((size_t)(l.n + 1) * sizeof *idx)))
        rc = remat__err(REMAT_NOMEM, "%s: out of memory", path);
    if (rc == REMAT_OK) rc = check_tensors(f, &l, idx);
    if (rc == REMAT_OK && !same(remat__st_metadata(f, "graph"), meta_get(&now, "graph")))
        rc = differs(path, "the model's graph (same parameters, but other ops, sizes or attributes such as a "
                     "dropout rate)", remat__st_metadata(f, "graph"), meta_get(&now, "graph"));
    int64_t step = 0, optim_t = 0;
    remat_train_progress p = {0};
    static const char *const counts[] = {"step", "optim.step", "data.step", "data.epoch", "data.position"};
    int64_t *dst[] = {&step, &optim_t, &p.data_step, &p.epoch, &p.position};
    for (int i = 0; i < 5 && rc == REMAT_OK; i++)
        if (!parse_count(remat__st_metadata(f, counts[i]), dst[i]))
            rc = remat__err(REMAT_FORMAT, "%s: metadata \"%s\" is %s%s%s, not a count", path, counts[i],
                            remat__st_metadata(f, counts[i]) ? "'" : "",
                            remat__st_metadata(f, counts[i]) ? remat__st_metadata(f, counts[i]) : "missing",
                            remat__st_metadata(f, counts[i]) ? "'" : "");
    if (rc == REMAT_OK && !same(remat__st_metadata(f, "rng.step"), remat__st_metadata(f, "step")))
        rc = remat__err(REMAT_FORMAT, "%s: metadata \"rng.step\" differs from \"step\"", path);
    /* a NaN or infinity would only be found steps later, as a divergence
     * blamed on the learning rate: name the tensor now */
    for (int k = 0; k < l.n && rc == REMAT_OK; k++) {
        remat__st_tensor t;
        rc = remat__st_get(f, idx[k], &t);
        int64_t bad = rc == REMAT_OK ? first_nonfinite(t.data, (int64_t)(t.bytes / 4)) : -1;
        if (bad >= 0) {
            float v;
            memcpy(&v, (const unsigned char *)t.data + 4 * bad, 4);
            rc = remat__err(REMAT_FORMAT, "%s: tensor '%s' holds %s at element %lld: a state to resume from must be "
                            "finite", path, t.name, isnan(v) ? "NaN" : v > 0 ? "+inf" : "-inf", (long long)bad);
        }
    }
    /* Everything checked: copy. */
    if (rc == REMAT_OK && copying) *copying = 1;
    for (int k = 0; k < l.n && rc == REMAT_OK; k++) {
        remat__st_tensor t;
        rc = remat__st_get(f, idx[k], &t);
        if (rc != REMAT_OK) break;
        /* the data section is 8-byte aligned and F32 tensors are placed at
         * multiples of 4: t.data may be read as floats */
        rc = l.which[k] < 0 ? remat_session_write_param(s, l.param[k], t.data)
                            : remat__optim_state_write(s, l.param[k], l.which[k], t.data);
    }
    if (rc == REMAT_OK) {
        remat__optim_set_counters(s, step, optim_t);
        if (at) *at = p;
    }
    free(idx);
    free_tensors(&l);
    meta_free(&now);
    return rc;
}

/* The bounds of a state of this session (remat__st_limits): its tensors'
 * bytes exactly, and a header of at most twice this session's own (its
 * metadata and tensor entries) plus 64 KiB, so that reading a state never
 * takes much more memory than the session's own state. */
static remat_status state_limits(remat_session *s, const remat_state_opts *o, remat__st_limits *lim) {
    tensor_list l;
    remat_status rc = list_tensors(s, &l);
    if (rc != REMAT_OK) return rc;
    uint64_t data = 0, header = 64 * 1024;
    for (int k = 0; k < l.n; k++) {
        data += l.ts[k].bytes;
        header += 2 * (strlen(l.names[k]) + 64 + 24 * (uint64_t)(l.ts[k].ndim + 2));
    }
    free_tensors(&l);
    meta m = {0};
    build_meta(s, o, NULL, &m);
    for (int i = 0; i < m.n; i++) header += 2 * (strlen(m.kv[i]) + 8);
    int oom = m.oom;
    meta_free(&m);
    if (oom) return remat__err(REMAT_NOMEM, "out of memory");
    *lim = (remat__st_limits){.data_bytes = data, .max_header = header,
                              .what = "a state of this model and optimizer"};
    return REMAT_OK;
}

typedef struct {
    remat_session *s;
    const remat_state_opts *o;
    remat_train_progress *at;
} load_ctx;

/* A state whose data section has another size: its header says why (the
 * options, then the tensors), as load_file would. */
static remat_status explain_header(const remat__st *h, void *ctx) {
    load_ctx *c = ctx;
    meta now = {0};
    build_meta(c->s, c->o, NULL, &now);
    remat_status rc = now.oom ? REMAT_OK : compare_options(h, &now);
    tensor_list l = {0};
    int *idx = NULL;
    if (rc == REMAT_OK && list_tensors(c->s, &l) == REMAT_OK && (idx = malloc((size_t)(l.n + 1) * sizeof *idx)))
        rc = check_tensors(h, &l, idx);
    free(idx);
    free_tensors(&l);
    meta_free(&now);
    return rc;
}

static remat_status accept_load(const remat__st *f, void *ctx, int *stop) {
    load_ctx *c = ctx;
    int copying = 0;
    remat_status rc = load_file(c->s, c->o, f, c->at, &copying);
    if (rc != REMAT_OK && copying) *stop = 1;
    return rc;
}

/* remat_state_load; *used (may be NULL) gets the file loaded (caller frees). */
static remat_status load_impl(remat_session *s, const remat_state_opts *o, const char *path, remat_train_progress *at,
                              char **used) {
    if (used) *used = NULL;
    if (!s || !path) return remat__err(REMAT_INVALID, "remat_state_load: NULL session or path");
    struct stat st;
    if (stat(path, &st) != 0)
        return errno == ENOENT ? remat__err(REMAT_NOT_FOUND, "%s: no such file or directory", path)
                               : remat__err(REMAT_IO, "%s: %s", path, strerror(errno));
    remat__st_limits lim;
    remat_status rc = state_limits(s, o, &lim);
    if (rc != REMAT_OK) return rc;
    load_ctx c = {s, o, at};
    lim.explain = explain_header, lim.ctx = &c;
    remat__st *f = NULL;
    char *p = NULL;
    if (S_ISDIR(st.st_mode)) {
        rc = find_open(path, o ? o->note : NULL, o ? o->user : NULL, &lim, accept_load, &c, &f, &p, NULL);
    } else {
        rc = open_state(&f, path, &lim);
        if (rc == REMAT_OK && !(p = malloc(strlen(path) + 1))) rc = remat__err(REMAT_NOMEM, "out of memory");
        if (p) strcpy(p, path);
        if (rc == REMAT_OK) rc = load_file(s, o, f, at, NULL);
    }
    remat__st_close(f);
    if (rc == REMAT_OK && used) *used = p;
    else free(p);
    return rc;
}

remat_status remat_state_load(remat_session *s, const remat_state_opts *o, const char *path,
                              remat_train_progress *at) {
    remat_status rs = remat__session_runnable(s, "remat_state_load");
    if (rs != REMAT_OK) return rs;
    return load_impl(s, o, path, at, NULL);
}

/* ----------------------------------------------------- the loops' glue */

static void emit(const remat__loop_state *ls, remat_event *ev) {
    if (ls->o->on_event) ls->o->on_event(ev, ls->o->user);
}

static void note_event(const char *path, const char *why, void *user) {
    const remat__loop_state *ls = user;
    char msg[1200];
    snprintf(msg, sizeof msg, "skipping %s: %s", path, why);
    remat_event ev = {.kind = REMAT_EVENT_NOTE, .path = path, .message = msg};
    emit(ls, &ev);
}

/* 1 if a and b are the same directory. */
static int same_dir(const char *a, const char *b) {
    struct stat x, y;
    return stat(a, &x) == 0 && stat(b, &y) == 0 && x.st_dev == y.st_dev && x.st_ino == y.st_ino;
}

/* The folder of a file path (malloc'd). */
static char *folder_of(const char *path) {
    const char *slash = strrchr(path, '/');
    size_t n = slash ? (slash == path ? 1 : (size_t)(slash - path)) : 1;
    char *d = malloc(n + 1);
    if (!d) return NULL;
    memcpy(d, slash ? path : ".", n);
    d[n] = 0;
    return d;
}

/* ---------------------------------------------------------------- lock */

#define LOCK_NAME "remat.lock"

/* Takes the exclusive lock of a state directory for the run (*fd, held
 * until remat__loop_state_end or the process's end; core/lock.c). The
 * file says who holds it for the message another run gets, and stays
 * when the run ends. A file system that has no locks gets a note and no
 * protection; a held lock is refused at once. */
static remat_status lock_dir(remat__loop_state *ls, const char *dir, int *fd) {
    size_t len = strlen(dir) + sizeof LOCK_NAME + 2;
    char *p = malloc(len);
    *fd = -1;
    if (!p) return remat__err(REMAT_NOMEM, "out of memory");
    snprintf(p, len, "%s/" LOCK_NAME, dir);
    remat__lock_holder h;
    int r = remat__lock_take(p, fd, &h), e = errno;
    free(p);
    if (r == 1 && h.pid)
        return remat__err(REMAT_INVALID, "the state directory %s is in use by another run (pid %ld on host %s): "
                          "two runs cannot save their states in one directory; wait for that run to end, or "
                          "give this one another directory", dir, h.pid, h.host);
    if (r == 1)
        return remat__err(REMAT_INVALID, "the state directory %s is in use by another run (it holds %s/" LOCK_NAME
                          "): two runs cannot save their states in one directory; wait for that run to end, or "
                          "give this one another directory", dir, dir);
    if (r < 0 && (e == ENOLCK || e == EOPNOTSUPP || e == ENOSYS || e == EINVAL)) {
        char msg[1200];
        snprintf(msg, sizeof msg, "cannot lock the state directory %s (%s): this file system has no locks, so nothing "
                 "keeps another run from saving its states there too", dir, strerror(e));
        remat_event ev = {.kind = REMAT_EVENT_NOTE, .message = msg};
        emit(ls, &ev);
        return REMAT_OK;
    }
    if (r < 0) return remat__err(REMAT_IO, "cannot lock the state directory %s: %s/" LOCK_NAME ": %s", dir, dir,
                                 strerror(e));
    return REMAT_OK;
}

static int is_dir(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* remat__loop_state_begin on this rank. Rank 0, which writes the states,
 * takes the state directory's lock first (when it exists yet; else after
 * the resume, which then reads another directory or fails), so that two
 * runs never both pass the "no other run's states" check. */
static remat_status begin(remat__loop_state *ls, remat_session *s, const remat_train_opts *o, int64_t batch,
                          int64_t per_epoch, const char *data, int64_t *start) {
    if (o->save_every < 0) return remat__err(REMAT_INVALID, "save_every must be >= 0, got %lld", (long long)o->save_every);
    if (o->keep < 0) return remat__err(REMAT_INVALID, "keep must be >= 0 (0 keeps every state), got %d", o->keep);
    ls->so = (remat_state_opts){.batch = batch, .data_seed = o->seed, .data = data, .batches_per_epoch = per_epoch,
                                .run = o->run, .note = note_event, .user = ls};
    int writer = o->state_dir && remat_comm_rank(remat__session_comm(s)) == 0;
    remat_status rc = REMAT_OK;
    if (writer && is_dir(o->state_dir)) rc = lock_dir(ls, o->state_dir, &ls->lock_fd);
    if (rc != REMAT_OK) return rc;
    char *resumed_dir = NULL;
    if (o->resume) {
        int resume_is_dir = is_dir(o->resume);
        remat_train_progress at;
        char *used = NULL;
        rc = load_impl(s, &ls->so, o->resume, &at, &used);
        int64_t *steps = NULL;
        int n = -1;
        if (rc == REMAT_NOT_FOUND && resume_is_dir && remat_state_list(o->resume, &steps, &n) == REMAT_OK && n == 0) {
            char msg[1200];
            snprintf(msg, sizeof msg, "%s holds no training state yet: training starts at step 0", o->resume);
            remat_event ev = {.kind = REMAT_EVENT_RESUME, .message = msg};
            emit(ls, &ev);
            rc = REMAT_OK;
            resumed_dir = malloc(strlen(o->resume) + 1);
            if (resumed_dir) strcpy(resumed_dir, o->resume);
        } else if (rc == REMAT_OK) {
            *start = at.data_step;
            resumed_dir = resume_is_dir ? malloc(strlen(o->resume) + 1) : folder_of(used);
            if (resumed_dir && resume_is_dir) strcpy(resumed_dir, o->resume);
            remat_event ev = {.kind = REMAT_EVENT_RESUME, .step = at.data_step, .epoch = at.epoch,
                              .step_in_epoch = at.position, .path = used};
            emit(ls, &ev);
        }
        free(steps);
        free(used);
    }
    if (rc == REMAT_OK && o->state_dir) {
        /* fail before the first step when states cannot be written (by
         * rank 0, the one that writes them) */
        if (writer && mkdir(o->state_dir, 0777) != 0 && errno != EEXIST)
            rc = remat__err(REMAT_IO, "cannot create the state directory %s: %s", o->state_dir, strerror(errno));
        if (rc == REMAT_OK && writer && ls->lock_fd < 0) rc = lock_dir(ls, o->state_dir, &ls->lock_fd);
        /* a fresh run must not mix its states with another run's: the
         * next resume would pick the newest of either */
        state_entry *e = NULL;
        int n = 0;
        remat_status lr = rc == REMAT_OK ? list_entries(o->state_dir, &e, &n) : REMAT_OK;
        if (lr == REMAT_OK && n > 0 && !(resumed_dir && same_dir(resumed_dir, o->state_dir))) {
            rc = remat__err(REMAT_INVALID, "the state directory %s already holds %d training state%s (the newest: %s): "
                            "resume from %s, or save the states of this run in an empty directory",
                            o->state_dir, n, n == 1 ? "" : "s", e[0].path, n == 1 ? "it" : "them");
        } else if (lr != REMAT_OK && lr != REMAT_NOT_FOUND) {
            rc = lr;
        }
        free_entries(e, n);
        if (rc == REMAT_OK && writer) {
            size_t len = strlen(o->state_dir) + 64;
            char *probe = malloc(len);
            if (!probe) rc = remat__err(REMAT_NOMEM, "out of memory");
            else {
                /* a name of the temporaries' pattern: never read, and
                 * removed as stale should this process die right here */
                snprintf(probe, len, "%s/.probe.tmp.%ld.%08lx", o->state_dir, (long)getpid(),
                         (unsigned long)((uintptr_t)probe & 0xffffffffu));
                int fd = open(probe, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
                if (fd < 0 && errno != EEXIST)
                    rc = remat__err(REMAT_IO, "cannot save states in %s: %s", o->state_dir, strerror(errno));
                if (fd >= 0) close(fd), unlink(probe);
                free(probe);
            }
        }
    }
    free(resumed_dir);
    return rc;
}

/* Several ranks: the options that define the math and the run's course
 * are every rank's the same (remat_comm_same), before anything that a
 * difference could hang (a rank that saves when another does not, one
 * that runs more steps) or silently corrupt (another seed or learning
 * rate: gradients summed over different models). The caller's run
 * options (the command line's flags) first, under their own names. */
static remat_status same_run(remat_session *s, const remat_train_opts *o, int64_t batch, int64_t per_epoch,
                             const char *data) {
    meta m = {0};
    for (int i = 0; o->run && o->run[i] && o->run[i + 1]; i += 2) meta_add(&m, o->run[i], "%s", o->run[i + 1]);
    meta_add(&m, "the seed (seed)", "%llu", (unsigned long long)o->seed);
    meta_add(&m, "the steps (steps)", "%lld", (long long)o->steps);
    meta_add(&m, "the epochs (epochs)", "%lld", (long long)o->epochs);
    meta_add(&m, "the batch", "%lld", (long long)batch);
    meta_add(&m, "the batches per epoch", "%lld", (long long)per_epoch);
    meta_add(&m, "the training data", "%s", data ? data : "(the caller's)");
    meta_add(&m, "the state directory (state_dir)", "%s", o->state_dir ? o->state_dir : "(none)");
    meta_add(&m, "the save cadence (save_every)", "%lld", (long long)o->save_every);
    meta_add(&m, "the states kept (keep)", "%d", o->keep);
    meta_add(&m, "the resume (resume)", "%s", o->resume ? o->resume : "(none)");
    meta_add(&m, "a stop flag (stop)", "%s", o->stop ? "given" : "none");
    meta now = {0};
    build_meta(s, NULL, NULL, &now);
    static const char *const session_keys[] = {"rng.seed", "device", "precision", "threads", "tf32", "least_workspace", "optim",
                                               "optim.lr", "optim.weight_decay", "optim.momentum", "optim.dampening",
                                               "optim.nesterov", "optim.beta1", "optim.beta2", "optim.eps",
                                               "optim.step", "step", "graph"};
    for (size_t i = 0; i < sizeof session_keys / sizeof session_keys[0]; i++) {
        const char *v = meta_get(&now, session_keys[i]);
        for (size_t k = 0; k < sizeof compared / sizeof compared[0]; k++)
            if (strcmp(compared[k].key, session_keys[i]) == 0) {
                meta_add(&m, compared[k].what, "%s", v ? v : "(none)");
                break;
            }
        if (!strcmp(session_keys[i], "optim.step") || !strcmp(session_keys[i], "step") ||
            !strcmp(session_keys[i], "graph"))
            meta_add(&m, !strcmp(session_keys[i], "graph") ? "the model's graph" : session_keys[i], "%s",
                     v ? v : "(none)");
    }
    remat_status rc = REMAT_OK;
    if (m.oom || now.oom) rc = remat__err(REMAT_NOMEM, "out of memory"); /* the others wait: the caller aborts */
    if (rc == REMAT_OK) rc = remat_comm_same(remat__session_comm(s), (const char *const *)m.kv, NULL);
    meta_free(&m);
    meta_free(&now);
    return rc;
}

remat_status remat__loop_state_begin(remat__loop_state *ls, remat_session *s, const remat_train_opts *o,
                                     int64_t batch, int64_t per_epoch, const char *data, int64_t *start) {
    remat_comm *comm = remat__session_comm(s);
    int ranks = remat_comm_size(comm);
    memset(ls, 0, sizeof *ls);
    ls->o = o;
    ls->last_saved = -1;
    ls->lock_fd = -1;
    ls->per_epoch = per_epoch;
    *start = 0;
    if (ranks > 1) {
        remat_status rc = same_run(s, o, batch, per_epoch, data);
        if (rc != REMAT_OK) return rc;
    }
    if (!o->state_dir && !o->resume) return REMAT_OK;
    remat_status rc = begin(ls, s, o, batch, per_epoch, data, start);
    ls->start = *start;
    if (ranks == 1) return rc;
    /* every rank read the same state: the same data step */
    rc = remat_comm_agree(comm, rc);
    int64_t *steps = rc == REMAT_OK ? malloc((size_t)ranks * sizeof *steps) : NULL;
    if (rc == REMAT_OK && !steps) return remat__err(REMAT_NOMEM, "out of memory"); /* the others may wait: abort */
    if (rc == REMAT_OK) rc = remat_comm_allgather(comm, start, sizeof *start, steps);
    for (int r = 1; rc == REMAT_OK && r < ranks; r++)
        if (steps[r] != steps[0])
            rc = remat__err(REMAT_INVALID, "the ranks resumed from different states: rank 0 at step %lld, rank %d at "
                            "step %lld (every rank must see the same state directory)", (long long)steps[0], r,
                            (long long)steps[r]);
    if (rc != REMAT_OK) remat__comm_failed_together(comm);
    free(steps);
    return rc;
}

remat_status remat__loop_state_step(remat__loop_state *ls, remat_session *s, int64_t done, int last) {
    const remat_train_opts *o = ls->o;
    remat_comm *comm = remat__session_comm(s);
    if (!o || !o->state_dir || done == ls->last_saved) return REMAT_OK;
    if (!last && !(o->save_every > 0 && done % o->save_every == 0)) return REMAT_OK;
    remat_train_progress at = {.data_step = done, .epoch = ls->per_epoch > 0 ? done / ls->per_epoch : 0,
                               .position = ls->per_epoch > 0 ? done % ls->per_epoch : done};
    char *path = NULL;
    /* rank 0 writes (every rank holds the same state); the others learn
     * whether it could */
    remat_status rc =
        remat_comm_rank(comm) == 0 ? remat_state_save_dir(s, &ls->so, &at, o->state_dir, o->keep, &path) : REMAT_OK;
    if (remat_comm_size(comm) > 1) rc = remat_comm_agree(comm, rc);
    if (rc != REMAT_OK) {
        free(path);
        return rc;
    }
    ls->last_saved = done;
    if (path) {
        remat_event ev = {.kind = REMAT_EVENT_SAVE, .step = done, .epoch = at.epoch, .step_in_epoch = at.position,
                          .path = path};
        emit(ls, &ev);
    }
    free(path);
    return REMAT_OK;
}

remat_status remat__loop_state_stop(remat__loop_state *ls, remat_session *s, int64_t done, int64_t total) {
    const remat_train_opts *o = ls->o;
    remat_comm *comm = remat__session_comm(s);
    int ranks = remat_comm_size(comm);
    if (!o || !o->stop || done >= total) return REMAT_OK;
    int mine = *o->stop, asked = mine;
    if (ranks > 1) {
        int *all = malloc((size_t)ranks * sizeof *all);
        if (!all) return remat__err(REMAT_NOMEM, "out of memory"); /* the others may wait: the caller aborts */
        remat_status rc = remat_comm_allgather(comm, &mine, sizeof mine, all);
        asked = 0;
        for (int r = 0; rc == REMAT_OK && r < ranks && !asked; r++) asked = all[r];
        free(all);
        if (rc != REMAT_OK) return rc;
        if (asked) *o->stop = asked;
    }
    if (!asked) return REMAT_OK;
    /* every rank stops here: a state of this step, unless it has one */
    remat_status rc = REMAT_OK;
    int saved = done == ls->last_saved;
    if (o->state_dir && !saved && done > ls->start) {
        rc = remat__loop_state_step(ls, s, done, 1);
        saved = rc == REMAT_OK;
    }
    if (rc == REMAT_OK) {
        if (done == ls->start)
            rc = remat__err(REMAT_STOPPED, "stopped on request before the first step of this run (step %lld of %lld): "
                            "nothing was trained, nothing is lost", (long long)done + 1, (long long)total);
        else if (o->state_dir && saved)
            rc = remat__err(REMAT_STOPPED, "stopped on request after step %lld of %lld; the training state of step %lld "
                            "is in %s", (long long)done, (long long)total, (long long)done, o->state_dir);
        else
            rc = remat__err(REMAT_STOPPED, "stopped on request after step %lld of %lld with no state directory: the "
                            "%lld step%s trained in this run %s not saved", (long long)done, (long long)total,
                            (long long)(done - ls->start), done - ls->start == 1 ? "" : "s",
                            done - ls->start == 1 ? "is" : "are");
    }
    if (ranks > 1) remat__comm_failed_together(comm);
    return rc;
}

void remat__loop_state_end(remat__loop_state *ls) {
    if (ls && ls->lock_fd >= 0) close(ls->lock_fd);
    if (ls) ls->lock_fd = -1;
}
