/* check.h: the tests' assertions. Each CHECK prints the failing expression
 * with its file and line, counts the failure and carries on, so one run
 * shows every problem; a test's main returns check_exit(), nonzero when
 * any check failed. */
#ifndef REMAT_CHECK_H
#define REMAT_CHECK_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int check_failures = 0;
static int check_count = 0;

#define CHECK(cond)                                                                                                    \
    do {                                                                                                               \
        check_count++;                                                                                                 \
        if (!(cond)) {                                                                                                 \
            check_failures++;                                                                                          \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);                                   \
        }                                                                                                              \
    } while (0)

#define CHECK_MSG(cond, ...)                                                                                           \
    do {                                                                                                               \
        check_count++;                                                                                                 \
        if (!(cond)) {                                                                                                 \
            check_failures++;                                                                                          \
            fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond);                                   \
            fprintf(stderr, __VA_ARGS__);                                                                              \
            fprintf(stderr, "\n");                                                                                     \
        }                                                                                                              \
    } while (0)

/* A call that must succeed; prints remat_last_error() otherwise. */
#define CHECK_OK(call)                                                                                                 \
    do {                                                                                                               \
        check_count++;                                                                                                 \
        remat_status check_st_ = (call);                                                                               \
        if (check_st_ != REMAT_OK) {                                                                                   \
            check_failures++;                                                                                          \
            fprintf(stderr, "%s:%d: %s failed: %s: %s\n", __FILE__, __LINE__, #call, remat_status_str(check_st_),      \
                    remat_last_error());                                                                               \
        }                                                                                                              \
    } while (0)

/* Whether s contains sub (a NULL s or sub: no). */
static inline int check_has(const char *s, const char *sub) { return s && sub && strstr(s, sub) != NULL; }

/* A call that must fail with status st and a message containing a and b
 * (either may be NULL). */
#define CHECK_FAILS(call, st, a, b)                                                                                    \
    do {                                                                                                               \
        remat_status got_ = (call);                                                                                    \
        const char *msg_ = remat_last_error();                                                                         \
        CHECK_MSG(got_ == (st) && (!(a) || check_has(msg_, a)) && (!(b) || check_has(msg_, b)),                        \
                  "status %s, message: %s", remat_status_str(got_), msg_);                                             \
    } while (0)

static inline int check_exit(const char *name) {
    printf("%s: %d checks, %d failed\n", name, check_count, check_failures);
    return check_failures ? 1 : 0;
}

/* A text file's contents, NUL-terminated (free it), or NULL. */
static inline char *check_read_text(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) free(buf), buf = NULL;
    if (buf) buf[n] = 0;
    fclose(f);
    return buf;
}

#endif
