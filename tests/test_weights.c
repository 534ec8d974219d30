/* test_weights.c: weights move between sessions (and PyTorch) through
 * safetensors by state_dict name: a round trip restores every parameter and
 * buffer bit for bit; a file for another model fails naming the tensor and
 * leaves the session unchanged; PyTorch's num_batches_tracked is skipped. */
#include "../src/train/safetensors.h"
#include "check.h"
#include "testmodels.h"

#include <stdlib.h>
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

int main(void) {
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
        ts[n] = (remat__st_tensor){.name = "features.1.num_batches_tracked", .dtype = "I64", .ndim = 0,
                                   .data = &nbt, .bytes = 8};
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
