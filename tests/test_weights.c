/* test_weights.c: weights move between sessions (and PyTorch) through
 * safetensors by state_dict name: a round trip restores every parameter and
 * buffer bit for bit; a file for another model fails naming the tensor and
 * leaves the session unchanged; PyTorch's num_batches_tracked is skipped.
 *
 * With `--cli PATH` (ctest's cli_grad) it checks `remat grad` end to end
 * against PyTorch instead: for mlp and cnn it writes the fixtures' initial
 * weights (tests/fixtures/README.md) as W, runs `PATH grad` with the
 * fixture itself as the batch file X, and compares the loss and every
 * parameter's gradient in G with PyTorch's (|remat - torch| <= 1e-5 * the
 * largest magnitude of the reference tensor; sampled entries for large
 * ones), then checks that --strategy sqrt writes the same bytes and that a
 * batch of the wrong shape is refused naming the tensor; for the tiny gpt2
 * it runs `grad` on the fixture's weights and batch files and compares
 * with its gradients file. */
#include "../src/train/safetensors.h"
#include "check.h"
#include "fixture_fill.h"
#include "testmodels.h"

#include <math.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static remat_session *make(remat_graph **g, remat_model *m, const char *name, uint64_t seed) {
    CHECK_OK(remat_graph_create(g));
    if (strcmp(name, "bnnet") == 0) {
        CHECK_OK(build_bnnet(*g, m, 2));
    } else {
        remat_model_opts mo;
        remat_model_opts_default(&mo);
        mo.name = name;
        mo.batch = 2;
        CHECK_OK(remat_model_build(*g, &mo, m));
    }
    remat_session_opts o;
    remat_session_opts_default(&o);
    o.seed = seed;
    o.threads = 1;
    remat_session *s = NULL;
    CHECK_OK(remat_session_create(&s, *g, m->loss, &o));
    return s;
}

static int same_params(const remat_session *a, const remat_session *b) {
    if (remat_session_param_count(a) != remat_session_param_count(b)) return 0;
    for (int i = 0; i < remat_session_param_count(a); i++) {
        remat_param_info pa, pb;
        remat_session_param(a, i, &pa);
        remat_session_param(b, i, &pb);
        if (strcmp(pa.name, pb.name) || pa.numel != pb.numel ||
            memcmp(pa.data, pb.data, (size_t)pa.numel * sizeof(float)))
            return 0;
    }
    return 1;
}

/* ------------------------------------------------------ remat grad */

/* The fixtures' deterministic initial weights (fixture_fill.h). */
static void fixture_init(remat_session *s) {
    for (int i = 0; i < remat_session_param_count(s); i++) {
        remat_param_info p, w;
        remat_session_param(s, i, &p);
        char layer[256], wname[300];
        snprintf(layer, sizeof layer, "%s", p.name);
        char *dot = strrchr(layer, '.');
        if (!p.trainable || !dot) continue;
        *dot = 0;
        snprintf(wname, sizeof wname, "%s.weight", layer);
        int wi = remat_session_find_param(s, wname);
        if (wi < 0 || remat_session_param(s, wi, &w) != REMAT_OK || w.ndim < 2) continue;
        float bound = (float)(1.0 / sqrt((double)(w.numel / w.dims[0])));
        fill(name_seed(p.name), p.numel, bound, p.data);
    }
}

/* Compares gradient g (n floats) with the fixture's key, whole or sampled. */
static void compare_grad(const remat__st *fx, const char *key, const float *g, int64_t n) {
    remat__st_tensor t, ti, tv, tst;
    char k2[320];
    int i = remat__st_find(fx, key);
    if (i >= 0 && remat__st_get(fx, i, &t) == REMAT_OK) {
        CHECK_MSG((int64_t)(t.bytes / 4) == n, "%s: %lld elements, the fixture has %zu", key, (long long)n,
                  t.bytes / 4);
        if ((int64_t)(t.bytes / 4) != n) return;
        const float *r = t.data;
        double S = 0, worst = 0;
        for (int64_t k = 0; k < n; k++) S = fmax(S, fabs(r[k]));
        for (int64_t k = 0; k < n; k++) worst = fmax(worst, fabs((double)g[k] - r[k]));
        CHECK_MSG(worst <= 1e-5 * S, "%s: max |remat - torch| %.3g > 1e-5 * %.3g", key, worst, S);
        return;
    }
    snprintf(k2, sizeof k2, "%s.idx", key);
    int a = remat__st_find(fx, k2);
    snprintf(k2, sizeof k2, "%s.val", key);
    int b = remat__st_find(fx, k2);
    snprintf(k2, sizeof k2, "%s.stats", key);
    int c = remat__st_find(fx, k2);
    CHECK_MSG(a >= 0 && b >= 0 && c >= 0, "the fixture has no %s", key);
    if (a < 0 || b < 0 || c < 0) return;
    remat__st_get(fx, a, &ti), remat__st_get(fx, b, &tv), remat__st_get(fx, c, &tst);
    const int32_t *idx = ti.data;
    const float *val = tv.data;
    double S = ((const double *)tst.data)[3], worst = 0;
    for (size_t k = 0; k < ti.bytes / 4; k++) {
        CHECK(idx[k] >= 0 && idx[k] < n);
        if (idx[k] >= 0 && idx[k] < n) worst = fmax(worst, fabs((double)g[idx[k]] - val[k]));
    }
    CHECK_MSG(worst <= 1e-5 * S, "%s (sampled): max |remat - torch| %.3g > 1e-5 * %.3g", key, worst, S);
}

/* Runs cmd, returns its exit status; its output (stdout and stderr) goes to out. */
static int run(const char *cmd, char *out, size_t cap) {
    char full[4096];
    snprintf(full, sizeof full, "%s 2>&1", cmd);
    FILE *p = popen(full, "r");
    if (!p) return -1;
    size_t n = fread(out, 1, cap - 1, p);
    out[n] = 0;
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static int same_file(const char *a, const char *b) {
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    int same = fa && fb;
    while (same) {
        int ca = fgetc(fa), cb = fgetc(fb);
        same = ca == cb;
        if (ca == EOF) break;
    }
    if (fa) fclose(fa);
    if (fb) fclose(fb);
    return same;
}

/* Appended to every `remat grad` command (`--cli PATH "--device cuda"`). */
static const char *cli_extra = "";

static void cli_grad(const char *cli, const char *dir, const char *model, int64_t c, int64_t h, int64_t w) {
    remat_graph *g = NULL;
    remat_model m;
    remat_model_opts mo;
    remat_model_opts_default(&mo);
    mo.name = model, mo.batch = 8, mo.channels = c, mo.height = h, mo.width = w, mo.dropout_scale = 0;
    CHECK_OK(remat_graph_create(&g));
    CHECK_OK(remat_model_build(g, &mo, &m));
    remat_session_opts so;
    remat_session_opts_default(&so);
    so.threads = 1;
    remat_session *s = NULL;
    CHECK_OK(remat_session_create(&s, g, m.loss, &so));
    if (!s) {
        remat_graph_destroy(g);
        return;
    }
    fixture_init(s);
    char W[512], G[512], G2[512], fx[256], cmd[3000], out[4096];
    snprintf(W, sizeof W, "%s/%s-w.safetensors", dir, model);
    snprintf(G, sizeof G, "%s/%s-g.safetensors", dir, model);
    snprintf(G2, sizeof G2, "%s/%s-g2.safetensors", dir, model);
    snprintf(fx, sizeof fx, "fixtures/%s.safetensors", model);
    CHECK_OK(remat_safetensors_save(s, W));
    const char *fmt = "'%s' grad --model %s --batch %lld --image %lldx%lldx%lld --init-from '%s' "
                      "--batch-from %s --out '%s' --threads 1%s %s";
    snprintf(cmd, sizeof cmd, fmt, cli, model, 8LL, (long long)c, (long long)h, (long long)w, W, fx, G, "", cli_extra);
    CHECK_MSG(run(cmd, out, sizeof out) == 0 && strstr(out, "wrote loss and"), "%s\n%s", cmd, out);
    snprintf(cmd, sizeof cmd, fmt, cli, model, 8LL, (long long)c, (long long)h, (long long)w, W, fx, G2,
             " --strategy sqrt", cli_extra);
    CHECK_MSG(run(cmd, out, sizeof out) == 0, "%s\n%s", cmd, out);
    CHECK_MSG(same_file(G, G2), "%s: --strategy sqrt changed the gradients", model);
    /* the file against PyTorch */
    remat__st *gf = NULL, *ff = NULL;
    CHECK_OK(remat__st_open(&gf, G));
    CHECK_OK(remat__st_open(&ff, fx));
    int n = 0;
    for (int i = 0; gf && ff && i < remat_session_param_count(s); i++) {
        remat_param_info p;
        remat_session_param(s, i, &p);
        if (!p.trainable) continue;
        char key[280];
        snprintf(key, sizeof key, "grad.%s", p.name);
        int j = remat__st_find(gf, key);
        remat__st_tensor t;
        CHECK_MSG(j >= 0 && remat__st_get(gf, j, &t) == REMAT_OK && strcmp(t.dtype, "F32") == 0 && t.ndim == p.ndim &&
                      t.bytes == (size_t)p.numel * 4,
                  "%s: %s is missing or has the wrong dtype or shape", G, key);
        if (j < 0) continue;
        float *gv = malloc(t.bytes);
        memcpy(gv, t.data, t.bytes);
        compare_grad(ff, key, gv, p.numel);
        free(gv);
        n++;
    }
    remat__st_tensor lt, lr;
    int li = gf ? remat__st_find(gf, "loss") : -1, ri = ff ? remat__st_find(ff, "loss") : -1;
    CHECK(li >= 0 && ri >= 0);
    if (li >= 0 && ri >= 0) {
        remat__st_get(gf, li, &lt), remat__st_get(ff, ri, &lr);
        float a, b;
        memcpy(&a, lt.data, 4), memcpy(&b, lr.data, 4);
        CHECK_MSG(fabs((double)a - b) <= 1e-5 * fabs((double)b), "%s: loss %.9g, torch %.9g", model, a, b);
        printf("remat grad %s: loss %.7f (torch %.7f), %d gradients within 1e-5 of PyTorch's\n", model, a, b, n);
    }
    CHECK(gf && remat__st_count(gf) == n + 1);
    remat__st_close(gf);
    remat__st_close(ff);
    /* a batch of another shape: refused, naming the tensor and both shapes */
    snprintf(cmd, sizeof cmd, fmt, cli, model, 4LL, (long long)c, (long long)h, (long long)w, W, fx, G, "", cli_extra);
    char want[128];
    snprintf(want, sizeof want, "tensor 'input' has shape (8, %lld, %lld, %lld) but the model needs (4,", (long long)c,
             (long long)h, (long long)w);
    CHECK_MSG(run(cmd, out, sizeof out) == 1 && strstr(out, want), "%s\n%s", cmd, out);
    remove(W), remove(G), remove(G2);
    remat_session_destroy(s);
    remat_graph_destroy(g);
}

/* The gpt2 fixture comes as weights, batch and gradients files already
 * (tests/fixtures/gpt2_tiny/README.md): remat grad reads the first two and
 * must write the third. */
static void cli_grad_gpt2(const char *cli, const char *dir) {
    const char *fx = "fixtures/gpt2_tiny";
    char G[512], cmd[3000], out[4096], path[256];
    snprintf(G, sizeof G, "%s/gpt2-g.safetensors", dir);
    snprintf(cmd, sizeof cmd,
             "'%s' grad --model gpt2 --layers 2 --embd 24 --heads 4 --context 16 --vocab 64 --batch 2 "
             "--init-from %s/weights.safetensors --batch-from %s/batch.safetensors --out '%s' --threads 1 %s",
             cli, fx, fx, G, cli_extra);
    CHECK_MSG(run(cmd, out, sizeof out) == 0, "%s\n%s", cmd, out);
    snprintf(path, sizeof path, "%s/grads.safetensors", fx);
    remat__st *gf = NULL, *ff = NULL;
    CHECK_OK(remat__st_open(&gf, G));
    CHECK_OK(remat__st_open(&ff, path));
    int n = 0;
    for (int i = 0; gf && ff && i < remat__st_count(ff); i++) {
        remat__st_tensor r, t;
        remat__st_get(ff, i, &r);
        int j = remat__st_find(gf, r.name);
        CHECK_MSG(j >= 0, "%s: no %s", G, r.name);
        if (j < 0 || remat__st_get(gf, j, &t) != REMAT_OK) continue;
        CHECK_MSG(t.bytes == r.bytes && strcmp(t.dtype, "F32") == 0, "%s: %s differs in size", G, r.name);
        if (t.bytes != r.bytes) continue;
        float *gv = malloc(t.bytes);
        memcpy(gv, t.data, t.bytes);
        if (strcmp(r.name, "loss") == 0) {
            float b;
            memcpy(&b, r.data, 4);
            CHECK_MSG(fabs((double)gv[0] - b) <= 1e-5 * fabs((double)b), "gpt2: loss %.9g, torch %.9g", gv[0], b);
        } else {
            compare_grad(ff, r.name, gv, (int64_t)(t.bytes / 4));
            n++;
        }
        free(gv);
    }
    CHECK(gf && ff && remat__st_count(gf) == remat__st_count(ff));
    printf("remat grad gpt2: loss and %d gradients within 1e-5 of PyTorch's\n", n);
    remat__st_close(gf);
    remat__st_close(ff);
    remove(G);
}

int main(int argc, char **argv) {
    if ((argc == 3 || argc == 4) && strcmp(argv[1], "--cli") == 0) {
        if (argc == 4) cli_extra = argv[3]; /* e.g. "--device cuda" */
        if (strstr(cli_extra, "cuda") && remat_device_available(REMAT_DEVICE_CUDA) != REMAT_OK) {
            printf("%s --cli: skipped: %s\n", argv[0], remat_last_error());
            return 77;
        }
        char d[] = "/tmp/remat-grad-XXXXXX";
        CHECK(mkdtemp(d) != NULL);
        cli_grad(argv[2], d, "mlp", 1, 28, 28);
        cli_grad(argv[2], d, "cnn", 3, 32, 32);
        cli_grad_gpt2(argv[2], d);
        rmdir(d);
        return check_exit("test_weights --cli");
    }
    char dir[] = "/tmp/remat-weights-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char path[256], path2[256];
    snprintf(path, sizeof path, "%s/bnnet.safetensors", dir);

    remat_graph *ga, *gb, *gc, *gd;
    remat_model ma, mb, mc, md;
    char path3[256];
    snprintf(path3, sizeof path3, "%s/torch.safetensors", dir);
    remat_session *a = make(&ga, &ma, "bnnet", 1), *b = make(&gb, &mb, "bnnet", 2);
    /* make the buffers differ from their defaults */
    int rv = remat_session_find_param(a, "features.1.running_var");
    CHECK(rv >= 0);
    remat_param_info p;
    remat_session_param(a, rv, &p);
    for (int64_t i = 0; i < p.numel; i++) p.data[i] = 1.5f + (float)i;
    CHECK(!same_params(a, b));
    CHECK_OK(remat_safetensors_save(a, path));
    CHECK_OK(remat_safetensors_load(b, path, 1));
    CHECK(same_params(a, b));

    /* the file is plain safetensors with state_dict names */
    remat__st *f = NULL;
    CHECK_OK(remat__st_open(&f, path));
    CHECK(f && remat__st_find(f, "features.0.weight") >= 0 && remat__st_find(f, "fc.bias") >= 0);
    CHECK(f && remat__st_count(f) == remat_session_param_count(a));

    /* PyTorch's state_dict has num_batches_tracked (I64): skipped */
    if (f) {
        int n = remat__st_count(f);
        remat__st_tensor *ts = calloc((size_t)n + 1, sizeof *ts);
        for (int i = 0; i < n; i++) remat__st_get(f, i, &ts[i]);
        int64_t nbt = 3;
        ts[n] = (remat__st_tensor){
            .name = "features.1.num_batches_tracked", .dtype = "I64", .ndim = 0, .data = &nbt, .bytes = 8};
        CHECK_OK(remat__st_write(path3, n + 1, ts, NULL));
        free(ts);
        remat_session *c2 = make(&gc, &mc, "bnnet", 3);
        CHECK_OK(remat_safetensors_load(c2, path3, 1));
        CHECK(same_params(a, c2));
        remat_session_destroy(c2);
        remat_graph_destroy(gc);
    }
    remat__st_close(f);

    /* another model's file: error naming the tensor, session unchanged */
    remat_session *c = make(&gc, &mc, "mlp", 4), *c0 = make(&gd, &md, "mlp", 4);
    remat_status st = remat_safetensors_load(c, path, 0);
    CHECK(st != REMAT_OK);
    CHECK_MSG(strstr(remat_last_error(), "features.") != NULL, "message: %s", remat_last_error());
    CHECK(same_params(c, c0));
    /* a round trip for mlp too */
    snprintf(path2, sizeof path2, "%s/mlp.safetensors", dir);
    CHECK_OK(remat_safetensors_save(c, path2));
    CHECK_OK(remat_safetensors_load(c0, path2, 1));
    CHECK(same_params(c, c0));
    remove(path);
    remove(path2);
    remove(path3);
    rmdir(dir);
    remat_session_destroy(a);
    remat_session_destroy(b);
    remat_session_destroy(c);
    remat_session_destroy(c0);
    remat_graph_destroy(ga);
    remat_graph_destroy(gb);
    remat_graph_destroy(gc);
    remat_graph_destroy(gd);
    return check_exit("test_weights");
}
