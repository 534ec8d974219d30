/* tokens.c: flat token files and language-model batches.
 *
 * A token file is nothing but little-endian uint16 ids, the format of
 * nanoGPT's and llm.c's data preparation (numpy's astype("<u2").tofile).
 * The file is mapped read-only, so a corpus of gigabytes costs no copy, and
 * ids are assembled from their two bytes, so neither the host's byte order
 * nor the mapping's alignment matters.
 *
 * A batch is `batch` random windows of context + 1 tokens: the model reads
 * the first context and predicts the next context. Window starts are
 * uniform on [0, count - context - 1], drawn with Philox4x32-10, key
 * (seed mod 2^32, seed >> 32), counter (row, step mod 2^32, step >> 32,
 * 0x746f6b00 + t) for t = 0, 1, ...: each draw pairs the words (out[0],
 * out[1]) then (out[2], out[3]) into w = hi << 32 | lo and takes the first
 * w >= 2^64 mod n as start = w mod n (n = count - context), so every start
 * is exactly equally likely and a batch depends on (seed, step) alone.
 */
#include "../remat-impl.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define TOKENS_TAG 0x746f6b00u /* "tok\0" */

struct remat_tokens {
    char *path;                 /* owned copy, for messages */
    const unsigned char *bytes; /* the mapping, 2 * n bytes */
    size_t map_bytes;
    int64_t n; /* tokens */
};

void remat_tokens_destroy(remat_tokens *t) {
    if (!t) return;
    if (t->bytes) munmap((void *)t->bytes, t->map_bytes);
    free(t->path);
    free(t);
}

remat_status remat_tokens_open(remat_tokens **out, const char *path) {
    if (!out) return remat__err(REMAT_INVALID, "remat_tokens_open: out is NULL");
    *out = NULL;
    if (!path) return remat__err(REMAT_INVALID, "remat_tokens_open: no path given");
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return errno == ENOENT ? remat__err(REMAT_NOT_FOUND, "%s: no such token file", path)
                               : remat__err(REMAT_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    remat_status rc = REMAT_OK;
    if (fstat(fd, &st) != 0) rc = remat__err(REMAT_IO, "%s: cannot stat: %s", path, strerror(errno));
    else if (!S_ISREG(st.st_mode)) rc = remat__err(REMAT_IO, "%s: not a regular file", path);
    else if (st.st_size == 0)
        rc = remat__err(REMAT_FORMAT, "%s: empty token file (expected little-endian uint16 token ids)", path);
    else if (st.st_size % 2 != 0)
        rc = remat__err(REMAT_FORMAT,
                        "%s: %lld bytes, an odd count: a token file holds 2-byte (uint16) ids, so it "
                        "cannot end with half a token",
                        path, (long long)st.st_size);
    else if ((uint64_t)st.st_size > SIZE_MAX) rc = remat__err(REMAT_UNSUPPORTED, "%s: too large to map", path);
    remat_tokens *t = NULL;
    if (rc == REMAT_OK) {
        t = calloc(1, sizeof *t);
        if (t) t->path = malloc(strlen(path) + 1);
        if (!t || !t->path) rc = remat__err(REMAT_NOMEM, "%s: out of memory", path);
    }
    if (rc == REMAT_OK) {
        strcpy(t->path, path);
        t->map_bytes = (size_t)st.st_size;
        t->n = (int64_t)(st.st_size / 2);
        void *p = mmap(NULL, t->map_bytes, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED)
            rc = remat__err(REMAT_IO, "%s: cannot map %zu bytes: %s", path, t->map_bytes, strerror(errno));
        else t->bytes = p;
    }
    close(fd);
    if (rc != REMAT_OK) {
        remat_tokens_destroy(t);
        return rc;
    }
    *out = t;
    return REMAT_OK;
}

int64_t remat_tokens_count(const remat_tokens *t) { return t ? t->n : 0; }

static inline uint16_t token_at(const remat_tokens *t, int64_t i) {
    return (uint16_t)(t->bytes[2 * i] | (unsigned)t->bytes[2 * i + 1] << 8);
}

uint16_t remat_tokens_get(const remat_tokens *t, int64_t i) { return t && i >= 0 && i < t->n ? token_at(t, i) : 0; }

remat_status remat_tokens_check(const remat_tokens *t, int64_t vocab) {
    if (!t) return remat__err(REMAT_INVALID, "remat_tokens_check: no token file");
    if (vocab < 1)
        return remat__err(REMAT_INVALID, "%s: vocabulary size %lld must be positive", t->path, (long long)vocab);
    if (vocab > 65535) return REMAT_OK; /* every uint16 id fits */
    for (int64_t i = 0; i < t->n; i++) {
        uint16_t id = token_at(t, i);
        if (id >= vocab)
            return remat__err(REMAT_INVALID,
                              "%s: token %u at position %lld (byte offset %lld) is out of range for the "
                              "model's vocabulary of %lld",
                              t->path, (unsigned)id, (long long)i, (long long)(2 * i), (long long)vocab);
    }
    return REMAT_OK;
}

/* A uniform integer in [0, n) for (row, step), n >= 1. */
static uint64_t draw_start(const uint32_t key[2], uint32_t row, uint64_t step, uint64_t n) {
    uint64_t threshold = (0 - n) % n; /* 2^64 mod n */
    for (uint32_t t = 0;; t++) {
        uint32_t ctr[4] = {row, (uint32_t)step, (uint32_t)(step >> 32), TOKENS_TAG + t}, out[4];
        remat__philox(ctr, key, out);
        for (int k = 0; k < 4; k += 2) {
            uint64_t w = (uint64_t)out[k + 1] << 32 | out[k];
            if (w >= threshold) return w % n;
        }
    }
}

remat_status remat_tokens_batch(const remat_tokens *t, int64_t batch, int64_t context, uint64_t seed, int64_t step,
                                int32_t *input, int32_t *labels) {
    if (!t || !input || !labels) return remat__err(REMAT_INVALID, "remat_tokens_batch: NULL token file or buffer");
    if (batch < 1 || context < 1 || (uint64_t)batch > UINT32_MAX || step < 0)
        return remat__err(REMAT_INVALID, "%s: batch %lld, context %lld and step %lld must be positive", t->path,
                          (long long)batch, (long long)context, (long long)step);
    if (t->n < context + 1)
        return remat__err(REMAT_INVALID, "%s: %lld tokens, fewer than one window of context + 1 = %lld tokens", t->path,
                          (long long)t->n, (long long)(context + 1));
    uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    uint64_t starts = (uint64_t)(t->n - context);
    for (int64_t b = 0; b < batch; b++) {
        int64_t at = (int64_t)draw_start(key, (uint32_t)b, (uint64_t)step, starts);
        int32_t *x = input + b * context, *y = labels + b * context; /* (context) each */
        for (int64_t i = 0; i < context; i++) {
            x[i] = token_at(t, at + i);
            y[i] = token_at(t, at + i + 1);
        }
    }
    return REMAT_OK;
}
