/* weights.c: saving and loading a session's parameters as safetensors.
 *
 * Built only on the public parameter calls (remat_session_param_count,
 * remat_session_param, remat_session_find_param) and the generic reader and
 * writer of safetensors.c. Tensors carry PyTorch state_dict names and F32
 * data, so a file written here loads with safetensors.torch.load_file into
 * the equivalent PyTorch module, and the other way round.
 *
 * Loading checks every tensor of the file (name, dtype, shape) before it
 * copies any, so a failed load leaves the session's values unchanged.
 */
#include "safetensors.h"

#include <stdlib.h>

remat_status remat_safetensors_save(const remat_session *s,
                                    const char *path) {
    if (!s || !path)
        return remat__err(REMAT_INVALID,
                          "remat_safetensors_save: NULL session or path");
    int n = remat_session_param_count(s);
    remat__st_tensor *ts = calloc((size_t)(n > 0 ? n : 1), sizeof *ts);
    if (!ts) return remat__err(REMAT_NOMEM, "%s: out of memory", path);
    remat_status rc = REMAT_OK;
    for (int i = 0; i < n && rc == REMAT_OK; i++) {
        remat_param_info info;
        rc = remat_session_param(s, i, &info);
        if (rc != REMAT_OK) break;
        ts[i].name = info.name;
        ts[i].dtype = "F32";
        ts[i].ndim = info.ndim;
        for (int d = 0; d < info.ndim && d < REMAT_MAX_DIMS; d++)
            ts[i].dims[d] = info.dims[d];
        ts[i].data = info.data;
        ts[i].bytes = (size_t)info.numel * sizeof(float);
    }
    /* "format": "pt" is what PyTorch-side loaders (transformers) expect. */
    static const char *const meta[] = {"format", "pt", NULL};
    if (rc == REMAT_OK) rc = remat__st_write(path, n, ts, meta);
    free(ts);
    return rc;
}

/* "parameter" or "buffer", for messages. */
static const char *kind(const remat_param_info *p) {
    return p->trainable ? "parameter" : "buffer";
}

static const char *shape_str(int ndim, const int64_t *dims, char *buf,
                             size_t cap) {
    size_t at = (size_t)snprintf(buf, cap, "(");
    for (int i = 0; i < ndim && at < cap; i++)
        at += (size_t)snprintf(buf + at, cap - at, "%s%lld", i ? ", " : "",
                               (long long)dims[i]);
    if (at < cap) snprintf(buf + at, cap - at, ")");
    return buf;
}

/* Checks tensor i of f against the session; *param gets its parameter. */
static remat_status check_tensor(const remat_session *s, const remat__st *f,
                                 int i, int *param) {
    const char *path = remat__st_path(f);
    remat__st_tensor t;
    remat_status rc = remat__st_get(f, i, &t);
    if (rc != REMAT_OK) return rc;
    /* PyTorch's BatchNorm counts its batches in the state_dict; remat has
     * no such counter (momentum is always set), so the entry is skipped. */
    size_t nl = strlen(t.name), sl = strlen(".num_batches_tracked");
    if (nl >= sl && strcmp(t.name + nl - sl, ".num_batches_tracked") == 0) {
        *param = -1;
        return REMAT_OK;
    }
    int k = remat_session_find_param(s, t.name);
    if (k < 0)
        return remat__err(REMAT_NOT_FOUND,
                          "%s: tensor '%s' is not a parameter or buffer of "
                          "the model",
                          path, t.name);
    remat_param_info p;
    rc = remat_session_param(s, k, &p);
    if (rc != REMAT_OK) return rc;
    if (strcmp(t.dtype, "F32") != 0)
        return remat__err(REMAT_FORMAT,
                          "%s: tensor '%s' has dtype %s, the %s needs F32",
                          path, t.name, t.dtype, kind(&p));
    int same = t.ndim == p.ndim;
    for (int d = 0; same && d < t.ndim; d++) same = t.dims[d] == p.dims[d];
    if (!same) {
        char a[160], b[160];
        return remat__err(REMAT_SHAPE,
                          "%s: tensor '%s' has shape %s but the %s has %s",
                          path, t.name, shape_str(t.ndim, t.dims, a, sizeof a),
                          kind(&p), shape_str(p.ndim, p.dims, b, sizeof b));
    }
    *param = k;
    return REMAT_OK;
}

remat_status remat_safetensors_load(remat_session *s, const char *path,
                                    int strict) {
    if (!s || !path)
        return remat__err(REMAT_INVALID,
                          "remat_safetensors_load: NULL session or path");
    remat__st *f;
    remat_status rc = remat__st_open(&f, path);
    if (rc != REMAT_OK) return rc;
    int n = remat__st_count(f), np = remat_session_param_count(s);
    int *target = malloc((size_t)(n > 0 ? n : 1) * sizeof *target);
    if (!target) {
        remat__st_close(f);
        return remat__err(REMAT_NOMEM, "%s: out of memory", path);
    }
    /* Pass 1: check everything; the session is not touched. */
    for (int i = 0; i < n && rc == REMAT_OK; i++)
        rc = check_tensor(s, f, i, &target[i]);
    for (int k = 0; k < np && rc == REMAT_OK && strict; k++) {
        remat_param_info p;
        rc = remat_session_param(s, k, &p);
        if (rc == REMAT_OK && remat__st_find(f, p.name) < 0) {
            char a[160];
            rc = remat__err(REMAT_NOT_FOUND,
                            "%s: %s '%s' %s is missing from the file (strict "
                            "load)",
                            path, kind(&p), p.name,
                            shape_str(p.ndim, p.dims, a, sizeof a));
        }
    }
    /* Pass 2: copy. */
    for (int i = 0; i < n && rc == REMAT_OK; i++) {
        remat__st_tensor t;
        remat_param_info p;
        if (target[i] < 0) continue;
        rc = remat__st_get(f, i, &t);
        if (rc == REMAT_OK) rc = remat_session_param(s, target[i], &p);
        if (rc == REMAT_OK && t.bytes) memcpy(p.data, t.data, t.bytes);
    }
    free(target);
    remat__st_close(f);
    return rc;
}
