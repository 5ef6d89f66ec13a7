/* cpu_isa.c: which instruction set's CPU kernels run (see cpu/cpu_kernels.h).
 * Compiled for the baseline only: it must run on every x86-64. */
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu_kernels.h"

FO_CPU_DECLARE_TABLE(baseline)
static const fo_cpu_kernels baseline = FO_CPU_TABLE(baseline);

#if defined(FO_CPU_X86)
FO_CPU_DECLARE_TABLE(avx2)
FO_CPU_DECLARE_TABLE(avx512)
static const fo_cpu_kernels avx2 = FO_CPU_TABLE(avx2);
static const fo_cpu_kernels avx512 = FO_CPU_TABLE(avx512);

/* What gcc's -march=x86-64-v3 and -v4 let the compiler use. */
static int runs_avx2(void) {
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
           __builtin_cpu_supports("bmi2");
}

static int runs_avx512(void) {
    return runs_avx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
           __builtin_cpu_supports("avx512cd");
}
#endif

static const fo_cpu_kernels *choose(void) {
#if defined(FO_CPU_X86)
    __builtin_cpu_init();
    const char *wanted = getenv("FUSED_OPS_PY_CPU_ISA");
    const int cap = !wanted || !*wanted               ? 2
                    : strcmp(wanted, "baseline") == 0 ? 0
                    : strcmp(wanted, "avx2") == 0     ? 1
                                                      : 2;
    if (cap >= 2 && runs_avx512()) return &avx512;
    if (cap >= 1 && runs_avx2()) return &avx2;
#endif
    return &baseline;
}

/* Racing first calls both choose the same table: the store is idempotent. */
static const fo_cpu_kernels *_Atomic chosen;

const fo_cpu_kernels *fo_cpu(void) {
    const fo_cpu_kernels *k = chosen;
    if (!k) chosen = k = choose();
    return k;
}

const char *fo_cpu_isa(void) { return fo_cpu()->isa; }
