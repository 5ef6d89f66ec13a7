/* harness.h: what the C API tests share: failure reporting, guarded output
 * buffers, a deterministic PRNG, element access by dtype code, and a
 * float16/bfloat16 reference written independently of lib/cpu_convert.c
 * (frexp/nearbyint on doubles instead of bit manipulation of floats), so the
 * tests do not check the library's conversions against themselves. */
#ifndef FO_TEST_HARNESS_H
#define FO_TEST_HARNESS_H

#include <stddef.h>
#include <stdint.h>

#include "fused_ops.h"

/* ---- failure reporting ---------------------------------------------------
 * CHECK(cond, fmt, ...) records a failure when cond is false and prints it
 * (the first MAX_PRINTED of them, with the current section and the line); it
 * returns cond so callers can stop early. Safe to call from several threads. */
#define CHECK(cond, ...) check_at((cond) != 0, __FILE__, __LINE__, __VA_ARGS__)

int check_at(int ok, const char *file, int line, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;

/* Names the group of checks that follows (printed with each failure). */
void section(const char *name);

/* Prints a summary; @return the process exit status (0 when all passed). */
int finish(void);

/* ---- guarded buffers -----------------------------------------------------
 * `bytes` of data with GUARD_BYTES of guard on each side. Everything starts
 * as POISON, so a check can tell "never written" (still POISON) apart from a
 * written element, and "written out of bounds" (a guard byte changed). The
 * data starts `offset` bytes past a 64-byte boundary (0: 64-byte aligned;
 * an element size: aligned to the element but not to 16 bytes). */
#define GUARD_BYTES 64
#define POISON 0xA5

typedef struct guarded {
    unsigned char *raw;
    unsigned char *data;
    size_t bytes;
    unsigned char fill; /* the byte data and guards were last filled with */
} guarded;

guarded guarded_new(size_t bytes, size_t offset); /* filled with POISON */
void guarded_fill(guarded *g, unsigned char byte); /* data and guards */
int guards_intact(const guarded *g);               /* still `fill` */
int untouched(const guarded *g);                   /* data and guards */
void guarded_free(guarded *g);
static inline uintptr_t addr(const guarded *g) { return (uintptr_t)g->data; }

/* ---- deterministic random numbers (splitmix64) --------------------------- */
uint64_t rng_next(uint64_t *state);
int64_t rng_int(uint64_t *state, int64_t lo, int64_t hi); /* lo..hi inclusive */
/* k / 16 with |k| <= 64: few significant bits, so sums and products of a few
 * of them are exact in every dtype's arithmetic and the expected results can
 * be compared bit for bit. */
double rng_dyadic(uint64_t *state);
double rng_uniform(uint64_t *state); /* full precision, in (-1, 1) */

/* ---- elements by dtype code ---------------------------------------------- */
size_t dtype_size(int dtype);
const char *dtype_label(int dtype);
/* Stores v rounded to the dtype (to nearest, ties to even). */
void put(void *base, int64_t i, int dtype, double v);
double get(const void *base, int64_t i, int dtype);
uint64_t get_bits(const void *base, int64_t i, int dtype);
void put_bits(void *base, int64_t i, int dtype, uint64_t bits);
/* The bits of v rounded to the dtype: the exact expected output. */
uint64_t round_bits(double v, int dtype);
int bits_are_nan(uint64_t bits, int dtype);
/* Same value: equal bits, or both NaN (any payload), or both zero (either
 * sign: relu and masked gradients may give -0, which compares equal). */
int same_value(uint64_t a, uint64_t b, int dtype);

/* ---- the independent float16 / bfloat16 reference ------------------------ */
double half_decode(uint16_t bits, int dtype);  /* exact */
uint16_t half_encode(double v, int dtype);     /* RNE; NaN -> quiet NaN */

/* ---- comparing an output ---------------------------------------------------
 * Checks n elements of `out` against want[i] (exact values, rounded here to
 * the dtype). With tol == NULL the bits must match (same_value); else
 * |got - want[i]| <= tol[i]. Also checks the guards. Reports at most a few
 * mismatches per call. @return 1 if everything matched. */
int check_output(const char *what, const guarded *out, const double *want,
                 const double *tol, int64_t n, int dtype);

/* ---- the struct entry points with their fields as parameters --------------
 * The norm, bias/relu, square and reduce_sum entry points take one argument
 * struct; these fill it (struct_size = its sizeof, every field from the parameter of the same
 * name, in the struct's order) and make the call, so a test's table lists a
 * call on one line. The struct_size rules are tested on the structs
 * themselves (test_api.c). */
int relu_forward_call(int device_type, int device_index, uintptr_t stream,
                      uintptr_t y, uintptr_t mask, uintptr_t x,
                      int64_t x_row_stride, uintptr_t bias, int64_t rows,
                      int64_t cols, int dtype, int bias_dtype, double scale);
fo_bias_scale_relu_backward_args relu_backward_args(
    int device_type, int device_index, uintptr_t stream, uintptr_t dx,
    uintptr_t dbias, uintptr_t workspace, int64_t workspace_bytes,
    uintptr_t dy, int64_t dy_row_stride, uintptr_t mask, int64_t rows,
    int64_t cols, int dtype, int bias_dtype, double scale);
int relu_backward_call(int device_type, int device_index, uintptr_t stream,
                       uintptr_t dx, uintptr_t dbias, uintptr_t workspace,
                       int64_t workspace_bytes, uintptr_t dy,
                       int64_t dy_row_stride, uintptr_t mask, int64_t rows,
                       int64_t cols, int dtype, int bias_dtype, double scale);
int square_forward_call(int device_type, int device_index, uintptr_t stream,
                        uintptr_t y, uintptr_t x, int64_t x_row_stride,
                        int64_t rows, int64_t cols, int dtype);
int square_backward_call(int device_type, int device_index, uintptr_t stream,
                         uintptr_t dx, uintptr_t dy, int64_t dy_row_stride,
                         uintptr_t x, int64_t x_row_stride, int64_t rows,
                         int64_t cols, int dtype);
fo_reduce_sum_args reduce_sum_args(int device_type, int device_index,
                                   uintptr_t stream, uintptr_t out,
                                   uintptr_t workspace, int64_t workspace_bytes,
                                   uintptr_t x, int64_t numel, int dtype);
int reduce_sum_call(int device_type, int device_index, uintptr_t stream,
                    uintptr_t out, uintptr_t workspace, int64_t workspace_bytes,
                    uintptr_t x, int64_t numel, int dtype);
int norm_forward_call(int device_type, int device_index, uintptr_t stream,
                      uintptr_t y, uintptr_t residual_out, uintptr_t mean,
                      uintptr_t rstd, uintptr_t x, int64_t x_row_stride,
                      uintptr_t residual, int64_t residual_row_stride,
                      int residual_dtype, uintptr_t weight, uintptr_t bias,
                      int param_dtype, int64_t rows, int64_t cols, int dtype,
                      int kind, double eps, double dropout_p, uint64_t seed,
                      uint64_t offset);
int norm_backward_call(int device_type, int device_index, uintptr_t stream,
                       uintptr_t dx, uintptr_t dresidual, uintptr_t dweight,
                       uintptr_t dbias, uintptr_t workspace,
                       int64_t workspace_bytes, uintptr_t dy,
                       int64_t dy_row_stride, uintptr_t dresidual_out,
                       int64_t dresidual_out_row_stride, uintptr_t h,
                       int64_t h_row_stride, int h_dtype, uintptr_t mean,
                       uintptr_t rstd, uintptr_t weight, int param_dtype,
                       int64_t rows, int64_t cols, int dtype, int kind,
                       double dropout_p, uint64_t seed, uint64_t offset);

#endif
