/* test_data.c: the data layer. IDX files (plain and gzip) and CIFAR-10
 * batches written into a temporary directory load with the right shapes,
 * labels and normalized values; every malformed input (truncated, wrong
 * magic, mismatched counts, bad labels, missing directory, unknown name)
 * gets its status and a message naming the file and the problem. The loader
 * visits each sample once per epoch, reproducibly from (seed, epoch), in
 * full batches. Token files: every malformed one (missing, empty, odd
 * size, ids beyond the vocabulary) is named with its problem; batches are
 * windows of the file, input and labels shifted by one, a pure function of
 * (seed, step), with every start reachable. The stream loop runs its epochs
 * of steps, and a tiny GPT-2 learns a repeating token pattern from a token
 * file. The real Fashion-MNIST files are checked when installed.
 * (safetensors: test_safetensors.) */
#if !defined(_GNU_SOURCE) && !defined(_XOPEN_SOURCE)
#define _XOPEN_SOURCE 700
#endif

#include "../src/remat-impl.h"
#include "check.h"

#include <ftw.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

static char tmpdir[256];

/* ------------------------------------------------------------ reporting */

/* One line per group of checks: "ok" or "FAIL" and what was checked. */
static int section_failures;
static void section_begin(void) { section_failures = check_failures; }
static void section_end(const char *what) {
    printf("%s %s\n", check_failures == section_failures ? "ok  " : "FAIL", what);
    fflush(stdout);
}

/* ---------------------------------------------------------------- files */

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
    CHECK(fwrite(p, 1, n, f) == n);
    fclose(f);
}

static void write_gz(const char *path, const void *p, size_t n) {
    gzFile g = gzopen(path, "wb");
    CHECK_MSG(g != NULL, "cannot create %s", path);
    if (!g) return;
    CHECK(gzwrite(g, p, (unsigned)n) == (int)n);
    gzclose(g);
}

static void put_be32(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)(v >> 24), p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8), p[3] = (unsigned char)v;
}

/* An IDX images file image: header + pixels (n*rows*cols bytes of data,
 * or fewer with `cut`). The caller frees. */
static unsigned char *idx_images(uint32_t magic, uint32_t n, uint32_t rows, uint32_t cols, const unsigned char *pix,
                                 size_t cut, size_t *len) {
    size_t body = (size_t)n * rows * cols - cut;
    unsigned char *b = malloc(16 + body);
    put_be32(b, magic), put_be32(b + 4, n), put_be32(b + 8, rows);
    put_be32(b + 12, cols);
    memcpy(b + 16, pix, body);
    *len = 16 + body;
    return b;
}

static unsigned char *idx_labels(uint32_t magic, uint32_t n, const unsigned char *lab, size_t *len) {
    unsigned char *b = malloc(8 + n);
    put_be32(b, magic), put_be32(b + 4, n);
    memcpy(b + 8, lab, n);
    *len = 8 + n;
    return b;
}

/* Writes a complete IDX pair (images n x rows x cols, labels) to dir/names
 * through writer (write_bytes or write_gz). */
static void write_idx_pair(const char *images, const char *labels, uint32_t n, uint32_t rows, uint32_t cols,
                           const unsigned char *pix, const unsigned char *lab,
                           void (*writer)(const char *, const void *, size_t)) {
    size_t len;
    unsigned char *b = idx_images(0x803, n, rows, cols, pix, 0, &len);
    writer(images, b, len);
    free(b);
    b = idx_labels(0x801, n, lab, &len);
    writer(labels, b, len);
    free(b);
}

static float norm(unsigned p, float mean, float std) { return ((float)p / 255.0f - mean) / std; }

/* --------------------------------------------------------------- IDX sets */

enum { N5 = 5, R = 2, C = 3 };
static unsigned char pix5[N5 * R * C], lab5[N5];

static void fill5(void) {
    for (int i = 0; i < N5 * R * C; i++) pix5[i] = (unsigned char)(i * 37 % 256);
    pix5[0] = 0, pix5[1] = 255;
    for (int i = 0; i < N5; i++) lab5[i] = (unsigned char)(9 - i);
}

/* Checks that d holds pix5/lab5 normalized with (mean, std). */
static void check5(const remat_dataset *d, float mean, float std) {
    int64_t chw[3];
    CHECK(remat_dataset_size(d) == N5);
    remat_dataset_shape(d, chw);
    CHECK(chw[0] == 1 && chw[1] == R && chw[2] == C);
    CHECK(remat_dataset_classes(d) == 10);
    int64_t idx[3] = {4, 0, 2};
    float x[3 * R * C];
    int32_t y[3];
    CHECK_OK(remat_dataset_get(d, idx, 3, x, y));
    int exact = 1;
    for (int k = 0; k < 3; k++) {
        CHECK(y[k] == lab5[idx[k]]);
        for (int j = 0; j < R * C; j++) exact &= x[k * R * C + j] == norm(pix5[idx[k] * R * C + j], mean, std);
    }
    CHECK_MSG(exact, "normalized values differ from (p/255 - %g)/%g", (double)mean, (double)std);
    CHECK(x[R * C] == (0.0f - mean) / std);     /* sample 0, pixel 0 */
    CHECK(x[R * C + 1] == (1.0f - mean) / std); /* sample 0, pixel 255 */
    /* NULL index: samples [0, n) */
    float x2[N5 * R * C];
    int32_t y2[N5];
    CHECK_OK(remat_dataset_get(d, NULL, N5, x2, y2));
    CHECK(x2[0] == x[R * C] && y2[4] == lab5[4]);
}

static void test_idx(void) {
    section_begin();
    fill5();
    remat_dataset *d = NULL;
    write_idx_pair(tpath("img"), tpath("lab"), N5, R, C, pix5, lab5, write_bytes);
    CHECK_OK(remat_dataset_load_idx(&d, tpath("img"), tpath("lab")));
    if (d) check5(d, 0.5f, 0.5f);
    remat_dataset_destroy(d);
    section_end("IDX plain: shape, labels, (p/255-0.5)/0.5 values");

    section_begin();
    d = NULL;
    write_idx_pair(tpath("img.gz"), tpath("lab.gz"), N5, R, C, pix5, lab5, write_gz);
    CHECK_OK(remat_dataset_load_idx(&d, tpath("img.gz"), tpath("lab.gz")));
    if (d) check5(d, 0.5f, 0.5f);
    remat_dataset_destroy(d);
    section_end("IDX gzip: same contents");

    /* Named sets: mnist with .gz names (train), fashion-mnist plain (test). */
    section_begin();
    CHECK(mkdir(tpath("mnist"), 0700) == 0);
    write_idx_pair(tpath("mnist/train-images-idx3-ubyte.gz"), tpath("mnist/train-labels-idx1-ubyte.gz"), N5, R, C, pix5,
                   lab5, write_gz);
    d = NULL;
    CHECK_OK(remat_dataset_load(&d, "mnist", tpath("mnist"), 1));
    if (d) check5(d, 0.1307f, 0.3081f);
    remat_dataset_destroy(d);
    CHECK(mkdir(tpath("fmnist"), 0700) == 0);
    write_idx_pair(tpath("fmnist/t10k-images-idx3-ubyte"), tpath("fmnist/t10k-labels-idx1-ubyte"), N5, R, C, pix5, lab5,
                   write_bytes);
    d = NULL;
    CHECK_OK(remat_dataset_load(&d, "fashion-mnist", tpath("fmnist"), 0));
    if (d) check5(d, 0.2860f, 0.3530f);
    remat_dataset_destroy(d);
    /* the training split is not there: names both candidates */
    d = NULL;
    CHECK_FAILS(remat_dataset_load(&d, "fashion-mnist", tpath("fmnist"), 1), REMAT_NOT_FOUND, "train-images-idx3-ubyte",
                "train-images-idx3-ubyte.gz");
    CHECK(d == NULL);
    section_end("named sets: mnist (.gz) and fashion-mnist (plain), normalization");
}

static void test_idx_errors(void) {
    remat_dataset *d = NULL;
    size_t len;
    unsigned char *b;

    section_begin();
    b = idx_images(0x803, N5, R, C, pix5, 12, &len); /* 18 of 30 pixel bytes */
    write_bytes(tpath("short-images"), b, len);
    CHECK_FAILS(remat_dataset_load_idx(&d, tpath("short-images"), tpath("lab")), REMAT_FORMAT,
                "short-images: truncated", "expected 30 pixel bytes, got 18");
    write_gz(tpath("short-images.gz"), b, len);
    CHECK_FAILS(remat_dataset_load_idx(&d, tpath("short-images.gz"), tpath("lab")), REMAT_FORMAT,
                "short-images.gz: truncated", "got 18");
    free(b);
    /* a gzip stream cut in the middle */
    FILE *f = fopen(tpath("img.gz"), "rb");
    unsigned char gzb[4096];
    size_t gzn = f ? fread(gzb, 1, sizeof gzb, f) : 0;
    if (f) fclose(f);
    write_bytes(tpath("cut.gz"), gzb, gzn / 2);
    CHECK_FAILS(remat_dataset_load_idx(&d, tpath("cut.gz"), tpath("lab")), REMAT_FORMAT, "cut.gz: truncated", NULL);
    /* a header cut short */
    b = idx_images(0x803, N5, R, C, pix5, 0, &len);
    write_bytes(tpath("tiny"), b, 10);
    CHECK_FAILS(remat_dataset_load_idx(&d, tpath("tiny"), tpath("lab")), REMAT_FORMAT, "tiny: truncated",
                "16-byte IDX header");
    /* trailing bytes */
    unsigned char *b2 = malloc(len + 3);
    memcpy(b2, b, len);
    memset(b2 + len, 7, 3);
    write_bytes(tpath("long"), b2, len + 3);
    CHECK_FAILS(remat_dataset_load_idx(&d, tpath("long"), tpath("lab")), REMAT_FORMAT, "long: unexpected data",
                "30 pixel bytes");
    free(b2);
    free(b);
    /* corrupt compressed data: a gzip header followed by garbage */
    unsigned char bad[64] = {0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3};
    for (int i = 10; i < 64; i++) bad[i] = (unsigned char)(i * 91 + 7);
    write_bytes(tpath("corrupt.gz"), bad, sizeof bad);
    CHECK_FAILS(remat_dataset_load_idx(&d, tpath("corrupt.gz"), tpath("lab")), REMAT_FORMAT, "corrupt.gz", NULL);
    CHECK(d == NULL);
    section_end("truncated images (plain, gzip, cut stream, header), trailing data, "
                "corrupt gzip");

    section_begin();
    CHECK_FAILS(remat_dataset_load_idx(&d, tpath("lab"), tpath("lab")), REMAT_FORMAT,
                "lab: bad magic number 0x00000801, expected 0x00000803", "it is an IDX labels file");
    CHECK_FAILS(remat_dataset_load_idx(&d, tpath("img"), tpath("img")), REMAT_FORMAT,
                "img: bad magic number 0x00000803, expected 0x00000801", NULL);
    b = idx_images(0x12345678, N5, R, C, pix5, 0, &len);
    write_bytes(tpath("magic"), b, len);
    free(b);
    CHECK_FAILS(remat_dataset_load_idx(&d, tpath("magic"), tpath("lab")), REMAT_FORMAT,
                "magic: bad magic number 0x12345678", NULL);
    section_end("wrong magic numbers");

    section_begin();
    b = idx_labels(0x801, N5 - 1, lab5, &len);
    write_bytes(tpath("lab4"), b, len);
    free(b);
    CHECK_FAILS(remat_dataset_load_idx(&d, tpath("img"), tpath("lab4")), REMAT_FORMAT, "has 5 images", "has 4 labels");
    unsigned char badlab[N5] = {1, 2, 10, 3, 4};
    b = idx_labels(0x801, N5, badlab, &len);
    write_bytes(tpath("lab10"), b, len);
    free(b);
    CHECK_FAILS(remat_dataset_load_idx(&d, tpath("img"), tpath("lab10")), REMAT_FORMAT, "lab10: label 10 of sample 2",
                "10 classes");
    b = idx_images(0x803, 0, R, C, pix5, 0, &len);
    write_bytes(tpath("empty"), b, len);
    free(b);
    CHECK_FAILS(remat_dataset_load_idx(&d, tpath("empty"), tpath("lab")), REMAT_FORMAT, "empty: empty", NULL);
    CHECK_FAILS(remat_dataset_load_idx(&d, tpath("nosuch"), tpath("lab")), REMAT_NOT_FOUND, "nosuch", NULL);
    /* a header claiming 2^32-1 images of 65535x65535: truncated, no huge
     * allocation */
    unsigned char huge[20];
    put_be32(huge, 0x803), put_be32(huge + 4, 0xffffffffu);
    put_be32(huge + 8, 65535), put_be32(huge + 12, 65535);
    memset(huge + 16, 1, 4);
    write_bytes(tpath("huge"), huge, sizeof huge);
    CHECK_FAILS(remat_dataset_load_idx(&d, tpath("huge"), tpath("lab")), REMAT_FORMAT, "huge", NULL);
    section_end("mismatched counts, label out of range, empty, missing file, huge header");

    section_begin();
    CHECK_FAILS(remat_dataset_load(&d, "fashion-mnist", "/nonexistent/fmnist", 1), REMAT_NOT_FOUND,
                "/nonexistent/fmnist", "apt-get install dataset-fashion-mnist");
    CHECK_FAILS(remat_dataset_load(&d, "mnist", "/nonexistent/mnist", 1), REMAT_NOT_FOUND, "/nonexistent/mnist",
                "does not exist");
    CHECK(!check_has(remat_last_error(), "apt-get"));
    CHECK_FAILS(remat_dataset_load(&d, "mnist", NULL, 1), REMAT_INVALID, "mnist", "directory");
    CHECK_FAILS(remat_dataset_load(&d, "cifar10", NULL, 1), REMAT_INVALID, "cifar10", "directory");
    CHECK_FAILS(remat_dataset_load(&d, "imagenet", NULL, 1), REMAT_INVALID, "unknown data set 'imagenet'",
                "fashion-mnist, mnist, cifar10");
    CHECK_FAILS(remat_dataset_load(&d, "fashion-mnist", tpath("img"), 1), REMAT_INVALID, "not a directory", NULL);
    CHECK(d == NULL);
    section_end("missing directory (with apt-get hint), no default dir, unknown name");

    section_begin();
    CHECK_OK(remat_dataset_load_idx(&d, tpath("img"), tpath("lab")));
    if (d) {
        float x[R * C];
        int32_t y;
        int64_t bad_i = 5;
        CHECK_FAILS(remat_dataset_get(d, &bad_i, 1, x, &y), REMAT_INVALID, "index 5 out of range", NULL);
        CHECK_FAILS(remat_dataset_truncate(d, 6), REMAT_INVALID, "6", NULL);
        CHECK_FAILS(remat_dataset_truncate(d, 0), REMAT_INVALID, NULL, NULL);
        CHECK_OK(remat_dataset_truncate(d, 3));
        CHECK(remat_dataset_size(d) == 3);
        int64_t i2 = 2;
        CHECK_OK(remat_dataset_get(d, &i2, 1, x, &y));
        CHECK(y == lab5[2] && x[0] == norm(pix5[2 * R * C], 0.5f, 0.5f));
        CHECK_FAILS(remat_dataset_get(d, &i2 + 0, -1, x, &y), REMAT_INVALID, NULL, NULL);
        i2 = 3;
        CHECK_FAILS(remat_dataset_get(d, &i2, 1, x, &y), REMAT_INVALID, "out of range", NULL);
    }
    remat_dataset_destroy(d);
    remat_dataset_destroy(NULL);
    CHECK(remat_dataset_size(NULL) == 0 && remat_dataset_classes(NULL) == 0);
    section_end("get/truncate argument checks");
}

/* --------------------------------------------------------------- CIFAR-10 */

#define REC 3073

static unsigned char cifar_px(int64_t rec, int64_t k) { return (unsigned char)((rec * 31 + k * 7) % 256); }

/* Writes records [first, first+n) of the synthetic set to path. */
static void write_cifar(const char *path, int64_t first, int64_t n) {
    unsigned char *b = malloc((size_t)n * REC);
    for (int64_t r = 0; r < n; r++) {
        b[r * REC] = (unsigned char)((first + r) % 10);
        for (int64_t k = 0; k < 3072; k++) b[r * REC + 1 + k] = cifar_px(first + r, k);
    }
    write_bytes(path, b, (size_t)n * REC);
    free(b);
}

static void check_cifar(const remat_dataset *d, int64_t n, const float *mean, const float *std) {
    int64_t chw[3];
    CHECK(remat_dataset_size(d) == n);
    remat_dataset_shape(d, chw);
    CHECK(chw[0] == 3 && chw[1] == 32 && chw[2] == 32);
    CHECK(remat_dataset_classes(d) == 10);
    float *x = malloc((size_t)n * 3072 * sizeof *x);
    int32_t *y = malloc((size_t)n * sizeof *y);
    CHECK_OK(remat_dataset_get(d, NULL, n, x, y));
    int ok = 1;
    for (int64_t r = 0; r < n; r++) {
        ok &= y[r] == r % 10;
        for (int64_t k = 0; k < 3072; k++) ok &= x[r * 3072 + k] == norm(cifar_px(r, k), mean[k / 1024], std[k / 1024]);
    }
    CHECK_MSG(ok, "CIFAR labels or per-channel normalized values differ");
    free(x);
    free(y);
}

static void test_cifar(void) {
    section_begin();
    write_cifar(tpath("c1.bin"), 0, 3);
    write_cifar(tpath("c2.bin"), 3, 2);
    const char *paths[2] = {tpath("c1.bin"), tpath("c2.bin")};
    remat_dataset *d = NULL;
    CHECK_OK(remat_dataset_load_cifar10(&d, paths, 2));
    static const float half[3] = {0.5f, 0.5f, 0.5f};
    if (d) check_cifar(d, 5, half, half);
    remat_dataset_destroy(d);
    section_end("CIFAR-10 batches: two files, labels, CHW values");

    section_begin();
    CHECK(mkdir(tpath("cifar"), 0700) == 0);
    for (int i = 0; i < 5; i++) {
        char name[64];
        snprintf(name, sizeof name, "cifar/data_batch_%d.bin", i + 1);
        write_cifar(tpath(name), 2 * i, 2);
    }
    write_cifar(tpath("cifar/test_batch.bin"), 0, 3);
    static const float mean[3] = {0.4914f, 0.4822f, 0.4465f};
    static const float std[3] = {0.2470f, 0.2435f, 0.2616f};
    d = NULL;
    CHECK_OK(remat_dataset_load(&d, "cifar10", tpath("cifar"), 1));
    if (d) check_cifar(d, 10, mean, std);
    remat_dataset_destroy(d);
    d = NULL;
    CHECK_OK(remat_dataset_load(&d, "cifar10", tpath("cifar"), 0));
    if (d) check_cifar(d, 3, mean, std);
    remat_dataset_destroy(d);
    /* the archive's own layout: dir/cifar-10-batches-bin/ */
    CHECK(mkdir(tpath("cifar-top"), 0700) == 0);
    CHECK(mkdir(tpath("cifar-top/cifar-10-batches-bin"), 0700) == 0);
    write_cifar(tpath("cifar-top/cifar-10-batches-bin/test_batch.bin"), 0, 4);
    d = NULL;
    CHECK_OK(remat_dataset_load(&d, "cifar10", tpath("cifar-top"), 0));
    CHECK(remat_dataset_size(d) == 4);
    remat_dataset_destroy(d);
    section_end("cifar10 by name: train/test splits, per-channel normalization");

    section_begin();
    d = NULL;
    CHECK_FAILS(remat_dataset_load(&d, "cifar10", tpath("cifar-top"), 1), REMAT_NOT_FOUND, "data_batch_1.bin", NULL);
    unsigned char *b = malloc(2 * REC + 5);
    memset(b, 1, 2 * REC + 5);
    write_bytes(tpath("odd.bin"), b, 2 * REC + 5);
    const char *odd[1] = {tpath("odd.bin")};
    CHECK_FAILS(remat_dataset_load_cifar10(&d, odd, 1), REMAT_FORMAT, "odd.bin", "multiple of the 3073-byte");
    write_bytes(tpath("zero.bin"), b, 0);
    const char *zero[1] = {tpath("zero.bin")};
    CHECK_FAILS(remat_dataset_load_cifar10(&d, zero, 1), REMAT_FORMAT, "zero.bin", NULL);
    b[REC] = 11; /* record 1's label */
    write_bytes(tpath("lab11.bin"), b, 2 * REC);
    const char *l11[2] = {tpath("c1.bin"), tpath("lab11.bin")};
    CHECK_FAILS(remat_dataset_load_cifar10(&d, l11, 2), REMAT_FORMAT, "lab11.bin: label 11 of record 1", NULL);
    free(b);
    const char *missing[2] = {tpath("c1.bin"), tpath("nosuch.bin")};
    CHECK_FAILS(remat_dataset_load_cifar10(&d, missing, 2), REMAT_NOT_FOUND, "nosuch.bin", NULL);
    CHECK_FAILS(remat_dataset_load_cifar10(&d, missing, 0), REMAT_INVALID, NULL, NULL);
    CHECK(d == NULL);
    section_end("CIFAR errors: missing batch, size not a multiple of 3073, bad label");
}

/* ----------------------------------------------------------------- loader */

/* A data set of n 1x1x1 images whose pixel is the sample index (n <= 256)
 * and whose label is index % 10. */
static remat_dataset *index_set(const char *tag, int n) {
    unsigned char pix[256], lab[256];
    for (int i = 0; i < n; i++) pix[i] = (unsigned char)i, lab[i] = (unsigned char)(i % 10);
    char a[64], b[64];
    snprintf(a, sizeof a, "%s-img", tag);
    snprintf(b, sizeof b, "%s-lab", tag);
    write_idx_pair(tpath(a), tpath(b), (uint32_t)n, 1, 1, pix, lab, write_bytes);
    remat_dataset *d = NULL;
    CHECK_OK(remat_dataset_load_idx(&d, tpath(a), tpath(b)));
    return d;
}

/* Runs one epoch, writing the visited sample indices to out (recovered
 * from the pixel values); returns how many. */
static int64_t run_epoch(remat_loader *l, int64_t epoch, int64_t batch, int64_t *out) {
    float x[256];
    int32_t y[256];
    int64_t k = 0;
    remat_loader_start(l, epoch);
    while (remat_loader_next(l, x, y)) {
        for (int64_t i = 0; i < batch; i++) {
            int64_t s = (int64_t)lroundf((x[i] * 0.5f + 0.5f) * 255.0f);
            CHECK(y[i] == s % 10);
            out[k++] = s;
        }
    }
    CHECK(remat_loader_next(l, x, y) == 0); /* stays at the end */
    return k;
}

/* The documented shuffle, written out independently. */
static void reference_order(int64_t n, uint64_t seed, uint32_t epoch, int64_t *order) {
    uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    for (int64_t i = 0; i < n; i++) order[i] = i;
    for (int64_t i = n - 1; i > 0; i--) {
        uint32_t bound = (uint32_t)i + 1, thr = (uint32_t)(((uint64_t)1 << 32) % bound);
        int64_t j = -1;
        for (uint32_t t = 0; j < 0; t++) {
            uint32_t ctr[4] = {(uint32_t)i, epoch, 0x6c6f6164u, t}, w[4];
            remat__philox(ctr, key, w);
            for (int q = 0; q < 4 && j < 0; q++)
                if (w[q] >= thr) j = w[q] % bound;
        }
        int64_t tmp = order[i];
        order[i] = order[j];
        order[j] = tmp;
    }
}

static void test_loader(void) {
    section_begin();
    remat_dataset *d = index_set("hundred", 100);
    remat_loader *a = NULL, *b = NULL;
    CHECK_OK(remat_loader_create(&a, d, 10, 1, 1234));
    CHECK_OK(remat_loader_create(&b, d, 10, 1, 1234));
    CHECK(remat_loader_batches(a) == 10);
    int64_t e0[100], e0b[100], e1[100], e1b[100], again[100], ref[100];
    CHECK(run_epoch(a, 0, 10, e0) == 100);
    int seen[100] = {0}, once = 1;
    for (int i = 0; i < 100; i++) seen[e0[i]]++;
    for (int i = 0; i < 100; i++) once &= seen[i] == 1;
    CHECK_MSG(once, "an index is missing or repeated in epoch 0");
    CHECK(run_epoch(b, 0, 10, e0b) == 100);
    CHECK(memcmp(e0, e0b, sizeof e0) == 0);
    CHECK(run_epoch(a, 1, 10, e1) == 100);
    CHECK(run_epoch(b, 1, 10, e1b) == 100);
    CHECK(memcmp(e1, e1b, sizeof e1) == 0);
    CHECK(memcmp(e0, e1, sizeof e0) != 0);
    CHECK(run_epoch(a, 0, 10, again) == 100);
    CHECK(memcmp(e0, again, sizeof e0) == 0);
    int identity = 1;
    for (int i = 0; i < 100; i++) identity &= e0[i] == i;
    CHECK(!identity);
    reference_order(100, 1234, 1, ref);
    CHECK_MSG(memcmp(e1, ref, sizeof e1) == 0, "the shuffle differs from the documented draw");
    remat_loader_destroy(b);
    b = NULL;
    CHECK_OK(remat_loader_create(&b, d, 10, 1, 1235));
    CHECK(run_epoch(b, 0, 10, e0b) == 100);
    CHECK(memcmp(e0, e0b, sizeof e0) != 0);
    remat_loader_destroy(b);
    /* a seed with high bits set is keyed on both words */
    uint64_t big = 0x123456789abcdef0ull;
    b = NULL;
    CHECK_OK(remat_loader_create(&b, d, 10, 1, big));
    CHECK(run_epoch(b, 3, 10, e0b) == 100);
    reference_order(100, big, 3, ref);
    CHECK(memcmp(e0b, ref, sizeof ref) == 0);
    remat_loader_destroy(b);
    remat_loader_destroy(a);
    section_end("loader: each index once per epoch, same seed agrees, epochs and seeds "
                "differ, documented draw");

    section_begin();
    a = NULL;
    CHECK_OK(remat_loader_create(&a, d, 7, 0, 99));
    CHECK(remat_loader_batches(a) == 14);
    CHECK(run_epoch(a, 5, 7, e0) == 98);
    identity = 1;
    for (int i = 0; i < 98; i++) identity &= e0[i] == i;
    CHECK_MSG(identity, "shuffle=0 must keep the data set order");
    remat_loader_destroy(a);
    a = NULL;
    CHECK_OK(remat_loader_create(&a, d, 101, 1, 1));
    CHECK(remat_loader_batches(a) == 0);
    float x[128];
    int32_t y[128];
    CHECK(remat_loader_next(a, x, y) == 0);
    remat_loader_destroy(a);
    a = NULL;
    CHECK_FAILS(remat_loader_create(&a, d, 0, 1, 1), REMAT_INVALID, "batch", NULL);
    CHECK_FAILS(remat_loader_create(&a, NULL, 8, 1, 1), REMAT_INVALID, NULL, NULL);
    CHECK(a == NULL);
    remat_loader_destroy(NULL);
    remat_dataset_destroy(d);
    /* 103 samples, batch 10: 10 full batches, 100 distinct samples, the
     * dropped ones vary by epoch */
    d = index_set("odd", 103);
    a = NULL;
    CHECK_OK(remat_loader_create(&a, d, 10, 1, 7));
    CHECK(remat_loader_batches(a) == 10);
    int64_t got[100];
    int dropped_differ = 0, prev_missing = -1;
    for (int64_t ep = 0; ep < 4; ep++) {
        CHECK(run_epoch(a, ep, 10, got) == 100);
        int cnt[103] = {0}, ok = 1, missing = 0;
        for (int i = 0; i < 100; i++) cnt[got[i]]++;
        for (int i = 0; i < 103; i++) {
            ok &= cnt[i] <= 1;
            if (!cnt[i]) missing = missing * 131 + i + 1;
        }
        CHECK(ok);
        if (prev_missing >= 0 && missing != prev_missing) dropped_differ = 1;
        prev_missing = missing;
    }
    CHECK(dropped_differ);
    remat_loader_destroy(a);
    remat_dataset_destroy(d);
    section_end("loader: batch counts, no shuffle, batch > size, drop_last");

    /* All 6 orders of 3 samples are equally likely. */
    section_begin();
    d = index_set("three", 3);
    a = NULL;
    CHECK_OK(remat_loader_create(&a, d, 3, 1, 42));
    int hist[27] = {0};
    for (int64_t ep = 0; ep < 6000; ep++) {
        int64_t o[3];
        run_epoch(a, ep, 3, o);
        hist[o[0] * 9 + o[1] * 3 + o[2]]++;
    }
    int uniform = 1, perms = 0;
    for (int i = 0; i < 27; i++)
        if (hist[i]) perms++, uniform &= hist[i] > 850 && hist[i] < 1150;
    CHECK_MSG(perms == 6 && uniform, "permutation counts not uniform");
    remat_loader_destroy(a);
    remat_dataset_destroy(d);
    section_end("loader: the 6 permutations of 3 samples are uniform over 6000 epochs");
}

/* ----------------------------------------------------------------- tokens */

/* Writes n uint16 ids little-endian. */
static void write_tokens(const char *path, const uint16_t *ids, int64_t n) {
    unsigned char *b = malloc((size_t)(2 * n + 1));
    for (int64_t i = 0; i < n; i++) b[2 * i] = (unsigned char)ids[i], b[2 * i + 1] = (unsigned char)(ids[i] >> 8);
    write_bytes(path, b, (size_t)(2 * n));
    free(b);
}

static void test_tokens(void) {
    section_begin();
    enum { N = 3000 };
    uint16_t ids[N];
    int64_t first_big = -1;
    for (int i = 0; i < N; i++) {
        ids[i] = (uint16_t)((i * 7919u) % 60000u);
        if (first_big < 0 && ids[i] >= 1000) first_big = i;
    }
    write_tokens(tpath("t.tok"), ids, N);
    remat_tokens *t = NULL;
    CHECK_OK(remat_tokens_open(&t, tpath("t.tok")));
    CHECK(remat_tokens_count(t) == N);
    int same = 1;
    for (int i = 0; i < N; i++) same &= remat_tokens_get(t, i) == ids[i];
    CHECK_MSG(same, "token ids read back differ (both bytes, little-endian)");
    CHECK(remat_tokens_get(t, -1) == 0 && remat_tokens_get(t, N) == 0);
    CHECK_OK(remat_tokens_check(t, 60000));
    char want_buf[64];
    const char *want = want_buf;
    snprintf(want_buf, sizeof want_buf, "token %u at position %lld ", (unsigned)ids[first_big], (long long)first_big);
    CHECK_FAILS(remat_tokens_check(t, 1000), REMAT_INVALID, want, "t.tok");
    CHECK_FAILS(remat_tokens_check(t, 0), REMAT_INVALID, "vocabulary size 0", NULL);
    remat_tokens_destroy(t);
    remat_tokens_destroy(NULL);
    section_end("tokens: uint16 little-endian ids read back; an id beyond the vocabulary is named by "
                "position");

    section_begin();
    t = NULL;
    CHECK_FAILS(remat_tokens_open(&t, tpath("none.tok")), REMAT_NOT_FOUND, "none.tok", "no such");
    write_bytes(tpath("empty.tok"), "", 0);
    CHECK_FAILS(remat_tokens_open(&t, tpath("empty.tok")), REMAT_FORMAT, "empty.tok", "empty");
    write_bytes(tpath("odd.tok"), "abc", 3);
    CHECK_FAILS(remat_tokens_open(&t, tpath("odd.tok")), REMAT_FORMAT, "odd.tok", "3 bytes, an odd count");
    CHECK_FAILS(remat_tokens_open(&t, tmpdir), REMAT_IO, "not a regular file", NULL);
    CHECK(t == NULL);
    section_end("tokens: missing, empty, odd-sized files and folders are refused, named");
}

static void test_tokens_batch(void) {
    section_begin();
    enum { N = 50, B = 4, T = 8 };
    uint16_t ids[N];
    for (int i = 0; i < N; i++) ids[i] = (uint16_t)(1000 + i); /* the id gives the position */
    write_tokens(tpath("w.tok"), ids, N);
    remat_tokens *t = NULL;
    CHECK_OK(remat_tokens_open(&t, tpath("w.tok")));
    if (!t) return;
    int32_t x[B * T], y[B * T], x2[B * T], y2[B * T];
    CHECK_OK(remat_tokens_batch(t, B, T, 1, 0, x, y));
    int windows = 1;
    for (int b = 0; b < B; b++) {
        int32_t start = x[b * T] - 1000;
        windows &= start >= 0 && start <= N - T - 1;
        for (int i = 0; i < T; i++) windows &= x[b * T + i] == 1000 + start + i && y[b * T + i] == 1000 + start + i + 1;
    }
    CHECK_MSG(windows, "each row must be tokens [s, s+T) of the file and its labels [s+1, s+T+1)");
    CHECK_OK(remat_tokens_batch(t, B, T, 1, 0, x2, y2));
    CHECK(memcmp(x, x2, sizeof x) == 0 && memcmp(y, y2, sizeof y) == 0);
    CHECK_OK(remat_tokens_batch(t, B, T, 1, 1, x2, y2));
    CHECK_MSG(memcmp(x, x2, sizeof x) != 0, "step 1 gave step 0's batch");
    CHECK_OK(remat_tokens_batch(t, B, T, 2, 0, x2, y2));
    CHECK_MSG(memcmp(x, x2, sizeof x) != 0, "seed 2 gave seed 1's batch");
    /* every start in [0, N - T - 1] is drawn, about equally often */
    int hist[N] = {0};
    for (int64_t step = 0; step < 2100; step++) {
        CHECK_OK(remat_tokens_batch(t, B, T, 7, step, x, y));
        for (int b = 0; b < B; b++) hist[x[b * T] - 1000]++;
    }
    int uniform = 1;
    for (int s = 0; s < N; s++) uniform &= s <= N - T - 1 ? hist[s] > 120 && hist[s] < 300 : hist[s] == 0;
    CHECK_MSG(uniform, "window starts are not uniform on [0, %d]", N - T - 1);
    /* the longest window: one start */
    int32_t xl[N - 1], yl[N - 1];
    CHECK_OK(remat_tokens_batch(t, 1, N - 1, 3, 5, xl, yl));
    CHECK(xl[0] == 1000 && yl[N - 2] == 1000 + N - 1);
    CHECK_FAILS(remat_tokens_batch(t, 1, N, 3, 5, xl, yl), REMAT_INVALID, "w.tok", "fewer than one window");
    CHECK_FAILS(remat_tokens_batch(t, 0, T, 3, 5, x, y), REMAT_INVALID, "batch 0", NULL);
    remat_tokens_destroy(t);
    section_end("tokens: batches are windows with labels shifted by one, fixed by (seed, step), with "
                "uniform starts");
}

/* ------------------------------------------------------------ streams */

typedef struct {
    int64_t calls, last_step, fail_at;
    int64_t events, epochs[8], steps[8], in_epoch[8];
    int timed;
} stream_log;

static remat_status source(void *user, int64_t step, void *input, void *labels) {
    stream_log *l = user;
    if (step == l->fail_at) return remat__err(REMAT_IO, "source: batch %lld is unreadable", (long long)step);
    l->calls++, l->last_step = step;
    float *x = input;
    int32_t *y = labels;
    for (int i = 0; i < 4 * 784; i++) x[i] = (float)((i + step) % 13) / 13.0f;
    for (int i = 0; i < 4; i++) y[i] = (int32_t)((i + step) % 10);
    return REMAT_OK;
}

static void on_stream(const remat_event *ev, void *user) {
    stream_log *l = user;
    if (l->events < 8) {
        l->epochs[l->events] = ev->epoch, l->steps[l->events] = ev->step;
        l->in_epoch[l->events] = ev->step_in_epoch;
    }
    l->timed &= ev->step_seconds > 0 && ev->peak_bytes > 0 && ev->steps_in_epoch == 3 && isfinite(ev->loss);
    l->events++;
}

static void test_stream(void) {
    section_begin();
    remat_graph *g = NULL;
    remat_model m;
    remat_model_opts mo;
    remat_model_opts_default(&mo);
    mo.name = "mlp", mo.batch = 4;
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
    remat_optim_opts oo;
    remat_optim_opts_default(&oo, REMAT_OPTIM_SGD);
    CHECK_OK(remat_session_set_optimizer(s, &oo));
    stream_log l = {.fail_at = -1, .timed = 1};
    remat_train_opts to = {.epochs = 2, .steps = 3, .batch = 4, .on_event = on_stream, .user = &l};
    CHECK_OK(remat_train_stream(s, &m, source, &l, &to));
    CHECK(l.calls == 6 && l.last_step == 5 && l.events == 6 && l.timed);
    int order = 1;
    for (int i = 0; i < 6; i++) order &= l.epochs[i] == i / 3 && l.steps[i] == i + 1 && l.in_epoch[i] == i % 3 + 1;
    CHECK_MSG(order, "events must number epochs 0,0,0,1,1,1 and steps 1..6");
    CHECK(remat_session_step_index(s) == 6);
    stream_log bad = {.fail_at = 1, .timed = 1};
    to.user = &bad;
    CHECK_FAILS(remat_train_stream(s, &m, source, &bad, &to), REMAT_IO, "batch 1 is unreadable", NULL);
    CHECK(bad.events == 1);
    to.steps = 0;
    CHECK_FAILS(remat_train_stream(s, &m, source, &l, &to), REMAT_INVALID, "steps per epoch", NULL);
    to.steps = 3, to.batch = 5;
    CHECK_FAILS(remat_train_stream(s, &m, source, &l, &to), REMAT_INVALID, "batch 5", NULL);
    /* a classifier is no language model */
    uint16_t ids[64] = {0};
    write_tokens(tpath("z.tok"), ids, 64);
    remat_tokens *t = NULL;
    CHECK_OK(remat_tokens_open(&t, tpath("z.tok")));
    to.batch = 4;
    CHECK_FAILS(remat_train_tokens(s, &m, t, &to), REMAT_INVALID, "language model", NULL);
    remat_tokens_destroy(t);
    remat_session_destroy(s);
    remat_graph_destroy(g);
    section_end("stream: epochs of --steps steps, events in order, source errors stop training");
}

typedef struct {
    double first, last10[10];
    int64_t n;
} loss_log;

static void on_lm(const remat_event *ev, void *user) {
    loss_log *l = user;
    if (l->n == 0) l->first = ev->loss;
    l->last10[l->n % 10] = ev->loss;
    l->n++;
}

/* A tiny GPT-2 on a token file that repeats a 20-token pattern: the next
 * token is fully predictable, so the loss must fall far below ln(64). */
static void test_lm_training(void) {
    section_begin();
    static const uint16_t pat[20] = {3, 14, 15, 9, 26, 5, 35, 8, 9, 7, 9, 32, 38, 4, 6, 26, 43, 38, 32, 7};
    uint16_t ids[2000];
    for (int i = 0; i < 2000; i++) ids[i] = pat[i % 20];
    write_tokens(tpath("pattern.tok"), ids, 2000);
    remat_model_opts mo;
    remat_model_opts_default(&mo);
    CHECK_OK(remat_model_opts_for(&mo, "gpt2"));
    mo.batch = 4, mo.layers = 2, mo.embd = 32, mo.heads = 2, mo.context = 16, mo.vocab = 64;
    mo.dropout_scale = 0.0f;
    remat_graph *g = NULL;
    remat_model m;
    remat_session *s = NULL;
    remat_tokens *t = NULL;
    CHECK_OK(remat_graph_create(&g));
    CHECK_OK(remat_model_build(g, &mo, &m));
    remat_session_opts so;
    remat_session_opts_default(&so);
    so.threads = 1;
    CHECK_OK(remat_session_create(&s, g, m.loss, &so));
    CHECK_OK(remat_tokens_open(&t, tpath("pattern.tok")));
    if (s && t) {
        remat_optim_opts oo;
        remat_optim_opts_default(&oo, REMAT_OPTIM_ADAMW);
        oo.lr = 3e-3f;
        CHECK_OK(remat_session_set_optimizer(s, &oo));
        loss_log l = {0};
        remat_train_opts to = {.epochs = 1, .steps = 100, .seed = 5, .on_event = on_lm, .user = &l};
        CHECK_OK(remat_train_tokens(s, &m, t, &to));
        double mean = 0;
        for (int i = 0; i < 10; i++) mean += l.last10[i] / 10;
        CHECK_MSG(l.n == 100 && fabs(l.first - log(64.0)) < 0.5 && mean < l.first / 4,
                  "%lld steps, loss %.4f -> %.4f (mean of the last 10)", (long long)l.n, l.first, mean);
        printf("  gpt2 (2 layers, 32 wide) on a 20-token pattern: loss %.4f -> %.4f in 100 steps\n", l.first, mean);
        /* ids beyond the model's vocabulary: refused before training, by position */
        remat_graph *g2 = NULL;
        remat_session *s2 = NULL;
        remat_model m2;
        mo.vocab = 40;
        CHECK_OK(remat_graph_create(&g2));
        CHECK_OK(remat_model_build(g2, &mo, &m2));
        CHECK_OK(remat_session_create(&s2, g2, m2.loss, &so));
        if (s2) CHECK_FAILS(remat_train_tokens(s2, &m2, t, &to), REMAT_INVALID, "token 43 at position 16 ", "40");
        remat_session_destroy(s2);
        remat_graph_destroy(g2);
    }
    remat_tokens_destroy(t);
    remat_session_destroy(s);
    remat_graph_destroy(g);
    section_end("language model: a tiny gpt2 learns a repeating token file; ids beyond its vocabulary "
                "are named");
}

/* ---------------------------------------------------------- real data */

static void test_fashion_mnist(void) {
    /* A missing data set fails the test, not skips it: the suite's
     * command installs it (scripts/install-deps.sh), so its absence is a
     * broken setup that must not pass unnoticed. */
    struct stat st;
    CHECK_MSG(stat("/usr/share/datasets/fashion-mnist", &st) == 0,
              "/usr/share/datasets/fashion-mnist is missing: apt-get install dataset-fashion-mnist");
    section_begin();
    remat_dataset *tr = NULL, *te = NULL;
    CHECK_OK(remat_dataset_load(&tr, "fashion-mnist", NULL, 1));
    CHECK_OK(remat_dataset_load(&te, "fashion-mnist", NULL, 0));
    int64_t chw[3];
    CHECK(remat_dataset_size(tr) == 60000 && remat_dataset_size(te) == 10000);
    remat_dataset_shape(tr, chw);
    CHECK(chw[0] == 1 && chw[1] == 28 && chw[2] == 28);
    CHECK(remat_dataset_classes(tr) == 10);
    /* normalized with the training set's statistics: mean ~0, std ~1 */
    if (tr) {
        enum { B = 1000 };
        float *x = malloc((size_t)B * 784 * sizeof *x);
        int32_t y[B];
        int64_t idx[B], per_class[10] = {0};
        double s = 0, s2 = 0;
        for (int64_t first = 0; first < 60000; first += B) {
            for (int i = 0; i < B; i++) idx[i] = first + i;
            CHECK_OK(remat_dataset_get(tr, idx, B, x, y));
            for (int64_t i = 0; i < (int64_t)B * 784; i++) s += x[i], s2 += (double)x[i] * x[i];
            for (int i = 0; i < B; i++) per_class[y[i]]++;
        }
        double n = 60000.0 * 784, mean = s / n, sd = sqrt(s2 / n - mean * mean);
        CHECK_MSG(fabs(mean) < 0.01 && fabs(sd - 1) < 0.01, "normalized mean %g std %g", mean, sd);
        int balanced = 1;
        for (int c = 0; c < 10; c++) balanced &= per_class[c] == 6000;
        CHECK_MSG(balanced, "Fashion-MNIST's training classes have 6000 images each");
        free(x);
    }
    remat_dataset_destroy(tr);
    remat_dataset_destroy(te);
    section_end("real Fashion-MNIST: 60000 train / 10000 test, 1x28x28, mean 0 std 1 "
                "after normalization");
}

/* ------------------------------------------------------------------ main */

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)flag, (void)ftw;
    return remove(path);
}

int main(void) {
    const char *base = getenv("TMPDIR");
    snprintf(tmpdir, sizeof tmpdir, "%s/remat-test-data-XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    test_idx();
    test_idx_errors();
    test_cifar();
    test_loader();
    test_tokens();
    test_tokens_batch();
    test_stream();
    test_lm_training();
    test_fashion_mnist();
    nftw(tmpdir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    return check_exit("test_data");
}
