/* fuzz_ops.c: a libFuzzer target for the public C API (lib/fused_ops.h) on
 * the CPU backend: "never crash, never corrupt". Built and run by
 * tests/fuzz/run.sh (clang, -fsanitize=fuzzer,address,undefined).
 *
 * Each input decodes into one call: an op (the eighteen entry points, or one
 * of the five *_workspace_bytes queries), its dtypes (invalid codes too), its
 * shape (0, negative, huge), the struct_size of an argument struct (or a
 * NULL struct), the row strides of its inputs (dense, padded,
 * 0, overlapping, negative, at the library's overflow limit, raw; RoPE's
 * 4-d q and k and 3-d tables get a stride a dimension), which
 * optional operands are passed, how each address is made (an exact
 * allocation, one aligned only to the element, misaligned, null, or a
 * PROT_NONE guard page), and the scalars (device, scale, kind, eps,
 * dropout_p, seed, offset, workspace_bytes). Element values come from the
 * rest of the input, then from a PRNG it seeds: k/16 values, which every
 * dtype holds exactly; with the "wild" flag also NaN, infinities, extremes
 * and random bit patterns.
 *
 * A model of the header's contract, written here from lib/fused_ops.h, says
 * whether the call must succeed, must fail, or may do either (where the
 * header leaves it open). Every operand the call may touch is a malloc of
 * exactly the bytes the contract gives it, so AddressSanitizer reports any
 * access past it; an operand too big to allocate is only passed, as the guard
 * page, to a call that must fail (or where it is empty). Then:
 *  - a failure: the model allows it, the status is a documented code, there
 *    is an error message, and no buffer changed;
 *  - a success: the model allows it, no input changed, every output matches
 *    a reference computed here in double (within the output dtype's
 *    rounding), and a second identical call gives the same bits.
 * Anything else prints the call and aborts, which libFuzzer reports.
 */
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS */

#include <float.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "fused_ops.h"
#include "harness.h" /* get/put: an f16/bf16 codec independent of the library */

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define COUNT(array) (sizeof(array) / sizeof((array)[0]))

enum { F32 = FO_DTYPE_F32, F16 = FO_DTYPE_F16, BF16 = FO_DTYPE_BF16, F64 = FO_DTYPE_F64 };

/* Limits that keep one run fast; larger calls are skipped unless they must
 * fail (then the guard page stands in for operands over MAX_BYTES). */
#define MAX_BYTES ((int64_t)1 << 20) /* one operand */
#define MAX_WORK ((int64_t)1 << 17)  /* rows x cols of one call */

/* The CPU backend computes in double (lib/cpu_convert.h) whatever the dtype,
 * but for the norms and the sum (below), so beyond the rounding of the output to its
 * dtype, the references allow only double-precision error: SLACK per
 * accumulated term, times the magnitude of the terms. */
#define SLACK 0x1p-50
/* Relative slack says nothing near 0: a double product that lands among the
 * subnormals is off by up to this absolutely, and the library may scale such
 * an intermediate afterwards (dy * (h - mean) is multiplied by rstd), so the
 * references allow UNDERFLOW per term times the factor applied after it. */
#define UNDERFLOW 0x1p-1074
/* The norms and the sum compute in float for every dtype but float64, as the header says
 * ("statistics and arithmetic are fp32 (fp64 for fp64)", "accumulated in fp32"): their
 * references allow float's error instead, a few units of float per accumulated term, and a
 * float subnormal's 2^-149 near 0. */
#define FLOAT_SLACK 0x1p-22
#define FLOAT_UNDERFLOW 0x1p-149
static double fp32_slack(int dtype) { return dtype == FO_DTYPE_F64 ? SLACK : FLOAT_SLACK; }
static double fp32_underflow(int dtype) {
    return dtype == FO_DTYPE_F64 ? UNDERFLOW : FLOAT_UNDERFLOW;
}

/* ---- failing ------------------------------------------------------------ */

static char call_text[4096]; /* the decoded call, printed with any failure */

static void fail(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
static void fail(const char *fmt, ...) {
    va_list args;
    va_start(args, fmt);
    fprintf(stderr, "\nfuzz_ops: ");
    vfprintf(stderr, fmt, args);
    va_end(args);
    fprintf(stderr, "\n  call: %s\n", call_text);
    abort();
}

/* ---- reading the input -------------------------------------------------- */

typedef struct input {
    const uint8_t *p;
    size_t left;
    uint64_t rng; /* element values once the input is used up */
} input;

/* Fields of the call: 0 once the input is used up, so a short input decodes
 * into a plain, valid call (0 is the common choice of every field). */
static uint8_t u8(input *in) {
    if (!in->left)
        return 0;
    in->left--;
    return *in->p++;
}
static uint16_t u16(input *in) {
    uint16_t lo = u8(in);
    return (uint16_t)(lo | (uint16_t)u8(in) << 8);
}
static uint32_t u32(input *in) {
    uint32_t lo = u16(in);
    return lo | (uint32_t)u16(in) << 16;
}
static uint64_t u64(input *in) {
    uint64_t lo = u32(in);
    return lo | (uint64_t)u32(in) << 32;
}
/* Element data: the rest of the input, then the PRNG, so that a short input
 * still fills large operands, deterministically. */
static uint8_t data_u8(input *in) {
    return in->left ? u8(in) : (uint8_t)rng_next(&in->rng);
}
static double bits_double(uint64_t bits) {
    double d;
    memcpy(&d, &bits, sizeof d);
    return d;
}

/* ---- dtypes ------------------------------------------------------------- */

static int dtype_ok(int dtype) { return dtype_size(dtype) != 0; }
static int is_half(int dtype) { return dtype == F16 || dtype == BF16; }
/* The header's rule for bias, param, residual and h dtypes: `dtype`, or
 * float32 beside a half `dtype`. */
static int companion_ok(int value, int dtype) {
    return dtype_ok(value) && (value == dtype || (is_half(dtype) && value == F32));
}
static int stats_dtype(int dtype) { return dtype == F64 ? F64 : F32; }

/* One unit in the last place, relative (the most a correctly rounded result
 * may be off, with room for a double rounding through float), the smallest
 * subnormal (the error allowed near 0) and the largest finite value. */
static double ulp_rel(int dtype) {
    switch (dtype) {
    case F64: return 0x1p-52;
    case F16: return 0x1p-10;
    case BF16: return 0x1p-7;
    default: return 0x1p-23;
    }
}
static double tiniest(int dtype) {
    switch (dtype) {
    case F64: return 0x1p-1074;
    case F16: return 0x1p-24;
    case BF16: return 0x1p-133;
    default: return 0x1p-149;
    }
}
static double largest(int dtype) {
    switch (dtype) {
    case F64: return DBL_MAX;
    case F16: return 65504.0;
    case BF16: return 0x1.fep127;
    default: return FLT_MAX;
    }
}
/* The header's "arithmetic in fp32 (fp64 for fp64)" of the elementwise ops:
 * an error of this, relative to the terms, is allowed before rounding. */
static double arith_eps(int dtype) { return dtype == F64 ? 0x1p-52 : 0x1p-23; }

/* ---- operands ----------------------------------------------------------- */

enum role { IN, OUT, SCRATCH };
enum addr_mode { EXACT, ELEMENT_ALIGNED, MISALIGNED, NULL_ADDR, GUARD };
static const char *const mode_names[] = {"exact", "element-aligned", "misaligned", "null",
                                         "guard"};
/* Operand "dtypes" that are plain bytes: a relu mask, a workspace, FP8
 * elements (no fo_dtype code: fo_quantize_fp8's outputs). */
enum { MASK_BYTES = -1000, WORKSPACE_BYTES = -1001, FP8_BYTES = -1002 };

typedef struct operand {
    const char *name;
    int role;
    int dtype;                  /* a dtype code (maybe invalid), or *_BYTES */
    int64_t rows, cols, stride; /* stride of an IN operand; the others are dense */
    /* a strided input of `dims` dimensions (RoPE's q, k, cos, sin): sizes n
     * and strides s, in elements; rows is then 1 and cols its span, and the
     * op's decoder judges it (judge_operand does not) */
    int dims;
    int64_t n[4], s[4];
    int ignored;                /* the call neither reads nor checks it */
    int required;               /* a null address is wrong unless it is empty */
    int passed;                 /* a non-zero address is passed */
    int mode;
    /* set by place() */
    unsigned char *block, *data; /* the malloc, and where the operand starts in it */
    size_t bytes;
    unsigned char *saved; /* data as it was before the call */
    uintptr_t address;
} operand;

static int64_t esize(const operand *o) {
    if (o->dtype == MASK_BYTES || o->dtype == WORKSPACE_BYTES || o->dtype == FP8_BYTES) return 1;
    return (int64_t)dtype_size(o->dtype);
}

/* Bytes to allocate per element: an unknown dtype (the call must fail) gets
 * the largest size, so a library that used it anyway still stays inside. */
static int64_t alloc_size(const operand *o) { return esize(o) ? esize(o) : 8; }

static int is_empty(const operand *o) {
    if (o->dims) {
        for (int d = 0; d < o->dims; d++)
            if (o->n[d] == 0)
                return 1;
        return 0;
    }
    return o->rows == 0 || o->cols == 0;
}

/* The elements a strided operand spans: 1 + the farthest element's offset
 * (a negative stride counts as 0: the call must fail, and never reads
 * before the start); -1 when that is not an int64 or a size is negative. */
static int64_t strided_span(const operand *o) {
    int64_t far = 0, reach;
    for (int d = 0; d < o->dims; d++)
        if (o->n[d] < 0)
            return -1;
    if (is_empty(o))
        return 0;
    for (int d = 0; d < o->dims; d++) {
        if (o->n[d] <= 1 || o->s[d] < 0)
            continue;
        if (__builtin_mul_overflow(o->n[d] - 1, o->s[d], &reach) ||
            __builtin_add_overflow(far, reach, &far))
            return -1;
    }
    return far == INT64_MAX ? -1 : far + 1;
}

/* Elements the operand spans under the header's conventions; -1 when that
 * is not an int64 (or the shape is negative, which must fail anyway). An
 * input with a negative stride gets one row, so that a kernel reading the
 * row before it hits the allocation's left redzone. */
static int64_t span(const operand *o) {
    int64_t rest, n;
    if (o->dims)
        return strided_span(o);
    if (o->rows < 0 || o->cols < 0)
        return -1;
    if (is_empty(o))
        return 0;
    int64_t stride = o->role == IN ? o->stride : o->cols;
    if (o->rows == 1 || stride < 0)
        return o->cols;
    if (__builtin_mul_overflow(o->rows - 1, stride, &rest) ||
        __builtin_add_overflow(rest, o->cols, &n))
        return -1;
    return n;
}

/* ---- the model of the contract ------------------------------------------ */

enum { PASS, EITHER, FAIL };

typedef struct verdict {
    int level;
    char why[200]; /* the first reason the call must fail */
} verdict;

static void must_fail(verdict *v, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void must_fail(verdict *v, const char *fmt, ...) {
    if (v->level == FAIL)
        return;
    v->level = FAIL;
    va_list args;
    va_start(args, fmt);
    vsnprintf(v->why, sizeof v->why, fmt, args);
    va_end(args);
}
/* The header leaves the outcome open (an argument that the call ignores, or
 * a size no allocation can have); a success must still compute right. */
static void may_fail(verdict *v) {
    if (v->level == PASS)
        v->level = EITHER;
}

/* The header's conventions, for one operand: "An address may be 0 only where
 * the function says it is optional, or when the operand is empty", strides
 * ">= 0; ignored when rows <= 1", and aligned to the element size. */
static void judge_operand(verdict *v, const operand *o) {
    if (o->dims || o->ignored)
        return; /* judged by its op, or not looked at */
    if (o->rows < 0 || o->cols < 0)
        return; /* the shape is wrong: already a failure */
    int empty = is_empty(o);
    if (!o->passed) {
        if (o->required && !empty)
            must_fail(v, "%s is null", o->name);
        return;
    }
    int64_t size = alloc_size(o), n = span(o);
    if (n < 0 || n > INT64_MAX / size)
        must_fail(v, "%s spans more than INT64_MAX bytes", o->name);
    int misaligned = o->mode == MISALIGNED && size > 1;
    int negative = o->role == IN && o->rows > 1 && o->stride < 0;
    if (misaligned || negative) {
        if (empty)
            may_fail(v); /* an empty operand's address and stride are unused */
        else
            must_fail(v, "%s %s", o->name,
                      misaligned ? "is misaligned" : "has a negative row stride");
    }
}

/* ---- the call ------------------------------------------------------------ */

enum op {
    RELU_FORWARD,
    RELU_BACKWARD,
    SQUARE_FORWARD,
    SQUARE_BACKWARD,
    REDUCE_SUM,
    NORM_FORWARD,
    NORM_BACKWARD,
    WORKSPACE_QUERY,
    SWIGLU_FORWARD,
    SWIGLU_BACKWARD,
    GEGLU_FORWARD,
    GEGLU_BACKWARD,
    ROPE_FORWARD,
    ROPE_BACKWARD,
    CLAMPED_FORWARD,
    CLAMPED_BACKWARD,
    DYT_FORWARD,
    DYT_BACKWARD,
    QUANTIZE_FP8,
    OP_COUNT
};
static const char *const op_names[] = {
    "fo_bias_scale_relu_forward",
    "fo_bias_scale_relu_backward",
    "fo_square_forward",
    "fo_square_backward",
    "fo_reduce_sum",
    "fo_norm_forward",
    "fo_norm_backward",
    "*_workspace_bytes",
    "fo_swiglu_forward",
    "fo_swiglu_backward",
    "fo_geglu_forward",
    "fo_geglu_backward",
    "fo_rope_forward",
    "fo_rope_backward",
    "fo_clamped_swiglu_forward",
    "fo_clamped_swiglu_backward",
    "fo_dyt_forward",
    "fo_dyt_backward",
    "fo_quantize_fp8",
};

/* Operand slots of each op, in the order of its arguments. */
enum { RF_Y, RF_MASK, RF_X, RF_BIAS };
enum { RB_DX, RB_DBIAS, RB_WS, RB_DY, RB_MASK };
enum { SF_Y, SF_X };
enum { SB_DX, SB_DY, SB_X };
enum { RS_OUT, RS_WS, RS_X };
enum { NF_Y, NF_ROUT, NF_MEAN, NF_RSTD, NF_X, NF_RES, NF_W, NF_B };
enum { NB_DX, NB_DRES, NB_DW, NB_DB, NB_WS, NB_DY, NB_DROUT, NB_H, NB_MEAN, NB_RSTD, NB_W };
enum { GF_Y, GF_GATE, GF_UP };
enum { GB_DGATE, GB_DUP, GB_DY, GB_GATE, GB_UP }; /* GeGLU's too */
enum { RO_QOUT, RO_KOUT, RO_Q, RO_K, RO_COS, RO_SIN };
enum { CS_OUT, CS_DY, CS_GATE_UP }; /* out: y (forward) or dgate_up */
enum { DF_Y, DF_X, DF_ALPHA, DF_W, DF_B };
enum { DB_DX, DB_DALPHA, DB_DW, DB_DB, DB_WS, DB_DY, DB_X, DB_ALPHA, DB_W, DB_B };
enum { QF_Y, QF_YT, QF_SCALE, QF_AMAX, QF_WS, QF_X };
#define MAX_OPERANDS 11

typedef struct call {
    int op;
    int device_type, device_index;
    uintptr_t stream;
    int wild; /* inputs may hold NaN, infinities, extremes, random bits */
    int dtype, bias_dtype, param_dtype, residual_dtype, h_dtype, kind;
    float scale;
    double eps, p;
    uint64_t seed, offset;
    int64_t rows, cols; /* reduce_sum: 1 x numel */
    int64_t workspace_bytes;
    int approximate;     /* GeGLU */
    /* RoPE: sizes, layout, the tables' dtype, the pairs */
    int64_t batch, tokens, q_heads, k_heads, head_dim, rotary_dim;
    int layout, cos_dtype, pairs;
    /* clamped SwiGLU */
    int glu_layout;
    double alpha, limit;
    int64_t grad_at_limit;
    int stray; /* DyT: the other entry point's fields hold values it must not read */
    /* FP8 quantization: its codes and reserved field; the inputs' values are
     * scaled by 2^exponent (tiny rows, subnormals, overflow to inf) */
    int fp8_dtype, recipe, reserved, exponent;
    int64_t struct_size; /* of the op's argument struct; 0 for the others */
    int null_args;       /* pass NULL for the argument struct */
    operand o[MAX_OPERANDS];
    int count;
    verdict v;
} call;

/* ---- the argument structs ------------------------------------------------ */

/* An address aligned for every dtype, for a query made before the operands
 * are placed, or a field the entry point does not read (never dereferenced:
 * a query reads no operand). */
#define PLACEHOLDER ((uintptr_t)64)

/* The argument struct of a call from its fields and its operands' addresses
 * (0 until place() gives them), with struct_size sizeof. */
static fo_bias_scale_relu_forward_args relu_forward_struct(const call *c) {
    const operand *o = c->o;
    fo_bias_scale_relu_forward_args a = {
        .struct_size = sizeof a, .device_type = c->device_type,
        .device_index = c->device_index, .stream = c->stream, .y = o[RF_Y].address,
        .mask = o[RF_MASK].address, .x = o[RF_X].address, .x_row_stride = o[RF_X].stride,
        .bias = o[RF_BIAS].address, .rows = c->rows, .cols = c->cols, .dtype = c->dtype,
        .bias_dtype = c->bias_dtype, .scale = c->scale};
    return a;
}

static fo_bias_scale_relu_backward_args relu_backward_struct(const call *c) {
    const operand *o = c->o;
    fo_bias_scale_relu_backward_args a = {
        .struct_size = sizeof a, .device_type = c->device_type,
        .device_index = c->device_index, .stream = c->stream, .dx = o[RB_DX].address,
        .dbias = o[RB_DBIAS].address, .workspace = o[RB_WS].address,
        .workspace_bytes = c->workspace_bytes, .dy = o[RB_DY].address,
        .dy_row_stride = o[RB_DY].stride, .mask = o[RB_MASK].address, .rows = c->rows,
        .cols = c->cols, .dtype = c->dtype, .bias_dtype = c->bias_dtype,
        .scale = c->scale};
    return a;
}

static fo_norm_forward_args norm_forward_struct(const call *c) {
    const operand *o = c->o;
    fo_norm_forward_args a = {
        .struct_size = sizeof a, .device_type = c->device_type,
        .device_index = c->device_index, .stream = c->stream, .y = o[NF_Y].address,
        .residual_out = o[NF_ROUT].address, .mean = o[NF_MEAN].address,
        .rstd = o[NF_RSTD].address, .x = o[NF_X].address, .x_row_stride = o[NF_X].stride,
        .residual = o[NF_RES].address, .residual_row_stride = o[NF_RES].stride,
        .residual_dtype = c->residual_dtype, .weight = o[NF_W].address,
        .bias = o[NF_B].address, .param_dtype = c->param_dtype, .rows = c->rows,
        .cols = c->cols, .dtype = c->dtype, .kind = c->kind, .eps = c->eps,
        .dropout_p = c->p, .seed = c->seed, .offset = c->offset};
    return a;
}

static fo_norm_backward_args norm_backward_struct(const call *c) {
    const operand *o = c->o;
    fo_norm_backward_args a = {
        .struct_size = sizeof a, .device_type = c->device_type,
        .device_index = c->device_index, .stream = c->stream, .dx = o[NB_DX].address,
        .dresidual = o[NB_DRES].address, .dweight = o[NB_DW].address,
        .dbias = o[NB_DB].address, .workspace = o[NB_WS].address,
        .workspace_bytes = c->workspace_bytes, .dy = o[NB_DY].address,
        .dy_row_stride = o[NB_DY].stride, .dresidual_out = o[NB_DROUT].address,
        .dresidual_out_row_stride = o[NB_DROUT].stride, .h = o[NB_H].address,
        .h_row_stride = o[NB_H].stride, .h_dtype = c->h_dtype, .mean = o[NB_MEAN].address,
        .rstd = o[NB_RSTD].address, .weight = o[NB_W].address,
        .param_dtype = c->param_dtype, .rows = c->rows, .cols = c->cols, .dtype = c->dtype,
        .kind = c->kind, .dropout_p = c->p, .seed = c->seed, .offset = c->offset};
    return a;
}

static fo_square_forward_args square_forward_struct(const call *c) {
    const operand *o = c->o;
    fo_square_forward_args a = {
        .struct_size = sizeof a, .device_type = c->device_type,
        .device_index = c->device_index, .stream = c->stream, .y = o[SF_Y].address,
        .x = o[SF_X].address, .x_row_stride = o[SF_X].stride, .rows = c->rows,
        .cols = c->cols, .dtype = c->dtype};
    return a;
}

static fo_square_backward_args square_backward_struct(const call *c) {
    const operand *o = c->o;
    fo_square_backward_args a = {
        .struct_size = sizeof a, .device_type = c->device_type,
        .device_index = c->device_index, .stream = c->stream, .dx = o[SB_DX].address,
        .dy = o[SB_DY].address, .dy_row_stride = o[SB_DY].stride, .x = o[SB_X].address,
        .x_row_stride = o[SB_X].stride, .rows = c->rows, .cols = c->cols, .dtype = c->dtype};
    return a;
}

/* numel is c->cols (the call's 1 x numel) */
static fo_reduce_sum_args reduce_sum_struct(const call *c) {
    const operand *o = c->o;
    fo_reduce_sum_args a = {
        .struct_size = sizeof a, .device_type = c->device_type,
        .device_index = c->device_index, .stream = c->stream, .out = o[RS_OUT].address,
        .workspace = o[RS_WS].address, .workspace_bytes = c->workspace_bytes,
        .x = o[RS_X].address, .numel = c->cols, .dtype = c->dtype};
    return a;
}

/* Calls `entry` with a copy of the struct at `args` (`size` bytes) in an
 * allocation of exactly the bytes struct_size says the caller has (at
 * least its first field, at most `size`), with c->struct_size in it, or
 * with NULL: AddressSanitizer reports a read past them. */
static int call_with_struct(const call *c, const void *args, size_t size,
                            int (*entry)(const void *, int64_t *), int64_t *bytes) {
    if (c->null_args)
        return entry(NULL, bytes);
    size_t readable = size;
    if (c->struct_size < (int64_t)size)
        readable = c->struct_size < (int64_t)sizeof(int64_t) ? sizeof(int64_t)
                                                             : (size_t)c->struct_size;
    unsigned char *copy = malloc(readable);
    if (!copy)
        abort();
    memcpy(copy, args, readable);
    memcpy(copy, &c->struct_size, sizeof c->struct_size);
    int status = entry(copy, bytes);
    free(copy);
    return status;
}

/* The entry points, each as call_with_struct's `entry` (bytes: queries only). */
static int enter_relu_forward(const void *a, int64_t *bytes) {
    (void)bytes;
    return fo_bias_scale_relu_forward(a);
}
static int enter_relu_backward(const void *a, int64_t *bytes) {
    (void)bytes;
    return fo_bias_scale_relu_backward(a);
}
static int enter_relu_query(const void *a, int64_t *bytes) {
    return fo_bias_scale_relu_backward_workspace_bytes(a, bytes);
}
static int enter_norm_forward(const void *a, int64_t *bytes) {
    (void)bytes;
    return fo_norm_forward(a);
}
static int enter_norm_backward(const void *a, int64_t *bytes) {
    (void)bytes;
    return fo_norm_backward(a);
}
static int enter_norm_query(const void *a, int64_t *bytes) {
    return fo_norm_backward_workspace_bytes(a, bytes);
}
static int enter_geglu_forward(const void *a, int64_t *bytes) {
    (void)bytes;
    return fo_geglu_forward(a);
}
static int enter_geglu_backward(const void *a, int64_t *bytes) {
    (void)bytes;
    return fo_geglu_backward(a);
}
static int enter_clamped_forward(const void *a, int64_t *bytes) {
    (void)bytes;
    return fo_clamped_swiglu_forward(a);
}
static int enter_clamped_backward(const void *a, int64_t *bytes) {
    (void)bytes;
    return fo_clamped_swiglu_backward(a);
}
static int enter_dyt_forward(const void *a, int64_t *bytes) {
    (void)bytes;
    return fo_dyt_forward(a);
}
static int enter_dyt_backward(const void *a, int64_t *bytes) {
    (void)bytes;
    return fo_dyt_backward(a);
}
static int enter_dyt_query(const void *a, int64_t *bytes) {
    return fo_dyt_backward_workspace_bytes(a, bytes);
}
static int enter_quantize_fp8(const void *a, int64_t *bytes) {
    (void)bytes;
    return fo_quantize_fp8(a);
}
static int enter_quantize_fp8_query(const void *a, int64_t *bytes) {
    return fo_quantize_fp8_workspace_bytes(a, bytes);
}
static int enter_rope_forward(const void *a, int64_t *bytes) {
    (void)bytes;
    return fo_rope_forward(a);
}
static int enter_rope_backward(const void *a, int64_t *bytes) {
    (void)bytes;
    return fo_rope_backward(a);
}

static int enter_square_forward(const void *a, int64_t *bytes) {
    (void)bytes;
    return fo_square_forward(a);
}
static int enter_square_backward(const void *a, int64_t *bytes) {
    (void)bytes;
    return fo_square_backward(a);
}
static int enter_reduce_sum(const void *a, int64_t *bytes) {
    (void)bytes;
    return fo_reduce_sum(a);
}
static int enter_reduce_sum_query(const void *a, int64_t *bytes) {
    return fo_reduce_sum_workspace_bytes(a, bytes);
}
static int enter_swiglu_forward(const void *a, int64_t *bytes) {
    (void)bytes;
    return fo_swiglu_forward(a);
}
static int enter_swiglu_backward(const void *a, int64_t *bytes) {
    (void)bytes;
    return fo_swiglu_backward(a);
}

static fo_swiglu_forward_args swiglu_forward_struct(const call *c) {
    const operand *o = c->o;
    fo_swiglu_forward_args a = {
        .struct_size = sizeof a, .device_type = c->device_type,
        .device_index = c->device_index, .stream = c->stream, .y = o[GF_Y].address,
        .gate = o[GF_GATE].address, .gate_row_stride = o[GF_GATE].stride,
        .up = o[GF_UP].address, .up_row_stride = o[GF_UP].stride, .rows = c->rows,
        .cols = c->cols, .dtype = c->dtype};
    return a;
}

static fo_swiglu_backward_args swiglu_backward_struct(const call *c) {
    const operand *o = c->o;
    fo_swiglu_backward_args a = {
        .struct_size = sizeof a, .device_type = c->device_type,
        .device_index = c->device_index, .stream = c->stream, .dgate = o[GB_DGATE].address,
        .dup = o[GB_DUP].address, .dy = o[GB_DY].address, .dy_row_stride = o[GB_DY].stride,
        .gate = o[GB_GATE].address, .gate_row_stride = o[GB_GATE].stride,
        .up = o[GB_UP].address, .up_row_stride = o[GB_UP].stride, .rows = c->rows,
        .cols = c->cols, .dtype = c->dtype};
    return a;
}

static fo_geglu_forward_args geglu_forward_struct(const call *c) {
    const operand *o = c->o;
    fo_geglu_forward_args a = {
        .struct_size = sizeof a, .device_type = c->device_type,
        .device_index = c->device_index, .stream = c->stream, .y = o[GF_Y].address,
        .gate = o[GF_GATE].address, .gate_row_stride = o[GF_GATE].stride,
        .up = o[GF_UP].address, .up_row_stride = o[GF_UP].stride, .rows = c->rows,
        .cols = c->cols, .dtype = c->dtype, .approximate = c->approximate};
    return a;
}

static fo_geglu_backward_args geglu_backward_struct(const call *c) {
    const operand *o = c->o;
    fo_geglu_backward_args a = {
        .struct_size = sizeof a, .device_type = c->device_type,
        .device_index = c->device_index, .stream = c->stream, .dgate = o[GB_DGATE].address,
        .dup = o[GB_DUP].address, .dy = o[GB_DY].address, .dy_row_stride = o[GB_DY].stride,
        .gate = o[GB_GATE].address, .gate_row_stride = o[GB_GATE].stride,
        .up = o[GB_UP].address, .up_row_stride = o[GB_UP].stride, .rows = c->rows,
        .cols = c->cols, .dtype = c->dtype, .approximate = c->approximate};
    return a;
}

static fo_clamped_swiglu_args clamped_struct(const call *c) {
    const operand *o = c->o;
    const int backward = c->op == CLAMPED_BACKWARD;
    fo_clamped_swiglu_args a = {
        .struct_size = sizeof a, .device_type = c->device_type, .device_index = c->device_index,
        .stream = c->stream, .y = backward ? 0 : o[CS_OUT].address,
        .dgate_up = backward ? o[CS_OUT].address : 0, .dy = backward ? o[CS_DY].address : 0,
        .dy_row_stride = backward ? o[CS_DY].stride : 0, .gate_up = o[CS_GATE_UP].address,
        .gate_up_row_stride = o[CS_GATE_UP].stride, .rows = c->rows, .cols = c->cols,
        .dtype = c->dtype, .layout = c->glu_layout, .alpha = c->alpha, .limit = c->limit,
        .grad_at_limit = c->grad_at_limit};
    return a;
}

static fo_rope_args rope_struct(const call *c) {
    const operand *o = c->o;
    fo_rope_args a = {
        .struct_size = sizeof a, .device_type = c->device_type,
        .device_index = c->device_index, .stream = c->stream, .q_out = o[RO_QOUT].address,
        .k_out = o[RO_KOUT].address, .q = o[RO_Q].address, .k = o[RO_K].address,
        .cos = o[RO_COS].address, .sin = o[RO_SIN].address, .batch = c->batch,
        .tokens = c->tokens, .q_heads = c->q_heads, .k_heads = c->k_heads,
        .head_dim = c->head_dim, .rotary_dim = c->rotary_dim, .layout = c->layout,
        .dtype = c->dtype, .cos_dtype = c->cos_dtype, .pairs = c->pairs};
    memcpy(a.q_strides, o[RO_Q].s, sizeof a.q_strides);
    memcpy(a.k_strides, o[RO_K].s, sizeof a.k_strides);
    memcpy(a.cos_strides, o[RO_COS].s, sizeof a.cos_strides);
    memcpy(a.sin_strides, o[RO_SIN].s, sizeof a.sin_strides);
    return a;
}

/* The forward's fields, or the backward's (the other's hold PLACEHOLDER and
 * invalid sizes where c->stray: "an entry point reads only its own fields"). */
static fo_dyt_args dyt_struct(const call *c) {
    const operand *o = c->o;
    fo_dyt_args a = {.struct_size = sizeof a, .device_type = c->device_type,
                     .device_index = c->device_index, .stream = c->stream, .rows = c->rows,
                     .cols = c->cols, .dtype = c->dtype, .param_dtype = c->param_dtype};
    if (c->op == DYT_FORWARD) {
        a.y = o[DF_Y].address;
        a.x = o[DF_X].address, a.x_row_stride = o[DF_X].stride;
        a.alpha = o[DF_ALPHA].address, a.weight = o[DF_W].address, a.bias = o[DF_B].address;
        if (c->stray) {
            a.dx = a.dalpha = a.dweight = a.dbias = a.workspace = a.dy = PLACEHOLDER;
            a.workspace_bytes = a.dy_row_stride = -1;
        }
        return a;
    }
    a.dx = o[DB_DX].address, a.dalpha = o[DB_DALPHA].address;
    a.dweight = o[DB_DW].address, a.dbias = o[DB_DB].address;
    a.workspace = o[DB_WS].address, a.workspace_bytes = c->workspace_bytes;
    a.dy = o[DB_DY].address, a.dy_row_stride = o[DB_DY].stride;
    a.x = o[DB_X].address, a.x_row_stride = o[DB_X].stride;
    a.alpha = o[DB_ALPHA].address, a.weight = o[DB_W].address, a.bias = o[DB_B].address;
    if (c->stray)
        a.y = PLACEHOLDER;
    return a;
}

static fo_quantize_fp8_args quantize_struct(const call *c) {
    const operand *o = c->o;
    fo_quantize_fp8_args a = {.struct_size = sizeof a,
                              .device_type = c->device_type,
                              .device_index = c->device_index,
                              .stream = c->stream,
                              .y = o[QF_Y].address,
                              .y_t = o[QF_YT].address,
                              .scale = o[QF_SCALE].address,
                              .amax = o[QF_AMAX].address,
                              .workspace = o[QF_WS].address,
                              .workspace_bytes = c->workspace_bytes,
                              .x = o[QF_X].address,
                              .x_row_stride = o[QF_X].stride,
                              .rows = c->rows,
                              .cols = c->cols,
                              .dtype = c->dtype,
                              .fp8_dtype = c->fp8_dtype,
                              .recipe = c->recipe,
                              .reserved = c->reserved};
    return a;
}

/* ---- decoding ----------------------------------------------------------- */

static int take_dtype(input *in) {
    static const int invalid[] = {-1, 4, 5, 255, INT_MIN, INT_MAX, 1000, -4};
    uint8_t b = u8(in);
    return b < 224 ? b & 3 : invalid[b & 7];
}

/* Mostly what the header allows beside `dtype`, sometimes anything. */
static int take_companion(input *in, int dtype) {
    uint8_t b = u8(in);
    if (b < 128)
        return dtype;
    if (b < 192)
        return F32;
    return take_dtype(in);
}

/* rows, cols or numel: mostly small, else an edge (CPU chunks are 256
 * elements, mask bytes 8), huge (around the library's INT64_MAX / 16
 * limit), negative, or raw. */
static int64_t take_extent(input *in, int64_t small) {
    static const int64_t edges[] = {0,  1,  2,   3,   7,   8,   9,   15,   16,   17,  31,
                                    32, 33, 255, 256, 257, 511, 512, 513, 1023, 1024, 1025};
    static const int64_t huge[] = {INT64_MAX,         INT64_MAX / 16,     INT64_MAX / 16 + 1,
                                   INT64_MAX / 8,     INT64_MAX / 4 + 1,  (int64_t)1 << 31,
                                   (int64_t)1 << 32,  (int64_t)1 << 40,   (int64_t)1 << 62,
                                   INT32_MAX,         INT64_MIN,          -1};
    uint8_t mode = u8(in);
    uint16_t v = u16(in);
    if (mode < 176)
        return v % (small + 1);
    if (mode < 224)
        return edges[v % COUNT(edges)];
    if (mode < 240)
        return huge[v % COUNT(huge)];
    if (mode < 248)
        return -(int64_t)(v % 1024) - 1;
    return (int64_t)u64(in);
}

static int64_t take_stride(input *in, int64_t rows, int64_t cols) {
    uint8_t mode = u8(in), k = u8(in);
    if (mode < 128 || cols < 0)
        return cols; /* dense */
    if (mode < 160)
        return cols > INT64_MAX - 8 ? cols : cols + k % 9; /* padded rows */
    if (mode < 176)
        return 0; /* one row broadcast */
    if (mode < 192)
        return cols < 256 ? k % (cols + 1) : k; /* overlapping rows */
    if (mode < 208)
        return -(int64_t)(k % 8) - 1;
    if (mode < 232) /* at the library's overflow limit */
        return INT64_MAX / 16 / (rows > 1 ? rows : 1) + k % 3 - 1;
    return (int64_t)u64(in);
}

static float take_scale(input *in) {
    static const float table[] = {1.0f, 0.5f,   2.0f,   -1.0f,   0.0f,    -0.0f,
                                  3.25f, 1e-3f, 1e-40f, 1e30f, FLT_MAX, -FLT_MAX};
    static const float bad[] = {INFINITY, -INFINITY, NAN};
    uint8_t b = u8(in);
    if (b < 200)
        return table[b % COUNT(table)];
    if (b < 230)
        return bad[b % COUNT(bad)];
    uint32_t bits = u32(in);
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

static double take_eps(input *in) {
    static const double table[] = {1e-5, 1e-6, 1e-12, 1.0,  0.25,
                                   1e-300, 0x1p-1074, 1e300, DBL_MAX};
    static const double bad[] = {0.0, -0.0, -1e-5, INFINITY, -INFINITY, NAN};
    uint8_t b = u8(in);
    if (b < 200)
        return table[b % COUNT(table)];
    if (b < 230)
        return bad[b % COUNT(bad)];
    return bits_double(u64(in));
}

static double take_dropout(input *in) {
    static const double table[] = {0.1,  0.25,   0.5,        0.9,       0.999,
                                   1e-300, 0x1p-32, 1 - 0x1p-53, -0.0};
    static const double bad[] = {1.0, -0.1, 1.5, INFINITY, -INFINITY, NAN};
    uint8_t b = u8(in);
    if (b < 128)
        return 0.0;
    if (b < 192)
        return table[b % COUNT(table)];
    if (b < 216)
        return u32(in) * 0x1p-32; /* a multiple of 2^-32 */
    if (b < 232)
        return bad[b % COUNT(bad)];
    return bits_double(u64(in));
}

static int take_kind(input *in) {
    uint8_t b = u8(in);
    static const int invalid[] = {2, -1, 255, INT_MIN};
    return b < 240 ? b & 1 : invalid[b & 3];
}

static int64_t take_workspace_bytes(input *in, int64_t needed) {
    static const int64_t odd[] = {INT64_MIN, -1, INT64_MAX, (int64_t)1 << 40};
    uint8_t b = u8(in);
    if (b < 192)
        return needed;
    if (b < 216)
        return needed > INT64_MAX - 64 ? needed : needed + b % 64;
    if (b < 232)
        return needed - 1 - b % 4; /* short by a few bytes (negative on the CPU) */
    return odd[b % COUNT(odd)];
}

/* struct_size of an argument struct of `size` bytes whose first version
 * ended at `first` bytes: mostly its sizeof; sometimes `first` where the
 * struct has grown since (the fields past it read as 0, which the call's
 * own struct holds there too); else a size the library must refuse (under
 * the first version's, or over the library's), or a NULL struct. */
static void take_struct_size_since(call *c, input *in, size_t size, size_t first) {
    const int64_t sizeof_args = (int64_t)size, first_size = (int64_t)first;
    const int64_t odd[] = {first_size - 8, sizeof_args + 8, first_size - 1, 0, -1, 8,
                           INT64_MAX,      INT64_MIN,       sizeof_args + 4096};
    uint8_t b = u8(in);
    c->struct_size = sizeof_args;
    if (b < 232)
        return;
    if (b < 240 && first_size < sizeof_args) {
        c->struct_size = first_size;
        return;
    }
    if (b < 248)
        c->struct_size = odd[b % COUNT(odd)];
    else
        c->null_args = 1;
    if (c->null_args)
        must_fail(&c->v, "a NULL argument struct");
    else
        must_fail(&c->v, "struct_size %" PRId64 " (sizeof %" PRId64 ")", c->struct_size,
                  sizeof_args);
}

static void take_struct_size(call *c, input *in, size_t size) {
    take_struct_size_since(c, in, size, size);
}

/* Adds operand `slot`: `passed` says whether the op's flags chose to pass it
 * (always, for a required one); the address mode may still make it null. */
static operand *add(call *c, int slot, const char *name, int role, int dtype, int64_t rows,
                    int64_t cols, int required, int passed, input *in) {
    operand *o = &c->o[slot];
    uint8_t how = u8(in);
    memset(o, 0, sizeof *o);
    o->name = name;
    o->role = role;
    o->dtype = dtype;
    o->rows = rows;
    o->cols = cols;
    o->required = required;
    o->mode = how < 200 ? EXACT
              : how < 214 ? ELEMENT_ALIGNED
              : how < 228 ? MISALIGNED
              : how < 242 ? NULL_ADDR
                          : GUARD;
    o->passed = passed && o->mode != NULL_ADDR;
    o->stride = role == IN ? take_stride(in, rows, cols) : cols;
    if (slot >= c->count)
        c->count = slot + 1;
    return o;
}

static int64_t mask_row_bytes(int64_t cols) {
    return cols < 0 ? cols : cols / 8 + (cols % 8 != 0);
}

/* Checks shared by the row-wise entry points: device, shape and dtype. */
static void judge_common(call *c) {
    if (c->device_type != FO_DEVICE_CPU)
        must_fail(&c->v, "device_type %d (a CPU-only build)", c->device_type);
    if (c->rows < 0 || c->cols < 0)
        must_fail(&c->v, "a negative size");
    /* byte offsets of one row (or of a 1 x cols parameter) must fit in 64
     * bits, whatever rows is */
    if (c->cols > INT64_MAX / 16)
        must_fail(&c->v, "cols %" PRId64 " past INT64_MAX / 16", c->cols);
    if (!dtype_ok(c->dtype))
        must_fail(&c->v, "dtype %d", c->dtype);
}

/* Workspace: `needed` from the op's query (0 when the query fails: the call
 * then fails too), `given` its workspace_bytes, `used` whether the op uses
 * it with these flags (relu: a dbias; norm: a dweight or dbias). */
static void add_workspace(call *c, int slot, int64_t needed, int used, input *in) {
    c->workspace_bytes = take_workspace_bytes(in, needed);
    add(c, slot, "workspace", SCRATCH, WORKSPACE_BYTES, 1,
        c->workspace_bytes > 0 ? c->workspace_bytes : 0, used && needed > 0, 1, in);
    if (c->workspace_bytes < 0)
        must_fail(&c->v, "workspace_bytes %" PRId64 " < 0", c->workspace_bytes);
    else if (c->workspace_bytes < needed) {
        if (used)
            must_fail(&c->v, "workspace_bytes under the %" PRId64 " asked for", needed);
        else
            may_fail(&c->v);
    }
}

static void decode_relu_forward(call *c, input *in) {
    c->dtype = take_dtype(in);
    c->bias_dtype = take_companion(in, c->dtype);
    c->rows = take_extent(in, 17);
    c->cols = take_extent(in, 300);
    c->scale = take_scale(in);
    uint8_t flags = u8(in);
    add(c, RF_Y, "y", OUT, c->dtype, c->rows, c->cols, 1, 1, in);
    add(c, RF_MASK, "mask", OUT, MASK_BYTES, c->rows, mask_row_bytes(c->cols), 0, flags & 1,
        in);
    add(c, RF_X, "x", IN, c->dtype, c->rows, c->cols, 1, 1, in);
    operand *bias = add(c, RF_BIAS, "bias", IN, c->bias_dtype, 1, c->cols, 0, flags & 2, in);
    take_struct_size(c, in, sizeof(fo_bias_scale_relu_forward_args));
    judge_common(c);
    if (!isfinite(c->scale))
        must_fail(&c->v, "scale is not finite");
    if (!companion_ok(c->bias_dtype, c->dtype)) {
        if (bias->passed)
            must_fail(&c->v, "bias_dtype %d", c->bias_dtype);
        else
            may_fail(&c->v); /* no bias: its dtype is unused */
    }
}

static void decode_relu_backward(call *c, input *in) {
    c->dtype = take_dtype(in);
    c->bias_dtype = take_companion(in, c->dtype);
    c->rows = take_extent(in, 17);
    c->cols = take_extent(in, 300);
    c->scale = take_scale(in);
    uint8_t flags = u8(in);
    add(c, RB_DX, "dx", OUT, c->dtype, c->rows, c->cols, 0, flags & 1, in);
    operand *dbias = add(c, RB_DBIAS, "dbias", OUT, c->bias_dtype, 1, c->cols, 0, flags & 2,
                         in);
    /* the size the query gives for these gradients, before the operands
     * have addresses: PLACEHOLDER for each one passed or required (on the
     * CPU, the only device fuzzed, the addresses do not change it) */
    fo_bias_scale_relu_backward_args query = relu_backward_struct(c);
    query.dx = flags & 1 ? PLACEHOLDER : 0;
    query.dbias = dbias->passed ? PLACEHOLDER : 0;
    query.dy = query.mask = PLACEHOLDER;
    query.dy_row_stride = c->cols;
    int64_t needed = 0;
    if (fo_bias_scale_relu_backward_workspace_bytes(&query, &needed) != FO_OK)
        needed = 0;
    add_workspace(c, RB_WS, needed, dbias->passed, in);
    add(c, RB_DY, "dy", IN, c->dtype, c->rows, c->cols, 1, 1, in);
    operand *mask = add(c, RB_MASK, "mask", IN, MASK_BYTES, c->rows,
                        mask_row_bytes(c->cols), 1, 1, in);
    mask->stride = mask->cols; /* the forward pass wrote it dense */
    take_struct_size(c, in, sizeof(fo_bias_scale_relu_backward_args));
    judge_common(c);
    if (!isfinite(c->scale))
        must_fail(&c->v, "scale is not finite");
    if (!companion_ok(c->bias_dtype, c->dtype)) {
        if (dbias->passed)
            must_fail(&c->v, "bias_dtype %d", c->bias_dtype);
        else
            may_fail(&c->v);
    }
}

static void decode_square(call *c, input *in, int backward) {
    c->dtype = take_dtype(in);
    c->rows = take_extent(in, 17);
    c->cols = take_extent(in, 300);
    if (backward) {
        add(c, SB_DX, "dx", OUT, c->dtype, c->rows, c->cols, 1, 1, in);
        add(c, SB_DY, "dy", IN, c->dtype, c->rows, c->cols, 1, 1, in);
        add(c, SB_X, "x", IN, c->dtype, c->rows, c->cols, 1, 1, in);
    } else {
        add(c, SF_Y, "y", OUT, c->dtype, c->rows, c->cols, 1, 1, in);
        add(c, SF_X, "x", IN, c->dtype, c->rows, c->cols, 1, 1, in);
    }
    take_struct_size(c, in, backward ? sizeof(fo_square_backward_args)
                                     : sizeof(fo_square_forward_args));
    judge_common(c);
}

static void decode_reduce_sum(call *c, input *in) {
    c->dtype = take_dtype(in);
    c->rows = 1;
    c->cols = take_extent(in, 3000); /* numel */
    /* the size the query gives, before the operands have addresses (on the
     * CPU, the only device fuzzed, the addresses do not change it) */
    fo_reduce_sum_args query = reduce_sum_struct(c);
    query.out = query.x = PLACEHOLDER;
    int64_t needed = 0;
    if (fo_reduce_sum_workspace_bytes(&query, &needed) != FO_OK)
        needed = 0;
    add(c, RS_OUT, "out", OUT, c->dtype, 1, 1, 1, 1, in);
    add_workspace(c, RS_WS, needed, 1, in);
    add(c, RS_X, "x", IN, c->dtype, 1, c->cols, 1, 1, in);
    c->o[RS_X].stride = c->cols;
    take_struct_size(c, in, sizeof(fo_reduce_sum_args));
    judge_common(c);
}

/* The operands, shape and dtype of SwiGLU and GeGLU. */
static void decode_gated(call *c, input *in, int backward) {
    c->dtype = take_dtype(in);
    c->rows = take_extent(in, 17);
    c->cols = take_extent(in, 300);
    uint8_t flags = u8(in);
    if (backward) {
        /* dgate and dup are each optional */
        add(c, GB_DGATE, "dgate", OUT, c->dtype, c->rows, c->cols, 0, !(flags & 1), in);
        add(c, GB_DUP, "dup", OUT, c->dtype, c->rows, c->cols, 0, !(flags & 2), in);
        add(c, GB_DY, "dy", IN, c->dtype, c->rows, c->cols, 1, 1, in);
        add(c, GB_GATE, "gate", IN, c->dtype, c->rows, c->cols, 1, 1, in);
        add(c, GB_UP, "up", IN, c->dtype, c->rows, c->cols, 1, 1, in);
    } else {
        add(c, GF_Y, "y", OUT, c->dtype, c->rows, c->cols, 1, 1, in);
        add(c, GF_GATE, "gate", IN, c->dtype, c->rows, c->cols, 1, 1, in);
        add(c, GF_UP, "up", IN, c->dtype, c->rows, c->cols, 1, 1, in);
    }
    judge_common(c);
}

static void decode_swiglu(call *c, input *in, int backward) {
    decode_gated(c, in, backward);
    if (backward)
        take_struct_size(c, in, sizeof(fo_swiglu_backward_args));
    else /* the first version ends before the FP8 output */
        take_struct_size_since(c, in, sizeof(fo_swiglu_forward_args),
                               offsetof(fo_swiglu_forward_args, fp8));
}

static void decode_geglu(call *c, input *in, int backward) {
    decode_gated(c, in, backward);
    uint8_t b = u8(in);
    static const int invalid[] = {2, -1, 255, INT_MIN};
    c->approximate = b < 240 ? b & 1 : invalid[b & 3];
    if (c->approximate != FO_GELU_NONE && c->approximate != FO_GELU_TANH)
        must_fail(&c->v, "approximate %d", c->approximate);
    if (backward)
        take_struct_size(c, in, sizeof(fo_geglu_backward_args));
    else /* the first version ends before the FP8 output */
        take_struct_size_since(c, in, sizeof(fo_geglu_forward_args),
                               offsetof(fo_geglu_forward_args, fp8));
}

/* Clamped SwiGLU: gate_up is rows x 2 cols, in pairs or halves; the
 * backward's dgate_up likewise, dense. alpha must be finite, limit
 * positive (+inf clamps nothing). */
static void decode_clamped(call *c, input *in, int backward) {
    static const double alphas[] = {1.702, 1.0, 0.5, -2.0, 0.0, 1e300};
    static const double limits[] = {7.0, 1.0, 0.5, 1e-300, INFINITY, 3.0};
    static const double bad_alphas[] = {INFINITY, -INFINITY, NAN};
    static const double bad_limits[] = {0.0, -0.0, -1.0, NAN, -INFINITY};
    c->dtype = take_dtype(in);
    c->rows = take_extent(in, 17);
    c->cols = take_extent(in, 150);
    uint8_t b = u8(in);
    c->glu_layout = b < 240 ? b & 1 : (b & 1 ? 2 : -1);
    if (c->glu_layout != FO_GLU_HALVES && c->glu_layout != FO_GLU_INTERLEAVED)
        must_fail(&c->v, "layout %d", c->glu_layout);
    b = u8(in);
    c->alpha = b < 232 ? alphas[b % COUNT(alphas)] : bad_alphas[b % COUNT(bad_alphas)];
    if (!isfinite(c->alpha)) must_fail(&c->v, "alpha %g", c->alpha);
    b = u8(in);
    c->limit = b < 232 ? limits[b % COUNT(limits)] : bad_limits[b % COUNT(bad_limits)];
    if (!(c->limit > 0)) must_fail(&c->v, "limit %g", c->limit);
    b = u8(in);
    c->grad_at_limit = b < 128 ? 0 : b < 250 ? 1 : -7; /* any nonzero: closed */
    /* 2 cols only where cols itself is in range (otherwise the call fails) */
    const int64_t pairs = c->cols >= 0 && c->cols <= INT64_MAX / 16 ? 2 * c->cols : c->cols;
    if (backward) {
        add(c, CS_OUT, "dgate_up", OUT, c->dtype, c->rows, pairs, 1, 1, in);
        add(c, CS_DY, "dy", IN, c->dtype, c->rows, c->cols, 1, 1, in);
    } else {
        add(c, CS_OUT, "y", OUT, c->dtype, c->rows, c->cols, 1, 1, in);
    }
    add(c, CS_GATE_UP, "gate_up", IN, c->dtype, c->rows, pairs, 1, 1, in);
    judge_common(c);
    take_struct_size(c, in, sizeof(fo_clamped_swiglu_args));
}

/* DyT: x, alpha (one element), weight and bias (optional) of param_dtype;
 * the backward's dx, dalpha, dweight and dbias each optional, with the
 * workspace its query asks for (on the CPU: dalpha's partial sums). */
static void decode_dyt(call *c, input *in, int backward) {
    c->dtype = take_dtype(in);
    c->param_dtype = take_companion(in, c->dtype);
    c->rows = take_extent(in, 17);
    c->cols = take_extent(in, 300);
    uint8_t flags = u8(in);
    const int pd = c->param_dtype;
    c->stray = (flags & 0x30) == 0x30;
    if (!backward) {
        add(c, DF_Y, "y", OUT, c->dtype, c->rows, c->cols, 1, 1, in);
        add(c, DF_X, "x", IN, c->dtype, c->rows, c->cols, 1, 1, in);
        add(c, DF_ALPHA, "alpha", IN, pd, 1, 1, 1, 1, in);
        add(c, DF_W, "weight", IN, pd, 1, c->cols, 1, 1, in);
        add(c, DF_B, "bias", IN, pd, 1, c->cols, 0, flags & 1, in);
    } else {
        add(c, DB_DX, "dx", OUT, c->dtype, c->rows, c->cols, 0, flags & 1, in);
        operand *da = add(c, DB_DALPHA, "dalpha", OUT, pd, 1, 1, 0, flags & 2, in);
        operand *dw = add(c, DB_DW, "dweight", OUT, pd, 1, c->cols, 0, flags & 4, in);
        operand *db = add(c, DB_DB, "dbias", OUT, pd, 1, c->cols, 0, flags & 8, in);
        /* the size the query gives for these gradients, before the operands
         * have addresses: PLACEHOLDER for each one passed or required (on the
         * CPU, the only device fuzzed, the addresses do not change it) */
        fo_dyt_args query = dyt_struct(c);
        query.dx = c->o[DB_DX].passed ? PLACEHOLDER : 0;
        query.dalpha = da->passed ? PLACEHOLDER : 0;
        query.dweight = dw->passed ? PLACEHOLDER : 0;
        query.dbias = db->passed ? PLACEHOLDER : 0;
        query.dy = query.x = query.alpha = query.weight = PLACEHOLDER;
        query.dy_row_stride = query.x_row_stride = c->cols;
        int64_t needed = 0;
        if (fo_dyt_backward_workspace_bytes(&query, &needed) != FO_OK)
            needed = 0;
        add_workspace(c, DB_WS, needed, da->passed || dw->passed || db->passed, in);
        add(c, DB_DY, "dy", IN, c->dtype, c->rows, c->cols, 1, 1, in);
        add(c, DB_X, "x", IN, c->dtype, c->rows, c->cols, 1, 1, in);
        add(c, DB_ALPHA, "alpha", IN, pd, 1, 1, 1, 1, in);
        add(c, DB_W, "weight", IN, pd, 1, c->cols, 1, 1, in);
        /* the backward's own field too, though no gradient depends on it */
        add(c, DB_B, "bias", IN, pd, 1, c->cols, 0, flags & 64, in);
    }
    take_struct_size(c, in, sizeof(fo_dyt_args));
    judge_common(c);
    /* alpha and weight are always there: their dtype always matters */
    if (!companion_ok(pd, c->dtype))
        must_fail(&c->v, "param_dtype %d beside dtype %d", pd, c->dtype);
}

/* FP8 quantization: x (rows x cols, strided) into y and/or y_t (dense FP8
 * bytes; y_t, the transpose, tensorwise only), scale and amax (float32: one
 * a row rowwise, one tensorwise; amax optional), with the workspace its
 * query asks for (tensorwise on the CPU: a float a row), right, short,
 * larger, or at an odd address, which the header's "4-byte aligned"
 * refuses. */
static void decode_quantize(call *c, input *in) {
    static const int bad_fp8[] = {2, -1, 255, INT_MIN};
    static const int bad_recipes[] = {2, -1, 7, INT_MAX};
    static const int bad_reserved[] = {1, -1, INT_MIN, 256};
    /* 2^-42: amax under 1e-12; 2^-130, 2^-145: subnormal floats (0 in f16);
     * 2^100, 2^1000: inf in f16 (and f32, for the latter) */
    static const int exponents[] = {-4, -12, -20, -42, -60, -130, -145, 8, 20, 100, 1000};
    c->dtype = take_dtype(in);
    c->rows = take_extent(in, 17);
    c->cols = take_extent(in, 300);
    uint8_t b = u8(in);
    c->fp8_dtype = b < 240 ? b & 1 : bad_fp8[b & 3];
    b = u8(in);
    c->recipe = b < 240 ? b & 1 : bad_recipes[b & 3];
    b = u8(in);
    c->reserved = b < 248 ? 0 : bad_reserved[b & 3];
    b = u8(in);
    c->exponent = b < 144 ? 0 : exponents[b % COUNT(exponents)];
    uint8_t flags = u8(in);
    const int rowwise = c->recipe == FO_FP8_ROWWISE;
    /* y, y and y_t, y_t, or y (rarely neither); y_t beside rowwise only
     * rarely (it must fail) */
    int pass_y = (flags & 3) != 2, pass_yt = (flags & 3) == 1 || (flags & 3) == 2;
    if ((flags & 3) == 3 && (flags & 0x40)) pass_y = 0;
    if (pass_yt && rowwise && !(flags & 0x20)) pass_yt = 0, pass_y = 1;
    /* one scale a row (rowwise), or one; the shape where the recipe is not
     * a code (the call fails) */
    const int64_t scales = rowwise ? c->rows : 1;
    operand *y = add(c, QF_Y, "y", OUT, FP8_BYTES, c->rows, c->cols, 0, pass_y, in);
    operand *yt = add(c, QF_YT, "y_t", OUT, FP8_BYTES, c->cols, c->rows, 0, pass_yt, in);
    add(c, QF_SCALE, "scale", OUT, F32, 1, scales, 1, 1, in);
    operand *amax = add(c, QF_AMAX, "amax", OUT, F32, 1, scales, 0, flags & 4, in);
    /* the size the query gives, before the operands have addresses (on the
     * CPU, the only device fuzzed, the addresses do not change it) */
    fo_quantize_fp8_args query = quantize_struct(c);
    query.y = y->passed ? PLACEHOLDER : 0;
    query.y_t = yt->passed ? PLACEHOLDER : 0;
    query.amax = amax->passed ? PLACEHOLDER : 0;
    query.scale = query.x = PLACEHOLDER;
    query.x_row_stride = c->cols;
    int64_t needed = 0;
    if (fo_quantize_fp8_workspace_bytes(&query, &needed) != FO_OK) needed = 0;
    add_workspace(c, QF_WS, needed, 1, in);
    const operand *ws = &c->o[QF_WS];
    add(c, QF_X, "x", IN, c->dtype, c->rows, c->cols, 1, 1, in);
    take_struct_size(c, in, sizeof(fo_quantize_fp8_args));
    judge_common(c);
    if (c->fp8_dtype != FO_FP8_E4M3 && c->fp8_dtype != FO_FP8_E5M2)
        must_fail(&c->v, "fp8_dtype %d", c->fp8_dtype);
    if (c->recipe != FO_FP8_TENSORWISE && c->recipe != FO_FP8_ROWWISE)
        must_fail(&c->v, "recipe %d", c->recipe);
    if (c->reserved != 0) must_fail(&c->v, "reserved %d", c->reserved);
    /* "y_t ... (FO_FP8_TENSORWISE only)": an address given is refused, even
     * an empty operand's */
    if (yt->passed && c->recipe != FO_FP8_TENSORWISE)
        must_fail(&c->v, "y_t with recipe %d", c->recipe);
    /* "y ... (optional when y_t is given)" */
    if (!y->passed && !yt->passed && c->rows > 0 && c->cols > 0)
        must_fail(&c->v, "neither y nor y_t");
    /* rows past INT64_MAX / 16 beside cols 0: the per-row scales (and the
     * CPU's per-row workspace) pass the library's bound of byte offsets */
    if (c->rows > INT64_MAX / 16) may_fail(&c->v);
    /* an element-aligned workspace (1-byte elements) starts at an odd
     * address, where place() allocates it (one too big gets the guard page,
     * which is aligned) */
    if (ws->passed && ws->mode == ELEMENT_ALIGNED && c->workspace_bytes <= MAX_BYTES) {
        if (needed > 0)
            must_fail(&c->v, "the workspace is not 4-byte aligned");
        else
            may_fail(&c->v); /* no workspace is needed: its address is unused */
    }
}

/* a * b where a, b and a * b are in [0, INT64_MAX / 16] (the library's
 * bound of byte offsets: a size past it is refused even beside a 0), else
 * -1. */
static int64_t bounded(int64_t a, int64_t b) {
    const int64_t limit = INT64_MAX / 16;
    int64_t p;
    if (a < 0 || b < 0 || a > limit || b > limit || __builtin_mul_overflow(a, b, &p) ||
        p > limit)
        return -1;
    return p;
}

/* Strides for a strided operand of sizes n[0..dims): mostly dense in its
 * own order, or dense in another order (a transposed view), with padded
 * rows, a stride 0, negative, not 1 in the last dimension, at the
 * library's overflow limit, or raw. */
static void take_strides(input *in, operand *o) {
    const int dims = o->dims, last = dims - 1;
    uint8_t mode = u8(in), k = u8(in);
    int64_t size = 1;
    int64_t order[4] = {0, 1, 2, 3};
    if (mode >= 96 && mode < 144 && dims == 4) /* stored with dimensions 1, 2 swapped */
        order[1] = 2, order[2] = 1;
    for (int i = dims - 1; i >= 0; i--) {
        const int d = (int)order[i];
        o->s[d] = size;
        int64_t extent = o->n[d] > 0 ? o->n[d] : 1;
        if (d == last && mode >= 144 && mode < 176 && extent <= INT64_MAX - 8)
            extent += k % 9; /* padded rows */
        if (__builtin_mul_overflow(size, extent, &size))
            size = INT64_MAX / 2;
    }
    const int d = k % dims;
    if (mode >= 176 && mode < 192)
        o->s[d] = 0;
    else if (mode >= 192 && mode < 204)
        o->s[d] = -(int64_t)(k % 8) - 1;
    else if (mode >= 204 && mode < 216)
        o->s[last] = k % 3 == 0 ? 0 : 1 + k % 3;
    else if (mode >= 216 && mode < 240)
        o->s[d] = INT64_MAX / 16 / (o->n[d] > 1 ? o->n[d] - 1 : 1) + k % 3 - 1;
    else if (mode >= 240)
        o->s[d] = (int64_t)u64(in);
}

/* A strided input of `dims` dimensions; the address as add() makes it. */
static operand *add_strided(call *c, int slot, const char *name, int dtype, int dims,
                            const int64_t *n, input *in) {
    operand *o = add(c, slot, name, IN, dtype, 1, 0, 1, 1, in);
    o->dims = dims;
    memcpy(o->n, n, sizeof(int64_t) * (size_t)dims);
    take_strides(in, o);
    o->cols = strided_span(o) > 0 ? strided_span(o) : 0;
    o->stride = o->cols;
    return o;
}

/* The header's rules for a strided operand the call reads: its address,
 * strides >= 0 (where the size is over 1), the last 1 (where the size is
 * over 1), the farthest element within INT64_MAX / 16. */
static void judge_strided(call *c, const operand *o) {
    if (is_empty(o))
        return; /* an empty operand is not looked at */
    if (!o->passed) {
        must_fail(&c->v, "%s is null", o->name);
        return;
    }
    if (o->mode == MISALIGNED && alloc_size(o) > 1)
        must_fail(&c->v, "%s is misaligned", o->name);
    int64_t far = 0;
    for (int d = 0; d < o->dims; d++) {
        if (o->n[d] <= 1)
            continue;
        if (o->s[d] < 0)
            must_fail(&c->v, "%s has a negative stride", o->name);
        else if (d == o->dims - 1 && o->s[d] != 1)
            must_fail(&c->v, "%s's last stride is %" PRId64, o->name, o->s[d]);
        const int64_t reach = bounded(o->n[d] - 1, o->s[d]);
        if (o->s[d] >= 0 && (reach < 0 || reach > INT64_MAX / 16 - far))
            must_fail(&c->v, "%s reaches past INT64_MAX / 16 elements", o->name);
        else if (reach > 0)
            far += reach;
    }
}

static void decode_rope(call *c, input *in) {
    c->dtype = take_dtype(in);
    c->cos_dtype = take_companion(in, c->dtype);
    c->batch = take_extent(in, 3);
    c->tokens = take_extent(in, 5);
    c->q_heads = take_extent(in, 4);
    c->k_heads = take_extent(in, 3);
    c->head_dim = take_extent(in, 40);
    uint8_t b = u8(in);
    if (b < 208 && c->head_dim >= 0)
        c->rotary_dim = 2 * (int64_t)(u16(in) % (uint64_t)(c->head_dim / 2 + 1));
    else
        c->rotary_dim = take_extent(in, 41);
    b = u8(in);
    static const int bad_layouts[] = {2, -1, INT_MIN, 7};
    c->layout = b < 240 ? b & 1 : bad_layouts[b & 3];
    b = u8(in);
    c->pairs = b < 248 ? b & 1 : (int)u32(in);
    uint8_t flags = u8(in);
    const int64_t heads[2] = {c->q_heads, c->k_heads};
    const int heads_first = c->layout != FO_ROPE_TOKENS_FIRST;
    const int64_t bt = bounded(c->batch, c->tokens);
    operand *outs[2], *ins[2];
    int used = 0; /* an output that is written: the tables are read */
    for (int x = 0; x < 2; x++) {
        const int64_t rows = bounded(bt, heads[x]);
        if (rows < 0 || bounded(rows, c->head_dim) < 0)
            must_fail(&c->v, "%s's size passes INT64_MAX / 16", x ? "k" : "q");
        outs[x] = add(c, x ? RO_KOUT : RO_QOUT, x ? "k_out" : "q_out", OUT, c->dtype,
                      rows < 0 ? -1 : rows, c->head_dim, 0, !(flags & (1 << x)), in);
    }
    for (int x = 0; x < 2; x++) {
        const int64_t n[4] = {c->batch, heads_first ? heads[x] : c->tokens,
                              heads_first ? c->tokens : heads[x], c->head_dim};
        ins[x] = add_strided(c, x ? RO_K : RO_Q, x ? "k" : "q", c->dtype, 4, n, in);
        /* "either may be 0, and then that tensor is neither read nor written" */
        if (!outs[x]->passed)
            ins[x]->ignored = 1;
        else
            judge_strided(c, ins[x]);
        used |= outs[x]->passed && heads[x] > 0;
    }
    const int64_t tables[3] = {used ? c->batch : 0, c->tokens, c->rotary_dim};
    for (int x = 0; x < 2; x++) {
        operand *t = add_strided(c, x ? RO_SIN : RO_COS, x ? "sin" : "cos", c->cos_dtype, 3,
                                 tables, in);
        judge_strided(c, t);
    }
    take_struct_size_since(c, in, sizeof(fo_rope_args),
                           offsetof(fo_rope_args, pairs) + sizeof(int32_t));
    if (c->device_type != FO_DEVICE_CPU)
        must_fail(&c->v, "device_type %d (a CPU-only build)", c->device_type);
    if (!dtype_ok(c->dtype))
        must_fail(&c->v, "dtype %d", c->dtype);
    if (!companion_ok(c->cos_dtype, c->dtype))
        must_fail(&c->v, "cos_dtype %d beside dtype %d", c->cos_dtype, c->dtype);
    if (c->pairs != FO_ROPE_HALVES && c->pairs != FO_ROPE_INTERLEAVED)
        must_fail(&c->v, "pairs %d", c->pairs);
    if (c->layout != FO_ROPE_HEADS_FIRST && c->layout != FO_ROPE_TOKENS_FIRST)
        must_fail(&c->v, "layout %d", c->layout);
    if (c->batch < 0 || c->tokens < 0 || c->q_heads < 0 || c->k_heads < 0 || c->head_dim < 0)
        must_fail(&c->v, "a negative size");
    if (c->rotary_dim < 0 || c->rotary_dim % 2 != 0 || c->rotary_dim > c->head_dim)
        must_fail(&c->v, "rotary_dim %" PRId64 " (head_dim %" PRId64 ")", c->rotary_dim,
                  c->head_dim);
    /* the work place() bounds: every row of q and k */
    int64_t all_heads;
    if (__builtin_add_overflow(c->q_heads, c->k_heads, &all_heads))
        all_heads = -1;
    const int64_t rows = bounded(bt, all_heads);
    c->rows = rows < 0 ? INT64_MAX : rows;
    c->cols = c->head_dim < 0 ? INT64_MAX : c->head_dim;
}

static void judge_norm_scalars(call *c) {
    judge_common(c);
    if (c->kind != FO_NORM_LAYER && c->kind != FO_NORM_RMS)
        must_fail(&c->v, "kind %d", c->kind);
    if (!(c->p >= 0.0 && c->p < 1.0))
        must_fail(&c->v, "dropout_p %g outside [0, 1)", c->p);
}

static void decode_norm_forward(call *c, input *in) {
    c->dtype = take_dtype(in);
    c->param_dtype = take_companion(in, c->dtype);
    c->residual_dtype = take_companion(in, c->dtype);
    c->kind = take_kind(in);
    c->rows = take_extent(in, 17);
    c->cols = take_extent(in, 300);
    c->eps = take_eps(in);
    c->p = take_dropout(in);
    c->seed = u64(in);
    c->offset = u64(in);
    uint8_t flags = u8(in);
    int residual = flags & 1;
    /* residual_out goes with residual, but not always */
    int residual_out = residual ^ ((flags & 0xC0) == 0xC0);
    /* RMSNorm takes no bias: pass one only sometimes */
    int bias = (flags & 4) && (c->kind == FO_NORM_LAYER || (flags & 8));
    int stats = stats_dtype(c->dtype);
    int h_dtype = residual ? c->residual_dtype : c->dtype;
    add(c, NF_Y, "y", OUT, c->dtype, c->rows, c->cols, 1, 1, in);
    operand *rout = add(c, NF_ROUT, "residual_out", OUT, h_dtype, c->rows, c->cols, 0,
                        residual_out, in);
    add(c, NF_MEAN, "mean", OUT, stats, c->rows, 1, 0, flags & 16, in);
    add(c, NF_RSTD, "rstd", OUT, stats, c->rows, 1, 0, flags & 32, in);
    add(c, NF_X, "x", IN, c->dtype, c->rows, c->cols, 1, 1, in);
    operand *res = add(c, NF_RES, "residual", IN, c->residual_dtype, c->rows, c->cols, 0,
                       residual, in);
    operand *w = add(c, NF_W, "weight", IN, c->param_dtype, 1, c->cols, 0, flags & 2, in);
    operand *b = add(c, NF_B, "bias", IN, c->param_dtype, 1, c->cols, 0, bias, in);
    take_struct_size_since(c, in, sizeof(fo_norm_forward_args), offsetof(fo_norm_forward_args, fp8));
    judge_norm_scalars(c);
    if (!(isfinite(c->eps) && c->eps > 0.0))
        must_fail(&c->v, "eps %g is not finite and > 0", c->eps);
    if (c->kind == FO_NORM_RMS && b->passed)
        must_fail(&c->v, "RMSNorm with a bias");
    if (res->passed) {
        if (!companion_ok(c->residual_dtype, c->dtype))
            must_fail(&c->v, "residual_dtype %d", c->residual_dtype);
        rout->required = 1; /* "required with residual" */
    } else {
        if (!companion_ok(c->residual_dtype, c->dtype))
            may_fail(&c->v); /* unused without a residual */
        if (rout->passed)
            must_fail(&c->v, "residual_out without a residual");
        if (c->p > 0.0)
            must_fail(&c->v, "dropout_p > 0 without a residual");
    }
    if (!companion_ok(c->param_dtype, c->dtype)) {
        if (w->passed || b->passed)
            must_fail(&c->v, "param_dtype %d", c->param_dtype);
        else
            may_fail(&c->v);
    }
}

static void decode_norm_backward(call *c, input *in) {
    c->dtype = take_dtype(in);
    c->param_dtype = take_companion(in, c->dtype);
    c->h_dtype = take_companion(in, c->dtype);
    c->kind = take_kind(in);
    c->rows = take_extent(in, 17);
    c->cols = take_extent(in, 300);
    c->p = take_dropout(in);
    c->seed = u64(in);
    c->offset = u64(in);
    uint8_t flags = u8(in);
    int rms = c->kind == FO_NORM_RMS, stats = stats_dtype(c->dtype);
    add(c, NB_DX, "dx", OUT, c->dtype, c->rows, c->cols, 0, flags & 1, in);
    add(c, NB_DRES, "dresidual", OUT, c->h_dtype, c->rows, c->cols, 0, flags & 2, in);
    operand *dw = add(c, NB_DW, "dweight", OUT, c->param_dtype, 1, c->cols, 0, flags & 4, in);
    operand *db = add(c, NB_DB, "dbias", OUT, c->param_dtype, 1, c->cols, 0,
                      (flags & 8) && (!rms || (flags & 128)), in);
    /* the size the query gives for these gradients, before the operands
     * have addresses: PLACEHOLDER for each one passed or required (on the
     * CPU, the only device fuzzed, the addresses do not change it) */
    fo_norm_backward_args query = norm_backward_struct(c);
    query.dx = flags & 1 ? PLACEHOLDER : 0;
    query.dweight = dw->passed ? PLACEHOLDER : 0;
    query.dbias = db->passed ? PLACEHOLDER : 0;
    query.dy = query.h = query.mean = query.rstd = PLACEHOLDER;
    query.dy_row_stride = query.h_row_stride = c->cols;
    int64_t needed = 0;
    if (fo_norm_backward_workspace_bytes(&query, &needed) != FO_OK)
        needed = 0;
    add_workspace(c, NB_WS, needed, dw->passed || db->passed, in);
    add(c, NB_DY, "dy", IN, c->dtype, c->rows, c->cols, 1, 1, in);
    add(c, NB_DROUT, "dresidual_out", IN, c->h_dtype, c->rows, c->cols, 0, flags & 16, in);
    add(c, NB_H, "h", IN, c->h_dtype, c->rows, c->cols, 1, 1, in);
    /* mean: needed by LayerNorm, unused by RMSNorm */
    add(c, NB_MEAN, "mean", IN, stats, c->rows, 1, !rms, !rms || (flags & 64), in);
    add(c, NB_RSTD, "rstd", IN, stats, c->rows, 1, 1, 1, in);
    operand *w = add(c, NB_W, "weight", IN, c->param_dtype, 1, c->cols, 0, flags & 32, in);
    c->o[NB_MEAN].stride = c->o[NB_RSTD].stride = 1;
    take_struct_size(c, in, sizeof(fo_norm_backward_args));
    judge_norm_scalars(c);
    if (!companion_ok(c->h_dtype, c->dtype))
        must_fail(&c->v, "h_dtype %d", c->h_dtype);
    if (rms && db->passed)
        may_fail(&c->v); /* "dbias ... (optional, LayerNorm)" */
    if (!companion_ok(c->param_dtype, c->dtype)) {
        if (dw->passed || db->passed || w->passed)
            must_fail(&c->v, "param_dtype %d", c->param_dtype);
        else
            may_fail(&c->v);
    }
}

/* ---- calling -------------------------------------------------------------- */

static int invoke(const call *c) {
    switch (c->op) {
    case RELU_FORWARD: {
        const fo_bias_scale_relu_forward_args a = relu_forward_struct(c);
        return call_with_struct(c, &a, sizeof a, enter_relu_forward, NULL);
    }
    case RELU_BACKWARD: {
        const fo_bias_scale_relu_backward_args a = relu_backward_struct(c);
        return call_with_struct(c, &a, sizeof a, enter_relu_backward, NULL);
    }
    case SQUARE_FORWARD: {
        const fo_square_forward_args a = square_forward_struct(c);
        return call_with_struct(c, &a, sizeof a, enter_square_forward, NULL);
    }
    case SQUARE_BACKWARD: {
        const fo_square_backward_args a = square_backward_struct(c);
        return call_with_struct(c, &a, sizeof a, enter_square_backward, NULL);
    }
    case REDUCE_SUM: {
        const fo_reduce_sum_args a = reduce_sum_struct(c);
        return call_with_struct(c, &a, sizeof a, enter_reduce_sum, NULL);
    }
    case NORM_FORWARD: {
        const fo_norm_forward_args a = norm_forward_struct(c);
        return call_with_struct(c, &a, sizeof a, enter_norm_forward, NULL);
    }
    case NORM_BACKWARD: {
        const fo_norm_backward_args a = norm_backward_struct(c);
        return call_with_struct(c, &a, sizeof a, enter_norm_backward, NULL);
    }
    case SWIGLU_FORWARD: {
        const fo_swiglu_forward_args a = swiglu_forward_struct(c);
        return call_with_struct(c, &a, sizeof a, enter_swiglu_forward, NULL);
    }
    case GEGLU_FORWARD: {
        const fo_geglu_forward_args a = geglu_forward_struct(c);
        return call_with_struct(c, &a, sizeof a, enter_geglu_forward, NULL);
    }
    case GEGLU_BACKWARD: {
        const fo_geglu_backward_args a = geglu_backward_struct(c);
        return call_with_struct(c, &a, sizeof a, enter_geglu_backward, NULL);
    }
    case CLAMPED_FORWARD:
    case CLAMPED_BACKWARD: {
        const fo_clamped_swiglu_args a = clamped_struct(c);
        return call_with_struct(c, &a, sizeof a,
                                c->op == CLAMPED_FORWARD ? enter_clamped_forward : enter_clamped_backward,
                                NULL);
    }
    case ROPE_FORWARD:
    case ROPE_BACKWARD: {
        const fo_rope_args a = rope_struct(c);
        return call_with_struct(c, &a, sizeof a,
                                c->op == ROPE_FORWARD ? enter_rope_forward : enter_rope_backward,
                                NULL);
    }
    case SWIGLU_BACKWARD: {
        const fo_swiglu_backward_args a = swiglu_backward_struct(c);
        return call_with_struct(c, &a, sizeof a, enter_swiglu_backward, NULL);
    }
    case DYT_FORWARD:
    case DYT_BACKWARD: {
        const fo_dyt_args a = dyt_struct(c);
        return call_with_struct(c, &a, sizeof a,
                                c->op == DYT_FORWARD ? enter_dyt_forward : enter_dyt_backward,
                                NULL);
    }
    case QUANTIZE_FP8: {
        const fo_quantize_fp8_args a = quantize_struct(c);
        return call_with_struct(c, &a, sizeof a, enter_quantize_fp8, NULL);
    }
    default:
        abort();
    }
}

static int print_calls; /* FUZZ_PRINT_CALLS is set */

/* A PROT_NONE mapping: any access by the library is a SEGV. */
static unsigned char *guard_page;
#define GUARD_SIZE ((size_t)1 << 16)

/* Gives every passed operand an address: an exact allocation, or the guard
 * page where the operand is empty or too big (the latter only in a call that
 * must fail). @return 0 when the call cannot be made: an operand too big to
 * allocate in a call that might succeed. */
static int place(call *c) {
    int64_t work;
    if (c->v.level != FAIL && (__builtin_mul_overflow(c->rows, c->cols, &work) ||
                               work > MAX_WORK))
        return 0;
    for (int i = 0; i < c->count; i++) {
        operand *o = &c->o[i];
        if (!o->passed)
            continue;
        int64_t size = alloc_size(o), n = span(o);
        int fits = n >= 0 && n <= MAX_BYTES / size;
        if (!fits && c->v.level != FAIL && !o->ignored)
            return 0;
        if (!fits || (o->mode == GUARD && (n == 0 || c->v.level == FAIL || o->ignored))) {
            o->address = (uintptr_t)guard_page + (o->mode == MISALIGNED && size > 1);
            continue;
        }
        /* The operand ends exactly where its allocation does. One aligned only
         * to its element (or misaligned) starts past a pad, so a read up to
         * `pad` bytes before it goes unseen: the exact mode covers that. */
        size_t pad = o->mode == ELEMENT_ALIGNED ? (size_t)size
                     : o->mode == MISALIGNED && size > 1 ? 1
                                                        : 0;
        o->bytes = (size_t)(n * size);
        o->block = malloc(pad + o->bytes);
        if (!o->block && pad + o->bytes > 0) {
            fprintf(stderr, "fuzz_ops: out of memory\n");
            abort();
        }
        o->data = o->block ? o->block + pad : NULL;
        o->address = o->data ? (uintptr_t)o->data : (uintptr_t)guard_page;
    }
    return 1;
}

static double special_value(int dtype, unsigned which) {
    switch (which % 8) {
    case 0: return INFINITY;
    case 1: return -INFINITY;
    case 2: return NAN;
    case 3: return -0.0;
    case 4: return largest(dtype);
    case 5: return -largest(dtype);
    case 6: return tiniest(dtype);
    default: return 0x1p-14; /* float16's smallest normal */
    }
}

/* The elements of an input of a known dtype. */
static void fill_values(const call *c, operand *o, input *in) {
    int64_t n = (int64_t)o->bytes / alloc_size(o);
    /* FP8 quantization leaves NaN out of amax: its gaps hold the largest
     * finite value instead, which changes amax where it is read */
    const double gap = c->op != QUANTIZE_FP8 ? NAN : o->dtype == F64 ? FLT_MAX : largest(o->dtype);
    for (int64_t e = 0; e < n; e++) {
        /* Elements between rows (a stride over cols) are never read: they
         * hold NaN, which any kernel that reads one carries to an output. */
        if (o->rows > 1 && o->stride > o->cols && e % o->stride >= o->cols) {
            put(o->data, e, o->dtype, gap);
            continue;
        }
        uint8_t b = data_u8(in);
        if (c->wild && b >= 0xF8)
            put(o->data, e, o->dtype, special_value(o->dtype, b));
        else if (c->wild && b >= 0xF0)
            put_bits(o->data, e, o->dtype, rng_next(&in->rng));
        else
            put(o->data, e, o->dtype, ldexp(((int)b - 128) / 16.0, c->exponent));
    }
}

/* Inputs from the data; outputs and workspaces get random bytes (so that an
 * output never written is unlikely to match by chance). Then a copy of each
 * for the "nothing changed" checks. */
static void fill(call *c, input *in) {
    for (int i = 0; i < c->count; i++) {
        operand *o = &c->o[i];
        if (!o->data)
            continue;
        if (o->role != IN || o->dtype == MASK_BYTES || !dtype_ok(o->dtype)) {
            /* raw bytes: a mask, an output, a workspace, an unknown dtype */
            for (size_t k = 0; k < o->bytes; k++)
                o->data[k] = o->role == IN ? data_u8(in) : (uint8_t)rng_next(&in->rng);
        } else {
            fill_values(c, o, in);
        }
        o->saved = malloc(o->bytes ? o->bytes : 1);
        if (!o->saved)
            abort();
        memcpy(o->saved, o->data, o->bytes);
    }
}

static void release(call *c) {
    for (int i = 0; i < c->count; i++) {
        free(c->o[i].block);
        free(c->o[i].saved);
    }
}

static void append(size_t *used, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void append(size_t *used, const char *fmt, ...) {
    if (*used >= sizeof call_text)
        return;
    va_list args;
    va_start(args, fmt);
    int n = vsnprintf(call_text + *used, sizeof call_text - *used, fmt, args);
    va_end(args);
    if (n > 0)
        *used += (size_t)n;
}

static void describe(const call *c) {
    size_t used = 0;
    append(&used,
           "%s device %d/%d rows %" PRId64 " cols %" PRId64 " dtype %d bias_dtype %d "
           "param_dtype %d residual_dtype %d h_dtype %d kind %d scale %a eps %a p %a "
           "seed %" PRIu64 " offset %" PRIu64 " workspace_bytes %" PRId64 " wild %d "
           "struct_size %" PRId64 "%s; model: %s%s",
           op_names[c->op], c->device_type, c->device_index, c->rows, c->cols, c->dtype,
           c->bias_dtype, c->param_dtype, c->residual_dtype, c->h_dtype, c->kind,
           (double)c->scale, c->eps, c->p, c->seed, c->offset, c->workspace_bytes, c->wild,
           c->struct_size, c->null_args ? " (NULL struct)" : "",
           c->v.level == PASS ? "must succeed" : c->v.level == FAIL ? "must fail: " : "either",
           c->v.level == FAIL ? c->v.why : "");
    if (c->op == GEGLU_FORWARD || c->op == GEGLU_BACKWARD)
        append(&used, "\n    approximate %d", c->approximate);
    if (c->op == CLAMPED_FORWARD || c->op == CLAMPED_BACKWARD)
        append(&used, "\n    layout %d alpha %a limit %a grad_at_limit %" PRId64, c->glu_layout, c->alpha,
               c->limit, c->grad_at_limit);
    if (c->op == DYT_FORWARD || c->op == DYT_BACKWARD)
        append(&used, "\n    the other entry point's fields %s",
               c->stray ? "hold PLACEHOLDER and -1 sizes" : "are 0");
    if (c->op == QUANTIZE_FP8)
        append(&used, "\n    fp8_dtype %d recipe %d reserved %d values x 2^%d", c->fp8_dtype,
               c->recipe, c->reserved, c->exponent);
    if (c->op == ROPE_FORWARD || c->op == ROPE_BACKWARD)
        append(&used,
               "\n    batch %" PRId64 " tokens %" PRId64 " q_heads %" PRId64 " k_heads %" PRId64
               " head_dim %" PRId64 " rotary_dim %" PRId64 " layout %d cos_dtype %d pairs %d",
               c->batch, c->tokens, c->q_heads, c->k_heads, c->head_dim, c->rotary_dim,
               c->layout, c->cos_dtype, c->pairs);
    for (int i = 0; i < c->count; i++) {
        const operand *o = &c->o[i];
        append(&used, "\n    %-13s %s%s", o->name, o->passed ? mode_names[o->mode] : "absent",
               o->ignored ? " (unread)" : "");
        if (o->passed)
            append(&used, " dtype %d %" PRId64 " x %" PRId64 " stride %" PRId64 " at %#" PRIxPTR,
                   o->dtype, o->rows, o->cols, o->stride, o->address);
        for (int d = 0; d < o->dims; d++)
            append(&used, "%s%" PRId64 "/%" PRId64, d ? ", " : "; sizes/strides ", o->n[d],
                   o->s[d]);
    }
}

/* ---- checking values ------------------------------------------------------- */

/* got (an element of `dtype`) against the exact `want`: within the output's
 * rounding (one ulp) plus `slack`, the error the computation may add. */
static void expect(const char *what, int64_t index, double got, double want, double slack,
                   int dtype) {
    if (isnan(want) || !isfinite(slack))
        return; /* NaN or infinite terms: the header says nothing of the result */
    double tol = ulp_rel(dtype) * fabs(want) + tiniest(dtype) + slack;
    int ok;
    if (isnan(got))
        ok = 0;
    else if (isinf(got)) /* overflow: when want +- tol reaches past the largest
                          * finite value on got's side (either side, when the
                          * terms cancel so much that tol exceeds |want|) */
        ok = got > 0 ? want + tol >= largest(dtype) : want - tol <= -largest(dtype);
    else
        ok = fabs(got - want) <= tol;
    if (!ok)
        fail("%s[%" PRId64 "] (%s) is %.17g, want %.17g (tolerance %.3g)", what, index,
             dtype_label(dtype), got, want, tol);
}

static double at(const operand *o, int64_t index, int dtype) {
    return get(o->data, index, dtype);
}

static void check_relu_forward(const call *c) {
    const operand *y = &c->o[RF_Y], *mask = &c->o[RF_MASK], *x = &c->o[RF_X],
                  *bias = &c->o[RF_BIAS];
    int64_t mrb = mask_row_bytes(c->cols);
    for (int64_t r = 0; r < c->rows; r++)
        for (int64_t col = 0; col < c->cols; col++) {
            double xv = at(x, r * x->stride + col, c->dtype);
            double b = bias->passed ? at(bias, col, c->bias_dtype) : 0.0;
            double v = xv * c->scale + b;
            double got = at(y, r * c->cols + col, c->dtype);
            expect("y", r * c->cols + col, got, v < 0.0 ? 0.0 : v,
                   arith_eps(c->dtype) * (fabs(xv * c->scale) + fabs(b)), c->dtype);
            /* "1 where the stored y is not <= 0" (NaN included) */
            if (mask->passed &&
                ((mask->data[r * mrb + col / 8] >> (col % 8)) & 1) != !(got <= 0.0))
                fail("mask bit (%" PRId64 ", %" PRId64 ") is wrong for y = %g", r, col, got);
        }
}

static void check_relu_backward(const call *c) {
    const operand *dx = &c->o[RB_DX], *dbias = &c->o[RB_DBIAS], *dy = &c->o[RB_DY],
                  *mask = &c->o[RB_MASK];
    int64_t mrb = mask_row_bytes(c->cols);
    if (c->rows == 0 && !dbias->passed)
        return; /* no element at all, however many columns */
    for (int64_t col = 0; col < c->cols; col++) {
        double sum = 0.0, magnitude = 0.0;
        int known = 1;
        for (int64_t r = 0; r < c->rows; r++) {
            int m = (mask->data[r * mrb + col / 8] >> (col % 8)) & 1;
            double g = at(dy, r * dy->stride + col, c->dtype);
            if (!m && !isfinite(g)) { /* dy * scale * 0: 0 or NaN */
                known = 0;
                continue;
            }
            double want = m ? g * c->scale : 0.0;
            if (dx->passed)
                expect("dx", r * c->cols + col, at(dx, r * c->cols + col, c->dtype), want,
                       arith_eps(c->dtype) * fabs(want), c->dtype);
            if (m) {
                sum += g;
                magnitude += fabs(g);
            }
        }
        if (dbias->passed && known)
            expect("dbias", col, at(dbias, col, c->bias_dtype), sum,
                   SLACK * (double)(c->rows + 1) * magnitude, c->bias_dtype);
    }
}

static void check_square(const call *c, int backward) {
    const operand *out = &c->o[backward ? SB_DX : SF_Y], *x = &c->o[backward ? SB_X : SF_X];
    for (int64_t r = 0; r < c->rows; r++)
        for (int64_t col = 0; col < c->cols; col++) {
            double xv = at(x, r * x->stride + col, c->dtype), want = xv * xv;
            if (backward) {
                const operand *dy = &c->o[SB_DY];
                want = 2.0 * xv * at(dy, r * dy->stride + col, c->dtype);
            }
            int64_t i = r * c->cols + col;
            expect(backward ? "dx" : "y", i, at(out, i, c->dtype), want,
                   arith_eps(c->dtype) * fabs(want), c->dtype);
            /* Sharper: want is exact in double (float64: rounded as fp64
             * arithmetic rounds it), and for the halves usually exact in float
             * too; then no double rounding can occur and the output must be
             * want correctly rounded, to the bit (to nearest, ties to even). */
            if ((c->dtype == F32 || c->dtype == F64 || (double)(float)want == want) &&
                !same_value(get_bits(out->data, i, c->dtype), round_bits(want, c->dtype),
                            c->dtype))
                fail("%s[%" PRId64 "] (%s) has bits %#" PRIx64 ", want %.17g rounded: %#" PRIx64,
                     backward ? "dx" : "y", i, dtype_label(c->dtype),
                     get_bits(out->data, i, c->dtype), want, round_bits(want, c->dtype));
        }
}

static void check_reduce_sum(const call *c) {
    const operand *x = &c->o[RS_X];
    double sum = 0.0, magnitude = 0.0;
    for (int64_t i = 0; i < c->cols; i++) {
        double v = at(x, i, c->dtype);
        sum += v;
        magnitude += fabs(v);
    }
    expect("out", 0, at(&c->o[RS_OUT], 0, c->dtype), sum,
           fp32_slack(c->dtype) * (double)(c->cols + 1) * magnitude, c->dtype);
}

/* Philox4x32-10 (Salmon et al., SC'11), written here from the paper and
 * checked against Random123's known answers at start-up: the reference for
 * the dropout mask, independent of lib/philox.h. */
static void philox4x32_10(const uint32_t counter[4], const uint32_t key[2], uint32_t out[4]) {
    uint32_t x0 = counter[0], x1 = counter[1], x2 = counter[2], x3 = counter[3];
    uint32_t k0 = key[0], k1 = key[1];
    for (int round = 0; round < 10; round++) {
        if (round > 0) {
            k0 += 0x9E3779B9u;
            k1 += 0xBB67AE85u;
        }
        uint64_t p0 = (uint64_t)0xD2511F53u * x0, p1 = (uint64_t)0xCD9E8D57u * x2;
        uint32_t y0 = (uint32_t)(p1 >> 32) ^ x1 ^ k0, y2 = (uint32_t)(p0 >> 32) ^ x3 ^ k1;
        x1 = (uint32_t)p1;
        x3 = (uint32_t)p0;
        x0 = y0;
        x2 = y2;
    }
    out[0] = x0, out[1] = x1, out[2] = x2, out[3] = x3;
}

/* The header's mask: element (row, col) is kept when lane col % 4 of
 * Philox4x32-10(key seed, counter offset + row * 2 * ceil(cols / 8) +
 * col / 4) is at least p * 2^32 (an exact comparison in double). */
static int kept(const call *c, int64_t row, int64_t col) {
    if (c->p == 0.0)
        return 1;
    uint64_t counter = c->offset + (uint64_t)row * 2u * (uint64_t)((c->cols + 7) / 8) +
                       (uint64_t)col / 4;
    const uint32_t words[4] = {(uint32_t)counter, (uint32_t)(counter >> 32), 0, 0};
    const uint32_t key[2] = {(uint32_t)c->seed, (uint32_t)(c->seed >> 32)};
    uint32_t lanes[4];
    philox4x32_10(words, key, lanes);
    return (double)lanes[col % 4] >= c->p * 4294967296.0;
}

/* Values past this are left unchecked in the norms: squares of them may
 * overflow, and then the header says nothing of the result. */
#define NORM_RANGE 1e100

static void check_norm_forward(const call *c) {
    const double slack_per_term = fp32_slack(c->dtype), underflow = fp32_underflow(c->dtype);
    const operand *y = &c->o[NF_Y], *rout = &c->o[NF_ROUT], *mean = &c->o[NF_MEAN],
                  *rstd = &c->o[NF_RSTD], *x = &c->o[NF_X], *res = &c->o[NF_RES],
                  *w = &c->o[NF_W], *b = &c->o[NF_B];
    const int64_t n = c->cols;
    const int rms = c->kind == FO_NORM_RMS, stats = stats_dtype(c->dtype);
    const int h_dtype = res->passed ? c->residual_dtype : c->dtype;
    if (n == 0 || c->rows == 0)
        return; /* (mean and rstd of no elements: the header does not say) */
    double *h = malloc((size_t)n * sizeof *h);
    if (!h)
        abort();
    for (int64_t r = 0; r < c->rows; r++) {
        /* h = dropout(x) + residual, checked as residual_out holds it; the
         * norm is then of h as stored ("norm(residual_out or x)") */
        int usable = 1;
        for (int64_t col = 0; col < n; col++) {
            double xv = at(x, r * x->stride + col, c->dtype);
            if (!res->passed) {
                h[col] = xv;
            } else {
                int keep = kept(c, r, col);
                double scaled = keep ? xv / (1.0 - c->p) : 0.0;
                double rv = at(res, r * res->stride + col, h_dtype);
                h[col] = at(rout, r * n + col, h_dtype);
                if (keep || isfinite(xv)) /* else x * 0: 0 or NaN */
                    expect("residual_out", r * n + col, h[col], scaled + rv,
                           slack_per_term * (fabs(scaled) + fabs(rv)), h_dtype);
            }
            if (!(fabs(h[col]) < NORM_RANGE))
                usable = 0;
        }
        if (!usable)
            continue;
        double sum = 0.0, max_h = 0.0;
        for (int64_t col = 0; col < n; col++) {
            sum += h[col];
            max_h = fmax(max_h, fabs(h[col]));
        }
        double mu = rms ? 0.0 : sum / (double)n, variance = 0.0;
        for (int64_t col = 0; col < n; col++)
            variance += (h[col] - mu) * (h[col] - mu);
        variance /= (double)n;
        double rs = 1.0 / sqrt(variance + c->eps);
        /* error bounds of the library's double arithmetic: of the mean, and
         * relative, of rstd (an error in the variance over variance + eps) */
        double mean_error = slack_per_term * (double)(n + 1) * max_h;
        double spread = max_h + fabs(mu);
        double rstd_error = slack_per_term * (double)(n + 1) * spread * spread /
                                (variance + c->eps) +
                            slack_per_term;
        if (mean->passed) {
            double got = at(mean, r, stats);
            if (rms && got != 0.0)
                fail("mean[%" PRId64 "] of RMSNorm is %g, the header says 0", r, got);
            if (!rms)
                expect("mean", r, got, mu, mean_error, stats);
        }
        if (rstd->passed)
            expect("rstd", r, at(rstd, r, stats), rs, rs * rstd_error, stats);
        for (int64_t col = 0; col < n; col++) {
            double wv = w->passed ? at(w, col, c->param_dtype) : 1.0;
            double bv = b->passed ? at(b, col, c->param_dtype) : 0.0;
            if (!(fabs(wv) < NORM_RANGE && fabs(bv) < NORM_RANGE))
                continue;
            double xhat = (h[col] - mu) * rs;
            double slack = (mean_error * rs + fabs(xhat) * rstd_error) * fabs(wv) +
                           slack_per_term * (fabs(xhat * wv) + fabs(bv)) + underflow * (2.0 + fabs(wv));
            expect("y", r * n + col, at(y, r * n + col, c->dtype), xhat * wv + bv, slack,
                   c->dtype);
        }
    }
    free(h);
}

static void check_norm_backward(const call *c) {
    const double slack_per_term = fp32_slack(c->dtype), underflow = fp32_underflow(c->dtype);
    const operand *dx = &c->o[NB_DX], *dres = &c->o[NB_DRES], *dw = &c->o[NB_DW],
                  *db = &c->o[NB_DB], *dy = &c->o[NB_DY], *drout = &c->o[NB_DROUT],
                  *h = &c->o[NB_H], *mean = &c->o[NB_MEAN], *rstd = &c->o[NB_RSTD],
                  *w = &c->o[NB_W];
    const int64_t n = c->cols;
    const int rms = c->kind == FO_NORM_RMS, stats = stats_dtype(c->dtype);
    if (n == 0 || (c->rows == 0 && !dw->passed && !db->passed))
        return; /* no element at all, however many columns */
    /* per column: xhat and dy * weight of this row; the sums for dweight and
     * dbias over rows, with the magnitudes of their terms */
    double *xhat = calloc((size_t)n, sizeof(double)), *wdy = calloc((size_t)n, sizeof(double));
    double *dw_sum = calloc((size_t)n, sizeof(double)), *dw_mag = calloc((size_t)n, sizeof(double));
    double *db_sum = calloc((size_t)n, sizeof(double)), *db_mag = calloc((size_t)n, sizeof(double));
    double *dw_under = calloc((size_t)n, sizeof(double));
    char *unknown = calloc((size_t)n, 1);
    if (!xhat || !wdy || !dw_sum || !dw_mag || !db_sum || !db_mag || !dw_under || !unknown)
        abort();
    for (int64_t r = 0; r < c->rows; r++) {
        double mu = rms ? 0.0 : at(mean, r, stats), rs = at(rstd, r, stats);
        int usable = fabs(mu) < NORM_RANGE && fabs(rs) < NORM_RANGE;
        double s1 = 0.0, s2 = 0.0, a1 = 0.0, a2 = 0.0, ax = 0.0;
        for (int64_t col = 0; col < n; col++) {
            double g = at(dy, r * dy->stride + col, c->dtype);
            double hv = at(h, r * h->stride + col, c->h_dtype);
            double wv = w->passed ? at(w, col, c->param_dtype) : 1.0;
            if (!(usable && fabs(g) < NORM_RANGE && fabs(hv) < NORM_RANGE &&
                  fabs(wv) < NORM_RANGE)) {
                usable = 0;
                unknown[col] = 1;
                continue;
            }
            xhat[col] = (hv - mu) * rs;
            wdy[col] = g * wv;
            dw_sum[col] += g * xhat[col];
            dw_mag[col] += fabs(g * xhat[col]);
            /* xhat itself may land among the subnormals (here or in the
             * library) and is then scaled by dy */
            dw_under[col] += underflow * (2.0 + fabs(rs) + fabs(g));
            db_sum[col] += g;
            db_mag[col] += fabs(g);
            s1 += wdy[col];
            s2 += wdy[col] * xhat[col];
            a1 += fabs(wdy[col]);
            a2 += fabs(wdy[col] * xhat[col]);
            ax += fabs(xhat[col]);
        }
        if (!usable) {
            memset(unknown, 1, (size_t)n);
            continue;
        }
        /* dh = rstd * (wdy - mean(wdy) - xhat * mean(wdy * xhat)) (LayerNorm;
         * RMSNorm drops the mean(wdy) term), plus dresidual_out */
        double m1 = rms ? 0.0 : s1 / (double)n, m2 = s2 / (double)n;
        for (int64_t col = 0; col < n; col++) {
            double carried = drout->passed ? at(drout, r * drout->stride + col, c->h_dtype) : 0.0;
            if (!(fabs(carried) < NORM_RANGE))
                continue;
            double dh = rs * (wdy[col] - m1 - xhat[col] * m2) + carried;
            double slack = slack_per_term * (double)(n + 4) *
                           (fabs(rs) * (fabs(wdy[col]) + a1 / (double)n +
                                        fabs(xhat[col]) * a2 / (double)n) +
                            fabs(carried)) +
                           /* subnormal xhat, w * dy and their products:
                            * through m2, s2 and xhat * m2, times rstd */
                           (double)(n + 4) * underflow * (2.0 + fabs(rs)) *
                               (4.0 + fabs(m2) +
                                fabs(xhat[col]) * (2.0 + (a1 + ax) / (double)n));
            if (dres->passed)
                expect("dresidual", r * n + col, at(dres, r * n + col, c->h_dtype), dh, slack,
                       c->h_dtype);
            if (dx->passed) {
                int keep = kept(c, r, col);
                double want = keep ? dh / (1.0 - c->p) : 0.0;
                expect("dx", r * n + col, at(dx, r * n + col, c->dtype), want,
                       keep ? slack / (1.0 - c->p) + slack_per_term * fabs(want) : 0.0, c->dtype);
            }
        }
    }
    for (int64_t col = 0; col < n; col++) {
        if (unknown[col])
            continue;
        if (dw->passed)
            expect("dweight", col, at(dw, col, c->param_dtype), dw_sum[col],
                   slack_per_term * (double)(c->rows + 1) * dw_mag[col] + dw_under[col], c->param_dtype);
        if (db->passed)
            expect("dbias", col, at(db, col, c->param_dtype), db_sum[col],
                   slack_per_term * (double)(c->rows + 1) * db_mag[col], c->param_dtype);
    }
    free(xhat), free(wdy), free(dw_sum), free(dw_mag), free(db_sum), free(db_mag), free(dw_under);
    free(unknown);
}

/* y = gate * s * up with s = sigmoid(gate); dgate = dy * up * s * (1 + gate
 * * (1 - s)); dup = dy * gate * s. The header names no arithmetic precision;
 * the slack is that of double (exp's error moves s by at most its relative
 * error, and 1 - s is off by at most 2^-53 absolutely). */
static void check_swiglu(const call *c, int backward) {
    const operand *gate = &c->o[backward ? GB_GATE : GF_GATE],
                  *up = &c->o[backward ? GB_UP : GF_UP];
    for (int64_t r = 0; r < c->rows; r++)
        for (int64_t col = 0; col < c->cols; col++) {
            int64_t i = r * c->cols + col;
            double g = at(gate, r * gate->stride + col, c->dtype);
            double u = at(up, r * up->stride + col, c->dtype);
            double sig = 1.0 / (1.0 + exp(-g));
            if (!backward) {
                double want = g * sig * u;
                expect("y", i, at(&c->o[GF_Y], i, c->dtype), want, SLACK * fabs(want),
                       c->dtype);
                continue;
            }
            const operand *dy = &c->o[GB_DY], *dgate = &c->o[GB_DGATE], *dup = &c->o[GB_DUP];
            double d = at(dy, r * dy->stride + col, c->dtype);
            if (dgate->passed) {
                double scale = d * u * sig;
                expect("dgate", i, at(dgate, i, c->dtype), scale * (1.0 + g * (1.0 - sig)),
                       SLACK * fabs(scale) * (2.0 + 2.0 * fabs(g)), c->dtype);
            }
            if (dup->passed) {
                double want = d * g * sig;
                expect("dup", i, at(dup, i, c->dtype), want, SLACK * fabs(want), c->dtype);
            }
        }
}

/* gelu(g) and gelu'(g) as the header defines them (the erf form through
 * 1 + erf, not the library's erfc). */
static double gelu_and_grad(double g, int approximate, double *grad) {
    if (approximate == FO_GELU_TANH) {
        const double k = sqrt(2.0 / M_PI), t = tanh(k * (g + 0.044715 * g * g * g));
        *grad = 0.5 * (1.0 + t) + 0.5 * g * (1.0 - t * t) * k * (1.0 + 3.0 * 0.044715 * g * g);
        return 0.5 * g * (1.0 + t);
    }
    const double cdf = 0.5 * (1.0 + erf(g / sqrt(2.0)));
    *grad = cdf + g * exp(-0.5 * g * g) / sqrt(2.0 * M_PI);
    return g * cdf;
}

/* y = gelu(gate) * up; dgate = dy * up * gelu'(gate); dup = dy * gelu(gate).
 * Slack: double's, a few ulps of each term (1 + erf and 1 + tanh lose
 * digits near -1: absolutely, up to |gate| ulps of 1). */
static void check_geglu(const call *c, int backward) {
    const operand *gate = &c->o[backward ? GB_GATE : GF_GATE],
                  *up = &c->o[backward ? GB_UP : GF_UP];
    for (int64_t r = 0; r < c->rows; r++)
        for (int64_t col = 0; col < c->cols; col++) {
            const int64_t i = r * c->cols + col;
            const double g = at(gate, r * gate->stride + col, c->dtype);
            const double u = at(up, r * up->stride + col, c->dtype);
            double grad;
            const double value = gelu_and_grad(g, c->approximate, &grad);
            const double terms = 8.0 * (1.0 + fabs(g) * (1.0 + 0.2 * g * g));
            if (!backward) {
                expect("y", i, at(&c->o[GF_Y], i, c->dtype), value * u,
                       SLACK * fabs(u) * terms, c->dtype);
                continue;
            }
            const operand *dy = &c->o[GB_DY], *dgate = &c->o[GB_DGATE], *dup = &c->o[GB_DUP];
            const double d = at(dy, r * dy->stride + col, c->dtype);
            if (dgate->passed)
                expect("dgate", i, at(dgate, i, c->dtype), d * u * grad,
                       SLACK * fabs(d * u) * terms, c->dtype);
            if (dup->passed)
                expect("dup", i, at(dup, i, c->dtype), d * value, SLACK * fabs(d) * terms,
                       c->dtype);
        }
}

/* The header's formulas for gpt-oss's clamped SwiGLU, element by element
 * (the comparisons keep a NaN gate or up NaN; NaN wants are not checked). */
static void check_clamped(const call *c, int backward) {
    const operand *gu = &c->o[CS_GATE_UP], *out = &c->o[CS_OUT], *dy = &c->o[CS_DY];
    const double alpha = c->alpha, limit = c->limit;
    for (int64_t r = 0; r < c->rows; r++)
        for (int64_t col = 0; col < c->cols; col++) {
            const int pairs = c->glu_layout == FO_GLU_INTERLEAVED;
            const int64_t gi = pairs ? 2 * col : col, ui = pairs ? 2 * col + 1 : c->cols + col;
            const double gate = at(gu, r * gu->stride + gi, c->dtype);
            const double up = at(gu, r * gu->stride + ui, c->dtype);
            const double g = gate > limit ? limit : gate;
            const double u = up > limit ? limit : up < -limit ? -limit : up;
            const double s = 1.0 / (1.0 + exp(-alpha * g));
            const double terms = 8.0 * (1.0 + fabs(alpha * g));
            if (!backward) {
                const double want = (u + 1.0) * (g * s);
                expect("y", r * c->cols + col, at(out, r * c->cols + col, c->dtype), want,
                       SLACK * fabs(want) * terms + UNDERFLOW * (1.0 + fabs(u + 1.0)), c->dtype);
                continue;
            }
            const double d = at(dy, r * dy->stride + col, c->dtype);
            const int closed = c->grad_at_limit != 0;
            const int gate_passes = closed ? gate <= limit : gate < limit;
            const int up_passes = closed ? up >= -limit && up <= limit : up > -limit && up < limit;
            const double dgate = gate_passes ? d * (u + 1.0) * s * (1.0 + alpha * g * (1.0 - s)) : 0.0;
            const double dup = up_passes ? d * (g * s) : 0.0;
            const int64_t row = r * 2 * c->cols;
            /* a product among the subnormals is off by up to UNDERFLOW, times what multiplies it after */
            const double underflow = UNDERFLOW * (2.0 + fabs(d) + fabs(d * (u + 1.0)));
            expect("dgate", row + gi, at(out, row + gi, c->dtype), dgate,
                   SLACK * fabs(d * (u + 1.0) * s) * terms + underflow, c->dtype);
            expect("dup", row + ui, at(out, row + ui, c->dtype), dup, SLACK * fabs(dup) * terms + underflow,
                   c->dtype);
        }
}

/* The header's formulas, element by element; the dimensions past
 * rotary_dim are copied: the same value (NaN for NaN). */
static void check_rope(const call *c) {
    const int backward = c->op == ROPE_BACKWARD, heads_first = c->layout == FO_ROPE_HEADS_FIRST;
    const int64_t half = c->rotary_dim / 2, heads[2] = {c->q_heads, c->k_heads};
    const operand *cos = &c->o[RO_COS], *sin = &c->o[RO_SIN];
    for (int x = 0; x < 2; x++) {
        const operand *out = &c->o[x ? RO_KOUT : RO_QOUT], *in = &c->o[x ? RO_K : RO_Q];
        if (!out->passed || c->batch == 0 || c->tokens == 0 || heads[x] == 0)
            continue; /* no element (however big the other sizes are) */
        for (int64_t b = 0; b < c->batch; b++)
            for (int64_t h = 0; h < heads[x]; h++)
                for (int64_t t = 0; t < c->tokens; t++) {
                    const int64_t i0 = b * (c->batch > 1 ? in->s[0] : 0) +
                                       h * (heads[x] > 1 ? in->s[heads_first ? 1 : 2] : 0) +
                                       t * (c->tokens > 1 ? in->s[heads_first ? 2 : 1] : 0);
                    const int64_t o0 = (heads_first ? (b * heads[x] + h) * c->tokens + t
                                                    : (b * c->tokens + t) * heads[x] + h) *
                                       c->head_dim;
                    /* (the tables' strides may be anything where nothing rotates) */
                    const int64_t c0 = half ? b * cos->s[0] + t * cos->s[1] : 0;
                    const int64_t s0 = half ? b * sin->s[0] + t * sin->s[1] : 0;
                    for (int64_t j = 0; j < c->head_dim; j++) {
                        const double v = at(in, i0 + j, c->dtype);
                        const double got = at(out, o0 + j, c->dtype);
                        if (j >= c->rotary_dim) {
                            if (!same_value(get_bits(out->data, o0 + j, c->dtype),
                                            round_bits(v, c->dtype), c->dtype))
                                fail("%s_out[%" PRId64 "] is %.17g, not the input's %.17g",
                                     x ? "k" : "q", o0 + j, got, v);
                            continue;
                        }
                        /* j's pair: j + h / j - h (halves), j + 1 / j - 1 (interleaved) */
                        const int lower = c->pairs == FO_ROPE_INTERLEAVED ? j % 2 == 0 : j < half;
                        const int64_t other = c->pairs == FO_ROPE_INTERLEAVED ? (lower ? j + 1 : j - 1)
                                                                              : (lower ? j + half : j - half);
                        const double partner = at(in, i0 + other, c->dtype);
                        const double cv = at(cos, c0 + j, c->cos_dtype);
                        /* forward: rotate_half(x)[j] = -x[partner] for the pair's lower,
                         * x[partner] for its upper; backward its transpose: x[partner]
                         * s[partner] for the lower, -x[partner] s[partner] for the upper */
                        const double sv = at(sin, s0 + (backward ? other : j), c->cos_dtype);
                        const double term = (lower != backward ? -partner : partner) * sv;
                        expect(x ? "k_out" : "q_out", o0 + j, got, v * cv + term,
                               SLACK * (fabs(v * cv) + fabs(term)), c->dtype);
                    }
                }
    }
}

/* y = weight * t + bias with t = tanh(alpha * x). Slack: double's, a few
 * ulps of each term (tanh's error, and alpha * x's rounding, move t by at
 * most an ulp or two), and an underflow of alpha * x scaled by weight. */
static void check_dyt_forward(const call *c) {
    const operand *y = &c->o[DF_Y], *x = &c->o[DF_X], *w = &c->o[DF_W], *b = &c->o[DF_B];
    const int pd = c->param_dtype;
    const double alpha = at(&c->o[DF_ALPHA], 0, pd);
    for (int64_t r = 0; r < c->rows; r++)
        for (int64_t col = 0; col < c->cols; col++) {
            const int64_t i = r * c->cols + col;
            const double wv = at(w, col, pd), bv = b->passed ? at(b, col, pd) : 0.0;
            const double t = tanh(alpha * at(x, r * x->stride + col, c->dtype));
            expect("y", i, at(y, i, c->dtype), wv * t + bv,
                   SLACK * (2.0 * fabs(wv * t) + fabs(bv)) + UNDERFLOW * 2.0 * (2.0 + fabs(wv)),
                   c->dtype);
        }
}

/* The header's gradients, in its order of products (so an overflow or a
 * 0 * inf is where the library has it). 1 - t^2 is off by a few ulps of 1
 * absolutely (t near 1 cancels), hence the slack on |dy * weight * alpha|
 * (|dy * weight * x| for dalpha); the sums allow double's error of summing
 * their terms in another order, as dbias of bias_scale_relu does. Products
 * among the subnormals are off by UNDERFLOW, times what multiplies them
 * after (twice: here and in the library). */
static void check_dyt_backward(const call *c) {
    const operand *dx = &c->o[DB_DX], *dalpha = &c->o[DB_DALPHA], *dw = &c->o[DB_DW],
                  *db = &c->o[DB_DB], *dy = &c->o[DB_DY], *x = &c->o[DB_X], *w = &c->o[DB_W];
    const int64_t n = c->cols;
    const int pd = c->param_dtype;
    const double alpha = at(&c->o[DB_ALPHA], 0, pd);
    /* per column: the sums for dweight and dbias over rows, with the
     * magnitudes of their terms (n + 1: calloc(0) may give NULL) */
    const size_t count = (size_t)n + 1;
    double *dw_sum = calloc(count, sizeof(double)), *dw_mag = calloc(count, sizeof(double));
    double *dw_under = calloc(count, sizeof(double));
    double *db_sum = calloc(count, sizeof(double)), *db_mag = calloc(count, sizeof(double));
    if (!dw_sum || !dw_mag || !dw_under || !db_sum || !db_mag)
        abort();
    double da_sum = 0.0, da_mag = 0.0, da_wide = 0.0, da_under = 0.0;
    for (int64_t r = 0; n > 0 && r < c->rows; r++) /* (rows is unbounded beside cols 0) */
        for (int64_t col = 0; col < n; col++) {
            const double g = at(dy, r * dy->stride + col, c->dtype);
            const double xv = at(x, r * x->stride + col, c->dtype), wv = at(w, col, pd);
            const double t = tanh(alpha * xv), slope = 1.0 - t * t, dyw = g * wv;
            if (dx->passed) {
                const double want = dyw * alpha * slope;
                expect("dx", r * n + col, at(dx, r * n + col, c->dtype), want,
                       SLACK * (4.0 * fabs(dyw * alpha) + 2.0 * fabs(want)) +
                           UNDERFLOW * 2.0 * (3.0 + fabs(alpha)),
                       c->dtype);
            }
            const double term = dyw * xv * slope;
            da_sum += term;
            da_mag += fabs(term);
            da_wide += fabs(dyw * xv);
            da_under += UNDERFLOW * 2.0 * (3.0 + fabs(xv));
            dw_sum[col] += g * t;
            dw_mag[col] += fabs(g * t);
            dw_under[col] += UNDERFLOW * 2.0 * (2.0 + fabs(g));
            db_sum[col] += g;
            db_mag[col] += fabs(g);
        }
    /* rows x cols fits: place() bounds it */
    const double terms = n > 0 ? (double)(c->rows * n) : 0.0;
    if (dalpha->passed)
        expect("dalpha", 0, at(dalpha, 0, pd), da_sum,
               SLACK * ((terms + 1.0) * da_mag + 4.0 * da_wide) + da_under, pd);
    for (int64_t col = 0; col < n; col++) {
        if (dw->passed)
            expect("dweight", col, at(dw, col, pd), dw_sum[col],
                   SLACK * (double)(c->rows + 2) * dw_mag[col] + dw_under[col], pd);
        if (db->passed)
            expect("dbias", col, at(db, col, pd), db_sum[col],
                   SLACK * (double)(c->rows + 1) * db_mag[col], pd);
    }
    free(dw_sum), free(dw_mag), free(dw_under), free(db_sum), free(db_mag);
}

/* FP8 from the formats' definitions, independent of lib/cpu/quantize_fp8.c's
 * rounding of float bits: every code decoded to a double (e4m3fn: bias 7,
 * 3 mantissa bits, 0x7F NaN, no inf; e5m2: bias 15, 2 mantissa bits,
 * IEEE-like), and an encoder that searches the finite codes for the one
 * nearest, ties to the even code. */
static double fp8_decode(unsigned code, int fp8_dtype) {
    const int e4m3 = fp8_dtype == FO_FP8_E4M3, mantissa = e4m3 ? 3 : 2, bias = e4m3 ? 7 : 15;
    const unsigned magnitude = code & 0x7F, e = magnitude >> mantissa,
                   m = magnitude & ((1u << mantissa) - 1);
    double v;
    if (e4m3 ? magnitude == 0x7F : e == 31)
        v = e4m3 || m ? NAN : INFINITY;
    else if (e == 0) /* subnormal: m steps of 2^(1 - bias - mantissa) */
        v = ldexp(m, 1 - bias - mantissa);
    else
        v = ldexp((double)((1u << mantissa) + m), (int)e - bias - mantissa);
    return code & 0x80 ? -v : v;
}

/* The non-negative finite values of each format, by code (made at start-up
 * and checked against the formats' known points). */
static double fp8_values[2][128];
static const unsigned fp8_top[2] = {0x7E, 0x7B}; /* the largest finite codes */

static uint8_t fp8_reference(float v, int fp8_dtype) {
    if (isnan(v)) return 0x7F; /* the header's NaN, whatever the sign */
    const double a = fabs((double)v), *values = fp8_values[fp8_dtype];
    const unsigned top = fp8_top[fp8_dtype];
    if (!(a <= values[top]))
        fail("the reference was asked to encode %a, past the FP8 range", (double)v);
    unsigned lo = 0, hi = top; /* the last code whose value is <= a */
    while (lo < hi) {
        const unsigned mid = (lo + hi + 1) / 2;
        if (values[mid] <= a)
            lo = mid;
        else
            hi = mid - 1;
    }
    unsigned best = lo;
    if (lo < top) {
        const double below = a - values[lo], above = values[lo + 1] - a;
        if (above < below || (above == below && (lo + 1) % 2 == 0)) best = lo + 1;
    }
    return (uint8_t)((signbit(v) ? 0x80 : 0) | best);
}

/* The header's formulas: amax of the finite |x| (x as float32, float64
 * rounded once), q = float32(fp8_max / double(max(amax, 1e-12))) (rowwise:
 * the power of two at or under it, taken with frexpf), y = the FP8 of
 * clamp(float32(x) * q) in float32, scale = 1 / q; each to the bit, y_t
 * the transpose of y. Empty x still has its scales (amax 0). */
static void check_quantize(const call *c) {
    const operand *y = &c->o[QF_Y], *yt = &c->o[QF_YT], *scale = &c->o[QF_SCALE],
                  *amax = &c->o[QF_AMAX], *x = &c->o[QF_X];
    const int rowwise = c->recipe == FO_FP8_ROWWISE;
    const float limit = c->fp8_dtype == FO_FP8_E4M3 ? 448.0f : 57344.0f;
    const int64_t groups = rowwise ? c->rows : 1;
    for (int64_t g = 0; g < groups; g++) {
        /* the group's rows; none where cols is 0 (rows is unbounded then) */
        const int64_t r0 = rowwise ? g : 0, r1 = c->cols == 0 ? r0 : rowwise ? g + 1 : c->rows;
        float m = 0.0f;
        for (int64_t r = r0; r < r1; r++)
            for (int64_t col = 0; col < c->cols; col++) {
                const float v = (float)at(x, r * x->stride + col, c->dtype);
                if (isfinite(v) && fabsf(v) > m) m = fabsf(v);
            }
        float q = (float)((double)limit / ((double)m < 1e-12 ? 1e-12 : (double)m));
        if (rowwise) {
            int e;
            (void)frexpf(q, &e); /* q = f 2^e with f in [0.5, 1) */
            q = ldexpf(1.0f, e - 1);
        }
        const float want_scale = 1.0f / q;
        float got;
        memcpy(&got, scale->data + g * (int64_t)sizeof got, sizeof got);
        if (memcmp(&got, &want_scale, sizeof got) != 0)
            fail("scale[%" PRId64 "] is %a, want %a (1 / q, amax %a)", g, (double)got,
                 (double)want_scale, (double)m);
        if (amax->passed) {
            memcpy(&got, amax->data + g * (int64_t)sizeof got, sizeof got);
            if (memcmp(&got, &m, sizeof got) != 0)
                fail("amax[%" PRId64 "] is %a, want %a", g, (double)got, (double)m);
        }
        for (int64_t r = r0; r < r1; r++)
            for (int64_t col = 0; col < c->cols; col++) {
                const float xv = (float)at(x, r * x->stride + col, c->dtype);
                float v = xv * q;
                if (v > limit)
                    v = limit;
                else if (v < -limit)
                    v = -limit;
                const uint8_t want = fp8_reference(v, c->fp8_dtype);
                if (y->passed && y->data[r * c->cols + col] != want)
                    fail("y[%" PRId64 ", %" PRId64 "] is %#04x, want %#04x (x %a, q %a, x q %a)", r,
                         col, y->data[r * c->cols + col], want, (double)xv, (double)q, (double)v);
                if (yt->passed && yt->data[col * c->rows + r] != want)
                    fail("y_t[%" PRId64 ", %" PRId64 "] is %#04x, want %#04x (x %a, q %a, x q %a)",
                         col, r, yt->data[col * c->rows + r], want, (double)xv, (double)q,
                         (double)v);
            }
    }
}

static void check_values(const call *c) {
    if (c->op == QUANTIZE_FP8) {
        check_quantize(c); /* scales even for empty x */
        return;
    }
    if (c->cols == 0 && c->op != DYT_BACKWARD)
        return; /* nothing to check, however many rows there are (DyT's dalpha: 0) */
    switch (c->op) {
    case RELU_FORWARD: check_relu_forward(c); break;
    case RELU_BACKWARD: check_relu_backward(c); break;
    case SQUARE_FORWARD: check_square(c, 0); break;
    case SQUARE_BACKWARD: check_square(c, 1); break;
    case REDUCE_SUM: check_reduce_sum(c); break;
    case NORM_FORWARD: check_norm_forward(c); break;
    case NORM_BACKWARD: check_norm_backward(c); break;
    case SWIGLU_FORWARD: check_swiglu(c, 0); break;
    case SWIGLU_BACKWARD: check_swiglu(c, 1); break;
    case GEGLU_FORWARD: check_geglu(c, 0); break;
    case GEGLU_BACKWARD: check_geglu(c, 1); break;
    case CLAMPED_FORWARD: check_clamped(c, 0); break;
    case CLAMPED_BACKWARD: check_clamped(c, 1); break;
    case ROPE_FORWARD:
    case ROPE_BACKWARD: check_rope(c); break;
    case DYT_FORWARD: check_dyt_forward(c); break;
    case DYT_BACKWARD: check_dyt_backward(c); break;
    default: abort();
    }
}

/* The status of a failing call: a documented code, never a CUDA one for the
 * CPU, and a message saying why. */
static void check_failure(const call *c, int status) {
    if (status < FO_ERR_INVALID_ARGUMENT || status > FO_ERR_WORKSPACE_TOO_SMALL)
        fail("status %d is not a documented fo_status", status);
    if (c->device_type == FO_DEVICE_CPU &&
        (status == FO_ERR_CUDA_NOT_BUILT || status == FO_ERR_CUDA_RUNTIME))
        fail("status %d (%s) for a CPU call", status, fo_status_string(status));
    const char *message = fo_last_error();
    if (!message || !message[0])
        fail("status %d but fo_last_error() is empty", status);
}

/* ---- known library bugs ----------------------------------------------------
 * Calls that would hit a library bug already found and reported are skipped,
 * so that a run keeps looking for new ones instead of finding the same one
 * again. Build with -DFUZZ_STRICT (tests/fuzz/run.sh: FUZZ_STRICT=1) to make
 * them anyway, e.g. to check a fix; delete an entry once its bug is fixed. */
static const char *known_bug(const call *c) {
#ifndef FUZZ_STRICT
    /* Add an entry here (with the file, line and input) to keep CI green
     * while a reported library bug awaits its fix. */
#endif
    (void)c;
    return NULL;
}

static void run_call(call *c, input *in) {
    if (known_bug(c))
        return;
    if (!place(c)) {
        release(c); /* what place() allocated before it gave up */
        return;
    }
    fill(c, in);
    describe(c);
    /* FUZZ_PRINT_CALLS=1: each call before it runs, to see what a timeout or
     * a crash inside the library was doing */
    if (print_calls)
        fprintf(stderr, "fuzz_ops: %s\n", call_text);
    int status = invoke(c);
    if (status != FO_OK) {
        if (c->v.level == PASS)
            fail("a call the header allows failed: status %d (%s): %s", status,
                 fo_status_string(status), fo_last_error());
        check_failure(c, status);
        for (int i = 0; i < c->count; i++)
            if (c->o[i].data && memcmp(c->o[i].data, c->o[i].saved, c->o[i].bytes) != 0)
                fail("%s changed, but the call failed (status %d: %s)", c->o[i].name, status,
                     fo_last_error());
        release(c);
        return;
    }
    if (c->v.level == FAIL)
        fail("a call the header forbids succeeded (%s)", c->v.why);
    for (int i = 0; i < c->count; i++)
        if (c->o[i].role == IN && c->o[i].data &&
            memcmp(c->o[i].data, c->o[i].saved, c->o[i].bytes) != 0)
            fail("input %s changed", c->o[i].name);
    check_values(c);
    /* "the same bits on every run": again, from the same starting bytes */
    unsigned char *first[MAX_OPERANDS] = {0};
    for (int i = 0; i < c->count; i++) {
        operand *o = &c->o[i];
        if (o->role != OUT || !o->data)
            continue;
        first[i] = malloc(o->bytes ? o->bytes : 1);
        if (!first[i])
            abort();
        memcpy(first[i], o->data, o->bytes);
        memcpy(o->data, o->saved, o->bytes);
    }
    status = invoke(c);
    if (status != FO_OK)
        fail("the same call failed the second time: status %d", status);
    for (int i = 0; i < c->count; i++) {
        if (first[i] && memcmp(first[i], c->o[i].data, c->o[i].bytes) != 0)
            fail("%s differs between two identical calls", c->o[i].name);
        free(first[i]);
    }
    release(c);
}

/* The four *_workspace_bytes queries: a valid query succeeds with a size
 * >= 0; an invalid one fails and leaves *bytes alone. Each gets the argument
 * struct of a valid call but for the fuzzed device, shape, dtype and
 * struct_size (its other checks are the call's, fuzzed with the call). */
static void run_query(call *c, input *in) {
    int which = u8(in) % 5;
    c->rows = take_extent(in, 17);
    c->cols = which == 1 ? 1 : take_extent(in, 300);
    c->dtype = take_dtype(in);
    int null_bytes = u8(in) >= 240;
    take_struct_size(c, in,
                     which == 0   ? sizeof(fo_bias_scale_relu_backward_args)
                     : which == 1 ? sizeof(fo_reduce_sum_args)
                     : which == 2 ? sizeof(fo_norm_backward_args)
                     : which == 3 ? sizeof(fo_dyt_args)
                                  : sizeof(fo_quantize_fp8_args));
    if (c->device_type != FO_DEVICE_CPU)
        must_fail(&c->v, "device_type %d (a CPU-only build)", c->device_type);
    if (c->rows < 0 || c->cols < 0)
        must_fail(&c->v, "a negative size");
    /* byte offsets of one row (or of a 1 x cols parameter) must fit in 64
     * bits, whatever rows is */
    if (c->cols > INT64_MAX / 16)
        must_fail(&c->v, "cols %" PRId64 " past INT64_MAX / 16", c->cols);
    if (!dtype_ok(c->dtype))
        must_fail(&c->v, "dtype %d", c->dtype);
    if (null_bytes)
        must_fail(&c->v, "bytes is a null pointer");
    int64_t elements;
    if (c->v.level != FAIL && (__builtin_mul_overflow(c->rows, c->cols, &elements) ||
                               elements > INT64_MAX / 16 || c->rows > INT64_MAX / 16))
        may_fail(&c->v); /* a size no operand (dy, h, mean, ...) can have */
    static const char *const names[] = {
        "fo_bias_scale_relu_backward_workspace_bytes", "fo_reduce_sum_workspace_bytes",
        "fo_norm_backward_workspace_bytes", "fo_dyt_backward_workspace_bytes",
        "fo_quantize_fp8_workspace_bytes"};
    snprintf(call_text, sizeof call_text,
             "%s device %d rows/numel %" PRId64 " cols %" PRId64 " dtype %d bytes %s "
             "struct_size %" PRId64 "%s; model: %s%s",
             names[which], c->device_type, c->rows, c->cols, c->dtype,
             null_bytes ? "null" : "given", c->struct_size,
             c->null_args ? " (NULL struct)" : "",
             c->v.level == PASS ? "must succeed" : c->v.level == FAIL ? "must fail: " : "either",
             c->v.why);
    if (print_calls)
        fprintf(stderr, "fuzz_ops: %s\n", call_text);
    int64_t *bytes = null_bytes ? NULL : malloc(sizeof *bytes);
    const int64_t canary = (int64_t)0x5A5A5A5A5A5A5A5A;
    if (bytes)
        *bytes = canary;
    int status;
    if (which == 0) {
        fo_bias_scale_relu_backward_args a = relu_backward_struct(c);
        a.dbias = PLACEHOLDER;
        a.dy = a.mask = PLACEHOLDER;
        a.dy_row_stride = c->cols;
        a.bias_dtype = c->dtype;
        a.scale = 1.0;
        status = call_with_struct(c, &a, sizeof a, enter_relu_query, bytes);
    } else if (which == 1) {
        fo_reduce_sum_args a = reduce_sum_struct(c);
        a.out = a.x = PLACEHOLDER;
        a.numel = c->rows; /* the query's rows stand for numel */
        status = call_with_struct(c, &a, sizeof a, enter_reduce_sum_query, bytes);
    } else if (which == 2) {
        fo_norm_backward_args a = norm_backward_struct(c);
        a.dweight = PLACEHOLDER;
        a.dbias = c->rows & 1 ? PLACEHOLDER : 0;
        a.dy = a.h = a.mean = a.rstd = PLACEHOLDER;
        a.dy_row_stride = a.h_row_stride = c->cols;
        a.h_dtype = a.param_dtype = c->dtype;
        a.kind = FO_NORM_LAYER;
        status = call_with_struct(c, &a, sizeof a, enter_norm_query, bytes);
    } else if (which == 3) {
        c->param_dtype = c->dtype;
        fo_dyt_args a = dyt_struct(c);
        a.dweight = PLACEHOLDER;
        a.dalpha = c->rows & 1 ? PLACEHOLDER : 0;
        a.dy = a.x = a.alpha = a.weight = PLACEHOLDER;
        a.dy_row_stride = a.x_row_stride = c->cols;
        status = call_with_struct(c, &a, sizeof a, enter_dyt_query, bytes);
    } else {
        /* either recipe and FP8 dtype; y_t beside tensorwise only */
        c->recipe = c->rows & 1 ? FO_FP8_ROWWISE : FO_FP8_TENSORWISE;
        c->fp8_dtype = c->cols & 1 ? FO_FP8_E5M2 : FO_FP8_E4M3;
        fo_quantize_fp8_args a = quantize_struct(c);
        a.y = a.scale = a.x = PLACEHOLDER;
        a.y_t = c->recipe == FO_FP8_TENSORWISE && (c->cols & 2) ? PLACEHOLDER : 0;
        a.amax = c->cols & 4 ? PLACEHOLDER : 0;
        a.x_row_stride = c->cols;
        status = call_with_struct(c, &a, sizeof a, enter_quantize_fp8_query, bytes);
    }
    if (status != FO_OK) {
        if (c->v.level == PASS)
            fail("a valid query failed: status %d: %s", status, fo_last_error());
        check_failure(c, status);
        if (bytes && *bytes != canary)
            fail("a failing query wrote *bytes = %" PRId64, *bytes);
    } else {
        if (c->v.level == FAIL)
            fail("a query the header forbids succeeded (%s)", c->v.why);
        if (*bytes < 0 || *bytes == canary)
            fail("the query gave *bytes = %" PRId64, *bytes);
    }
    free(bytes);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    /* The target links lib/cuda_stubs.c: every CUDA call must be refused. */
    if (fo_cuda_built() != 0) {
        fprintf(stderr, "fuzz_ops: expects a CPU-only library\n");
        abort();
    }
    /* Random123's kat_vectors for philox4x32_10: counter, key, result. */
    static const uint32_t kat[3][10] = {
        {0, 0, 0, 0, 0, 0, 0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8},
        {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0x408f276d,
         0x41c83b0e, 0xa20bc7c6, 0x6d5451fd},
        {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0, 0xd16cfe09,
         0x94fdcceb, 0x5001e420, 0x24126ea1},
    };
    for (size_t i = 0; i < COUNT(kat); i++) {
        uint32_t out[4];
        philox4x32_10(kat[i], kat[i] + 4, out);
        if (memcmp(out, kat[i] + 6, sizeof out) != 0) {
            fprintf(stderr, "fuzz_ops: the reference Philox fails known answer %zu\n", i);
            abort();
        }
    }
    /* The FP8 tables, and known points of the formats: the smallest
     * subnormal, the smallest normal, 1, the largest finite value. */
    for (int f = 0; f < 2; f++)
        for (unsigned k = 0; k < 128; k++) fp8_values[f][k] = fp8_decode(k, f);
    static const struct {
        int fp8_dtype;
        unsigned code;
        double value;
    } fp8_kat[] = {{FO_FP8_E4M3, 0x01, 0x1p-9},  {FO_FP8_E4M3, 0x08, 0x1p-6},
                   {FO_FP8_E4M3, 0x38, 1.0},     {FO_FP8_E4M3, 0x7E, 448.0},
                   {FO_FP8_E4M3, 0xC0, -2.0},    {FO_FP8_E5M2, 0x01, 0x1p-16},
                   {FO_FP8_E5M2, 0x04, 0x1p-14}, {FO_FP8_E5M2, 0x3C, 1.0},
                   {FO_FP8_E5M2, 0x7B, 57344.0}, {FO_FP8_E5M2, 0x7C, INFINITY}};
    for (size_t i = 0; i < COUNT(fp8_kat); i++)
        if (fp8_decode(fp8_kat[i].code, fp8_kat[i].fp8_dtype) != fp8_kat[i].value) {
            fprintf(stderr, "fuzz_ops: the reference FP8 decoder fails known point %zu\n", i);
            abort();
        }
    if (!isnan(fp8_decode(0x7F, FO_FP8_E4M3)) || !isnan(fp8_decode(0xFF, FO_FP8_E4M3)) ||
        !isnan(fp8_decode(0x7D, FO_FP8_E5M2))) {
        fprintf(stderr, "fuzz_ops: the reference FP8 decoder's NaN codes are wrong\n");
        abort();
    }
    for (int f = 0; f < 2; f++) /* increasing up to the largest finite code */
        for (unsigned k = 1; k <= fp8_top[f]; k++)
            if (!(fp8_values[f][k] > fp8_values[f][k - 1])) {
                fprintf(stderr, "fuzz_ops: the FP8 table is not increasing at %#x\n", k);
                abort();
            }
    print_calls = getenv("FUZZ_PRINT_CALLS") != NULL;
    guard_page = mmap(NULL, GUARD_SIZE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (guard_page == MAP_FAILED) {
        perror("fuzz_ops: mmap");
        abort();
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    input in = {data, size, 0};
    call c;
    memset(&c, 0, sizeof c);
    c.op = u8(&in) % OP_COUNT;
    c.wild = u8(&in) & 1;
    in.rng = u32(&in) * UINT64_C(0x9E3779B97F4A7C15) + 1;
    uint8_t device = u8(&in);
    c.device_type = device < 232 ? FO_DEVICE_CPU
                    : device < 248 ? FO_DEVICE_CUDA
                                   : (int)u32(&in);
    c.device_index = (int)u32(&in); /* ignored on the CPU: anything goes */
    c.stream = (uintptr_t)u64(&in);
    switch (c.op) {
    case RELU_FORWARD: decode_relu_forward(&c, &in); break;
    case RELU_BACKWARD: decode_relu_backward(&c, &in); break;
    case SQUARE_FORWARD: decode_square(&c, &in, 0); break;
    case SQUARE_BACKWARD: decode_square(&c, &in, 1); break;
    case REDUCE_SUM: decode_reduce_sum(&c, &in); break;
    case NORM_FORWARD: decode_norm_forward(&c, &in); break;
    case NORM_BACKWARD: decode_norm_backward(&c, &in); break;
    case SWIGLU_FORWARD: decode_swiglu(&c, &in, 0); break;
    case SWIGLU_BACKWARD: decode_swiglu(&c, &in, 1); break;
    case GEGLU_FORWARD: decode_geglu(&c, &in, 0); break;
    case GEGLU_BACKWARD: decode_geglu(&c, &in, 1); break;
    case CLAMPED_FORWARD: decode_clamped(&c, &in, 0); break;
    case CLAMPED_BACKWARD: decode_clamped(&c, &in, 1); break;
    case DYT_FORWARD: decode_dyt(&c, &in, 0); break;
    case DYT_BACKWARD: decode_dyt(&c, &in, 1); break;
    case QUANTIZE_FP8:
        decode_quantize(&c, &in);
        break;
    case ROPE_FORWARD:
    case ROPE_BACKWARD: decode_rope(&c, &in); break;
    default: run_query(&c, &in); return 0;
    }
    for (int i = 0; i < c.count; i++)
        judge_operand(&c.v, &c.o[i]);
    run_call(&c, &in);
    return 0;
}
