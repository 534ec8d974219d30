/* loop.c: the training loops and evaluation.
 *
 * remat_train trains a classifier on a data set, epoch by epoch, with an
 * evaluation after each; remat_train_stream trains any model from a batch
 * source (synthetic data, token windows) in evaluation-free epochs of a
 * fixed number of steps; remat_train_tokens is the language-model source.
 * Each loop owns nothing but staging buffers (one batch) bound to the
 * model's inputs, and gives the caller's bindings back before it returns
 * (saved_binds): the session never points at a buffer a loop has freed.
 * It reports progress through the caller's event callback and never
 * prints. Every loop checks the weights before its first step and after
 * each update, and stops at the first NaN or infinity, naming it.
 *
 * Micro-batches and ranks (remat.h, "several processes"): the graph's
 * batch is one micro-batch, a step K of them over the ranks. remat_train's
 * loader deals global batches of K micro-batches from the epoch's seeded
 * permutation, and each rank stages only its own rows (its q micro-batches,
 * one after the other, as remat_session_step reads them); a batch source
 * is asked for micro-batch k of step t as its step t * K + k. Evaluation
 * shares the test batches out over the ranks and sums their results in
 * batch order, so it gives the same bits on any number of ranks. Every
 * rank runs the loop; events are every rank's to print or not.
 *
 * Training states (state.c): a loop can resume from one and save them as
 * it goes. Its position in the data is its data step alone: remat_train
 * starts epoch step / batches-per-epoch at that batch of the epoch's
 * seeded permutation (remat_loader_seek); a stream's batches are a pure
 * function of the step. States record the data's identity: a CRC-32 of a
 * data set's samples and labels as the loop sees them, or of a token
 * file's ids.
 */
#include "../session/session_api.h"
#include "safetensors.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <zlib.h>

typedef struct {
    int64_t batch, sample, classes; /* batch: the graph's (a micro-batch); sample: floats per image */
    int64_t rows;                   /* rows staged: micro-batches x batch */
    float *x;                       /* (rows, C, H, W) */
    int32_t *y;                     /* (rows) */
    remat_device dev;               /* x and y are remat_host_alloc's for it */
} staging;

/* Staging for `micro` micro-batches of the graph's batch. */
static remat_status staging_init(staging *st, const remat_session *s, const remat_model *m, const remat_dataset *d,
                                 int64_t micro) {
    memset(st, 0, sizeof *st);
    int64_t dims[REMAT_MAX_DIMS], ld[REMAT_MAX_DIMS], chw[3];
    const remat_graph *g = remat_session_graph(s);
    int nd = remat_node_shape(g, m->input, dims);
    int nl = remat_node_shape(g, m->logits, ld);
    if (nd < 2 || nl != 2)
        return remat__err(REMAT_INVALID, "the model's input must be (B, ...) and its logits (B, classes)");
    st->batch = dims[0];
    st->sample = 1;
    for (int i = 1; i < nd; i++) st->sample *= dims[i];
    st->classes = ld[1];
    remat_dataset_shape(d, chw);
    if (chw[0] * chw[1] * chw[2] != st->sample)
        return remat__err(REMAT_SHAPE,
                          "data set images are %lldx%lldx%lld (%lld values) but the model "
                          "takes %lld values per sample",
                          (long long)chw[0], (long long)chw[1], (long long)chw[2],
                          (long long)(chw[0] * chw[1] * chw[2]), (long long)st->sample);
    if (remat_dataset_classes(d) > st->classes)
        return remat__err(REMAT_SHAPE, "data set has %d classes but the model predicts %lld", remat_dataset_classes(d),
                          (long long)st->classes);
    st->rows = micro * st->batch;
    /* page-locked on a GPU: the step uploads the batch straight from it */
    st->dev = remat__session_opts(s)->device;
    st->x = remat_host_alloc(st->dev, (size_t)(st->rows * st->sample) * sizeof *st->x);
    st->y = remat_host_alloc(st->dev, (size_t)st->rows * sizeof *st->y);
    if (!st->x || !st->y) {
        remat_host_free(st->dev, st->x), remat_host_free(st->dev, st->y);
        return remat__err(REMAT_NOMEM, "out of memory for a batch");
    }
    return REMAT_OK;
}

static void staging_free(staging *st) { remat_host_free(st->dev, st->x), remat_host_free(st->dev, st->y); }

/* The caller's bindings of a model's input and labels, to restore. */
typedef struct {
    const void *x, *y;
} saved_binds;

static saved_binds save_binds(const remat_session *s, const remat_model *m) {
    return (saved_binds){remat_session_binding(s, m->input),
                         m->labels == REMAT_NONE ? NULL : remat_session_binding(s, m->labels)};
}

static void restore_binds(remat_session *s, const remat_model *m, saved_binds b) {
    remat_session_bind(s, m->input, b.x);
    if (m->labels != REMAT_NONE) remat_session_bind(s, m->labels, b.y);
}

/* One evaluated batch: the sum of its rows' losses and its correct rows. */
typedef struct {
    double loss;
    int64_t correct;
} eval_part;

remat_status remat_evaluate(remat_session *s, const remat_model *m, const remat_dataset *d, double *loss,
                            double *accuracy) {
    staging st;
    remat_status rc = staging_init(&st, s, m, d, 1);
    /* Several ranks: batch i is rank i % R's; each rank's results go in
     * slots of `per`, exchanged, and summed in batch order by all. A rank
     * that failed locally still takes part in the exchange (then agrees),
     * so that no rank waits for it. */
    remat_comm *comm = remat__session_comm(s);
    int R = remat_comm_size(comm), r = remat_comm_rank(comm);
    int64_t n = remat_dataset_size(d), nb = rc == REMAT_OK ? (n + st.batch - 1) / st.batch : 0;
    int64_t per = (nb + R - 1) / R;
    saved_binds sb = save_binds(s, m);
    float *logits = rc == REMAT_OK ? malloc((size_t)(st.batch * st.classes) * sizeof *logits) : NULL;
    int64_t *idx = rc == REMAT_OK ? malloc((size_t)st.batch * sizeof *idx) : NULL;
    eval_part *part = calloc((size_t)(per * (R + 1)) + 1, sizeof *part); /* (R, per) all, then (per) mine */
    if (rc == REMAT_OK && (!logits || !idx || !part)) rc = remat__err(REMAT_NOMEM, "out of memory for evaluation");
    if (rc == REMAT_OK) rc = remat_session_bind(s, m->input, st.x);
    if (rc == REMAT_OK) rc = remat_session_bind(s, m->labels, st.y);
    eval_part *mine = part ? part + per * R : NULL;
    for (int64_t t = 0; t < per && rc == REMAT_OK; t++) {
        int64_t b = t * R + r, first = b * st.batch;
        if (b >= nb) break;
        int64_t valid = n - first < st.batch ? n - first : st.batch;
        /* A last partial batch is padded with its first sample; the padded
         * rows are not counted. */
        for (int64_t i = 0; i < st.batch; i++) idx[i] = first + (i < valid ? i : 0);
        rc = remat_dataset_get(d, idx, st.batch, st.x, st.y);
        if (rc == REMAT_OK) rc = remat_session_forward(s, 0, NULL, m->logits, logits);
        for (int64_t i = 0; i < valid && rc == REMAT_OK; i++) {
            const float *z = logits + i * st.classes;
            int64_t best = 0;
            double mx = z[0], se = 0.0;
            for (int64_t c = 1; c < st.classes; c++)
                if (z[c] > z[best]) best = c;
            mx = z[best];
            for (int64_t c = 0; c < st.classes; c++) se += exp((double)z[c] - mx);
            mine[t].loss += log(se) + mx - (double)z[st.y[i]];
            mine[t].correct += best == st.y[i];
        }
    }
    if (R > 1) {
        rc = remat_comm_agree(comm, rc);
        if (rc == REMAT_OK) rc = remat_comm_allgather(comm, mine, (size_t)per * sizeof *mine, part);
    } else if (part) {
        memcpy(part, mine, (size_t)per * sizeof *mine);
    }
    if (rc == REMAT_OK) {
        double sum = 0.0;
        int64_t correct = 0;
        for (int64_t b = 0; b < nb; b++) {
            const eval_part *p = &part[(b % R) * per + b / R];
            sum += p->loss, correct += p->correct;
        }
        if (loss) *loss = n ? sum / (double)n : 0.0;
        if (accuracy) *accuracy = n ? (double)correct / (double)n : 0.0;
    }
    free(logits), free(idx), free(part);
    restore_binds(s, m, sb);
    staging_free(&st);
    return rc;
}

static void emit(const remat_train_opts *o, const remat_event *ev) {
    if (o->on_event) o->on_event(ev, o->user);
}

/* A resumed state at or past the steps asked for: a note, not an error
 * (the caller may still want the weights it loaded). */
static void nothing_left(const remat_train_opts *o, int64_t step, int64_t total) {
    char msg[256];
    snprintf(msg, sizeof msg, "the resumed state is at step %lld, %s %lld steps asked for: nothing to train",
             (long long)step, step == total ? "the end of the" : "past the", (long long)total);
    remat_event ev = {.kind = REMAT_EVENT_NOTE, .step = step, .message = msg};
    emit(o, &ev);
}

/* Training stops at the first NaN or infinity: in the loss, or in a
 * weight, buffer or gradient after an update (remat_session_check_finite
 * names it), or in the weights it starts from (step 0). Nothing after
 * that point could be trusted, and a caller that saves the weights would
 * otherwise write NaNs with a status of success. */
static remat_status check_weights(remat_session *s, int64_t step) {
    remat_status st = remat_session_check_finite(s);
    if (st != REMAT_INVALID) return st; /* REMAT_OK, or the device's own failure */
    char why[1024];
    snprintf(why, sizeof why, "%s", remat_last_error());
    if (step == 0) return remat__err(REMAT_INVALID, "cannot train from these weights: %s", why);
    return remat__err(REMAT_INVALID, "training diverged at step %lld: %s (try a smaller learning rate)",
                      (long long)step, why);
}

static remat_status check_loss(remat_session *s, float loss, int64_t step) {
    if (isfinite(loss)) return REMAT_OK;
    char why[1024] = "";
    if (remat_session_check_finite(s) != REMAT_OK) snprintf(why, sizeof why, "; %s", remat_last_error());
    return remat__err(REMAT_INVALID, "training diverged: the loss is %s at step %lld%s (try a smaller learning rate)",
                      isnan(loss) ? "NaN"
                      : loss > 0  ? "+inf"
                                  : "-inf",
                      (long long)step, why);
}

/* Where a step falls in its epoch: the epoch, the steps of it done before
 * this one (in_epoch) and before this run (first, a resume), its steps,
 * the batch, and when the epoch's steps of this run began. */
typedef struct {
    int64_t epoch, in_epoch, first, steps_in_epoch, batch;
    double t0;
} epoch_pos;

/* One training step on the bound batch, the same in both loops: the step,
 * its loss and weights checked, the update, the step's event, then the
 * state directory's turn and a stop on request; *step counts it. */
static remat_status train_step(remat_session *s, const remat_train_opts *o, remat__loop_state *ls, int64_t *step,
                               int64_t total, const epoch_pos *at) {
    float loss = 0.0f;
    double ts = remat__now();
    remat_status rc = remat_session_step(s, &loss);
    if (rc == REMAT_OK) rc = check_loss(s, loss, *step + 1);
    if (rc == REMAT_OK) rc = remat_session_update(s);
    if (rc == REMAT_OK) rc = check_weights(s, *step + 1);
    if (rc != REMAT_OK) return rc;
    double now = remat__now(), el = now - at->t0;
    int64_t done = ++*step, in_epoch = at->in_epoch + 1;
    remat_mem_stats mem;
    remat_session_mem(s, &mem);
    remat_event ev = {.kind = REMAT_EVENT_STEP,
                      .epoch = at->epoch,
                      .step = done,
                      .step_in_epoch = in_epoch,
                      .steps_in_epoch = at->steps_in_epoch,
                      .loss = loss,
                      .images_per_s = el > 0 ? (double)((in_epoch - at->first) * at->batch) / el : 0.0,
                      .seconds = el,
                      .peak_bytes = mem.peak[REMAT_MEM_TOTAL],
                      .step_seconds = now - ts};
    emit(o, &ev);
    rc = remat__loop_state_step(ls, s, done, done == total);
    if (rc == REMAT_OK) rc = remat__loop_state_stop(ls, s, done, total);
    return rc;
}

/* The identity of a data set for training states: size, shape, classes
 * and a CRC-32 of every sample (normalized, as trained on) and label. */
static remat_status dataset_identity(const remat_dataset *d, const staging *st, char *buf, size_t cap) {
    int64_t n = remat_dataset_size(d), chw[3];
    remat_dataset_shape(d, chw);
    int64_t *idx = malloc((size_t)st->batch * sizeof *idx);
    if (!idx) return remat__err(REMAT_NOMEM, "out of memory");
    uLong crc = crc32(0, NULL, 0);
    remat_status rc = REMAT_OK;
    for (int64_t first = 0; first < n && rc == REMAT_OK; first += st->batch) {
        int64_t k = n - first < st->batch ? n - first : st->batch;
        for (int64_t i = 0; i < k; i++) idx[i] = first + i;
        rc = remat_dataset_get(d, idx, k, st->x, st->y);
        if (rc != REMAT_OK) break;
        crc = crc32(crc, (const Bytef *)st->x, (uInt)((size_t)(k * st->sample) * sizeof *st->x));
        crc = crc32(crc, (const Bytef *)st->y, (uInt)((size_t)k * sizeof *st->y));
    }
    free(idx);
    if (rc == REMAT_OK)
        snprintf(buf, cap, "data set: %lld samples of %lldx%lldx%lld, %d classes, CRC-32 %08lx", (long long)n,
                 (long long)chw[0], (long long)chw[1], (long long)chw[2], remat_dataset_classes(d), (unsigned long)crc);
    return rc;
}

remat_status remat_train(remat_session *s, const remat_model *m, const remat_dataset *train, const remat_dataset *test,
                         const remat_train_opts *o) {
    if (!o || (o->epochs <= 0 && o->steps <= 0))
        return remat__err(REMAT_INVALID, "training needs a positive number of epochs or steps");
    remat_dist_info di;
    remat_session_dist(s, &di);
    staging st; /* this rank's micro-batches of a step */
    remat_status rc = staging_init(&st, s, m, train, di.local_micro_batches);
    if (rc != REMAT_OK) return rc;
    int64_t batch = di.micro_batches * st.batch; /* the global batch */
    if (o->batch && o->batch != batch) {
        staging_free(&st);
        if (di.micro_batches == 1)
            return remat__err(REMAT_INVALID, "batch %lld differs from the graph's batch %lld", (long long)o->batch,
                              (long long)st.batch);
        return remat__err(REMAT_INVALID,
                          "batch %lld differs from the step's %lld micro-batches of the graph's %lld "
                          "rows (%lld)",
                          (long long)o->batch, (long long)di.micro_batches, (long long)st.batch, (long long)batch);
    }
    saved_binds sb = save_binds(s, m);
    remat_loader *ld = NULL;
    rc = remat_loader_create(&ld, train, batch, 1, o->seed);
    if (rc == REMAT_OK && remat_loader_batches(ld) == 0)
        rc = remat__err(REMAT_INVALID, "the training set (%lld samples) is smaller than one batch (%lld)",
                        (long long)remat_dataset_size(train), (long long)batch);
    if (rc == REMAT_OK) rc = remat_session_bind(s, m->input, st.x);
    if (rc == REMAT_OK) rc = remat_session_bind(s, m->labels, st.y);
    int64_t per_epoch = rc == REMAT_OK ? remat_loader_batches(ld) : 0;
    int64_t total = o->steps > 0 ? o->steps : o->epochs * per_epoch;
    int64_t step = 0, row0 = di.first_micro_batch * st.batch; /* this rank's first row of a batch */
    char data_id[256] = "";
    remat__loop_state ls = {.lock_fd = -1};
    if (rc == REMAT_OK && (o->state_dir || o->resume)) rc = dataset_identity(train, &st, data_id, sizeof data_id);
    if (rc == REMAT_OK) rc = remat__loop_state_begin(&ls, s, o, batch, per_epoch, data_id, &step);
    if (rc == REMAT_OK && step > 0 && step >= total) nothing_left(o, step, total);
    if (rc == REMAT_OK) rc = check_weights(s, 0);
    if (rc == REMAT_OK) rc = remat__loop_state_stop(&ls, s, step, total);
    for (int64_t epoch = per_epoch ? step / per_epoch : 0; rc == REMAT_OK && step < total; epoch++) {
        int64_t first = step - epoch * per_epoch; /* batches of this epoch done before (a resume) */
        remat_loader_seek(ld, epoch, first);
        double t0 = remat__now();
        int64_t in_epoch = first;
        int64_t this_epoch = total - epoch * per_epoch < per_epoch ? total - epoch * per_epoch : per_epoch;
        while (rc == REMAT_OK && step < total && remat_loader_next_rows(ld, row0, st.rows, st.x, st.y)) {
            const epoch_pos at = {epoch, in_epoch++, first, this_epoch, batch, t0};
            rc = train_step(s, o, &ls, &step, total, &at);
        }
        double train_s = remat__now() - t0;
        if (rc == REMAT_OK && test) {
            remat_event ev = {.kind = REMAT_EVENT_EVAL, .epoch = epoch, .step = step, .seconds = train_s};
            rc = remat_evaluate(s, m, test, &ev.loss, &ev.accuracy); /* restores st's bindings */
            if (rc == REMAT_OK) emit(o, &ev);
        }
    }
    remat__loop_state_end(&ls);
    remat_loader_destroy(ld);
    restore_binds(s, m, sb);
    staging_free(&st);
    return rc;
}

/* ------------------------------------------------------------ streams */

/* Elements of a node's output, 0 for REMAT_NONE. */
static int64_t node_numel(const remat_graph *g, remat_node n) {
    int64_t d[REMAT_MAX_DIMS], k = 1;
    int nd = n == REMAT_NONE ? -1 : remat_node_shape(g, n, d);
    if (nd < 0) return 0;
    for (int i = 0; i < nd; i++) k *= d[i];
    return k;
}

/* remat_train_stream, with the data's identity for training states (NULL:
 * the caller's source, which only it can name, through o->run). */
static remat_status train_stream(remat_session *s, const remat_model *m, remat_batch_fn next, void *user,
                                 const remat_train_opts *o, const char *data_id) {
    if (!s || !m || !next || !o)
        return remat__err(REMAT_INVALID, "remat_train_stream: NULL session, model, source or options");
    if (o->steps < 1)
        return remat__err(REMAT_INVALID, "training from a batch source needs steps per epoch >= 1 (got %lld)",
                          (long long)o->steps);
    const remat_graph *g = remat_session_graph(s);
    int64_t xd[REMAT_MAX_DIMS];
    if (remat_node_shape(g, m->input, xd) < 1) return remat__err(REMAT_INVALID, "the model has no input node");
    remat_dist_info di;
    remat_session_dist(s, &di);
    int64_t K = di.micro_batches, q = di.local_micro_batches, batch = K * xd[0];
    if (o->batch && o->batch != batch)
        return remat__err(REMAT_INVALID,
                          "batch %lld differs from the step's %lld micro-batch%s of the graph's batch "
                          "%lld",
                          (long long)o->batch, (long long)K, K == 1 ? "" : "es", (long long)xd[0]);
    int64_t nx = node_numel(g, m->input), ny = node_numel(g, m->labels);
    /* this rank's q micro-batches, one after the other; float and int32
     * are both 4 bytes: one allocation size serves either */
    unsigned char *x = malloc((size_t)(q * nx) * 4), *y = ny ? malloc((size_t)(q * ny) * 4) : NULL;
    saved_binds sb = save_binds(s, m);
    remat_status rc = REMAT_OK;
    if (!x || (ny && !y)) rc = remat__err(REMAT_NOMEM, "out of memory for a batch");
    if (rc == REMAT_OK) rc = remat_session_bind(s, m->input, x);
    if (rc == REMAT_OK && ny) rc = remat_session_bind(s, m->labels, y);
    int64_t epochs = o->epochs > 0 ? o->epochs : 1, step = 0, total = epochs * o->steps;
    remat__loop_state ls = {.lock_fd = -1};
    if (rc == REMAT_OK) rc = remat__loop_state_begin(&ls, s, o, batch, o->steps, data_id, &step);
    if (rc == REMAT_OK && step > 0 && step >= total) nothing_left(o, step, total);
    if (rc == REMAT_OK) rc = check_weights(s, 0);
    if (rc == REMAT_OK) rc = remat__loop_state_stop(&ls, s, step, total);
    for (int64_t epoch = step / o->steps; epoch < epochs && rc == REMAT_OK; epoch++) {
        double t0 = remat__now();
        int64_t first = step - epoch * o->steps; /* steps of this epoch done before (a resume) */
        for (int64_t i = first; i < o->steps && rc == REMAT_OK; i++) {
            /* micro-batch k of step t is the source's step t * K + k */
            for (int64_t j = 0; j < q && rc == REMAT_OK; j++)
                rc = next(user, step * K + di.first_micro_batch + j, x + (size_t)(j * nx) * 4,
                          y ? y + (size_t)(j * ny) * 4 : NULL);
            /* the source is the caller's code: a rank whose source failed
             * must not leave the others waiting in the step */
            if (di.ranks > 1) rc = remat_comm_agree(remat__session_comm(s), rc);
            const epoch_pos at = {epoch, i, first, o->steps, batch, t0};
            if (rc == REMAT_OK) rc = train_step(s, o, &ls, &step, total, &at);
        }
    }
    remat__loop_state_end(&ls);
    restore_binds(s, m, sb);
    free(x), free(y);
    return rc;
}

remat_status remat_train_stream(remat_session *s, const remat_model *m, remat_batch_fn next, void *user,
                                const remat_train_opts *o) {
    return train_stream(s, m, next, user, o, NULL);
}

typedef struct {
    const remat_tokens *t;
    int64_t batch, context;
    uint64_t seed;
} token_source;

static remat_status next_tokens(void *user, int64_t step, void *input, void *labels) {
    const token_source *ts = user;
    return remat_tokens_batch(ts->t, ts->batch, ts->context, ts->seed, step, input, labels);
}

remat_status remat_train_tokens(remat_session *s, const remat_model *m, const remat_tokens *t,
                                const remat_train_opts *o) {
    if (!s || !m || !t || !o)
        return remat__err(REMAT_INVALID, "remat_train_tokens: NULL session, model, tokens or options");
    const remat_graph *g = remat_session_graph(s);
    int64_t xd[REMAT_MAX_DIMS], yd[REMAT_MAX_DIMS], ld[REMAT_MAX_DIMS];
    int nx = remat_node_shape(g, m->input, xd);
    int ny = m->labels == REMAT_NONE ? -1 : remat_node_shape(g, m->labels, yd);
    int nl = m->logits == REMAT_NONE ? -1 : remat_node_shape(g, m->logits, ld);
    if (nx != 2 || remat_node_dtype(g, m->input) != REMAT_I32)
        return remat__err(REMAT_INVALID, "training on tokens needs a language model whose input is (batch, "
                                         "context) int32 token ids; this model's input is not");
    if (ny != 1 || remat_node_dtype(g, m->labels) != REMAT_I32 || yd[0] != xd[0] * xd[1])
        return remat__err(REMAT_INVALID,
                          "training on tokens needs labels of (batch * context) = %lld int32 "
                          "next tokens; this model's labels are not",
                          (long long)(xd[0] * xd[1]));
    if (nl < 1) return remat__err(REMAT_INVALID, "training on tokens needs the model's logits (its vocabulary size)");
    remat_status rc = remat_tokens_check(t, ld[nl - 1]);
    if (rc != REMAT_OK) return rc;
    if (remat_tokens_count(t) < xd[1] + 1)
        return remat__err(REMAT_INVALID,
                          "the token file has %lld tokens, fewer than one window of context + 1 "
                          "= %lld tokens",
                          (long long)remat_tokens_count(t), (long long)(xd[1] + 1));
    token_source ts = {.t = t, .batch = xd[0], .context = xd[1], .seed = o->seed};
    char data_id[160] = "";
    if (o->state_dir || o->resume) {
        /* the ids as little-endian uint16, in pieces */
        uLong crc = crc32(0, NULL, 0);
        int64_t n = remat_tokens_count(t);
        for (int64_t i = 0; i < n; i += 4096) {
            int k = n - i < 4096 ? (int)(n - i) : 4096;
            unsigned char le[2 * 4096];
            for (int j = 0; j < k; j++) {
                uint16_t id = remat_tokens_get(t, i + j);
                le[2 * j] = (unsigned char)(id & 0xff), le[2 * j + 1] = (unsigned char)(id >> 8);
            }
            crc = crc32(crc, le, (uInt)(2 * k));
        }
        snprintf(data_id, sizeof data_id, "tokens: %lld ids, CRC-32 %08lx", (long long)n, (unsigned long)crc);
    }
    return train_stream(s, m, next_tokens, &ts, o, data_id[0] ? data_id : NULL);
}
