/* switches.c: the environment switches of the CUDA kernels' bf16 policy,
 * read where a plan for the device is made (plan/precision.c, with or
 * without a GPU here) and where a session's kernels are chosen
 * (cuda/backend.cu, cuda/k_conv.cu), so that both read them alike and a
 * misspelt value is refused, naming it, rather than ignored.
 */
#include "../remat-impl.h"

#include <stdlib.h>
#include <string.h>

remat_status remat__cuda_bf16_env(int *conv_nhwc) {
    const char *e = getenv("REMAT_CUDA_BF16"), *c = getenv("REMAT_CUDA_CONV16");
    if (e && *e && strcmp(e, "views") && strcmp(e, "elementwise-views"))
        return remat__err(REMAT_INVALID,
                          "REMAT_CUDA_BF16 is '%s': it takes views or elementwise-views (unset: "
                          "the native bf16 kernels)",
                          e);
    *conv_nhwc = c && !strcmp(c, "nhwc");
    if (c && *c && !*conv_nhwc && strcmp(c, "nchw"))
        return remat__err(REMAT_INVALID, "REMAT_CUDA_CONV16 is '%s': it takes nchw (the default) or nhwc", c);
    return REMAT_OK;
}
