/* dataset.c: labelled image data sets held in memory.
 *
 * A data set is a block of uint8 pixels (n, C, H, W), one int32 label per
 * sample, a class count and a per-channel mean and standard deviation used
 * to normalize pixels into floats when a batch is gathered. Three sources
 * are understood:
 * - IDX files (MNIST, Fashion-MNIST): an images file with magic 0x00000803
 *   and three big-endian u32 dimensions (n, rows, cols), and a labels file
 *   with magic 0x00000801 and one dimension (n). Both are read through
 *   zlib's gzread, which reads plain and gzip-compressed files alike; both
 *   headers are read and compared (and the pixels bounded, 4 GiB) before
 *   any payload, which must then be exactly what the header announces.
 * - CIFAR-10 binary batches: records of 1 label byte and 3072 pixel bytes
 *   (3 x 32 x 32, channel-major).
 * - remat_dataset_load, which finds the files of a named data set in a
 *   directory and sets that data set's usual normalization constants.
 * Every malformed input is reported with the file's path and what is wrong
 * with it; nothing here aborts.
 */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif

#include "../remat-impl.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <zlib.h>

#define MAX_CHANNELS 3
#define NUM_CLASSES 10
#define IDX_IMAGES_MAGIC 0x00000803u
#define IDX_LABELS_MAGIC 0x00000801u
#define CIFAR_PIXELS 3072
#define CIFAR_RECORD (1 + CIFAR_PIXELS)

struct remat_dataset {
    int64_t n;       /* samples */
    int64_t c, h, w; /* image shape, c <= MAX_CHANNELS */
    uint8_t *pixels; /* owned; n*c*h*w bytes, sample-major, CHW */
    int32_t *labels; /* owned; n labels in [0, classes) */
    int classes;
    float mean[MAX_CHANNELS], std[MAX_CHANNELS];
    /* lut[ch][p] = (p/255 - mean[ch]) / std[ch], in float; rebuilt by
     * set_norm so that gathering is one table look-up per pixel. */
    float lut[MAX_CHANNELS][256];
};

/* Sets the normalization constants (one per channel) and rebuilds the
 * look-up table. */
static void set_norm(remat_dataset *d, const float *mean, const float *std) {
    for (int64_t ch = 0; ch < d->c; ch++) {
        d->mean[ch] = mean[ch];
        d->std[ch] = std[ch];
        for (int p = 0; p < 256; p++) d->lut[ch][p] = ((float)p / 255.0f - mean[ch]) / std[ch];
    }
}

static void set_norm1(remat_dataset *d, float mean, float std) {
    float m[MAX_CHANNELS] = {mean, mean, mean};
    float s[MAX_CHANNELS] = {std, std, std};
    set_norm(d, m, s);
}

void remat_dataset_destroy(remat_dataset *d) {
    if (!d) return;
    free(d->pixels);
    free(d->labels);
    free(d);
}

/* ------------------------------------------------------------------- IDX */

/* Bytes gzread is asked for at once (it takes an unsigned, returns int). */
#define GZ_CHUNK ((size_t)1 << 30)
/* First allocation for a body whose size the header claims; the buffer
 * grows as data actually arrives, so a corrupt header that claims
 * terabytes yields "truncated" rather than an attempt to allocate them. */
#define BODY_FIRST ((size_t)64 << 20)

static uint32_t be32(const unsigned char *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

/* Reports a failed gzread on `path`. */
static remat_status gz_fail(gzFile gz, const char *path) {
    int errnum = 0;
    const char *msg = gzerror(gz, &errnum);
    /* zlib prefixes its messages with "path: "; the path comes first here
     * anyway. */
    size_t plen = strlen(path);
    if (msg && strncmp(msg, path, plen) == 0 && strncmp(msg + plen, ": ", 2) == 0) msg += plen + 2;
    if (errnum == Z_ERRNO) return remat__err(REMAT_IO, "%s: read error: %s", path, strerror(errno));
    if (errnum == Z_MEM_ERROR) return remat__err(REMAT_NOMEM, "%s: out of memory while decompressing", path);
    return remat__err(REMAT_FORMAT, "%s: corrupt gzip data: %s", path, msg ? msg : "unknown zlib error");
}

/* Reads up to `want` bytes into buf; *got is what arrived before the end of
 * the data. Fails only on a read error or corrupt compressed data. */
static remat_status gz_read(gzFile gz, const char *path, void *buf, size_t want, size_t *got) {
    unsigned char *p = buf;
    *got = 0;
    while (*got < want) {
        size_t ask = want - *got;
        if (ask > GZ_CHUNK) ask = GZ_CHUNK;
        int r = gzread(gz, p + *got, (unsigned)ask);
        if (r < 0) return gz_fail(gz, path);
        if (r == 0) break;
        *got += (size_t)r;
    }
    return REMAT_OK;
}

/* Suffix for a "truncated" message: says so when the gzip stream itself is
 * cut short, rather than being a complete stream of too little data. */
static const char *gz_cut(gzFile gz) {
    int errnum = 0;
    gzerror(gz, &errnum);
    return errnum == Z_BUF_ERROR ? " (the gzip stream ends early)" : "";
}

static remat_status gz_open(gzFile *out, const char *path) {
    errno = 0;
    *out = gzopen(path, "rb");
    if (!*out) {
        if (errno == ENOENT) return remat__err(REMAT_NOT_FOUND, "%s: no such file", path);
        if (errno == 0) return remat__err(REMAT_NOMEM, "%s: out of memory opening it", path);
        return remat__err(REMAT_IO, "%s: cannot open: %s", path, strerror(errno));
    }
    gzbuffer(*out, 1u << 17);
    return REMAT_OK;
}

/* Reads the IDX header of `path`: the magic number and `ndim` dimensions.
 * `what` names the expected contents for messages ("images"). */
static remat_status idx_header(gzFile gz, const char *path, uint32_t magic, const char *what, int ndim,
                               uint32_t *dims) {
    unsigned char hdr[16];
    size_t want = 4 + 4 * (size_t)ndim, got;
    remat_status rc = gz_read(gz, path, hdr, want, &got);
    if (rc != REMAT_OK) return rc;
    if (got < 4)
        return remat__err(REMAT_FORMAT,
                          "%s: truncated: expected a %zu-byte IDX header, "
                          "got %zu bytes%s",
                          path, want, got, gz_cut(gz));
    uint32_t m = be32(hdr);
    if (m != magic) {
        const char *hint = "";
        if (m == IDX_LABELS_MAGIC) hint = "; it is an IDX labels file (images and labels swapped?)";
        if (m == IDX_IMAGES_MAGIC) hint = "; it is an IDX images file (images and labels swapped?)";
        return remat__err(REMAT_FORMAT,
                          "%s: bad magic number 0x%08x, expected 0x%08x "
                          "(IDX unsigned-byte %s, %d dimension%s)%s",
                          path, (unsigned)m, (unsigned)magic, what, ndim, ndim == 1 ? "" : "s", hint);
    }
    if (got < want)
        return remat__err(REMAT_FORMAT,
                          "%s: truncated: expected a %zu-byte IDX header, "
                          "got %zu bytes%s",
                          path, want, got, gz_cut(gz));
    for (int i = 0; i < ndim; i++) dims[i] = be32(hdr + 4 + 4 * i);
    return REMAT_OK;
}

/* Reads exactly `want` bytes of body into a new buffer (*out, owned by the
 * caller) and checks that nothing follows them. `what` names the bytes in
 * messages ("pixel bytes"). */
static remat_status idx_body(gzFile gz, const char *path, uint64_t want, const char *what, uint8_t **out) {
    *out = NULL;
    size_t cap = want < BODY_FIRST ? (size_t)want : BODY_FIRST, have = 0;
    uint8_t *buf = malloc(cap ? cap : 1);
    if (!buf) return remat__err(REMAT_NOMEM, "%s: out of memory for %zu bytes", path, cap);
    while (have < want) {
        if (have == cap) {
            size_t ncap = cap * 2 < want ? cap * 2 : (size_t)want;
            uint8_t *nb = realloc(buf, ncap);
            if (!nb) {
                free(buf);
                return remat__err(REMAT_NOMEM, "%s: out of memory for %zu bytes", path, ncap);
            }
            buf = nb, cap = ncap;
        }
        size_t got;
        remat_status rc = gz_read(gz, path, buf + have, cap - have, &got);
        if (rc != REMAT_OK) {
            free(buf);
            return rc;
        }
        have += got;
        if (have < cap) break; /* end of data */
    }
    if (have < want) {
        free(buf);
        return remat__err(REMAT_FORMAT, "%s: truncated: expected %llu %s, got %zu%s", path, (unsigned long long)want,
                          what, have, gz_cut(gz));
    }
    unsigned char extra;
    size_t got;
    remat_status rc = gz_read(gz, path, &extra, 1, &got);
    if (rc == REMAT_OK && got)
        rc = remat__err(REMAT_FORMAT,
                        "%s: unexpected data after the %llu %s that the "
                        "header announces",
                        path, (unsigned long long)want, what);
    if (rc != REMAT_OK) {
        free(buf);
        return rc;
    }
    *out = buf;
    return REMAT_OK;
}

/* The most pixel bytes an IDX images file may announce: 4 GiB, eighty
 * times MNIST's 47 MB (60000 28x28 images) and more than any IDX data set
 * published. A header is believed only that far: a file that announces
 * more is refused before any pixel is read. */
#define IDX_MAX_PIXELS ((uint64_t)4 << 30)

/* Opens an IDX images file and reads its header (n, rows, cols), checked:
 * non-empty and at most IDX_MAX_PIXELS pixel bytes. On success *gz is open
 * at the first pixel (the caller closes it). */
static remat_status idx_images_open(const char *path, gzFile *gz, uint32_t dims[3]) {
    remat_status rc = gz_open(gz, path);
    if (rc != REMAT_OK) return rc;
    rc = idx_header(*gz, path, IDX_IMAGES_MAGIC, "images", 3, dims);
    if (rc == REMAT_OK && (dims[0] == 0 || dims[1] == 0 || dims[2] == 0))
        rc = remat__err(REMAT_FORMAT,
                        "%s: empty: the header announces %u images of "
                        "%ux%u pixels",
                        path, (unsigned)dims[0], (unsigned)dims[1], (unsigned)dims[2]);
    /* < 2^96 as a double; as integers each factor is < 2^32 */
    double bytes = (double)dims[0] * (double)dims[1] * (double)dims[2];
    if (rc == REMAT_OK && bytes > (double)IDX_MAX_PIXELS)
        rc = remat__err(REMAT_FORMAT,
                        "%s: the header announces %u images of %ux%u "
                        "pixels, %.4g bytes: more than the %llu bytes "
                        "(4 GiB) an IDX images file may hold here",
                        path, (unsigned)dims[0], (unsigned)dims[1], (unsigned)dims[2], bytes,
                        (unsigned long long)IDX_MAX_PIXELS);
    if (rc != REMAT_OK) {
        gzclose(*gz);
        *gz = NULL;
    }
    return rc;
}

/* Opens an IDX labels file and reads its header (the label count, not 0);
 * on success *gz is open at the first label (the caller closes it). */
static remat_status idx_labels_open(const char *path, gzFile *gz, uint32_t *count) {
    remat_status rc = gz_open(gz, path);
    if (rc != REMAT_OK) return rc;
    rc = idx_header(*gz, path, IDX_LABELS_MAGIC, "labels", 1, count);
    if (rc == REMAT_OK && *count == 0)
        rc = remat__err(REMAT_FORMAT,
                        "%s: empty: the header announces 0 "
                        "labels",
                        path);
    if (rc != REMAT_OK) {
        gzclose(*gz);
        *gz = NULL;
    }
    return rc;
}

/* Reads the `count` labels of an opened labels file into *labels (owned
 * by the caller), checking each against `classes`. */
static remat_status idx_labels_read(gzFile gz, const char *path, uint32_t count, int classes, int32_t **labels) {
    uint8_t *raw = NULL;
    remat_status rc = idx_body(gz, path, count, "label bytes", &raw);
    if (rc != REMAT_OK) return rc;
    int32_t *out = malloc((size_t)count * sizeof *out);
    if (!out) {
        free(raw);
        return remat__err(REMAT_NOMEM, "%s: out of memory for %u labels", path, (unsigned)count);
    }
    for (uint32_t i = 0; i < count; i++) {
        if (raw[i] >= classes) {
            rc = remat__err(REMAT_FORMAT,
                            "%s: label %u of sample %u is out of range "
                            "(%d classes)",
                            path, (unsigned)raw[i], (unsigned)i, classes);
            free(raw);
            free(out);
            return rc;
        }
        out[i] = raw[i];
    }
    free(raw);
    *labels = out;
    return REMAT_OK;
}

/* Both headers are read and compared before any payload: a file that
 * announces more images than the other has labels (a gzip bomb of zeros
 * behind a plausible header, say) costs two headers, not its pixels. */
remat_status remat_dataset_load_idx(remat_dataset **out, const char *images_path, const char *labels_path) {
    if (!out) return remat__err(REMAT_INVALID, "remat_dataset_load_idx: out is NULL");
    *out = NULL;
    if (!images_path || !labels_path) return remat__err(REMAT_INVALID, "remat_dataset_load_idx: a path is NULL");
    remat_dataset *d = calloc(1, sizeof *d);
    if (!d) return remat__err(REMAT_NOMEM, "out of memory for a data set");
    gzFile gi = NULL, gl = NULL;
    uint32_t dims[3] = {0}, n_labels = 0;
    remat_status rc = idx_images_open(images_path, &gi, dims);
    if (rc == REMAT_OK) rc = idx_labels_open(labels_path, &gl, &n_labels);
    if (rc == REMAT_OK && n_labels != dims[0])
        rc = remat__err(REMAT_FORMAT, "%s has %lld images but %s has %lld labels", images_path, (long long)dims[0],
                        labels_path, (long long)n_labels);
    if (rc == REMAT_OK)
        rc = idx_body(gi, images_path, (uint64_t)dims[0] * dims[1] * dims[2], "pixel bytes", &d->pixels);
    if (rc == REMAT_OK) rc = idx_labels_read(gl, labels_path, n_labels, NUM_CLASSES, &d->labels);
    if (gi) gzclose(gi);
    if (gl) gzclose(gl);
    if (rc != REMAT_OK) {
        remat_dataset_destroy(d);
        return rc;
    }
    d->n = dims[0];
    d->h = dims[1];
    d->w = dims[2];
    d->c = 1;
    d->classes = NUM_CLASSES;
    set_norm1(d, 0.5f, 0.5f);
    *out = d;
    return REMAT_OK;
}

/* --------------------------------------------------------------- CIFAR-10 */

/* Opens a CIFAR batch and returns its record count; the file stays open in
 * *f (the caller closes it). */
static remat_status cifar_open(const char *path, FILE **f, int64_t *records) {
    *f = fopen(path, "rb");
    if (!*f) {
        if (errno == ENOENT) return remat__err(REMAT_NOT_FOUND, "%s: no such file", path);
        return remat__err(REMAT_IO, "%s: cannot open: %s", path, strerror(errno));
    }
    struct stat st;
    remat_status rc = REMAT_OK;
    if (fstat(fileno(*f), &st) != 0) rc = remat__err(REMAT_IO, "%s: cannot stat: %s", path, strerror(errno));
    else if (!S_ISREG(st.st_mode)) rc = remat__err(REMAT_IO, "%s: not a regular file", path);
    else if (st.st_size == 0 || st.st_size % CIFAR_RECORD != 0)
        rc = remat__err(REMAT_FORMAT,
                        "%s: size %lld bytes is not a positive multiple of "
                        "the %d-byte CIFAR-10 record (1 label byte + %d "
                        "pixel bytes)",
                        path, (long long)st.st_size, CIFAR_RECORD, CIFAR_PIXELS);
    if (rc != REMAT_OK) {
        fclose(*f);
        *f = NULL;
        return rc;
    }
    *records = (int64_t)(st.st_size / CIFAR_RECORD);
    return REMAT_OK;
}

/* Reads `records` records of an open batch into pixels and labels. */
static remat_status cifar_read(FILE *f, const char *path, int64_t records, uint8_t *pixels, int32_t *labels) {
    enum { CHUNK = 256 };
    unsigned char *buf = malloc((size_t)CHUNK * CIFAR_RECORD);
    if (!buf) return remat__err(REMAT_NOMEM, "out of memory reading %s", path);
    remat_status rc = REMAT_OK;
    for (int64_t first = 0; first < records && rc == REMAT_OK; first += CHUNK) {
        int64_t k = records - first < CHUNK ? records - first : CHUNK;
        size_t got = fread(buf, CIFAR_RECORD, (size_t)k, f);
        if (got < (size_t)k) {
            if (ferror(f)) rc = remat__err(REMAT_IO, "%s: read error: %s", path, strerror(errno));
            else
                rc = remat__err(REMAT_FORMAT,
                                "%s: truncated: expected %lld records, got "
                                "%lld",
                                path, (long long)records, (long long)(first + (int64_t)got));
            break;
        }
        for (int64_t r = 0; r < k; r++) {
            const unsigned char *rec = buf + r * CIFAR_RECORD;
            if (rec[0] >= NUM_CLASSES) {
                rc = remat__err(REMAT_FORMAT,
                                "%s: label %u of record %lld is out of range "
                                "(%d classes)",
                                path, (unsigned)rec[0], (long long)(first + r), NUM_CLASSES);
                break;
            }
            labels[first + r] = rec[0];
            memcpy(pixels + (first + r) * CIFAR_PIXELS, rec + 1, CIFAR_PIXELS);
        }
    }
    free(buf);
    return rc;
}

remat_status remat_dataset_load_cifar10(remat_dataset **out, const char *const *paths, int n) {
    if (!out) return remat__err(REMAT_INVALID, "remat_dataset_load_cifar10: out is NULL");
    *out = NULL;
    if (!paths || n <= 0) return remat__err(REMAT_INVALID, "remat_dataset_load_cifar10: no files given");
    for (int i = 0; i < n; i++)
        if (!paths[i]) return remat__err(REMAT_INVALID, "remat_dataset_load_cifar10: path %d is NULL", i);
    /* First pass: sizes, so that the pixels are one allocation. */
    int64_t total = 0;
    for (int i = 0; i < n; i++) {
        FILE *f;
        int64_t records;
        remat_status rc = cifar_open(paths[i], &f, &records);
        if (rc != REMAT_OK) return rc;
        fclose(f);
        total += records;
    }
    if ((uint64_t)total > SIZE_MAX / CIFAR_PIXELS)
        return remat__err(REMAT_NOMEM,
                          "%lld CIFAR-10 records do not fit in "
                          "memory",
                          (long long)total);
    remat_dataset *d = calloc(1, sizeof *d);
    if (d) {
        d->pixels = malloc((size_t)total * CIFAR_PIXELS);
        d->labels = malloc((size_t)total * sizeof *d->labels);
    }
    if (!d || !d->pixels || !d->labels) {
        remat_dataset_destroy(d);
        return remat__err(REMAT_NOMEM, "out of memory for %lld CIFAR-10 images", (long long)total);
    }
    int64_t at = 0;
    remat_status rc = REMAT_OK;
    for (int i = 0; i < n && rc == REMAT_OK; i++) {
        FILE *f = NULL;
        int64_t records = 0;
        rc = cifar_open(paths[i], &f, &records);
        if (rc == REMAT_OK && at + records > total)
            rc = remat__err(REMAT_IO, "%s: the file grew while being read", paths[i]);
        if (rc == REMAT_OK) rc = cifar_read(f, paths[i], records, d->pixels + at * CIFAR_PIXELS, d->labels + at);
        if (f) fclose(f);
        at += records;
    }
    if (rc == REMAT_OK && at != total) rc = remat__err(REMAT_IO, "%s: the files changed while being read", paths[0]);
    if (rc != REMAT_OK) {
        remat_dataset_destroy(d);
        return rc;
    }
    d->n = total;
    d->c = 3, d->h = 32, d->w = 32;
    d->classes = NUM_CLASSES;
    set_norm1(d, 0.5f, 0.5f);
    *out = d;
    return REMAT_OK;
}

/* ---------------------------------------------------------- named sets */

#define FASHION_DIR "/usr/share/datasets/fashion-mnist"
#define FASHION_HINT "apt-get install dataset-fashion-mnist"
#define KNOWN_SETS "fashion-mnist, mnist, cifar10"

/* Formats dir/name into buf; fails when it does not fit. */
static remat_status join(char *buf, size_t cap, const char *dir, const char *name) {
    size_t len = strlen(dir);
    const char *sep = len && dir[len - 1] == '/' ? "" : "/";
    int k = snprintf(buf, cap, "%s%s%s", dir, sep, name);
    if (k < 0 || (size_t)k >= cap) return remat__err(REMAT_INVALID, "path too long: %s%s%s", dir, sep, name);
    return REMAT_OK;
}

static int is_file(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && !S_ISDIR(st.st_mode);
}

/* Finds dir/base or else dir/base.gz, into buf. */
static remat_status find_idx(char *buf, size_t cap, const char *set, const char *dir, const char *base) {
    remat_status rc = join(buf, cap, dir, base);
    if (rc != REMAT_OK || is_file(buf)) return rc;
    char gz[80];
    snprintf(gz, sizeof gz, "%s.gz", base);
    rc = join(buf, cap, dir, gz);
    if (rc != REMAT_OK || is_file(buf)) return rc;
    return remat__err(REMAT_NOT_FOUND, "%s: %s: neither %s nor %s.gz is there", set, dir, base, base);
}

static remat_status load_idx_set(remat_dataset **out, const char *set, const char *dir, int train) {
    const char *split = train ? "train" : "t10k";
    char base[64], images[4096], labels[4096];
    snprintf(base, sizeof base, "%s-images-idx3-ubyte", split);
    remat_status rc = find_idx(images, sizeof images, set, dir, base);
    if (rc != REMAT_OK) return rc;
    snprintf(base, sizeof base, "%s-labels-idx1-ubyte", split);
    rc = find_idx(labels, sizeof labels, set, dir, base);
    if (rc != REMAT_OK) return rc;
    return remat_dataset_load_idx(out, images, labels);
}

static remat_status load_cifar_set(remat_dataset **out, const char *dir, int train) {
    /* The official archive unpacks into cifar-10-batches-bin/; accept the
     * directory that contains it as well. */
    char sub[4096], probe[4096];
    remat_status rc = join(probe, sizeof probe, dir, "test_batch.bin");
    if (rc != REMAT_OK) return rc;
    if (!is_file(probe)) {
        rc = join(sub, sizeof sub, dir, "cifar-10-batches-bin");
        if (rc != REMAT_OK) return rc;
        rc = join(probe, sizeof probe, sub, "test_batch.bin");
        if (rc != REMAT_OK) return rc;
        if (is_file(probe)) dir = sub;
    }
    char paths[5][4096];
    const char *ptrs[5];
    int n = train ? 5 : 1;
    for (int i = 0; i < n; i++) {
        char name[32];
        if (train) snprintf(name, sizeof name, "data_batch_%d.bin", i + 1);
        else snprintf(name, sizeof name, "test_batch.bin");
        rc = join(paths[i], sizeof paths[i], dir, name);
        if (rc != REMAT_OK) return rc;
        if (!is_file(paths[i]))
            return remat__err(REMAT_NOT_FOUND,
                              "cifar10: %s: no file %s (expected "
                              "data_batch_1.bin .. data_batch_5.bin and "
                              "test_batch.bin, the binary version of "
                              "CIFAR-10)",
                              dir, name);
        ptrs[i] = paths[i];
    }
    return remat_dataset_load_cifar10(out, ptrs, n);
}

remat_status remat_dataset_load(remat_dataset **out, const char *name, const char *dir, int train) {
    if (!out) return remat__err(REMAT_INVALID, "remat_dataset_load: out is NULL");
    *out = NULL;
    if (!name)
        return remat__err(REMAT_INVALID,
                          "remat_dataset_load: no data set name (known: "
                          "%s)",
                          KNOWN_SETS);
    int fashion = strcmp(name, "fashion-mnist") == 0;
    int mnist = strcmp(name, "mnist") == 0;
    int cifar = strcmp(name, "cifar10") == 0;
    if (!fashion && !mnist && !cifar)
        return remat__err(REMAT_INVALID, "unknown data set '%s' (known: %s)", name, KNOWN_SETS);
    if (!dir || !*dir) {
        if (!fashion)
            return remat__err(REMAT_INVALID,
                              "%s has no default directory: pass the "
                              "directory that holds its files (--data-dir DIR)",
                              name);
        dir = FASHION_DIR;
    }
    struct stat st;
    if (stat(dir, &st) != 0) {
        if (errno == ENOENT || errno == ENOTDIR)
            return remat__err(REMAT_NOT_FOUND, "%s: data set directory %s does not exist%s", name, dir,
                              fashion ? " (install it with: " FASHION_HINT ", or pass the directory that holds "
                                        "the IDX files)"
                                      : "");
        return remat__err(REMAT_IO, "%s: cannot access %s: %s", name, dir, strerror(errno));
    }
    if (!S_ISDIR(st.st_mode)) return remat__err(REMAT_INVALID, "%s: %s is not a directory", name, dir);
    remat_status rc = cifar ? load_cifar_set(out, dir, train) : load_idx_set(out, name, dir, train);
    if (rc != REMAT_OK) return rc;
    remat_dataset *d = *out;
    if (fashion) set_norm1(d, 0.2860f, 0.3530f);
    if (mnist) set_norm1(d, 0.1307f, 0.3081f);
    if (cifar) {
        static const float mean[3] = {0.4914f, 0.4822f, 0.4465f};
        static const float std[3] = {0.2470f, 0.2435f, 0.2616f};
        set_norm(d, mean, std);
    }
    return REMAT_OK;
}

/* ------------------------------------------------------------- accessors */

int64_t remat_dataset_size(const remat_dataset *d) { return d ? d->n : 0; }

void remat_dataset_shape(const remat_dataset *d, int64_t chw[3]) {
    if (!chw) return;
    chw[0] = d ? d->c : 0;
    chw[1] = d ? d->h : 0;
    chw[2] = d ? d->w : 0;
}

int remat_dataset_classes(const remat_dataset *d) { return d ? d->classes : 0; }

remat_status remat_dataset_truncate(remat_dataset *d, int64_t n) {
    if (!d) return remat__err(REMAT_INVALID, "remat_dataset_truncate: NULL");
    if (n < 1 || n > d->n)
        return remat__err(REMAT_INVALID,
                          "cannot keep %lld samples of a data set of %lld "
                          "(need 1 <= n <= size)",
                          (long long)n, (long long)d->n);
    size_t sample = (size_t)(d->c * d->h * d->w);
    /* Shrinking; a failed realloc keeps the larger block, which is fine. */
    uint8_t *p = realloc(d->pixels, (size_t)n * sample);
    if (p) d->pixels = p;
    int32_t *l = realloc(d->labels, (size_t)n * sizeof *l);
    if (l) d->labels = l;
    d->n = n;
    return REMAT_OK;
}

remat_status remat_dataset_get(const remat_dataset *d, const int64_t *index, int64_t n, float *x, int32_t *y) {
    if (!d) return remat__err(REMAT_INVALID, "remat_dataset_get: NULL");
    if (n < 0) return remat__err(REMAT_INVALID, "remat_dataset_get: negative count %lld", (long long)n);
    for (int64_t i = 0; i < n; i++) {
        int64_t k = index ? index[i] : i;
        if (k < 0 || k >= d->n)
            return remat__err(REMAT_INVALID,
                              "sample index %lld out of range (data set of "
                              "%lld samples)",
                              (long long)k, (long long)d->n);
    }
    int64_t plane = d->h * d->w, sample = d->c * plane;
    for (int64_t i = 0; i < n; i++) {
        int64_t k = index ? index[i] : i;
        if (y) y[i] = d->labels[k];
        if (!x) continue;
        const uint8_t *src = d->pixels + k * sample;
        float *dst = x + i * sample;
        for (int64_t ch = 0; ch < d->c; ch++) {
            const float *lut = d->lut[ch];
            for (int64_t j = 0; j < plane; j++) dst[ch * plane + j] = lut[src[ch * plane + j]];
        }
    }
    return REMAT_OK;
}
