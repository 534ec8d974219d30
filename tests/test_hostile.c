/* test_hostile.c: input that would make remat work forever, exhaust memory
 * or learn garbage fails fast, with a message that names the problem and
 * the figure behind it (DESIGN.md invariant 6):
 * - model sizes: the estimates from the options match what is built, real
 *   sizes pass, and absurd ones (2147483647 gpt2 layers, products that
 *   overflow int64) are refused before anything is built;
 * - chain planning: a 2000-stage chain is refused before its 9 GiB table,
 *   a long one on its work, an over-long JSON file before its stages;
 * - optimizer hyper-parameters must be finite;
 * - ReLU propagates NaN as PyTorch does (forward and backward);
 * - remat_session_check_finite names the first non-finite weight, buffer
 *   or gradient, whatever the thread count, and the training loops stop at
 *   one;
 * - an IDX gzip bomb is refused on its header, before its payload.
 * Every refusal is timed (under 2 s, where it used to take minutes or
 * hours) and checked for its status and a distinctive part of its message.
 *
 *   test_hostile                          the tests
 *   test_hostile --write-inf-weights F    writes mlp weights with fc1.weight
 *                                         element 3 = +inf (for hostile.cmake)
 */
#include "remat.h"
#include "check.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

/* models.c's estimate, not in the public header. */
remat_status remat__model_estimate(const remat_model_opts *o, double *nodes, double *tensors, double *params,
                                   double *act_bytes);

static int has(const char *s, const char *sub) { return s && strstr(s, sub) != NULL; }

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* The last error must hold every one of the NULL-terminated parts. */
static int error_has(const char *const *parts) {
    for (; *parts; parts++)
        if (!has(remat_last_error(), *parts)) return 0;
    return 1;
}
#define CHECK_ERR(call, status, ...)                                                                                   \
    do {                                                                                                               \
        const char *const parts_[] = {__VA_ARGS__, NULL};                                                              \
        remat_status st_ = (call);                                                                                     \
        CHECK_MSG(st_ == (status) && error_has(parts_), "%s: %s (%s)", #call, remat_status_str(st_),                   \
                  remat_last_error());                                                                                 \
    } while (0)

static double peak_rss_mb(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_maxrss / 1024.0;
}

/* ------------------------------------------------------------ model sizes */

/* Elements of node n's output. */
static double numel(const remat_graph *g, remat_node n) {
    int64_t d[REMAT_MAX_DIMS];
    int nd = remat_node_shape(g, n, d);
    double k = 1;
    for (int i = 0; i < nd; i++) k *= (double)d[i];
    return k;
}

/* Builds the options' model and compares the estimate with the graph:
 * nodes, tensors and parameters within 1%, activations from the node
 * outputs up to twice that (gpt2's attention probabilities are not node
 * outputs). */
static void check_estimate(const remat_model_opts *o) {
    double en, et, ep, ea;
    CHECK_OK(remat__model_estimate(o, &en, &et, &ep, &ea));
    remat_graph *g;
    remat_model m;
    CHECK_OK(remat_graph_create(&g));
    remat_status st = remat_model_build(g, o, &m);
    CHECK_MSG(st == REMAT_OK, "%s: %s", o->name, remat_last_error());
    double nodes = remat_graph_node_count(g), tensors = 0, params = 0, act = 0;
    for (int i = 0; i < remat_graph_node_count(g); i++) {
        const char *op = remat_node_op(g, i);
        int leaf = strcmp(op, "param") == 0 || strcmp(op, "buffer") == 0;
        if (leaf) params += numel(g, i);
        else act += 4 * numel(g, i);
        tensors += leaf || strcmp(op, "input") == 0;
    }
    CHECK_MSG(en >= 0.99 * nodes && en <= 1.01 * nodes && et >= 0.99 * tensors && et <= 1.01 * tensors &&
                  ep >= 0.99 * params && ep <= 1.01 * params && ea >= 0.99 * act && ea <= 2 * act,
              "%s: estimated %g nodes, %g tensors, %g parameters, %g activation bytes; built %g, %g, %g, %g", o->name,
              en, et, ep, ea, nodes, tensors, params, act);
    remat_graph_destroy(g);
}

/* Refused with REMAT_INVALID in under 2 s, nothing built, the message
 * holding `a` and `b`. */
static void check_refused(const remat_model_opts *o, const char *a, const char *b) {
    remat_graph *g;
    remat_model m;
    CHECK_OK(remat_graph_create(&g));
    double t0 = now();
    remat_status st = remat_model_build(g, o, &m);
    double dt = now() - t0;
    CHECK_MSG(st == REMAT_INVALID && has(remat_last_error(), a) && has(remat_last_error(), b), "%s: %s (%s)", o->name,
              remat_status_str(st), remat_last_error());
    CHECK_MSG(dt < 2.0, "%s: refused after %.3f s", o->name, dt);
    CHECK(remat_graph_node_count(g) == 0);
    remat_graph_destroy(g);
}

static void opts_for(remat_model_opts *o, const char *name) {
    remat_model_opts_default(o);
    remat_model_opts_for(o, name);
}

static void test_model_bounds(void) {
    remat_model_opts o;
    /* every model of the table at its defaults, and small variants */
    for (const char *const *n = remat_model_names(); *n; n++) {
        opts_for(&o, *n);
        check_estimate(&o);
        opts_for(&o, *n);
        o.batch = 3, o.base_channels = strstr(*n, "resnet") ? 4 : 0, o.layers = 3, o.embd = 16, o.heads = 2;
        o.context = 8, o.vocab = 50;
        if (strcmp(*n, "cnn") == 0 || strcmp(*n, "mlp") == 0) o.height = o.width = 20;
        if (strcmp(*n, "densenet-bc") == 0) o.depth = 40, o.base_channels = 4, o.height = 18, o.width = 14;
        check_estimate(&o);
    }
    /* real sizes pass: GPT-2 XL (1.5 billion parameters), resnet50 at
     * batch 256, gpt2-small at batch 64 */
    opts_for(&o, "gpt2");
    o.layers = 48, o.embd = 1600, o.heads = 25, o.batch = 8;
    check_estimate(&o);
    opts_for(&o, "resnet50");
    o.batch = 256;
    check_estimate(&o);
    opts_for(&o, "gpt2-small");
    check_estimate(&o);
    printf("  estimates match the built graphs; GPT-2 XL, resnet50 at batch 256, gpt2-small at batch 64 pass\n");

    /* the report: 2147483647 layers (it used to build for ever) */
    opts_for(&o, "gpt2");
    o.layers = 2147483647;
    check_refused(&o, "model 'gpt2' (batch 64, 2147483647 layers", "55.8 billion nodes (limit 1 million)");
    check_refused(&o, "25.8 billion parameter tensors (limit 10000)", "60.9 PB (limit 8 billion, 32 GB)");
    /* just past the tensor limit, and products that overflow int64 */
    opts_for(&o, "gpt2");
    o.layers = 900, o.embd = 8, o.heads = 1, o.context = 4, o.vocab = 10;
    check_refused(&o, "10806 parameter tensors (limit 10000)", "use smaller sizes");
    opts_for(&o, "gpt2");
    o.batch = INT64_MAX, o.context = INT64_MAX, o.layers = 1;
    check_refused(&o, "of activations per batch (limit 16 TB)", "model 'gpt2'");
    opts_for(&o, "mlp");
    o.channels = o.height = o.width = (int64_t)1 << 40;
    check_refused(&o, "model 'mlp' (batch 64, image 1099511627776x", "parameters");
    opts_for(&o, "resnet50");
    o.base_channels = (int64_t)1 << 62;
    check_refused(&o, "model 'resnet50'", "parameters");
    opts_for(&o, "densenet-bc");
    o.base_channels = INT64_MAX;
    check_refused(&o, "model 'densenet-bc'", "growth 9223372036854775807");
    opts_for(&o, "cnn");
    o.classes = INT64_MAX;
    check_refused(&o, "model 'cnn'", "parameters");
    opts_for(&o, "siamese-resnet50");
    o.height = o.width = (int64_t)1 << 31, o.batch = 1 << 20;
    check_refused(&o, "model 'siamese-resnet50'", "of activations per batch");
    opts_for(&o, "resnet18");
    o.batch = 2147483647;
    check_refused(&o, "model 'resnet18' (batch 2147483647, image 3x224x224, 1000 classes)", "activations");
    printf("  absurd sizes refused before building, each in under 2 s\n");
}

/* ---------------------------------------------------------- chain bounds */

/* A chain of n equal stages as JSON (caller frees). */
static char *chain_json(int n) {
    static const char stage[] = "{\"forward\": 1, \"backward\": 2, \"input\": 4096, \"saved\": 8192},";
    size_t cap = (size_t)n * sizeof stage + 64, at = 0;
    char *s = malloc(cap);
    if (!s) return NULL;
    at += (size_t)snprintf(s, cap, "{\"stages\": [");
    for (int i = 0; i < n; i++) at += (size_t)snprintf(s + at, cap - at, "%s", stage);
    snprintf(s + at - 1, cap - at + 1, "], \"output\": 4096}");
    return s;
}

static void test_chain_bounds(void) {
    remat_stage *st = NULL;
    int n = 0;
    int64_t out = 0;
    remat_chain_plan *p = NULL;
    char *js = chain_json(2000);
    CHECK_OK(remat_chain_parse_json(js, &st, &n, &out));
    CHECK(n == 2000 && out == 4096);
    /* the report: 9.4 GiB of table and 23 minutes of work, refused up front */
    double t0 = now(), rss0 = peak_rss_mb();
    CHECK_ERR(remat_chain_solve(st, n, out, 1000000, 0, &p), REMAT_NOMEM,
              "a chain of 2000 stages with 500 memory slots is too large to plan", "9.41 GiB of tables (limit 1 GiB)",
              "6.8e+11 operations", "use fewer stages");
    double dt = now() - t0;
    CHECK_MSG(dt < 2.0, "2000 stages refused after %.3f s", dt);
    CHECK(p == NULL);
    /* a budget too small to fit is priced the same way first */
    CHECK_ERR(remat_chain_solve(st, n, out, 100, 0, &p), REMAT_NOMEM, "2000 stages with 100 memory slots",
              "1.94 GiB of tables");
    /* few slots: the table fits but the work does not */
    free(js), free(st);
    js = chain_json(6000);
    CHECK_OK(remat_chain_parse_json(js, &st, &n, &out));
    t0 = now();
    CHECK_ERR(remat_chain_solve(st, n, out, 1000000, 1, &p), REMAT_UNSUPPORTED,
              "a chain of 6000 stages with 1 memory slots is too large to plan", "operations",
              "(limit 1e+11, 3.3 minutes)", "fewer slots");
    dt = now() - t0;
    CHECK_MSG(dt < 2.0, "6000 stages refused after %.3f s", dt);
    double drss = peak_rss_mb() - rss0;
    CHECK_MSG(drss < 64, "refusals grew the peak RSS by %.0f MiB", drss);
    free(js), free(st);
    /* more stages than the planner takes: refused before they are read */
    js = chain_json(40000);
    t0 = now();
    CHECK_ERR(remat_chain_parse_json(js, &st, &n, &out), REMAT_FORMAT, "'stages' has 40000 stages", "at most 32766");
    CHECK(st == NULL && now() - t0 < 2.0);
    free(js);
    /* and a chain of reasonable size still plans */
    js = chain_json(100);
    CHECK_OK(remat_chain_parse_json(js, &st, &n, &out));
    CHECK_OK(remat_chain_solve(st, n, out, 100000, 100, &p));
    CHECK(remat_chain_plan_length(p) > 0 && remat_chain_plan_peak(p) <= 100000);
    remat_chain_plan_destroy(p);
    free(js), free(st);
    printf("  chains: 2000 stages refused in %.3f s (peak RSS +%.0f MiB), 6000 stages on work, 40000 on parse\n", dt,
           drss);
}

/* ------------------------------------------------------------- optimizer */

/* A small mlp session (caller destroys both); threads as given. */
static remat_session *mlp_session(remat_graph **g, remat_model *m, int64_t image, int threads) {
    remat_model_opts o;
    opts_for(&o, "mlp");
    o.batch = 4, o.height = o.width = image;
    remat_session *s = NULL;
    CHECK_OK(remat_graph_create(g));
    CHECK_OK(remat_model_build(*g, &o, m));
    remat_session_opts so;
    remat_session_opts_default(&so);
    so.threads = threads;
    CHECK_OK(remat_session_create(&s, *g, m->loss, &so));
    return s;
}

static void test_optimizer_opts(void) {
    remat_graph *g;
    remat_model m;
    remat_session *s = mlp_session(&g, &m, 28, 1);
    static const char *const names[] = {"lr", "weight_decay", "momentum", "dampening", "beta1", "beta2", "eps"};
    const float bad[2] = {INFINITY, NAN};
    int refused = 0;
    for (int kind = 0; kind < 2; kind++)
        for (int f = 0; f < 7; f++)
            for (int b = 0; b < 2; b++) {
                remat_optim_opts o;
                remat_optim_opts_default(&o, kind ? REMAT_OPTIM_ADAMW : REMAT_OPTIM_SGD);
                float *field[] = {&o.lr, &o.weight_decay, &o.momentum, &o.dampening, &o.beta1, &o.beta2, &o.eps};
                *field[f] = bad[b];
                char want[64];
                snprintf(want, sizeof want, "optimizer option %s is %s", names[f], b ? "nan" : "inf");
                remat_status st = remat_session_set_optimizer(s, &o);
                CHECK_MSG(st == REMAT_INVALID && has(remat_last_error(), want) &&
                              has(remat_last_error(), "must be a finite number"),
                          "%s: %s", want, remat_last_error());
                refused += st == REMAT_INVALID;
            }
    /* the brief's --momentum 1e39 through the library: a float infinity */
    remat_optim_opts o;
    remat_optim_opts_default(&o, REMAT_OPTIM_SGD);
    o.momentum = (float)1e39;
    CHECK_ERR(remat_session_set_optimizer(s, &o), REMAT_INVALID, "optimizer option momentum is inf");
    remat_optim_opts_default(&o, REMAT_OPTIM_SGD);
    CHECK_OK(remat_session_set_optimizer(s, &o));
    remat_session_destroy(s);
    remat_graph_destroy(g);
    printf("  optimizer: %d non-finite hyper-parameters refused\n", refused);
}

/* ------------------------------------------------------------------ relu */

/* y = relu(x + p), loss = mse(y, 0): x = [NaN, -1, 0, -0, 2, inf]. As
 * PyTorch: y = [NaN, 0, 0, 0, 2, inf], and the gradient passes where y is
 * NaN (threshold_backward: y <= 0 ? 0 : grad), so dp = [NaN, 0, 0, 0,
 * 2 * 2 / 6, inf]. */
static void test_relu_nan(void) {
    remat_graph *g;
    CHECK_OK(remat_graph_create(&g));
    int64_t d[2] = {1, 6};
    remat_node x = remat_input(g, "x", REMAT_F32, 2, d), t = remat_input(g, "t", REMAT_F32, 2, d);
    remat_node p = remat_param(g, "p", 2, d, REMAT_INIT_ZEROS, 0);
    remat_node y = remat_relu(g, remat_add(g, x, p));
    remat_node loss = remat_mse(g, y, t);
    CHECK_OK(remat_graph_status(g));
    remat_session *s = NULL;
    remat_session_opts so;
    remat_session_opts_default(&so);
    so.threads = 1;
    CHECK_OK(remat_session_create(&s, g, loss, &so));
    float xs[6] = {NAN, -1.0f, 0.0f, -0.0f, 2.0f, INFINITY}, ts[6] = {0}, ys[6], l = 0, dp[6];
    CHECK_OK(remat_session_bind(s, x, xs));
    CHECK_OK(remat_session_bind(s, t, ts));
    CHECK_OK(remat_session_forward(s, 1, NULL, y, ys));
    CHECK_MSG(isnan(ys[0]) && ys[1] == 0 && ys[2] == 0 && ys[3] == 0 && ys[4] == 2 && isinf(ys[5]),
              "relu forward: %g %g %g %g %g %g", ys[0], ys[1], ys[2], ys[3], ys[4], ys[5]);
    CHECK_OK(remat_session_step(s, &l));
    CHECK(isnan(l));
    CHECK_OK(remat_session_read_param(s, 0, REMAT_PARAM_GRAD, dp));
    CHECK_MSG(isnan(dp[0]) && dp[1] == 0 && dp[2] == 0 && dp[3] == 0 && dp[4] == 2.0f * 2.0f / 6.0f && isinf(dp[5]) &&
                  dp[5] > 0,
              "relu backward: %g %g %g %g %g %g", dp[0], dp[1], dp[2], dp[3], dp[4], dp[5]);
    /* the NaN-producing step: the weights are finite, the gradient is not */
    CHECK_ERR(remat_session_check_finite(s), REMAT_INVALID,
              "the gradient of parameter 'p' (index 0 of 1) is not finite: element 0 of 6 is NaN");
    remat_session_destroy(s);
    remat_graph_destroy(g);
    printf("  relu: NaN forward and backward as PyTorch; the NaN gradient is named\n");
}

/* -------------------------------------------------------- finite weights */

/* Sets element i of parameter `name` to v. */
static void poke(remat_session *s, const char *name, int64_t i, float v) {
    int k = remat_session_find_param(s, name);
    remat_param_info info;
    CHECK(k >= 0 && remat_session_param(s, k, &info) == REMAT_OK);
    if (k < 0) return;
    float *w = malloc((size_t)info.numel * sizeof *w);
    CHECK_OK(remat_session_read_param(s, k, REMAT_PARAM_VALUE, w));
    w[i] = v;
    CHECK_OK(remat_session_write_param(s, k, w));
    free(w);
}

typedef struct {
    int64_t nx, ny;
} synth;

static remat_status synth_batch(void *user, int64_t step, void *input, void *labels) {
    const synth *b = user;
    float *x = input;
    int32_t *y = labels;
    for (int64_t i = 0; i < b->nx; i++) x[i] = (float)((i * 7 + step * 3) % 11) / 11.0f - 0.5f;
    for (int64_t i = 0; i < b->ny; i++) y[i] = (int32_t)((i + step) % 10);
    return REMAT_OK;
}

/* synth_batch with a NaN in the first image. */
static remat_status nan_batch(void *user, int64_t step, void *input, void *labels) {
    remat_status st = synth_batch(user, step, input, labels);
    ((float *)input)[10] = NAN;
    return st;
}

static void test_finite(void) {
    remat_graph *g;
    remat_model m;
    /* a large tensor (fc1: 256 x 4096) scanned by 1 and 3 threads: the
     * first bad element is named whichever thread finds it */
    for (int threads = 1; threads <= 3; threads += 2) {
        remat_session *s = mlp_session(&g, &m, 64, threads);
        CHECK_OK(remat_session_check_finite(s));
        poke(s, "fc1.weight", 900000, INFINITY);
        CHECK_ERR(remat_session_check_finite(s), REMAT_INVALID,
                  "parameter 'fc1.weight' (index 0 of 6) is not finite: element 900000 of 1048576 is +inf");
        poke(s, "fc1.weight", 700000, NAN);
        CHECK_ERR(remat_session_check_finite(s), REMAT_INVALID, "element 700000 of 1048576 is NaN");
        poke(s, "fc1.weight", 3, -INFINITY);
        CHECK_ERR(remat_session_check_finite(s), REMAT_INVALID, "element 3 of 1048576 is -inf");
        remat_session_destroy(s);
        remat_graph_destroy(g);
    }
    /* a buffer: BatchNorm's running variance */
    remat_model_opts o;
    opts_for(&o, "resnet18");
    o.batch = 2, o.base_channels = 2, o.height = o.width = 16, o.classes = 3;
    remat_session *s = NULL;
    CHECK_OK(remat_graph_create(&g));
    CHECK_OK(remat_model_build(g, &o, &m));
    CHECK_OK(remat_session_create(&s, g, m.loss, NULL));
    CHECK_OK(remat_session_check_finite(s));
    poke(s, "layer2.0.bn1.running_var", 1, NAN);
    CHECK_ERR(remat_session_check_finite(s), REMAT_INVALID, "buffer 'layer2.0.bn1.running_var' (index",
              "is not finite: element 1 of 4 is NaN");
    remat_session_destroy(s);
    remat_graph_destroy(g);

    /* training from an infinite weight stops before its first step */
    s = mlp_session(&g, &m, 28, 2);
    remat_optim_opts oo;
    remat_optim_opts_default(&oo, REMAT_OPTIM_SGD);
    CHECK_OK(remat_session_set_optimizer(s, &oo));
    synth b = {4 * 28 * 28, 4};
    remat_train_opts to = {.epochs = 1, .steps = 3, .batch = 4};
    poke(s, "fc2.bias", 5, INFINITY);
    CHECK_ERR(remat_train_stream(s, &m, synth_batch, &b, &to), REMAT_INVALID,
              "cannot train from these weights: parameter 'fc2.bias' (index 3 of 6) is not finite: element 5 of 128 "
              "is +inf");
    CHECK(remat_session_step_index(s) == 0);
    remat_session_destroy(s);
    remat_graph_destroy(g);

    /* a NaN in the data: the loss is NaN at step 1, and the first NaN
     * gradient is named with it */
    s = mlp_session(&g, &m, 28, 2);
    CHECK_OK(remat_session_set_optimizer(s, &oo));
    CHECK_ERR(remat_train_stream(s, &m, nan_batch, &b, &to), REMAT_INVALID,
              "training diverged: the loss is NaN at step 1; the gradient of parameter 'fc1.weight' (index 0 of 6) "
              "is not finite");
    CHECK(remat_session_step_index(s) == 0);
    remat_session_destroy(s);
    remat_graph_destroy(g);

    /* an update that overflows (finite options: lr and weight decay 1e38)
     * stops training at step 1, the loss of which was finite */
    s = mlp_session(&g, &m, 28, 2);
    oo.lr = 1e38f, oo.weight_decay = 1e38f;
    CHECK_OK(remat_session_set_optimizer(s, &oo));
    CHECK_ERR(remat_train_stream(s, &m, synth_batch, &b, &to), REMAT_INVALID, "training diverged at step 1: ",
              "parameter 'fc1.weight' (index 0 of 6) is not finite: element 0 of 200704 is", "smaller learning rate");
    CHECK(remat_session_step_index(s) == 1);
    remat_session_destroy(s);
    remat_graph_destroy(g);
    printf("  finite check: first bad element named (1 and 3 threads), a buffer; training stops on bad weights, a "
           "NaN loss, an overflowing update\n");
}

/* ------------------------------------------------------------- gzip bomb */

static void put_be32(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)(v >> 24), p[1] = (unsigned char)(v >> 16), p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

/* Writes an IDX header (magic, dims) followed by `zeros` zero bytes,
 * gzip-compressed (zeros compress about 1000 to 1). */
static void write_gz_idx(const char *path, uint32_t magic, int ndim, const uint32_t *dims, uint64_t zeros) {
    gzFile gz = gzopen(path, "wb9");
    CHECK(gz != NULL);
    if (!gz) return;
    unsigned char hdr[16];
    put_be32(hdr, magic);
    for (int i = 0; i < ndim; i++) put_be32(hdr + 4 + 4 * i, dims[i]);
    CHECK(gzwrite(gz, hdr, (unsigned)(4 + 4 * ndim)) == 4 + 4 * ndim);
    static unsigned char zero[1 << 20];
    for (uint64_t done = 0; done < zeros;) {
        unsigned k = zeros - done < sizeof zero ? (unsigned)(zeros - done) : (unsigned)sizeof zero;
        CHECK(gzwrite(gz, zero, k) == (int)k);
        done += k;
    }
    gzclose(gz);
}

static void test_gzip_bomb(const char *dir) {
    char images[512], labels[512], huge[512];
    snprintf(images, sizeof images, "%s/bomb-images.gz", dir);
    snprintf(labels, sizeof labels, "%s/bomb-labels.gz", dir);
    snprintf(huge, sizeof huge, "%s/huge-images.gz", dir);
    /* 60000 images of 28x28 (47 MB of pixels, all there) against 10 labels */
    uint32_t idims[3] = {60000, 28, 28}, ldims[1] = {10};
    write_gz_idx(images, 0x803, 3, idims, (uint64_t)60000 * 28 * 28);
    write_gz_idx(labels, 0x801, 1, ldims, 10);
    remat_dataset *d = NULL;
    double rss0 = peak_rss_mb(), t0 = now();
    CHECK_ERR(remat_dataset_load_idx(&d, images, labels), REMAT_FORMAT, "bomb-images.gz has 60000 images but",
              "bomb-labels.gz has 10 labels");
    double dt = now() - t0, drss = peak_rss_mb() - rss0;
    CHECK(d == NULL);
    CHECK_MSG(dt < 2.0, "refused after %.3f s", dt);
    CHECK_MSG(drss < 16, "the peak RSS grew by %.1f MiB: the 47 MB of pixels were read", drss);
    /* a header announcing 4294967295 images: refused on the header */
    uint32_t hdims[3] = {4294967295u, 28, 28};
    write_gz_idx(huge, 0x803, 3, hdims, 1 << 20);
    t0 = now();
    CHECK_ERR(remat_dataset_load_idx(&d, huge, labels), REMAT_FORMAT,
              "huge-images.gz: the header announces 4294967295 images of 28x28 pixels",
              "more than the 4294967296 bytes (4 GiB)");
    CHECK(d == NULL && now() - t0 < 2.0);
    unlink(images), unlink(labels), unlink(huge);
    printf("  gzip bomb refused on its headers in %.3f s, peak RSS +%.1f MiB\n", dt, drss);
}

/* ------------------------------------------------------------------ main */

/* For hostile.cmake: mlp weights (seed 42) with fc1.weight[3] = +inf. */
static int write_inf_weights(const char *path) {
    remat_graph *g;
    remat_model m;
    remat_session *s = mlp_session(&g, &m, 28, 1);
    poke(s, "fc1.weight", 3, INFINITY);
    CHECK_OK(remat_safetensors_save(s, path));
    remat_session_destroy(s);
    remat_graph_destroy(g);
    return check_exit("test_hostile --write-inf-weights");
}

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "--write-inf-weights") == 0) return write_inf_weights(argv[2]);
    char dir[] = "/tmp/remat-hostile-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    test_gzip_bomb(dir); /* first: its RSS check needs the peak still low */
    rmdir(dir);
    test_model_bounds();
    test_chain_bounds();
    test_optimizer_opts();
    test_relu_nan();
    test_finite();
    return check_exit("test_hostile");
}
