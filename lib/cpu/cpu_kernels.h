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

/* Every CPU kernel, X(name, argument type, isa): an op's kernels take one
 * line each here (their FO_CPU(name) definitions are in lib/cpu/<op>.c). */
#define FO_CPU_KERNELS(X, isa)                                           \
    X(bias_scale_relu_forward, fo_bias_scale_relu_forward_params, isa)   \
    X(bias_scale_relu_backward, fo_bias_scale_relu_backward_params, isa) \
    X(square, fo_square_params, isa)                                     \
    X(reduce_sum, fo_reduce_sum_params, isa)                             \
    X(norm_forward, fo_norm_forward_params, isa)                         \
    X(norm_backward, fo_norm_backward_params, isa)                       \
    X(swiglu, fo_swiglu_params, isa)                                     \
    X(geglu, fo_geglu_params, isa)                                       \
    X(clamped_swiglu, fo_clamped_swiglu_args, isa)                       \
    X(rope, fo_rope_params, isa)                                         \
    X(cross_entropy, fo_cross_entropy_params, isa)                       \
    X(scale_rows, fo_scale_rows_params, isa)                             \
    X(dyt_forward, fo_dyt_args, isa)                                     \
    X(dyt_backward, fo_dyt_args, isa)                                    \
    X(quantize_fp8, fo_quantize_fp8_args, isa)

#define FO_CPU_FIELD(name, type, isa) void (*name)(const type *a);
#define FO_CPU_DECLARE(name, type, isa) void FO_CPU_NAME(name, isa)(const type *);
#define FO_CPU_ENTRY(name, type, isa) FO_CPU_NAME(name, isa),

typedef struct fo_cpu_kernels {
    const char *isa;
    FO_CPU_KERNELS(FO_CPU_FIELD, unused)
} fo_cpu_kernels;

/* Every instruction set's table, declared for the one that picks. */
#define FO_CPU_DECLARE_TABLE(isa) FO_CPU_KERNELS(FO_CPU_DECLARE, isa)
#define FO_CPU_TABLE(isa) \
    { #isa, FO_CPU_KERNELS(FO_CPU_ENTRY, isa) }

/* An op's FP8 output (fo_fp8_out) on the CPU, for this instruction set:
 * cpu/quantize_fp8.c quantizes rows x cols values that piece(src, buf, r,
 * c0, n) gives n at a time (r's columns c0 .. c0 + n, n <= CPU_CHUNK; in buf
 * or elsewhere); maxima holds min(rows, FO_FP8_GROUPS) floats (tensorwise). */
typedef const float *(*fo_fp8_piece_fn)(const void *src, float *buf, int64_t r, int64_t c0,
                                        int64_t n);
#define FO_FP8_GROUPS 256
void FO_CPU(write_fp8)(const fo_fp8_out *out, int64_t rows, int64_t cols, fo_fp8_piece_fn piece,
                       const void *src, float *maxima);

/* rows x cols of x (its row stride and dtype) as FP8: fo_quantize_fp8's cast. */
void FO_CPU(write_fp8_rows)(const fo_fp8_out *out, int64_t rows, int64_t cols, const void *x,
                            int64_t stride, int dtype, float *maxima);

/* An op's forward as FP8 (swiglu, geglu): forward(op, r, c0, n, dst) writes
 * row r's outputs c0 .. c0 + n (n <= CPU_CHUNK) into dst as `dtype`. */
typedef void (*fo_forward_piece_fn)(const void *op, int64_t r, int64_t c0, int64_t n, void *dst);
void FO_CPU(write_fp8_output)(const fo_fp8_out *out, int64_t rows, int64_t cols,
                              fo_forward_piece_fn forward, const void *op, int dtype);

/* The kernels of the instruction set in use (chosen on the first call). */
const fo_cpu_kernels *fo_cpu(void);

#endif
