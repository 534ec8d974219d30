/* test_state.c: training states (remat.h, "training state"; issue 12).
 *
 * A resumed run continues bitwise as if it had never stopped: 20 steps
 * straight against 10 steps, a state, a new session resumed from it and 10
 * more steps give the same losses, weights, optimizer state and BatchNorm
 * statistics, bit for bit: cnn with dropout (AdamW) from a batch source
 * and from an IDX data set through remat_train (the loader's position
 * mid-epoch, evaluations between epochs), and a BatchNorm network (SGD
 * with Nesterov momentum); also when the resumed session uses another
 * strategy and budget. Refusals name the file and the difference (another
 * model, optimizer, batch, seed, data, thread count, run option; a
 * truncated or damaged file), and a refused load leaves the session as it
 * was. The reader is fuzzed: every truncation of a small state and a
 * flipped byte at every header position and at data positions fail with
 * an error naming the file, never a crash (the sanitizer build runs this
 * too). The atomic writer: unique temporaries, stale ones removed, errors
 * naming the path.
 *
 * `test_state --kill CLI` is the kill test: `remat train --save-every 1`
 * killed with SIGKILL at 20 moments drawn from a fixed seed (some during
 * a save: the temporary a killed save leaves behind shows it); after each
 * kill the newest intact state is found and never behind the one before,
 * and the run resumed to its end writes the same final weights, byte for
 * byte, as an uninterrupted run.
 */
#include "remat.h"
#include "check.h"
#include "testmodels.h"
#include "train/safetensors.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------ helpers */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void make_tmpdir(char *dir, size_t cap, const char *tag) {
    snprintf(dir, cap, "/tmp/remat-state-%s-XXXXXX", tag);
    CHECK(mkdtemp(dir) != NULL);
}

/* Removes every file in dir (one level), then dir. */
static void rm_rf(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    for (struct dirent *e; (e = readdir(d));) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        char p[4096];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        unlink(p);
    }
    closedir(d);
    rmdir(dir);
}

/* Files in dir whose name contains `part`. */
static int count_files(const char *dir, const char *part) {
    DIR *d = opendir(dir);
    int n = 0;
    if (!d) return 0;
    for (struct dirent *e; (e = readdir(d));) n += strstr(e->d_name, part) != NULL && e->d_name[0] != '\0';
    closedir(d);
    return n;
}

static unsigned char *read_all(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    *n = 0;
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(len > 0 ? (size_t)len : 1);
    if (b && len > 0 && fread(b, 1, (size_t)len, f) != (size_t)len) len = 0;
    fclose(f);
    *n = len > 0 ? (size_t)len : 0;
    return b;
}

static void write_all(const char *path, const void *b, size_t n) {
    unlink(path); /* a new file: ext4 flushes a truncated one on close */
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (!f) return;
    CHECK(fwrite(b, 1, n, f) == n);
    fclose(f);
}

/* Every tensor of a and b has the same name, dtype, shape and bytes, and
 * the metadata entries `keys` (NULL-terminated) are equal. */
static int same_state(const char *a, const char *b, const char *const *keys, const char *what) {
    remat__st *fa = NULL, *fb = NULL;
    CHECK_OK(remat__st_open_checked(&fa, a));
    CHECK_OK(remat__st_open_checked(&fb, b));
    int ok = fa && fb && remat__st_count(fa) == remat__st_count(fb);
    for (int i = 0; ok && i < remat__st_count(fa); i++) {
        remat__st_tensor x, y;
        CHECK_OK(remat__st_get(fa, i, &x));
        int j = remat__st_find(fb, x.name);
        ok = j >= 0 && remat__st_get(fb, j, &y) == REMAT_OK && !strcmp(x.dtype, y.dtype) && x.bytes == y.bytes &&
             x.ndim == y.ndim && !memcmp(x.dims, y.dims, sizeof x.dims) && !memcmp(x.data, y.data, x.bytes);
        CHECK_MSG(ok, "%s: tensor '%s' differs between %s and %s", what, x.name, a, b);
    }
    for (int k = 0; ok && keys && keys[k]; k++) {
        const char *va = remat__st_metadata(fa, keys[k]), *vb = remat__st_metadata(fb, keys[k]);
        ok = va && vb && !strcmp(va, vb);
        CHECK_MSG(ok, "%s: metadata %s differs: %s vs %s", what, keys[k], va ? va : "-", vb ? vb : "-");
    }
    remat__st_close(fa);
    remat__st_close(fb);
    return ok;
}

/* ------------------------------------------------------------- models */

typedef enum { CNN, BNNET, TINY, MLP } model_kind;

typedef struct {
    remat_graph *g;
    remat_model m;
    remat_session *s;
} run;

typedef struct {
    model_kind kind;
    int64_t batch;
    remat_optim_kind optim;
    uint64_t seed;
    int threads;
    remat_precision precision;
    remat_strategy strategy;
    size_t budget;
} cfg;

static cfg default_cfg(model_kind k) {
    return (cfg){.kind = k,
                 .batch = 4,
                 .optim = k == BNNET ? REMAT_OPTIM_SGD : REMAT_OPTIM_ADAMW,
                 .seed = 42,
                 .threads = 2,
                 .strategy = REMAT_STRATEGY_ALL};
}

/* A small linear classifier: input (B, 3), fc (2), cross-entropy: a
 * state file of about a kilobyte, for the fuzz test. */
static remat_status build_tiny(remat_graph *g, remat_model *m, int64_t batch) {
    int64_t xd[2] = {batch, 3};
    m->input = remat_input(g, "input", REMAT_F32, 2, xd);
    m->labels = remat_input(g, "target", REMAT_I32, 1, &batch);
    m->logits = remat_linear(g, "fc", m->input, 2, 1);
    m->loss = remat_cross_entropy(g, m->logits, m->labels);
    return remat_graph_status(g);
}

static remat_status open_run(run *r, cfg c) {
    memset(r, 0, sizeof *r);
    remat_status st = remat_graph_create(&r->g);
    if (st != REMAT_OK) return st;
    if (c.kind == CNN || c.kind == MLP) {
        remat_model_opts mo;
        remat_model_opts_default(&mo);
        remat_model_opts_for(&mo, c.kind == CNN ? "cnn" : "mlp");
        mo.batch = c.batch;
        mo.height = mo.width = 12;
        st = remat_model_build(r->g, &mo, &r->m);
    } else if (c.kind == BNNET) {
        st = build_bnnet(r->g, &r->m, c.batch);
    } else {
        st = build_tiny(r->g, &r->m, c.batch);
    }
    if (st != REMAT_OK) return st;
    remat_session_opts so;
    remat_session_opts_default(&so);
    so.threads = c.threads;
    so.precision = c.precision;
    so.seed = c.seed;
    so.strategy = c.strategy;
    so.budget = c.budget;
    remat_optim_opts oo;
    remat_optim_opts_default(&oo, c.optim);
    if (c.optim == REMAT_OPTIM_SGD) oo.momentum = 0.9f, oo.nesterov = 1, oo.lr = 0.05f;
    so.optim = &oo;
    return remat_session_create(&r->s, r->g, r->m.loss, &so);
}

static void close_run(run *r) {
    remat_session_destroy(r->s);
    remat_graph_destroy(r->g);
    memset(r, 0, sizeof *r);
}

/* Batches as a pure function of the step: inputs in [-1, 1), labels in
 * [0, 10) (bnnet and cnn have 10 classes, tiny 2). */
typedef struct {
    int64_t nx, ny, classes;
} synth;

static remat_status synth_next(void *user, int64_t step, void *input, void *labels) {
    const synth *sy = user;
    float *x = input;
    int32_t *y = labels;
    for (int64_t i = 0; i < sy->nx; i++) {
        uint32_t h = (uint32_t)(i * 2654435761u) ^ (uint32_t)(step * 40503u + 17u);
        h ^= h >> 15, h *= 2246822519u, h ^= h >> 13;
        x[i] = (float)(h & 0xffff) / 32768.0f - 1.0f;
    }
    for (int64_t i = 0; i < sy->ny; i++) y[i] = (int32_t)((i * 7 + step * 3) % sy->classes);
    return REMAT_OK;
}

static synth synth_for(const run *r) {
    int64_t d[REMAT_MAX_DIMS], l[REMAT_MAX_DIMS];
    int nd = remat_node_shape(r->g, r->m.input, d), nl = remat_node_shape(r->g, r->m.logits, l);
    synth sy = {1, d[0], l[nl - 1]};
    for (int i = 0; i < nd; i++) sy.nx *= d[i];
    return sy;
}

/* What a training call reports. */
typedef struct {
    double loss[64];
    int n;
    double eval_loss[16], eval_acc[16];
    int64_t eval_step[16];
    int n_eval;
    int saves, resumes, notes;
    int64_t resumed_at;
    char last_note[1024];
} trace;

static void on_event(const remat_event *ev, void *user) {
    trace *t = user;
    switch (ev->kind) {
    case REMAT_EVENT_STEP:
        if (t->n < 64) t->loss[t->n++] = ev->loss;
        break;
    case REMAT_EVENT_EVAL:
        if (t->n_eval < 16) {
            t->eval_loss[t->n_eval] = ev->loss, t->eval_acc[t->n_eval] = ev->accuracy;
            t->eval_step[t->n_eval++] = ev->step;
        }
        break;
    case REMAT_EVENT_SAVE: t->saves++; break;
    case REMAT_EVENT_RESUME:
        t->resumes++;
        t->resumed_at = ev->path ? ev->step : -1;
        break;
    case REMAT_EVENT_NOTE:
        t->notes++;
        snprintf(t->last_note, sizeof t->last_note, "%s", ev->message ? ev->message : "");
        break;
    }
}

static int same_doubles(const double *a, const double *b, int n) { return memcmp(a, b, (size_t)n * sizeof *a) == 0; }

/* ------------------------------------------- bitwise resume: streams */

static const char *const same_keys[] = {"step",  "optim.step", "rng.seed", "rng.step", "data.step",
                                        "graph", "optim",      "batch",    NULL};

/* 20 steps straight against 10, a state, and 10 more in a new session
 * (of configuration `later`, whose strategy and budget may differ). */
static void resume_stream(cfg c, cfg later, const char *what) {
    char dir[256], ref[512], fin[512];
    make_tmpdir(dir, sizeof dir, "stream");
    snprintf(ref, sizeof ref, "%s/straight.safetensors", dir);
    snprintf(fin, sizeof fin, "%s/run/state-000000000020.safetensors", dir);
    char sdir[400];
    snprintf(sdir, sizeof sdir, "%s/run", dir);
    double t0 = now_s();

    run a;
    trace ta = {0};
    CHECK_OK(open_run(&a, c));
    synth sy = synth_for(&a);
    remat_train_opts to = {.epochs = 1, .steps = 20, .on_event = on_event, .user = &ta};
    CHECK_OK(remat_train_stream(a.s, &a.m, synth_next, &sy, &to));
    CHECK_OK(remat_state_save(a.s, NULL, &(remat_train_progress){20, 0, 20}, ref));
    close_run(&a);

    run b;
    trace tb = {0};
    CHECK_OK(open_run(&b, c));
    to = (remat_train_opts){
        .epochs = 1, .steps = 10, .on_event = on_event, .user = &tb, .state_dir = sdir, .save_every = 10};
    CHECK_OK(remat_train_stream(b.s, &b.m, synth_next, &sy, &to));
    CHECK(tb.saves == 1);
    close_run(&b);

    run r;
    trace tc = {0};
    CHECK_OK(open_run(&r, later));
    remat_plan_summary ps = {0};
    if (!r.s) {
        close_run(&r);
        rm_rf(sdir);
        rm_rf(dir);
        return;
    }
    CHECK_OK(remat_session_plan(r.s, &ps));
    /* 2 epochs of 10: the batches are the step's, whatever the epochs */
    to = (remat_train_opts){
        .epochs = 2, .steps = 10, .on_event = on_event, .user = &tc, .state_dir = sdir, .resume = sdir};
    CHECK_OK(remat_train_stream(r.s, &r.m, synth_next, &sy, &to));
    CHECK(tc.resumes == 1 && tc.resumed_at == 10);
    CHECK(remat_session_step_index(r.s) == 20);
    close_run(&r);

    CHECK_MSG(tb.n == 10 && same_doubles(tb.loss, ta.loss, 10), "%s: the first 10 losses differ", what);
    CHECK_MSG(tc.n == 10 && same_doubles(tc.loss, ta.loss + 10, 10), "%s: the resumed losses differ", what);
    CHECK(same_state(ref, fin, same_keys, what));
    printf("%-58s %s, %lld recomputations: same bits (%.2f s)\n", what, remat_strategy_str(ps.strategy),
           (long long)ps.recomputations, now_s() - t0);
    rm_rf(sdir);
    rm_rf(dir);
}

/* The smallest budget of a few tried that the optimal strategy fits. */
static size_t tight_budget(cfg c) {
    run r;
    c.strategy = REMAT_STRATEGY_ALL;
    if (open_run(&r, c) != REMAT_OK) return 0;
    remat_plan_summary ps;
    remat_session_plan(r.s, &ps);
    size_t all = ps.held_bytes, blocks = ps.held_bytes - ps.arena_bytes;
    close_run(&r);
    for (int pct = 40; pct <= 100; pct += 10) {
        size_t b = blocks + (all - blocks) * (size_t)pct / 100;
        c.strategy = REMAT_STRATEGY_OPTIMAL;
        c.budget = b;
        if (open_run(&r, c) == REMAT_OK) {
            remat_session_plan(r.s, &ps);
            close_run(&r);
            if (ps.recomputations > 0) return b;
        } else {
            close_run(&r);
        }
    }
    return all;
}

/* ---------------------------------------- bitwise resume: a data set */

#define N_SAMPLES 22 /* 5 batches of 4 per epoch, 2 samples dropped */

static void write_idx(const char *dir, char *img, char *lab, size_t cap) {
    snprintf(img, cap, "%s/images-idx3-ubyte", dir);
    snprintf(lab, cap, "%s/labels-idx1-ubyte", dir);
    FILE *f = fopen(img, "wb");
    unsigned char h[16] = {0, 0, 8, 3, 0, 0, 0, N_SAMPLES, 0, 0, 0, 12, 0, 0, 0, 12};
    fwrite(h, 1, 16, f);
    for (int i = 0; i < N_SAMPLES * 12 * 12; i++) fputc((i * 37 + i / 144 * 11) % 251, f);
    fclose(f);
    f = fopen(lab, "wb");
    unsigned char hl[8] = {0, 0, 8, 1, 0, 0, 0, N_SAMPLES};
    fwrite(hl, 1, 8, f);
    for (int i = 0; i < N_SAMPLES; i++) fputc((i * 3) % 10, f);
    fclose(f);
}

static void resume_dataset(void) {
    char dir[256], img[512], lab[512], sdir[400], ref[512], fin[512];
    make_tmpdir(dir, sizeof dir, "data");
    write_idx(dir, img, lab, sizeof img);
    snprintf(sdir, sizeof sdir, "%s/run", dir);
    snprintf(ref, sizeof ref, "%s/straight.safetensors", dir);
    snprintf(fin, sizeof fin, "%s/state-000000000020.safetensors", sdir);
    remat_dataset *d = NULL;
    CHECK_OK(remat_dataset_load_idx(&d, img, lab));
    double t0 = now_s();
    cfg c = default_cfg(CNN);

    run a;
    trace ta = {0};
    CHECK_OK(open_run(&a, c));
    remat_train_opts to = {.steps = 20, .batch = 4, .seed = 9, .on_event = on_event, .user = &ta};
    CHECK_OK(remat_train(a.s, &a.m, d, d, &to));
    CHECK_OK(remat_state_save(a.s, NULL, NULL, ref));
    close_run(&a);

    /* 12 steps: epoch 2, 2 batches into it; states at 5, 10 and 12 */
    run b;
    trace tb = {0};
    CHECK_OK(open_run(&b, c));
    to = (remat_train_opts){.steps = 12,
                            .batch = 4,
                            .seed = 9,
                            .on_event = on_event,
                            .user = &tb,
                            .state_dir = sdir,
                            .save_every = 5,
                            .keep = 2};
    CHECK_OK(remat_train(b.s, &b.m, d, d, &to));
    close_run(&b);
    CHECK(tb.saves == 3);
    int64_t *steps = NULL;
    int n = 0;
    CHECK_OK(remat_state_list(sdir, &steps, &n));
    CHECK_MSG(n == 2 && steps[0] == 12 && steps[1] == 10, "keep 2: %d states left, newest %lld", n,
              n ? (long long)steps[0] : -1LL);
    free(steps);
    remat__st *f = NULL;
    char st12[512];
    snprintf(st12, sizeof st12, "%s/state-000000000012.safetensors", sdir);
    CHECK_OK(remat__st_open_checked(&f, st12));
    const char *ep = f ? remat__st_metadata(f, "data.epoch") : NULL,
               *pos = f ? remat__st_metadata(f, "data.position") : NULL;
    CHECK_MSG(ep && pos && !strcmp(ep, "2") && !strcmp(pos, "2"), "data position %s/%s, expected epoch 2, batch 2",
              ep ? ep : "-", pos ? pos : "-");
    remat__st_close(f);

    /* the rest in a new session, planned with sqrt */
    run r;
    trace tc = {0};
    cfg later = c;
    later.strategy = REMAT_STRATEGY_SQRT;
    CHECK_OK(open_run(&r, later));
    to = (remat_train_opts){.steps = 20,
                            .batch = 4,
                            .seed = 9,
                            .on_event = on_event,
                            .user = &tc,
                            .state_dir = sdir,
                            .resume = sdir,
                            .keep = 2};
    CHECK_OK(remat_train(r.s, &r.m, d, d, &to));
    close_run(&r);
    CHECK(tc.resumed_at == 12);
    CHECK_MSG(tb.n == 12 && same_doubles(tb.loss, ta.loss, 12), "data set: the first 12 losses differ");
    CHECK_MSG(tc.n == 8 && same_doubles(tc.loss, ta.loss + 12, 8), "data set: the resumed losses differ");
    /* evaluations after each epoch (steps 5, 10, 15, 20); the resumed run
     * makes the last two, the interrupted one evaluated at step 12 too */
    CHECK(ta.n_eval == 4 && tc.n_eval == 2 && tb.n_eval == 3);
    CHECK_MSG(tc.n_eval == 2 && same_doubles(tc.eval_loss, ta.eval_loss + 2, 2) &&
                  same_doubles(tc.eval_acc, ta.eval_acc + 2, 2),
              "data set: the evaluations after the resume differ");
    CHECK(same_state(ref, fin, same_keys, "data set"));

    /* another data set (one sample fewer: the same batches per epoch) is refused */
    run x;
    CHECK_OK(open_run(&x, c));
    CHECK_OK(remat_dataset_truncate(d, N_SAMPLES - 1));
    to = (remat_train_opts){.steps = 24, .batch = 4, .seed = 9, .resume = sdir};
    remat_status st = remat_train(x.s, &x.m, d, NULL, &to);
    CHECK_MSG(st == REMAT_INVALID && strstr(remat_last_error(), "the training data differs") &&
                  strstr(remat_last_error(), "21 samples"),
              "another data set: %s", remat_last_error());
    /* and so is another data order's seed */
    remat_dataset_destroy(d);
    d = NULL;
    CHECK_OK(remat_dataset_load_idx(&d, img, lab));
    to.seed = 10;
    st = remat_train(x.s, &x.m, d, NULL, &to);
    CHECK_MSG(st == REMAT_INVALID && strstr(remat_last_error(), "the data order's seed"), "another data seed: %s",
              remat_last_error());
    close_run(&x);
    printf("%-58s same bits (%.2f s)\n", "cnn on an IDX data set, resumed mid-epoch under sqrt", now_s() - t0);
    remat_dataset_destroy(d);
    rm_rf(sdir);
    unlink(img), unlink(lab);
    rm_rf(dir);
}

/* ------------------------------------------------------------ refusals */

/* All parameter and buffer values of a session, for "unchanged" checks. */
static float *snapshot(remat_session *s, size_t *n) {
    size_t total = 0;
    for (int i = 0; i < remat_session_param_count(s); i++) {
        remat_param_info p;
        remat_session_param(s, i, &p);
        total += (size_t)p.numel;
    }
    float *v = malloc((total ? total : 1) * sizeof *v);
    size_t at = 0;
    for (int i = 0; v && i < remat_session_param_count(s); i++) {
        remat_param_info p;
        remat_session_param(s, i, &p);
        remat_session_read_param(s, i, REMAT_PARAM_VALUE, v + at);
        at += (size_t)p.numel;
    }
    *n = total;
    return v;
}

static int notes_seen;
static char note_path[1024];
static void count_note(const char *path, const char *why, void *user) {
    (void)why, (void)user;
    notes_seen++;
    snprintf(note_path, sizeof note_path, "%s", path);
}

static void refusals(void) {
    char dir[256], path[512], half[512], flip[512], weights[512];
    make_tmpdir(dir, sizeof dir, "refuse");
    snprintf(path, sizeof path, "%s/a.safetensors", dir);
    snprintf(half, sizeof half, "%s/half.safetensors", dir);
    snprintf(flip, sizeof flip, "%s/flip.safetensors", dir);
    snprintf(weights, sizeof weights, "%s/weights.safetensors", dir);
    double t0 = now_s();
    cfg c = default_cfg(CNN);
    run a;
    CHECK_OK(open_run(&a, c));
    synth sy = synth_for(&a);
    remat_train_opts to = {.epochs = 1, .steps = 3};
    CHECK_OK(remat_train_stream(a.s, &a.m, synth_next, &sy, &to));
    static const char *const run_a[] = {"--opt", "x", NULL};
    remat_state_opts so = {.data = "data A", .data_seed = 5, .run = run_a};
    CHECK_OK(remat_state_save(a.s, &so, NULL, path));
    CHECK_OK(remat_safetensors_save(a.s, weights));
    close_run(&a);

    static const char *const run_b[] = {"--opt", "y", NULL};
    static const char *const run_c[] = {"--opt", "x", "--other", "1", NULL};
    cfg mlp = c, sgd = c, b8 = c, seed = c, threads = c, sq = c, opt = c, bf16 = c;
    bf16.precision = REMAT_PRECISION_BF16;
    mlp.kind = MLP, sgd.optim = REMAT_OPTIM_SGD, b8.batch = 8, seed.seed = 7, threads.threads = 1;
    sq.strategy = REMAT_STRATEGY_SQRT;
    opt.strategy = REMAT_STRATEGY_OPTIMAL, opt.budget = tight_budget(c);
    remat_state_opts data_b = so, rb = so, rnone = so, rc2 = so;
    data_b.data = "data B", rb.run = run_b, rnone.run = NULL, rc2.run = run_c;
    const struct {
        const char *what;
        cfg c;
        const remat_state_opts *o;
        remat_status want;
        const char *needle;
    } cases[] = {
        {"another model (mlp)", mlp, &so, REMAT_SHAPE, "has no tensor 'fc1.weight'"},
        {"another optimizer (SGD)", sgd, &so, REMAT_INVALID,
         "the optimizer differs: the state has 'adamw', this run 'sgd'"},
        {"another batch (8)", b8, &so, REMAT_INVALID,
         "the batch (rows per optimizer step) differs: the state has '4', this run '8'"},
        {"another seed (7)", seed, &so, REMAT_INVALID, "the seed differs: the state has '42', this run '7'"},
        {"another thread count (1)", threads, &so, REMAT_INVALID, "the number of CPU threads"},
        {"another precision (bf16)", bf16, &so, REMAT_INVALID,
         "the precision (--precision: bf16 rounds what fp32 keeps) differs: the state has 'fp32', this run 'bf16'"},
        {"another data set", c, &data_b, REMAT_INVALID,
         "the training data differs: the state has 'data A', this run 'data B'"},
        {"another run option", c, &rb, REMAT_INVALID, "--opt differs: the state has 'x', this run 'y'"},
        {"a run option missing", c, &rnone, REMAT_INVALID, "--opt differs: the state has 'x', this run none"},
        {"a run option added", c, &rc2, REMAT_INVALID, "--other differs: the state has none, this run '1'"},
        {"another strategy (sqrt): accepted", sq, &so, REMAT_OK, NULL},
        {"optimal under a budget: accepted", opt, &so, REMAT_OK, NULL},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        run r;
        CHECK_OK(open_run(&r, cases[k].c));
        if (!r.s) continue;
        size_t n0, n1;
        float *before = snapshot(r.s, &n0);
        remat_train_progress at = {0};
        remat_status st = remat_state_load(r.s, cases[k].o, path, &at);
        float *after = snapshot(r.s, &n1);
        if (cases[k].want == REMAT_OK) {
            CHECK_MSG(st == REMAT_OK && at.data_step == 3 && remat_session_step_index(r.s) == 3, "%s: %s",
                      cases[k].what, remat_last_error());
        } else {
            CHECK_MSG(st == cases[k].want && strstr(remat_last_error(), cases[k].needle) &&
                          strstr(remat_last_error(), path),
                      "%s: got %s: %s", cases[k].what, remat_status_str(st), remat_last_error());
            CHECK_MSG(n0 == n1 && !memcmp(before, after, n0 * sizeof *before) && remat_session_step_index(r.s) == 0,
                      "%s: a refused load changed the session", cases[k].what);
        }
        printf("  %-36s %s\n", cases[k].what, st == REMAT_OK ? "loaded" : remat_last_error());
        free(before), free(after);
        close_run(&r);
    }

    /* damaged files: truncated, a flipped byte, weights without a state */
    size_t n;
    unsigned char *raw = read_all(path, &n);
    CHECK(raw && n > 1000);
    write_all(half, raw, n / 2);
    raw[n - 3] ^= 0x10;
    write_all(flip, raw, n);
    raw[n - 3] ^= 0x10;
    run r;
    CHECK_OK(open_run(&r, c));
    const struct {
        const char *file, *needle;
    } bad[] = {{half, "truncated: the file has"}, {flip, "checksum mismatch"}, {weights, "no checksum"}};
    for (int k = 0; k < 3; k++) {
        remat_status st = remat_state_load(r.s, &so, bad[k].file, NULL);
        CHECK_MSG(st == REMAT_FORMAT && strstr(remat_last_error(), bad[k].file) &&
                      strstr(remat_last_error(), bad[k].needle),
                  "damaged %s: %s", bad[k].file, remat_last_error());
        printf("  %-36s %s\n",
               k == 0   ? "a truncated state"
               : k == 1 ? "a flipped byte"
                        : "a weights file",
               remat_last_error());
    }

    /* a directory whose newest state is damaged: reported, the one before used */
    char sdir[400], s3[560], s4[560];
    snprintf(sdir, sizeof sdir, "%s/states", dir);
    mkdir(sdir, 0777);
    snprintf(s3, sizeof s3, "%s/state-000000000003.safetensors", sdir);
    snprintf(s4, sizeof s4, "%s/state-000000000004.safetensors", sdir);
    write_all(s3, raw, n);
    write_all(s4, raw, n / 3);
    char *found = NULL;
    int64_t fstep = -1;
    notes_seen = 0;
    CHECK_OK(remat_state_find(sdir, count_note, NULL, &found, &fstep));
    CHECK_MSG(fstep == 3 && found && !strcmp(found, s3) && notes_seen == 1 && !strcmp(note_path, s4),
              "find: step %lld, %d notes", (long long)fstep, notes_seen);
    free(found);
    trace t = {0};
    to = (remat_train_opts){
        .epochs = 1, .steps = 4, .on_event = on_event, .user = &t, .resume = sdir, .run = run_a, .seed = 5};
    /* remat_train_stream records no data identity: load with that */
    remat_state_opts so_stream = so;
    so_stream.data = NULL;
    run x;
    CHECK_OK(open_run(&x, c));
    CHECK_OK(remat_state_save(x.s, &so_stream, NULL, s3)); /* a step-0 state a stream can take */
    close_run(&x);
    CHECK_OK(open_run(&x, c));
    CHECK_OK(remat_train_stream(x.s, &x.m, synth_next, &sy, &to));
    CHECK_MSG(t.notes == 1 && strstr(t.last_note, s4) && t.resumes == 1 && t.resumed_at == 0 && t.n == 4,
              "resume past a damaged state: %d notes, resumed at %lld, %d steps", t.notes, (long long)t.resumed_at,
              t.n);
    /* a fresh run must not save into a directory that holds states */
    to = (remat_train_opts){.epochs = 1, .steps = 1, .state_dir = sdir};
    remat_status st = remat_train_stream(x.s, &x.m, synth_next, &sy, &to);
    CHECK_MSG(st == REMAT_INVALID && strstr(remat_last_error(), "already holds 2 training states"), "fresh run: %s",
              remat_last_error());
    close_run(&x);
    /* none intact */
    unlink(s3);
    st = remat_state_find(sdir, NULL, NULL, NULL, NULL);
    CHECK_MSG(st == REMAT_FORMAT && strstr(remat_last_error(), "none of its 1 training states is intact"), "%s",
              remat_last_error());
    unlink(s4);
    /* an empty directory: training starts afresh, saying so */
    CHECK_OK(open_run(&x, c));
    t = (trace){0};
    to = (remat_train_opts){
        .epochs = 1, .steps = 2, .on_event = on_event, .user = &t, .resume = sdir, .state_dir = sdir};
    CHECK_OK(remat_train_stream(x.s, &x.m, synth_next, &sy, &to));
    CHECK(t.resumes == 1 && t.resumed_at == -1 && t.n == 2 && t.saves == 1);
    close_run(&x);
    /* a resume directory that does not exist */
    CHECK_OK(open_run(&x, c));
    to = (remat_train_opts){.epochs = 1, .steps = 2, .resume = "/nonexistent-remat-states"};
    st = remat_train_stream(x.s, &x.m, synth_next, &sy, &to);
    CHECK_MSG(st == REMAT_NOT_FOUND && strstr(remat_last_error(), "/nonexistent-remat-states"), "%s",
              remat_last_error());
    close_run(&x);
    close_run(&r);
    free(raw);
    rm_rf(sdir);
    rm_rf(dir);
    printf("%-58s refused, naming them (%.2f s)\n", "states of another model, options, data; damaged files",
           now_s() - t0);
}

/* ---------------------------------------------------------------- fuzz */

static void fuzz(void) {
    char dir[256], path[512], bad[512];
    make_tmpdir(dir, sizeof dir, "fuzz");
    snprintf(path, sizeof path, "%s/state.safetensors", dir);
    snprintf(bad, sizeof bad, "%s/damaged.safetensors", dir);
    double t0 = now_s();
    cfg c = default_cfg(TINY);
    c.threads = 1;
    run a;
    CHECK_OK(open_run(&a, c));
    synth sy = synth_for(&a);
    remat_train_opts to = {.epochs = 1, .steps = 2};
    CHECK_OK(remat_train_stream(a.s, &a.m, synth_next, &sy, &to));
    CHECK_OK(remat_state_save(a.s, NULL, NULL, path));
    close_run(&a);
    size_t n;
    unsigned char *raw = read_all(path, &n);
    CHECK(raw && n > 64);
    if (!raw || n <= 64) return;
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | raw[i];
    run r;
    CHECK_OK(open_run(&r, c));
    CHECK_OK(remat_state_load(r.s, NULL, path, NULL)); /* the intact file loads */
    size_t n0;
    float *before = snapshot(r.s, &n0);
    int64_t step0 = remat_session_step_index(r.s);
    int tried = 0, failed = 0;
    /* every truncation */
    for (size_t len = 0; len < n; len++) {
        write_all(bad, raw, len);
        remat_status st = remat_state_load(r.s, NULL, bad, NULL);
        tried++;
        int ok = st != REMAT_OK && strstr(remat_last_error(), bad) != NULL;
        failed += !ok;
        if (!ok) fprintf(stderr, "truncated to %zu bytes: %s: %s\n", len, remat_status_str(st), remat_last_error());
    }
    int truncations = tried;
    /* a flipped byte (two ways) at every header position and every data
     * position (the tiny model's data section is small) */
    for (size_t pos = 0; pos < n; pos++)
        for (int k = 0; k < 2; k++) {
            unsigned char x = k ? 0xff : 0x01;
            raw[pos] ^= x;
            write_all(bad, raw, n);
            raw[pos] ^= x;
            remat_status st = remat_state_load(r.s, NULL, bad, NULL);
            tried++;
            int ok = st != REMAT_OK && strstr(remat_last_error(), bad) != NULL;
            failed += !ok;
            if (!ok)
                fprintf(stderr, "byte %zu ^ 0x%02x (%s): %s: %s\n", pos, x, pos < 8 + hlen ? "header" : "data",
                        remat_status_str(st), remat_last_error());
        }
    CHECK_MSG(failed == 0, "%d of %d damaged files were not refused with an error naming the file", failed, tried);
    size_t n1;
    float *after = snapshot(r.s, &n1);
    CHECK_MSG(n0 == n1 && !memcmp(before, after, n0 * sizeof *before) && remat_session_step_index(r.s) == step0,
              "damaged files changed the session");
    free(before), free(after);
    close_run(&r);
    free(raw);
    unlink(bad), unlink(path);
    rm_rf(dir);
    printf("%-58s %d truncations, %d flipped bytes (header %llu, file %zu bytes): all refused (%.2f s)\n",
           "fuzz of the state reader", truncations, tried - truncations, (unsigned long long)(8 + hlen), n,
           now_s() - t0);
}

/* ------------------------------------------------------- float strings */

/* remat_float_str: the fewest digits that read back as the same float
 * (states record hyper-parameters this way, the command line its run
 * options; a resume compares the strings). */
static void float_strings(void) {
    static const struct {
        float v;
        const char *s;
    } want[] = {{0.001f, "0.001"},
                {0.1f, "0.1"},
                {3e-4f, "0.0003"},
                {0.9f, "0.9"},
                {0.999f, "0.999"},
                {1e-8f, "1e-08"},
                {1.0f / 3.0f, "0.33333334"},
                {-1.17549435e-38f, "-1.1754944e-38"},
                {-1.00642857e+37f, "-1.00642857e+37"}}; /* 9 digits: the longest spelling */
    char buf[16];                                       /* the size remat.h promises is enough */
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const char *s = remat_float_str(want[i].v, buf, sizeof buf);
        CHECK_MSG(s == buf && !strcmp(s, want[i].s), "remat_float_str(%.9g) is '%s', want '%s'", (double)want[i].v, s,
                  want[i].s);
    }
    uint32_t x = 12345;
    int tried = 0, exact = 0;
    for (int i = 0; i < 10000; i++) { /* bit patterns of every exponent */
        x = x * 1664525u + 1013904223u;
        float v;
        memcpy(&v, &x, sizeof v);
        if (v != v) continue; /* a NaN never reads back equal */
        tried++;
        exact += strtof(remat_float_str(v, buf, sizeof buf), NULL) == v;
    }
    CHECK_MSG(exact == tried, "%d of %d floats read back exactly", exact, tried);
    printf("%-58s %zu spellings, %d of %d floats read back exactly\n", "remat_float_str", sizeof want / sizeof want[0],
           exact, tried);
}

/* ------------------------------------------------------- atomic writes */

static void writer(void) {
    char dir[256], path[512], stale[600], live[600], other[600];
    make_tmpdir(dir, sizeof dir, "write");
    snprintf(path, sizeof path, "%s/w.bin", dir);
    CHECK_OK(remat_file_write_atomic(path, "hello", 5));
    size_t n;
    unsigned char *b = read_all(path, &n);
    CHECK(b && n == 5 && !memcmp(b, "hello", 5));
    free(b);
    CHECK(count_files(dir, ".tmp.") == 0);
    struct stat st;
    CHECK(stat(path, &st) == 0 && (st.st_mode & 0444) == 0444); /* 0666 less the umask, as fopen's */

    /* a dead writer's temporary is removed; a live one's and another
     * name's are left alone */
    pid_t dead = fork();
    if (dead == 0) _exit(0);
    waitpid(dead, NULL, 0);
    snprintf(stale, sizeof stale, "%s/.w.bin.tmp.%ld.0123456789abcdef", dir, (long)dead);
    snprintf(live, sizeof live, "%s/.w.bin.tmp.%ld.00000000000000aa", dir, (long)getppid());
    snprintf(other, sizeof other, "%s/.x.bin.tmp.%ld.0123456789abcdef", dir, (long)dead);
    write_all(stale, "x", 1), write_all(live, "x", 1), write_all(other, "x", 1);
    char base[64];
    long pid = 0;
    CHECK(remat__tmp_parse(strrchr(stale, '/') + 1, base, sizeof base, &pid) && !strcmp(base, "w.bin") &&
          pid == (long)dead);
    CHECK(!remat__tmp_parse("w.bin", base, sizeof base, &pid) &&
          !remat__tmp_parse(".w.bin.tmp.12", base, sizeof base, &pid));
    CHECK_OK(remat_file_write_atomic(path, "again", 5));
    CHECK_MSG(access(stale, F_OK) != 0, "a dead writer's temporary was left");
    CHECK_MSG(access(live, F_OK) == 0 && access(other, F_OK) == 0, "a temporary that is not stale was removed");
    unlink(live), unlink(other);

    /* failures name the path and leave nothing behind */
    remat_status s = remat_file_write_atomic("/nonexistent-remat-dir/w.bin", "x", 1);
    CHECK_MSG(s == REMAT_IO && strstr(remat_last_error(), "/nonexistent-remat-dir/w.bin") &&
                  strstr(remat_last_error(), "No such file"),
              "%s", remat_last_error());
    char sub[512];
    snprintf(sub, sizeof sub, "%s/sub", dir);
    mkdir(sub, 0777);
    s = remat_file_write_atomic(sub, "x", 1); /* a directory: the rename fails */
    CHECK_MSG(s == REMAT_IO && strstr(remat_last_error(), sub), "%s", remat_last_error());
    CHECK(count_files(dir, ".tmp.") == 0);
    rmdir(sub);
    unlink(path);
    rm_rf(dir);
    printf("%-58s ok\n", "atomic writes: unique temporaries, stale ones removed");
}

/* ------------------------------------------------------------ kill test */

static uint64_t rng_state = 0x2545f4914f6cdd1dull;
static double rng_u01(void) {
    rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) / 9007199254740992.0;
}

/* Starts the CLI with args (NULL-terminated), output to log. */
static pid_t spawn(const char *cli, const char *const *args, const char *log) {
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) dup2(fd, 1), dup2(fd, 2), close(fd);
        const char *argv[64];
        int k = 0;
        argv[k++] = cli;
        for (int i = 0; args[i] && k < 63; i++) argv[k++] = args[i];
        argv[k] = NULL;
        execv(cli, (char *const *)argv);
        _exit(127);
    }
    return pid;
}

static int wait_rc(pid_t pid, int *signaled) {
    int status = 0;
    waitpid(pid, &status, 0);
    *signaled = WIFSIGNALED(status);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

#define KILL_STEPS "300"

static int kill_test(const char *cli) {
    char dir[256], sdir[400], refdir[400], ref[512], fin[512], log[512];
    make_tmpdir(dir, sizeof dir, "kill");
    snprintf(sdir, sizeof sdir, "%s/states", dir);
    snprintf(refdir, sizeof refdir, "%s/ref-states", dir);
    snprintf(ref, sizeof ref, "%s/ref.safetensors", dir);
    snprintf(fin, sizeof fin, "%s/final.safetensors", dir);
    snprintf(log, sizeof log, "%s/log.txt", dir);
    mkdir(sdir, 0777);
    double t0 = now_s();
#define COMMON                                                                                                         \
    "train", "--model", "mlp", "--image", "1x8x8", "--data", "synthetic", "--batch", "4", "--steps", KILL_STEPS,       \
        "--threads", "1", "--seed", "3", "--log-every", "100000"
    /* the uninterrupted run, saving states as the killed ones do: its time
     * scales the kill delays to this machine (and to the sanitizers) */
    const char *ref_args[] = {COMMON, "--state-dir", refdir, "--save-every", "1", "--save", ref, NULL};
    int sig, rc = -1, status = 0;
    char first[512];
    snprintf(first, sizeof first, "%s/state-000000000001.safetensors", refdir);
    double tr = now_s(), t_first = 0;
    pid_t rp = spawn(cli, ref_args, log);
    for (;;) { /* the time to its first state: startup and one step */
        if (!t_first && access(first, F_OK) == 0) t_first = now_s() - tr;
        if (waitpid(rp, &status, WNOHANG) == rp) break;
        nanosleep(&(struct timespec){0, 1000000}, NULL);
    }
    double t_ref = now_s() - tr;
    rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    CHECK_MSG(rc == 0 && t_first > 0, "the uninterrupted run failed (%d); see %s", rc, log);
    if (rc != 0 || !(t_first > 0)) return check_exit("test_state --kill");
    /* kills from late in the startup to about 12 steps after it: ~6 steps
     * of progress a kill, so 20 kills take well under the run's 300 */
    double t_step = (t_ref - t_first) / (atof(KILL_STEPS) - 1);

    /* Rounds: a fresh state directory, kills until the run finishes or
     * enough kills are done, then the run resumed to its end (the delays
     * make a round last ~20 kills; a machine where it finishes sooner gets
     * another round). */
    const char *run_args[] = {COMMON, "--resume", sdir, "--save-every", "1", NULL};
    const char *fin_args[] = {COMMON, "--resume", sdir, "--save-every", "1", "--save", fin, NULL};
    int kills = 0, in_save = 0, rounds = 0;
    char steps_seen[4096] = "";
    size_t at = 0;
    while ((kills < 20 || in_save == 0) && kills < 60 && rounds < 5) {
        rounds++;
        rm_rf(sdir);
        mkdir(sdir, 0777);
        int64_t last = -1;
        for (int finished = 0; !finished && (kills < 20 || (in_save == 0 && kills < 60));) {
            double delay = 0.8 * t_first + rng_u01() * (0.2 * t_first + 12 * t_step);
            pid_t pid = spawn(cli, run_args, log);
            struct timespec ts = {(time_t)delay, (long)((delay - (double)(time_t)delay) * 1e9)};
            nanosleep(&ts, NULL);
            kill(pid, SIGKILL);
            rc = wait_rc(pid, &sig);
            if (!sig) {
                CHECK_MSG(rc == 0, "a run exited with %d before it was killed; see %s", rc, log);
                finished = 1;
                continue;
            }
            kills++;
            in_save += count_files(sdir, ".tmp.") > 0; /* a save was cut short */
            notes_seen = 0;
            int64_t step = -1;
            remat_status st = remat_state_find(sdir, count_note, NULL, NULL, &step);
            CHECK_MSG(st == REMAT_OK || (st == REMAT_NOT_FOUND && last < 0), "after kill %d: %s", kills,
                      remat_last_error());
            CHECK_MSG(notes_seen == 0, "after kill %d a damaged state: %s", kills, note_path);
            CHECK_MSG(step >= last, "after kill %d the newest state went back from step %lld to %lld", kills,
                      (long long)last, (long long)step);
            last = step;
            at += (size_t)snprintf(steps_seen + at, sizeof steps_seen - at, "%s%lld", at ? " " : "", (long long)step);
            if (at >= sizeof steps_seen) at = sizeof steps_seen - 1;
        }
        rc = wait_rc(spawn(cli, fin_args, log), &sig);
        CHECK_MSG(rc == 0, "the resumed run failed (%d); see %s", rc, log);
        size_t na, nb;
        unsigned char *a = read_all(ref, &na), *b = read_all(fin, &nb);
        CHECK_MSG(a && b && na == nb && na > 0 && !memcmp(a, b, na),
                  "round %d: the final weights of the killed and resumed run differ from the uninterrupted run's",
                  rounds);
        free(a), free(b);
        unlink(fin);
        CHECK_MSG(count_files(sdir, ".tmp.") == 0, "temporaries of killed saves were left in %s", sdir);
        if (at + 3 < sizeof steps_seen) at += (size_t)snprintf(steps_seen + at, sizeof steps_seen - at, " |");
    }
    CHECK_MSG(kills >= 20, "only %d kills", kills);
    CHECK_MSG(in_save > 0, "none of %d kills landed during a save", kills);

    /* the command line refuses a resume that changes the math, naming the
     * option, and a fresh run into a directory of states */
    const char *bad_batch[] = {"train",     "--model", "mlp", "--image",  "1x8x8",    "--data",
                               "synthetic", "--batch", "8",   "--steps",  KILL_STEPS, "--threads",
                               "1",         "--seed",  "3",   "--resume", sdir,       NULL};
    rc = wait_rc(spawn(cli, bad_batch, log), &sig);
    size_t nl;
    char *out = (char *)read_all(log, &nl);
    if (out) out[nl ? nl - 1 : 0] = 0;
    CHECK_MSG(rc == 1 && out && strstr(out, "cannot resume: --batch differs: the state has '4', this run '8'"),
              "resume with --batch 8: exit %d: %s", rc, out ? out : "");
    free(out);
    const char *fresh[] = {COMMON, "--state-dir", sdir, NULL};
    rc = wait_rc(spawn(cli, fresh, log), &sig);
    out = (char *)read_all(log, &nl);
    if (out) out[nl ? nl - 1 : 0] = 0;
    CHECK_MSG(rc == 1 && out && strstr(out, "already holds"), "a fresh run into %s: exit %d: %s", sdir, rc,
              out ? out : "");
    free(out);
#undef COMMON
    printf("kill test: %d kills (%d during a save) in %d round%s, newest state after each: %s; uninterrupted run "
           "%.1f s (first state after %.3f s, then %.1f ms a step and save), the resumed run's final weights "
           "identical (%.1f s in all)\n",
           kills, in_save, rounds, rounds == 1 ? "" : "s", steps_seen, t_ref, t_first, 1e3 * t_step, now_s() - t0);
    rm_rf(sdir);
    rm_rf(refdir);
    unlink(ref), unlink(fin), unlink(log);
    rmdir(dir);
    return check_exit("test_state --kill");
}

/* --------------------------------------------------------------- main */

int main(int argc, char **argv) {
    if (argc == 3 && !strcmp(argv[1], "--kill")) return kill_test(argv[2]);
    remat_set_blas_threads(1);
    float_strings();
    writer();
    fuzz();
    refusals();
    cfg cnn = default_cfg(CNN), bn = default_cfg(BNNET);
    resume_stream(cnn, cnn, "cnn with dropout (AdamW), 10 + 10 steps");
    cfg sq = cnn;
    sq.strategy = REMAT_STRATEGY_SQRT;
    resume_stream(cnn, sq, "cnn with dropout, resumed under sqrt");
    cfg opt = cnn;
    opt.strategy = REMAT_STRATEGY_OPTIMAL;
    opt.budget = tight_budget(cnn);
    resume_stream(cnn, opt, "cnn with dropout, resumed under optimal within a budget");
    resume_stream(bn, bn, "bnnet (BatchNorm, SGD Nesterov), 10 + 10 steps");
    cfg bopt = bn;
    bopt.strategy = REMAT_STRATEGY_OPTIMAL;
    bopt.budget = tight_budget(bn);
    resume_stream(bn, bopt, "bnnet, resumed under optimal within a budget");
    cfg b16 = cnn, b16sq = cnn;
    b16.precision = b16sq.precision = REMAT_PRECISION_BF16;
    b16sq.strategy = REMAT_STRATEGY_SQRT;
    resume_stream(b16, b16sq, "cnn in bf16, resumed under sqrt");
    resume_dataset();
    return check_exit("test_state");
}
