/* safetensors_write.c: the safetensors writer (see safetensors.h and
 * safetensors.c's header comment). It emits the header by hand, so
 * integers are exact and the output is byte-for-byte deterministic, pads
 * it with spaces to a multiple of 8 bytes, fills the checksum entries of a
 * checksummed file, and writes through remat__write_atomic (core/file.c).
 */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif

#include "safetensors.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A growing string; `oom` sticks after a failed allocation. */
typedef struct {
    char *s;
    size_t len, cap;
    int oom;
} sbuf;

static void sb_reserve(sbuf *b, size_t more) {
    if (b->oom || b->len + more + 1 <= b->cap) return;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + more + 1) cap *= 2;
    char *s = realloc(b->s, cap);
    if (!s) {
        b->oom = 1;
        return;
    }
    b->s = s, b->cap = cap;
}

static void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (k < 0) {
        b->oom = 1;
        return;
    }
    sb_reserve(b, (size_t)k);
    if (b->oom) return;
    va_start(ap, fmt);
    vsnprintf(b->s + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
    b->len += (size_t)k;
}

/* Appends s as a JSON string literal. */
static void sb_json_str(sbuf *b, const char *s) {
    sb_printf(b, "\"");
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        if (*c == '"' || *c == '\\') sb_printf(b, "\\%c", *c);
        else if (*c < 0x20) sb_printf(b, "\\u%04x", *c);
        else sb_printf(b, "%c", *c);
    }
    sb_printf(b, "\"");
}

/* qsort has no context argument: the tensors being written. */
static _Thread_local const remat__st_tensor *write_ts;

static int by_write_name(const void *a, const void *b) {
    return strcmp(write_ts[*(const int *)a].name, write_ts[*(const int *)b].name);
}

/* Decreasing element size, then input order (a stable order). */
static int by_write_size(const void *a, const void *b) {
    int i = *(const int *)a, j = *(const int *)b;
    size_t si = remat__st_dtype_size(write_ts[i].dtype);
    size_t sj = remat__st_dtype_size(write_ts[j].dtype);
    if (si != sj) return si > sj ? -1 : 1;
    return (i > j) - (i < j);
}

/* Checks the tensors given to remat__st_write. */
static remat_status check_write(const char *path, int n, const remat__st_tensor *ts, const char *const *meta) {
    if (n < 0 || (n > 0 && !ts)) return remat__err(REMAT_INVALID, "%s: no tensors to write", path);
    for (int i = 0; i < n; i++) {
        const remat__st_tensor *t = &ts[i];
        const char *nm = t->name ? t->name : "(null)";
        if (!t->name || !*t->name || strcmp(t->name, "__metadata__") == 0)
            return remat__err(REMAT_INVALID, "%s: tensor %d has an invalid name '%s'", path, i, nm);
        size_t size = remat__st_dtype_size(t->dtype);
        if (!size)
            return remat__err(REMAT_INVALID, "%s: tensor '%s': unknown dtype '%s'", path, nm,
                              t->dtype ? t->dtype : "(null)");
        if (t->ndim < 0 || t->ndim > REMAT__ST_MAX_DIMS)
            return remat__err(REMAT_INVALID,
                              "%s: tensor '%s': %d dimensions (0 to %d "
                              "allowed)",
                              path, nm, t->ndim, REMAT__ST_MAX_DIMS);
        size_t need;
        char sb[160];
        if (!remat__st_tensor_bytes(t->ndim, t->dims, size, &need) || need != t->bytes ||
            (uint64_t)need > REMAT__ST_MAX_EXACT)
            return remat__err(REMAT_INVALID,
                              "%s: tensor '%s': dtype %s and shape %s do not "
                              "match its %zu bytes",
                              path, nm, t->dtype, remat__dims_str(t->ndim, t->dims, sb, sizeof sb), t->bytes);
        if (t->bytes && !t->data) return remat__err(REMAT_INVALID, "%s: tensor '%s': no data", path, nm);
    }
    for (int i = 0; meta && meta[i]; i += 2)
        if (!meta[i + 1]) return remat__err(REMAT_INVALID, "%s: metadata key '%s' has no value", path, meta[i]);
    return REMAT_OK;
}

/* What write_tensors writes: the 8-byte length, the header, the data. */
typedef struct {
    const sbuf *hdr;
    int n;
    const remat__st_tensor *ts;
    const int *order; /* data section order */
} file_parts;

static remat_status write_tensors(FILE *fp, void *ctx) {
    const file_parts *w = ctx;
    unsigned char le[8];
    uint64_t hlen = w->hdr->len;
    for (int i = 0; i < 8; i++) le[i] = (unsigned char)(hlen >> (8 * i));
    int ok = fwrite(le, 1, 8, fp) == 8 && fwrite(w->hdr->s, 1, w->hdr->len, fp) == w->hdr->len;
    for (int k = 0; k < w->n && ok; k++) {
        const remat__st_tensor *t = &w->ts[w->order[k]];
        ok = t->bytes == 0 || fwrite(t->data, 1, t->bytes, fp) == t->bytes;
    }
    return ok ? REMAT_OK : REMAT_IO; /* the caller reports errno */
}

/* The order of the data section (decreasing element size, then input
 * order) into order; REMAT_INVALID when a name is given twice. */
static remat_status data_order(const char *path, int n, const remat__st_tensor *ts, int *order) {
    remat_status rc = REMAT_OK;
    for (int i = 0; i < n; i++) order[i] = i;
    write_ts = ts;
    qsort(order, (size_t)n, sizeof *order, by_write_name);
    for (int i = 1; i < n && rc == REMAT_OK; i++)
        if (strcmp(ts[order[i - 1]].name, ts[order[i]].name) == 0)
            rc = remat__err(REMAT_INVALID, "%s: tensor '%s' given twice", path, ts[order[i]].name);
    for (int i = 0; i < n; i++) order[i] = i;
    qsort(order, (size_t)n, sizeof *order, by_write_size);
    write_ts = NULL;
    return rc;
}

/* Each tensor's offset in the data section (begin, in input order) and
 * the section's size (*bytes), at most REMAT__ST_MAX_EXACT. */
static remat_status place_data(const char *path, int n, const remat__st_tensor *ts, const int *order, uint64_t *begin,
                               uint64_t *bytes) {
    uint64_t at = 0;
    for (int k = 0; k < n; k++) {
        begin[order[k]] = at;
        at += ts[order[k]].bytes;
    }
    *bytes = at;
    if (at > REMAT__ST_MAX_EXACT)
        return remat__err(REMAT_INVALID,
                          "%s: %llu bytes of tensors is too "
                          "much for one file",
                          path, (unsigned long long)at);
    return REMAT_OK;
}

/* The header's __metadata__, as the Python library writes it; a
 * checksum's two fields lead it, with fixed widths, their positions in
 * *crc_at and *size_at (filled in by fill_checksum). */
static void header_metadata(sbuf *hdr, int n, const char *const *metadata, int checksum, size_t *crc_at,
                            size_t *size_at) {
    sb_printf(hdr, "\"__metadata__\":{");
    if (checksum) {
        sb_printf(hdr, "\"%s\":\"", REMAT__ST_CRC_KEY);
        *crc_at = hdr->len;
        sb_printf(hdr, "00000000\",\"%s\":\"", REMAT__ST_SIZE_KEY);
        *size_at = hdr->len;
        sb_printf(hdr, "00000000000000000000\"");
    }
    for (int i = 0; metadata && metadata[i]; i += 2) {
        if (i || checksum) sb_printf(hdr, ",");
        sb_json_str(hdr, metadata[i]);
        sb_printf(hdr, ":");
        sb_json_str(hdr, metadata[i + 1]);
    }
    sb_printf(hdr, "}%s", n ? "," : "");
}

/* The whole header: metadata first, then each tensor in input order,
 * padded with spaces so that the data section starts 8-byte aligned. */
static void header_text(sbuf *hdr, int n, const remat__st_tensor *ts, const uint64_t *begin,
                        const char *const *metadata, int checksum, size_t *crc_at, size_t *size_at) {
    sb_printf(hdr, "{");
    if (checksum || (metadata && metadata[0])) header_metadata(hdr, n, metadata, checksum, crc_at, size_at);
    for (int i = 0; i < n; i++) {
        const remat__st_tensor *t = &ts[i];
        if (i) sb_printf(hdr, ",");
        sb_json_str(hdr, t->name);
        sb_printf(hdr, ":{\"dtype\":\"%s\",\"shape\":[", t->dtype);
        for (int d = 0; d < t->ndim; d++) sb_printf(hdr, "%s%lld", d ? "," : "", (long long)t->dims[d]);
        sb_printf(hdr, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)begin[i],
                  (unsigned long long)(begin[i] + t->bytes));
    }
    sb_printf(hdr, "}");
    while (!hdr->oom && (8 + hdr->len) % 8 != 0) sb_printf(hdr, " ");
}

/* Writes the file's size (the header's, plus data_bytes of data) and its
 * CRC-32 (taken with the CRC's digits still '0') into the header's fields. */
static void fill_checksum(sbuf *hdr, int n, const remat__st_tensor *ts, const int *order, uint64_t data_bytes,
                          size_t crc_at, size_t size_at) {
    char digits[32];
    unsigned char le[8];
    snprintf(digits, sizeof digits, "%020llu", (unsigned long long)(8 + hdr->len + data_bytes));
    memcpy(hdr->s + size_at, digits, 20);
    for (int i = 0; i < 8; i++) le[i] = (unsigned char)((uint64_t)hdr->len >> (8 * i));
    uint32_t crc = remat__st_crc(0, le, 8);
    crc = remat__st_crc(crc, hdr->s, hdr->len); /* the digits are '0' here */
    for (int k = 0; k < n; k++) crc = remat__st_crc(crc, ts[order[k]].data, ts[order[k]].bytes);
    snprintf(digits, sizeof digits, "%08x", (unsigned)crc);
    memcpy(hdr->s + crc_at, digits, 8);
}

remat_status remat__st_write_ex(const char *path, int n, const remat__st_tensor *ts, const char *const *metadata,
                                int checksum) {
    remat_status usable = remat__st_usable_path(path);
    if (usable != REMAT_OK) return usable;
    remat_status rc = check_write(path, n, ts, metadata);
    if (rc != REMAT_OK) return rc;
    int *order = malloc((size_t)(n ? n : 1) * sizeof *order);
    uint64_t *begin = malloc((size_t)(n ? n : 1) * sizeof *begin);
    sbuf hdr = {0};
    uint64_t data_bytes = 0;
    size_t crc_at = 0, size_at = 0;
    if (!order || !begin) rc = remat__err(REMAT_NOMEM, "%s: out of memory", path);
    if (rc == REMAT_OK) rc = data_order(path, n, ts, order);
    if (rc == REMAT_OK) rc = place_data(path, n, ts, order, begin, &data_bytes);
    if (rc == REMAT_OK) {
        header_text(&hdr, n, ts, begin, metadata, checksum, &crc_at, &size_at);
        if (hdr.oom) rc = remat__err(REMAT_NOMEM, "%s: out of memory for the header", path);
    }
    if (rc == REMAT_OK && checksum) fill_checksum(&hdr, n, ts, order, data_bytes, crc_at, size_at);
    if (rc == REMAT_OK) {
        file_parts parts = {&hdr, n, ts, order};
        rc = remat__write_atomic(path, write_tensors, &parts);
    }
    free(order);
    free(begin);
    free(hdr.s);
    return rc;
}

remat_status remat__st_write(const char *path, int n, const remat__st_tensor *ts, const char *const *metadata) {
    return remat__st_write_ex(path, n, ts, metadata, 0);
}
