/* test_models.c: the CNN models of the zoo against PyTorch, and plan
 * invariance on them.
 *
 * Fixtures (tests/fixtures/cnn_models/<model>/, made by
 * scripts/gen_fixtures_cnn.py from bench/torch/cnn_models.py in float64):
 * for resnet18, resnet50, densenet-bc and siamese-resnet50 at tiny sizes,
 * the test builds the model with the options stored in the weights' metadata,
 * loads every parameter and buffer by name (strict), binds the batch, runs
 * one training step and compares the loss, every parameter's gradient and
 * every BatchNorm running statistic after the step. The fixture's and the
 * session's names must match both ways.
 *
 * Tolerance: test_torch's rule, with S the largest magnitude in the
 * reference tensor, every element satisfies |remat - torch| <= 1e-5 * S
 * (the loss: 1e-5 * |torch|), or, where it is larger, 4 times float32
 * PyTorch's own error on that tensor (f32err.<key>: the largest over 3
 * float32 PyTorch runs that sum in different orders). Why: these are deep
 * BatchNorm nets at tiny widths whose last stages normalize over 4 to 16
 * values per channel; float32 error grows through every such layer, and
 * float32 PyTorch itself misses the float64 reference by up to 1.3e-2 * S
 * on resnet50 and 4.8e-2 * S on siamese-resnet50 (3.6e-5 relative on the
 * loss), while densenet-bc and resnet18 stay within about 2e-5. Measured
 * when the fixtures were made: where remat exceeds 1e-5 * S, its error is
 * at most 1.8 times float32 PyTorch's (the factor is printed).
 *
 * Plan invariance: tiny resnet50, densenet-bc (both BatchNorm nets whose
 * blocks are not chains inside) and siamese-resnet50 (one backbone's
 * weights and BatchNorm buffers used by two branches) train 2 SGD steps under `all`, `sqrt` and
 * `optimal` at a budget halfway between optimal's smallest feasible budget
 * and store-all's peak; losses, gradients, weights and running statistics
 * are bitwise identical, and both other strategies really recompute.
 */
#include "../src/train/safetensors.h"
#include "check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define RTOL 1e-5
#define F32_FACTOR 4.0
#define DIR "fixtures/cnn_models/"

static const remat__st_tensor *get(const remat__st *f, const char *key, remat__st_tensor *t) {
    int i = remat__st_find(f, key);
    if (i < 0 || remat__st_get(f, i, t) != REMAT_OK) return NULL;
    return t;
}

/* An integer option from the weights' metadata, or -1. */
static int64_t meta(const remat__st *f, const char *key) {
    const char *v = remat__st_metadata(f, key);
    CHECK_MSG(v != NULL, "%s: no metadata '%s'", remat__st_path(f), key);
    return v ? strtoll(v, NULL, 10) : -1;
}

/* Options of the fixture; name points into storage the caller keeps. */
static void fixture_opts(const remat__st *w, const char *name, remat_model_opts *o) {
    remat_model_opts_default(o);
    CHECK_OK(remat_model_opts_for(o, name));
    const char *m = remat__st_metadata(w, "model");
    CHECK_MSG(m && strcmp(m, name) == 0, "%s: metadata model '%s'", name, m ? m : "(none)");
    o->batch = meta(w, "batch");
    o->channels = meta(w, "channels"), o->height = meta(w, "height"), o->width = meta(w, "width");
    o->classes = meta(w, "classes");
    o->base_channels = meta(w, "base_channels");
    o->depth = meta(w, "depth");
}

/* The bound on max |c - r| for fixture entry `key` of largest magnitude S:
 * RTOL * S, or F32_FACTOR times float32 PyTorch's own error where that is
 * larger. */
static double bound(const remat__st *f, const char *key, double S) {
    char k2[320];
    remat__st_tensor te;
    snprintf(k2, sizeof k2, "f32err.%s", key);
    int ok = get(f, k2, &te) && te.bytes == 8 && strcmp(te.dtype, "F64") == 0;
    CHECK_MSG(ok, "fixture has no %s", k2);
    return fmax(RTOL * S, ok ? F32_FACTOR * ((const double *)te.data)[0] : 0.0);
}

static double worst_f32_ratio; /* largest max|c - r| / f32err where RTOL * S is exceeded */

/* max |c - r| <= bound(); returns max|c - r| / max|r|. */
static double compare(const remat__st *f, const char *key, const float *c, int64_t n) {
    remat__st_tensor t;
    CHECK_MSG(get(f, key, &t) != NULL, "fixture has no %s", key);
    if (!get(f, key, &t)) return INFINITY;
    CHECK_MSG((int64_t)(t.bytes / 4) == n && strcmp(t.dtype, "F32") == 0, "%s: size or dtype", key);
    if ((int64_t)(t.bytes / 4) != n) return INFINITY;
    const float *r = t.data;
    double S = 0.0, worst = 0.0;
    for (int64_t i = 0; i < n; i++) S = fmax(S, fabs(r[i]));
    for (int64_t i = 0; i < n; i++) worst = fmax(worst, fabs((double)c[i] - r[i]));
    double lim = bound(f, key, S);
    CHECK_MSG(worst <= lim, "%s: max |remat - torch| = %.3g above %.3g (max|torch| %.3g)", key, worst, lim, S);
    if (worst > RTOL * S) worst_f32_ratio = fmax(worst_f32_ratio, worst * F32_FACTOR / lim);
    return S > 0 ? worst / S : worst;
}

static void against_torch(const char *name) {
    char path[256];
    worst_f32_ratio = 0.0;
    remat__st *w = NULL, *b = NULL, *gr = NULL;
    snprintf(path, sizeof path, DIR "%s/weights.safetensors", name);
    CHECK_OK(remat__st_open(&w, path));
    snprintf(path, sizeof path, DIR "%s/batch.safetensors", name);
    CHECK_OK(remat__st_open(&b, path));
    snprintf(path, sizeof path, DIR "%s/grads.safetensors", name);
    CHECK_OK(remat__st_open(&gr, path));
    if (!w || !b || !gr) goto out_files;
    remat_model_opts mo;
    fixture_opts(w, name, &mo);
    remat_graph *g;
    remat_model m;
    CHECK_OK(remat_graph_create(&g));
    CHECK_OK(remat_model_build(g, &mo, &m));
    remat_session_opts so;
    remat_session_opts_default(&so);
    so.threads = 2;
    remat_session *s = NULL;
    CHECK_OK(remat_session_create(&s, g, m.loss, &so));
    if (!s) goto out_graph;
    snprintf(path, sizeof path, DIR "%s/weights.safetensors", name);
    CHECK_OK(remat_safetensors_load(s, path, 1));
    CHECK(remat__st_count(w) == remat_session_param_count(s));

    remat__st_tensor x, t;
    int64_t xd[4], td[4];
    int xn = remat_node_shape(g, m.input, xd), tn = remat_node_shape(g, m.labels, td);
    int64_t nx = 1, nt = 1;
    for (int i = 0; i < xn; i++) nx *= xd[i];
    for (int i = 0; i < tn; i++) nt *= td[i];
    CHECK(get(b, "input", &x) && x.bytes == (size_t)nx * 4 && strcmp(x.dtype, "F32") == 0);
    CHECK(get(b, "target", &t) && t.bytes == (size_t)nt * 4);
    if (!get(b, "input", &x) || !get(b, "target", &t) || x.bytes != (size_t)nx * 4 || t.bytes != (size_t)nt * 4)
        goto out_session;
    CHECK_OK(remat_session_bind(s, m.input, x.data));
    CHECK_OK(remat_session_bind(s, m.labels, t.data));

    float loss = 0.0f;
    CHECK_OK(remat_session_step(s, &loss));
    remat__st_tensor tl;
    CHECK(get(gr, "loss", &tl) && tl.bytes == 4);
    double ref = get(gr, "loss", &tl) ? ((const float *)tl.data)[0] : NAN;
    double lim = bound(gr, "loss", fabs(ref));
    CHECK_MSG(fabs(loss - ref) <= lim, "%s loss: remat %.9g, torch %.9g, bound %.3g", name, (double)loss, ref, lim);
    if (fabs(loss - ref) > RTOL * fabs(ref))
        worst_f32_ratio = fmax(worst_f32_ratio, fabs(loss - ref) * F32_FACTOR / lim);
    double worst_g = 0.0, worst_s = 0.0;
    int ngrad = 0, nstate = 0;
    const char *worst_name = "";
    char key[300];
    for (int i = 0; i < remat_session_param_count(s); i++) {
        remat_param_info p;
        remat_session_param(s, i, &p);
        snprintf(key, sizeof key, "%s.%s", p.trainable ? "grad" : "state", p.name);
        double e = compare(gr, key, p.trainable ? p.grad : p.data, p.numel);
        if (p.trainable) {
            ngrad++;
            if (e > worst_g) worst_g = e, worst_name = p.name;
        } else {
            nstate++, worst_s = fmax(worst_s, e);
        }
    }
    /* and nothing in the fixture that the session lacks (each entry and
     * the loss have an f32err twin) */
    CHECK_MSG(remat__st_count(gr) == 2 * (1 + ngrad + nstate), "%s: fixture has %d entries, session %d + loss", name,
              remat__st_count(gr) / 2, ngrad + nstate);
    printf("%-17s loss %.9g (torch %.9g, rel. error %.2g); %d gradients, worst max|d|/max|torch| %.2g (%s); "
           "%d running statistics, worst %.2g; beyond 1e-5 * S, worst |d| / float32 PyTorch's error %.2f\n",
           name, (double)loss, ref, fabs(loss - ref) / fabs(ref), ngrad, worst_g, worst_name, nstate, worst_s,
           worst_f32_ratio);
out_session:
    remat_session_destroy(s);
out_graph:
    remat_graph_destroy(g);
out_files:
    remat__st_close(w), remat__st_close(b), remat__st_close(gr);
}

/* ------------------------------------------------------- plan invariance */

typedef struct {
    float loss[2];
    float *w, *gw; /* all parameters and buffers; all gradients */
    size_t nw, ngw;
    int64_t recomputations;
    size_t peak;
    remat_status status;
} outcome;

static void train2(const remat_graph *g, const remat_model *m, remat_strategy st, size_t budget, outcome *o) {
    memset(o, 0, sizeof *o);
    remat_session_opts so;
    remat_session_opts_default(&so);
    so.threads = 2;
    so.seed = 3;
    so.strategy = st;
    so.budget = budget;
    remat_session *s = NULL;
    o->status = remat_session_create(&s, g, m->loss, &so);
    if (o->status != REMAT_OK) return;
    remat_optim_opts oo;
    remat_optim_opts_default(&oo, REMAT_OPTIM_SGD); /* no state: the budget is the step's */
    oo.lr = 0.05f;
    CHECK_OK(remat_session_set_optimizer(s, &oo));
    remat_plan_summary p;
    CHECK_OK(remat_session_plan(s, &p));
    o->recomputations = p.recomputations;
    o->peak = p.held_bytes; /* what a budget bounds: the arena and the resident blocks */
    int64_t xd[4], n = 1, b;
    int nd = remat_node_shape(g, m->input, xd);
    for (int i = 0; i < nd; i++) n *= xd[i];
    b = xd[0];
    int siamese = remat_node_shape(g, m->labels, NULL) == 4; /* labels: view 2, the second half of x */
    float *x = malloc(2 * (size_t)n * sizeof *x);
    int32_t *y = malloc((size_t)b * sizeof *y);
    for (int64_t i = 0; i < 2 * n; i++) x[i] = (float)((i * 37) % 29) / 14.0f - 1.0f;
    for (int64_t i = 0; i < b; i++) y[i] = (int32_t)((i * 7) % 10);
    remat_session_bind(s, m->input, x);
    remat_session_bind(s, m->labels, siamese ? (const void *)(x + n) : (const void *)y);
    for (int k = 0; k < 2; k++) {
        CHECK_OK(remat_session_step(s, &o->loss[k]));
        if (k == 0) CHECK_OK(remat_session_update(s));
    }
    for (int i = 0; i < remat_session_param_count(s); i++) {
        remat_param_info pi;
        remat_session_param(s, i, &pi);
        o->w = realloc(o->w, (o->nw + (size_t)pi.numel) * sizeof *o->w);
        memcpy(o->w + o->nw, pi.data, (size_t)pi.numel * sizeof *o->w);
        o->nw += (size_t)pi.numel;
        if (!pi.grad) continue;
        o->gw = realloc(o->gw, (o->ngw + (size_t)pi.numel) * sizeof *o->gw);
        memcpy(o->gw + o->ngw, pi.grad, (size_t)pi.numel * sizeof *o->gw);
        o->ngw += (size_t)pi.numel;
    }
    free(x), free(y);
    remat_session_destroy(s);
}

static void same(const char *name, const char *what, const outcome *a, const outcome *b) {
    CHECK_MSG(b->status == REMAT_OK, "%s %s: %s", name, what, remat_last_error());
    if (b->status != REMAT_OK) return;
    CHECK_MSG(memcmp(a->loss, b->loss, sizeof a->loss) == 0, "%s %s: losses differ", name, what);
    CHECK_MSG(a->nw == b->nw && memcmp(a->w, b->w, a->nw * sizeof *a->w) == 0,
              "%s %s: weights or running statistics differ", name, what);
    CHECK_MSG(a->ngw == b->ngw && memcmp(a->gw, b->gw, a->ngw * sizeof *a->gw) == 0, "%s %s: gradients differ", name,
              what);
    CHECK_MSG(b->recomputations > 0, "%s %s recomputes nothing", name, what);
}

/* Optimal's smallest feasible budget, from the message of a budget of 1. */
static size_t floor_budget(const remat_graph *g, const remat_model *m) {
    remat_session_opts so;
    remat_session_opts_default(&so);
    so.threads = 2;
    so.strategy = REMAT_STRATEGY_OPTIMAL;
    so.budget = 1;
    remat_session *s = NULL;
    CHECK(remat_session_create(&s, g, m->loss, &so) == REMAT_BUDGET);
    remat_session_destroy(s);
    const char *p = strstr(remat_last_error(), "smallest feasible budget is ");
    CHECK_MSG(p != NULL, "%s", remat_last_error());
    return p ? (size_t)strtoull(p + strlen("smallest feasible budget is "), NULL, 10) : 0;
}

static void invariance(const char *name, int64_t base, int64_t depth) {
    remat_model_opts mo;
    remat_model_opts_default(&mo);
    CHECK_OK(remat_model_opts_for(&mo, name));
    mo.batch = 4, mo.height = 32, mo.width = 32, mo.classes = 10;
    mo.base_channels = base, mo.depth = depth;
    remat_graph *g;
    remat_model m;
    CHECK_OK(remat_graph_create(&g));
    CHECK_OK(remat_model_build(g, &mo, &m));
    outcome all, sq, opt;
    train2(g, &m, REMAT_STRATEGY_ALL, 0, &all);
    CHECK_OK(all.status);
    CHECK(all.recomputations == 0 && all.loss[0] == all.loss[0] && all.loss[1] != all.loss[0]);
    size_t lo = floor_budget(g, &m), budget = lo + (all.peak - lo) / 2;
    CHECK_MSG(lo > 0 && lo < all.peak, "%s: floor %zu, store-all %zu", name, lo, all.peak);
    train2(g, &m, REMAT_STRATEGY_SQRT, 0, &sq);
    train2(g, &m, REMAT_STRATEGY_OPTIMAL, budget, &opt);
    same(name, "sqrt", &all, &sq);
    same(name, "optimal", &all, &opt);
    CHECK_MSG(opt.status != REMAT_OK || opt.peak <= budget, "%s: optimal holds %zu, above %zu", name, opt.peak, budget);
    printf("%-17s all/sqrt/optimal bitwise equal over 2 steps: store-all peak %zu B, floor %zu B, optimal at %zu B "
           "peaks at %zu B with %lld recomputations, sqrt %zu B with %lld\n",
           name, all.peak, lo, budget, opt.peak, (long long)opt.recomputations, sq.peak, (long long)sq.recomputations);
    free(all.w), free(all.gw), free(sq.w), free(sq.gw), free(opt.w), free(opt.gw);
    remat_graph_destroy(g);
}

/* The same comparison through the command line (`--cli PATH`, ctest's
 * cli_grad_models): `remat grad` with the fixture's options, weights and
 * batch writes the loss and every gradient, which must pass the same
 * bounds. */
/* Appended to every `remat grad` command (`--cli PATH "--device cuda"`). */
static const char *cli_extra = "";

static void against_torch_cli(const char *cli, const char *dir, const char *name) {
    char path[256], out[512], cmd[2048];
    remat__st *w = NULL, *gr = NULL, *o = NULL;
    snprintf(path, sizeof path, DIR "%s/weights.safetensors", name);
    CHECK_OK(remat__st_open(&w, path));
    snprintf(path, sizeof path, DIR "%s/grads.safetensors", name);
    CHECK_OK(remat__st_open(&gr, path));
    if (!w || !gr) goto out;
    remat_model_opts mo;
    fixture_opts(w, name, &mo);
    snprintf(out, sizeof out, "%s/%s-grads.safetensors", dir, name);
    char depth[48] = ""; /* 0: the model's own (the flag takes positive values) */
    if (mo.depth > 0) snprintf(depth, sizeof depth, "--depth %lld", (long long)mo.depth);
    snprintf(cmd, sizeof cmd,
             "'%s' grad --model %s --batch %lld --image %lldx%lldx%lld --classes %lld --base-channels %lld "
             "%s --threads 2 --init-from " DIR "%s/weights.safetensors --batch-from " DIR
             "%s/batch.safetensors --out '%s' %s > /dev/null",
             cli, name, (long long)mo.batch, (long long)mo.channels, (long long)mo.height, (long long)mo.width,
             (long long)mo.classes, (long long)mo.base_channels, depth, name, name, out, cli_extra);
    int rc = system(cmd);
    CHECK_MSG(rc == 0, "%s: exit status %d", cmd, rc);
    if (rc != 0) goto out;
    CHECK_OK(remat__st_open(&o, out));
    if (!o) goto out;
    int n = 0;
    for (int i = 0; i < remat__st_count(o); i++) {
        remat__st_tensor t;
        remat__st_get(o, i, &t);
        float *v = malloc(t.bytes ? t.bytes : 1);
        memcpy(v, t.data, t.bytes);
        if (strcmp(t.name, "loss") == 0) {
            remat__st_tensor tl;
            double ref = get(gr, "loss", &tl) ? ((const float *)tl.data)[0] : NAN;
            double lim = bound(gr, "loss", fabs(ref));
            CHECK_MSG(fabs(v[0] - ref) <= lim, "%s (cli) loss: remat %.9g, torch %.9g", name, (double)v[0], ref);
        } else {
            compare(gr, t.name, v, (int64_t)(t.bytes / 4));
            n++;
        }
        free(v);
    }
    /* every parameter's gradient, and nothing else */
    int want = 0;
    for (int i = 0; i < remat__st_count(gr); i++) {
        remat__st_tensor t;
        remat__st_get(gr, i, &t);
        want += strncmp(t.name, "grad.", 5) == 0;
    }
    CHECK_MSG(n == want, "%s: remat grad wrote %d gradients, the fixture has %d", name, n, want);
    printf("remat grad %s: loss and %d gradients within bounds\n", name, n);
    remove(out);
out:
    remat__st_close(w), remat__st_close(gr), remat__st_close(o);
}

int main(int argc, char **argv) {
    const char *models[] = {"resnet18", "resnet50", "densenet-bc", "siamese-resnet50"};
    if ((argc == 3 || argc == 4) && strcmp(argv[1], "--cli") == 0) {
        if (argc == 4) cli_extra = argv[3]; /* e.g. "--device cuda" */
        if (strstr(cli_extra, "cuda") && remat_device_available(REMAT_DEVICE_CUDA) != REMAT_OK) {
            printf("%s --cli: skipped: %s\n", argv[0], remat_last_error());
            return 77;
        }
        char d[] = "/tmp/remat-grad-models-XXXXXX";
        CHECK(mkdtemp(d) != NULL);
        for (int i = 0; i < 4; i++) against_torch_cli(argv[2], d, models[i]);
        rmdir(d);
        return check_exit("test_models --cli");
    }
    for (int i = 0; i < 4; i++) against_torch(models[i]);
    invariance("resnet50", 2, 0);
    invariance("densenet-bc", 4, 28);
    invariance("siamese-resnet50", 2, 0); /* shared weights, BatchNorm buffers updated twice */
    return check_exit("test_models");
}
