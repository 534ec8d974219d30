/* format.c: how remat writes a float as text where the text is compared
 * later: a training state's hyper-parameters (train/state.c) and the
 * command line's run options (cli/cmd_train.c) are both written by
 * remat_float_str, so a resume that compares them as strings compares
 * the same spelling of the same float.
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
