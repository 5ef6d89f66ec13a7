/* cpu_kernels.h: the CPU kernels of every op, compiled once for each
 * instruction set the library carries (meson.build: baseline x86-64, AVX2
 * and AVX-512 on x86-64; the baseline elsewhere), and the table of them that
 * the entry points call through.
 *
 * A kernel file names its kernels FO_CPU(name): fo_cpu_<name>_<isa> in the
 * object built for <isa>, so the three copies link side by side. fo_cpu()
 * picks the table once (cpu_isa.c): the best set this CPU runs, or the one
 * FUSED_OPS_PY_CPU_ISA names (baseline, avx2 or avx512), so tests can run
 * every path on one machine. */
#ifndef FO_CPU_KERNELS_H
#define FO_CPU_KERNELS_H

#include "../internal.h"

#ifndef FO_CPU_ISA
#define FO_CPU_ISA baseline
#endif
#define FO_CPU_JOIN(name, isa) fo_cpu_##name##_##isa
#define FO_CPU_NAME(name, isa) FO_CPU_JOIN(name, isa)
#define FO_CPU(name) FO_CPU_NAME(name, FO_CPU_ISA)

typedef struct fo_cpu_kernels {
    const char *isa;
    void (*bias_scale_relu_forward)(const fo_bias_scale_relu_forward_params *a);
    void (*bias_scale_relu_backward)(const fo_bias_scale_relu_backward_params *a);
    void (*square)(const fo_square_args *a);
    void (*reduce_sum)(const fo_reduce_sum_args *a);
    void (*norm_forward)(const fo_norm_forward_params *a);
    void (*norm_backward)(const fo_norm_backward_params *a);
    void (*swiglu)(const fo_swiglu_args *a);
    void (*geglu)(const fo_geglu_params *a);
    void (*clamped_swiglu)(const fo_clamped_swiglu_args *a);
    void (*rope)(const fo_rope_params *a);
    void (*cross_entropy)(const fo_cross_entropy_params *a);
    void (*scale_rows)(const fo_scale_rows_params *a);
} fo_cpu_kernels;

/* Every instruction set's table, declared for the one that picks. */
#define FO_CPU_DECLARE_TABLE(isa)                                                                \
    void FO_CPU_NAME(bias_scale_relu_forward, isa)(const fo_bias_scale_relu_forward_params *);   \
    void FO_CPU_NAME(bias_scale_relu_backward, isa)(const fo_bias_scale_relu_backward_params *); \
    void FO_CPU_NAME(square, isa)(const fo_square_args *);                                       \
    void FO_CPU_NAME(reduce_sum, isa)(const fo_reduce_sum_args *);                               \
    void FO_CPU_NAME(norm_forward, isa)(const fo_norm_forward_params *);                         \
    void FO_CPU_NAME(norm_backward, isa)(const fo_norm_backward_params *);                       \
    void FO_CPU_NAME(swiglu, isa)(const fo_swiglu_args *);                                       \
    void FO_CPU_NAME(geglu, isa)(const fo_geglu_params *);                                       \
    void FO_CPU_NAME(clamped_swiglu, isa)(const fo_clamped_swiglu_args *);                       \
    void FO_CPU_NAME(rope, isa)(const fo_rope_params *);                                         \
    void FO_CPU_NAME(cross_entropy, isa)(const fo_cross_entropy_params *);                       \
    void FO_CPU_NAME(scale_rows, isa)(const fo_scale_rows_params *);

#define FO_CPU_TABLE(isa)                                                                       \
    {                                                                                           \
#isa, FO_CPU_NAME(bias_scale_relu_forward, isa),                                        \
            FO_CPU_NAME(bias_scale_relu_backward, isa), FO_CPU_NAME(square, isa),               \
            FO_CPU_NAME(reduce_sum, isa), FO_CPU_NAME(norm_forward, isa),                       \
            FO_CPU_NAME(norm_backward, isa), FO_CPU_NAME(swiglu, isa), FO_CPU_NAME(geglu, isa), \
            FO_CPU_NAME(clamped_swiglu, isa), FO_CPU_NAME(rope, isa),                           \
            FO_CPU_NAME(cross_entropy, isa), FO_CPU_NAME(scale_rows, isa)                       \
    }

/* The kernels of the instruction set in use (chosen on the first call). */
const fo_cpu_kernels *fo_cpu(void);

#endif
