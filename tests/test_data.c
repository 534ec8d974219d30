/* test_data.c: the data layer. IDX files (plain and gzip) and CIFAR-10
 * batches written into a temporary directory load with the right shapes,
 * labels and normalized values; every malformed input (truncated, wrong
 * magic, mismatched counts, bad labels, missing directory, unknown name)
 * gets its status and a message naming the file and the problem. The loader
 * visits each sample once per epoch, reproducibly from (seed, epoch), in
 * full batches. The safetensors reader and writer round-trip, read the
 * PyTorch fixtures, and reject each kind of malformed file naming the
 * tensor. The real Fashion-MNIST files are checked when installed.
 * (Session-level remat_safetensors_save/load: test_torch.) */
#if !defined(_GNU_SOURCE) && !defined(_XOPEN_SOURCE)
#define _XOPEN_SOURCE 700
#endif

#include "../src/remat-impl.h"
#include "../src/train/safetensors.h"
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
    printf("%s %s\n", check_failures == section_failures ? "ok  " : "FAIL",
           what);
    fflush(stdout);
}

static int has(const char *s, const char *sub) {
    return s && sub && strstr(s, sub) != NULL;
}

/* A call that must fail with status st and a message containing a and b
 * (either may be NULL). */
#define CHECK_ERR(call, st, a, b)                                           \
    do {                                                                    \
        remat_status got_ = (call);                                         \
        const char *msg_ = remat_last_error();                              \
        CHECK_MSG(got_ == (st) && (!(a) || has(msg_, a)) &&                 \
                      (!(b) || has(msg_, b)),                               \
                  "status %s, message: %s", remat_status_str(got_), msg_); \
    } while (0)

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
static unsigned char *idx_images(uint32_t magic, uint32_t n, uint32_t rows,
                                 uint32_t cols, const unsigned char *pix,
                                 size_t cut, size_t *len) {
    size_t body = (size_t)n * rows * cols - cut;
    unsigned char *b = malloc(16 + body);
    put_be32(b, magic), put_be32(b + 4, n), put_be32(b + 8, rows);
    put_be32(b + 12, cols);
    memcpy(b + 16, pix, body);
    *len = 16 + body;
    return b;
}

static unsigned char *idx_labels(uint32_t magic, uint32_t n,
                                 const unsigned char *lab, size_t *len) {
    unsigned char *b = malloc(8 + n);
    put_be32(b, magic), put_be32(b + 4, n);
    memcpy(b + 8, lab, n);
    *len = 8 + n;
    return b;
}

/* Writes a complete IDX pair (images n x rows x cols, labels) to dir/names
 * through writer (write_bytes or write_gz). */
static void write_idx_pair(const char *images, const char *labels,
                           uint32_t n, uint32_t rows, uint32_t cols,
                           const unsigned char *pix, const unsigned char *lab,
                           void (*writer)(const char *, const void *,
                                          size_t)) {
    size_t len;
    unsigned char *b = idx_images(0x803, n, rows, cols, pix, 0, &len);
    writer(images, b, len);
    free(b);
    b = idx_labels(0x801, n, lab, &len);
    writer(labels, b, len);
    free(b);
}

static float norm(unsigned p, float mean, float std) {
    return ((float)p / 255.0f - mean) / std;
}

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
        for (int j = 0; j < R * C; j++)
            exact &= x[k * R * C + j] == norm(pix5[idx[k] * R * C + j], mean, std);
    }
    CHECK_MSG(exact, "normalized values differ from (p/255 - %g)/%g", (double)mean,
              (double)std);
    CHECK(x[R * C] == (0.0f - mean) / std);           /* sample 0, pixel 0 */
    CHECK(x[R * C + 1] == (1.0f - mean) / std);       /* sample 0, pixel 255 */
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
    write_idx_pair(tpath("mnist/train-images-idx3-ubyte.gz"),
                   tpath("mnist/train-labels-idx1-ubyte.gz"), N5, R, C, pix5, lab5,
                   write_gz);
    d = NULL;
    CHECK_OK(remat_dataset_load(&d, "mnist", tpath("mnist"), 1));
    if (d) check5(d, 0.1307f, 0.3081f);
    remat_dataset_destroy(d);
    CHECK(mkdir(tpath("fmnist"), 0700) == 0);
    write_idx_pair(tpath("fmnist/t10k-images-idx3-ubyte"),
                   tpath("fmnist/t10k-labels-idx1-ubyte"), N5, R, C, pix5, lab5,
                   write_bytes);
    d = NULL;
    CHECK_OK(remat_dataset_load(&d, "fashion-mnist", tpath("fmnist"), 0));
    if (d) check5(d, 0.2860f, 0.3530f);
    remat_dataset_destroy(d);
    /* the training split is not there: names both candidates */
    d = NULL;
    CHECK_ERR(remat_dataset_load(&d, "fashion-mnist", tpath("fmnist"), 1),
              REMAT_NOT_FOUND, "train-images-idx3-ubyte", "train-images-idx3-ubyte.gz");
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
    CHECK_ERR(remat_dataset_load_idx(&d, tpath("short-images"), tpath("lab")),
              REMAT_FORMAT, "short-images: truncated", "expected 30 pixel bytes, got 18");
    write_gz(tpath("short-images.gz"), b, len);
    CHECK_ERR(remat_dataset_load_idx(&d, tpath("short-images.gz"), tpath("lab")),
              REMAT_FORMAT, "short-images.gz: truncated", "got 18");
    free(b);
    /* a gzip stream cut in the middle */
    FILE *f = fopen(tpath("img.gz"), "rb");
    unsigned char gzb[4096];
    size_t gzn = f ? fread(gzb, 1, sizeof gzb, f) : 0;
    if (f) fclose(f);
    write_bytes(tpath("cut.gz"), gzb, gzn / 2);
    CHECK_ERR(remat_dataset_load_idx(&d, tpath("cut.gz"), tpath("lab")), REMAT_FORMAT,
              "cut.gz: truncated", NULL);
    /* a header cut short */
    b = idx_images(0x803, N5, R, C, pix5, 0, &len);
    write_bytes(tpath("tiny"), b, 10);
    CHECK_ERR(remat_dataset_load_idx(&d, tpath("tiny"), tpath("lab")), REMAT_FORMAT,
              "tiny: truncated", "16-byte IDX header");
    /* trailing bytes */
    unsigned char *b2 = malloc(len + 3);
    memcpy(b2, b, len);
    memset(b2 + len, 7, 3);
    write_bytes(tpath("long"), b2, len + 3);
    CHECK_ERR(remat_dataset_load_idx(&d, tpath("long"), tpath("lab")), REMAT_FORMAT,
              "long: unexpected data", "30 pixel bytes");
    free(b2);
    free(b);
    /* corrupt compressed data: a gzip header followed by garbage */
    unsigned char bad[64] = {0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3};
    for (int i = 10; i < 64; i++) bad[i] = (unsigned char)(i * 91 + 7);
    write_bytes(tpath("corrupt.gz"), bad, sizeof bad);
    CHECK_ERR(remat_dataset_load_idx(&d, tpath("corrupt.gz"), tpath("lab")),
              REMAT_FORMAT, "corrupt.gz", NULL);
    CHECK(d == NULL);
    section_end("truncated images (plain, gzip, cut stream, header), trailing data, "
                "corrupt gzip");

    section_begin();
    CHECK_ERR(remat_dataset_load_idx(&d, tpath("lab"), tpath("lab")), REMAT_FORMAT,
              "lab: bad magic number 0x00000801, expected 0x00000803", "it is an IDX labels file");
    CHECK_ERR(remat_dataset_load_idx(&d, tpath("img"), tpath("img")), REMAT_FORMAT,
              "img: bad magic number 0x00000803, expected 0x00000801", NULL);
    b = idx_images(0x12345678, N5, R, C, pix5, 0, &len);
    write_bytes(tpath("magic"), b, len);
    free(b);
    CHECK_ERR(remat_dataset_load_idx(&d, tpath("magic"), tpath("lab")), REMAT_FORMAT,
              "magic: bad magic number 0x12345678", NULL);
    section_end("wrong magic numbers");

    section_begin();
    b = idx_labels(0x801, N5 - 1, lab5, &len);
    write_bytes(tpath("lab4"), b, len);
    free(b);
    CHECK_ERR(remat_dataset_load_idx(&d, tpath("img"), tpath("lab4")), REMAT_FORMAT,
              "has 5 images", "has 4 labels");
    unsigned char badlab[N5] = {1, 2, 10, 3, 4};
    b = idx_labels(0x801, N5, badlab, &len);
    write_bytes(tpath("lab10"), b, len);
    free(b);
    CHECK_ERR(remat_dataset_load_idx(&d, tpath("img"), tpath("lab10")), REMAT_FORMAT,
              "lab10: label 10 of sample 2", "10 classes");
    b = idx_images(0x803, 0, R, C, pix5, 0, &len);
    write_bytes(tpath("empty"), b, len);
    free(b);
    CHECK_ERR(remat_dataset_load_idx(&d, tpath("empty"), tpath("lab")), REMAT_FORMAT,
              "empty: empty", NULL);
    CHECK_ERR(remat_dataset_load_idx(&d, tpath("nosuch"), tpath("lab")),
              REMAT_NOT_FOUND, "nosuch", NULL);
    /* a header claiming 2^32-1 images of 65535x65535: truncated, no huge
     * allocation */
    unsigned char huge[20];
    put_be32(huge, 0x803), put_be32(huge + 4, 0xffffffffu);
    put_be32(huge + 8, 65535), put_be32(huge + 12, 65535);
    memset(huge + 16, 1, 4);
    write_bytes(tpath("huge"), huge, sizeof huge);
    CHECK_ERR(remat_dataset_load_idx(&d, tpath("huge"), tpath("lab")), REMAT_FORMAT,
              "huge", NULL);
    section_end("mismatched counts, label out of range, empty, missing file, huge header");

    section_begin();
    CHECK_ERR(remat_dataset_load(&d, "fashion-mnist", "/nonexistent/fmnist", 1),
              REMAT_NOT_FOUND, "/nonexistent/fmnist", "apt-get install dataset-fashion-mnist");
    CHECK_ERR(remat_dataset_load(&d, "mnist", "/nonexistent/mnist", 1), REMAT_NOT_FOUND,
              "/nonexistent/mnist", "does not exist");
    CHECK(!has(remat_last_error(), "apt-get"));
    CHECK_ERR(remat_dataset_load(&d, "mnist", NULL, 1), REMAT_INVALID, "mnist",
              "directory");
    CHECK_ERR(remat_dataset_load(&d, "cifar10", NULL, 1), REMAT_INVALID, "cifar10",
              "directory");
    CHECK_ERR(remat_dataset_load(&d, "imagenet", NULL, 1), REMAT_INVALID,
              "unknown data set 'imagenet'", "fashion-mnist, mnist, cifar10");
    CHECK_ERR(remat_dataset_load(&d, "fashion-mnist", tpath("img"), 1), REMAT_INVALID,
              "not a directory", NULL);
    CHECK(d == NULL);
    section_end("missing directory (with apt-get hint), no default dir, unknown name");

    section_begin();
    CHECK_OK(remat_dataset_load_idx(&d, tpath("img"), tpath("lab")));
    if (d) {
        float x[R * C];
        int32_t y;
        int64_t bad_i = 5;
        CHECK_ERR(remat_dataset_get(d, &bad_i, 1, x, &y), REMAT_INVALID,
                  "index 5 out of range", NULL);
        CHECK_ERR(remat_dataset_truncate(d, 6), REMAT_INVALID, "6", NULL);
        CHECK_ERR(remat_dataset_truncate(d, 0), REMAT_INVALID, NULL, NULL);
        CHECK_OK(remat_dataset_truncate(d, 3));
        CHECK(remat_dataset_size(d) == 3);
        int64_t i2 = 2;
        CHECK_OK(remat_dataset_get(d, &i2, 1, x, &y));
        CHECK(y == lab5[2] && x[0] == norm(pix5[2 * R * C], 0.5f, 0.5f));
        CHECK_ERR(remat_dataset_get(d, &i2 + 0, -1, x, &y), REMAT_INVALID, NULL, NULL);
        i2 = 3;
        CHECK_ERR(remat_dataset_get(d, &i2, 1, x, &y), REMAT_INVALID, "out of range", NULL);
    }
    remat_dataset_destroy(d);
    remat_dataset_destroy(NULL);
    CHECK(remat_dataset_size(NULL) == 0 && remat_dataset_classes(NULL) == 0);
    section_end("get/truncate argument checks");
}

/* --------------------------------------------------------------- CIFAR-10 */

#define REC 3073

static unsigned char cifar_px(int64_t rec, int64_t k) {
    return (unsigned char)((rec * 31 + k * 7) % 256);
}

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

static void check_cifar(const remat_dataset *d, int64_t n, const float *mean,
                        const float *std) {
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
        for (int64_t k = 0; k < 3072; k++)
            ok &= x[r * 3072 + k] == norm(cifar_px(r, k), mean[k / 1024], std[k / 1024]);
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
    CHECK_ERR(remat_dataset_load(&d, "cifar10", tpath("cifar-top"), 1), REMAT_NOT_FOUND,
              "data_batch_1.bin", NULL);
    unsigned char *b = malloc(2 * REC + 5);
    memset(b, 1, 2 * REC + 5);
    write_bytes(tpath("odd.bin"), b, 2 * REC + 5);
    const char *odd[1] = {tpath("odd.bin")};
    CHECK_ERR(remat_dataset_load_cifar10(&d, odd, 1), REMAT_FORMAT, "odd.bin",
              "multiple of the 3073-byte");
    write_bytes(tpath("zero.bin"), b, 0);
    const char *zero[1] = {tpath("zero.bin")};
    CHECK_ERR(remat_dataset_load_cifar10(&d, zero, 1), REMAT_FORMAT, "zero.bin", NULL);
    b[REC] = 11; /* record 1's label */
    write_bytes(tpath("lab11.bin"), b, 2 * REC);
    const char *l11[2] = {tpath("c1.bin"), tpath("lab11.bin")};
    CHECK_ERR(remat_dataset_load_cifar10(&d, l11, 2), REMAT_FORMAT,
              "lab11.bin: label 11 of record 1", NULL);
    free(b);
    const char *missing[2] = {tpath("c1.bin"), tpath("nosuch.bin")};
    CHECK_ERR(remat_dataset_load_cifar10(&d, missing, 2), REMAT_NOT_FOUND, "nosuch.bin",
              NULL);
    CHECK_ERR(remat_dataset_load_cifar10(&d, missing, 0), REMAT_INVALID, NULL, NULL);
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
    CHECK_ERR(remat_loader_create(&a, d, 0, 1, 1), REMAT_INVALID, "batch", NULL);
    CHECK_ERR(remat_loader_create(&a, NULL, 8, 1, 1), REMAT_INVALID, NULL, NULL);
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
    if (strcmp(a->name, b->name) || strcmp(a->dtype, b->dtype) || a->ndim != b->ndim ||
        a->bytes != b->bytes)
        return 0;
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
        {.name = "layer.0.weight", .dtype = "F32", .ndim = 2, .dims = {2, 3}, .data = w,
         .bytes = sizeof w},
        {.name = "steps", .dtype = "I64", .ndim = 1, .dims = {4}, .data = steps,
         .bytes = sizeof steps},
        {.name = "scale \"q\"\\", .dtype = "F64", .ndim = 0, .data = &scale,
         .bytes = sizeof scale},
        {.name = "ids", .dtype = "I32", .ndim = 1, .dims = {3}, .data = ids,
         .bytes = sizeof ids},
        {.name = "empty", .dtype = "F32", .ndim = 2, .dims = {0, 5}, .data = NULL,
         .bytes = 0},
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
            CHECK_MSG(t.bytes == 0 || (uintptr_t)t.data % el == 0, "%s is misaligned",
                      t.name);
        }
        CHECK(remat__st_find(f, "ids") == 3);
        CHECK(remat__st_find(f, "scale \"q\"\\") == 2);
        CHECK(remat__st_find(f, "nope") == -1);
        CHECK(remat__st_metadata(f, "format") && !strcmp(remat__st_metadata(f, "format"), "pt"));
        CHECK(remat__st_metadata(f, "note") &&
              !strcmp(remat__st_metadata(f, "note"), "a \"quoted\"\nvalue"));
        CHECK(remat__st_metadata(f, "nope") == NULL);
        remat__st_tensor t;
        CHECK_ERR(remat__st_get(f, 5, &t), REMAT_INVALID, "rt.safetensors", NULL);
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
    CHECK_ERR(remat__st_write(path, 1, &bad, NULL), REMAT_INVALID, "layer.0.weight",
              "unknown dtype 'F7'");
    bad = ts[0];
    bad.bytes = 20;
    CHECK_ERR(remat__st_write(path, 1, &bad, NULL), REMAT_INVALID, "layer.0.weight",
              "(2, 3)");
    remat__st_tensor two[2] = {ts[1], ts[1]};
    CHECK_ERR(remat__st_write(path, 2, two, NULL), REMAT_INVALID, "'steps' given twice",
              NULL);
    bad = ts[0];
    bad.name = "__metadata__";
    CHECK_ERR(remat__st_write(path, 1, &bad, NULL), REMAT_INVALID, "invalid name", NULL);
    bad = ts[0];
    bad.ndim = 9;
    CHECK_ERR(remat__st_write(path, 1, &bad, NULL), REMAT_INVALID, "layer.0.weight", NULL);
    CHECK_ERR(remat__st_write(tpath("nodir/x.safetensors"), 1, ts, NULL), REMAT_IO,
              "nodir", NULL);
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
    CHECK_ERR(remat__st_open(&f, p), REMAT_FORMAT, "bad.safetensors",
              "header length 1000 exceeds");
    write_st(p, good, 0xffffffffffffffffull, 8);
    CHECK_ERR(remat__st_open(&f, p), REMAT_FORMAT, "header length", NULL);
    write_bytes(p, "\x10\0\0", 3);
    CHECK_ERR(remat__st_open(&f, p), REMAT_FORMAT, "too short", NULL);
    CHECK_ERR(remat__st_open(&f, tpath("nosuch.safetensors")), REMAT_NOT_FOUND,
              "nosuch.safetensors", NULL);
    section_end("safetensors: header length beyond the file, too short, missing file");

    section_begin();
    write_st(p, "{\"a\":{\"dtype\":\"F32\",", 0, 8);
    CHECK_ERR(remat__st_open(&f, p), REMAT_FORMAT, "bad.safetensors", "not valid JSON");
    write_st(p, "[1, 2]", 0, 0);
    CHECK_ERR(remat__st_open(&f, p), REMAT_FORMAT, "not a JSON object", NULL);
    write_st(p, "{} x", 0, 0);
    CHECK_ERR(remat__st_open(&f, p), REMAT_FORMAT, "unexpected text", NULL);
    write_st(p, "{}      ", 0, 0);
    CHECK_OK(remat__st_open(&f, p)); /* space padding is fine */
    remat__st_close(f);
    f = NULL;
    write_st(p, "{\"__metadata__\":{\"k\":3}}", 0, 0);
    CHECK_ERR(remat__st_open(&f, p), REMAT_FORMAT, "__metadata__ entry 'k'", NULL);
    section_end("safetensors: bad JSON, not an object, trailing text, bad metadata");

    section_begin();
    write_st(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,16]}}", 0, 8);
    CHECK_ERR(remat__st_open(&f, p), REMAT_FORMAT, "tensor 'a'",
              "[0, 16] out of range: the data section has 8 bytes");
    write_st(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", 0, 8);
    CHECK_ERR(remat__st_open(&f, p), REMAT_FORMAT, "tensor 'a'", "out of range");
    write_st(p, "{\"a\":{\"dtype\":\"F7\",\"shape\":[2],\"data_offsets\":[0,8]}}", 0, 8);
    CHECK_ERR(remat__st_open(&f, p), REMAT_FORMAT, "tensor 'a'", "unknown dtype 'F7'");
    write_st(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 0, 8);
    CHECK_ERR(remat__st_open(&f, p), REMAT_FORMAT, "tensor 'a'",
              "dtype F32 and shape (3) need 12 bytes but data_offsets [0, 8] hold 8");
    write_st(p, "{\"a\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[0,8]}}", 0, 8);
    CHECK_ERR(remat__st_open(&f, p), REMAT_FORMAT, "tensor 'a'", "need 16 bytes");
    write_st(p, "{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,8]}}", 0, 8);
    CHECK_ERR(remat__st_open(&f, p), REMAT_FORMAT, "tensor 'a'", "missing \"shape\"");
    write_st(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2]}}", 0, 8);
    CHECK_ERR(remat__st_open(&f, p), REMAT_FORMAT, "tensor 'a'", "missing \"data_offsets\"");
    write_st(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 0, 8);
    CHECK_ERR(remat__st_open(&f, p), REMAT_FORMAT, "tensor 'a'", "shape entry 0");
    write_st(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2.5],\"data_offsets\":[0,8]}}", 0, 8);
    CHECK_ERR(remat__st_open(&f, p), REMAT_FORMAT, "tensor 'a'", "shape entry 0");
    write_st(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0]}}", 0, 8);
    CHECK_ERR(remat__st_open(&f, p), REMAT_FORMAT, "tensor 'a'", "data_offsets must be");
    write_st(p, "{\"a\":[1]}", 0, 0);
    CHECK_ERR(remat__st_open(&f, p), REMAT_FORMAT, "tensor 'a'", "not an object");
    write_st(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,2],"
                "\"data_offsets\":[0,8]}}", 0, 8);
    CHECK_ERR(remat__st_open(&f, p), REMAT_UNSUPPORTED, "tensor 'a'", "9 dimensions");
    section_end("safetensors: offsets out of range, unknown dtype, size mismatch, missing "
                "fields, bad shape");

    section_begin();
    write_st(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 0, 12);
    CHECK_ERR(remat__st_open(&f, p), REMAT_FORMAT, "'a' [0, 8] and 'b' [4, 12] overlap",
              NULL);
    write_st(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}", 0, 12);
    CHECK_ERR(remat__st_open(&f, p), REMAT_FORMAT, "no tensor covers bytes [4, 8)",
              "'b'");
    write_st(p, good, 0, 12);
    CHECK_ERR(remat__st_open(&f, p), REMAT_FORMAT, "no tensor covers bytes [8, 12)", NULL);
    write_st(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 0, 8);
    CHECK_ERR(remat__st_open(&f, p), REMAT_FORMAT, "tensor 'a' appears twice", NULL);
    /* out of order in the header, in order in the data: fine */
    write_st(p, "{\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]},"
                "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 0, 8);
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
    static const char *names[] = {"fixtures/mlp.safetensors", "fixtures/cnn.safetensors",
                                  "fixtures/bnnet.safetensors"};
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
    if (found)
        section_end("safetensors: PyTorch fixtures read and rewrite identically");
    else
        printf("skip safetensors fixtures (run from tests/ to read fixtures/)\n");
}

/* ---------------------------------------------------------- real data */

static void test_fashion_mnist(void) {
    struct stat st;
    if (stat("/usr/share/datasets/fashion-mnist", &st) != 0) {
        printf("skip real Fashion-MNIST (apt-get install dataset-fashion-mnist)\n");
        return;
    }
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
        CHECK_MSG(fabs(mean) < 0.01 && fabs(sd - 1) < 0.01, "normalized mean %g std %g",
                  mean, sd);
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
    snprintf(tmpdir, sizeof tmpdir, "%s/remat-test-data-XXXXXX",
             base && *base ? base : "/tmp");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    test_idx();
    test_idx_errors();
    test_cifar();
    test_loader();
    test_st_roundtrip();
    test_st_malformed();
    test_st_fixtures();
    test_fashion_mnist();
    nftw(tmpdir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    return check_exit("test_data");
}
