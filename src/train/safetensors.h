/* safetensors.h: an internal reader and writer of the safetensors format.
 *
 * A safetensors file is an 8-byte little-endian header length N, N bytes of
 * JSON, then the data section:
 *   {"__metadata__": {"format": "pt"},
 *    "fc.weight": {"dtype": "F32", "shape": [10, 784],
 *                  "data_offsets": [0, 31360]}, ...}
 * with data_offsets relative to the start of the data section, the tensors
 * covering it exactly (no overlap, no gap), raw little-endian row-major
 * values. This layer knows nothing of sessions; remat_safetensors_save and
 * remat_safetensors_load (weights.c) are built on it.
 */
#ifndef REMAT_SAFETENSORS_H
#define REMAT_SAFETENSORS_H

#include "../remat-impl.h"

#define REMAT__ST_MAX_DIMS 8

/* An open, fully validated file. It owns its header and data section. */
typedef struct remat__st remat__st;

/* One tensor. From remat__st_get, every pointer is owned by the file and
 * valid until remat__st_close. `data` is aligned to the element size when
 * the file's offsets are (remat__st_write and the Python library align
 * them), not otherwise: read it through memcpy when in doubt. */
typedef struct {
    const char *name;
    const char *dtype; /* "F32", "F64", "I32", "I64", "F16", "BF16", ... */
    int ndim;          /* 0 for a scalar */
    int64_t dims[REMAT__ST_MAX_DIMS];
    const void *data;
    size_t bytes;      /* numel * element size */
} remat__st_tensor;

/* Bytes per element of a safetensors dtype name, 0 if unknown. Known:
 * BOOL U8 I8 F8_E5M2 F8_E4M3 I16 U16 F16 BF16 I32 U32 F32 F64 I64 U64. */
size_t remat__st_dtype_size(const char *dtype);

/* Reads and validates the whole file (header and data) into memory; the
 * caller owns *out (remat__st_close). Errors name the file and, where one
 * is at fault, the tensor: REMAT_NOT_FOUND or REMAT_IO when it cannot be
 * read, REMAT_FORMAT for anything malformed, REMAT_UNSUPPORTED for more
 * than REMAT__ST_MAX_DIMS dimensions or a big-endian host. */
remat_status remat__st_open(remat__st **out, const char *path);
void remat__st_close(remat__st *f); /* accepts NULL */

/* The path given to remat__st_open (owned by the file). */
const char *remat__st_path(const remat__st *f);
/* Number of tensors (the __metadata__ entry is not one). */
int remat__st_count(const remat__st *f);
/* Tensor i, 0 <= i < count, in the order of the header. */
remat_status remat__st_get(const remat__st *f, int i, remat__st_tensor *t);
/* Index of the tensor with this name, or -1. */
int remat__st_find(const remat__st *f, const char *name);
/* The __metadata__ value for key (owned by the file), or NULL. */
const char *remat__st_metadata(const remat__st *f, const char *key);

/* Writes n tensors (the caller keeps ownership of everything) and optional
 * metadata, a NULL-terminated list of key, value strings (NULL: none).
 * The header lists the tensors in the given order; the data section holds
 * them by decreasing element size, so each is aligned to its element size.
 * The file is written to "<path>.tmp" and renamed over path, so a failure
 * leaves any previous file intact. REMAT_INVALID names the bad tensor
 * (unknown dtype, bytes != numel * element size, duplicate name, ...). */
remat_status remat__st_write(const char *path, int n,
                             const remat__st_tensor *ts,
                             const char *const *metadata);

#endif /* REMAT_SAFETENSORS_H */
