/* state.c: training states (remat.h, "training state"): save, find, load;
 * their metadata is state_meta.c, the glue that lets the training loops
 * save and resume loop_state.c.
 *
 * A state is a checksummed safetensors file (safetensors.c: its metadata
 * leads with the file's size and a CRC-32 of the whole file). Tensors:
 * every parameter and buffer by name, then per trainable parameter its
 * optimizer state ("optim.<name>.exp_avg" and ".exp_avg_sq" for AdamW,
 * ".momentum_buffer" for SGD with momentum), all F32. Metadata (strings):
 * remat__meta_build (state_meta.c) is the one list, used both to write a
 * state and, built again from the running session, to compare on load;
 * its `compared` says which entries must match and how a difference is
 * named.
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
                if (w < 0) snprintf(nm, len, "%s", p.name);
                else snprintf(nm, len, "optim.%s.%s", p.name, sfx);
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
            return remat__err(REMAT_SHAPE,
                              "%s: cannot resume: the state has no tensor '%s' %s, which this %s needs "
                              "(a state of another model or optimizer?)",
                              path, want->name, remat__dims_str(want->ndim, want->dims, a, sizeof a),
                              l->which[k] < 0 ? "model" : "optimizer");
        remat__st_tensor t;
        remat_status rc = remat__st_get(f, i, &t);
        if (rc != REMAT_OK) return rc;
        if (strcmp(t.dtype, "F32") != 0)
            return remat__err(REMAT_FORMAT, "%s: tensor '%s' has dtype %s, a state's tensors are F32", path, t.name,
                              t.dtype);
        int ok = t.ndim == want->ndim;
        for (int d = 0; ok && d < t.ndim; d++) ok = t.dims[d] == want->dims[d];
        if (!ok)
            return remat__err(REMAT_SHAPE,
                              "%s: cannot resume: tensor '%s' has shape %s in the state but %s in this "
                              "model (a state of another model?)",
                              path, t.name, remat__dims_str(t.ndim, t.dims, a, sizeof a),
                              remat__dims_str(want->ndim, want->dims, b, sizeof b));
        idx[k] = i;
    }
    if (remat__st_count(f) != l->n) /* each listed name found once: the file has others */
        for (int i = 0; i < remat__st_count(f); i++) {
            remat__st_tensor t;
            if (remat__st_get(f, i, &t) != REMAT_OK) break;
            int found = 0;
            for (int k = 0; k < l->n && !found; k++) found = strcmp(l->ts[k].name, t.name) == 0;
            if (!found)
                return remat__err(REMAT_SHAPE,
                                  "%s: cannot resume: the state has tensor '%s' %s, which this %s does "
                                  "not have (a state of another model or optimizer?)",
                                  path, t.name, remat__dims_str(t.ndim, t.dims, a, sizeof a),
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
    remat__state_meta m = {0};
    if (rc == REMAT_OK) {
        remat__meta_build(s, o, at, &m);
        if (m.oom) rc = remat__err(REMAT_NOMEM, "%s: out of memory", path);
    }
    if (rc == REMAT_OK) rc = remat__st_write_ex(path, l.n, l.ts, (const char *const *)m.kv, 1);
    remat__meta_free(&m);
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

void remat__state_free_entries(remat__state_entry *e, int n) {
    for (int i = 0; e && i < n; i++) free(e[i].path);
    free(e);
}

/* Newest first; the same step under two names in a fixed order (by path). */
static int by_entry_desc(const void *a, const void *b) {
    const remat__state_entry *x = a, *y = b;
    if (x->step != y->step) return (x->step < y->step) - (x->step > y->step);
    return strcmp(x->path, y->path);
}

/* The state files of dir, newest first (caller frees: free_entries): one
 * pass over the directory and a sort, so that a directory of many states,
 * intact or not, is read in O(n log n), never one pass per state. */
remat_status remat__state_list_entries(const char *dir, remat__state_entry **out, int *n) {
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
            remat__state_entry *v = realloc(*out, (size_t)cap * sizeof *v);
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
        (*out)[(*n)++] = (remat__state_entry){st, path};
    }
    closedir(d);
    if (rc != REMAT_OK) {
        remat__state_free_entries(*out, *n);
        *out = NULL, *n = 0;
        return rc;
    }
    if (*n) qsort(*out, (size_t)*n, sizeof **out, by_entry_desc);
    return REMAT_OK;
}

remat_status remat_state_list(const char *dir, int64_t **steps, int *n) {
    if (!dir || !steps || !n) return remat__err(REMAT_INVALID, "remat_state_list: NULL argument");
    *steps = NULL, *n = 0;
    remat__state_entry *e;
    int k;
    remat_status rc = remat__state_list_entries(dir, &e, &k);
    if (rc != REMAT_OK) return rc;
    if (k && !(*steps = malloc((size_t)k * sizeof **steps))) {
        remat__state_free_entries(e, k);
        return remat__err(REMAT_NOMEM, "%s: out of memory listing states", dir);
    }
    for (int i = 0; i < k; i++) (*steps)[i] = e[i].step;
    *n = k;
    remat__state_free_entries(e, k);
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
    remat__state_entry *e;
    int n;
    remat_status rc = remat__state_list_entries(dir, &e, &n);
    if (rc != REMAT_OK) return rc;
    remat__remove_stale_tmp(dir, is_state_base, NULL);
    if (!n) {
        remat__state_free_entries(e, n);
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
    if (rc != REMAT_OK && refused_rc != REMAT_OK) rc = remat__err(refused_rc, "%s", refused);
    else if (rc != REMAT_OK)
        rc = remat__err(REMAT_FORMAT, "%s: none of its %d training states is intact; the newest: %s", dir, tried,
                        why[0] ? why : "(removed while reading)");
    remat__state_free_entries(e, n);
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
        remat__state_entry *e;
        int n, kept = 0;
        if (remat__state_list_entries(dir, &e, &n) == REMAT_OK) {
            for (int i = 0; i < n; i++) {
                if (e[i].step > step) continue;
                if (kept++ < keep) continue;
                if (strcmp(e[i].path, p) != 0) unlink(e[i].path);
            }
            remat__state_free_entries(e, n);
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
static remat_status load_file(remat_session *s, const remat_state_opts *o, const remat__st *f, remat_train_progress *at,
                              int *copying) {
    const char *path = remat__st_path(f);
    remat__state_meta now = {0};
    remat__meta_build(s, o, NULL, &now);
    remat_status rc = now.oom ? remat__err(REMAT_NOMEM, "%s: out of memory", path) : REMAT_OK;
    if (rc == REMAT_OK) rc = remat__meta_compare(f, &now);
    tensor_list l = {0};
    int *idx = NULL;
    if (rc == REMAT_OK) rc = list_tensors(s, &l);
    if (rc == REMAT_OK && !(idx = malloc((size_t)(l.n + 1) * sizeof *idx)))
        rc = remat__err(REMAT_NOMEM, "%s: out of memory", path);
    if (rc == REMAT_OK) rc = check_tensors(f, &l, idx);
    if (rc == REMAT_OK && !remat__meta_same(remat__st_metadata(f, "graph"), remat__meta_get(&now, "graph")))
        rc = remat__meta_differs(path,
                                 "the model's graph (same parameters, but other ops, sizes or attributes such as a "
                                 "dropout rate)",
                                 remat__st_metadata(f, "graph"), remat__meta_get(&now, "graph"));
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
    if (rc == REMAT_OK && !remat__meta_same(remat__st_metadata(f, "rng.step"), remat__st_metadata(f, "step")))
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
            rc = remat__err(REMAT_FORMAT,
                            "%s: tensor '%s' holds %s at element %lld: a state to resume from must be "
                            "finite",
                            path, t.name,
                            isnan(v) ? "NaN"
                            : v > 0  ? "+inf"
                                     : "-inf",
                            (long long)bad);
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
    remat__meta_free(&now);
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
    remat__state_meta m = {0};
    remat__meta_build(s, o, NULL, &m);
    for (int i = 0; i < m.n; i++) header += 2 * (strlen(m.kv[i]) + 8);
    int oom = m.oom;
    remat__meta_free(&m);
    if (oom) return remat__err(REMAT_NOMEM, "out of memory");
    *lim = (remat__st_limits){.data_bytes = data, .max_header = header, .what = "a state of this model and optimizer"};
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
    remat__state_meta now = {0};
    remat__meta_build(c->s, c->o, NULL, &now);
    remat_status rc = now.oom ? REMAT_OK : remat__meta_compare(h, &now);
    tensor_list l = {0};
    int *idx = NULL;
    if (rc == REMAT_OK && list_tensors(c->s, &l) == REMAT_OK && (idx = malloc((size_t)(l.n + 1) * sizeof *idx)))
        rc = check_tensors(h, &l, idx);
    free(idx);
    free_tensors(&l);
    remat__meta_free(&now);
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
remat_status remat__state_load_impl(remat_session *s, const remat_state_opts *o, const char *path,
                                    remat_train_progress *at, char **used) {
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

remat_status remat_state_load(remat_session *s, const remat_state_opts *o, const char *path, remat_train_progress *at) {
    remat_status rs = remat__session_runnable(s, "remat_state_load");
    if (rs != REMAT_OK) return rs;
    return remat__state_load_impl(s, o, path, at, NULL);
}
