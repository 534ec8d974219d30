/* format.c: how remat writes numbers as text. A float where the text is
 * compared later: a training state's hyper-parameters (train/state.c) and
 * the command line's run options (cli/cmd_train.c) are both written by
 * remat_float_str, so a resume that compares them as strings compares the
 * same spelling of the same float. And a shape, "(8, 3, 32, 32)", as every
 * message that names one writes it.
 */
#include "../remat-impl.h"

#include <stdio.h>
#include <stdlib.h>

/* The fewest significant digits (6 to 9) that read back as v: 9 always
 * do for a float, 6 keep "0.001" from becoming "0.00100000005". */
const char *remat_float_str(float v, char *buf, size_t cap) {
    for (int prec = 6; prec <= 9; prec++) {
        snprintf(buf, cap, "%.*g", prec, (double)v);
        if (strtof(buf, NULL) == v) break;
    }
    return buf;
}

const char *remat__dims_str(int ndim, const int64_t *dims, char *buf, size_t cap) {
    size_t used = (size_t)snprintf(buf, cap, "(");
    for (int i = 0; i < ndim && used < cap; i++)
        used += (size_t)snprintf(buf + used, cap - used, "%s%lld", i ? ", " : "", (long long)dims[i]);
    if (used < cap) snprintf(buf + used, cap - used, ")");
    return buf;
}

const char *remat__shape_str(const remat__shape *s, char *buf, size_t cap) {
    return remat__dims_str(s->ndim, s->d, buf, cap);
}
