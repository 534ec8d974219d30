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

#include <stdio.h>

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
    size_t bytes; /* numel * element size */
} remat__st_tensor;

/* Bytes per element of a safetensors dtype name, 0 if unknown. Known:
 * BOOL U8 I8 F8_E5M2 F8_E4M3 I16 U16 F16 BF16 I32 U32 F32 F64 I64 U64. */
size_t remat__st_dtype_size(const char *dtype);

/* What the reader and the writer (safetensors_write.c) share
 * (safetensors.c): the largest integer a JSON number (a double in cJSON)
 * holds exactly; REMAT_OK for a path given on a host that reads and
 * writes safetensors' little-endian data as it is; numel(dims) * size into
 * *bytes (0 on overflow of size_t); CRC-32 (zlib's) of n bytes, in pieces
 * that fit zlib's uInt. */
#define REMAT__ST_MAX_EXACT ((uint64_t)1 << 53)
remat_status remat__st_usable_path(const char *path);
int remat__st_tensor_bytes(int ndim, const int64_t *dims, size_t size, size_t *bytes);
uint32_t remat__st_crc(uint32_t crc, const void *p, size_t n);

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
/* The i-th __metadata__ key in the header's order (owned by the file), or
 * NULL past the last. */
const char *remat__st_metadata_key(const remat__st *f, int i);

/* Writes n tensors (the caller keeps ownership of everything) and optional
 * metadata, a NULL-terminated list of key, value strings (NULL: none).
 * The header lists the tensors in the given order; the data section holds
 * them by decreasing element size, so each is aligned to its element size.
 * The file is written through remat__write_atomic, so a failure leaves any
 * previous file intact. REMAT_INVALID names the bad tensor (unknown dtype,
 * bytes != numel * element size, duplicate name, ...). */
remat_status remat__st_write(const char *path, int n, const remat__st_tensor *ts, const char *const *metadata);
/* The same, and with checksum != 0 the metadata starts with the file's
 * size and CRC-32 (safetensors.c's top comment has the exact rule). */
remat_status remat__st_write_ex(const char *path, int n, const remat__st_tensor *ts, const char *const *metadata,
                                int checksum);
#define REMAT__ST_CRC_KEY "remat.crc32"
#define REMAT__ST_SIZE_KEY "remat.file_bytes"
/* remat__st_open for a checksummed file: REMAT_FORMAT, naming the file,
 * when it has no checksum, is truncated or too long, or its CRC-32 does
 * not match, all checked before the header is parsed. */
remat_status remat__st_open_checked(remat__st **out, const char *path);
/* What a reader expects of a checksummed file, checked from its first 8
 * bytes and its header before the rest is read or allocated. Zeros mean
 * no bound. */
typedef struct {
    uint64_t data_bytes; /* the data section's exact size */
    uint64_t max_header; /* the header's largest size */
    const char *what;    /* names the expectation in messages: "a state of
                          * this model and optimizer" */
    int checksummed;     /* set by remat__st_open_limited */
    /* When the data section's size differs: called with the file's header
     * alone (its tensors' data NULL) to name the difference, returning
     * its error, or REMAT_OK for the generic message. May be NULL. */
    remat_status (*explain)(const struct remat__st *header, void *ctx);
    void *ctx;
} remat__st_limits;
/* remat__st_open_checked within lim (NULL: none): so that the memory a
 * file can take is the caller's bound, never the file's own size. */
remat_status remat__st_open_limited(remat__st **out, const char *path, const remat__st_limits *lim);

/* ------------------------------------------- training states (state.c)
 * The training loops' side of remat.h's "training state": loop.c calls
 * begin before its first step and step after each one. */
typedef struct {
    const remat_train_opts *o; /* borrowed for the loop */
    remat_state_opts so;       /* what each state records besides the session */
    int64_t per_epoch;         /* batches (remat_train) or steps (streams) per epoch */
    int64_t last_saved;        /* data step of the last state saved, -1 none */
    int lock_fd;               /* the state directory's lock (rank 0), or -1 */
    int64_t start;             /* the data step the run began at (a resume's) */
} remat__loop_state;

/* Nothing unless o asks for states. Resumes from o->resume (setting
 * *start to the state's data step, emitting RESUME and NOTE events), then
 * checks that o->state_dir can take this run's states (created if
 * missing; holding no other run's states). batch: rows per step; data:
 * the training data's identity (borrowed for the loop), or NULL. */
remat_status remat__loop_state_begin(remat__loop_state *ls, remat_session *s, const remat_train_opts *o, int64_t batch,
                                     int64_t per_epoch, const char *data, int64_t *start);
/* After the loop's step `done` (its data step): saves a state when one is
 * due (every o->save_every steps, and the last step), emitting SAVE. */
remat_status remat__loop_state_step(remat__loop_state *ls, remat_session *s, int64_t done, int last);
/* After step `done` of `total` (and before the first): REMAT_OK to go
 * on; or, when a stop was asked on any rank (o->stop, agreed across the
 * ranks, every rank's *stop set to the first rank's value), saves a state
 * of this step when o->state_dir is set and it has none yet, and returns
 * REMAT_STOPPED saying so. Nothing after the last step. */
remat_status remat__loop_state_stop(remat__loop_state *ls, remat_session *s, int64_t done, int64_t total);
/* Releases what begin took (the state directory's lock); safe to call
 * more than once, and after a begin that failed. */
void remat__loop_state_end(remat__loop_state *ls);

#endif /* REMAT_SAFETENSORS_H */
