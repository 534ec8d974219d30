/* safetensors.c: the safetensors reader and writer (see safetensors.h).
 *
 * The reader loads the whole file, parses the header with cJSON and checks
 * everything before handing out a tensor: the header length against the
 * file, the JSON itself, every entry's dtype, shape and data_offsets, the
 * byte count of dtype x shape against the offsets, duplicate names, and
 * that the tensors tile the data section with neither overlap nor gap (as
 * the reference implementation requires). The writer emits the header by
 * hand, so integers are exact and the output is byte-for-byte
 * deterministic, pads it with spaces to a multiple of 8 bytes, and writes
 * through a temporary file renamed into place.
 */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif

#include "safetensors.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

/* The reference implementation refuses headers above 100 MB as well. */
#define MAX_HEADER ((uint64_t)100000000)
/* Largest integer a JSON number (a double in cJSON) holds exactly. */
#define MAX_EXACT ((uint64_t)1 << 53)

static const struct {
    const char *name;
    size_t size;
} dtypes[] = {
    {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1},
    {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},
    {"U32", 4},  {"F32", 4}, {"F64", 8}, {"I64", 8},     {"U64", 8},
};
#define N_DTYPES ((int)(sizeof dtypes / sizeof dtypes[0]))

static int dtype_index(const char *name) {
    if (!name) return -1;
    for (int i = 0; i < N_DTYPES; i++)
        if (strcmp(dtypes[i].name, name) == 0) return i;
    return -1;
}

size_t remat__st_dtype_size(const char *dtype) {
    int i = dtype_index(dtype);
    return i < 0 ? 0 : dtypes[i].size;
}

static int host_little_endian(void) {
    const uint16_t one = 1;
    unsigned char b;
    memcpy(&b, &one, 1);
    return b == 1;
}

/* numel(dims) * size into *bytes; 0 on overflow of size_t. */
static int tensor_bytes(int ndim, const int64_t *dims, size_t size,
                        size_t *bytes) {
    size_t b = size;
    for (int i = 0; i < ndim; i++) {
        if (dims[i] < 0) return 0;
        if (dims[i] && b > SIZE_MAX / (uint64_t)dims[i]) return 0;
        b *= (size_t)dims[i];
    }
    *bytes = b;
    return 1;
}

/* Formats a shape as "(2, 3)" ("()" for a scalar). */
static const char *shape_str(int ndim, const int64_t *dims, char *buf,
                             size_t cap) {
    size_t at = 0;
    at += (size_t)snprintf(buf, cap, "(");
    for (int i = 0; i < ndim && at < cap; i++)
        at += (size_t)snprintf(buf + at, cap - at, "%s%lld", i ? ", " : "",
                               (long long)dims[i]);
    if (at < cap) snprintf(buf + at, cap - at, ")");
    return buf;
}

/* ---------------------------------------------------------------- reader */

typedef struct {
    const char *name; /* points into the cJSON tree */
    int dtype;        /* index into dtypes */
    int ndim;
    int64_t dims[REMAT__ST_MAX_DIMS];
    uint64_t begin, end; /* within the data section */
} entry;

struct remat__st {
    char *path;           /* owned copy, for messages */
    cJSON *json;          /* owned; names and metadata point into it */
    const cJSON *meta;    /* borrowed from json; NULL if absent */
    unsigned char *data;  /* owned; the data section */
    uint64_t data_bytes;
    int n;
    entry *t;             /* owned; n entries in header order */
    int *by_name;         /* owned; indices of t sorted by name */
};

void remat__st_close(remat__st *f) {
    if (!f) return;
    free(f->path);
    cJSON_Delete(f->json);
    free(f->data);
    free(f->t);
    free(f->by_name);
    free(f);
}

const char *remat__st_path(const remat__st *f) { return f ? f->path : ""; }

int remat__st_count(const remat__st *f) { return f ? f->n : 0; }

/* A JSON number that is an integer in [0, 2^53]. */
static int json_uint(const cJSON *v, uint64_t *out) {
    if (!cJSON_IsNumber(v)) return 0;
    double d = v->valuedouble;
    if (!(d >= 0.0) || d > (double)MAX_EXACT) return 0;
    uint64_t u = (uint64_t)d;
    if ((double)u != d) return 0;
    *out = u;
    return 1;
}

/* Checks one header entry and fills *e. */
static remat_status parse_entry(const remat__st *f, const cJSON *item,
                                entry *e) {
    const char *p = f->path, *nm = item->string;
    e->name = nm;
    if (!cJSON_IsObject(item))
        return remat__err(REMAT_FORMAT,
                          "%s: tensor '%s': header entry is not an object",
                          p, nm);
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(item, "dtype");
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(item, "shape");
    const cJSON *off = cJSON_GetObjectItemCaseSensitive(item, "data_offsets");
    if (!dt || !sh || !off)
        return remat__err(REMAT_FORMAT, "%s: tensor '%s': missing \"%s\"", p,
                          nm, !dt ? "dtype" : !sh ? "shape" : "data_offsets");
    if (!cJSON_IsString(dt))
        return remat__err(REMAT_FORMAT,
                          "%s: tensor '%s': dtype is not a string", p, nm);
    e->dtype = dtype_index(dt->valuestring);
    if (e->dtype < 0)
        return remat__err(REMAT_FORMAT, "%s: tensor '%s': unknown dtype '%s'",
                          p, nm, dt->valuestring);
    if (!cJSON_IsArray(sh))
        return remat__err(REMAT_FORMAT,
                          "%s: tensor '%s': shape is not an array", p, nm);
    int nd = cJSON_GetArraySize(sh);
    if (nd > REMAT__ST_MAX_DIMS)
        return remat__err(REMAT_UNSUPPORTED,
                          "%s: tensor '%s': %d dimensions, at most %d are "
                          "supported",
                          p, nm, nd, REMAT__ST_MAX_DIMS);
    e->ndim = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, sh) {
        uint64_t d;
        if (!json_uint(v, &d))
            return remat__err(REMAT_FORMAT,
                              "%s: tensor '%s': shape entry %d is not a "
                              "non-negative integer",
                              p, nm, e->ndim);
        e->dims[e->ndim++] = (int64_t)d;
    }
    if (!cJSON_IsArray(off) || cJSON_GetArraySize(off) != 2 ||
        !json_uint(off->child, &e->begin) ||
        !json_uint(off->child->next, &e->end))
        return remat__err(REMAT_FORMAT,
                          "%s: tensor '%s': data_offsets must be two "
                          "non-negative integers [begin, end]",
                          p, nm);
    if (e->begin > e->end || e->end > f->data_bytes)
        return remat__err(REMAT_FORMAT,
                          "%s: tensor '%s': data_offsets [%llu, %llu] out of "
                          "range: the data section has %llu bytes",
                          p, nm, (unsigned long long)e->begin,
                          (unsigned long long)e->end,
                          (unsigned long long)f->data_bytes);
    size_t need;
    char sb[160];
    shape_str(e->ndim, e->dims, sb, sizeof sb);
    if (!tensor_bytes(e->ndim, e->dims, dtypes[e->dtype].size, &need))
        return remat__err(REMAT_FORMAT,
                          "%s: tensor '%s': shape %s is too large", p, nm,
                          sb);
    if (need != e->end - e->begin)
        return remat__err(REMAT_FORMAT,
                          "%s: tensor '%s': dtype %s and shape %s need %zu "
                          "bytes but data_offsets [%llu, %llu] hold %llu",
                          p, nm, dtypes[e->dtype].name, sb, need,
                          (unsigned long long)e->begin,
                          (unsigned long long)e->end,
                          (unsigned long long)(e->end - e->begin));
    return REMAT_OK;
}

/* qsort has no context argument: the entries being sorted. */
static _Thread_local const entry *sort_entries;

static int by_name_cmp(const void *a, const void *b) {
    return strcmp(sort_entries[*(const int *)a].name,
                  sort_entries[*(const int *)b].name);
}

static int by_offset_cmp(const void *a, const void *b) {
    const entry *x = &sort_entries[*(const int *)a];
    const entry *y = &sort_entries[*(const int *)b];
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return 0;
}

/* Parses and checks the header text (hdr, len bytes, NUL-terminated). */
static remat_status parse_header(remat__st *f, const char *hdr, size_t len) {
    const char *p = f->path, *end = NULL;
    f->json = cJSON_ParseWithLengthOpts(hdr, len, &end, 0);
    if (!f->json)
        return remat__err(REMAT_FORMAT,
                          "%s: the header is not valid JSON (error at byte "
                          "%lld of %zu)",
                          p, end ? (long long)(end - hdr) : -1LL, len);
    for (const char *c = end; c && c < hdr + len; c++)
        if (*c != ' ' && *c != '\t' && *c != '\n' && *c != '\r' && *c)
            return remat__err(REMAT_FORMAT,
                              "%s: unexpected text after the JSON header "
                              "(at byte %lld of %zu)",
                              p, (long long)(c - hdr), len);
    if (!cJSON_IsObject(f->json))
        return remat__err(REMAT_FORMAT, "%s: the header is not a JSON object",
                          p);
    int count = 0;
    const cJSON *item;
    cJSON_ArrayForEach(item, f->json) {
        if (strcmp(item->string, "__metadata__") == 0) {
            if (f->meta)
                return remat__err(REMAT_FORMAT,
                                  "%s: __metadata__ appears twice", p);
            if (!cJSON_IsObject(item))
                return remat__err(REMAT_FORMAT,
                                  "%s: __metadata__ is not an object", p);
            const cJSON *kv;
            cJSON_ArrayForEach(kv, item) {
                if (!cJSON_IsString(kv))
                    return remat__err(REMAT_FORMAT,
                                      "%s: __metadata__ entry '%s' is not a "
                                      "string",
                                      p, kv->string);
            }
            f->meta = item;
        } else {
            count++;
        }
    }
    f->t = calloc((size_t)(count ? count : 1), sizeof *f->t);
    f->by_name = malloc((size_t)(count ? count : 1) * sizeof *f->by_name);
    int *order = malloc((size_t)(count ? count : 1) * sizeof *order);
    if (!f->t || !f->by_name || !order) {
        free(order);
        return remat__err(REMAT_NOMEM, "%s: out of memory for %d tensors", p,
                          count);
    }
    remat_status rc = REMAT_OK;
    cJSON_ArrayForEach(item, f->json) {
        if (strcmp(item->string, "__metadata__") == 0) continue;
        rc = parse_entry(f, item, &f->t[f->n]);
        if (rc != REMAT_OK) break;
        f->by_name[f->n] = f->n;
        order[f->n] = f->n;
        f->n++;
    }
    if (rc == REMAT_OK) {
        sort_entries = f->t;
        qsort(f->by_name, (size_t)f->n, sizeof *f->by_name, by_name_cmp);
        qsort(order, (size_t)f->n, sizeof *order, by_offset_cmp);
        sort_entries = NULL;
    }
    for (int i = 1; i < f->n && rc == REMAT_OK; i++)
        if (strcmp(f->t[f->by_name[i - 1]].name, f->t[f->by_name[i]].name) ==
            0)
            rc = remat__err(REMAT_FORMAT, "%s: tensor '%s' appears twice", p,
                            f->t[f->by_name[i]].name);
    /* The tensors must tile [0, data_bytes): each begins where the one
     * before it (in offset order) ends. */
    uint64_t cursor = 0;
    int last = -1; /* the tensor that ends at cursor */
    for (int i = 0; i < f->n && rc == REMAT_OK; i++) {
        const entry *e = &f->t[order[i]];
        if (e->begin < cursor)
            rc = remat__err(REMAT_FORMAT,
                            "%s: tensors '%s' [%llu, %llu] and '%s' [%llu, "
                            "%llu] overlap",
                            p, f->t[last].name,
                            (unsigned long long)f->t[last].begin,
                            (unsigned long long)f->t[last].end, e->name,
                            (unsigned long long)e->begin,
                            (unsigned long long)e->end);
        else if (e->begin > cursor)
            rc = remat__err(REMAT_FORMAT,
                            "%s: no tensor covers bytes [%llu, %llu) of the "
                            "data section (before tensor '%s')",
                            p, (unsigned long long)cursor,
                            (unsigned long long)e->begin, e->name);
        cursor = e->end;
        last = order[i];
    }
    if (rc == REMAT_OK && cursor != f->data_bytes)
        rc = remat__err(REMAT_FORMAT,
                        "%s: no tensor covers bytes [%llu, %llu) at the end "
                        "of the data section",
                        p, (unsigned long long)cursor,
                        (unsigned long long)f->data_bytes);
    free(order);
    return rc;
}

/* Reads exactly n bytes, or reports the file as truncated. */
static remat_status read_exact(FILE *fp, const char *path, void *buf,
                               size_t n, const char *what) {
    size_t got = fread(buf, 1, n, fp);
    if (got == n) return REMAT_OK;
    if (ferror(fp))
        return remat__err(REMAT_IO, "%s: read error: %s", path,
                          strerror(errno));
    return remat__err(REMAT_FORMAT, "%s: truncated: expected %zu bytes of %s, "
                                    "got %zu",
                      path, n, what, got);
}

/* Reads the file into f (already holding the path). */
static remat_status load(remat__st *f, FILE *fp) {
    const char *p = f->path;
    struct stat st;
    if (fstat(fileno(fp), &st) != 0)
        return remat__err(REMAT_IO, "%s: cannot stat: %s", p,
                          strerror(errno));
    if (!S_ISREG(st.st_mode))
        return remat__err(REMAT_IO, "%s: not a regular file", p);
    uint64_t size = (uint64_t)st.st_size;
    if (size < 8)
        return remat__err(REMAT_FORMAT,
                          "%s: %llu bytes, too short for a safetensors file "
                          "(at least an 8-byte header length)",
                          p, (unsigned long long)size);
    unsigned char le[8];
    remat_status rc = read_exact(fp, p, le, 8, "header length");
    if (rc != REMAT_OK) return rc;
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | le[i];
    if (hlen > size - 8)
        return remat__err(REMAT_FORMAT,
                          "%s: header length %llu exceeds the %llu bytes "
                          "that follow it (not a safetensors file?)",
                          p, (unsigned long long)hlen,
                          (unsigned long long)(size - 8));
    if (hlen < 2 || hlen > MAX_HEADER)
        return remat__err(REMAT_FORMAT,
                          "%s: header length %llu is implausible (2 to %llu "
                          "bytes expected)",
                          p, (unsigned long long)hlen,
                          (unsigned long long)MAX_HEADER);
    char *hdr = malloc((size_t)hlen + 1);
    if (!hdr)
        return remat__err(REMAT_NOMEM, "%s: out of memory for the header", p);
    rc = read_exact(fp, p, hdr, (size_t)hlen, "header");
    hdr[hlen] = 0;
    f->data_bytes = size - 8 - hlen;
    if (rc == REMAT_OK && f->data_bytes > SIZE_MAX)
        rc = remat__err(REMAT_NOMEM, "%s: too large to load", p);
    if (rc == REMAT_OK) rc = parse_header(f, hdr, (size_t)hlen);
    free(hdr);
    if (rc != REMAT_OK) return rc;
    f->data = malloc(f->data_bytes ? (size_t)f->data_bytes : 1);
    if (!f->data)
        return remat__err(REMAT_NOMEM,
                          "%s: out of memory for %llu bytes of tensor data",
                          p, (unsigned long long)f->data_bytes);
    return read_exact(fp, p, f->data, (size_t)f->data_bytes, "tensor data");
}

remat_status remat__st_open(remat__st **out, const char *path) {
    if (!out) return remat__err(REMAT_INVALID, "remat__st_open: out is NULL");
    *out = NULL;
    if (!path)
        return remat__err(REMAT_INVALID, "safetensors: no path given");
    if (!host_little_endian())
        return remat__err(REMAT_UNSUPPORTED,
                          "%s: safetensors data is little-endian; this host "
                          "is not",
                          path);
    remat__st *f = calloc(1, sizeof *f);
    if (f) f->path = malloc(strlen(path) + 1);
    if (!f || !f->path) {
        free(f);
        return remat__err(REMAT_NOMEM, "%s: out of memory", path);
    }
    strcpy(f->path, path);
    FILE *fp = fopen(path, "rb");
    if (!fp) {
        remat_status rc =
            errno == ENOENT
                ? remat__err(REMAT_NOT_FOUND, "%s: no such file", path)
                : remat__err(REMAT_IO, "%s: cannot open: %s", path,
                             strerror(errno));
        remat__st_close(f);
        return rc;
    }
    remat_status rc = load(f, fp);
    fclose(fp);
    if (rc != REMAT_OK) {
        remat__st_close(f);
        return rc;
    }
    *out = f;
    return REMAT_OK;
}

remat_status remat__st_get(const remat__st *f, int i, remat__st_tensor *t) {
    if (!f || !t)
        return remat__err(REMAT_INVALID, "remat__st_get: NULL argument");
    if (i < 0 || i >= f->n)
        return remat__err(REMAT_INVALID,
                          "%s: tensor index %d out of range (%d tensors)",
                          f->path, i, f->n);
    const entry *e = &f->t[i];
    memset(t, 0, sizeof *t);
    t->name = e->name;
    t->dtype = dtypes[e->dtype].name;
    t->ndim = e->ndim;
    memcpy(t->dims, e->dims, sizeof e->dims);
    t->data = f->data + e->begin;
    t->bytes = (size_t)(e->end - e->begin);
    return REMAT_OK;
}

int remat__st_find(const remat__st *f, const char *name) {
    if (!f || !name) return -1;
    int lo = 0, hi = f->n; /* binary search over by_name */
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        int c = strcmp(f->t[f->by_name[mid]].name, name);
        if (c == 0) return f->by_name[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return -1;
}

const char *remat__st_metadata(const remat__st *f, const char *key) {
    if (!f || !f->meta || !key) return NULL;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(f->meta, key);
    return v ? v->valuestring : NULL;
}

/* ---------------------------------------------------------------- writer */

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

static void sb_printf(sbuf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
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
        if (*c == '"' || *c == '\\')
            sb_printf(b, "\\%c", *c);
        else if (*c < 0x20)
            sb_printf(b, "\\u%04x", *c);
        else
            sb_printf(b, "%c", *c);
    }
    sb_printf(b, "\"");
}

/* qsort has no context argument: the tensors being written. */
static _Thread_local const remat__st_tensor *write_ts;

static int by_write_name(const void *a, const void *b) {
    return strcmp(write_ts[*(const int *)a].name,
                  write_ts[*(const int *)b].name);
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
static remat_status check_write(const char *path, int n,
                                const remat__st_tensor *ts,
                                const char *const *meta) {
    if (n < 0 || (n > 0 && !ts))
        return remat__err(REMAT_INVALID, "%s: no tensors to write", path);
    for (int i = 0; i < n; i++) {
        const remat__st_tensor *t = &ts[i];
        const char *nm = t->name ? t->name : "(null)";
        if (!t->name || !*t->name || strcmp(t->name, "__metadata__") == 0)
            return remat__err(REMAT_INVALID,
                              "%s: tensor %d has an invalid name '%s'", path,
                              i, nm);
        size_t size = remat__st_dtype_size(t->dtype);
        if (!size)
            return remat__err(REMAT_INVALID,
                              "%s: tensor '%s': unknown dtype '%s'", path, nm,
                              t->dtype ? t->dtype : "(null)");
        if (t->ndim < 0 || t->ndim > REMAT__ST_MAX_DIMS)
            return remat__err(REMAT_INVALID,
                              "%s: tensor '%s': %d dimensions (0 to %d "
                              "allowed)",
                              path, nm, t->ndim, REMAT__ST_MAX_DIMS);
        size_t need;
        char sb[160];
        if (!tensor_bytes(t->ndim, t->dims, size, &need) ||
            need != t->bytes || (uint64_t)need > MAX_EXACT)
            return remat__err(REMAT_INVALID,
                              "%s: tensor '%s': dtype %s and shape %s do not "
                              "match its %zu bytes",
                              path, nm, t->dtype,
                              shape_str(t->ndim, t->dims, sb, sizeof sb),
                              t->bytes);
        if (t->bytes && !t->data)
            return remat__err(REMAT_INVALID, "%s: tensor '%s': no data",
                              path, nm);
    }
    for (int i = 0; meta && meta[i]; i += 2)
        if (!meta[i + 1])
            return remat__err(REMAT_INVALID,
                              "%s: metadata key '%s' has no value", path,
                              meta[i]);
    return REMAT_OK;
}

/* Writes header and data to an open file. */
static remat_status write_file(FILE *fp, const char *tmp, const sbuf *hdr,
                               int n, const remat__st_tensor *ts,
                               const int *order) {
    unsigned char le[8];
    uint64_t hlen = hdr->len;
    for (int i = 0; i < 8; i++) le[i] = (unsigned char)(hlen >> (8 * i));
    int ok = fwrite(le, 1, 8, fp) == 8 &&
             fwrite(hdr->s, 1, hdr->len, fp) == hdr->len;
    for (int k = 0; k < n && ok; k++) {
        const remat__st_tensor *t = &ts[order[k]];
        ok = t->bytes == 0 || fwrite(t->data, 1, t->bytes, fp) == t->bytes;
    }
    if (ok) ok = fflush(fp) == 0;
    if (!ok)
        return remat__err(REMAT_IO, "%s: write error: %s", tmp,
                          strerror(errno));
    return REMAT_OK;
}

remat_status remat__st_write(const char *path, int n,
                             const remat__st_tensor *ts,
                             const char *const *metadata) {
    if (!path)
        return remat__err(REMAT_INVALID, "safetensors: no path given");
    if (!host_little_endian())
        return remat__err(REMAT_UNSUPPORTED,
                          "%s: safetensors data is little-endian; this host "
                          "is not",
                          path);
    remat_status rc = check_write(path, n, ts, metadata);
    if (rc != REMAT_OK) return rc;
    int *order = malloc((size_t)(n ? n : 1) * sizeof *order);
    uint64_t *begin = malloc((size_t)(n ? n : 1) * sizeof *begin);
    sbuf hdr = {0};
    char *tmp = malloc(strlen(path) + 5);
    if (!order || !begin || !tmp) {
        rc = remat__err(REMAT_NOMEM, "%s: out of memory", path);
        goto done;
    }
    sprintf(tmp, "%s.tmp", path);
    for (int i = 0; i < n; i++) order[i] = i;
    write_ts = ts;
    qsort(order, (size_t)n, sizeof *order, by_write_name);
    for (int i = 1; i < n && rc == REMAT_OK; i++)
        if (strcmp(ts[order[i - 1]].name, ts[order[i]].name) == 0)
            rc = remat__err(REMAT_INVALID, "%s: tensor '%s' given twice",
                            path, ts[order[i]].name);
    for (int i = 0; i < n; i++) order[i] = i;
    qsort(order, (size_t)n, sizeof *order, by_write_size);
    write_ts = NULL;
    if (rc != REMAT_OK) goto done;
    uint64_t at = 0;
    for (int k = 0; k < n; k++) {
        begin[order[k]] = at;
        at += ts[order[k]].bytes;
    }
    if (at > MAX_EXACT) {
        rc = remat__err(REMAT_INVALID, "%s: %llu bytes of tensors is too "
                                       "much for one file",
                        path, (unsigned long long)at);
        goto done;
    }
    /* The header: metadata first, as the Python library writes it. */
    sb_printf(&hdr, "{");
    if (metadata && metadata[0]) {
        sb_printf(&hdr, "\"__metadata__\":{");
        for (int i = 0; metadata[i]; i += 2) {
            if (i) sb_printf(&hdr, ",");
            sb_json_str(&hdr, metadata[i]);
            sb_printf(&hdr, ":");
            sb_json_str(&hdr, metadata[i + 1]);
        }
        sb_printf(&hdr, "}%s", n ? "," : "");
    }
    for (int i = 0; i < n; i++) {
        const remat__st_tensor *t = &ts[i];
        if (i) sb_printf(&hdr, ",");
        sb_json_str(&hdr, t->name);
        sb_printf(&hdr, ":{\"dtype\":\"%s\",\"shape\":[", t->dtype);
        for (int d = 0; d < t->ndim; d++)
            sb_printf(&hdr, "%s%lld", d ? "," : "", (long long)t->dims[d]);
        sb_printf(&hdr, "],\"data_offsets\":[%llu,%llu]}",
                  (unsigned long long)begin[i],
                  (unsigned long long)(begin[i] + t->bytes));
    }
    sb_printf(&hdr, "}");
    /* Pad with spaces so that the data section starts 8-byte aligned. */
    while (!hdr.oom && (8 + hdr.len) % 8 != 0) sb_printf(&hdr, " ");
    if (hdr.oom) {
        rc = remat__err(REMAT_NOMEM, "%s: out of memory for the header", path);
        goto done;
    }
    FILE *fp = fopen(tmp, "wb");
    if (!fp) {
        rc = remat__err(REMAT_IO, "%s: cannot create %s: %s", path, tmp,
                        strerror(errno));
        goto done;
    }
    rc = write_file(fp, tmp, &hdr, n, ts, order);
    if (fclose(fp) != 0 && rc == REMAT_OK)
        rc = remat__err(REMAT_IO, "%s: write error: %s", tmp,
                        strerror(errno));
    if (rc == REMAT_OK && rename(tmp, path) != 0)
        rc = remat__err(REMAT_IO, "%s: cannot rename %s to it: %s", path, tmp,
                        strerror(errno));
    if (rc != REMAT_OK) remove(tmp);
done:
    free(order);
    free(begin);
    free(hdr.s);
    free(tmp);
    return rc;
}
