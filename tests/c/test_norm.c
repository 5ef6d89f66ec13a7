/* test_norm.c: tests of the normalization entry points of libfused_ops
 * (fo_norm_forward, fo_norm_backward, fo_norm_backward_workspace_bytes),
 * calling the C ABI directly, without Python.
 *
 *  - Error paths, one call each, on the CPU: the status, a message that
 *    starts with the op and names the offending value, and nothing written.
 *  - device_type CUDA: refused in a CPU-only build; in a CUDA build without a
 *    GPU (unless FO_TEST_HAS_GPU=1) the runtime's failure is reported and
 *    nothing is written.
 *  - The dropout mask: the Philox generator against Random123's published
 *    known answers, the mask the library applies against philox.h's
 *    documented formula, the keep fraction, and that other seeds and offsets
 *    give other masks.
 *  - Values on the CPU against references computed here in double: forward
 *    (y, residual_out, mean, rstd) and backward (dx, dresidual, dweight,
 *    dbias, from the analytic gradient), for LayerNorm and RMSNorm, every
 *    dtype combination the header allows, strided and broadcast inputs,
 *    dropout, and the edge shapes (cols = 1, rows = 0, several CPU chunks).
 *    Every result is computed twice and must have the same bits both times.
 *
 * Every output is poisoned and surrounded by guard bytes (harness.h).
 * Exit status 0 when all checks pass; failures are printed to stderr.
 */
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fused_ops.h"
#include "harness.h"
#include "philox.h" /* the documented mask formula: fo_philox and its helpers */

/* Set by tests/meson.build from the build configuration. */
#ifndef FO_TEST_EXPECT_CUDA
#error "FO_TEST_EXPECT_CUDA (1 when meson built the CUDA kernels) must be defined"
#endif

#define COUNT(array) (sizeof(array) / sizeof((array)[0]))

enum { CPU = FO_DEVICE_CPU, CUDA = FO_DEVICE_CUDA };
enum { F32 = FO_DTYPE_F32, F16 = FO_DTYPE_F16, BF16 = FO_DTYPE_BF16, F64 = FO_DTYPE_F64 };
enum { LAYER = FO_NORM_LAYER, RMS = FO_NORM_RMS };
enum {
    OK = FO_OK,
    INVALID = FO_ERR_INVALID_ARGUMENT,
    BAD_DTYPE = FO_ERR_UNSUPPORTED_DTYPE,
    BAD_DEVICE = FO_ERR_UNSUPPORTED_DEVICE,
    NOT_BUILT = FO_ERR_CUDA_NOT_BUILT,
    CUDA_RUNTIME = FO_ERR_CUDA_RUNTIME,
    TOO_SMALL = FO_ERR_WORKSPACE_TOO_SMALL,
};
enum { NO_RESIDUAL = -1 }; /* a norm_setup's residual_dtype: no residual */

#define BIG (INT64_MAX / 8) /* times 4 cols, or as a stride times 2 rows, overflows */

static int stats_dtype(int dtype) { return dtype == F64 ? F64 : F32; }

/* Elements of a rows x cols operand whose rows start `stride` apart. */
static int64_t strided_elems(int64_t rows, int64_t cols, int64_t stride) {
    if (rows == 0 || cols == 0)
        return 0;
    return (rows - 1) * (rows > 1 ? stride : 0) + cols;
}

/* `elems` elements of dtype starting `offset` elements past a 64-byte
 * boundary (0: 16-byte aligned; 1: aligned to the element only). */
static guarded new_operand(int dtype, int64_t elems, size_t offset) {
    return guarded_new((size_t)elems * dtype_size(dtype), offset * dtype_size(dtype));
}

/* An input of values center + spread * u, u uniform in (-1, 1). Elements
 * between rows (a stride over cols) hold NaN: a kernel that reads one gets a
 * NaN result. */
static guarded norm_input(uint64_t *rng, int dtype, int64_t rows, int64_t cols,
                          int64_t stride, size_t offset, double center, double spread) {
    int64_t n = strided_elems(rows, cols, stride);
    guarded g = new_operand(dtype, n, offset);
    for (int64_t i = 0; i < n; i++)
        put(g.data, i, dtype, NAN);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++)
            put(g.data, r * (rows > 1 ? stride : 0) + c, dtype,
                center + spread * rng_uniform(rng));
    return g;
}

/* A copy of an input's data, to check later that the call left it alone. */
static unsigned char *snapshot(const guarded *g) {
    unsigned char *copy = malloc(g->bytes + 1);
    if (!copy) {
        fprintf(stderr, "test_norm: out of memory\n");
        exit(2);
    }
    memcpy(copy, g->data, g->bytes);
    return copy;
}

static int unchanged(const guarded *g, const unsigned char *copy) {
    return guards_intact(g) && memcmp(g->data, copy, g->bytes) == 0;
}

/* Two outputs hold the same bytes (a second run gave the same bits). */
static int same_bytes(const guarded *a, const guarded *b) {
    return a->bytes == b->bytes && memcmp(a->data, b->data, a->bytes) == 0 &&
           guards_intact(a) && guards_intact(b);
}

/* The spacing of dtype's numbers at |v| (subnormal spacing near 0). */
static double ulp(double v, int dtype) {
    int mant, emin;
    switch (dtype) {
    case F64: mant = 52, emin = -1022; break;
    case F32: mant = 23, emin = -126; break;
    case F16: mant = 10, emin = -14; break;
    default: mant = 7, emin = -126; break;
    }
    if (!isfinite(v))
        return INFINITY;
    int e;
    frexp(fabs(v), &e);
    int E = v == 0.0 ? emin : e - 1;
    if (E < emin)
        E = emin;
    return ldexp(1.0, E - mant);
}

/* The relative arithmetic error allowed on top of the output's rounding: the
 * header promises fp32 arithmetic (fp64 for fp64 data), so the references in
 * double hold to a few fp32 (fp64) units of the terms' magnitudes. */
static double arith(int dtype) { return dtype == F64 ? 0x1p-44 : 0x1p-15; }

/* ========================================================================
 * Error paths. Every call points into NBUF poisoned buffers; a refused call
 * must leave all of them (and *bytes of a workspace query) untouched.
 * ======================================================================== */

enum { NBUF = 12, BUF_BYTES = 256 };
static guarded BUF[NBUF];

/* A marker message no case expects: a case cannot pass on a message left
 * over from an earlier call. */
#define STALE_DEVICE_TYPE -424242
#define STALE_TEXT "-424242"

static void before_case(void) {
    for (int i = 0; i < NBUF; i++)
        guarded_fill(&BUF[i], POISON);
    square_forward_call(STALE_DEVICE_TYPE, 0, 0, 0, 0, 1, 1, 1, F32);
}

static int all_untouched(void) {
    for (int i = 0; i < NBUF; i++)
        if (!untouched(&BUF[i]))
            return 0;
    return 1;
}

/* The call returned `want`; on an error the message starts with "op:" and
 * contains both needles, and nothing was written. */
static void expect_status(const char *op, const char *why, int got, int want,
                          const char *needle, const char *needle2) {
    const char *msg = fo_last_error();
    if (!CHECK(got == want, "%s, %s: status %d (%s), want %d (%s); message \"%s\"", op,
               why, got, fo_status_string(got), want, fo_status_string(want), msg))
        return;
    if (want == OK)
        return;
    size_t len = strlen(op);
    CHECK(strncmp(msg, op, len) == 0 && msg[len] == ':',
          "%s, %s: message \"%s\" does not start with the op", op, why, msg);
    CHECK(strstr(msg, STALE_TEXT) == NULL, "%s, %s: fo_last_error() not updated", op,
          why);
    CHECK(!needle || strstr(msg, needle), "%s, %s: message \"%s\" lacks \"%s\"", op, why,
          msg, needle);
    CHECK(!needle2 || strstr(msg, needle2), "%s, %s: message \"%s\" lacks \"%s\"", op,
          why, msg, needle2);
    CHECK(all_untouched(), "%s, %s: the refused call wrote to memory", op, why);
}

/* "name=0x<address>", as the messages print a misaligned address. */
static const char *at_text(const char *name, uintptr_t a) {
    static char ring[16][64];
    static unsigned next;
    char *s = ring[next++ % 16];
    snprintf(s, sizeof ring[0], "%s=0x%" PRIxPTR, name, a);
    return s;
}

/* ---- fo_norm_forward ---- */

typedef fo_norm_forward_args fwd_call;

/* A valid call: 2 x 4 f32 LayerNorm with an f32 residual, weight, bias,
 * mean, rstd and dropout 0.1. device_index and stream are ignored on the
 * CPU: odd ones are passed. */
static fwd_call fwd_base(void) {
    fwd_call a = {
        .struct_size = sizeof a, .device_type = CPU, .device_index = -3, .stream = 12345,
        .y = addr(&BUF[0]), .residual_out = addr(&BUF[1]),
        .mean = addr(&BUF[2]), .rstd = addr(&BUF[3]),
        .x = addr(&BUF[4]), .x_row_stride = 4,
        .residual = addr(&BUF[5]), .residual_row_stride = 4, .residual_dtype = F32,
        .weight = addr(&BUF[6]), .bias = addr(&BUF[7]), .param_dtype = F32,
        .rows = 2, .cols = 4, .dtype = F32, .kind = LAYER,
        .eps = 1e-5, .dropout_p = 0.1, .seed = 1234, .offset = 0,
    };
    return a;
}

/* One case: the base call with the changes in `...` (statements on `a`). */
#define FWD(why, status, needle, needle2, ...)                                        \
    do {                                                                              \
        fwd_call a = fwd_base();                                                      \
        __VA_ARGS__;                                                                  \
        before_case();                                                                \
        expect_status("fo_norm_forward", why, fo_norm_forward(&a), status, needle, needle2); \
    } while (0)

static void test_errors_forward(void) {
    section("errors: fo_norm_forward");
    const fwd_call b = fwd_base();

    FWD("the base call", OK, NULL, NULL, (void)0);
    FWD("device_type 7", BAD_DEVICE, "device_type=7", NULL, a.device_type = 7);
    FWD("device_type -1", BAD_DEVICE, "device_type=-1", NULL, a.device_type = -1);
    FWD("negative rows", INVALID, "rows=-3", NULL, a.rows = -3);
    FWD("negative cols", INVALID, "cols=-5", NULL, a.cols = -5);
    FWD("rows x cols overflows", INVALID, "rows=", "overflow", a.rows = BIG);

    /* dtype codes */
    FWD("dtype code 4", BAD_DTYPE, "dtype=4", NULL, a.dtype = 4);
    FWD("dtype code -1", BAD_DTYPE, "dtype=-1", NULL, a.dtype = -1);
    FWD("param_dtype code 42", BAD_DTYPE, "param_dtype=42", NULL, a.param_dtype = 42);
    FWD("param_dtype code -1", BAD_DTYPE, "param_dtype=-1", NULL, a.param_dtype = -1);
    FWD("residual_dtype code 7", BAD_DTYPE, "residual_dtype=7", NULL, a.residual_dtype = 7);
    FWD("residual_dtype code -2", BAD_DTYPE, "residual_dtype=-2", NULL,
        a.residual_dtype = -2);
    /* weight/bias and residual: x's dtype, or f32 under a half x */
    FWD("f64 x, f32 weight", BAD_DTYPE, "param_dtype float32", "dtype float64",
        a.dtype = F64, a.residual_dtype = F64);
    FWD("f32 x, f16 weight", BAD_DTYPE, "param_dtype float16", "dtype float32",
        a.param_dtype = F16);
    FWD("f32 x, bf16 weight", BAD_DTYPE, "param_dtype bfloat16", "dtype float32",
        a.param_dtype = BF16);
    FWD("f32 x, f64 weight", BAD_DTYPE, "param_dtype float64", "dtype float32",
        a.param_dtype = F64);
    FWD("f16 x, bf16 weight", BAD_DTYPE, "param_dtype bfloat16", "dtype float16",
        a.dtype = F16, a.residual_dtype = F16, a.param_dtype = BF16);
    FWD("bf16 x, f64 weight", BAD_DTYPE, "param_dtype float64", "dtype bfloat16",
        a.dtype = BF16, a.param_dtype = F64);
    FWD("f64 x, f32 residual", BAD_DTYPE, "residual_dtype float32", "dtype float64",
        a.dtype = F64, a.param_dtype = F64);
    FWD("f32 x, bf16 residual", BAD_DTYPE, "residual_dtype bfloat16", "dtype float32",
        a.residual_dtype = BF16);
    FWD("bf16 x, f16 residual", BAD_DTYPE, "residual_dtype float16", "dtype bfloat16",
        a.dtype = BF16, a.param_dtype = BF16, a.residual_dtype = F16);
    FWD("f16 x, f64 residual", BAD_DTYPE, "residual_dtype float64", "dtype float16",
        a.dtype = F16, a.residual_dtype = F64);
    FWD("bf16 x, f32 weight and f32 residual", OK, NULL, NULL, a.dtype = BF16);
    FWD("bf16 x, bf16 weight, f32 residual", OK, NULL, NULL, a.dtype = BF16,
        a.param_dtype = BF16);
    FWD("bf16 x, f32 weight, bf16 residual", OK, NULL, NULL, a.dtype = BF16,
        a.residual_dtype = BF16);
    FWD("f16 x, f32 weight, f16 residual", OK, NULL, NULL, a.dtype = F16,
        a.residual_dtype = F16);
    FWD("f64 throughout", OK, NULL, NULL, a.dtype = F64, a.param_dtype = F64,
        a.residual_dtype = F64);

    /* kind */
    FWD("kind 2", INVALID, "kind=2", NULL, a.kind = 2);
    FWD("kind -1", INVALID, "kind=-1", NULL, a.kind = -1);

    /* eps: finite and > 0 */
    FWD("eps 0", INVALID, "eps=0", NULL, a.eps = 0.0);
    FWD("eps -0", INVALID, "eps=-0", NULL, a.eps = -0.0);
    FWD("eps -1e-5", INVALID, "eps=-1e-05", NULL, a.eps = -1e-5);
    FWD("eps NaN", INVALID, "eps=", "nan", a.eps = NAN);
    FWD("eps +inf", INVALID, "eps=inf", NULL, a.eps = INFINITY);
    FWD("eps -inf", INVALID, "eps=-inf", NULL, a.eps = -INFINITY);
    FWD("eps, the smallest subnormal", OK, NULL, NULL, a.eps = 4.9406564584124654e-324);
    FWD("eps DBL_MAX", OK, NULL, NULL, a.eps = DBL_MAX);

    /* dropout_p in [0, 1), and only with a residual */
    FWD("dropout_p -0.1", INVALID, "dropout_p=-0.1", NULL, a.dropout_p = -0.1);
    FWD("dropout_p 1", INVALID, "dropout_p=1 ", NULL, a.dropout_p = 1.0);
    FWD("dropout_p 1.5", INVALID, "dropout_p=1.5", NULL, a.dropout_p = 1.5);
    FWD("dropout_p NaN", INVALID, "dropout_p=", "nan", a.dropout_p = NAN);
    FWD("dropout_p +inf", INVALID, "dropout_p=inf", NULL, a.dropout_p = INFINITY);
    FWD("dropout_p -inf", INVALID, "dropout_p=-inf", NULL, a.dropout_p = -INFINITY);
    FWD("dropout_p -0 is 0", OK, NULL, NULL, a.dropout_p = -0.0);
    FWD("dropout_p just under 1", OK, NULL, NULL, a.dropout_p = nextafter(1.0, 0.0));
    FWD("dropout_p 0.1 without a residual", INVALID, "dropout_p=0.1", "residual",
        a.residual = 0, a.residual_out = 0);
    FWD("dropout_p 0.5 without a residual, 0 rows", INVALID, "dropout_p=0.5", "residual",
        a.residual = 0, a.residual_out = 0, a.dropout_p = 0.5, a.rows = 0);
    FWD("no residual, no dropout", OK, NULL, NULL, a.residual = 0, a.residual_out = 0,
        a.dropout_p = 0.0);

    /* residual and residual_out come together */
    FWD("residual without residual_out", INVALID, "residual_out", "null",
        a.residual_out = 0);
    FWD("residual without residual_out, dropout 0", INVALID, "residual_out", "null",
        a.residual_out = 0, a.dropout_p = 0.0);
    FWD("residual_out without residual", INVALID, "residual_out", "without",
        a.residual = 0, a.dropout_p = 0.0);
    FWD("residual without residual_out, 0 rows", OK, NULL, NULL, a.residual_out = 0,
        a.rows = 0);

    /* RMSNorm takes no bias */
    FWD("RMSNorm with a bias", INVALID, at_text("bias", b.bias), "RMSNorm", a.kind = RMS);
    FWD("RMSNorm with a bias, 0 rows", INVALID, "bias=", "RMSNorm", a.kind = RMS,
        a.rows = 0);
    FWD("RMSNorm without bias or mean", OK, NULL, NULL, a.kind = RMS, a.bias = 0,
        a.mean = 0);

    /* required addresses */
    FWD("y null", INVALID, ": y is a null address", NULL, a.y = 0);
    FWD("x null", INVALID, ": x is a null address", NULL, a.x = 0);
    FWD("y and x null, 0 rows", OK, NULL, NULL, a.y = 0, a.x = 0, a.residual = 0,
        a.residual_out = 0, a.dropout_p = 0.0, a.rows = 0);
    FWD("y and x null, 0 cols", OK, NULL, NULL, a.y = 0, a.x = 0, a.cols = 0);
    FWD("everything optional left out", OK, NULL, NULL, a.residual = 0,
        a.residual_out = 0, a.mean = 0, a.rstd = 0, a.weight = 0, a.bias = 0,
        a.dropout_p = 0.0);

    /* misaligned addresses (to their own element size) */
    FWD("y 2 bytes off (f32)", INVALID, at_text("y", b.y + 2), "align", a.y += 2);
    FWD("residual_out 2 bytes off (f32 residual under a bf16 x)", INVALID,
        at_text("residual_out", b.residual_out + 2), "align", a.dtype = BF16,
        a.residual_out += 2);
    FWD("mean 2 bytes off (f32 statistics of an f16 x)", INVALID,
        at_text("mean", b.mean + 2), "align", a.dtype = F16, a.residual_dtype = F16,
        a.mean += 2);
    FWD("rstd 4 bytes off (f64 statistics of an f64 x)", INVALID,
        at_text("rstd", b.rstd + 4), "align", a.dtype = F64, a.param_dtype = F64,
        a.residual_dtype = F64, a.rstd += 4);
    FWD("x 1 byte off (f16)", INVALID, at_text("x", b.x + 1), "align", a.dtype = F16,
        a.param_dtype = F16, a.residual_dtype = F16, a.x += 1);
    FWD("x 4 bytes off (f64)", INVALID, at_text("x", b.x + 4), "align", a.dtype = F64,
        a.param_dtype = F64, a.residual_dtype = F64, a.x += 4);
    FWD("residual 2 bytes off (f32)", INVALID, at_text("residual", b.residual + 2),
        "align", a.residual += 2);
    FWD("weight 2 bytes off (f32 weight under a bf16 x)", INVALID,
        at_text("weight", b.weight + 2), "align", a.dtype = BF16, a.weight += 2);
    FWD("bias 1 byte off (bf16)", INVALID, at_text("bias", b.bias + 1), "align",
        a.dtype = BF16, a.param_dtype = BF16, a.bias += 1);
    FWD("bf16 operands 2 bytes off: aligned to the element", OK, NULL, NULL,
        a.dtype = BF16, a.param_dtype = BF16, a.residual_dtype = BF16, a.y += 2,
        a.residual_out += 2, a.x += 2, a.residual += 2, a.weight += 2, a.bias += 2);

    /* row strides */
    FWD("negative x_row_stride", INVALID, "x row stride -7", NULL, a.x_row_stride = -7);
    FWD("negative residual_row_stride", INVALID, "residual row stride -3", NULL,
        a.residual_row_stride = -3);
    FWD("x_row_stride x rows overflows", INVALID, "x row stride", "overflow",
        a.x_row_stride = BIG);
    FWD("residual_row_stride x rows overflows", INVALID, "residual row stride",
        "overflow", a.residual_row_stride = BIG);
    FWD("one row: negative strides are ignored", OK, NULL, NULL, a.rows = 1,
        a.x_row_stride = -7, a.residual_row_stride = -3);
    FWD("strides 0 (rows broadcast)", OK, NULL, NULL, a.x_row_stride = 0,
        a.residual_row_stride = 0);

    /* an empty call still validates its codes and flags */
    FWD("0 rows, dtype code 9", BAD_DTYPE, "dtype=9", NULL, a.rows = 0, a.dtype = 9);
    FWD("0 cols, kind 5", INVALID, "kind=5", NULL, a.cols = 0, a.kind = 5);
    FWD("0 rows, eps NaN", INVALID, "eps=", "nan", a.rows = 0, a.eps = NAN);
    FWD("0 rows, dropout_p 2", INVALID, "dropout_p=2", NULL, a.rows = 0,
        a.dropout_p = 2.0);
}

/* ---- fo_norm_backward ---- */

typedef fo_norm_backward_args bwd_call;

/* A valid call: 2 x 4 f32 LayerNorm backward with every gradient, an
 * incoming dresidual_out, a weight and dropout 0.1; no workspace (the CPU
 * needs none). */
static bwd_call bwd_base(void) {
    bwd_call a = {
        .struct_size = sizeof a, .device_type = CPU, .device_index = -3, .stream = 12345,
        .dx = addr(&BUF[0]), .dresidual = addr(&BUF[1]),
        .dweight = addr(&BUF[2]), .dbias = addr(&BUF[3]),
        .workspace = 0, .workspace_bytes = 0,
        .dy = addr(&BUF[4]), .dy_row_stride = 4,
        .dresidual_out = addr(&BUF[5]), .dresidual_out_row_stride = 4,
        .h = addr(&BUF[6]), .h_row_stride = 4, .h_dtype = F32,
        .mean = addr(&BUF[7]), .rstd = addr(&BUF[8]), .weight = addr(&BUF[9]),
        .param_dtype = F32, .rows = 2, .cols = 4, .dtype = F32, .kind = LAYER,
        .dropout_p = 0.1, .seed = 1234, .offset = 0,
    };
    return a;
}

/* One case of the call alone: where the workspace or the CUDA runtime is
 * what fails (the query reads no workspace and launches nothing). */
#define BWD_CALL(why, status, needle, needle2, ...)                                      \
    do {                                                                               \
        bwd_call a = bwd_base();                                                       \
        __VA_ARGS__;                                                                   \
        before_case();                                                                 \
        expect_status("fo_norm_backward", why, fo_norm_backward(&a), status, needle,   \
                      needle2);                                                        \
    } while (0)

/* One case of the call and of its workspace query, which checks the same
 * arguments the same way (and answers 0 on the CPU, or with no dweight and
 * no dbias). */
#define BWD(why, status, needle, needle2, ...)                                         \
    do {                                                                               \
        BWD_CALL(why, status, needle, needle2, __VA_ARGS__);                           \
        bwd_call a = bwd_base();                                                       \
        __VA_ARGS__;                                                                   \
        check_query(&a, why, status, needle, needle2);                                 \
    } while (0)

static void check_query(const bwd_call *a, const char *why, int status, const char *needle,
                        const char *needle2) {
    /* *bytes lies in BUF[11]: a refused query must leave it alone */
    int64_t *bytes = (int64_t *)(void *)BUF[11].data;
    before_case();
    int got = fo_norm_backward_workspace_bytes(a, bytes);
    expect_status("fo_norm_backward_workspace_bytes", why, got, status, needle, needle2);
    if (status == OK && (a->device_type == CPU || (!a->dweight && !a->dbias)))
        CHECK(got == OK && *bytes == 0, "%s: the workspace query answers %" PRId64 " bytes",
              why, *bytes);
}

static void test_errors_backward(void) {
    section("errors: fo_norm_backward");
    const bwd_call b = bwd_base();

    BWD("the base call", OK, NULL, NULL, (void)0);
    BWD("device_type 7", BAD_DEVICE, "device_type=7", NULL, a.device_type = 7);
    BWD("device_type -1", BAD_DEVICE, "device_type=-1", NULL, a.device_type = -1);
    BWD("negative rows", INVALID, "rows=-3", NULL, a.rows = -3);
    BWD("negative cols", INVALID, "cols=-5", NULL, a.cols = -5);
    BWD("rows x cols overflows", INVALID, "rows=", "overflow", a.rows = BIG);

    /* dtype codes */
    BWD("dtype code 4", BAD_DTYPE, "dtype=4", NULL, a.dtype = 4);
    BWD("dtype code -1", BAD_DTYPE, "dtype=-1", NULL, a.dtype = -1);
    BWD("param_dtype code 42", BAD_DTYPE, "param_dtype=42", NULL, a.param_dtype = 42);
    BWD("h_dtype code 9", BAD_DTYPE, "h_dtype=9", NULL, a.h_dtype = 9);
    BWD("h_dtype code -1", BAD_DTYPE, "h_dtype=-1", NULL, a.h_dtype = -1);
    BWD("f64 dy, f32 h", BAD_DTYPE, "h_dtype float32", "dtype float64", a.dtype = F64,
        a.param_dtype = F64);
    BWD("f32 dy, bf16 h", BAD_DTYPE, "h_dtype bfloat16", "dtype float32",
        a.h_dtype = BF16);
    BWD("f16 dy, bf16 h", BAD_DTYPE, "h_dtype bfloat16", "dtype float16", a.dtype = F16,
        a.h_dtype = BF16);
    BWD("f64 dy, f32 weight", BAD_DTYPE, "param_dtype float32", "dtype float64",
        a.dtype = F64, a.h_dtype = F64);
    BWD("f32 dy, f16 weight", BAD_DTYPE, "param_dtype float16", "dtype float32",
        a.param_dtype = F16);
    BWD("bf16 dy, f16 weight", BAD_DTYPE, "param_dtype float16", "dtype bfloat16",
        a.dtype = BF16, a.param_dtype = F16);
    BWD("bf16 dy, f32 h and weight", OK, NULL, NULL, a.dtype = BF16);
    BWD("bf16 dy, bf16 h, f32 weight", OK, NULL, NULL, a.dtype = BF16, a.h_dtype = BF16);
    BWD("f16 dy, f16 h and weight", OK, NULL, NULL, a.dtype = F16, a.h_dtype = F16,
        a.param_dtype = F16);
    BWD("f64 throughout", OK, NULL, NULL, a.dtype = F64, a.h_dtype = F64,
        a.param_dtype = F64);

    /* kind, dropout_p */
    BWD("kind 2", INVALID, "kind=2", NULL, a.kind = 2);
    BWD("kind -7", INVALID, "kind=-7", NULL, a.kind = -7);
    BWD("dropout_p -0.5", INVALID, "dropout_p=-0.5", NULL, a.dropout_p = -0.5);
    BWD("dropout_p 1", INVALID, "dropout_p=1 ", NULL, a.dropout_p = 1.0);
    BWD("dropout_p 2", INVALID, "dropout_p=2", NULL, a.dropout_p = 2.0);
    BWD("dropout_p NaN", INVALID, "dropout_p=", "nan", a.dropout_p = NAN);
    BWD("dropout_p -inf", INVALID, "dropout_p=-inf", NULL, a.dropout_p = -INFINITY);
    BWD("dropout_p just under 1", OK, NULL, NULL, a.dropout_p = nextafter(1.0, 0.0));

    /* RMSNorm: no bias gradient; mean may be left out */
    BWD("RMSNorm with dbias", INVALID, at_text("dbias", b.dbias), "RMSNorm",
        a.kind = RMS);
    BWD("RMSNorm with dbias, 0 rows", INVALID, "dbias=", "RMSNorm", a.kind = RMS,
        a.rows = 0);
    BWD("RMSNorm without dbias, mean null", OK, NULL, NULL, a.kind = RMS, a.dbias = 0,
        a.mean = 0);

    /* required addresses */
    BWD("dy null", INVALID, ": dy is a null address", NULL, a.dy = 0);
    BWD("h null", INVALID, ": h is a null address", NULL, a.h = 0);
    BWD("rstd null", INVALID, ": rstd is a null address", NULL, a.rstd = 0);
    BWD("LayerNorm, mean null", INVALID, ": mean is a null address", NULL, a.mean = 0);
    BWD("RMSNorm, rstd null", INVALID, ": rstd is a null address", NULL, a.kind = RMS,
        a.dbias = 0, a.mean = 0, a.rstd = 0);
    BWD("dweight only, dy null", INVALID, ": dy is a null address", NULL, a.dx = 0,
        a.dresidual = 0, a.dbias = 0, a.dy = 0);
    BWD("0 rows: dy, h, mean and rstd may be null", OK, NULL, NULL, a.rows = 0, a.dy = 0,
        a.h = 0, a.mean = 0, a.rstd = 0, a.dresidual_out = 0);
    BWD("no gradient wanted", OK, NULL, NULL, a.dx = 0, a.dresidual = 0, a.dweight = 0,
        a.dbias = 0);
    BWD("no weight, no dresidual_out", OK, NULL, NULL, a.weight = 0, a.dresidual_out = 0);

    /* misaligned addresses */
    BWD("dx 2 bytes off (f32)", INVALID, at_text("dx", b.dx + 2), "align", a.dx += 2);
    BWD("dresidual 2 bytes off (f32 h under a bf16 dy)", INVALID,
        at_text("dresidual", b.dresidual + 2), "align", a.dtype = BF16,
        a.dresidual += 2);
    BWD("dweight 2 bytes off (f32 weight under an f16 dy)", INVALID,
        at_text("dweight", b.dweight + 2), "align", a.dtype = F16, a.h_dtype = F16,
        a.dweight += 2);
    BWD("dbias 1 byte off (bf16)", INVALID, at_text("dbias", b.dbias + 1), "align",
        a.dtype = BF16, a.h_dtype = BF16, a.param_dtype = BF16, a.dbias += 1);
    BWD("dy 4 bytes off (f64)", INVALID, at_text("dy", b.dy + 4), "align", a.dtype = F64,
        a.h_dtype = F64, a.param_dtype = F64, a.dy += 4);
    BWD("dresidual_out 2 bytes off (f32)", INVALID,
        at_text("dresidual_out", b.dresidual_out + 2), "align", a.dresidual_out += 2);
    BWD("h 1 byte off (bf16)", INVALID, at_text("h", b.h + 1), "align", a.dtype = BF16,
        a.h_dtype = BF16, a.h += 1);
    BWD("mean 2 bytes off (f32 statistics of a bf16 dy)", INVALID,
        at_text("mean", b.mean + 2), "align", a.dtype = BF16, a.h_dtype = BF16,
        a.param_dtype = BF16, a.mean += 2);
    BWD("rstd 4 bytes off (f64 statistics)", INVALID, at_text("rstd", b.rstd + 4),
        "align", a.dtype = F64, a.h_dtype = F64, a.param_dtype = F64, a.rstd += 4);
    BWD("weight 2 bytes off (f32)", INVALID, at_text("weight", b.weight + 2), "align",
        a.weight += 2);
    BWD("f16 operands 2 bytes off: aligned to the element", OK, NULL, NULL,
        a.dtype = F16, a.h_dtype = F16, a.param_dtype = F16, a.dx += 2,
        a.dresidual += 2, a.dweight += 2, a.dbias += 2, a.dy += 2, a.dresidual_out += 2,
        a.h += 2, a.weight += 2);

    /* row strides */
    BWD("negative dy_row_stride", INVALID, "dy row stride -7", NULL,
        a.dy_row_stride = -7);
    BWD("negative dresidual_out_row_stride", INVALID, "dresidual_out row stride -3",
        NULL, a.dresidual_out_row_stride = -3);
    BWD("negative h_row_stride", INVALID, "h row stride -11", NULL, a.h_row_stride = -11);
    BWD("dy_row_stride x rows overflows", INVALID, "dy row stride", "overflow",
        a.dy_row_stride = BIG);
    BWD("h_row_stride x rows overflows", INVALID, "h row stride", "overflow",
        a.h_row_stride = BIG);
    BWD("one row: negative strides are ignored", OK, NULL, NULL, a.rows = 1,
        a.dy_row_stride = -7, a.dresidual_out_row_stride = -3, a.h_row_stride = -11);
    BWD("strides 0 (rows broadcast)", OK, NULL, NULL, a.dy_row_stride = 0,
        a.dresidual_out_row_stride = 0, a.h_row_stride = 0);

    /* workspace_bytes */
    BWD_CALL("workspace_bytes -1", INVALID, "workspace_bytes=-1", "negative",
        a.workspace_bytes = -1);
    BWD_CALL("workspace_bytes INT64_MIN", INVALID, "workspace_bytes=-9223372036854775808",
        "negative", a.workspace = addr(&BUF[10]), a.workspace_bytes = INT64_MIN);
    BWD_CALL("workspace_bytes -1, no gradient wanted", INVALID, "workspace_bytes=-1",
        "negative", a.dx = 0, a.dresidual = 0, a.dweight = 0, a.dbias = 0,
        a.workspace_bytes = -1);
    BWD("a workspace the CPU does not need", OK, NULL, NULL,
        a.workspace = addr(&BUF[10]), a.workspace_bytes = BUF_BYTES);

    /* an empty call still validates its codes and flags */
    BWD("0 rows, dtype code 9", BAD_DTYPE, "dtype=9", NULL, a.rows = 0, a.dtype = 9);
    BWD("0 cols, h_dtype code 9", BAD_DTYPE, "h_dtype=9", NULL, a.cols = 0, a.h_dtype = 9);
    BWD("0 rows, kind 3", INVALID, "kind=3", NULL, a.rows = 0, a.kind = 3);
}

/* ---- fo_norm_backward_workspace_bytes ---- */

/* The query for a rows x cols LayerNorm backward of dtype with dweight,
 * dbias where with_bias, and dx at address dx (0: none); dy and h dense at
 * the addresses of BUF[0] and BUF[1] (only their alignment is looked at). */
static int query_workspace(int device_type, int64_t rows, int64_t cols, int dtype,
                           int with_bias, uintptr_t dx, int64_t *bytes) {
    const fo_norm_backward_args a = {
        .struct_size = sizeof a, .device_type = device_type, .device_index = 0,
        .dx = dx, .dweight = addr(&BUF[2]), .dbias = with_bias ? addr(&BUF[3]) : 0,
        .dy = addr(&BUF[0]), .dy_row_stride = cols, .h = addr(&BUF[1]),
        .h_row_stride = cols, .h_dtype = dtype, .mean = addr(&BUF[7]),
        .rstd = addr(&BUF[8]), .param_dtype = dtype, .rows = rows, .cols = cols,
        .dtype = dtype, .kind = LAYER};
    return fo_norm_backward_workspace_bytes(&a, bytes);
}

/* The query's argument checks are the call's, tested with each of its cases
 * (BWD above); here what is the query's own. */
static void test_errors_workspace_query(void) {
    static const char op[] = "fo_norm_backward_workspace_bytes";
    section("errors: fo_norm_backward_workspace_bytes");
    /* *bytes lies in BUF[11]: a refused query must leave it alone */
    int64_t *BYTES = (int64_t *)(void *)BUF[11].data;
    static const struct {
        const char *why;
        int status;
        const char *needle, *needle2;
        int device_type;
        int64_t rows, cols;
        int dtype;
        int null_bytes;
    } cases[] = {
        {"bytes null", INVALID, "bytes", "null", CPU, 2, 4, F32, 1},
        {"bytes null and device_type 7", INVALID, "bytes", "null", 7, 2, 4, F32, 1},
        {"CPU f32", OK, NULL, NULL, CPU, 2, 4, F32, 0},
        {"CPU f16", OK, NULL, NULL, CPU, 1000, 1000, F16, 0},
        {"CPU bf16", OK, NULL, NULL, CPU, 3, 1001, BF16, 0},
        {"CPU f64", OK, NULL, NULL, CPU, 7, 13, F64, 0},
        {"CPU empty", OK, NULL, NULL, CPU, 0, 0, F32, 0},
    };
    for (size_t i = 0; i < COUNT(cases); i++) {
        before_case();
        int got = query_workspace(cases[i].device_type, cases[i].rows, cases[i].cols,
                                  cases[i].dtype, (int)(i % 2), addr(&BUF[4]),
                                  cases[i].null_bytes ? NULL : BYTES);
        expect_status(op, cases[i].why, got, cases[i].status, cases[i].needle,
                      cases[i].needle2);
        if (cases[i].status == OK)
            CHECK(got == OK && *BYTES == 0, "%s: the CPU asks for %" PRId64 " bytes",
                  cases[i].why, *BYTES);
    }
    /* the workspace fields are not read: not even a negative size */
    bwd_call a = bwd_base();
    a.workspace = 1;
    a.workspace_bytes = -5;
    check_query(&a, "workspace 1 and workspace_bytes -5", OK, NULL, NULL);
}

/* ========================================================================
 * device_type CUDA. Without CUDA built in: FO_ERR_CUDA_NOT_BUILT from all
 * three. With it: the checks made before any CUDA call (device_index,
 * workspace), then, unless FO_TEST_HAS_GPU=1, calls that must fail in the
 * CUDA runtime (no GPU) without writing anything. Host addresses are passed:
 * no call here may dereference them.
 * ======================================================================== */

static void test_cuda_device(void) {
    section("device_type CUDA");
    const char *env = getenv("FO_TEST_HAS_GPU");
    const int has_gpu = env && strcmp(env, "1") == 0;
    int64_t *BYTES = (int64_t *)(void *)BUF[11].data;
    int st;

    CHECK(fo_cuda_built() == FO_TEST_EXPECT_CUDA,
          "fo_cuda_built() = %d but meson %s the CUDA kernels", fo_cuda_built(),
          FO_TEST_EXPECT_CUDA ? "built" : "did not build");

    if (!fo_cuda_built()) {
        FWD("CPU-only build", NOT_BUILT, "without CUDA", NULL, a.device_type = CUDA,
            a.device_index = 0);
        FWD("CPU-only build, device_index -1", NOT_BUILT, "without CUDA", NULL,
            a.device_type = CUDA, a.device_index = -1);
        FWD("CPU-only build, 0 rows", NOT_BUILT, "without CUDA", NULL,
            a.device_type = CUDA, a.device_index = 0, a.rows = 0);
        BWD("CPU-only build", NOT_BUILT, "without CUDA", NULL, a.device_type = CUDA,
            a.device_index = 0);
        BWD("CPU-only build, dx only", NOT_BUILT, "without CUDA", NULL,
            a.device_type = CUDA, a.device_index = 0, a.dresidual = 0, a.dweight = 0,
            a.dbias = 0);
        before_case();
        st = query_workspace(CUDA, 2, 4, F32, 1, addr(&BUF[4]), BYTES);
        expect_status("fo_norm_backward_workspace_bytes", "CPU-only build", st, NOT_BUILT,
                      "without CUDA", NULL);
        return;
    }

    /* Refused before any CUDA runtime call: safe with or without a GPU. */
    FWD("device_index -1", BAD_DEVICE, "device_index=-1", NULL, a.device_type = CUDA,
        a.device_index = -1);
    BWD("device_index -1", BAD_DEVICE, "device_index=-1", NULL, a.device_type = CUDA,
        a.device_index = -1);

    int64_t need = -1;
    st = query_workspace(CUDA, 2, 4, F32, 1, addr(&BUF[4]), &need);
    if (!CHECK(st == OK && need >= 0 && need <= BUF_BYTES,
               "CUDA workspace query for 2 x 4 f32: status %d, %" PRId64 " bytes (%s)", st,
               need, fo_last_error()))
        return;
    /* without dbias, the weight partials alone: half */
    int64_t need_weight = -1;
    st = query_workspace(CUDA, 2, 4, F32, 0, addr(&BUF[4]), &need_weight);
    CHECK(st == OK && 2 * need_weight == need,
          "CUDA workspace query for 2 x 4 f32 without dbias: status %d, %" PRId64
          " bytes, with it %" PRId64, st, need_weight, need);
    int64_t big = -1;
    st = query_workspace(CUDA, 100000, 4096, F64, 1, 0, &big);
    CHECK(st == OK && big > 0, "CUDA workspace query for 100000 x 4096 f64 without dx: status %d, "
          "%" PRId64 " bytes", st, big);
    /* With a GPU, the partials of aligned 4096-wide rows are parked in dx
     * (the register backward), and so are those of 16384-wide rows once each
     * of the shared-memory backward's 132 groups has the 5 rows an owner
     * defers: no workspace. Without dx there is nowhere to park them, and
     * 140 rows are too few to defer. (Without a GPU the device cannot be
     * asked, and the workspace is asked for. The 16384-wide rows park only
     * where the GPU holds 132 one-block groups at once: FO_TEST_HAS_GPU=1
     * means an H100 or H200 here.) */
    static const struct {
        int64_t rows, cols;
        int with_dx, parked_on_gpu;
    } parking[] = {
        {4096, 4096, 1, 1}, {4096, 4096, 0, 0}, {700, 16384, 1, 1}, {140, 16384, 1, 0},
    };
    for (size_t i = 0; i < COUNT(parking); i++) {
        int64_t bytes = -1;
        st = query_workspace(CUDA, parking[i].rows, parking[i].cols, BF16, 1,
                             parking[i].with_dx ? addr(&BUF[4]) : 0, &bytes);
        CHECK(st == OK && (has_gpu && parking[i].parked_on_gpu ? bytes == 0 : bytes > 0),
              "CUDA workspace query for %" PRId64 " x %" PRId64 " bf16 %s dx: status %d, %" PRId64
              " bytes",
              parking[i].rows, parking[i].cols, parking[i].with_dx ? "with" : "without", st, bytes);
    }
    const uintptr_t WS = addr(&BUF[10]); /* host memory; only its size is looked at */
    BWD_CALL("negative workspace_bytes", INVALID, "workspace_bytes=-1", "negative",
        a.device_type = CUDA, a.device_index = 0, a.workspace = WS,
        a.workspace_bytes = -1);
    if (need > 0) {
        char needle[64];
        snprintf(needle, sizeof needle, "workspace_bytes=%" PRId64, need - 1);
        BWD_CALL("workspace 1 byte short", TOO_SMALL, needle, NULL, a.device_type = CUDA,
            a.device_index = 0, a.workspace = WS, a.workspace_bytes = need - 1);
        char needle_weight[64];
        snprintf(needle_weight, sizeof needle_weight, "workspace_bytes=%" PRId64, need_weight - 1);
        BWD_CALL("dweight only, workspace 1 byte short", TOO_SMALL, needle_weight, NULL,
            a.device_type = CUDA, a.device_index = 0, a.dx = 0, a.dresidual = 0,
            a.dbias = 0, a.workspace = WS, a.workspace_bytes = need_weight - 1);
        BWD_CALL("dbias asked for, the weight's workspace only", TOO_SMALL, "workspace_bytes=", NULL,
            a.device_type = CUDA, a.device_index = 0, a.dx = 0, a.dresidual = 0,
            a.workspace = WS, a.workspace_bytes = need_weight);
        BWD_CALL("null workspace", INVALID, "workspace", "null", a.device_type = CUDA,
            a.device_index = 0, a.workspace = 0, a.workspace_bytes = need);
    }
    /* empty calls return before the runtime is touched */
    FWD("0 rows", OK, NULL, NULL, a.device_type = CUDA, a.device_index = 0, a.rows = 0);
    FWD("0 cols", OK, NULL, NULL, a.device_type = CUDA, a.device_index = 0, a.cols = 0);
    BWD("no gradient wanted", OK, NULL, NULL, a.device_type = CUDA, a.device_index = 0,
        a.dx = 0, a.dresidual = 0, a.dweight = 0, a.dbias = 0);

    if (has_gpu) {
        printf("   FO_TEST_HAS_GPU=1: not calling CUDA paths that expect no GPU\n");
        return;
    }
    /* No GPU: the runtime refuses, the status says so, nothing is written. */
    FWD("no GPU", CUDA_RUNTIME, "CUDA", NULL, a.device_type = CUDA, a.device_index = 0);
    FWD("no GPU, RMSNorm, bf16, no residual", CUDA_RUNTIME, "CUDA", NULL,
        a.device_type = CUDA, a.device_index = 0, a.kind = RMS, a.bias = 0,
        a.mean = 0, a.dtype = BF16, a.residual = 0, a.residual_out = 0,
        a.dropout_p = 0.0);
    BWD_CALL("no GPU", CUDA_RUNTIME, "CUDA", NULL, a.device_type = CUDA, a.device_index = 0,
        a.workspace = WS, a.workspace_bytes = need);
    /* dx alone needs no workspace: the runtime is what fails */
    BWD_CALL("no GPU, dx only, no workspace", CUDA_RUNTIME, "CUDA", NULL,
        a.device_type = CUDA, a.device_index = 0, a.dresidual = 0, a.dweight = 0,
        a.dbias = 0);
}

/* ========================================================================
 * Philox and the dropout mask
 * ======================================================================== */

/* Philox4x32-10 as Random123 defines it (Salmon et al., SC'11), written here
 * from the paper, with the full 4-word counter: checked against Random123's
 * published known answers, then used to check philox.h's fo_philox. */
static void ref_philox4x32_10(const uint32_t counter[4], const uint32_t key[2],
                              uint32_t out[4]) {
    uint32_t c[4] = {counter[0], counter[1], counter[2], counter[3]};
    uint32_t k0 = key[0], k1 = key[1];
    for (int round = 0; round < 10; round++) {
        if (round > 0) { /* the key schedule: Weyl sequence */
            k0 += 0x9E3779B9u;
            k1 += 0xBB67AE85u;
        }
        uint64_t p0 = (uint64_t)c[0] * 0xD2511F53u;
        uint64_t p1 = (uint64_t)c[2] * 0xCD9E8D57u;
        uint32_t next[4] = {(uint32_t)(p1 >> 32) ^ c[1] ^ k0, (uint32_t)p1,
                            (uint32_t)(p0 >> 32) ^ c[3] ^ k1, (uint32_t)p0};
        memcpy(c, next, sizeof c);
    }
    memcpy(out, c, sizeof c);
}

/* Element (r, c) of a rows x cols dropout with these parameters is kept:
 * philox.h's documented formula, lane c % 4 of counter
 * offset + r * fo_dropout_row_counters(cols) + c / 4, kept at or above
 * fo_dropout_threshold(p). */
static int mask_keeps(uint64_t seed, uint64_t offset, double p, int64_t r, int64_t c,
                      int64_t cols) {
    if (!(p > 0.0))
        return 1;
    uint64_t counter = offset + (uint64_t)r * fo_dropout_row_counters(cols) + (uint64_t)c / 4;
    return fo_philox(seed, counter).lane[c % 4] >= fo_dropout_threshold(p);
}

/* The mask fo_norm_forward applies, read back: x = 1, residual = 0, so
 * residual_out is 1 / (1 - p) where kept and 0 where dropped. keep[r * cols
 * + c] gets 1 or 0. @return 0 when the call failed or residual_out held
 * anything else. */
static int library_mask(uint64_t seed, uint64_t offset, double p, int64_t rows,
                        int64_t cols, unsigned char *keep) {
    int64_t n = rows * cols;
    guarded x = new_operand(F32, n, 0), res = new_operand(F32, n, 0),
            y = new_operand(F32, n, 0), ro = new_operand(F32, n, 0);
    for (int64_t i = 0; i < n; i++) {
        put(x.data, i, F32, 1.0);
        put(res.data, i, F32, 0.0);
    }
    int st = norm_forward_call(CPU, 0, 0, addr(&y), addr(&ro), 0, 0, addr(&x), cols,
                             addr(&res), cols, F32, 0, 0, F32, rows, cols, F32, RMS, 1e-5,
                             p, seed, offset);
    int ok = CHECK(st == OK, "mask of seed 0x%" PRIx64 " offset 0x%" PRIx64 ": status %d (%s)",
                   seed, offset, st, fo_last_error());
    const uint64_t kept_bits = round_bits(1.0 / (1.0 - p), F32);
    int64_t odd = 0;
    for (int64_t i = 0; ok && i < n; i++) {
        uint64_t bits = get_bits(ro.data, i, F32);
        keep[i] = bits == kept_bits;
        if (bits != kept_bits && bits != 0 && ++odd <= 3)
            CHECK(0, "mask: residual_out[%" PRId64 "] = %.9g, neither 0 nor 1/(1-p)", i,
                  get(ro.data, i, F32));
    }
    ok = ok && odd == 0 && CHECK(guards_intact(&ro), "mask: written out of bounds");
    guarded_free(&x);
    guarded_free(&res);
    guarded_free(&y);
    guarded_free(&ro);
    return ok;
}

/* |count - n q| <= 5 sigma of a binomial(n, q). */
static int within_5_sigma(int64_t count, int64_t n, double q) {
    return fabs((double)count - (double)n * q) <= 5.0 * sqrt((double)n * q * (1.0 - q));
}

static void test_philox(void) {
    section("Philox4x32-10 (philox.h)");
    /* Random123's kat_vectors for philox4x32_10: counter, key, result. */
    static const uint32_t kat[3][10] = {
        {0, 0, 0, 0, 0, 0, 0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8},
        {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff,
         0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd},
        {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0,
         0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1},
    };
    for (size_t i = 0; i < COUNT(kat); i++) {
        uint32_t out[4];
        ref_philox4x32_10(kat[i], kat[i] + 4, out);
        CHECK(memcmp(out, kat[i] + 6, sizeof out) == 0,
              "the test's Philox, known answer %zu: %08x %08x %08x %08x", i, out[0],
              out[1], out[2], out[3]);
    }
    /* fo_philox(key, counter) is Philox4x32-10 of the counter words
     * (lo, hi, 0, 0) under the key words (lo, hi). */
    fo_philox_block zero = fo_philox(0, 0);
    CHECK(memcmp(zero.lane, kat[0] + 6, sizeof zero.lane) == 0,
          "fo_philox(0, 0) = %08x %08x %08x %08x, Random123 says 6627e8d5 e169c58d "
          "bc57ac4c 9b00dbd8",
          zero.lane[0], zero.lane[1], zero.lane[2], zero.lane[3]);
    uint64_t rng = 555;
    int64_t bad = 0;
    for (int i = 0; i < 20000; i++) {
        uint64_t key = rng_next(&rng), counter = rng_next(&rng);
        if (i == 0) key = UINT64_MAX, counter = UINT64_MAX;
        if (i == 1) key = 0x00000000FFFFFFFFu, counter = 0xFFFFFFFF00000000u;
        if (i % 3 == 2) counter &= 0xFFFFFFFFu; /* small counters, as offsets start */
        const uint32_t c[4] = {(uint32_t)counter, (uint32_t)(counter >> 32), 0, 0};
        const uint32_t k[2] = {(uint32_t)key, (uint32_t)(key >> 32)};
        uint32_t want[4];
        ref_philox4x32_10(c, k, want);
        fo_philox_block got = fo_philox(key, counter);
        if (memcmp(got.lane, want, sizeof want) != 0 && ++bad <= 3)
            CHECK(0, "fo_philox(0x%016" PRIx64 ", 0x%016" PRIx64 ") = %08x %08x %08x %08x, "
                     "want %08x %08x %08x %08x",
                  key, counter, got.lane[0], got.lane[1], got.lane[2], got.lane[3],
                  want[0], want[1], want[2], want[3]);
    }
    CHECK(bad == 0, "fo_philox differs from Philox4x32-10 %" PRId64 " times", bad);

    /* two whole counters per 8-element chunk of a row */
    static const int64_t rc[][2] = {{0, 0}, {1, 2}, {4, 2}, {8, 2}, {9, 4},
                                    {13, 4}, {16, 4}, {1000, 250}, {1001, 252}};
    for (size_t i = 0; i < COUNT(rc); i++)
        CHECK(fo_dropout_row_counters(rc[i][0]) == (uint64_t)rc[i][1],
              "fo_dropout_row_counters(%" PRId64 ") = %" PRIu64 ", want %" PRId64, rc[i][0],
              fo_dropout_row_counters(rc[i][0]), rc[i][1]);
    /* P(word >= threshold) = 1 - p */
    static const struct { double p; uint32_t t; } th[] = {
        {0.0, 0}, {0.25, 0x40000000u}, {0.5, 0x80000000u}, {0.75, 0xC0000000u},
        {1e-12, 0}, {0x1p-32, 1}, {1.0 - 0x1p-31, 0xFFFFFFFEu},
        {1.0 - 0x1p-32, 0xFFFFFFFFu}, {0x1.fffffffffffffp-1, 0xFFFFFFFFu},
    };
    for (size_t i = 0; i < COUNT(th); i++)
        CHECK(fo_dropout_threshold(th[i].p) == th[i].t,
              "fo_dropout_threshold(%.17g) = 0x%08x, want 0x%08x", th[i].p,
              fo_dropout_threshold(th[i].p), th[i].t);
}

static void test_dropout_mask(void) {
    section("the dropout mask of fo_norm_forward");
    enum { R = 100, C = 1000, N = R * C }; /* 1e5 elements */
    const uint64_t SEED = 0x0123456789ABCDEFu, OFFSET = 4096;
    const double P = 0.25;
    unsigned char *base = malloc(N), *other = malloc(N);
    if (!library_mask(SEED, OFFSET, P, R, C, base))
        goto done;

    /* the documented formula, element by element */
    int64_t wrong = 0, kept = 0, lane_kept[4] = {0, 0, 0, 0};
    for (int64_t r = 0; r < R; r++)
        for (int64_t c = 0; c < C; c++) {
            int want = mask_keeps(SEED, OFFSET, P, r, c, C);
            if (base[r * C + c] != want && ++wrong <= 3)
                CHECK(0, "mask element (%" PRId64 ", %" PRId64 ") is %d, philox.h says %d",
                      r, c, base[r * C + c], want);
            kept += base[r * C + c];
            lane_kept[c % 4] += base[r * C + c];
        }
    CHECK(wrong == 0, "%" PRId64 " mask elements differ from philox.h's formula", wrong);
    /* the keep fraction: 1 - p within 5 sigma, overall and for each lane */
    CHECK(within_5_sigma(kept, N, 1.0 - P),
          "p = %g: %" PRId64 " of %d kept, want %g within 5 sigma (%.0f)", P, kept, N,
          (1.0 - P) * N, 5.0 * sqrt(N * P * (1.0 - P)));
    for (int l = 0; l < 4; l++)
        CHECK(within_5_sigma(lane_kept[l], N / 4, 1.0 - P),
              "p = %g: lane %d keeps %" PRId64 " of %d", P, l, lane_kept[l], N / 4);

    /* the same (seed, offset) gives the same mask */
    if (library_mask(SEED, OFFSET, P, R, C, other))
        CHECK(memcmp(base, other, N) == 0, "the same seed and offset gave another mask");

    /* other seeds and offsets give other masks: each element agrees only by
     * chance, so about 2 p (1 - p) of them differ */
    static const struct { const char *why; uint64_t seed, offset; } variants[] = {
        {"seed + 1", SEED + 1, OFFSET},
        {"seed with another high word", SEED ^ (UINT64_C(1) << 40), OFFSET},
        {"offset + 1", SEED, OFFSET + 1},
        {"offset + 2^32", SEED, OFFSET + (UINT64_C(1) << 32)},
        {"seed 0, offset 0", 0, 0},
    };
    for (size_t v = 0; v < COUNT(variants); v++) {
        if (!library_mask(variants[v].seed, variants[v].offset, P, R, C, other))
            continue;
        int64_t differ = 0;
        for (int i = 0; i < N; i++)
            differ += base[i] != other[i];
        CHECK(within_5_sigma(differ, N, 2.0 * P * (1.0 - P)),
              "%s: %" PRId64 " of %d mask elements differ, want about %.0f",
              variants[v].why, differ, N, 2.0 * P * (1.0 - P) * N);
    }
    /* rows take consecutive blocks of counters: an offset one row further on
     * gives the next row's mask */
    if (library_mask(SEED, OFFSET + fo_dropout_row_counters(C), P, R, C, other))
        CHECK(memcmp(base + C, other, (size_t)(N - C)) == 0,
              "offset + one row's counters is not the mask shifted by one row");
    /* and rows differ from each other */
    int64_t rows_differ = 0;
    for (int c = 0; c < C; c++)
        rows_differ += base[c] != base[C + c];
    CHECK(rows_differ > 0, "rows 0 and 1 have the same mask");
done:
    free(base);
    free(other);
}

/* ========================================================================
 * Values on the CPU, forward and backward, against references in double
 * ======================================================================== */

typedef struct norm_setup {
    const char *why;
    int kind, dtype, param_dtype;
    int residual_dtype; /* NO_RESIDUAL, or the residual's dtype */
    int64_t rows, cols;
    int64_t x_stride, res_stride, dy_stride, dro_stride;
    int weight, bias, stats; /* forward: weight, bias given; mean/rstd wanted */
    int dres_out;            /* backward: an incoming dresidual_out */
    double eps, p;
    uint64_t seed, offset;
    size_t align; /* elements past a 64-byte boundary, of every operand */
} norm_setup;

typedef struct fwd_in {
    guarded x, res, w, b;
} fwd_in;
typedef struct fwd_out {
    guarded y, ro, mean, rstd;
} fwd_out;

static fwd_out new_fwd_out(const norm_setup *s, int hd, unsigned char fill) {
    int64_t n = s->rows * s->cols;
    int sd = stats_dtype(s->dtype);
    fwd_out o = {new_operand(s->dtype, n, s->align),
                 new_operand(hd, s->residual_dtype == NO_RESIDUAL ? 0 : n, s->align),
                 new_operand(sd, s->rows, s->align), new_operand(sd, s->rows, s->align)};
    guarded_fill(&o.y, fill);
    guarded_fill(&o.ro, fill);
    guarded_fill(&o.mean, fill);
    guarded_fill(&o.rstd, fill);
    return o;
}

static void free_fwd_out(fwd_out *o) {
    guarded_free(&o->y);
    guarded_free(&o->ro);
    guarded_free(&o->mean);
    guarded_free(&o->rstd);
}

static int run_forward(const norm_setup *s, const fwd_in *in, fwd_out *o) {
    const int has_res = s->residual_dtype != NO_RESIDUAL, ln = s->kind == LAYER;
    return norm_forward_call(
        CPU, 0, 0, addr(&o->y), has_res ? addr(&o->ro) : 0,
        s->stats && ln ? addr(&o->mean) : 0, s->stats ? addr(&o->rstd) : 0, addr(&in->x),
        s->x_stride, has_res ? addr(&in->res) : 0, s->res_stride,
        has_res ? s->residual_dtype : s->dtype, s->weight ? addr(&in->w) : 0,
        s->bias ? addr(&in->b) : 0, s->param_dtype, s->rows, s->cols, s->dtype, s->kind,
        s->eps, s->p, s->seed, s->offset);
}

typedef struct bwd_in {
    const guarded *h;
    int64_t h_stride;
    guarded dy, dro, mean, rstd;
    const guarded *w;
} bwd_in;
typedef struct bwd_out {
    guarded dx, dres, dw, db;
} bwd_out;

static bwd_out new_bwd_out(const norm_setup *s, int hd, unsigned char fill) {
    int64_t n = s->rows * s->cols;
    bwd_out o = {new_operand(s->dtype, n, s->align), new_operand(hd, n, s->align),
                 new_operand(s->param_dtype, s->cols, s->align),
                 new_operand(s->param_dtype, s->cols, s->align)};
    guarded_fill(&o.dx, fill);
    guarded_fill(&o.dres, fill);
    guarded_fill(&o.dw, fill);
    guarded_fill(&o.db, fill);
    return o;
}

static void free_bwd_out(bwd_out *o) {
    guarded_free(&o->dx);
    guarded_free(&o->dres);
    guarded_free(&o->dw);
    guarded_free(&o->db);
}

enum { WANT_DX = 1, WANT_DRES = 2, WANT_DW = 4, WANT_DB = 8, PASS_MEAN = 16 };

static int run_backward(const norm_setup *s, const bwd_in *in, bwd_out *o, int flags) {
    const int has_res = s->residual_dtype != NO_RESIDUAL;
    const int hd = has_res ? s->residual_dtype : s->dtype;
    return norm_backward_call(
        CPU, 0, 0, flags & WANT_DX ? addr(&o->dx) : 0,
        flags & WANT_DRES ? addr(&o->dres) : 0, flags & WANT_DW ? addr(&o->dw) : 0,
        flags & WANT_DB ? addr(&o->db) : 0, 0, 0, addr(&in->dy), s->dy_stride,
        s->dres_out ? addr(&in->dro) : 0, s->dro_stride, addr(in->h), in->h_stride, hd,
        flags & PASS_MEAN ? addr(&in->mean) : 0, addr(&in->rstd),
        s->weight ? addr(in->w) : 0, s->param_dtype, s->rows, s->cols, s->dtype, s->kind,
        s->p, s->seed, s->offset);
}

static double *new_doubles(int64_t n) {
    double *p = calloc((size_t)n + 1, sizeof(double));
    if (!p) {
        fprintf(stderr, "test_norm: out of memory\n");
        exit(2);
    }
    return p;
}

static void run_norm(const norm_setup *s, uint64_t rng_seed) {
    const int ln = s->kind == LAYER, has_res = s->residual_dtype != NO_RESIDUAL;
    const int dt = s->dtype, pd = s->param_dtype, sd = stats_dtype(dt);
    const int hd = has_res ? s->residual_dtype : dt; /* the dtype of h */
    const int64_t R = s->rows, C = s->cols, n = R * C;
    const int64_t xs = R > 1 ? s->x_stride : 0, rs = R > 1 ? s->res_stride : 0;
    const int64_t dys = R > 1 ? s->dy_stride : 0, dros = R > 1 ? s->dro_stride : 0;
    const double A = arith(dt);
    char what[256], label[320];
    snprintf(what, sizeof what,
             "%s [%s %s x, %s params, %s residual, %" PRId64 " x %" PRId64 ", p %g]",
             s->why, ln ? "LayerNorm" : "RMSNorm", dtype_label(dt), dtype_label(pd),
             has_res ? dtype_label(s->residual_dtype) : "no", R, C, s->p);
    section(what);
#define LABEL(part) (snprintf(label, sizeof label, "%s: %s", what, part), label)

    uint64_t rng = rng_seed;
    fwd_in in = {
        norm_input(&rng, dt, R, C, s->x_stride, s->align, 1.5, 2.0),
        norm_input(&rng, hd, has_res ? R : 0, C, s->res_stride, s->align, -0.5, 2.0),
        norm_input(&rng, pd, 1, C, C, s->align, 1.0, 0.5),
        norm_input(&rng, pd, 1, C, C, s->align, 0.0, 0.5),
    };
    unsigned char *x_copy = snapshot(&in.x), *res_copy = snapshot(&in.res),
                  *w_copy = snapshot(&in.w), *b_copy = snapshot(&in.b);
    fwd_out out = new_fwd_out(s, hd, POISON);
    double *want = new_doubles(n > C ? n : C), *tol = new_doubles(n > C ? n : C);
    double *h = new_doubles(n), *mu = new_doubles(R), *rsd = new_doubles(R);
    double *tol_mu = new_doubles(R), *tol_rsd = new_doubles(R);

    /* ---- forward ---- */
    int st = run_forward(s, &in, &out);
    if (!CHECK(st == OK, "%s: forward status %d (%s)", what, st, fo_last_error()))
        goto free_forward;

    /* residual_out = dropout(x) + residual, rounded once to its dtype;
     * the h the statistics are of: residual_out as stored, else x */
    if (has_res) {
        for (int64_t r = 0; r < R; r++)
            for (int64_t c = 0; c < C; c++) {
                const int64_t i = r * C + c;
                double xv = get(in.x.data, r * xs + c, dt);
                double rv = get(in.res.data, r * rs + c, hd);
                if (mask_keeps(s->seed, s->offset, s->p, r, c, C)) {
                    double d = xv / (1.0 - s->p);
                    want[i] = d + rv;
                    tol[i] = ulp(want[i], hd) + A * (fabs(d) + fabs(rv));
                } else {
                    want[i] = rv; /* dropped: the residual itself, exactly */
                    tol[i] = 0.0;
                }
            }
        check_output(LABEL("residual_out"), &out.ro, want, tol, n, hd);
        for (int64_t i = 0; i < n; i++)
            h[i] = get(out.ro.data, i, hd);
    } else {
        for (int64_t r = 0; r < R; r++)
            for (int64_t c = 0; c < C; c++)
                h[r * C + c] = get(in.x.data, r * xs + c, dt);
    }

    /* mean and rstd of each row (two passes, in double) */
    for (int64_t r = 0; r < R; r++) {
        double sum = 0.0, abs_sum = 0.0, var = 0.0;
        for (int64_t c = 0; c < C; c++) {
            sum += h[r * C + c];
            abs_sum += fabs(h[r * C + c]);
        }
        mu[r] = ln ? sum / (double)C : 0.0;
        for (int64_t c = 0; c < C; c++)
            var += (h[r * C + c] - mu[r]) * (h[r * C + c] - mu[r]);
        var /= (double)C;
        rsd[r] = 1.0 / sqrt(var + s->eps);
        tol_mu[r] = ulp(mu[r], sd) + A * abs_sum / (double)C;
        tol_rsd[r] = ulp(rsd[r], sd) + A * rsd[r];
    }
    if (s->stats) {
        if (ln)
            check_output(LABEL("mean"), &out.mean, mu, tol_mu, R, sd);
        check_output(LABEL("rstd"), &out.rstd, rsd, tol_rsd, R, sd);
    }
    if (!s->stats || !ln)
        CHECK(untouched(&out.mean), "%s: mean not asked for, but written", what);
    if (!s->stats)
        CHECK(untouched(&out.rstd), "%s: rstd not asked for, but written", what);

    /* y = (h - mean) * rstd * weight + bias */
    for (int64_t r = 0; r < R; r++)
        for (int64_t c = 0; c < C; c++) {
            const int64_t i = r * C + c;
            double wv = s->weight ? get(in.w.data, c, pd) : 1.0;
            double bv = s->bias ? get(in.b.data, c, pd) : 0.0;
            want[i] = (h[i] - mu[r]) * rsd[r] * wv + bv;
            tol[i] = ulp(want[i], dt) +
                     A * (rsd[r] * (fabs(h[i]) + fabs(mu[r])) * fabs(wv) + fabs(bv));
        }
    check_output(LABEL("y"), &out.y, want, tol, n, dt);
    if (ln && C == 1) {
        /* LayerNorm of one element: h - mean = 0, so y is the bias, exactly */
        for (int64_t r = 0; r < R; r++)
            want[r] = s->bias ? get(in.b.data, 0, pd) : 0.0;
        check_output(LABEL("y of one column is the bias"), &out.y, want, NULL, R, dt);
    }

    /* the same call again: the same bits */
    {
        fwd_out again = new_fwd_out(s, hd, 0x5A);
        st = run_forward(s, &in, &again);
        CHECK(st == OK && same_bytes(&out.y, &again.y) && same_bytes(&out.ro, &again.ro),
              "%s: a second forward run gave other bits (status %d)", what, st);
        if (s->stats)
            CHECK(same_bytes(&out.rstd, &again.rstd) &&
                      (!ln || same_bytes(&out.mean, &again.mean)),
                  "%s: a second forward run gave other statistics", what);
        free_fwd_out(&again);
    }
    CHECK(unchanged(&in.x, x_copy) && unchanged(&in.res, res_copy) &&
              unchanged(&in.w, w_copy) && unchanged(&in.b, b_copy),
          "%s: forward wrote to an input", what);

    /* ---- backward, from the h forward left (residual_out, else x) ---- */
    {
        bwd_in bin = {
            has_res ? &out.ro : &in.x,
            has_res ? C : s->x_stride,
            norm_input(&rng, dt, R, C, s->dy_stride, s->align, 0.0, 1.0),
            norm_input(&rng, hd, s->dres_out ? R : 0, C, s->dro_stride, s->align, 0.0, 0.5),
            new_operand(sd, R, s->align),
            new_operand(sd, R, s->align),
            &in.w,
        };
        /* the statistics, stored in their dtype as forward stores them; for
         * RMSNorm the mean passed is NaN: it must not be read */
        for (int64_t r = 0; r < R; r++) {
            put(bin.mean.data, r, sd, ln ? mu[r] : NAN);
            put(bin.rstd.data, r, sd, rsd[r]);
        }
        unsigned char *h_copy = snapshot(bin.h), *dy_copy = snapshot(&bin.dy),
                      *dro_copy = snapshot(&bin.dro), *mean_copy = snapshot(&bin.mean),
                      *rstd_copy = snapshot(&bin.rstd);
        const int64_t hs = R > 1 ? bin.h_stride : 0;
        double *want_dres = new_doubles(n), *tol_dres = new_doubles(n);
        double *want_dx = new_doubles(n), *tol_dx = new_doubles(n);
        double *want_dw = new_doubles(C), *tol_dw = new_doubles(C);
        double *want_db = new_doubles(C), *tol_db = new_doubles(C);
        double *g = new_doubles(C), *xh = new_doubles(C);

        /* the analytic gradient, in double, from the stored statistics:
         * dh = rstd (w dy - mean(w dy) - xhat mean(w dy xhat)) (+ dresidual_out),
         * without the mean(w dy) term for RMSNorm; dx = dh * mask / (1 - p) */
        for (int64_t r = 0; r < R; r++) {
            const double m = ln ? get(bin.mean.data, r, sd) : 0.0;
            const double q = get(bin.rstd.data, r, sd);
            double sg = 0, sgx = 0, ag = 0, agx = 0;
            for (int64_t c = 0; c < C; c++) {
                double dyv = get(bin.dy.data, r * dys + c, dt);
                double wv = s->weight ? get(in.w.data, c, pd) : 1.0;
                g[c] = wv * dyv;
                xh[c] = (get(bin.h->data, r * hs + c, hd) - m) * q;
                sg += g[c];
                sgx += g[c] * xh[c];
                ag += fabs(g[c]);
                agx += fabs(g[c] * xh[c]);
                want_dw[c] += dyv * xh[c];
                tol_dw[c] += fabs(dyv * xh[c]);
                want_db[c] += dyv;
                tol_db[c] += fabs(dyv);
            }
            const double mg = ln ? sg / (double)C : 0.0, mgx = sgx / (double)C;
            for (int64_t c = 0; c < C; c++) {
                const int64_t i = r * C + c;
                double dro = s->dres_out ? get(bin.dro.data, r * dros + c, hd) : 0.0;
                double dh = q * (g[c] - mg - xh[c] * mgx) + dro;
                double err = A * (q * (fabs(g[c]) + (ln ? ag / (double)C : 0.0) +
                                       fabs(xh[c]) * agx / (double)C) +
                                  fabs(dro));
                want_dres[i] = dh;
                tol_dres[i] = ulp(dh, hd) + err;
                if (mask_keeps(s->seed, s->offset, s->p, r, c, C)) {
                    want_dx[i] = dh / (1.0 - s->p);
                    tol_dx[i] = ulp(want_dx[i], dt) + err / (1.0 - s->p);
                } else {
                    want_dx[i] = 0.0; /* dropped: exactly 0 */
                    tol_dx[i] = 0.0;
                }
            }
        }
        for (int64_t c = 0; c < C; c++) {
            tol_dw[c] = ulp(want_dw[c], pd) + A * tol_dw[c];
            tol_db[c] = ulp(want_db[c], pd) + A * tol_db[c];
        }

        /* every gradient at once */
        const int all = WANT_DX | (has_res ? WANT_DRES : 0) | WANT_DW | (ln ? WANT_DB : 0) |
                        PASS_MEAN;
        bwd_out bo = new_bwd_out(s, hd, POISON);
        st = run_backward(s, &bin, &bo, all);
        if (CHECK(st == OK, "%s: backward status %d (%s)", what, st, fo_last_error())) {
            check_output(LABEL("dx"), &bo.dx, want_dx, tol_dx, n, dt);
            if (has_res)
                check_output(LABEL("dresidual"), &bo.dres, want_dres, tol_dres, n, hd);
            else
                CHECK(untouched(&bo.dres), "%s: dresidual not asked for, but written", what);
            check_output(LABEL("dweight"), &bo.dw, want_dw, tol_dw, C, pd);
            if (ln)
                check_output(LABEL("dbias"), &bo.db, want_db, tol_db, C, pd);
            else
                CHECK(untouched(&bo.db), "%s: dbias not asked for, but written", what);

            /* again: the same bits */
            bwd_out again = new_bwd_out(s, hd, 0x5A);
            st = run_backward(s, &bin, &again, all);
            CHECK(st == OK && same_bytes(&bo.dx, &again.dx) &&
                      (!has_res || same_bytes(&bo.dres, &again.dres)) &&
                      same_bytes(&bo.dw, &again.dw) && (!ln || same_bytes(&bo.db, &again.db)),
                  "%s: a second backward run gave other bits (status %d)", what, st);
            free_bwd_out(&again);
        }
        free_bwd_out(&bo);

        /* the column sums alone (mean left out for RMSNorm) */
        bo = new_bwd_out(s, hd, POISON);
        st = run_backward(s, &bin, &bo, WANT_DW | (ln ? WANT_DB | PASS_MEAN : 0));
        if (CHECK(st == OK, "%s: backward, dweight/dbias only: status %d (%s)", what, st,
                  fo_last_error())) {
            check_output(LABEL("dweight alone"), &bo.dw, want_dw, tol_dw, C, pd);
            if (ln)
                check_output(LABEL("dbias alone"), &bo.db, want_db, tol_db, C, pd);
            CHECK(untouched(&bo.dx) && untouched(&bo.dres),
                  "%s: dweight/dbias only, but dx or dresidual written", what);
        }
        free_bwd_out(&bo);

        /* dx alone; and dresidual alone where there is a residual */
        bo = new_bwd_out(s, hd, POISON);
        st = run_backward(s, &bin, &bo, WANT_DX | (ln ? PASS_MEAN : 0));
        if (CHECK(st == OK, "%s: backward, dx only: status %d (%s)", what, st,
                  fo_last_error())) {
            check_output(LABEL("dx alone"), &bo.dx, want_dx, tol_dx, n, dt);
            CHECK(untouched(&bo.dres) && untouched(&bo.dw) && untouched(&bo.db),
                  "%s: dx only, but another gradient written", what);
        }
        free_bwd_out(&bo);
        if (has_res) {
            bo = new_bwd_out(s, hd, POISON);
            st = run_backward(s, &bin, &bo, WANT_DRES | PASS_MEAN);
            if (CHECK(st == OK, "%s: backward, dresidual only: status %d (%s)", what, st,
                      fo_last_error())) {
                check_output(LABEL("dresidual alone"), &bo.dres, want_dres, tol_dres, n, hd);
                CHECK(untouched(&bo.dx) && untouched(&bo.dw) && untouched(&bo.db),
                      "%s: dresidual only, but another gradient written", what);
            }
            free_bwd_out(&bo);
        }

        CHECK(unchanged(bin.h, h_copy) && unchanged(&bin.dy, dy_copy) &&
                  unchanged(&bin.dro, dro_copy) && unchanged(&bin.mean, mean_copy) &&
                  unchanged(&bin.rstd, rstd_copy) && unchanged(&in.w, w_copy),
              "%s: backward wrote to an input", what);
        free(h_copy), free(dy_copy), free(dro_copy), free(mean_copy), free(rstd_copy);
        free(want_dres), free(tol_dres), free(want_dx), free(tol_dx);
        free(want_dw), free(tol_dw), free(want_db), free(tol_db), free(g), free(xh);
        guarded_free(&bin.dy);
        guarded_free(&bin.dro);
        guarded_free(&bin.mean);
        guarded_free(&bin.rstd);
    }

free_forward:
#undef LABEL
    free(x_copy), free(res_copy), free(w_copy), free(b_copy);
    free(want), free(tol), free(h), free(mu), free(rsd), free(tol_mu), free(tol_rsd);
    guarded_free(&in.x);
    guarded_free(&in.res);
    guarded_free(&in.w);
    guarded_free(&in.b);
    free_fwd_out(&out);
}

static void test_values(void) {
    enum { NONE = NO_RESIDUAL };
#define S1 UINT64_C(0xDEADBEEFCAFEF00D) /* a seed with both key words set */
    static const norm_setup setups[] = {
        /* why, kind, dtype, param_dtype, residual_dtype, rows, cols, x_stride,
         * res_stride, dy_stride, dro_stride, weight, bias, stats, dres_out, eps,
         * p, seed, offset, align */
        {"plain", LAYER, F32, F32, NONE, 7, 13, 13, 0, 13, 0, 0, 0, 1, 0, 1e-5, 0, 0, 0, 0},
        {"strided x and dy, weight and bias", LAYER, F32, F32, NONE, 5, 37, 40, 0, 39, 0, 1, 1, 1, 0, 1e-5, 0, 0, 0, 1},
        {"residual, several CPU chunks", LAYER, F32, F32, F32, 3, 1000, 1003, 1000, 1000, 1004, 1, 1, 1, 1, 1e-5, 0, 0, 0, 0},
        {"residual and dropout, several CPU chunks", LAYER, F32, F32, F32, 4, 1000, 1000, 1001, 1000, 1002, 1, 1, 1, 1, 1e-5, 0.25, 1234, 77, 0},
        {"dropout, cols 13 (row counters padded)", LAYER, F32, F32, F32, 7, 13, 16, 13, 13, 13, 1, 1, 1, 1, 1e-5, 0.5, 99, 5, 1},
        {"dropout, cols 1001, no dresidual_out", LAYER, F32, F32, F32, 3, 1001, 1001, 1001, 1010, 0, 1, 1, 1, 0, 1e-5, 0.25, 31337, 0, 1},
        {"fp32 residual stream, counters crossing 2^32", LAYER, BF16, F32, F32, 6, 100, 104, 100, 100, 100, 1, 1, 1, 1, 1e-5, 0.1, S1, 0xFFFFFFF0u, 0},
        {"bf16 throughout, dropout", LAYER, BF16, BF16, BF16, 3, 37, 37, 40, 37, 37, 1, 1, 1, 0, 1e-5, 0.5, 7, 0, 1},
        {"bf16 x, bf16 params, fp32 residual, 1000 cols", LAYER, BF16, BF16, F32, 2, 1000, 1000, 1000, 1000, 1000, 1, 1, 1, 1, 1e-5, 0.3, 8, 123, 0},
        {"f16 x, f32 params, strided", LAYER, F16, F32, NONE, 4, 21, 24, 0, 21, 0, 1, 1, 1, 0, 1e-5, 0, 0, 0, 1},
        {"f16 throughout, residual, dropout, 1000 cols", LAYER, F16, F16, F16, 2, 1000, 1000, 1000, 1000, 1000, 1, 1, 1, 1, 1e-5, 0.25, 9, 0, 0},
        {"f64, residual and dropout, 300 cols", LAYER, F64, F64, F64, 3, 300, 301, 300, 305, 300, 1, 1, 1, 1, 1e-5, 0.3, 42, 1000, 1},
        {"eps 0.25 (where eps goes matters)", LAYER, F32, F32, NONE, 4, 16, 16, 0, 16, 0, 1, 1, 1, 0, 0.25, 0, 0, 0, 0},
        {"f64, eps 1", LAYER, F64, F64, F64, 2, 9, 9, 9, 9, 9, 1, 0, 1, 1, 1.0, 0, 0, 0, 0},
        {"overlapping x rows (stride 3), dy broadcast", LAYER, F32, F32, NONE, 4, 10, 3, 0, 0, 0, 1, 1, 1, 0, 1e-5, 0, 0, 0, 0},
        {"one row: negative strides ignored", LAYER, F32, F32, F32, 1, 1001, -5, -9, -7, -3, 1, 1, 1, 1, 1e-5, 0.2, 3, 0, 0},
        {"residual and dresidual_out broadcast (stride 0)", LAYER, F32, F32, F32, 5, 24, 24, 0, 24, 0, 1, 1, 1, 1, 1e-5, 0.1, 11, 0, 0},
        {"cols 1", LAYER, F32, F32, NONE, 5, 1, 1, 0, 1, 0, 1, 1, 1, 0, 1e-5, 0, 0, 0, 0},
        {"cols 1, no bias", LAYER, F32, F32, NONE, 3, 1, 2, 0, 1, 0, 1, 0, 1, 0, 1e-5, 0, 0, 0, 1},
        {"cols 1, bf16 x, fp32 residual, dropout", LAYER, BF16, F32, F32, 5, 1, 2, 1, 1, 1, 1, 1, 1, 1, 1e-5, 0.5, 5, 0, 0},
        {"statistics not asked for", LAYER, F32, F32, F32, 3, 50, 50, 50, 50, 50, 1, 1, 0, 0, 1e-5, 0, 0, 0, 0},
        {"plain", RMS, F32, F32, NONE, 7, 13, 13, 0, 13, 0, 0, 0, 1, 0, 1e-5, 0, 0, 0, 0},
        {"strided x and dy, weight", RMS, F32, F32, NONE, 5, 37, 40, 0, 37, 0, 1, 0, 1, 0, 1e-5, 0, 0, 0, 1},
        {"fp32 residual stream, dropout, 1000 cols", RMS, BF16, F32, F32, 6, 1000, 1000, 1000, 1008, 1000, 1, 0, 1, 1, 1e-6, 0.2, S1, 17, 0},
        {"f64, residual, 300 cols", RMS, F64, F64, F64, 3, 300, 300, 303, 300, 300, 1, 0, 1, 1, 1e-5, 0, 0, 0, 1},
        {"f16 throughout, residual, dropout", RMS, F16, F16, F16, 4, 21, 21, 21, 21, 24, 1, 0, 1, 1, 1e-5, 0.1, 2, 3, 0},
        {"cols 1", RMS, F32, F32, NONE, 3, 1, 1, 0, 1, 0, 1, 0, 1, 0, 1e-5, 0, 0, 0, 0},
        {"eps 0.5", RMS, F32, F32, NONE, 3, 8, 8, 0, 8, 0, 1, 0, 1, 0, 0.5, 0, 0, 0, 0},
        {"statistics not asked for, cols 1001", RMS, F32, F32, F32, 2, 1001, 1001, 1001, 1001, 1001, 1, 0, 0, 1, 1e-5, 0.25, 4, 4, 1},
    };
    for (size_t i = 0; i < COUNT(setups); i++)
        run_norm(&setups[i], 5000 + i);
#undef S1
}

/* ========================================================================
 * LayerNorm of a constant row: h - mean is exactly 0, so y is exactly the
 * bias (0 without one) and, where dy * weight is constant along the row too,
 * dx is exactly 0 (dresidual exactly dresidual_out), as in torch. With
 * cols = 1 every row is constant and dy * weight is: dx = 0 for any values.
 * A residue of the cancellation would be multiplied by rstd = 1/sqrt(eps).
 * ======================================================================== */

typedef struct constant_setup {
    int dtype, param_dtype, residual_dtype; /* NO_RESIDUAL: none */
    int64_t rows, cols;
    double p; /* dropout: cols = 1 only (else h is not constant) */
    int weight, bias, dres_out;
} constant_setup;

static void run_constant_rows(const constant_setup *s, uint64_t rng) {
    const int dt = s->dtype, pd = s->param_dtype, sd = stats_dtype(dt);
    const int has_res = s->residual_dtype != NO_RESIDUAL;
    const int hd = has_res ? s->residual_dtype : dt;
    const int64_t R = s->rows, C = s->cols, n = R * C;
    char what[200];
    snprintf(what, sizeof what,
             "%s x, %s params, %s residual, %" PRId64 " x %" PRId64 ", p %g%s%s%s",
             dtype_label(dt), dtype_label(pd), has_res ? dtype_label(hd) : "no", R, C, s->p,
             s->weight ? ", weight" : "", s->bias ? ", bias" : "",
             s->dres_out ? ", dresidual_out" : "");
    guarded x = new_operand(dt, n, 0), res = new_operand(hd, n, 0),
            w = new_operand(pd, C, 0), b = new_operand(pd, C, 0), dy = new_operand(dt, n, 0),
            dro = new_operand(hd, n, 0), y = new_operand(dt, n, 0), ro = new_operand(hd, n, 0),
            mean = new_operand(sd, R, 0), rstd = new_operand(sd, R, 0),
            dx = new_operand(dt, n, 0), dres = new_operand(hd, n, 0);
    /* one value a row for x, residual and dy (any values when cols = 1), one
     * for the whole weight; the bias may vary along the row */
    const double w_value = 0.5 + rng_uniform(&rng);
    for (int64_t r = 0; r < R; r++) {
        const double xv = 3.0 * rng_uniform(&rng), rv = rng_uniform(&rng),
                     dyv = rng_uniform(&rng);
        for (int64_t c = 0; c < C; c++) {
            put(x.data, r * C + c, dt, C == 1 ? 3.0 * rng_uniform(&rng) : xv);
            put(res.data, r * C + c, hd, C == 1 ? rng_uniform(&rng) : rv);
            put(dy.data, r * C + c, dt, C == 1 ? rng_uniform(&rng) : dyv);
            put(dro.data, r * C + c, hd, rng_uniform(&rng));
        }
    }
    double *bias_values = calloc((size_t)C, sizeof(double));
    for (int64_t c = 0; c < C && bias_values; c++) {
        put(w.data, c, pd, C == 1 ? 0.5 + rng_uniform(&rng) : w_value);
        put(b.data, c, pd, rng_uniform(&rng));
        bias_values[c] = get(b.data, c, pd);
    }
    int st = norm_forward_call(CPU, 0, 0, addr(&y), has_res ? addr(&ro) : 0, addr(&mean),
                               addr(&rstd), addr(&x), C, has_res ? addr(&res) : 0, C,
                               has_res ? hd : dt, s->weight ? addr(&w) : 0,
                               s->bias ? addr(&b) : 0, pd, R, C, dt, LAYER, 1e-5, s->p, 7, 11);
    if (CHECK(st == OK && bias_values, "%s: forward status %d (%s)", what, st,
              fo_last_error())) {
        /* y = 0 * weight + bias: the bias's bits, a zero without one */
        int64_t wrong = 0;
        for (int64_t i = 0; i < n; i++) {
            const uint64_t want = s->bias ? round_bits(bias_values[i % C], dt) : 0;
            if (!same_value(get_bits(y.data, i, dt), want, dt) && ++wrong <= 3)
                CHECK(0, "%s: y[%" PRId64 "] = %.17g, want %.17g exactly", what, i,
                      get(y.data, i, dt), s->bias ? bias_values[i % C] : 0.0);
        }
        CHECK(wrong == 0, "%s: %" PRId64 " elements of y are not the bias exactly", what,
              wrong);
    }
    st = norm_backward_call(CPU, 0, 0, addr(&dx), has_res ? addr(&dres) : 0, 0, 0, 0, 0,
                            addr(&dy), C, s->dres_out ? addr(&dro) : 0, C,
                            has_res ? addr(&ro) : addr(&x), C, hd, addr(&mean), addr(&rstd),
                            s->weight ? addr(&w) : 0, pd, R, C, dt, LAYER, s->p, 7, 11);
    if (CHECK(st == OK, "%s: backward status %d (%s)", what, st, fo_last_error())) {
        /* the norm's part of dh is rstd * (0 - 0 * mean(dy * w * xhat)) = 0:
         * dh is dresidual_out exactly, or 0 */
        int64_t wrong = 0;
        for (int64_t i = 0; i < n; i++) {
            double dx_want = 0.0;
            if (s->dres_out && mask_keeps(7, 11, s->p, i / C, i % C, C))
                dx_want = s->p > 0.0 ? get(dro.data, i, hd) * (1.0 / (1.0 - s->p))
                                     : get(dro.data, i, hd);
            if (!same_value(get_bits(dx.data, i, dt), round_bits(dx_want, dt), dt) &&
                ++wrong <= 3)
                CHECK(0, "%s: dx[%" PRId64 "] = %.9g, want %.9g exactly", what, i,
                      get(dx.data, i, dt), dx_want);
            if (has_res) {
                const uint64_t want = s->dres_out ? get_bits(dro.data, i, hd) : 0;
                if (!same_value(get_bits(dres.data, i, hd), want, hd) && ++wrong <= 3)
                    CHECK(0, "%s: dresidual[%" PRId64 "] = %.9g, want %.9g exactly", what, i,
                          get(dres.data, i, hd), s->dres_out ? get(dro.data, i, hd) : 0.0);
            }
        }
        CHECK(wrong == 0, "%s: %" PRId64 " gradients are not exact", what, wrong);
    }
    free(bias_values);
    guarded *all[] = {&x, &res, &w, &b, &dy, &dro, &y, &ro, &mean, &rstd, &dx, &dres};
    for (size_t i = 0; i < COUNT(all); i++)
        guarded_free(all[i]);
}

static void test_constant_rows(void) {
    section("LayerNorm of constant rows: y = bias and dx = 0 exactly");
    static const int pairs[][2] = {{F32, F32}, {F16, F16}, {F16, F32}, {BF16, BF16},
                                   {BF16, F32}, {F64, F64}};
    /* several chunks and lanes, and sums of 0.1-like values that round */
    static const int64_t widths[] = {1, 2, 3, 7, 255, 256, 1000, 4099, 70001};
    uint64_t seed = 0x5eed;
    for (size_t i = 0; i < COUNT(pairs); i++)
        for (size_t k = 0; k < COUNT(widths); k++)
            for (int variant = 0; variant < 4; variant++) {
                const int dt = pairs[i][0], pd = pairs[i][1];
                const int64_t C = widths[k];
                /* 0: bias only; 1: weight only; 2: a residual, weight and
                 * bias; 3: the same with an fp32 residual under a half x
                 * and an incoming dresidual_out. Dropout where cols = 1. */
                constant_setup s = {dt, pd, NO_RESIDUAL, C == 1 ? 5 : 3, C, 0.0,
                                    variant != 0, variant != 1, 0};
                if (variant >= 2) {
                    s.residual_dtype = variant == 3 && pd == F32 && dt != F32 ? F32 : dt;
                    s.dres_out = variant == 3;
                    s.p = C == 1 ? 0.25 : 0.0;
                }
                run_constant_rows(&s, seed++);
            }
}

/* ========================================================================
 * Empty operands: rows = 0 or cols = 0 writes nothing, except dweight and
 * dbias over no rows, which are sums of nothing: 0.
 * ======================================================================== */

static void test_empty(void) {
    section("empty operands");
    static const int pairs[][2] = {{F32, F32}, {F16, F16}, {F16, F32}, {BF16, BF16},
                                   {BF16, F32}, {F64, F64}};
    static const double zeros[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (size_t i = 0; i < COUNT(pairs); i++) {
        const int dt = pairs[i][0], pd = pairs[i][1], sd = stats_dtype(dt);
        char what[96];
        snprintf(what, sizeof what, "%s x, %s params", dtype_label(dt), dtype_label(pd));
        guarded y = new_operand(dt, 8, 0), ro = new_operand(pd, 8, 0),
                mean = new_operand(sd, 8, 0), rstd = new_operand(sd, 8, 0),
                x = new_operand(dt, 8, 0), w = new_operand(pd, 8, 0),
                dw = new_operand(pd, 5, 0), db = new_operand(pd, 5, 0);

        /* forward over 0 rows: nothing written, with or without addresses */
        int st = norm_forward_call(CPU, 0, 0, addr(&y), addr(&ro), addr(&mean), addr(&rstd),
                                 addr(&x), 5, addr(&x), 5, pd, addr(&w), addr(&w), pd, 0,
                                 5, dt, LAYER, 1e-5, 0.5, 1, 2);
        CHECK(st == OK && untouched(&y) && untouched(&ro) && untouched(&mean) &&
                  untouched(&rstd),
              "%s, forward over 0 rows: status %d (%s), or something written", what, st,
              fo_last_error());
        st = norm_forward_call(CPU, 0, 0, 0, 0, 0, 0, 0, 5, 0, 5, dt, 0, 0, pd, 0, 5, dt,
                             RMS, 1e-5, 0.0, 0, 0);
        CHECK(st == OK, "%s, forward over 0 rows, null addresses: status %d (%s)", what,
              st, fo_last_error());
        /* 0 columns: y and residual_out have no elements */
        st = norm_forward_call(CPU, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, dt, 0, 0, pd, 3, 0, dt,
                             LAYER, 1e-5, 0.0, 0, 0);
        CHECK(st == OK, "%s, forward over 0 columns, null addresses: status %d (%s)",
              what, st, fo_last_error());
        st = norm_forward_call(CPU, 0, 0, addr(&y), 0, 0, 0, addr(&x), 0, 0, 0, dt, addr(&w),
                             addr(&w), pd, 3, 0, dt, LAYER, 1e-5, 0.0, 0, 0);
        CHECK(st == OK && untouched(&y),
              "%s, forward over 0 columns: status %d (%s), or y written", what, st,
              fo_last_error());

        /* backward over 0 rows: dweight and dbias are 0; dx untouched; dy, h,
         * mean and rstd may be null */
        for (int k = 0; k < 2; k++) {
            guarded_fill(&dw, POISON);
            guarded_fill(&db, POISON);
            guarded_fill(&y, POISON);
            const uintptr_t in = k ? addr(&x) : 0, stats = k ? addr(&mean) : 0;
            st = norm_backward_call(CPU, 0, 0, addr(&y), 0, addr(&dw), addr(&db), 0, 0, in,
                                  5, in, 5, in, 5, dt, stats, stats, addr(&w), pd, 0, 5,
                                  dt, LAYER, 0.25, 1, 2);
            if (CHECK(st == OK, "%s, LayerNorm backward over 0 rows%s: status %d (%s)",
                      what, k ? "" : ", null inputs", st, fo_last_error())) {
                check_output("dweight over 0 rows", &dw, zeros, NULL, 5, pd);
                check_output("dbias over 0 rows", &db, zeros, NULL, 5, pd);
                CHECK(untouched(&y), "%s: dx over 0 rows written", what);
            }
        }
        guarded_fill(&dw, POISON);
        st = norm_backward_call(CPU, 0, 0, 0, 0, addr(&dw), 0, 0, 0, 0, 5, 0, 5, 0, 5, dt,
                              0, 0, 0, pd, 0, 5, dt, RMS, 0.0, 0, 0);
        if (CHECK(st == OK, "%s, RMSNorm backward over 0 rows: status %d (%s)", what, st,
                  fo_last_error()))
            check_output("RMSNorm dweight over 0 rows", &dw, zeros, NULL, 5, pd);

        /* backward over 0 columns: nothing to write */
        guarded_fill(&dw, POISON);
        guarded_fill(&db, POISON);
        st = norm_backward_call(CPU, 0, 0, addr(&y), 0, addr(&dw), addr(&db), 0, 0, addr(&x),
                              0, 0, 0, addr(&x), 0, dt, addr(&mean), addr(&rstd), addr(&w),
                              pd, 3, 0, dt, LAYER, 0.0, 0, 0);
        CHECK(st == OK && untouched(&dw) && untouched(&db) && untouched(&y),
              "%s, backward over 0 columns: status %d (%s), or something written", what,
              st, fo_last_error());

        guarded_free(&y);
        guarded_free(&ro);
        guarded_free(&mean);
        guarded_free(&rstd);
        guarded_free(&x);
        guarded_free(&w);
        guarded_free(&dw);
        guarded_free(&db);
    }
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    printf("libfused_ops %d (ABI %d), CUDA %s%s%s\n", fo_version(), fo_abi_version(),
           fo_cuda_built() ? "built: " : "not built", fo_cuda_archs(),
           getenv("FO_TEST_HAS_GPU") ? " (FO_TEST_HAS_GPU set)" : "");
    for (int i = 0; i < NBUF; i++)
        BUF[i] = guarded_new(BUF_BYTES, 0);

    test_errors_forward();
    test_errors_backward();
    test_errors_workspace_query();
    test_cuda_device();
    test_philox();
    test_dropout_mask();
    test_values();
    test_constant_rows();
    test_empty();

    for (int i = 0; i < NBUF; i++)
        guarded_free(&BUF[i]);
    return finish();
}
