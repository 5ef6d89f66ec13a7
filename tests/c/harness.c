/* harness.c: see harness.h. */
#include "harness.h"

#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- failure reporting --------------------------------------------------- */

enum { MAX_PRINTED = 60 };

static pthread_mutex_t report_lock = PTHREAD_MUTEX_INITIALIZER;
static long checks_run, checks_failed;
static const char *current_section = "(start)";

int check_at(int ok, const char *file, int line, const char *fmt, ...) {
    pthread_mutex_lock(&report_lock);
    checks_run++;
    if (!ok) {
        checks_failed++;
        if (checks_failed <= MAX_PRINTED) {
            va_list args;
            va_start(args, fmt);
            fprintf(stderr, "FAIL [%s] %s:%d: ", current_section, file, line);
            vfprintf(stderr, fmt, args);
            fputc('\n', stderr);
            va_end(args);
        } else if (checks_failed == MAX_PRINTED + 1) {
            fprintf(stderr, "FAIL ... (further failures counted, not printed)\n");
        }
    }
    pthread_mutex_unlock(&report_lock);
    return ok;
}

void section(const char *name) {
    pthread_mutex_lock(&report_lock);
    current_section = name;
    pthread_mutex_unlock(&report_lock);
    printf("-- %s\n", name);
    fflush(stdout);
}

int finish(void) {
    printf("%ld checks, %ld failed\n", checks_run, checks_failed);
    if (checks_failed)
        fprintf(stderr, "%ld FAILED checks (the first ones are above)\n",
                checks_failed);
    return checks_failed ? 1 : 0;
}

/* ---- guarded buffers ----------------------------------------------------- */

guarded guarded_new(size_t bytes, size_t offset) {
    guarded g;
    size_t total = GUARD_BYTES + offset + bytes + GUARD_BYTES;
    total = (total + 63) / 64 * 64; /* aligned_alloc wants a multiple */
    g.raw = aligned_alloc(64, total);
    if (!g.raw) {
        fprintf(stderr, "out of memory (%zu bytes)\n", total);
        exit(2);
    }
    g.data = g.raw + GUARD_BYTES + offset;
    g.bytes = bytes;
    g.fill = POISON;
    memset(g.raw, POISON, total);
    return g;
}

void guarded_fill(guarded *g, unsigned char byte) {
    g->fill = byte;
    memset(g->data - GUARD_BYTES, byte, g->bytes + 2 * GUARD_BYTES);
}

int guards_intact(const guarded *g) {
    for (size_t i = 1; i <= GUARD_BYTES; i++)
        if (g->data[-(ptrdiff_t)i] != g->fill ||
            g->data[g->bytes + i - 1] != g->fill)
            return 0;
    return 1;
}

int untouched(const guarded *g) {
    if (!guards_intact(g))
        return 0;
    for (size_t i = 0; i < g->bytes; i++)
        if (g->data[i] != g->fill)
            return 0;
    return 1;
}

void guarded_free(guarded *g) {
    free(g->raw);
    g->raw = g->data = NULL;
}

/* ---- random numbers ------------------------------------------------------ */

uint64_t rng_next(uint64_t *state) {
    uint64_t z = (*state += 0x9e3779b97f4a7c15u);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
}

int64_t rng_int(uint64_t *state, int64_t lo, int64_t hi) {
    return lo + (int64_t)(rng_next(state) % (uint64_t)(hi - lo + 1));
}

double rng_dyadic(uint64_t *state) { return (double)rng_int(state, -64, 64) / 16.0; }

double rng_uniform(uint64_t *state) {
    /* 53 random bits in [0, 1), mapped to (-1, 1) */
    return ldexp((double)(rng_next(state) >> 11), -53) * 2.0 - 1.0;
}

/* ---- the float16 / bfloat16 reference -------------------------------------
 * A format with `mant` stored fraction bits and `expo` exponent bits. */

static void half_format(int dtype, int *mant, int *expo) {
    if (dtype == FO_DTYPE_BF16) {
        *mant = 7;
        *expo = 8;
    } else {
        *mant = 10;
        *expo = 5;
    }
}

double half_decode(uint16_t bits, int dtype) {
    int mant, expo;
    half_format(dtype, &mant, &expo);
    int bias = (1 << (expo - 1)) - 1;
    int e = (bits >> mant) & ((1 << expo) - 1);
    int m = bits & ((1 << mant) - 1);
    double magnitude;
    if (e == (1 << expo) - 1)
        magnitude = m ? NAN : INFINITY;
    else if (e == 0) /* subnormal: no implicit bit, exponent of the smallest normal */
        magnitude = ldexp(m, 1 - bias - mant);
    else
        magnitude = ldexp(m + (1 << mant), e - bias - mant);
    return (bits & 0x8000u) ? -magnitude : magnitude;
}

uint16_t half_encode(double v, int dtype) {
    int mant, expo;
    half_format(dtype, &mant, &expo);
    int bias = (1 << (expo - 1)) - 1;
    int32_t inf_bits = ((1 << expo) - 1) << mant;
    uint16_t sign = signbit(v) ? 0x8000u : 0u;
    if (isnan(v))
        return (uint16_t)(inf_bits | (1 << (mant - 1))); /* quiet NaN */
    double a = fabs(v);
    if (isinf(a))
        return (uint16_t)(sign | inf_bits);
    /* E: the exponent of a, no less than that of the smallest normal; the
     * representable numbers near a are then multiples of 2^(E - mant). */
    int e;
    frexp(a, &e);
    int E = a == 0.0 ? 1 - bias : e - 1;
    if (E < 1 - bias)
        E = 1 - bias;
    double n = nearbyint(ldexp(a, mant - E)); /* ties to even */
    /* (E + bias - 1) << mant plus n: a carry of n into 2^(mant+1) moves the
     * exponent up, and subnormals (E + bias - 1 == 0) come out as n. */
    int64_t magnitude = ((int64_t)(E + bias - 1) << mant) + (int64_t)n;
    if (magnitude >= inf_bits)
        return (uint16_t)(sign | inf_bits);
    return (uint16_t)(sign | magnitude);
}

/* ---- elements by dtype --------------------------------------------------- */

size_t dtype_size(int dtype) {
    switch (dtype) {
    case FO_DTYPE_F32: return 4;
    case FO_DTYPE_F64: return 8;
    case FO_DTYPE_F16:
    case FO_DTYPE_BF16: return 2;
    default: return 0;
    }
}

const char *dtype_label(int dtype) {
    switch (dtype) {
    case FO_DTYPE_F32: return "f32";
    case FO_DTYPE_F64: return "f64";
    case FO_DTYPE_F16: return "f16";
    case FO_DTYPE_BF16: return "bf16";
    default: return "?";
    }
}

uint64_t get_bits(const void *base, int64_t i, int dtype) {
    const unsigned char *p = (const unsigned char *)base + i * (int64_t)dtype_size(dtype);
    switch (dtype) {
    case FO_DTYPE_F32: {
        uint32_t u;
        memcpy(&u, p, 4);
        return u;
    }
    case FO_DTYPE_F64: {
        uint64_t u;
        memcpy(&u, p, 8);
        return u;
    }
    default: {
        uint16_t u;
        memcpy(&u, p, 2);
        return u;
    }
    }
}

void put_bits(void *base, int64_t i, int dtype, uint64_t bits) {
    unsigned char *p = (unsigned char *)base + i * (int64_t)dtype_size(dtype);
    switch (dtype) {
    case FO_DTYPE_F32: {
        uint32_t u = (uint32_t)bits;
        memcpy(p, &u, 4);
        break;
    }
    case FO_DTYPE_F64:
        memcpy(p, &bits, 8);
        break;
    default: {
        uint16_t u = (uint16_t)bits;
        memcpy(p, &u, 2);
        break;
    }
    }
}

uint64_t round_bits(double v, int dtype) {
    switch (dtype) {
    case FO_DTYPE_F32: {
        float f = (float)v;
        uint32_t u;
        memcpy(&u, &f, 4);
        return u;
    }
    case FO_DTYPE_F64: {
        uint64_t u;
        memcpy(&u, &v, 8);
        return u;
    }
    default:
        return half_encode(v, dtype);
    }
}

void put(void *base, int64_t i, int dtype, double v) {
    put_bits(base, i, dtype, round_bits(v, dtype));
}

double get(const void *base, int64_t i, int dtype) {
    uint64_t bits = get_bits(base, i, dtype);
    switch (dtype) {
    case FO_DTYPE_F32: {
        uint32_t u = (uint32_t)bits;
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
    case FO_DTYPE_F64: {
        double d;
        memcpy(&d, &bits, 8);
        return d;
    }
    default:
        return half_decode((uint16_t)bits, dtype);
    }
}

static uint64_t sign_bit(int dtype) {
    switch (dtype) {
    case FO_DTYPE_F32: return UINT64_C(1) << 31;
    case FO_DTYPE_F64: return UINT64_C(1) << 63;
    default: return UINT64_C(1) << 15;
    }
}

int bits_are_nan(uint64_t bits, int dtype) {
    switch (dtype) {
    case FO_DTYPE_F32: return (bits & 0x7fffffffu) > 0x7f800000u;
    case FO_DTYPE_F64:
        return (bits & ~(UINT64_C(1) << 63)) > UINT64_C(0x7ff0000000000000);
    case FO_DTYPE_F16: return (bits & 0x7fffu) > 0x7c00u;
    default: return (bits & 0x7fffu) > 0x7f80u;
    }
}

int same_value(uint64_t a, uint64_t b, int dtype) {
    uint64_t magnitude = ~sign_bit(dtype);
    return a == b || (bits_are_nan(a, dtype) && bits_are_nan(b, dtype)) ||
           ((a & magnitude) == 0 && (b & magnitude) == 0);
}

/* ---- comparing an output ------------------------------------------------- */

int check_output(const char *what, const guarded *out, const double *want,
                 const double *tol, int64_t n, int dtype) {
    enum { MAX_REPORTED = 5 };
    uint64_t poison_bits = 0;
    memset(&poison_bits, out->fill, dtype_size(dtype));
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) {
        uint64_t got_bits = get_bits(out->data, i, dtype);
        double got = get(out->data, i, dtype);
        int ok;
        if (tol)
            ok = got == want[i] || (isnan(got) && isnan(want[i])) ||
                 fabs(got - want[i]) <= tol[i];
        else
            ok = same_value(got_bits, round_bits(want[i], dtype), dtype);
        if (!ok && ++bad <= MAX_REPORTED)
            CHECK(0,
                  "%s (%s): element %" PRId64 " is %.17g (bits 0x%" PRIx64
                  "%s), want %.17g (bits 0x%" PRIx64 ")%s",
                  what, dtype_label(dtype), i, got, got_bits,
                  got_bits == poison_bits ? ", never written" : "", want[i],
                  round_bits(want[i], dtype), tol ? " within the tolerance" : "");
    }
    CHECK(bad <= MAX_REPORTED, "%s (%s): %" PRId64 " elements wrong in all", what,
          dtype_label(dtype), bad);
    int guards = CHECK(guards_intact(out),
                       "%s (%s): written outside its %zu bytes (a guard changed)",
                       what, dtype_label(dtype), out->bytes);
    return bad == 0 && guards;
}

/* ---- the struct entry points with their fields as parameters ------------- */

int relu_forward_call(int device_type, int device_index, uintptr_t stream,
                      uintptr_t y, uintptr_t mask, uintptr_t x,
                      int64_t x_row_stride, uintptr_t bias, int64_t rows,
                      int64_t cols, int dtype, int bias_dtype, double scale) {
    const fo_bias_scale_relu_forward_args a = {
        .struct_size = sizeof a, .device_type = device_type,
        .device_index = device_index, .stream = stream, .y = y, .mask = mask,
        .x = x, .x_row_stride = x_row_stride, .bias = bias, .rows = rows,
        .cols = cols, .dtype = dtype, .bias_dtype = bias_dtype, .scale = scale};
    return fo_bias_scale_relu_forward(&a);
}

fo_bias_scale_relu_backward_args relu_backward_args(
    int device_type, int device_index, uintptr_t stream, uintptr_t dx,
    uintptr_t dbias, uintptr_t workspace, int64_t workspace_bytes,
    uintptr_t dy, int64_t dy_row_stride, uintptr_t mask, int64_t rows,
    int64_t cols, int dtype, int bias_dtype, double scale) {
    const fo_bias_scale_relu_backward_args a = {
        .struct_size = sizeof a, .device_type = device_type,
        .device_index = device_index, .stream = stream, .dx = dx,
        .dbias = dbias, .workspace = workspace,
        .workspace_bytes = workspace_bytes, .dy = dy,
        .dy_row_stride = dy_row_stride, .mask = mask, .rows = rows,
        .cols = cols, .dtype = dtype, .bias_dtype = bias_dtype, .scale = scale};
    return a;
}

int relu_backward_call(int device_type, int device_index, uintptr_t stream,
                       uintptr_t dx, uintptr_t dbias, uintptr_t workspace,
                       int64_t workspace_bytes, uintptr_t dy,
                       int64_t dy_row_stride, uintptr_t mask, int64_t rows,
                       int64_t cols, int dtype, int bias_dtype, double scale) {
    const fo_bias_scale_relu_backward_args a = relu_backward_args(
        device_type, device_index, stream, dx, dbias, workspace,
        workspace_bytes, dy, dy_row_stride, mask, rows, cols, dtype,
        bias_dtype, scale);
    return fo_bias_scale_relu_backward(&a);
}

int square_forward_call(int device_type, int device_index, uintptr_t stream,
                        uintptr_t y, uintptr_t x, int64_t x_row_stride,
                        int64_t rows, int64_t cols, int dtype) {
    const fo_square_forward_args a = {
        .struct_size = sizeof a, .device_type = device_type,
        .device_index = device_index, .stream = stream, .y = y, .x = x,
        .x_row_stride = x_row_stride, .rows = rows, .cols = cols,
        .dtype = dtype};
    return fo_square_forward(&a);
}

int square_backward_call(int device_type, int device_index, uintptr_t stream,
                         uintptr_t dx, uintptr_t dy, int64_t dy_row_stride,
                         uintptr_t x, int64_t x_row_stride, int64_t rows,
                         int64_t cols, int dtype) {
    const fo_square_backward_args a = {
        .struct_size = sizeof a, .device_type = device_type,
        .device_index = device_index, .stream = stream, .dx = dx, .dy = dy,
        .dy_row_stride = dy_row_stride, .x = x, .x_row_stride = x_row_stride,
        .rows = rows, .cols = cols, .dtype = dtype};
    return fo_square_backward(&a);
}

fo_reduce_sum_args reduce_sum_args(int device_type, int device_index,
                                   uintptr_t stream, uintptr_t out,
                                   uintptr_t workspace, int64_t workspace_bytes,
                                   uintptr_t x, int64_t numel, int dtype) {
    const fo_reduce_sum_args a = {
        .struct_size = sizeof a, .device_type = device_type,
        .device_index = device_index, .stream = stream, .out = out,
        .workspace = workspace, .workspace_bytes = workspace_bytes, .x = x,
        .numel = numel, .dtype = dtype};
    return a;
}

int reduce_sum_call(int device_type, int device_index, uintptr_t stream,
                    uintptr_t out, uintptr_t workspace, int64_t workspace_bytes,
                    uintptr_t x, int64_t numel, int dtype) {
    const fo_reduce_sum_args a =
        reduce_sum_args(device_type, device_index, stream, out, workspace,
                        workspace_bytes, x, numel, dtype);
    return fo_reduce_sum(&a);
}

int norm_forward_call(int device_type, int device_index, uintptr_t stream,
                      uintptr_t y, uintptr_t residual_out, uintptr_t mean,
                      uintptr_t rstd, uintptr_t x, int64_t x_row_stride,
                      uintptr_t residual, int64_t residual_row_stride,
                      int residual_dtype, uintptr_t weight, uintptr_t bias,
                      int param_dtype, int64_t rows, int64_t cols, int dtype,
                      int kind, double eps, double dropout_p, uint64_t seed,
                      uint64_t offset) {
    const fo_norm_forward_args a = {
        .struct_size = sizeof a, .device_type = device_type,
        .device_index = device_index, .stream = stream, .y = y,
        .residual_out = residual_out, .mean = mean, .rstd = rstd, .x = x,
        .x_row_stride = x_row_stride, .residual = residual,
        .residual_row_stride = residual_row_stride,
        .residual_dtype = residual_dtype, .weight = weight, .bias = bias,
        .param_dtype = param_dtype, .rows = rows, .cols = cols,
        .dtype = dtype, .kind = kind, .eps = eps, .dropout_p = dropout_p,
        .seed = seed, .offset = offset};
    return fo_norm_forward(&a);
}

int norm_backward_call(int device_type, int device_index, uintptr_t stream,
                       uintptr_t dx, uintptr_t dresidual, uintptr_t dweight,
                       uintptr_t dbias, uintptr_t workspace,
                       int64_t workspace_bytes, uintptr_t dy,
                       int64_t dy_row_stride, uintptr_t dresidual_out,
                       int64_t dresidual_out_row_stride, uintptr_t h,
                       int64_t h_row_stride, int h_dtype, uintptr_t mean,
                       uintptr_t rstd, uintptr_t weight, int param_dtype,
                       int64_t rows, int64_t cols, int dtype, int kind,
                       double dropout_p, uint64_t seed, uint64_t offset) {
    const fo_norm_backward_args a = {
        .struct_size = sizeof a, .device_type = device_type,
        .device_index = device_index, .stream = stream, .dx = dx,
        .dresidual = dresidual, .dweight = dweight, .dbias = dbias,
        .workspace = workspace, .workspace_bytes = workspace_bytes, .dy = dy,
        .dy_row_stride = dy_row_stride, .dresidual_out = dresidual_out,
        .dresidual_out_row_stride = dresidual_out_row_stride, .h = h,
        .h_row_stride = h_row_stride, .h_dtype = h_dtype, .mean = mean,
        .rstd = rstd, .weight = weight, .param_dtype = param_dtype,
        .rows = rows, .cols = cols, .dtype = dtype, .kind = kind,
        .dropout_p = dropout_p, .seed = seed, .offset = offset};
    return fo_norm_backward(&a);
}
