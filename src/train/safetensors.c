/* safetensors.c: the safetensors reader, and what the writer
 * (safetensors_write.c) shares with it (see safetensors.h).
 *
 * The reader loads the whole file, parses the header with cJSON and checks
 * everything before handing out a tensor: the header length against the
 * file, the JSON itself, every entry's dtype, shape and data_offsets, the
 * byte count of dtype x shape against the offsets, duplicate names, and
 * that the tensors tile the data section with neither overlap nor gap (as
 * the reference implementation requires). The writer emits the header by
 * hand, so integers are exact and the output is byte-for-byte
 * deterministic, pads it with spaces to a multiple of 8 bytes, and writes
 * through remat__write_atomic (core/file.c).
 *
 * Checksummed files (training states) lead their __metadata__ with two
 * fixed-width entries, "remat.crc32": 8 lowercase hex digits and
 * "remat.file_bytes": the file's size in 20 decimal digits. The CRC-32
 * (zlib's) covers the whole file, 8-byte length, header and data, with the
 * 8 digits of the checksum read as the characters "00000000". The reader
 * checks the size, then the CRC, on the raw bytes before it parses
 * anything, so a truncated or damaged file is refused as such.
 */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif

#include "safetensors.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

/* The reference implementation refuses headers above 100 MB as well. */
#define MAX_HEADER ((uint64_t)100000000)

static const struct {
    const char *name;
    size_t size;
} dtypes[] = {
    {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"I16", 2}, {"U16", 2}, {"F16", 2},
    {"BF16", 2}, {"I32", 4}, {"U32", 4}, {"F32", 4},     {"F64", 8},     {"I64", 8}, {"U64", 8},
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

/* A path given, on a host that reads and writes safetensors' little-endian
 * data as it is. */
remat_status remat__st_usable_path(const char *path) {
    if (!path) return remat__err(REMAT_INVALID, "safetensors: no path given");
    if (!host_little_endian())
        return remat__err(REMAT_UNSUPPORTED, "%s: safetensors data is little-endian; this host is not", path);
    return REMAT_OK;
}

/* numel(dims) * size into *bytes; 0 on overflow of size_t. */
int remat__st_tensor_bytes(int ndim, const int64_t *dims, size_t size, size_t *bytes) {
    size_t b = size;
    for (int i = 0; i < ndim; i++) {
        if (dims[i] < 0) return 0;
        if (dims[i] && b > SIZE_MAX / (uint64_t)dims[i]) return 0;
        b *= (size_t)dims[i];
    }
    *bytes = b;
    return 1;
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
    char *path;          /* owned copy, for messages */
    cJSON *json;         /* owned; names and metadata point into it */
    const cJSON *meta;   /* borrowed from json; NULL if absent */
    unsigned char *buf;  /* owned; the data section, or the whole file */
    unsigned char *raw;  /* whole files: the file's first byte, in buf */
    uint64_t raw_bytes;  /* whole files: the file's size */
    unsigned char *data; /* the data section, in buf (8-byte aligned) */
    uint64_t data_bytes;
    int n;
    entry *t;     /* owned; n entries in header order */
    int *by_name; /* owned; indices of t sorted by name */
};

void remat__st_close(remat__st *f) {
    if (!f) return;
    free(f->path);
    cJSON_Delete(f->json);
    free(f->buf);
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
    if (!(d >= 0.0) || d > (double)REMAT__ST_MAX_EXACT) return 0;
    uint64_t u = (uint64_t)d;
    if ((double)u != d) return 0;
    *out = u;
    return 1;
}

/* Checks one header entry and fills *e. */
static remat_status parse_entry(const remat__st *f, const cJSON *item, entry *e) {
    const char *p = f->path, *nm = item->string;
    e->name = nm;
    if (!cJSON_IsObject(item)) return remat__err(REMAT_FORMAT, "%s: tensor '%s': header entry is not an object", p, nm);
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(item, "dtype");
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(item, "shape");
    const cJSON *off = cJSON_GetObjectItemCaseSensitive(item, "data_offsets");
    if (!dt || !sh || !off)
        return remat__err(REMAT_FORMAT, "%s: tensor '%s': missing \"%s\"", p, nm,
                          !dt   ? "dtype"
                          : !sh ? "shape"
                                : "data_offsets");
    if (!cJSON_IsString(dt)) return remat__err(REMAT_FORMAT, "%s: tensor '%s': dtype is not a string", p, nm);
    e->dtype = dtype_index(dt->valuestring);
    if (e->dtype < 0) return remat__err(REMAT_FORMAT, "%s: tensor '%s': unknown dtype '%s'", p, nm, dt->valuestring);
    if (!cJSON_IsArray(sh)) return remat__err(REMAT_FORMAT, "%s: tensor '%s': shape is not an array", p, nm);
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
    if (!cJSON_IsArray(off) || cJSON_GetArraySize(off) != 2 || !json_uint(off->child, &e->begin) ||
        !json_uint(off->child->next, &e->end))
        return remat__err(REMAT_FORMAT,
                          "%s: tensor '%s': data_offsets must be two "
                          "non-negative integers [begin, end]",
                          p, nm);
    if (e->begin > e->end || e->end > f->data_bytes)
        return remat__err(REMAT_FORMAT,
                          "%s: tensor '%s': data_offsets [%llu, %llu] out of "
                          "range: the data section has %llu bytes",
                          p, nm, (unsigned long long)e->begin, (unsigned long long)e->end,
                          (unsigned long long)f->data_bytes);
    size_t need;
    char sb[160];
    remat__dims_str(e->ndim, e->dims, sb, sizeof sb);
    if (!remat__st_tensor_bytes(e->ndim, e->dims, dtypes[e->dtype].size, &need))
        return remat__err(REMAT_FORMAT, "%s: tensor '%s': shape %s is too large", p, nm, sb);
    if (need != e->end - e->begin)
        return remat__err(REMAT_FORMAT,
                          "%s: tensor '%s': dtype %s and shape %s need %zu "
                          "bytes but data_offsets [%llu, %llu] hold %llu",
                          p, nm, dtypes[e->dtype].name, sb, need, (unsigned long long)e->begin,
                          (unsigned long long)e->end, (unsigned long long)(e->end - e->begin));
    return REMAT_OK;
}

/* qsort has no context argument: the entries being sorted. */
static _Thread_local const entry *sort_entries;

static int by_name_cmp(const void *a, const void *b) {
    return strcmp(sort_entries[*(const int *)a].name, sort_entries[*(const int *)b].name);
}

static int by_offset_cmp(const void *a, const void *b) {
    const entry *x = &sort_entries[*(const int *)a];
    const entry *y = &sort_entries[*(const int *)b];
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return 0;
}

/* Parses the header text into f->json: valid JSON, an object, nothing
 * but blanks after it. */
static remat_status parse_json(remat__st *f, const char *hdr, size_t len) {
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
    if (!cJSON_IsObject(f->json)) return remat__err(REMAT_FORMAT, "%s: the header is not a JSON object", p);
    return REMAT_OK;
}

/* Finds __metadata__ (at most one object of strings) into f->meta and
 * counts the other entries, the tensors. */
static remat_status read_metadata(remat__st *f, int *count) {
    const char *p = f->path;
    *count = 0;
    const cJSON *item;
    cJSON_ArrayForEach(item, f->json) {
        if (strcmp(item->string, "__metadata__") != 0) {
            (*count)++;
            continue;
        }
        if (f->meta) return remat__err(REMAT_FORMAT, "%s: __metadata__ appears twice", p);
        if (!cJSON_IsObject(item)) return remat__err(REMAT_FORMAT, "%s: __metadata__ is not an object", p);
        const cJSON *kv;
        cJSON_ArrayForEach(kv, item) {
            if (!cJSON_IsString(kv))
                return remat__err(REMAT_FORMAT,
                                  "%s: __metadata__ entry '%s' is not a "
                                  "string",
                                  p, kv->string);
        }
        f->meta = item;
    }
    return REMAT_OK;
}

/* Checks every tensor entry into f->t (header order), then sorts f->by_name
 * by name and order by data offset. */
static remat_status parse_entries(remat__st *f, int *order) {
    const cJSON *item;
    cJSON_ArrayForEach(item, f->json) {
        if (strcmp(item->string, "__metadata__") == 0) continue;
        remat_status rc = parse_entry(f, item, &f->t[f->n]);
        if (rc != REMAT_OK) return rc;
        f->by_name[f->n] = f->n;
        order[f->n] = f->n;
        f->n++;
    }
    sort_entries = f->t;
    qsort(f->by_name, (size_t)f->n, sizeof *f->by_name, by_name_cmp);
    qsort(order, (size_t)f->n, sizeof *order, by_offset_cmp);
    sort_entries = NULL;
    return REMAT_OK;
}

/* No name twice (f->by_name sorted). */
static remat_status check_names(const remat__st *f) {
    for (int i = 1; i < f->n; i++)
        if (strcmp(f->t[f->by_name[i - 1]].name, f->t[f->by_name[i]].name) == 0)
            return remat__err(REMAT_FORMAT, "%s: tensor '%s' appears twice", f->path, f->t[f->by_name[i]].name);
    return REMAT_OK;
}

/* The tensors must tile [0, data_bytes): each begins where the one before
 * it (in offset order) ends. */
static remat_status check_tiling(const remat__st *f, const int *order) {
    const char *p = f->path;
    uint64_t cursor = 0;
    int last = -1; /* the tensor that ends at cursor */
    for (int i = 0; i < f->n; i++) {
        const entry *e = &f->t[order[i]];
        if (e->begin < cursor)
            return remat__err(REMAT_FORMAT,
                              "%s: tensors '%s' [%llu, %llu] and '%s' [%llu, "
                              "%llu] overlap",
                              p, f->t[last].name, (unsigned long long)f->t[last].begin,
                              (unsigned long long)f->t[last].end, e->name, (unsigned long long)e->begin,
                              (unsigned long long)e->end);
        if (e->begin > cursor)
            return remat__err(REMAT_FORMAT,
                              "%s: no tensor covers bytes [%llu, %llu) of the "
                              "data section (before tensor '%s')",
                              p, (unsigned long long)cursor, (unsigned long long)e->begin, e->name);
        cursor = e->end;
        last = order[i];
    }
    if (cursor != f->data_bytes)
        return remat__err(REMAT_FORMAT,
                          "%s: no tensor covers bytes [%llu, %llu) at the end "
                          "of the data section",
                          p, (unsigned long long)cursor, (unsigned long long)f->data_bytes);
    return REMAT_OK;
}

/* Parses and checks the header text (hdr, len bytes, NUL-terminated). */
static remat_status parse_header(remat__st *f, const char *hdr, size_t len) {
    int count = 0;
    remat_status rc = parse_json(f, hdr, len);
    if (rc == REMAT_OK) rc = read_metadata(f, &count);
    if (rc != REMAT_OK) return rc;
    f->t = calloc((size_t)(count ? count : 1), sizeof *f->t);
    f->by_name = malloc((size_t)(count ? count : 1) * sizeof *f->by_name);
    int *order = malloc((size_t)(count ? count : 1) * sizeof *order);
    if (!f->t || !f->by_name || !order) {
        free(order);
        return remat__err(REMAT_NOMEM, "%s: out of memory for %d tensors", f->path, count);
    }
    rc = parse_entries(f, order);
    if (rc == REMAT_OK) rc = check_names(f);
    if (rc == REMAT_OK) rc = check_tiling(f, order);
    free(order);
    return rc;
}

/* Reads exactly n bytes, or reports the file as truncated. */
static remat_status read_exact(FILE *fp, const char *path, void *buf, size_t n, const char *what) {
    size_t got = fread(buf, 1, n, fp);
    if (got == n) return REMAT_OK;
    if (ferror(fp)) return remat__err(REMAT_IO, "%s: read error: %s", path, strerror(errno));
    return remat__err(REMAT_FORMAT,
                      "%s: truncated: expected %zu bytes of %s, "
                      "got %zu",
                      path, n, what, got);
}

/* Checks the file's size and header length (f already holds the path). */
static remat_status read_prefix(remat__st *f, FILE *fp, uint64_t *size, uint64_t *hlen, unsigned char le[8]) {
    const char *p = f->path;
    struct stat st;
    if (fstat(fileno(fp), &st) != 0) return remat__err(REMAT_IO, "%s: cannot stat: %s", p, strerror(errno));
    if (!S_ISREG(st.st_mode)) return remat__err(REMAT_IO, "%s: not a regular file", p);
    *size = (uint64_t)st.st_size;
    if (*size < 8)
        return remat__err(REMAT_FORMAT,
                          "%s: %llu bytes, too short for a safetensors file "
                          "(at least an 8-byte header length)",
                          p, (unsigned long long)*size);
    remat_status rc = read_exact(fp, p, le, 8, "header length");
    if (rc != REMAT_OK) return rc;
    *hlen = 0;
    for (int i = 7; i >= 0; i--) *hlen = *hlen << 8 | le[i];
    if (*hlen > *size - 8)
        return remat__err(REMAT_FORMAT,
                          "%s: header length %llu exceeds the %llu bytes "
                          "that follow it (not a safetensors file, or "
                          "truncated?)",
                          p, (unsigned long long)*hlen, (unsigned long long)(*size - 8));
    if (*hlen < 2 || *hlen > MAX_HEADER)
        return remat__err(REMAT_FORMAT,
                          "%s: header length %llu is implausible (2 to %llu "
                          "bytes expected)",
                          p, (unsigned long long)*hlen, (unsigned long long)MAX_HEADER);
    if (*size > SIZE_MAX - 16) return remat__err(REMAT_NOMEM, "%s: too large to load", p);
    f->data_bytes = *size - 8 - *hlen;
    return REMAT_OK;
}

/* Reads and parses the header, then (only if it is valid) the data
 * section into f->buf: a malformed file is refused before its data is
 * read or allocated. */
static remat_status load_parsed(remat__st *f, FILE *fp) {
    const char *p = f->path;
    uint64_t size, hlen;
    unsigned char le[8];
    remat_status rc = read_prefix(f, fp, &size, &hlen, le);
    if (rc != REMAT_OK) return rc;
    char *hdr = malloc((size_t)hlen + 1);
    if (!hdr) return remat__err(REMAT_NOMEM, "%s: out of memory for the header", p);
    rc = read_exact(fp, p, hdr, (size_t)hlen, "header");
    hdr[hlen] = 0;
    if (rc == REMAT_OK) rc = parse_header(f, hdr, (size_t)hlen);
    free(hdr);
    if (rc != REMAT_OK) return rc;
    f->buf = malloc(f->data_bytes ? (size_t)f->data_bytes : 1);
    if (!f->buf)
        return remat__err(REMAT_NOMEM, "%s: out of memory for %llu bytes of tensor data", p,
                          (unsigned long long)f->data_bytes);
    f->data = f->buf;
    return read_exact(fp, p, f->data, (size_t)f->data_bytes, "tensor data");
}

/* The 20 decimal digits at s as a number into *v: 0 when one is not a
 * digit or the number does not fit. */
static int dec20(const char *s, unsigned long long *v) {
    int ok = 1;
    *v = 0;
    for (int i = 0; ok && i < 20; i++) {
        char c = s[i];
        ok = c >= '0' && c <= '9' && *v <= 1844674407370955161ULL;
        *v = *v * 10 + (unsigned long long)(c - '0');
    }
    return ok;
}

/* The 8 lowercase hex digits at s as a number into *v: 0 when one is not
 * a hex digit. */
static int hex8(const char *s, unsigned *v) {
    int ok = 1;
    *v = 0;
    for (int i = 0; ok && i < 8; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        ok = d >= 0;
        *v = *v << 4 | (unsigned)(d < 0 ? 0 : d);
    }
    return ok;
}

/* Reads the whole file into f->buf, unparsed (a checksummed file is
 * checked on its raw bytes first): f->raw is the file's first byte,
 * placed so that the data section starts 8-byte aligned. Before the whole
 * file is allocated: the header alone is read, its size field (when lim
 * asks for a checksummed file) compared with the file's size, and the
 * data section and header compared with lim's bounds, so that a file of
 * the wrong size (a sparse 100 GiB file named as a state) costs a header's
 * read, never its apparent size in memory. */
static remat_status load_whole(remat__st *f, FILE *fp, const remat__st_limits *lim) {
    const char *p = f->path;
    uint64_t size, hlen;
    unsigned char le[8];
    remat_status rc = read_prefix(f, fp, &size, &hlen, le);
    if (rc != REMAT_OK) return rc;
    if (lim && lim->max_header && hlen > lim->max_header)
        return remat__err(REMAT_FORMAT, "%s: a header of %llu bytes, more than the %llu that %s", p,
                          (unsigned long long)hlen, (unsigned long long)lim->max_header,
                          lim->what ? lim->what : "the caller allows");
    char *hdr = malloc((size_t)hlen + 1);
    if (!hdr) return remat__err(REMAT_NOMEM, "%s: out of memory for the header", p);
    rc = read_exact(fp, p, hdr, (size_t)hlen, "header");
    hdr[hlen] = 0;
    int sized = 0; /* a checksummed file whose size is the one written */
    if (rc == REMAT_OK && lim && lim->checksummed) {
        /* the writer's size field (checked in full after the read) */
        char pat[64];
        int k = snprintf(pat, sizeof pat, "\"%s\":\"", REMAT__ST_SIZE_KEY);
        const char *a = memmem(hdr, (size_t)hlen, pat, (size_t)k);
        unsigned long long want = 0;
        int ok = a && (size_t)(a - hdr) + (size_t)k + 20 <= hlen && dec20(a + k, &want);
        if (ok && want != size)
            rc = remat__err(REMAT_FORMAT, "%s: %s: the file has %llu bytes but was written with %llu", p,
                            want > size ? "truncated" : "too long", (unsigned long long)size, want);
        sized = ok && want == size;
        if (!a)
            rc = remat__err(REMAT_FORMAT,
                            "%s: no checksum in the header (\"%s\"): not a file remat wrote with one, "
                            "or its header is damaged",
                            p, REMAT__ST_SIZE_KEY);
    }
    if (rc == REMAT_OK && lim && lim->data_bytes && f->data_bytes != lim->data_bytes && lim->explain && sized) {
        /* the caller names the difference from the header alone (another
         * model's tensors), which is parsed here without the data */
        remat__st h = {.path = f->path, .data_bytes = f->data_bytes};
        if (parse_header(&h, hdr, (size_t)hlen) == REMAT_OK) rc = lim->explain(&h, lim->ctx);
        cJSON_Delete(h.json), free(h.t), free(h.by_name);
    }
    if (rc == REMAT_OK && lim && lim->data_bytes && f->data_bytes != lim->data_bytes)
        rc = remat__err(REMAT_FORMAT, "%s: %llu bytes of tensor data, but %s has %llu", p,
                        (unsigned long long)f->data_bytes, lim->what ? lim->what : "the file expected",
                        (unsigned long long)lim->data_bytes);
    if (rc != REMAT_OK) {
        free(hdr);
        return rc;
    }
    size_t pad = (size_t)((8 - (8 + hlen) % 8) % 8);
    f->buf = malloc((size_t)size + pad);
    if (!f->buf) {
        free(hdr);
        return remat__err(REMAT_NOMEM, "%s: out of memory for its %llu bytes", p, (unsigned long long)size);
    }
    f->raw = f->buf + pad;
    f->raw_bytes = size;
    memcpy(f->raw, le, 8);
    memcpy(f->raw + 8, hdr, (size_t)hlen);
    free(hdr);
    f->data = f->raw + 8 + hlen;
    return read_exact(fp, p, f->data, (size_t)f->data_bytes, "tensor data");
}

/* Opens path into a new file object: parsed (load_parsed), or whole and
 * unparsed (load_whole, within lim). The file is opened without blocking
 * and refused unless it is a regular file before anything is read from it
 * (a FIFO named as a state would block a plain open, and every read, for
 * ever). */
static remat_status open_file(remat__st **out, const char *path, int whole, const remat__st_limits *lim) {
    *out = NULL;
    remat_status usable = remat__st_usable_path(path);
    if (usable != REMAT_OK) return usable;
    remat__st *f = calloc(1, sizeof *f);
    if (f) f->path = malloc(strlen(path) + 1);
    if (!f || !f->path) {
        free(f);
        return remat__err(REMAT_NOMEM, "%s: out of memory", path);
    }
    strcpy(f->path, path);
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        remat_status rc = errno == ENOENT ? remat__err(REMAT_NOT_FOUND, "%s: no such file", path)
                                          : remat__err(REMAT_IO, "%s: cannot open: %s", path, strerror(errno));
        remat__st_close(f);
        return rc;
    }
    struct stat st;
    remat_status rc = REMAT_OK;
    if (fstat(fd, &st) != 0) rc = remat__err(REMAT_IO, "%s: cannot stat: %s", path, strerror(errno));
    else if (!S_ISREG(st.st_mode))
        rc = remat__err(REMAT_IO, "%s: not a regular file (%s)", path,
                        S_ISFIFO(st.st_mode)                         ? "a FIFO"
                        : S_ISDIR(st.st_mode)                        ? "a directory"
                        : S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) ? "a device"
                        : S_ISSOCK(st.st_mode)                       ? "a socket"
                                                                     : "not a file");
    /* a regular file: reads block (the ordinary way) */
    int fl = rc == REMAT_OK ? fcntl(fd, F_GETFL) : -1;
    if (rc == REMAT_OK && (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0))
        rc = remat__err(REMAT_IO, "%s: cannot read: %s", path, strerror(errno));
    FILE *fp = rc == REMAT_OK ? fdopen(fd, "rb") : NULL;
    if (rc == REMAT_OK && !fp) rc = remat__err(REMAT_IO, "%s: cannot open: %s", path, strerror(errno));
    if (!fp) close(fd);
    if (rc == REMAT_OK) rc = whole ? load_whole(f, fp, lim) : load_parsed(f, fp);
    if (fp) fclose(fp);
    if (rc != REMAT_OK) {
        remat__st_close(f);
        return rc;
    }
    *out = f;
    return REMAT_OK;
}

/* Parses the header of a file read by load_whole; closes it on failure. */
static remat_status parse_raw(remat__st **f) {
    remat_status rc = parse_header(*f, (const char *)(*f)->raw + 8, (size_t)((*f)->raw_bytes - 8 - (*f)->data_bytes));
    if (rc != REMAT_OK) {
        remat__st_close(*f);
        *f = NULL;
    }
    return rc;
}

remat_status remat__st_open(remat__st **out, const char *path) {
    if (!out) return remat__err(REMAT_INVALID, "remat__st_open: out is NULL");
    return open_file(out, path, 0, NULL);
}

/* ------------------------------------------------------------ checksum */

/* CRC-32 (zlib's) of n bytes, in pieces that fit zlib's uInt. */
uint32_t remat__st_crc(uint32_t crc, const void *p, size_t n) {
    const unsigned char *b = p;
    while (n) {
        size_t k = n > ((size_t)1 << 30) ? ((size_t)1 << 30) : n;
        crc = (uint32_t)crc32(crc, b, (uInt)k);
        b += k, n -= k;
    }
    return crc;
}

/* The position of the value of the metadata entry `key` in the header
 * text h (n bytes), found as the literal "key":" written by the writer;
 * -1 when absent, -2 when it appears more than once. */
static long long find_field(const char *h, size_t n, const char *key) {
    char pat[64];
    int k = snprintf(pat, sizeof pat, "\"%s\":\"", key);
    const char *a = memmem(h, n, pat, (size_t)k);
    if (!a) return -1;
    size_t at = (size_t)(a - h) + (size_t)k;
    if (memmem(a + 1, n - (size_t)(a + 1 - h), pat, (size_t)k)) return -2;
    return (long long)at;
}

/* Reads the checksum's two fields from the header text h (hn bytes): the
 * CRC-32's position (*crc_at) and value, and the file size written. */
static remat_status read_checksum(const char *path, const char *h, size_t hn, long long *crc_at, unsigned *want_crc,
                                  unsigned long long *want_size) {
    *crc_at = find_field(h, hn, REMAT__ST_CRC_KEY);
    long long size_at = find_field(h, hn, REMAT__ST_SIZE_KEY);
    if (*crc_at == -1 || size_at == -1)
        return remat__err(REMAT_FORMAT,
                          "%s: no checksum in the header (\"%s\"): not a file "
                          "remat wrote with one, or its header is damaged",
                          path, *crc_at == -1 ? REMAT__ST_CRC_KEY : REMAT__ST_SIZE_KEY);
    if (*crc_at < 0 || size_at < 0)
        return remat__err(REMAT_FORMAT,
                          "%s: the checksum appears twice in "
                          "the header: the header is damaged",
                          path);
    /* fixed widths: 8 hex digits, 20 decimal digits, then a quote */
    int ok = (size_t)*crc_at + 9 <= hn && (size_t)size_at + 21 <= hn && h[*crc_at + 8] == '"' && h[size_at + 20] == '"';
    ok = ok && hex8(h + *crc_at, want_crc);
    ok = ok && dec20(h + size_at, want_size);
    if (!ok)
        return remat__err(REMAT_FORMAT,
                          "%s: the checksum fields of the header are "
                          "malformed: the header is damaged",
                          path);
    return REMAT_OK;
}

/* The file f (read whole) has the size and CRC-32 its header says; the
 * CRC is of the file with the checksum's 8 digits (at crc_at in the
 * header) read as '0'. */
static remat_status check_sum(const remat__st *f, const char *path, long long crc_at, unsigned want_crc,
                              unsigned long long want_size) {
    if (want_size != f->raw_bytes)
        return remat__err(REMAT_FORMAT,
                          "%s: %s: the file has %llu bytes but was written "
                          "with %llu",
                          path, want_size > f->raw_bytes ? "truncated" : "too long", (unsigned long long)f->raw_bytes,
                          want_size);
    size_t at = 8 + (size_t)crc_at;
    uint32_t crc = remat__st_crc(0, f->raw, at);
    crc = remat__st_crc(crc, "00000000", 8);
    crc = remat__st_crc(crc, f->raw + at + 8, (size_t)f->raw_bytes - at - 8);
    if (crc != want_crc)
        return remat__err(REMAT_FORMAT,
                          "%s: checksum mismatch: the file's CRC-32 is "
                          "%08x, its header says %08x: the file is damaged",
                          path, (unsigned)crc, want_crc);
    return REMAT_OK;
}

remat_status remat__st_open_checked(remat__st **out, const char *path) {
    return remat__st_open_limited(out, path, NULL);
}

remat_status remat__st_open_limited(remat__st **out, const char *path, const remat__st_limits *lim) {
    if (!out) return remat__err(REMAT_INVALID, "remat__st_open_checked: out is NULL");
    remat__st_limits checked = lim ? *lim : (remat__st_limits){0};
    checked.checksummed = 1;
    remat_status rc = open_file(out, path, 1, &checked);
    if (rc != REMAT_OK) return rc;
    remat__st *f = *out;
    const char *h = (const char *)f->raw + 8;
    size_t hn = (size_t)(f->raw_bytes - 8 - f->data_bytes);
    long long crc_at = 0;
    unsigned want_crc = 0;
    unsigned long long want_size = 0;
    rc = read_checksum(path, h, hn, &crc_at, &want_crc, &want_size);
    if (rc == REMAT_OK) rc = check_sum(f, path, crc_at, want_crc, want_size);
    if (rc == REMAT_OK) rc = parse_raw(out);
    /* the digits checked must be the metadata's own */
    if (rc == REMAT_OK) {
        const char *v = remat__st_metadata(*out, REMAT__ST_CRC_KEY);
        if (!v || strlen(v) != 8 || memcmp(v, h + crc_at, 8) != 0)
            rc = remat__err(REMAT_FORMAT,
                            "%s: the checksum is not a metadata entry: the "
                            "header is damaged",
                            path);
    }
    if (rc != REMAT_OK) {
        remat__st_close(*out);
        *out = NULL;
    }
    return rc;
}

remat_status remat__st_get(const remat__st *f, int i, remat__st_tensor *t) {
    if (!f || !t) return remat__err(REMAT_INVALID, "remat__st_get: NULL argument");
    if (i < 0 || i >= f->n)
        return remat__err(REMAT_INVALID, "%s: tensor index %d out of range (%d tensors)", f->path, i, f->n);
    const entry *e = &f->t[i];
    memset(t, 0, sizeof *t);
    t->name = e->name;
    t->dtype = dtypes[e->dtype].name;
    t->ndim = e->ndim;
    memcpy(t->dims, e->dims, sizeof e->dims);
    t->data = f->data ? f->data + e->begin : NULL; /* NULL: a header read alone */
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
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return -1;
}

const char *remat__st_metadata_key(const remat__st *f, int i) {
    if (!f || !f->meta || i < 0) return NULL;
    const cJSON *kv = f->meta->child;
    while (kv && i--) kv = kv->next;
    return kv ? kv->string : NULL;
}

const char *remat__st_metadata(const remat__st *f, const char *key) {
    if (!f || !f->meta || !key) return NULL;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(f->meta, key);
    return v ? v->valuestring : NULL;
}
