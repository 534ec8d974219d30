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

/* Copies every parameter's values (or gradients) to one host buffer
 * (wherever the session's device is) and points ts[i].data into it;
 * returns the buffer (caller frees) or NULL after remat__err. Buffers
 * (grads: skipped) keep ts[i].data NULL. */
static float *host_copy(remat_session *s, remat__st_tensor *ts, remat_param_part part, const char *path) {
    int n = remat_session_param_count(s);
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        remat_param_info info;
        remat_session_param(s, i, &info);
        if (part == REMAT_PARAM_VALUE || info.trainable) total += (size_t)info.numel;
    }
    float *host = malloc((total ? total : 1) * sizeof *host);
    if (!host) {
        remat__err(REMAT_NOMEM, "%s: out of memory", path);
        return NULL;
    }
    size_t at = 0;
    for (int i = 0; i < n; i++) {
        remat_param_info info;
        remat_session_param(s, i, &info);
        if (part == REMAT_PARAM_GRAD && !info.trainable) continue;
        if (remat_session_read_param(s, i, part, host + at) != REMAT_OK) {
            free(host);
            return NULL;
        }
        ts[i].data = host + at;
        at += (size_t)info.numel;
    }
    return host;
}

remat_status remat_safetensors_save(remat_session *s, const char *path) {
    if (!s || !path) return remat__err(REMAT_INVALID, "remat_safetensors_save: NULL session or path");
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
        for (int d = 0; d < info.ndim && d < REMAT_MAX_DIMS; d++) ts[i].dims[d] = info.dims[d];
        ts[i].bytes = (size_t)info.numel * sizeof(float);
    }
    float *host = rc == REMAT_OK ? host_copy(s, ts, REMAT_PARAM_VALUE, path) : NULL;
    if (rc == REMAT_OK && !host) rc = REMAT_NOMEM;
    /* "format": "pt" is what PyTorch-side loaders (transformers) expect. */
    static const char *const meta[] = {"format", "pt", NULL};
    if (rc == REMAT_OK) rc = remat__st_write(path, n, ts, meta);
    free(host);
    free(ts);
    return rc;
}

/* "parameter" or "buffer", for messages. */
static const char *kind(const remat_param_info *p) { return p->trainable ? "parameter" : "buffer"; }

/* Checks tensor i of f against the session; *param gets its parameter. */
static remat_status check_tensor(const remat_session *s, const remat__st *f, int i, int *param) {
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
        return remat__err(REMAT_FORMAT, "%s: tensor '%s' has dtype %s, the %s needs F32", path, t.name, t.dtype,
                          kind(&p));
    int same = t.ndim == p.ndim;
    for (int d = 0; same && d < t.ndim; d++) same = t.dims[d] == p.dims[d];
    if (!same) {
        char a[160], b[160];
        return remat__err(REMAT_SHAPE, "%s: tensor '%s' has shape %s but the %s has %s", path, t.name,
                          remat__dims_str(t.ndim, t.dims, a, sizeof a), kind(&p),
                          remat__dims_str(p.ndim, p.dims, b, sizeof b));
    }
    *param = k;
    return REMAT_OK;
}

remat_status remat_safetensors_load(remat_session *s, const char *path, int strict) {
    if (!s || !path) return remat__err(REMAT_INVALID, "remat_safetensors_load: NULL session or path");
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
    for (int i = 0; i < n && rc == REMAT_OK; i++) rc = check_tensor(s, f, i, &target[i]);
    for (int k = 0; k < np && rc == REMAT_OK && strict; k++) {
        remat_param_info p;
        rc = remat_session_param(s, k, &p);
        if (rc == REMAT_OK && remat__st_find(f, p.name) < 0) {
            char a[160];
            rc = remat__err(REMAT_NOT_FOUND,
                            "%s: %s '%s' %s is missing from the file (strict "
                            "load)",
                            path, kind(&p), p.name, remat__dims_str(p.ndim, p.dims, a, sizeof a));
        }
    }
    /* Pass 2: copy. */
    for (int i = 0; i < n && rc == REMAT_OK; i++) {
        remat__st_tensor t;
        remat_param_info p;
        if (target[i] < 0) continue;
        rc = remat__st_get(f, i, &t);
        if (rc == REMAT_OK) rc = remat_session_param(s, target[i], &p);
        if (rc == REMAT_OK && t.bytes) rc = remat_session_write_param(s, target[i], t.data);
    }
    free(target);
    remat__st_close(f);
    return rc;
}

/* ------------------------------------------------------ single tensors */

static const char *dtype_name(remat_dtype d) { return d == REMAT_I32 ? "I32" : "F32"; }

/* "the file has: a, b, c" (at most ~400 characters) for a missing tensor. */
static void list_names(const remat__st *f, char *buf, size_t cap) {
    size_t at = 0;
    int n = remat__st_count(f);
    buf[0] = 0;
    for (int i = 0; i < n && at + 8 < cap; i++) {
        remat__st_tensor t;
        if (remat__st_get(f, i, &t) != REMAT_OK) break;
        int k = snprintf(buf + at, cap - at, "%s%s", i ? ", " : "", t.name);
        if (k < 0 || (size_t)k >= cap - at) {
            snprintf(buf + at, cap - at, ", ...");
            break;
        }
        at += (size_t)k;
    }
}

remat_status remat_safetensors_read(const char *path, const char *name, remat_dtype dtype, int ndim,
                                    const int64_t *dims, void *out) {
    if (!path || !name || !out || ndim < 0 || ndim > REMAT__ST_MAX_DIMS || (ndim && !dims) ||
        (dtype != REMAT_F32 && dtype != REMAT_I32))
        return remat__err(REMAT_INVALID, "remat_safetensors_read: bad arguments");
    remat__st *f;
    remat_status rc = remat__st_open(&f, path);
    if (rc != REMAT_OK) return rc;
    int i = remat__st_find(f, name);
    remat__st_tensor t;
    char a[160], b[400];
    if (i < 0) {
        list_names(f, b, sizeof b);
        rc = remat__err(REMAT_NOT_FOUND, "%s: no tensor '%s' (the file has %d: %s)", path, name, remat__st_count(f),
                        remat__st_count(f) ? b : "none");
    }
    if (rc == REMAT_OK) rc = remat__st_get(f, i, &t);
    int same = rc == REMAT_OK && t.ndim == ndim;
    for (int d = 0; same && d < ndim; d++) same = t.dims[d] == dims[d];
    if (rc == REMAT_OK && !same)
        rc = remat__err(REMAT_SHAPE, "%s: tensor '%s' has shape %s but the model needs %s", path, name,
                        remat__dims_str(t.ndim, t.dims, a, sizeof a), remat__dims_str(ndim, dims, b, sizeof b));
    int widen = rc == REMAT_OK && dtype == REMAT_I32 && strcmp(t.dtype, "I64") == 0;
    if (rc == REMAT_OK && !widen && strcmp(t.dtype, dtype_name(dtype)) != 0)
        rc = remat__err(REMAT_FORMAT, "%s: tensor '%s' has dtype %s but the model needs %s%s", path, name, t.dtype,
                        dtype_name(dtype), dtype == REMAT_I32 ? " (or I64)" : "");
    if (rc == REMAT_OK && !widen) {
        if (t.bytes) memcpy(out, t.data, t.bytes);
    } else if (rc == REMAT_OK) {
        /* I64 labels from PyTorch, narrowed when every value fits */
        int64_t n = (int64_t)(t.bytes / 8);
        const unsigned char *p = t.data;
        for (int64_t k = 0; k < n && rc == REMAT_OK; k++) {
            int64_t v;
            memcpy(&v, p + 8 * k, 8);
            if (v < INT32_MIN || v > INT32_MAX)
                rc = remat__err(REMAT_INVALID, "%s: tensor '%s': element %lld is %lld, outside int32", path, name,
                                (long long)k, (long long)v);
            else ((int32_t *)out)[k] = (int32_t)v;
        }
    }
    remat__st_close(f);
    return rc;
}

remat_status remat_safetensors_save_grads(remat_session *s, const char *path, float loss) {
    if (!s || !path) return remat__err(REMAT_INVALID, "remat_safetensors_save_grads: NULL session or path");
    int n = remat_session_param_count(s);
    remat__st_tensor *ts = calloc((size_t)n + 1, sizeof *ts);
    char **names = calloc((size_t)n + 1, sizeof *names);
    remat_status rc = REMAT_OK;
    if (!ts || !names) rc = remat__err(REMAT_NOMEM, "%s: out of memory", path);
    int k = 0;
    if (rc == REMAT_OK)
        ts[k++] = (remat__st_tensor){
            .name = "loss", .dtype = "F32", .ndim = 1, .dims = {1}, .data = &loss, .bytes = sizeof loss};
    for (int i = 0; i < n && rc == REMAT_OK; i++) {
        remat_param_info p;
        rc = remat_session_param(s, i, &p);
        if (rc != REMAT_OK || !p.trainable) continue;
        names[k] = malloc(strlen(p.name) + 6);
        if (!names[k]) {
            rc = remat__err(REMAT_NOMEM, "%s: out of memory", path);
            break;
        }
        sprintf(names[k], "grad.%s", p.name);
        ts[k].name = names[k];
        ts[k].dtype = "F32";
        ts[k].ndim = p.ndim;
        for (int d = 0; d < p.ndim && d < REMAT_MAX_DIMS; d++) ts[k].dims[d] = p.dims[d];
        ts[k].bytes = (size_t)p.numel * sizeof(float);
        if (!(ts[k].data = malloc(ts[k].bytes ? ts[k].bytes : 1)))
            rc = remat__err(REMAT_NOMEM, "%s: out of memory", path);
        else rc = remat_session_read_param(s, i, REMAT_PARAM_GRAD, (float *)ts[k].data);
        k++;
    }
    static const char *const meta[] = {"format", "pt", NULL};
    if (rc == REMAT_OK) rc = remat__st_write(path, k, ts, meta);
    for (int i = 1; ts && i < k; i++) free((void *)ts[i].data);
    for (int i = 0; names && i <= n; i++) free(names[i]);
    free(names);
    free(ts);
    return rc;
}
