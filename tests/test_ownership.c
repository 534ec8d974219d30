/* test_ownership.c: no hidden state in the public API.
 *
 * remat_evaluate, remat_train and remat_train_stream bind buffers of their
 * own to the model's inputs while they run, and free them before they
 * return. A session must never be left pointing at them: each call gives
 * the caller's bindings back (remat.h, remat_session_bind), so a step
 * right after it reads the caller's batch, or, when the caller had bound
 * nothing, fails cleanly saying the input has no data. Under
 * AddressSanitizer (scripts/test.sh) a read of a freed buffer fails this
 * test. Also: creating a session leaves OpenBLAS's process-wide thread
 * count as the caller set it.
 */
#include "remat.h"
#include "check.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define N 24 /* samples in the data set */
#define B 8  /* batch */

/* Writes a tiny IDX pair (N 28x28 images, labels 0..9) to dir. */
static void write_idx(const char *dir, char *img, char *lab, size_t cap) {
    snprintf(img, cap, "%s/images-idx3-ubyte", dir);
    snprintf(lab, cap, "%s/labels-idx1-ubyte", dir);
    FILE *f = fopen(img, "wb");
    unsigned char h[16] = {0, 0, 8, 3, 0, 0, 0, N, 0, 0, 0, 28, 0, 0, 0, 28};
    fwrite(h, 1, 16, f);
    for (int i = 0; i < N * 28 * 28; i++) fputc((i * 7) % 251, f);
    fclose(f);
    f = fopen(lab, "wb");
    unsigned char hl[8] = {0, 0, 8, 1, 0, 0, 0, N};
    fwrite(hl, 1, 8, f);
    for (int i = 0; i < N; i++) fputc(i % 10, f);
    fclose(f);
}

static remat_status synth(void *user, int64_t step, void *input, void *labels) {
    (void)user;
    for (int i = 0; i < B * 28 * 28; i++) ((float *)input)[i] = (float)((i + step) % 13) / 13.0f;
    for (int i = 0; i < B; i++) ((int32_t *)labels)[i] = (int32_t)((i + step) % 10);
    return REMAT_OK;
}

typedef enum { EVALUATE, TRAIN, STREAM } call;
static const char *const call_name[] = {"remat_evaluate", "remat_train", "remat_train_stream"};

static void after(call c, int caller_bound, const remat_dataset *d) {
    remat_graph *g;
    remat_model m;
    remat_model_opts mo;
    remat_model_opts_default(&mo);
    CHECK_OK(remat_model_opts_for(&mo, "mlp"));
    mo.batch = B;
    CHECK_OK(remat_graph_create(&g));
    CHECK_OK(remat_model_build(g, &mo, &m));
    remat_session_opts so;
    remat_session_opts_default(&so);
    so.threads = 2;
    remat_optim_opts oo;
    remat_optim_opts_default(&oo, REMAT_OPTIM_SGD);
    so.optim = &oo;
    remat_session *s = NULL;
    CHECK_OK(remat_session_create(&s, g, m.loss, &so));
    float x[B * 28 * 28];
    int32_t y[B];
    synth(NULL, 0, x, y);
    if (caller_bound) {
        CHECK_OK(remat_session_bind(s, m.input, x));
        CHECK_OK(remat_session_bind(s, m.labels, y));
    }
    remat_train_opts to = {.epochs = 1, .steps = 2, .batch = B};
    double loss, acc;
    switch (c) {
    case EVALUATE: CHECK_OK(remat_evaluate(s, &m, d, &loss, &acc)); break;
    case TRAIN: CHECK_OK(remat_train(s, &m, d, d, &to)); break;
    case STREAM: CHECK_OK(remat_train_stream(s, &m, synth, NULL, &to)); break;
    }
    const void *want_x = caller_bound ? (const void *)x : NULL, *want_y = caller_bound ? (const void *)y : NULL;
    CHECK_MSG(remat_session_binding(s, m.input) == want_x && remat_session_binding(s, m.labels) == want_y,
              "%s left the session bound to other buffers than the caller's", call_name[c]);
    float l = 0;
    remat_status st = remat_session_step(s, &l);
    if (caller_bound) {
        CHECK_MSG(st == REMAT_OK, "%s, then a step: %s", call_name[c], remat_last_error());
    } else {
        CHECK_MSG(st == REMAT_INVALID && strstr(remat_last_error(), "has no data"),
                  "%s, then a step with nothing bound: %s", call_name[c], remat_last_error());
    }
    printf("%-18s then a step (%s): ok\n", call_name[c], caller_bound ? "caller's batch bound" : "nothing bound");
    remat_session_destroy(s);
    remat_graph_destroy(g);
}

int main(void) {
    char dir[] = "/tmp/remat-ownership-XXXXXX", img[256], lab[256];
    CHECK(mkdtemp(dir) != NULL);
    write_idx(dir, img, lab, sizeof img);
    remat_dataset *d = NULL;
    CHECK_OK(remat_dataset_load_idx(&d, img, lab));
    for (int c = EVALUATE; c <= STREAM; c++)
        for (int bound = 0; bound < 2; bound++) after((call)c, bound, d);
    remat_dataset_destroy(d);
    remove(img), remove(lab), rmdir(dir);

    /* a session leaves the process-wide BLAS setting alone */
    remat_set_blas_threads(2);
    int before = remat_blas_threads();
    remat_graph *g;
    remat_model m;
    remat_model_opts mo;
    remat_model_opts_default(&mo);
    CHECK_OK(remat_model_opts_for(&mo, "mlp"));
    CHECK_OK(remat_graph_create(&g));
    CHECK_OK(remat_model_build(g, &mo, &m));
    remat_session *s = NULL;
    CHECK_OK(remat_session_create(&s, g, m.loss, NULL));
    CHECK_MSG(remat_blas_threads() == before, "creating a session changed BLAS threads from %d to %d", before,
              remat_blas_threads());
    remat_session_destroy(s);
    remat_graph_destroy(g);
    remat_set_blas_threads(1);
    return check_exit("test_ownership");
}
