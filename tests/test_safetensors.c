/* test_safetensors.c: the safetensors reader and writer, and weights,
 * batches and gradients moved through them.
 *
 * The low-level layer round-trips every dtype, reads the PyTorch fixtures,
 * and rejects each kind of malformed file (header length beyond the file
 * or absurdly large, bad JSON, offsets out of range, overlapping, leaving
 * gaps or not matching dtype x shape, unknown dtypes, bad shapes) with a
 * message naming the file and the tensor; truncating a valid file at every
 * length or corrupting any header byte never crashes it (run this under
 * AddressSanitizer). On top: loading weights into a session fails naming
 * the tensor for a wrong dtype, a wrong shape, an unknown name or (strict)
 * a missing parameter, and leaves the session unchanged; reading one
 * tensor for a model input checks shape and dtype (I64 labels narrowed);
 * gradients are written as "loss" and "grad.<name>". */
#if !defined(_GNU_SOURCE) && !defined(_XOPEN_SOURCE)
#define _XOPEN_SOURCE 700
#endif

#include "../src/train/safetensors.h"
#include "check.h"
#include "testmodels.h"

#include <fcntl.h>
#include <ftw.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char tmpdir[256];

/* One line per group of checks: "ok" or "FAIL" and what was checked. */
static int section_failures;
static void section_begin(void) { section_failures = check_failures; }
static void section_end(const char *what) {
    printf("%s %s\n", check_failures == section_failures ? "ok  " : "FAIL", what);
    fflush(stdout);
}

static const char *tpath(const char *name) {
    static char buf[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", tmpdir, name);
    return buf[k];
}

static void write_bytes(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    CHECK_MSG(f != NULL, "cannot create %s", path);
    if (!f) return;
    CHECK(n == 0 || fwrite(p, 1, n, f) == n);
    fclose(f);
}

static unsigned char *read_all(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc((size_t)len + 1);
    *n = b ? fread(b, 1, (size_t)len, f) : 0;
    fclose(f);
    return b;
}

/* ------------------------------------------------------------ safetensors */

/* Writes a safetensors file with this header text, `hlen` as the stated
 * header length (or the text's own length when 0) and `data` bytes of
 * data. */
static void write_st(const char *path, const char *json, uint64_t hlen, size_t data) {
    size_t jl = strlen(json);
    unsigned char *b = calloc(1, 8 + jl + data);
    uint64_t h = hlen ? hlen : jl;
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)(h >> (8 * i));
    memcpy(b + 8, json, jl);
    for (size_t i = 0; i < data; i++) b[8 + jl + i] = (unsigned char)i;
    write_bytes(path, b, 8 + jl + data);
    free(b);
}

static int same_tensor(const remat__st_tensor *a, const remat__st_tensor *b) {
    if (strcmp(a->name, b->name) || strcmp(a->dtype, b->dtype) || a->ndim != b->ndim || a->bytes != b->bytes) return 0;
    for (int i = 0; i < a->ndim; i++)
        if (a->dims[i] != b->dims[i]) return 0;
    return a->bytes == 0 || memcmp(a->data, b->data, a->bytes) == 0;
}

static void test_st_roundtrip(void) {
    section_begin();
    float w[6] = {1.5f, -2.0f, 3.25f, 0.0f, -0.0f, 1e-30f};
    int64_t steps[4] = {1, -2, 1ll << 40, INT64_MIN};
    double scale = 3.141592653589793;
    int32_t ids[3] = {7, -8, 9};
    remat__st_tensor ts[5] = {
        {.name = "layer.0.weight", .dtype = "F32", .ndim = 2, .dims = {2, 3}, .data = w, .bytes = sizeof w},
        {.name = "steps", .dtype = "I64", .ndim = 1, .dims = {4}, .data = steps, .bytes = sizeof steps},
        {.name = "scale \"q\"\\", .dtype = "F64", .ndim = 0, .data = &scale, .bytes = sizeof scale},
        {.name = "ids", .dtype = "I32", .ndim = 1, .dims = {3}, .data = ids, .bytes = sizeof ids},
        {.name = "empty", .dtype = "F32", .ndim = 2, .dims = {0, 5}, .data = NULL, .bytes = 0},
    };
    const char *meta[] = {"format", "pt", "note", "a \"quoted\"\nvalue", NULL};
    const char *path = tpath("rt.safetensors");
    CHECK_OK(remat__st_write(path, 5, ts, meta));
    CHECK(access(tpath("rt.safetensors.tmp"), F_OK) != 0);
    remat__st *f = NULL;
    CHECK_OK(remat__st_open(&f, path));
    if (f) {
        CHECK(remat__st_count(f) == 5);
        CHECK(strcmp(remat__st_path(f), path) == 0);
        for (int i = 0; i < 5 && i < remat__st_count(f); i++) {
            remat__st_tensor t;
            CHECK_OK(remat__st_get(f, i, &t));
            CHECK_MSG(same_tensor(&t, &ts[i]), "tensor %d (%s) differs", i, ts[i].name);
            size_t el = remat__st_dtype_size(t.dtype);
            CHECK_MSG(t.bytes == 0 || (uintptr_t)t.data % el == 0, "%s is misaligned", t.name);
        }
        CHECK(remat__st_find(f, "ids") == 3);
        CHECK(remat__st_find(f, "scale \"q\"\\") == 2);
        CHECK(remat__st_find(f, "nope") == -1);
        CHECK(remat__st_metadata(f, "format") && !strcmp(remat__st_metadata(f, "format"), "pt"));
        CHECK(remat__st_metadata(f, "note") && !strcmp(remat__st_metadata(f, "note"), "a \"quoted\"\nvalue"));
        CHECK(remat__st_metadata(f, "nope") == NULL);
        remat__st_tensor t;
        CHECK_FAILS(remat__st_get(f, 5, &t), REMAT_INVALID, "rt.safetensors", NULL);
    }
    remat__st_close(f);
    /* the header is padded so that the data section is 8-byte aligned */
    FILE *fp = fopen(path, "rb");
    unsigned char le[8] = {0};
    if (fp) {
        CHECK(fread(le, 1, 8, fp) == 8);
        fclose(fp);
    }
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | le[i];
    CHECK(hlen > 0 && hlen % 8 == 0);
    /* overwriting, no metadata, zero tensors */
    CHECK_OK(remat__st_write(path, 1, ts, NULL));
    f = NULL;
    CHECK_OK(remat__st_open(&f, path));
    CHECK(remat__st_count(f) == 1 && remat__st_metadata(f, "format") == NULL);
    remat__st_close(f);
    CHECK_OK(remat__st_write(path, 0, NULL, NULL));
    f = NULL;
    CHECK_OK(remat__st_open(&f, path));
    CHECK(remat__st_count(f) == 0);
    remat__st_close(f);
    remat__st_close(NULL);
    section_end("safetensors round trip: F32/I64/F64/I32, scalar, empty, escaped names, "
                "metadata, alignment");

    section_begin();
    remat__st_tensor bad = ts[0];
    bad.dtype = "F7";
    CHECK_FAILS(remat__st_write(path, 1, &bad, NULL), REMAT_INVALID, "layer.0.weight", "unknown dtype 'F7'");
    bad = ts[0];
    bad.bytes = 20;
    CHECK_FAILS(remat__st_write(path, 1, &bad, NULL), REMAT_INVALID, "layer.0.weight", "(2, 3)");
    remat__st_tensor two[2] = {ts[1], ts[1]};
    CHECK_FAILS(remat__st_write(path, 2, two, NULL), REMAT_INVALID, "'steps' given twice", NULL);
    bad = ts[0];
    bad.name = "__metadata__";
    CHECK_FAILS(remat__st_write(path, 1, &bad, NULL), REMAT_INVALID, "invalid name", NULL);
    bad = ts[0];
    bad.ndim = 9;
    CHECK_FAILS(remat__st_write(path, 1, &bad, NULL), REMAT_INVALID, "layer.0.weight", NULL);
    CHECK_FAILS(remat__st_write(tpath("nodir/x.safetensors"), 1, ts, NULL), REMAT_IO, "nodir", NULL);
    /* a failed write leaves the previous file */
    f = NULL;
    CHECK_OK(remat__st_open(&f, path));
    CHECK(remat__st_count(f) == 0);
    remat__st_close(f);
    section_end("safetensors writer rejects bad dtype, size, duplicate and reserved names");
}

static void test_st_malformed(void) {
    section_begin();
    remat__st *f = NULL;
    const char *p = tpath("bad.safetensors");
    const char *good = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
    write_st(p, good, 0, 8);
    CHECK_OK(remat__st_open(&f, p)); /* the template itself is valid */
    remat__st_close(f);
    f = NULL;
    write_st(p, good, 1000, 8);
    CHECK_FAILS(remat__st_open(&f, p), REMAT_FORMAT, "bad.safetensors", "header length 1000 exceeds");
    write_st(p, good, 0xffffffffffffffffull, 8);
    CHECK_FAILS(remat__st_open(&f, p), REMAT_FORMAT, "header length", NULL);
    write_bytes(p, "\x10\0\0", 3);
    CHECK_FAILS(remat__st_open(&f, p), REMAT_FORMAT, "too short", NULL);
    CHECK_FAILS(remat__st_open(&f, tpath("nosuch.safetensors")), REMAT_NOT_FOUND, "nosuch.safetensors", NULL);
    section_end("safetensors: header length beyond the file, too short, missing file");

    section_begin();
    write_st(p, "{\"a\":{\"dtype\":\"F32\",", 0, 8);
    CHECK_FAILS(remat__st_open(&f, p), REMAT_FORMAT, "bad.safetensors", "not valid JSON");
    write_st(p, "[1, 2]", 0, 0);
    CHECK_FAILS(remat__st_open(&f, p), REMAT_FORMAT, "not a JSON object", NULL);
    write_st(p, "{} x", 0, 0);
    CHECK_FAILS(remat__st_open(&f, p), REMAT_FORMAT, "unexpected text", NULL);
    write_st(p, "{}      ", 0, 0);
    CHECK_OK(remat__st_open(&f, p)); /* space padding is fine */
    remat__st_close(f);
    f = NULL;
    write_st(p, "{\"__metadata__\":{\"k\":3}}", 0, 0);
    CHECK_FAILS(remat__st_open(&f, p), REMAT_FORMAT, "__metadata__ entry 'k'", NULL);
    section_end("safetensors: bad JSON, not an object, trailing text, bad metadata");

    section_begin();
    write_st(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,16]}}", 0, 8);
    CHECK_FAILS(remat__st_open(&f, p), REMAT_FORMAT, "tensor 'a'",
                "[0, 16] out of range: the data section has 8 bytes");
    write_st(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", 0, 8);
    CHECK_FAILS(remat__st_open(&f, p), REMAT_FORMAT, "tensor 'a'", "out of range");
    write_st(p, "{\"a\":{\"dtype\":\"F7\",\"shape\":[2],\"data_offsets\":[0,8]}}", 0, 8);
    CHECK_FAILS(remat__st_open(&f, p), REMAT_FORMAT, "tensor 'a'", "unknown dtype 'F7'");
    write_st(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 0, 8);
    CHECK_FAILS(remat__st_open(&f, p), REMAT_FORMAT, "tensor 'a'",
                "dtype F32 and shape (3) need 12 bytes but data_offsets [0, 8] hold 8");
    write_st(p, "{\"a\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[0,8]}}", 0, 8);
    CHECK_FAILS(remat__st_open(&f, p), REMAT_FORMAT, "tensor 'a'", "need 16 bytes");
    write_st(p, "{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,8]}}", 0, 8);
    CHECK_FAILS(remat__st_open(&f, p), REMAT_FORMAT, "tensor 'a'", "missing \"shape\"");
    write_st(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2]}}", 0, 8);
    CHECK_FAILS(remat__st_open(&f, p), REMAT_FORMAT, "tensor 'a'", "missing \"data_offsets\"");
    write_st(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 0, 8);
    CHECK_FAILS(remat__st_open(&f, p), REMAT_FORMAT, "tensor 'a'", "shape entry 0");
    write_st(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2.5],\"data_offsets\":[0,8]}}", 0, 8);
    CHECK_FAILS(remat__st_open(&f, p), REMAT_FORMAT, "tensor 'a'", "shape entry 0");
    write_st(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0]}}", 0, 8);
    CHECK_FAILS(remat__st_open(&f, p), REMAT_FORMAT, "tensor 'a'", "data_offsets must be");
    write_st(p, "{\"a\":[1]}", 0, 0);
    CHECK_FAILS(remat__st_open(&f, p), REMAT_FORMAT, "tensor 'a'", "not an object");
    write_st(p,
             "{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,2],"
             "\"data_offsets\":[0,8]}}",
             0, 8);
    CHECK_FAILS(remat__st_open(&f, p), REMAT_UNSUPPORTED, "tensor 'a'", "9 dimensions");
    section_end("safetensors: offsets out of range, unknown dtype, size mismatch, missing "
                "fields, bad shape");

    section_begin();
    write_st(p,
             "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
             "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
             0, 12);
    CHECK_FAILS(remat__st_open(&f, p), REMAT_FORMAT, "'a' [0, 8] and 'b' [4, 12] overlap", NULL);
    write_st(p,
             "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
             "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}",
             0, 12);
    CHECK_FAILS(remat__st_open(&f, p), REMAT_FORMAT, "no tensor covers bytes [4, 8)", "'b'");
    write_st(p, good, 0, 12);
    CHECK_FAILS(remat__st_open(&f, p), REMAT_FORMAT, "no tensor covers bytes [8, 12)", NULL);
    write_st(p,
             "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
             "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
             0, 8);
    CHECK_FAILS(remat__st_open(&f, p), REMAT_FORMAT, "tensor 'a' appears twice", NULL);
    /* out of order in the header, in order in the data: fine */
    write_st(p,
             "{\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]},"
             "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
             0, 8);
    CHECK_OK(remat__st_open(&f, p));
    CHECK(remat__st_count(f) == 2 && remat__st_find(f, "a") == 1);
    remat__st_close(f);
    f = NULL;
    CHECK(f == NULL);
    section_end("safetensors: overlap, gaps, duplicate names");
}

/* Reads the PyTorch-written fixtures (when run from tests/) and rewrites
 * each through remat__st_write, which must preserve every tensor. */
static void test_st_fixtures(void) {
    static const char *names[] = {"fixtures/mlp.safetensors", "fixtures/cnn.safetensors", "fixtures/bnnet.safetensors"};
    section_begin();
    int found = 0;
    for (int k = 0; k < 3; k++) {
        if (access(names[k], R_OK) != 0) continue;
        found++;
        remat__st *f = NULL, *g = NULL;
        CHECK_OK(remat__st_open(&f, names[k]));
        if (!f) continue;
        int n = remat__st_count(f);
        CHECK(n > 0 && remat__st_metadata(f, "fixture") != NULL);
        remat__st_tensor *ts = calloc((size_t)n, sizeof *ts);
        for (int i = 0; i < n; i++) CHECK_OK(remat__st_get(f, i, &ts[i]));
        const char *meta[] = {"fixture", remat__st_metadata(f, "fixture"), NULL};
        CHECK_OK(remat__st_write(tpath("copy.safetensors"), n, ts, meta));
        CHECK_OK(remat__st_open(&g, tpath("copy.safetensors")));
        int same = g && remat__st_count(g) == n;
        for (int i = 0; same && i < n; i++) {
            remat__st_tensor t;
            int j = remat__st_find(g, ts[i].name);
            same = j >= 0 && remat__st_get(g, j, &t) == REMAT_OK && same_tensor(&t, &ts[i]);
        }
        CHECK_MSG(same, "%s: rewritten copy differs", names[k]);
        free(ts);
        remat__st_close(g);
        remat__st_close(f);
    }
    /* Missing fixtures fail: the test runs from tests/ (ctest's working
     * directory), where they are committed. */
    CHECK_MSG(found, "no safetensors fixtures found: run from tests/ to read fixtures/");
    section_end("safetensors: PyTorch fixtures read and rewrite identically");
}

/* An absurd header length inside a large (sparse) file, then every prefix
 * of a valid file and every single-byte corruption of its header: the
 * reader answers OK or a format error naming the file, never crashes. */
static void test_st_robust(void) {
    section_begin();
    remat__st *f = NULL;
    const char *p = tpath("huge.safetensors");
    int fd = open(p, O_CREAT | O_TRUNC | O_WRONLY, 0644);
    CHECK(fd >= 0);
    if (fd >= 0) {
        unsigned char le[8];
        uint64_t h = 150000000; /* fits in the file, but no header is 150 MB */
        for (int i = 0; i < 8; i++) le[i] = (unsigned char)(h >> (8 * i));
        CHECK(write(fd, le, 8) == 8);
        CHECK(ftruncate(fd, 200000000) == 0);
        close(fd);
        CHECK_FAILS(remat__st_open(&f, p), REMAT_FORMAT, "huge.safetensors", "header length 150000000 is implausible");
        remove(p);
    }

    float w[6] = {1, 2, 3, 4, 5, 6};
    int32_t ids[2] = {7, 8};
    remat__st_tensor ts[2] = {
        {.name = "w", .dtype = "F32", .ndim = 2, .dims = {2, 3}, .data = w, .bytes = sizeof w},
        {.name = "ids", .dtype = "I32", .ndim = 1, .dims = {2}, .data = ids, .bytes = sizeof ids},
    };
    const char *good = tpath("good.safetensors");
    CHECK_OK(remat__st_write(good, 2, ts, NULL));
    size_t n = 0;
    unsigned char *b = read_all(good, &n);
    CHECK(b && n > 40);
    if (!b) return;
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | b[i];
    const char *bad = tpath("cut.safetensors");
    int named = 1, statuses = 1;
    for (size_t len = 0; len < n; len++) {
        write_bytes(bad, b, len);
        remat_status st = remat__st_open(&f, bad);
        statuses &= st == REMAT_FORMAT && f == NULL;
        named &= check_has(remat_last_error(), "cut.safetensors");
    }
    CHECK_MSG(statuses && named, "every truncation must be a format error naming the file");
    int crashes_none = 1;
    static const unsigned char flips[] = {0x01, 0x20, 0x80, 0xff};
    for (size_t at = 0; at < 8 + hlen; at++)
        for (size_t k = 0; k < sizeof flips; k++) {
            b[at] ^= flips[k];
            write_bytes(bad, b, n);
            remat_status st = remat__st_open(&f, bad);
            crashes_none &= st == REMAT_OK || st == REMAT_FORMAT || st == REMAT_UNSUPPORTED;
            if (st == REMAT_OK) {
                /* a harmless change (a space, a digit of a name): still consistent */
                for (int i = 0; i < remat__st_count(f); i++) {
                    remat__st_tensor t;
                    crashes_none &= remat__st_get(f, i, &t) == REMAT_OK &&
                                    t.bytes == remat__st_dtype_size(t.dtype) * (size_t)(t.ndim ? t.dims[0] : 1) *
                                                   (size_t)(t.ndim > 1 ? t.dims[1] : 1);
                }
                remat__st_close(f);
                f = NULL;
            } else {
                crashes_none &= check_has(remat_last_error(), "cut.safetensors");
            }
            b[at] ^= flips[k];
        }
    CHECK_MSG(crashes_none, "a corrupted header must give OK (consistent) or a named format error");
    free(b);
    section_end("safetensors: absurd header length, every truncation, every corrupted header byte");
}

/* ------------------------------------------------------ sessions */

static remat_session *session(remat_graph **g, remat_model *m, uint64_t seed) {
    CHECK_OK(remat_graph_create(g));
    CHECK_OK(build_bnnet(*g, m, 2));
    remat_session_opts o;
    remat_session_opts_default(&o);
    o.seed = seed, o.threads = 1;
    remat_session *s = NULL;
    CHECK_OK(remat_session_create(&s, *g, m->loss, &o));
    return s;
}

/* A copy of the session's parameters (caller frees). */
static float *snapshot(const remat_session *s, size_t *n) {
    size_t total = 0;
    for (int i = 0; i < remat_session_param_count(s); i++) {
        remat_param_info p;
        remat_session_param(s, i, &p);
        total += (size_t)p.numel;
    }
    float *v = malloc(total * sizeof *v), *at = v;
    for (int i = 0; v && i < remat_session_param_count(s); i++) {
        remat_param_info p;
        remat_session_param(s, i, &p);
        memcpy(at, p.data, (size_t)p.numel * sizeof *v);
        at += p.numel;
    }
    *n = total;
    return v;
}

/* Writes the session's tensors with one changed by `edit`. */
static void write_edited(const remat_session *s, const char *path, const char *drop, const char *rename_to,
                         const char *dtype, int64_t dim0) {
    int n = remat_session_param_count(s), k = 0;
    remat__st_tensor *ts = calloc((size_t)n + 1, sizeof *ts);
    static double f64[4096];
    for (int i = 0; i < n; i++) {
        remat_param_info p;
        remat_session_param(s, i, &p);
        if (drop && strcmp(p.name, drop) == 0) continue;
        remat__st_tensor *t = &ts[k++];
        t->name = p.name, t->dtype = "F32", t->ndim = p.ndim, t->data = p.data;
        for (int d = 0; d < p.ndim; d++) t->dims[d] = p.dims[d];
        t->bytes = (size_t)p.numel * 4;
        if (rename_to && strcmp(p.name, "fc.bias") == 0) t->name = rename_to;
        if (dtype && strcmp(p.name, "fc.bias") == 0) {
            t->dtype = dtype, t->data = f64, t->bytes = (size_t)p.numel * 8;
        }
        if (dim0 && strcmp(p.name, "fc.weight") == 0) {
            t->dims[0] = dim0;
            t->bytes = (size_t)(dim0 * p.dims[1]) * 4;
            t->data = f64;
        }
    }
    CHECK_OK(remat__st_write(path, k, ts, NULL));
    free(ts);
}

static void test_st_session(void) {
    section_begin();
    remat_graph *ga, *gb;
    remat_model ma, mb;
    remat_session *a = session(&ga, &ma, 1), *b = session(&gb, &mb, 2);
    if (!a || !b) return;
    size_t nb0, nb1;
    float *before = snapshot(b, &nb0);
    const char *p = tpath("w.safetensors");
    write_edited(a, p, NULL, NULL, "F64", 0);
    CHECK_FAILS(remat_safetensors_load(b, p, 0), REMAT_FORMAT, "w.safetensors: tensor 'fc.bias' has dtype F64",
                "needs F32");
    write_edited(a, p, NULL, NULL, NULL, 7);
    CHECK_FAILS(remat_safetensors_load(b, p, 0), REMAT_SHAPE, "tensor 'fc.weight' has shape (7, 16)",
                "parameter has (10, 16)");
    write_edited(a, p, NULL, "fc.biass", NULL, 0);
    CHECK_FAILS(remat_safetensors_load(b, p, 0), REMAT_NOT_FOUND, "tensor 'fc.biass' is not a parameter", NULL);
    write_edited(a, p, "features.5.running_var", NULL, NULL, 0);
    CHECK_FAILS(remat_safetensors_load(b, p, 1), REMAT_NOT_FOUND, "buffer 'features.5.running_var' (16)",
                "missing from the file");
    float *after = snapshot(b, &nb1);
    CHECK_MSG(nb0 == nb1 && memcmp(before, after, nb0 * sizeof *before) == 0,
              "a failed load must leave the session unchanged");
    free(after);
    CHECK_OK(remat_safetensors_load(b, p, 0)); /* not strict: the missing buffer keeps its value */
    write_bytes(p, "\x02\0\0\0\0\0\0\0{}", 10);
    CHECK_FAILS(remat_safetensors_load(b, p, 1), REMAT_NOT_FOUND, "parameter 'features.0.weight' (8, 3, 3, 3)",
                "missing");
    free(before);
    section_end("weights: wrong dtype, wrong shape, unknown name, missing (strict) are named; the "
                "session stays unchanged");

    section_begin();
    /* gradients: loss and grad.<name> for the trainable parameters only */
    float x[2 * 3 * 16 * 16];
    int32_t y[2] = {3, 7};
    for (int i = 0; i < 2 * 3 * 16 * 16; i++) x[i] = (float)(i % 17) / 17.0f - 0.5f;
    remat_session_bind(a, ma.input, x);
    remat_session_bind(a, ma.labels, y);
    float loss;
    CHECK_OK(remat_session_step(a, &loss));
    const char *g = tpath("g.safetensors");
    CHECK_OK(remat_safetensors_save_grads(a, g, loss));
    remat__st *f = NULL;
    CHECK_OK(remat__st_open(&f, g));
    int all = f != NULL, trainable = 0;
    for (int i = 0; f && i < remat_session_param_count(a); i++) {
        remat_param_info pi;
        remat_session_param(a, i, &pi);
        char key[256];
        snprintf(key, sizeof key, "grad.%s", pi.name);
        int j = remat__st_find(f, key);
        if (!pi.trainable) {
            all &= j < 0;
            continue;
        }
        trainable++;
        remat__st_tensor t;
        all &= j >= 0 && remat__st_get(f, j, &t) == REMAT_OK && strcmp(t.dtype, "F32") == 0 && t.ndim == pi.ndim &&
               t.bytes == (size_t)pi.numel * 4 && memcmp(t.data, pi.grad, t.bytes) == 0;
    }
    CHECK_MSG(all, "every trainable parameter's gradient, and no buffer, must be in the file");
    remat__st_tensor t;
    int li = f ? remat__st_find(f, "loss") : -1;
    CHECK(li >= 0 && remat__st_get(f, li, &t) == REMAT_OK && t.ndim == 1 && t.dims[0] == 1 &&
          memcmp(t.data, &loss, 4) == 0);
    CHECK(f && remat__st_count(f) == trainable + 1);
    remat__st_close(f);
    section_end("gradients: \"loss\" [1] and \"grad.<name>\" F32 for every trainable parameter");

    section_begin();
    /* single tensors for model inputs */
    int64_t lab64[2] = {3, 9};
    int64_t big64[2] = {3, 1ll << 40};
    remat__st_tensor in[4] = {
        {.name = "input", .dtype = "F32", .ndim = 4, .dims = {2, 3, 16, 16}, .data = x, .bytes = sizeof x},
        {.name = "target", .dtype = "I64", .ndim = 1, .dims = {2}, .data = lab64, .bytes = sizeof lab64},
        {.name = "big", .dtype = "I64", .ndim = 1, .dims = {2}, .data = big64, .bytes = sizeof big64},
        {.name = "t32", .dtype = "I32", .ndim = 1, .dims = {2}, .data = y, .bytes = sizeof y},
    };
    const char *xp = tpath("x.safetensors");
    CHECK_OK(remat__st_write(xp, 4, in, NULL));
    float xr[2 * 3 * 16 * 16];
    int32_t yr[2] = {0, 0};
    int64_t xd[4] = {2, 3, 16, 16}, yd[1] = {2}, wrong[4] = {4, 3, 16, 16};
    CHECK_OK(remat_safetensors_read(xp, "input", REMAT_F32, 4, xd, xr));
    CHECK(memcmp(xr, x, sizeof x) == 0);
    CHECK_OK(remat_safetensors_read(xp, "target", REMAT_I32, 1, yd, yr));
    CHECK(yr[0] == 3 && yr[1] == 9);
    CHECK_OK(remat_safetensors_read(xp, "t32", REMAT_I32, 1, yd, yr));
    CHECK(yr[0] == 3 && yr[1] == 7);
    CHECK_FAILS(remat_safetensors_read(xp, "input", REMAT_F32, 4, wrong, xr), REMAT_SHAPE,
                "x.safetensors: tensor 'input' has shape (2, 3, 16, 16)", "needs (4, 3, 16, 16)");
    CHECK_FAILS(remat_safetensors_read(xp, "t32", REMAT_F32, 1, yd, xr), REMAT_FORMAT, "tensor 't32' has dtype I32",
                "needs F32");
    CHECK_FAILS(remat_safetensors_read(xp, "big", REMAT_I32, 1, yd, yr), REMAT_INVALID, "tensor 'big'",
                "element 1 is 1099511627776");
    CHECK_FAILS(remat_safetensors_read(xp, "labels", REMAT_I32, 1, yd, yr), REMAT_NOT_FOUND, "no tensor 'labels'",
                "the file has 4: input, target, big, t32");
    section_end("single tensors: shape and dtype checked, I64 labels narrowed, a missing one lists the file's");
    remat_session_destroy(a);
    remat_session_destroy(b);
    remat_graph_destroy(ga);
    remat_graph_destroy(gb);
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)flag, (void)ftw;
    return remove(path);
}

int main(void) {
    const char *base = getenv("TMPDIR");
    snprintf(tmpdir, sizeof tmpdir, "%s/remat-test-st-XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    test_st_roundtrip();
    test_st_malformed();
    test_st_fixtures();
    test_st_robust();
    test_st_session();
    nftw(tmpdir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    return check_exit("test_safetensors");
}
