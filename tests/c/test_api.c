/* test_api.c: tests of the public C ABI of libfused_ops (lib/fused_ops.h),
 * calling the library directly, without Python.
 *
 * Values are checked on the CPU backend against references computed here in
 * double. The CUDA entry points are only called where they must fail before
 * touching memory: CI builds with nvcc but has no GPU (set FO_TEST_HAS_GPU=1
 * on a machine with one to skip the calls that expect the runtime to fail).
 *
 * Every output is poisoned (harness.h) and surrounded by guard bytes before a
 * call, so a check also sees elements never written and writes out of
 * bounds. Exit status 0 when all checks pass; failures are printed to stderr.
 */
#define _POSIX_C_SOURCE 200809L /* pthread_barrier_t */
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS */

#include <float.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fused_ops.h"
#include "harness.h"

/* Set by tests/meson.build from the build configuration. */
#ifndef FO_TEST_PROJECT_VERSION
#error "FO_TEST_PROJECT_VERSION (meson.project_version()) must be defined"
#endif
#ifndef FO_TEST_EXPECT_CUDA
#error "FO_TEST_EXPECT_CUDA (1 when meson built the CUDA kernels) must be defined"
#endif

#define COUNT(array) (sizeof(array) / sizeof((array)[0]))

enum { CPU = FO_DEVICE_CPU, CUDA = FO_DEVICE_CUDA };
enum { F32 = FO_DTYPE_F32, F16 = FO_DTYPE_F16, BF16 = FO_DTYPE_BF16, F64 = FO_DTYPE_F64 };
enum {
    OK = FO_OK,
    INVALID = FO_ERR_INVALID_ARGUMENT,
    BAD_DTYPE = FO_ERR_UNSUPPORTED_DTYPE,
    BAD_DEVICE = FO_ERR_UNSUPPORTED_DEVICE,
    NOT_BUILT = FO_ERR_CUDA_NOT_BUILT,
    CUDA_RUNTIME = FO_ERR_CUDA_RUNTIME,
    TOO_SMALL = FO_ERR_WORKSPACE_TOO_SMALL,
};
static const int ALL_DTYPES[] = {F32, F16, BF16, F64};

/* Elements of a rows x cols operand whose rows start `stride` apart. */
static int64_t strided_elems(int64_t rows, int64_t cols, int64_t stride) {
    if (rows == 0 || cols == 0) return 0;
    return (rows - 1) * (rows > 1 ? stride : 0) + cols;
}

static int64_t mask_row_bytes(int64_t cols) { return (cols + 7) / 8; }

/* A rows x cols operand of dtype starting `offset` elements past a 64-byte
 * boundary (so 0 is 16-byte aligned, 1 aligned to the element only). */
static guarded new_operand(int dtype, int64_t elems, size_t offset) {
    return guarded_new((size_t)elems * dtype_size(dtype), offset * dtype_size(dtype));
}

/* An input operand of random values. Elements between rows (a stride over
 * cols) hold NaN: a kernel that reads one gets a NaN result. `exact` picks
 * values with few bits (rng_dyadic), else full precision. */
static guarded random_input(uint64_t *rng, int dtype, int64_t rows, int64_t cols, int64_t stride,
                            size_t offset, int exact) {
    int64_t n = strided_elems(rows, cols, stride);
    guarded g = new_operand(dtype, n, offset);
    for (int64_t i = 0; i < n; i++) put(g.data, i, dtype, NAN);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++)
            put(g.data, r * (rows > 1 ? stride : 0) + c, dtype,
                exact ? rng_dyadic(rng) : rng_uniform(rng) * 4.0);
    return g;
}

/* ========================================================================
 * Versions, status strings, fo_last_error
 * ======================================================================== */

static void test_versions(void) {
    section("versions and build information");
    int want = FO_VERSION_MAJOR * 10000 + FO_VERSION_MINOR * 100 + FO_VERSION_PATCH;
    CHECK(fo_version() == want, "fo_version() = %d, the header says %d", fo_version(), want);
    CHECK(fo_abi_version() == FO_ABI_VERSION, "fo_abi_version() = %d, header %d", fo_abi_version(),
          FO_ABI_VERSION);
    /* The header's version is the one meson.build declares. */
    char header_version[32];
    snprintf(header_version, sizeof header_version, "%d.%d.%d", FO_VERSION_MAJOR, FO_VERSION_MINOR,
             FO_VERSION_PATCH);
    CHECK(strcmp(header_version, FO_TEST_PROJECT_VERSION) == 0,
          "fused_ops.h says version %s, meson.build says %s", header_version,
          FO_TEST_PROJECT_VERSION);

    CHECK(fo_cuda_built() == FO_TEST_EXPECT_CUDA,
          "fo_cuda_built() = %d but meson %s the CUDA kernels", fo_cuda_built(),
          FO_TEST_EXPECT_CUDA ? "built" : "did not build");
    const char *archs = fo_cuda_archs();
    if (!CHECK(archs != NULL, "fo_cuda_archs() returned NULL")) return;
    if (fo_cuda_built()) {
        CHECK(strstr(archs, "sm_") && strstr(archs, "compute_"),
              "fo_cuda_archs() = \"%s\" lists no sm_ and compute_ code", archs);
        CHECK(fo_cuda_runtime_version() >= 10000, "fo_cuda_runtime_version() = %d in a CUDA build",
              fo_cuda_runtime_version());
    } else {
        CHECK(strcmp(archs, "") == 0, "CPU-only build: fo_cuda_archs() = \"%s\"", archs);
        CHECK(fo_cuda_runtime_version() == 0, "CPU-only build: fo_cuda_runtime_version() = %d",
              fo_cuda_runtime_version());
    }
}

static void test_status_strings(void) {
    section("fo_status_string");
    static const int known[] = {OK,        INVALID,      BAD_DTYPE, BAD_DEVICE,
                                NOT_BUILT, CUDA_RUNTIME, TOO_SMALL};
    /* The numbers are pinned by the ABI. */
    CHECK(OK == 0 && INVALID == 1 && BAD_DTYPE == 2 && BAD_DEVICE == 3 && NOT_BUILT == 4 &&
              CUDA_RUNTIME == 5 && TOO_SMALL == 6,
          "the status numbers changed");
    CHECK(F32 == 0 && F16 == 1 && BF16 == 2 && F64 == 3 && CPU == 0 && CUDA == 1,
          "the dtype or device numbers changed");
    for (size_t i = 0; i < COUNT(known); i++) {
        const char *s = fo_status_string(known[i]);
        if (!CHECK(s != NULL && s[0] != '\0', "status %d has no description", known[i])) continue;
        CHECK(strcmp(s, "unknown status") != 0, "known status %d is described as \"%s\"", known[i],
              s);
        CHECK(fo_status_string(known[i]) == s, "status %d: not a static string", known[i]);
        for (size_t j = 0; j < i; j++) {
            const char *other = fo_status_string(known[j]);
            CHECK(other == NULL || strcmp(s, other) != 0,
                  "statuses %d and %d share the description \"%s\"", known[i], known[j], s);
        }
    }
    static const int unknown[] = {-1, 7, 8, 100, INT_MIN, INT_MAX};
    for (size_t i = 0; i < COUNT(unknown); i++) {
        const char *s = fo_status_string(unknown[i]);
        CHECK(s != NULL && strcmp(s, "unknown status") == 0,
              "unknown status %d is described as \"%s\"", unknown[i], s ? s : "(null)");
    }
}

/* A call that fails on any thread: fo_square_forward with a bad device_type.
 * The message then says "device_type=<value>". */
static int fail_with_device_type(int device_type) {
    return square_forward_call(device_type, 0, 0, 0, 0, 0, 1, 1, F32);
}

static void test_last_error(void) {
    section("fo_last_error");
    /* Runs before any other failing call of this thread. */
    const char *msg = fo_last_error();
    CHECK(msg != NULL && msg[0] == '\0',
          "before any failing call fo_last_error() = \"%s\", want \"\"", msg ? msg : "(null)");

    float x = 1.5f, y = 0.0f;
    int status = square_forward_call(CPU, 0, 0, (uintptr_t)&y, (uintptr_t)&x, 1, 1, 1, F32);
    CHECK(status == OK && y == 2.25f, "square of 1.5: status %d, y %g", status, (double)y);
    CHECK(fo_last_error()[0] == '\0', "a successful call set fo_last_error() to \"%s\"",
          fo_last_error());

    /* A failure names the op and the offending value. */
    status = square_forward_call(CPU, 0, 0, (uintptr_t)&y, (uintptr_t)&x, 1, 1, 1, 42);
    msg = fo_last_error();
    CHECK(status == BAD_DTYPE, "dtype 42: status %d, want %d", status, BAD_DTYPE);
    CHECK(strstr(msg, "fo_square_forward") && strstr(msg, "42"),
          "dtype 42: message \"%s\" names neither the op nor the value", msg);

    /* It stays through later successful calls ("until the next failing call"). */
    status = square_forward_call(CPU, 0, 0, (uintptr_t)&y, (uintptr_t)&x, 1, 1, 1, F32);
    CHECK(status == OK && strstr(fo_last_error(), "42"),
          "after a success the last error became \"%s\"", fo_last_error());

    /* The next failure replaces it. */
    status = reduce_sum_call(CPU, 0, 0, (uintptr_t)&y, 0, 0, (uintptr_t)&x, -9, F32);
    msg = fo_last_error();
    CHECK(status == INVALID && strstr(msg, "fo_reduce_sum") && strstr(msg, "-9") &&
              !strstr(msg, "fo_square_forward"),
          "numel -9: status %d, message \"%s\"", status, msg);
}

/* ---- thread-locality ---- */

static void *fresh_thread(void *unused) {
    (void)unused;
    /* The main thread has a message of its own; this thread must not see it. */
    CHECK(strcmp(fo_last_error(), "") == 0, "a new thread sees another thread's error: \"%s\"",
          fo_last_error());
    fail_with_device_type(202);
    CHECK(strstr(fo_last_error(), "device_type=202") != NULL, "the thread's own error: \"%s\"",
          fo_last_error());
    return NULL;
}

enum { STORM_THREADS = 8, STORM_ROUNDS = 2000 };
static pthread_barrier_t storm_start;

/* Threads failing at the same time each read back only their own message. */
static void *storm_thread(void *arg) {
    int id = (int)(intptr_t)arg;
    char want[64];
    snprintf(want, sizeof want, "device_type=%d ", 1000 + id);
    pthread_barrier_wait(&storm_start);
    int wrong = 0;
    for (int i = 0; i < STORM_ROUNDS; i++) {
        fail_with_device_type(1000 + id);
        if (!strstr(fo_last_error(), want)) wrong++;
    }
    CHECK(wrong == 0, "thread %d read another thread's message %d of %d times", id, wrong,
          STORM_ROUNDS);
    return NULL;
}

static void test_last_error_thread_local(void) {
    section("fo_last_error is per thread");
    fail_with_device_type(101);
    pthread_t thread;
    if (!CHECK(pthread_create(&thread, NULL, fresh_thread, NULL) == 0, "pthread_create failed"))
        return;
    pthread_join(thread, NULL);
    CHECK(strstr(fo_last_error(), "device_type=101") != NULL,
          "another thread's error replaced this thread's: \"%s\"", fo_last_error());

    pthread_t threads[STORM_THREADS];
    pthread_barrier_init(&storm_start, NULL, STORM_THREADS);
    int started = 0;
    for (int i = 0; i < STORM_THREADS; i++)
        started += pthread_create(&threads[i], NULL, storm_thread, (void *)(intptr_t)i) == 0;
    if (!CHECK(started == STORM_THREADS, "pthread_create failed")) {
        finish(); /* the barrier would never open: give up without joining */
        exit(1);
    }
    for (int i = 0; i < STORM_THREADS; i++) pthread_join(threads[i], NULL);
    pthread_barrier_destroy(&storm_start);
    CHECK(strstr(fo_last_error(), "device_type=101") != NULL,
          "after the threads, this thread's error is \"%s\"", fo_last_error());
}

/* ========================================================================
 * Error paths, as tables: each row is one call that must be refused (or, with
 * status OK, a boundary that must be accepted).
 *
 * All calls point into four poisoned buffers: E_OUT and E_OUT2 (outputs),
 * E_IN and E_IN2 (inputs). A refused call must write nothing, so all four
 * must still be fully POISON afterwards.
 * ======================================================================== */

static guarded E_OUT, E_OUT2, E_IN, E_IN2;

/* A marker message no case expects: a case cannot pass on a message left
 * over from an earlier call. */
#define STALE_DEVICE_TYPE -424242
#define STALE_TEXT "-424242"

static void before_case(void) {
    guarded_fill(&E_OUT, POISON);
    guarded_fill(&E_OUT2, POISON);
    guarded_fill(&E_IN, POISON);
    guarded_fill(&E_IN2, POISON);
    fail_with_device_type(STALE_DEVICE_TYPE);
}

static void expect_status(const char *op, const char *why, int got, int want, const char *needle,
                          const char *needle2) {
    const char *msg = fo_last_error();
    if (!CHECK(got == want, "%s, %s: status %d (%s), want %d (%s); message \"%s\"", op, why, got,
               fo_status_string(got), want, fo_status_string(want), msg))
        return;
    if (want == OK) return;
    CHECK(strstr(msg, op) != NULL, "%s, %s: message \"%s\" does not name the op", op, why, msg);
    CHECK(strstr(msg, STALE_TEXT) == NULL, "%s, %s: fo_last_error() not updated", op, why);
    CHECK(!needle || strstr(msg, needle), "%s, %s: message \"%s\" lacks \"%s\"", op, why, msg,
          needle);
    CHECK(!needle2 || strstr(msg, needle2), "%s, %s: message \"%s\" lacks \"%s\"", op, why, msg,
          needle2);
    CHECK(untouched(&E_OUT) && untouched(&E_OUT2) && untouched(&E_IN) && untouched(&E_IN2),
          "%s, %s: the refused call wrote to memory", op, why);
}

/* "name=0x<address>", as the messages print a misaligned address. */
static void address_text(char *buf, size_t size, const char *name, uintptr_t a) {
    snprintf(buf, size, "%s=0x%" PRIxPTR, name, a);
}

#define BIG (INT64_MAX / 8) /* times 4 cols, or as a stride times 2 rows, overflows */

typedef struct relu_forward_case {
    const char *why;
    int status;
    const char *needle, *needle2;
    int device_type;
    uintptr_t y, mask, x;
    int64_t x_row_stride;
    uintptr_t bias;
    int64_t rows, cols;
    int dtype, bias_dtype;
    float scale;
} relu_forward_case;

static void test_errors_relu_forward(void) {
    static const char op[] = "fo_bias_scale_relu_forward";
    section("errors: fo_bias_scale_relu_forward");
    const uintptr_t Y = addr(&E_OUT), M = addr(&E_OUT2), X = addr(&E_IN), B = addr(&E_IN2);
    char y2[48], x1[48], x4[48], b2[48];
    address_text(y2, sizeof y2, "y", Y + 2);
    address_text(x1, sizeof x1, "x", X + 1);
    address_text(x4, sizeof x4, "x", X + 4);
    address_text(b2, sizeof b2, "bias", B + 2);
    const relu_forward_case cases[] = {
        /* why, status, needles, device, y, mask, x, x_row_stride, bias, rows,
         * cols, dtype, bias_dtype, scale */
        {"device_type 7", BAD_DEVICE, "device_type=7", NULL, 7, Y, M, X, 4, B, 2, 4, F32, F32, 1},
        {"device_type -1", BAD_DEVICE, "device_type=-1", NULL, -1, Y, M, X, 4, B, 2, 4, F32, F32,
         1},
        {"negative rows", INVALID, "rows=-3", NULL, CPU, Y, M, X, 4, B, -3, 4, F32, F32, 1},
        {"negative cols", INVALID, "cols=-5", NULL, CPU, Y, M, X, 4, B, 2, -5, F32, F32, 1},
        {"rows x cols overflows", INVALID, "rows=", "overflow", CPU, Y, M, X, 4, B, BIG, 4, F32,
         F32, 1},
        {"dtype code 4", BAD_DTYPE, "dtype=4", NULL, CPU, Y, M, X, 4, B, 2, 4, 4, F32, 1},
        {"dtype code -1", BAD_DTYPE, "dtype=-1", NULL, CPU, Y, M, X, 4, B, 2, 4, -1, F32, 1},
        {"bias_dtype code 42", BAD_DTYPE, "bias_dtype=42", NULL, CPU, Y, M, X, 4, B, 2, 4, F32, 42,
         1},
        /* the bias has x's dtype, or f32 under a half x: nothing else */
        {"f64 x, f32 bias", BAD_DTYPE, "float32", "float64", CPU, Y, M, X, 4, B, 2, 4, F64, F32, 1},
        {"f32 x, f16 bias", BAD_DTYPE, "float16", "float32", CPU, Y, M, X, 4, B, 2, 4, F32, F16, 1},
        {"f32 x, f64 bias", BAD_DTYPE, "float64", "float32", CPU, Y, M, X, 4, B, 2, 4, F32, F64, 1},
        {"f16 x, bf16 bias", BAD_DTYPE, "bfloat16", "float16", CPU, Y, M, X, 4, B, 2, 4, F16, BF16,
         1},
        {"bf16 x, f64 bias", BAD_DTYPE, "float64", "bfloat16", CPU, Y, M, X, 4, B, 2, 4, BF16, F64,
         1},
        {"scale +inf", INVALID, "scale=", "inf", CPU, Y, M, X, 4, B, 2, 4, F32, F32, INFINITY},
        {"scale -inf", INVALID, "scale=", "inf", CPU, Y, M, X, 4, B, 2, 4, F32, F32, -INFINITY},
        {"scale NaN", INVALID, "scale=", "nan", CPU, Y, M, X, 4, B, 2, 4, F32, F32, NAN},
        {"y null", INVALID, "y ", "null", CPU, 0, M, X, 4, B, 2, 4, F32, F32, 1},
        {"x null", INVALID, "x ", "null", CPU, Y, M, 0, 4, B, 2, 4, F32, F32, 1},
        {"y 2 bytes off for f32", INVALID, y2, "align", CPU, Y + 2, M, X, 4, B, 2, 4, F32, F32, 1},
        {"x 1 byte off for f16", INVALID, x1, "align", CPU, Y, M, X + 1, 4, B, 2, 4, F16, F16, 1},
        {"x 4 bytes off for f64", INVALID, x4, "align", CPU, Y, M, X + 4, 4, B, 2, 4, F64, F64, 1},
        {"f32 bias 2 bytes off (fine for the bf16 x)", INVALID, b2, "align", CPU, Y, M, X, 4, B + 2,
         2, 4, BF16, F32, 1},
        {"negative x_row_stride", INVALID, "stride", "-7", CPU, Y, M, X, -7, B, 2, 4, F32, F32, 1},
        {"x_row_stride x rows overflows", INVALID, "stride", "overflow", CPU, Y, M, X, BIG, B, 2, 4,
         F32, F32, 1},
        {"empty, but dtype code 9", BAD_DTYPE, "dtype=9", NULL, CPU, 0, 0, 0, 0, 0, 0, 4, 9, 9, 1},
        /* accepted boundaries */
        {"bf16 x, f32 bias", OK, NULL, NULL, CPU, Y, M, X, 4, B, 2, 4, BF16, F32, 1},
        {"f16 x, f32 bias", OK, NULL, NULL, CPU, Y, M, X, 4, B, 2, 4, F16, F32, 1},
        {"one row: a negative stride is ignored", OK, NULL, NULL, CPU, Y, M, X, -7, B, 1, 4, F32,
         F32, 1},
        {"stride 0 (rows broadcast)", OK, NULL, NULL, CPU, Y, M, X, 0, B, 2, 4, F32, F32, 1},
        {"mask at an odd address (bytes)", OK, NULL, NULL, CPU, Y, M + 1, X, 4, B, 2, 4, F32, F32,
         1},
        {"no bias, no mask", OK, NULL, NULL, CPU, Y, 0, X, 4, 0, 2, 4, F64, F64, -0.0f},
        {"largest finite scale", OK, NULL, NULL, CPU, Y, M, X, 4, B, 2, 4, F32, F32, FLT_MAX},
    };
    for (size_t i = 0; i < COUNT(cases); i++) {
        const relu_forward_case *c = &cases[i];
        before_case();
        /* device_index and stream are ignored on the CPU: pass odd ones */
        int got = relu_forward_call(c->device_type, -3, 12345, c->y, c->mask, c->x, c->x_row_stride,
                                    c->bias, c->rows, c->cols, c->dtype, c->bias_dtype, c->scale);
        expect_status(op, c->why, got, c->status, c->needle, c->needle2);
    }
}

typedef struct relu_backward_case {
    const char *why;
    int status;
    const char *needle, *needle2;
    int device_type;
    uintptr_t dx, dbias, workspace;
    int64_t workspace_bytes;
    uintptr_t dy;
    int64_t dy_row_stride;
    uintptr_t mask;
    int64_t rows, cols;
    int dtype, bias_dtype;
    float scale;
} relu_backward_case;

static void test_errors_relu_backward(void) {
    static const char op[] = "fo_bias_scale_relu_backward";
    static const char query[] = "fo_bias_scale_relu_backward_workspace_bytes";
    section("errors: fo_bias_scale_relu_backward and its workspace query");
    const uintptr_t DX = addr(&E_OUT), DB = addr(&E_OUT2), DY = addr(&E_IN), M = addr(&E_IN2);
    char dx2[48], db1[48], db2[48], dy4[48];
    address_text(dx2, sizeof dx2, "dx", DX + 2);
    address_text(db1, sizeof db1, "dbias", DB + 1);
    address_text(db2, sizeof db2, "dbias", DB + 2);
    address_text(dy4, sizeof dy4, "dy", DY + 4);
    const relu_backward_case cases[] = {
        /* why, status, needles, device, dx, dbias, workspace, workspace_bytes,
         * dy, dy_row_stride, mask, rows, cols, dtype, bias_dtype, scale */
        {"device_type 7", BAD_DEVICE, "device_type=7", NULL, 7, DX, DB, 0, 0, DY, 4, M, 2, 4, F32,
         F32, 1},
        {"negative rows", INVALID, "rows=-3", NULL, CPU, DX, DB, 0, 0, DY, 4, M, -3, 4, F32, F32,
         1},
        {"negative cols", INVALID, "cols=-5", NULL, CPU, DX, DB, 0, 0, DY, 4, M, 2, -5, F32, F32,
         1},
        {"rows x cols overflows", INVALID, "rows=", "overflow", CPU, DX, DB, 0, 0, DY, 4, M, BIG, 4,
         F32, F32, 1},
        {"dtype code 4", BAD_DTYPE, "dtype=4", NULL, CPU, DX, DB, 0, 0, DY, 4, M, 2, 4, 4, F32, 1},
        {"bias_dtype code 42", BAD_DTYPE, "bias_dtype=42", NULL, CPU, DX, DB, 0, 0, DY, 4, M, 2, 4,
         F32, 42, 1},
        {"f64 dy, f32 dbias", BAD_DTYPE, "float32", "float64", CPU, DX, DB, 0, 0, DY, 4, M, 2, 4,
         F64, F32, 1},
        {"f32 dy, bf16 dbias", BAD_DTYPE, "bfloat16", "float32", CPU, DX, DB, 0, 0, DY, 4, M, 2, 4,
         F32, BF16, 1},
        {"bf16 dy, f16 dbias", BAD_DTYPE, "float16", "bfloat16", CPU, DX, DB, 0, 0, DY, 4, M, 2, 4,
         BF16, F16, 1},
        {"scale NaN", INVALID, "scale=", "nan", CPU, DX, DB, 0, 0, DY, 4, M, 2, 4, F32, F32, NAN},
        {"scale +inf", INVALID, "scale=", "inf", CPU, DX, DB, 0, 0, DY, 4, M, 2, 4, F32, F32,
         INFINITY},
        {"dy null", INVALID, "dy ", "null", CPU, DX, DB, 0, 0, 0, 4, M, 2, 4, F32, F32, 1},
        {"mask null", INVALID, "mask ", "null", CPU, DX, DB, 0, 0, DY, 4, 0, 2, 4, F32, F32, 1},
        {"dx 2 bytes off for f32", INVALID, dx2, "align", CPU, DX + 2, DB, 0, 0, DY, 4, M, 2, 4,
         F32, F32, 1},
        {"dbias 1 byte off for bf16", INVALID, db1, "align", CPU, DX, DB + 1, 0, 0, DY, 4, M, 2, 4,
         BF16, BF16, 1},
        {"f32 dbias 2 bytes off (fine for the f16 dy)", INVALID, db2, "align", CPU, DX, DB + 2, 0,
         0, DY, 4, M, 2, 4, F16, F32, 1},
        {"dy 4 bytes off for f64", INVALID, dy4, "align", CPU, DX, DB, 0, 0, DY + 4, 4, M, 2, 4,
         F64, F64, 1},
        {"negative dy_row_stride", INVALID, "stride", "-7", CPU, DX, DB, 0, 0, DY, -7, M, 2, 4, F32,
         F32, 1},
        {"dy_row_stride x rows overflows", INVALID, "stride", "overflow", CPU, DX, DB, 0, 0, DY,
         BIG, M, 2, 4, F32, F32, 1},
        {"empty, but dtype code 9", BAD_DTYPE, "dtype=9", NULL, CPU, 0, 0, 0, 0, 0, 0, 0, 0, 4, 9,
         9, 1},
        /* accepted boundaries */
        {"neither dx nor dbias wanted", OK, NULL, NULL, CPU, 0, 0, 0, 0, DY, 4, M, 2, 4, F32, F32,
         1},
        {"bf16 dy, f32 dbias", OK, NULL, NULL, CPU, DX, DB, 0, 0, DY, 4, M, 2, 4, BF16, F32, 1},
        {"one row: a negative stride is ignored", OK, NULL, NULL, CPU, DX, DB, 0, 0, DY, -7, M, 1,
         4, F32, F32, 1},
        {"mask at an odd address (bytes)", OK, NULL, NULL, CPU, DX, DB, 0, 0, DY, 4, M + 1, 2, 4,
         F32, F32, 1},
        {"the CPU needs no workspace", OK, NULL, NULL, CPU, DX, DB, 0, 0, DY, 4, M, 2, 4, F64, F64,
         1},
    };
    /* *bytes points into E_OUT: a refused query must leave it alone */
    int64_t *BYTES = (int64_t *)(void *)E_OUT.data;
    for (size_t i = 0; i < COUNT(cases); i++) {
        const relu_backward_case *c = &cases[i];
        const fo_bias_scale_relu_backward_args a = relu_backward_args(
            c->device_type, -3, 12345, c->dx, c->dbias, c->workspace, c->workspace_bytes, c->dy,
            c->dy_row_stride, c->mask, c->rows, c->cols, c->dtype, c->bias_dtype, c->scale);
        before_case();
        expect_status(op, c->why, fo_bias_scale_relu_backward(&a), c->status, c->needle,
                      c->needle2);
        /* the workspace query checks the same arguments the same way */
        before_case();
        int got = fo_bias_scale_relu_backward_workspace_bytes(&a, BYTES);
        expect_status(query, c->why, got, c->status, c->needle, c->needle2);
        if (c->status == OK)
            CHECK(got == OK && *BYTES == 0, "%s: the CPU asks for %" PRId64 " bytes", c->why,
                  *BYTES);
    }
    const fo_bias_scale_relu_backward_args good =
        relu_backward_args(CPU, 0, 0, DX, DB, 0, 0, DY, 4, M, 2, 4, F32, F32, 1);
    before_case();
    expect_status(query, "bytes null", fo_bias_scale_relu_backward_workspace_bytes(&good, NULL),
                  INVALID, "bytes ", "null");
    fo_bias_scale_relu_backward_args bad = good;
    bad.device_type = 7;
    before_case();
    expect_status(query, "bytes null and device_type 7",
                  fo_bias_scale_relu_backward_workspace_bytes(&bad, NULL), INVALID, "bytes ",
                  "null");
}

typedef struct workspace_case {
    const char *why;
    int status;
    const char *needle, *needle2;
    int device_type;
    int64_t numel;
    int dtype;
    int64_t *bytes;
} workspace_case;

/* (fo_bias_scale_relu_backward's query: with its call's cases, above.) */
static void test_errors_reduce_sum_workspace_query(void) {
    static const char op[] = "fo_reduce_sum_workspace_bytes";
    section("errors: fo_reduce_sum_workspace_bytes");
    /* *bytes points into E_OUT: a refused query must leave it alone */
    int64_t *BYTES = (int64_t *)(void *)E_OUT.data;
    const uintptr_t OUT = addr(&E_OUT2), X = addr(&E_IN);
    const workspace_case cases[] = {
        /* why, status, needles, device, numel, dtype, bytes */
        {"bytes null", INVALID, "bytes ", "null", CPU, 4, F32, NULL},
        {"bytes null and device_type 7", INVALID, "bytes ", "null", 7, 4, F32, NULL},
        {"device_type 7", BAD_DEVICE, "device_type=7", NULL, 7, 4, F32, BYTES},
        {"negative numel", INVALID, "-5", NULL, CPU, -5, F32, BYTES},
        {"dtype code 4", BAD_DTYPE, "dtype=4", NULL, CPU, 4, 4, BYTES},
        {"dtype code -2", BAD_DTYPE, "dtype=-2", NULL, CPU, 4, -2, BYTES},
        {"CPU: valid", OK, NULL, NULL, CPU, 4, F16, BYTES},
        {"CPU: empty", OK, NULL, NULL, CPU, 0, BF16, BYTES},
    };
    for (size_t i = 0; i < COUNT(cases); i++) {
        const workspace_case *c = &cases[i];
        before_case();
        const fo_reduce_sum_args a =
            reduce_sum_args(c->device_type, -3, 12345, OUT, 0, 0, X, c->numel, c->dtype);
        int got = fo_reduce_sum_workspace_bytes(&a, c->bytes);
        expect_status(op, c->why, got, c->status, c->needle, c->needle2);
        if (c->status == OK)
            CHECK(got == OK && *BYTES == 0, "%s: the CPU asks for %" PRId64 " bytes", c->why,
                  *BYTES);
    }
}

typedef struct square_forward_case {
    const char *why;
    int status;
    const char *needle, *needle2;
    int device_type;
    uintptr_t y, x;
    int64_t x_row_stride, rows, cols;
    int dtype;
} square_forward_case;

static void test_errors_square_forward(void) {
    static const char op[] = "fo_square_forward";
    section("errors: fo_square_forward");
    const uintptr_t Y = addr(&E_OUT), X = addr(&E_IN);
    char y2[48], x1[48], x4[48];
    address_text(y2, sizeof y2, "y", Y + 2);
    address_text(x1, sizeof x1, "x", X + 1);
    address_text(x4, sizeof x4, "x", X + 4);
    const square_forward_case cases[] = {
        /* why, status, needles, device, y, x, x_row_stride, rows, cols, dtype */
        {"device_type 7", BAD_DEVICE, "device_type=7", NULL, 7, Y, X, 4, 2, 4, F32},
        {"device_type -1", BAD_DEVICE, "device_type=-1", NULL, -1, Y, X, 4, 2, 4, F32},
        {"negative rows", INVALID, "rows=-3", NULL, CPU, Y, X, 4, -3, 4, F32},
        {"negative cols", INVALID, "cols=-5", NULL, CPU, Y, X, 4, 2, -5, F32},
        {"rows x cols overflows", INVALID, "rows=", "overflow", CPU, Y, X, 4, BIG, 4, F32},
        {"dtype code 4", BAD_DTYPE, "dtype=4", NULL, CPU, Y, X, 4, 2, 4, 4},
        {"dtype code -1", BAD_DTYPE, "dtype=-1", NULL, CPU, Y, X, 4, 2, 4, -1},
        {"y null", INVALID, "y ", "null", CPU, 0, X, 4, 2, 4, F32},
        {"x null", INVALID, "x ", "null", CPU, Y, 0, 4, 2, 4, F32},
        {"y 2 bytes off for f32", INVALID, y2, "align", CPU, Y + 2, X, 4, 2, 4, F32},
        {"x 1 byte off for bf16", INVALID, x1, "align", CPU, Y, X + 1, 4, 2, 4, BF16},
        {"x 4 bytes off for f64", INVALID, x4, "align", CPU, Y, X + 4, 4, 2, 4, F64},
        {"negative x_row_stride", INVALID, "stride", "-7", CPU, Y, X, -7, 2, 4, F32},
        {"x_row_stride x rows overflows", INVALID, "stride", "overflow", CPU, Y, X, BIG, 2, 4, F32},
        {"empty, but dtype code 9", BAD_DTYPE, "dtype=9", NULL, CPU, 0, 0, 0, 4, 0, 9},
        /* accepted boundaries */
        {"one row: a negative stride is ignored", OK, NULL, NULL, CPU, Y, X, -7, 1, 4, F32},
        {"stride 0 (rows broadcast)", OK, NULL, NULL, CPU, Y, X, 0, 2, 4, F16},
        {"x aligned to its element only", OK, NULL, NULL, CPU, Y + 8, X + 8, 4, 2, 4, F64},
    };
    for (size_t i = 0; i < COUNT(cases); i++) {
        const square_forward_case *c = &cases[i];
        before_case();
        int got = square_forward_call(c->device_type, -3, 12345, c->y, c->x, c->x_row_stride,
                                      c->rows, c->cols, c->dtype);
        expect_status(op, c->why, got, c->status, c->needle, c->needle2);
    }
}

typedef struct square_backward_case {
    const char *why;
    int status;
    const char *needle, *needle2;
    int device_type;
    uintptr_t dx, dy;
    int64_t dy_row_stride;
    uintptr_t x;
    int64_t x_row_stride, rows, cols;
    int dtype;
} square_backward_case;

static void test_errors_square_backward(void) {
    static const char op[] = "fo_square_backward";
    section("errors: fo_square_backward");
    const uintptr_t DX = addr(&E_OUT), DY = addr(&E_IN), X = addr(&E_IN2);
    char dx2[48], dy1[48], x4[48];
    address_text(dx2, sizeof dx2, "dx", DX + 2);
    address_text(dy1, sizeof dy1, "dy", DY + 1);
    address_text(x4, sizeof x4, "x", X + 4);
    const square_backward_case cases[] = {
        /* why, status, needles, device, dx, dy, dy_row_stride, x,
         * x_row_stride, rows, cols, dtype */
        {"device_type 7", BAD_DEVICE, "device_type=7", NULL, 7, DX, DY, 4, X, 4, 2, 4, F32},
        {"negative rows", INVALID, "rows=-3", NULL, CPU, DX, DY, 4, X, 4, -3, 4, F32},
        {"negative cols", INVALID, "cols=-5", NULL, CPU, DX, DY, 4, X, 4, 2, -5, F32},
        {"dtype code 4", BAD_DTYPE, "dtype=4", NULL, CPU, DX, DY, 4, X, 4, 2, 4, 4},
        {"dtype code 1000", BAD_DTYPE, "dtype=1000", NULL, CPU, DX, DY, 4, X, 4, 2, 4, 1000},
        {"dx null", INVALID, "dx ", "null", CPU, 0, DY, 4, X, 4, 2, 4, F32},
        {"dy null", INVALID, "dy ", "null", CPU, DX, 0, 4, X, 4, 2, 4, F32},
        {"x null", INVALID, "x ", "null", CPU, DX, DY, 4, 0, 4, 2, 4, F32},
        {"dx 2 bytes off for f32", INVALID, dx2, "align", CPU, DX + 2, DY, 4, X, 4, 2, 4, F32},
        {"dy 1 byte off for f16", INVALID, dy1, "align", CPU, DX, DY + 1, 4, X, 4, 2, 4, F16},
        {"x 4 bytes off for f64", INVALID, x4, "align", CPU, DX, DY, 4, X + 4, 4, 2, 4, F64},
        {"negative dy_row_stride", INVALID, "dy", "-7", CPU, DX, DY, -7, X, 4, 2, 4, F32},
        {"negative x_row_stride", INVALID, "x row", "-11", CPU, DX, DY, 4, X, -11, 2, 4, F32},
        {"empty, but dtype code 9", BAD_DTYPE, "dtype=9", NULL, CPU, 0, 0, 0, 0, 0, 2, 0, 9},
        /* accepted boundaries */
        {"one row: negative strides are ignored", OK, NULL, NULL, CPU, DX, DY, -7, X, -11, 1, 4,
         F32},
        {"strides 0 (rows broadcast)", OK, NULL, NULL, CPU, DX, DY, 0, X, 0, 2, 4, BF16},
    };
    for (size_t i = 0; i < COUNT(cases); i++) {
        const square_backward_case *c = &cases[i];
        before_case();
        int got = square_backward_call(c->device_type, -3, 12345, c->dx, c->dy, c->dy_row_stride,
                                       c->x, c->x_row_stride, c->rows, c->cols, c->dtype);
        expect_status(op, c->why, got, c->status, c->needle, c->needle2);
    }
}

typedef struct reduce_sum_case {
    const char *why;
    int status;
    const char *needle, *needle2;
    int device_type;
    uintptr_t out, workspace;
    int64_t workspace_bytes;
    uintptr_t x;
    int64_t numel;
    int dtype;
} reduce_sum_case;

static void test_errors_reduce_sum(void) {
    static const char op[] = "fo_reduce_sum";
    section("errors: fo_reduce_sum");
    const uintptr_t OUT = addr(&E_OUT), X = addr(&E_IN);
    char out2[48], x1[48], x4[48];
    address_text(out2, sizeof out2, "out", OUT + 2);
    address_text(x1, sizeof x1, "x", X + 1);
    address_text(x4, sizeof x4, "x", X + 4);
    const reduce_sum_case cases[] = {
        /* why, status, needles, device, out, workspace, workspace_bytes, x,
         * numel, dtype */
        {"device_type 7", BAD_DEVICE, "device_type=7", NULL, 7, OUT, 0, 0, X, 8, F32},
        {"negative numel", INVALID, "-9", NULL, CPU, OUT, 0, 0, X, -9, F32},
        {"numel overflows byte offsets", INVALID, "overflow", NULL, CPU, OUT, 0, 0, X, INT64_MAX,
         F32},
        {"dtype code 4", BAD_DTYPE, "dtype=4", NULL, CPU, OUT, 0, 0, X, 8, 4},
        {"dtype code -1", BAD_DTYPE, "dtype=-1", NULL, CPU, OUT, 0, 0, X, 8, -1},
        {"out null", INVALID, "out ", "null", CPU, 0, 0, 0, X, 8, F32},
        /* the sum of nothing is written too: out is never optional */
        {"out null, numel 0", INVALID, "out ", "null", CPU, 0, 0, 0, 0, 0, F32},
        {"x null", INVALID, "x ", "null", CPU, OUT, 0, 0, 0, 8, F32},
        {"out 2 bytes off for f32", INVALID, out2, "align", CPU, OUT + 2, 0, 0, X, 8, F32},
        {"x 1 byte off for bf16", INVALID, x1, "align", CPU, OUT, 0, 0, X + 1, 8, BF16},
        {"x 4 bytes off for f64", INVALID, x4, "align", CPU, OUT, 0, 0, X + 4, 8, F64},
        /* accepted boundaries */
        {"x null, numel 0", OK, NULL, NULL, CPU, OUT, 0, 0, 0, 0, F16},
        {"x aligned to its element only", OK, NULL, NULL, CPU, OUT, 0, 0, X + 2, 8, F16},
    };
    for (size_t i = 0; i < COUNT(cases); i++) {
        const reduce_sum_case *c = &cases[i];
        before_case();
        int got = reduce_sum_call(c->device_type, -3, 12345, c->out, c->workspace,
                                  c->workspace_bytes, c->x, c->numel, c->dtype);
        expect_status(op, c->why, got, c->status, c->needle, c->needle2);
    }
}

/* ========================================================================
 * GeGLU: errors and values (fo_geglu_forward, fo_geglu_backward)
 * ======================================================================== */

static fo_geglu_forward_args geglu_forward_base(void) {
    fo_geglu_forward_args a = {.struct_size = sizeof a,
                               .device_type = CPU,
                               .device_index = -3,
                               .stream = 12345,
                               .y = addr(&E_OUT),
                               .gate = addr(&E_IN),
                               .gate_row_stride = 4,
                               .up = addr(&E_IN2),
                               .up_row_stride = 4,
                               .rows = 2,
                               .cols = 4,
                               .dtype = F32,
                               .approximate = FO_GELU_TANH};
    return a;
}

static fo_geglu_backward_args geglu_backward_base(void) {
    fo_geglu_backward_args a = {.struct_size = sizeof a,
                                .device_type = CPU,
                                .device_index = -3,
                                .stream = 12345,
                                .dgate = addr(&E_OUT),
                                .dup = addr(&E_OUT2),
                                .dy = addr(&E_IN),
                                .dy_row_stride = 4,
                                .gate = addr(&E_IN),
                                .gate_row_stride = 4,
                                .up = addr(&E_IN2),
                                .up_row_stride = 4,
                                .rows = 2,
                                .cols = 4,
                                .dtype = F32,
                                .approximate = FO_GELU_NONE};
    return a;
}

/* One case of an error table: `var` is the valid struct base() gives, then
 * changed by `edit`. */
#define STRUCT_CASE(var, op, base, call, why, status, needle, needle2, edit) \
    do {                                                                     \
        before_case();                                                       \
        var = base();                                                        \
        edit;                                                                \
        expect_status(op, why, call(&var), status, needle, needle2);         \
    } while (0)

static void test_errors_geglu(void) {
    section("errors: fo_geglu_forward, fo_geglu_backward");
    static const char fwd[] = "fo_geglu_forward", bwd[] = "fo_geglu_backward";
    char y2[48], up4[48];
    address_text(y2, sizeof y2, "y", addr(&E_OUT) + 2);
    address_text(up4, sizeof up4, "up", addr(&E_IN2) + 4);
    fo_geglu_forward_args a;
#define FWD(why, status, needle, needle2, edit) \
    STRUCT_CASE(a, fwd, geglu_forward_base, fo_geglu_forward, why, status, needle, needle2, edit)
    FWD("the base case", OK, NULL, NULL, (void)0);
    FWD("device_type 7", BAD_DEVICE, "device_type=7", NULL, a.device_type = 7);
    FWD("negative rows", INVALID, "rows=-3", NULL, a.rows = -3);
    FWD("rows x cols overflows", INVALID, "rows=", "overflow", a.rows = BIG);
    FWD("dtype code 4", BAD_DTYPE, "dtype=4", NULL, a.dtype = 4);
    FWD("approximate 2", INVALID, "approximate=2", "FO_GELU_TANH", a.approximate = 2);
    FWD("approximate -1", INVALID, "approximate=-1", NULL, a.approximate = -1);
    FWD("y null", INVALID, "y ", "null", a.y = 0);
    FWD("gate null", INVALID, "gate ", "null", a.gate = 0);
    FWD("y 2 bytes off for f32", INVALID, y2, "align", a.y += 2);
    FWD("up 4 bytes off for f64", INVALID, up4, "align", (a.up += 4, a.dtype = F64));
    FWD("negative gate_row_stride", INVALID, "gate row stride -1", NULL, a.gate_row_stride = -1);
    FWD("up_row_stride x rows overflows", INVALID, "up row stride", "overflow",
        a.up_row_stride = BIG);
    FWD("struct_size 8", INVALID, "struct_size=8 ", "sizeof(fo_geglu_forward_args)",
        a.struct_size = 8);
    FWD("stride 0 (rows broadcast)", OK, NULL, NULL, a.gate_row_stride = a.up_row_stride = 0);
    FWD("empty: null addresses", OK, NULL, NULL, (a.rows = 0, a.y = a.gate = a.up = 0));
    FWD("empty, but approximate 5", INVALID, "approximate=5", NULL,
        (a.rows = 0, a.approximate = 5));
#undef FWD
    fo_geglu_backward_args b;
#define BWD(why, status, needle, needle2, edit) \
    STRUCT_CASE(b, bwd, geglu_backward_base, fo_geglu_backward, why, status, needle, needle2, edit)
    BWD("the base case", OK, NULL, NULL, (void)0);
    BWD("device_type -1", BAD_DEVICE, "device_type=-1", NULL, b.device_type = -1);
    BWD("dtype code 9", BAD_DTYPE, "dtype=9", NULL, b.dtype = 9);
    BWD("approximate 3", INVALID, "approximate=3", NULL, b.approximate = 3);
    BWD("dy null", INVALID, "dy ", "null", b.dy = 0);
    BWD("dup 2 bytes off", INVALID, "dup=0x", "align", b.dup += 2);
    BWD("negative dy_row_stride", INVALID, "dy row stride -5", NULL, b.dy_row_stride = -5);
    BWD("struct_size sizeof + 8", INVALID, "struct_size=", NULL, b.struct_size += 8);
    BWD("no gradient wanted", OK, NULL, NULL, b.dgate = b.dup = 0);
    BWD("dgate only", OK, NULL, NULL, b.dup = 0);
    BWD("dy stride 0 (an expanded gradient)", OK, NULL, NULL, b.dy_row_stride = 0);
#undef BWD
}

/* The library's formulas, written here from torch's definitions: the erf
 * form as 1 + erf (not the library's erfc), with its gradient. */
static double gelu_reference(double g, int approximate, double *grad) {
    if (approximate == FO_GELU_TANH) {
        const double k = sqrt(2.0 / M_PI), inner = k * (g + 0.044715 * g * g * g), t = tanh(inner);
        *grad = 0.5 * (1.0 + t) + 0.5 * g * (1.0 - t * t) * k * (1.0 + 3.0 * 0.044715 * g * g);
        return 0.5 * g * (1.0 + t);
    }
    const double cdf = 0.5 * (1.0 + erf(g / sqrt(2.0)));
    *grad = cdf + g * exp(-0.5 * g * g) / sqrt(2.0 * M_PI);
    return g * cdf;
}

/* |error| allowed in an element of `dtype` near `want`: its rounding (an
 * ulp, float16's subnormal one too), and the difference of two double
 * evaluations of a transcendental formula. */
static double elementwise_tol(double want, int dtype) {
    const double rounding = dtype == F64   ? 0x1p-50
                            : dtype == F32 ? 0x1p-23
                            : dtype == F16 ? 0x1p-10
                                           : 0x1p-7;
    return rounding * fabs(want) + (dtype == F16 ? 0x1p-24 : 0.0) + 1e-14;
}

static void test_geglu_values(void) {
    section("GeGLU values against a double reference");
    static const struct {
        int64_t rows, cols, stride;
        size_t offset;
    } shapes[] = {{1, 1, 1, 0}, {3, 7, 9, 1}, {2, 300, 300, 0}, {4, 16, 0, 0}, {5, 513, 520, 1}};
    uint64_t rng = 77;
    for (size_t d = 0; d < COUNT(ALL_DTYPES); d++)
        for (int approximate = 0; approximate < 2; approximate++)
            for (size_t s = 0; s < COUNT(shapes); s++) {
                const int dt = ALL_DTYPES[d];
                const int64_t rows = shapes[s].rows, cols = shapes[s].cols;
                const int64_t stride = shapes[s].stride, n = rows * cols;
                const int64_t rs = rows > 1 ? stride : 0;
                char what[128];
                snprintf(what, sizeof what, "geglu %s %s %" PRId64 " x %" PRId64 " stride %" PRId64,
                         dtype_label(dt), approximate ? "tanh" : "erf", rows, cols, stride);
                guarded gate = random_input(&rng, dt, rows, cols, stride, shapes[s].offset, 0);
                guarded up = random_input(&rng, dt, rows, cols, stride, shapes[s].offset, 0);
                guarded dy = random_input(&rng, dt, rows, cols, stride, shapes[s].offset, 0);
                guarded first = new_operand(dt, n, shapes[s].offset);
                guarded second = new_operand(dt, n, shapes[s].offset);
                double *want = malloc(sizeof(double) * (size_t)n),
                       *want2 = malloc(sizeof(double) * (size_t)n);
                double *tol = malloc(sizeof(double) * (size_t)n),
                       *tol2 = malloc(sizeof(double) * (size_t)n);
                for (int64_t r = 0; r < rows; r++)
                    for (int64_t c = 0; c < cols; c++) {
                        const int64_t i = r * cols + c;
                        const double g = get(gate.data, r * rs + c, dt),
                                     u = get(up.data, r * rs + c, dt);
                        const double d = get(dy.data, r * rs + c, dt);
                        double grad;
                        const double value = gelu_reference(g, approximate, &grad);
                        want[i] = value * u;
                        tol[i] = elementwise_tol(want[i], dt);
                        /* backward: first dgate, second dup */
                        want2[i] = d * value;
                        tol2[i] = elementwise_tol(want2[i], dt);
                    }
                fo_geglu_forward_args f = {.struct_size = sizeof f,
                                           .device_type = CPU,
                                           .y = addr(&first),
                                           .gate = addr(&gate),
                                           .gate_row_stride = stride,
                                           .up = addr(&up),
                                           .up_row_stride = stride,
                                           .rows = rows,
                                           .cols = cols,
                                           .dtype = dt,
                                           .approximate = approximate};
                int st = fo_geglu_forward(&f);
                if (CHECK(st == OK, "%s forward: status %d (%s)", what, st, fo_last_error()))
                    check_output(what, &first, want, tol, n, dt);
                guarded_fill(&first, POISON);
                fo_geglu_backward_args b = {.struct_size = sizeof b,
                                            .device_type = CPU,
                                            .dgate = addr(&first),
                                            .dup = addr(&second),
                                            .dy = addr(&dy),
                                            .dy_row_stride = stride,
                                            .gate = addr(&gate),
                                            .gate_row_stride = stride,
                                            .up = addr(&up),
                                            .up_row_stride = stride,
                                            .rows = rows,
                                            .cols = cols,
                                            .dtype = dt,
                                            .approximate = approximate};
                st = fo_geglu_backward(&b);
                if (CHECK(st == OK, "%s backward: status %d (%s)", what, st, fo_last_error())) {
                    for (int64_t r = 0; r < rows; r++)
                        for (int64_t c = 0; c < cols; c++) {
                            const int64_t i = r * cols + c;
                            double grad;
                            gelu_reference(get(gate.data, r * rs + c, dt), approximate, &grad);
                            want[i] =
                                get(dy.data, r * rs + c, dt) * get(up.data, r * rs + c, dt) * grad;
                            tol[i] = elementwise_tol(want[i], dt);
                        }
                    check_output(what, &first, want, tol, n, dt);
                    check_output(what, &second, want2, tol2, n, dt);
                }
                CHECK(guards_intact(&gate) && guards_intact(&up) && guards_intact(&dy),
                      "%s: an input was written", what);
                free(want), free(want2), free(tol), free(tol2);
                guarded_free(&gate), guarded_free(&up), guarded_free(&dy);
                guarded_free(&first), guarded_free(&second);
            }
}

/* ========================================================================
 * Clamped SwiGLU: errors and values (fo_clamped_swiglu_forward, _backward)
 * ======================================================================== */

static fo_clamped_swiglu_args clamped_swiglu_base(void) {
    fo_clamped_swiglu_args a = {.struct_size = sizeof a,
                                .device_type = CPU,
                                .device_index = -3,
                                .stream = 12345,
                                .y = addr(&E_OUT),
                                .dgate_up = addr(&E_OUT2),
                                .dy = addr(&E_IN2),
                                .dy_row_stride = 4,
                                .gate_up = addr(&E_IN),
                                .gate_up_row_stride = 8,
                                .rows = 2,
                                .cols = 4,
                                .dtype = F32,
                                .layout = FO_GLU_INTERLEAVED,
                                .alpha = 1.702,
                                .limit = 7.0,
                                .grad_at_limit = 0};
    return a;
}

static void test_errors_clamped_swiglu(void) {
    section("errors: fo_clamped_swiglu_forward, fo_clamped_swiglu_backward");
    static const char fwd[] = "fo_clamped_swiglu_forward", bwd[] = "fo_clamped_swiglu_backward";
    char y2[48];
    address_text(y2, sizeof y2, "y", addr(&E_OUT) + 2);
    fo_clamped_swiglu_args a;
#define FWD(why, status, needle, needle2, edit)                                              \
    STRUCT_CASE(a, fwd, clamped_swiglu_base, fo_clamped_swiglu_forward, why, status, needle, \
                needle2, edit)
    FWD("the base case", OK, NULL, NULL, (void)0);
    FWD("the halves layout", OK, NULL, NULL, a.layout = FO_GLU_HALVES);
    FWD("device_type 7", BAD_DEVICE, "device_type=7", NULL, a.device_type = 7);
    FWD("negative cols", INVALID, "cols=-4", NULL, a.cols = -4);
    FWD("dtype code 4", BAD_DTYPE, "dtype=4", NULL, a.dtype = 4);
    FWD("layout 2", INVALID, "layout=2", "FO_GLU_INTERLEAVED", a.layout = 2);
    FWD("alpha NaN", INVALID, "alpha=nan", NULL, a.alpha = NAN);
    FWD("alpha inf", INVALID, "alpha=inf", NULL, a.alpha = INFINITY);
    FWD("limit 0", INVALID, "limit=0", "positive", a.limit = 0.0);
    FWD("limit NaN", INVALID, "limit=nan", NULL, a.limit = NAN);
    FWD("limit inf (no clamp)", OK, NULL, NULL, a.limit = INFINITY);
    FWD("y null", INVALID, "y ", "null", a.y = 0);
    FWD("gate_up null", INVALID, "gate_up ", "null", a.gate_up = 0);
    FWD("y 2 bytes off for f32", INVALID, y2, "align", a.y += 2);
    FWD("negative gate_up_row_stride", INVALID, "gate_up row stride -1", NULL,
        a.gate_up_row_stride = -1);
    FWD("struct_size 8", INVALID, "struct_size=8 ", "sizeof(fo_clamped_swiglu_args)",
        a.struct_size = 8);
    FWD("backward's fields are not read", OK, NULL, NULL, a.dy = a.dgate_up = 0);
    FWD("empty: null addresses", OK, NULL, NULL, (a.rows = 0, a.y = a.gate_up = 0));
#undef FWD
#define BWD(why, status, needle, needle2, edit)                                               \
    STRUCT_CASE(a, bwd, clamped_swiglu_base, fo_clamped_swiglu_backward, why, status, needle, \
                needle2, edit)
    BWD("the base case", OK, NULL, NULL, (void)0);
    BWD("dy null", INVALID, "dy ", "null", a.dy = 0);
    BWD("dgate_up null", INVALID, "dgate_up ", "null", a.dgate_up = 0);
    BWD("dgate_up 2 bytes off", INVALID, "dgate_up=0x", "align", a.dgate_up += 2);
    BWD("negative dy_row_stride", INVALID, "dy row stride -5", NULL, a.dy_row_stride = -5);
    BWD("limit -1", INVALID, "limit=-1", NULL, a.limit = -1.0);
    BWD("forward's y is not read", OK, NULL, NULL, a.y = 0);
    BWD("dy stride 0 (an expanded gradient)", OK, NULL, NULL, a.dy_row_stride = 0);
#undef BWD
}

/* ========================================================================
 * DyT: errors (fo_dyt_forward, fo_dyt_backward_workspace_bytes, fo_dyt_backward)
 * ======================================================================== */

static fo_dyt_args dyt_base(void) {
    fo_dyt_args a = {.struct_size = sizeof a,
                     .device_type = CPU,
                     .device_index = -3,
                     .stream = 12345,
                     .y = addr(&E_OUT),
                     .dx = addr(&E_OUT),
                     .dweight = addr(&E_OUT2),
                     .dy = addr(&E_IN2),
                     .dy_row_stride = 4,
                     .x = addr(&E_IN),
                     .x_row_stride = 8,
                     .alpha = addr(&E_IN2),
                     .weight = addr(&E_IN2) + 16,
                     .bias = addr(&E_IN2) + 32,
                     .rows = 2,
                     .cols = 4,
                     .dtype = F32,
                     .param_dtype = F32};
    return a;
}

static int dyt_query(const fo_dyt_args *a) {
    int64_t bytes = -1;
    return fo_dyt_backward_workspace_bytes(a, &bytes);
}

static void test_errors_dyt(void) {
    section("errors: fo_dyt_forward, fo_dyt_backward_workspace_bytes, fo_dyt_backward");
    static const char fwd[] = "fo_dyt_forward", bwd[] = "fo_dyt_backward",
                      query[] = "fo_dyt_backward_workspace_bytes";
    char weight2[48];
    address_text(weight2, sizeof weight2, "weight", addr(&E_IN2) + 18);
    fo_dyt_args a;
#define FWD(why, status, needle, needle2, edit) \
    STRUCT_CASE(a, fwd, dyt_base, fo_dyt_forward, why, status, needle, needle2, edit)
    FWD("the base case", OK, NULL, NULL, (void)0);
    FWD("no bias", OK, NULL, NULL, a.bias = 0);
    FWD("device_type 7", BAD_DEVICE, "device_type=7", NULL, a.device_type = 7);
    FWD("negative rows", INVALID, "rows=-3", NULL, a.rows = -3);
    FWD("dtype code 4", BAD_DTYPE, "dtype=4", NULL, a.dtype = 4);
    FWD("param_dtype code 9", BAD_DTYPE, "param_dtype=9", NULL, a.param_dtype = 9);
    FWD("f64 params beside f32 x", BAD_DTYPE, "param_dtype float64", "float32 when",
        a.param_dtype = F64);
    FWD("f16 x, f32 params", OK, NULL, NULL, a.dtype = F16);
    FWD("y null", INVALID, "y ", "null", a.y = 0);
    FWD("x null", INVALID, "x ", "null", a.x = 0);
    FWD("alpha null", INVALID, "alpha ", "null", a.alpha = 0);
    FWD("weight null", INVALID, "weight ", "null", a.weight = 0);
    FWD("weight 2 bytes off", INVALID, weight2, "align", a.weight += 2);
    FWD("negative x_row_stride", INVALID, "x row stride -1", NULL, a.x_row_stride = -1);
    FWD("struct_size 8", INVALID, "struct_size=8 ", "sizeof(fo_dyt_args)", a.struct_size = 8);
    FWD("struct_size past the library's", INVALID, "struct_size=", NULL, a.struct_size += 8);
    FWD("backward's fields are not read", OK, NULL, NULL, a.dy = a.dx = a.dweight = 0);
    FWD("empty: null addresses", OK, NULL, NULL, (a.rows = 0, a.y = a.x = 0));
#undef FWD
    before_case();
    expect_status(fwd, "a NULL struct", fo_dyt_forward(NULL), INVALID, "null pointer",
                  "fo_dyt_args");
#define BWD(why, status, needle, needle2, edit) \
    STRUCT_CASE(a, bwd, dyt_base, fo_dyt_backward, why, status, needle, needle2, edit)
    BWD("the base case", OK, NULL, NULL, (void)0);
    BWD("dx alone", OK, NULL, NULL, a.dweight = 0);
    BWD("dy null", INVALID, "dy ", "null", a.dy = 0);
    BWD("dbias 2 bytes off", INVALID, "dbias=0x", "align", a.dbias = addr(&E_OUT2) + 2);
    BWD("dalpha without its workspace", TOO_SMALL, "workspace_bytes=0", "8 are needed",
        a.dalpha = addr(&E_OUT2) + 32);
    BWD("negative workspace_bytes", INVALID, "workspace_bytes=-1", NULL, a.workspace_bytes = -1);
    BWD("negative dy_row_stride", INVALID, "dy row stride -5", NULL, a.dy_row_stride = -5);
    BWD("forward's y is not read", OK, NULL, NULL, a.y = 0);
    BWD("dy stride 0 (an expanded gradient)", OK, NULL, NULL, a.dy_row_stride = 0);
#undef BWD
#define QUERY(why, status, needle, needle2, edit) \
    STRUCT_CASE(a, query, dyt_base, dyt_query, why, status, needle, needle2, edit)
    QUERY("the base case", OK, NULL, NULL, (void)0);
    QUERY("dy null", INVALID, "dy ", "null", a.dy = 0);
    QUERY("struct_size 8", INVALID, "struct_size=8 ", NULL, a.struct_size = 8);
#undef QUERY
    before_case();
    int64_t bytes = -1;
    a = dyt_base();
    a.dalpha = addr(&E_OUT2) + 32;
    CHECK(fo_dyt_backward_workspace_bytes(&a, &bytes) == OK && bytes == 8,
          "fo_dyt_backward_workspace_bytes: %lld bytes on the CPU with dalpha, want 8 (a double a "
          "column chunk)",
          (long long)bytes);
    expect_status(query, "a NULL bytes pointer", fo_dyt_backward_workspace_bytes(&a, NULL), INVALID,
                  NULL, NULL);
}

/* ========================================================================
 * FP8 quantization: errors (fo_quantize_fp8, fo_quantize_fp8_workspace_bytes)
 * ======================================================================== */

static fo_quantize_fp8_args quantize_fp8_base(void) {
    fo_quantize_fp8_args a = {.struct_size = sizeof a,
                              .device_type = CPU,
                              .device_index = -3,
                              .stream = 12345,
                              .y = addr(&E_OUT),
                              .scale = addr(&E_OUT2),
                              .workspace = addr(&E_OUT2) + 32,
                              .workspace_bytes = 8,
                              .x = addr(&E_IN),
                              .x_row_stride = 8,
                              .rows = 2,
                              .cols = 4,
                              .dtype = F32,
                              .fp8_dtype = FO_FP8_E4M3,
                              .recipe = FO_FP8_TENSORWISE};
    return a;
}

static int quantize_fp8_query(const fo_quantize_fp8_args *a) {
    int64_t bytes = -1;
    return fo_quantize_fp8_workspace_bytes(a, &bytes);
}

static void test_errors_quantize_fp8(void) {
    section("errors: fo_quantize_fp8, fo_quantize_fp8_workspace_bytes");
    static const char op[] = "fo_quantize_fp8", query[] = "fo_quantize_fp8_workspace_bytes";
    fo_quantize_fp8_args a;
#define CALL(why, status, needle, needle2, edit) \
    STRUCT_CASE(a, op, quantize_fp8_base, fo_quantize_fp8, why, status, needle, needle2, edit)
    CALL("the base case", OK, NULL, NULL, (void)0);
    CALL("rowwise needs no workspace", OK, NULL, NULL,
         (a.recipe = FO_FP8_ROWWISE, a.workspace = 0, a.workspace_bytes = 0));
    CALL("e5m2", OK, NULL, NULL, a.fp8_dtype = FO_FP8_E5M2);
    CALL("the transposed copy alone", OK, NULL, NULL, (a.y_t = a.y, a.y = 0));
    CALL("device_type 7", BAD_DEVICE, "device_type=7", NULL, a.device_type = 7);
    CALL("negative cols", INVALID, "cols=-4", NULL, a.cols = -4);
    CALL("rows 2^62 with no columns", INVALID, "rows=4611686018427387904", NULL,
         (a.rows = (int64_t)1 << 62, a.cols = 0));
    CALL("dtype code 4", BAD_DTYPE, "dtype=4", NULL, a.dtype = 4);
    CALL("fp8_dtype code 2", BAD_DTYPE, "fp8_dtype=2", "e5m2=1", a.fp8_dtype = 2);
    CALL("recipe code 5", INVALID, "recipe=5", "rowwise=1", a.recipe = 5);
    CALL("y_t with rowwise", INVALID, "y_t", "recipe=1", (a.recipe = FO_FP8_ROWWISE, a.y_t = a.y));
    CALL("neither y nor y_t", INVALID, "y and y_t are both null", NULL, a.y = 0);
    CALL("x null", INVALID, "x ", "null", a.x = 0);
    CALL("scale null", INVALID, "scale ", "null", a.scale = 0);
    CALL("scale 2 bytes off", INVALID, "scale=0x", "align", a.scale += 2);
    CALL("amax 1 byte off", INVALID, "amax=0x", "align", a.amax = addr(&E_OUT2) + 17);
    CALL("workspace too small", TOO_SMALL, "workspace_bytes=4", "8 are needed",
         a.workspace_bytes = 4);
    CALL("workspace 2 bytes off", INVALID, "workspace=0x", "aligned to 4",
         (a.workspace += 2, a.workspace_bytes = 8));
    CALL("negative x_row_stride", INVALID, "x row stride -1", NULL, a.x_row_stride = -1);
    CALL("reserved 1", INVALID, "reserved=1", NULL, a.reserved = 1);
    CALL("struct_size 8", INVALID, "struct_size=8 ", "sizeof(fo_quantize_fp8_args)",
         a.struct_size = 8);
    CALL("struct_size past the library's", INVALID, "struct_size=", NULL, a.struct_size += 8);
    CALL("empty: null x and y", OK, NULL, NULL, (a.rows = 0, a.y = a.x = 0));
#undef CALL
    before_case();
    expect_status(op, "a NULL struct", fo_quantize_fp8(NULL), INVALID, "null pointer",
                  "fo_quantize_fp8_args");
#define QUERY(why, status, needle, needle2, edit) \
    STRUCT_CASE(a, query, quantize_fp8_base, quantize_fp8_query, why, status, needle, needle2, edit)
    QUERY("the base case", OK, NULL, NULL, (void)0);
    QUERY("recipe code 5", INVALID, "recipe=5", NULL, a.recipe = 5);
#undef QUERY
    before_case();
    int64_t bytes = -1;
    a = quantize_fp8_base();
    CHECK(
        fo_quantize_fp8_workspace_bytes(&a, &bytes) == OK && bytes == 8,
        "fo_quantize_fp8_workspace_bytes: %lld bytes on the CPU for 2 rows, want 8 (a float a row)",
        (long long)bytes);
    expect_status(query, "a NULL bytes pointer", fo_quantize_fp8_workspace_bytes(&a, NULL), INVALID,
                  NULL, NULL);
}

/* An FP8 output (fo_fp8_out) of SwiGLU: the errors the outputs' checks
 * name; the values are the Python tests' (tests/test_gate_fp8.py). */
static fo_swiglu_forward_args swiglu_fp8_base(void) {
    fo_swiglu_forward_args a = {.struct_size = sizeof a,
                                .device_type = CPU,
                                .gate = addr(&E_IN),
                                .gate_row_stride = 4,
                                .up = addr(&E_IN2),
                                .up_row_stride = 4,
                                .rows = 2,
                                .cols = 4,
                                .dtype = F32,
                                .fp8 = {.y = addr(&E_OUT),
                                        .scale = addr(&E_OUT2),
                                        .amax = addr(&E_OUT2) + 16,
                                        .fp8_dtype = FO_FP8_E4M3,
                                        .recipe = FO_FP8_TENSORWISE}};
    return a;
}

static void test_errors_swiglu_fp8(void) {
    section("errors: fo_swiglu_forward's FP8 output");
    static const char op[] = "fo_swiglu_forward";
    fo_swiglu_forward_args a;
#define CALL(why, status, needle, needle2, edit) \
    STRUCT_CASE(a, op, swiglu_fp8_base, fo_swiglu_forward, why, status, needle, needle2, edit)
    CALL("the base case", OK, NULL, NULL, (void)0);
    CALL("rowwise", OK, NULL, NULL, (a.fp8.recipe = FO_FP8_ROWWISE, a.fp8.amax = 0));
    CALL("y beside the FP8 output", INVALID, "y=0x", "y must be 0", a.y = addr(&E_OUT2) + 64);
    CALL("fp8_dtype code 3", BAD_DTYPE, "fp8.fp8_dtype=3", NULL, a.fp8.fp8_dtype = 3);
    CALL("recipe code 2", INVALID, "fp8.recipe=2", NULL, a.fp8.recipe = 2);
    CALL("y_t with rowwise", INVALID, "fp8.y_t", "recipe=0",
         (a.fp8.recipe = FO_FP8_ROWWISE, a.fp8.y_t = a.fp8.y, a.fp8.y = 0));
    CALL("tensorwise without amax", INVALID, "fp8.amax", "null", a.fp8.amax = 0);
    CALL("scale 2 bytes off", INVALID, "fp8.scale=0x", "align", a.fp8.scale += 2);
#undef CALL
}

/* The norms' FP8 output: its checks, and the workspace the CPU asks for
 * (y in float32, 2 x 4: 32 bytes, then a float for each of the 2 row groups). */
static fo_norm_forward_args norm_fp8_base(void) {
    fo_norm_forward_args a = {.struct_size = sizeof a,
                              .device_type = CPU,
                              .x = addr(&E_IN),
                              .x_row_stride = 4,
                              .param_dtype = F32,
                              .rows = 2,
                              .cols = 4,
                              .dtype = F32,
                              .kind = FO_NORM_LAYER,
                              .eps = 1e-5,
                              .fp8 = {.y = addr(&E_OUT),
                                      .scale = addr(&E_OUT2),
                                      .amax = addr(&E_OUT2) + 16,
                                      .fp8_dtype = FO_FP8_E4M3,
                                      .recipe = FO_FP8_TENSORWISE},
                              .workspace = addr(&E_OUT) + 64,
                              .workspace_bytes = 40};
    return a;
}

static int norm_fp8_query(const fo_norm_forward_args *a) {
    int64_t bytes;
    return fo_norm_forward_workspace_bytes(a, &bytes);
}

static void test_errors_norm_fp8(void) {
    section("errors: fo_norm_forward's FP8 output, fo_norm_forward_workspace_bytes");
    static const char op[] = "fo_norm_forward", query[] = "fo_norm_forward_workspace_bytes";
    fo_norm_forward_args a;
#define CALL(why, status, needle, needle2, edit) \
    STRUCT_CASE(a, op, norm_fp8_base, fo_norm_forward, why, status, needle, needle2, edit)
    CALL("the base case", OK, NULL, NULL, (void)0);
    CALL("rowwise", OK, NULL, NULL, (a.fp8.recipe = FO_FP8_ROWWISE, a.fp8.amax = 0));
    CALL("y beside the FP8 output", INVALID, "y=0x", "y must be 0", a.y = addr(&E_OUT2) + 64);
    CALL("recipe code 2", INVALID, "fp8.recipe=2", NULL, a.fp8.recipe = 2);
    CALL("e5m2 (an activation is e4m3)", BAD_DTYPE, "fp8.fp8_dtype=1", "e4m3",
         a.fp8.fp8_dtype = FO_FP8_E5M2);
    CALL("float64 in", BAD_DTYPE, "dtype float64", "FP8", (a.dtype = F64, a.param_dtype = F64));
    CALL("tensorwise without amax", INVALID, "fp8.amax", "null", a.fp8.amax = 0);
    CALL("a workspace too small", TOO_SMALL, "workspace_bytes=39", "40", a.workspace_bytes = 39);
    CALL("a workspace 4 bytes off", INVALID, "workspace=0x", "8-byte aligned",
         (a.workspace += 4, a.workspace_bytes = 40));
#undef CALL
#define CALL(why, status, needle, needle2, edit) \
    STRUCT_CASE(a, query, norm_fp8_base, norm_fp8_query, why, status, needle, needle2, edit)
    CALL("recipe code 2", INVALID, "fp8.recipe=2", NULL, a.fp8.recipe = 2);
#undef CALL
    int64_t bytes = -1;
    a = norm_fp8_base();
    CHECK(fo_norm_forward_workspace_bytes(&a, &bytes) == OK && bytes == 40,
          "%s: %lld bytes on the CPU for 2 x 4 float32 tensorwise, want 40", query,
          (long long)bytes);
    a.fp8 = (fo_fp8_out){0};
    a.y = addr(&E_OUT);
    CHECK(fo_norm_forward_workspace_bytes(&a, &bytes) == OK && bytes == 0,
          "%s: %lld bytes without fp8, want 0", query, (long long)bytes);
}

/* gpt-oss's _apply_gate in double, with its gradients as torch.clamp gives
 * them (passing at the bounds or not, as `closed` says). */
static double clamped_swiglu_reference(double gate, double up, double alpha, double limit,
                                       int closed, double *dgate, double *dup) {
    const double g = gate > limit ? limit : gate;
    const double u = up > limit ? limit : up < -limit ? -limit : up;
    const double s = 1.0 / (1.0 + exp(-alpha * g));
    const int gate_passes = closed ? gate <= limit : gate < limit;
    const int up_passes = closed ? up >= -limit && up <= limit : up > -limit && up < limit;
    *dgate = gate_passes ? (u + 1.0) * (s + alpha * g * s * (1.0 - s)) : 0.0;
    *dup = up_passes ? g * s : 0.0;
    return (u + 1.0) * g * s;
}

static void test_clamped_swiglu_values(void) {
    section("clamped SwiGLU values against a double reference");
    static const struct {
        int64_t rows, cols, stride;
        size_t offset;
    } shapes[] = {{1, 1, 2, 0}, {3, 7, 16, 1}, {2, 300, 600, 0}, {5, 129, 270, 1}};
    uint64_t rng = 91;
    for (size_t d = 0; d < COUNT(ALL_DTYPES); d++)
        for (int layout = 0; layout < 2; layout++)
            for (int closed = 0; closed < 2; closed++)
                for (size_t s = 0; s < COUNT(shapes); s++) {
                    const int dt = ALL_DTYPES[d];
                    const int64_t rows = shapes[s].rows, cols = shapes[s].cols,
                                  stride = shapes[s].stride;
                    const int64_t n = rows * cols, rs = rows > 1 ? stride : 0;
                    /* limit 1.5 with inputs in [-4, 4), and 1.5 itself (exact in every dtype) */
                    const double alpha = 1.702, limit = 1.5;
                    char what[128];
                    snprintf(what, sizeof what, "clamped swiglu %s %s %s %" PRId64 " x %" PRId64,
                             dtype_label(dt), layout ? "pairs" : "halves",
                             closed ? "closed" : "open", rows, cols);
                    guarded gate_up =
                        random_input(&rng, dt, rows, 2 * cols, stride, shapes[s].offset, 0);
                    guarded dy = random_input(&rng, dt, rows, cols, cols, shapes[s].offset, 0);
                    for (int64_t r = 0; r < rows; r++)
                        put(gate_up.data, r * rs + r % 2, dt, r % 4 < 2 ? limit : -limit);
                    guarded y = new_operand(dt, n, shapes[s].offset);
                    guarded dgate_up = new_operand(dt, 2 * n, shapes[s].offset);
                    double *want = malloc(sizeof(double) * (size_t)(2 * n));
                    double *want_grad = malloc(sizeof(double) * (size_t)(2 * n));
                    double *tol = malloc(sizeof(double) * (size_t)(2 * n));
                    double *tol_grad = malloc(sizeof(double) * (size_t)(2 * n));
                    for (int64_t r = 0; r < rows; r++)
                        for (int64_t c = 0; c < cols; c++) {
                            const int64_t gi = r * rs + (layout ? 2 * c : c),
                                          ui = r * rs + (layout ? 2 * c + 1 : cols + c);
                            const int64_t gout = r * 2 * cols + (layout ? 2 * c : c);
                            const int64_t uout = r * 2 * cols + (layout ? 2 * c + 1 : cols + c);
                            const double d_y = get(dy.data, r * cols + c, dt);
                            double dg, du;
                            want[r * cols + c] = clamped_swiglu_reference(
                                get(gate_up.data, gi, dt), get(gate_up.data, ui, dt), alpha, limit,
                                closed, &dg, &du);
                            tol[r * cols + c] = elementwise_tol(want[r * cols + c], dt);
                            want_grad[gout] = d_y * dg, want_grad[uout] = d_y * du;
                            tol_grad[gout] = elementwise_tol(want_grad[gout], dt);
                            tol_grad[uout] = elementwise_tol(want_grad[uout], dt);
                        }
                    fo_clamped_swiglu_args a = {.struct_size = sizeof a,
                                                .device_type = CPU,
                                                .y = addr(&y),
                                                .dgate_up = addr(&dgate_up),
                                                .dy = addr(&dy),
                                                .dy_row_stride = cols,
                                                .gate_up = addr(&gate_up),
                                                .gate_up_row_stride = stride,
                                                .rows = rows,
                                                .cols = cols,
                                                .dtype = dt,
                                                .layout = layout,
                                                .alpha = alpha,
                                                .limit = limit,
                                                .grad_at_limit = closed};
                    int st = fo_clamped_swiglu_forward(&a);
                    if (CHECK(st == OK, "%s forward: status %d (%s)", what, st, fo_last_error()))
                        check_output(what, &y, want, tol, n, dt);
                    st = fo_clamped_swiglu_backward(&a);
                    if (CHECK(st == OK, "%s backward: status %d (%s)", what, st, fo_last_error()))
                        check_output(what, &dgate_up, want_grad, tol_grad, 2 * n, dt);
                    CHECK(guards_intact(&gate_up) && guards_intact(&dy), "%s: an input was written",
                          what);
                    free(want), free(want_grad), free(tol), free(tol_grad);
                    guarded_free(&gate_up), guarded_free(&dy), guarded_free(&y),
                        guarded_free(&dgate_up);
                }
}

/* ========================================================================
 * RoPE: errors and values (fo_rope_forward, fo_rope_backward)
 * ======================================================================== */

/* batch 1, 2 tokens, 1 head each, head_dim 4 (all rotated), f32 (32 bytes
 * a tensor; the 256-byte error buffers hold every operand). */
static fo_rope_args rope_base(void) {
    fo_rope_args a = {.struct_size = sizeof a,
                      .device_type = CPU,
                      .device_index = -3,
                      .stream = 12345,
                      .q_out = addr(&E_OUT),
                      .k_out = addr(&E_OUT2),
                      .q = addr(&E_IN),
                      .k = addr(&E_IN),
                      .q_strides = {8, 8, 4, 1},
                      .k_strides = {8, 8, 4, 1},
                      .cos = addr(&E_IN2),
                      .sin = addr(&E_IN2),
                      .cos_strides = {8, 4, 1},
                      .sin_strides = {8, 4, 1},
                      .batch = 1,
                      .tokens = 2,
                      .q_heads = 1,
                      .k_heads = 1,
                      .head_dim = 4,
                      .rotary_dim = 4,
                      .layout = FO_ROPE_HEADS_FIRST,
                      .dtype = F32,
                      .cos_dtype = F32};
    return a;
}

static void test_errors_rope(void) {
    section("errors: fo_rope_forward, fo_rope_backward");
    static const char fwd[] = "fo_rope_forward", bwd[] = "fo_rope_backward";
    char q2[48];
    address_text(q2, sizeof q2, "q", addr(&E_IN) + 2);
    fo_rope_args a;
#define FWD(why, status, needle, needle2, edit) \
    STRUCT_CASE(a, fwd, rope_base, fo_rope_forward, why, status, needle, needle2, edit)
    FWD("the base case", OK, NULL, NULL, (void)0);
    FWD("device_type 3", BAD_DEVICE, "device_type=3", NULL, a.device_type = 3);
    FWD("dtype code 4", BAD_DTYPE, "dtype=4", NULL, a.dtype = 4);
    FWD("cos_dtype code -2", BAD_DTYPE, "cos_dtype=-2", NULL, a.cos_dtype = -2);
    FWD("f32 q, f16 tables", BAD_DTYPE, "cos_dtype float16", "dtype float32", a.cos_dtype = F16);
    FWD("f64 q, f32 tables", BAD_DTYPE, "cos_dtype float32", "dtype float64", a.dtype = F64);
    FWD("bf16 q, f16 tables", BAD_DTYPE, "cos_dtype float16", "dtype bfloat16",
        (a.dtype = BF16, a.cos_dtype = F16));
    FWD("pairs 2", INVALID, "pairs=2", NULL, a.pairs = 2);
    FWD("layout 2", INVALID, "layout=2", "FO_ROPE_TOKENS_FIRST", a.layout = 2);
    FWD("negative tokens", INVALID, "tokens=-1", ">= 0", a.tokens = -1);
    FWD("negative k_heads", INVALID, "k_heads=-2", NULL, a.k_heads = -2);
    FWD("odd rotary_dim", INVALID, "rotary_dim=3", "even", a.rotary_dim = 3);
    FWD("rotary_dim over head_dim", INVALID, "rotary_dim=6", "head_dim=4", a.rotary_dim = 6);
    FWD("negative rotary_dim", INVALID, "rotary_dim=-2", NULL, a.rotary_dim = -2);
    FWD("batch x tokens overflows", INVALID, "overflows", NULL, (a.batch = BIG, a.tokens = 4));
    FWD("rows x head_dim overflows", INVALID, "overflows", NULL, a.head_dim = BIG);
    FWD("q null", INVALID, "q ", "null", a.q = 0);
    FWD("sin null", INVALID, "sin ", "null", a.sin = 0);
    FWD("q 2 bytes off for f32", INVALID, q2, "align", a.q += 2);
    FWD("q_out 2 bytes off", INVALID, "q_out=0x", "align", a.q_out += 2);
    FWD("q's last stride 2", INVALID, "q stride 2 (dimension 3, the last) must be 1", NULL,
        a.q_strides[3] = 2);
    FWD("k's token stride -4", INVALID, "k stride -4 (dimension 2)", "negative",
        a.k_strides[2] = -4);
    FWD("cos's last stride 0", INVALID, "cos stride 0 (dimension 2", NULL, a.cos_strides[2] = 0);
    FWD("q's token stride x tokens overflows", INVALID, "q stride", "overflows",
        a.q_strides[2] = BIG);
    FWD("struct_size 16", INVALID, "struct_size=16 ", "sizeof(fo_rope_args)", a.struct_size = 16);
    FWD("q_out's tokens 2 apart, rows of 4", INVALID, "q_out strides 8, 8, 2, 1", "over each other",
        (a.q_out_strides[0] = 8, a.q_out_strides[1] = 8, a.q_out_strides[2] = 2,
         a.q_out_strides[3] = 1));
    FWD("k_out's last stride 2", INVALID, "k_out stride 2 (dimension 3, the last) must be 1", NULL,
        (a.k_out_strides[0] = 16, a.k_out_strides[1] = 16, a.k_out_strides[2] = 8,
         a.k_out_strides[3] = 2));
    FWD("q_out's batch stride -8", INVALID, "q_out stride -8", "negative",
        (a.q_out_strides[0] = -8, a.q_out_strides[1] = 8, a.q_out_strides[2] = 4,
         a.q_out_strides[3] = 1, a.batch = 2, a.q_strides[0] = 0, a.k_strides[0] = 0,
         a.cos_strides[0] = a.sin_strides[0] = 0));
    /* accepted boundaries */
    FWD("q_out's rows 8 apart (a layout with gaps)", OK, NULL, NULL,
        (a.q_out_strides[0] = 16, a.q_out_strides[1] = 16, a.q_out_strides[2] = 8,
         a.q_out_strides[3] = 1));
    FWD("bf16 q, f32 tables", OK, NULL, NULL, a.dtype = BF16);
    FWD("tokens first", OK, NULL, NULL,
        (a.layout = FO_ROPE_TOKENS_FIRST, a.q_strides[1] = 4, a.q_strides[2] = 4));
    FWD("strides 0: one row and one table read everywhere", OK, NULL, NULL,
        (a.q_strides[2] = 0, a.cos_strides[1] = a.sin_strides[1] = 0));
    FWD("size-1 dimensions: their strides unread", OK, NULL, NULL,
        (a.q_strides[0] = a.q_strides[1] = -9, a.cos_strides[0] = -9));
    FWD("no rotation: cos and sin unread", OK, NULL, NULL, (a.rotary_dim = 0, a.cos = a.sin = 0));
    FWD("q skipped: q unread", OK, NULL, NULL, (a.q_out = 0, a.q = 1, a.q_strides[3] = 7));
    FWD("nothing wanted: nothing read", OK, NULL, NULL, (a.q_out = a.k_out = 0, a.cos = 0));
    FWD("no heads of k", OK, NULL, NULL, (a.k_heads = 0, a.k = 0));
    FWD("empty: null addresses", OK, NULL, NULL,
        (a.tokens = 0, a.q = a.k = a.q_out = a.k_out = a.cos = a.sin = 0));
#undef FWD
    STRUCT_CASE(a, bwd, rope_base, fo_rope_backward, "the base case", OK, NULL, NULL, (void)0);
    STRUCT_CASE(a, bwd, rope_base, fo_rope_backward, "layout -1", INVALID, "layout=-1", NULL,
                a.layout = -1);
    STRUCT_CASE(a, bwd, rope_base, fo_rope_backward, "k null", INVALID, "k ", "null", a.k = 0);
}

typedef struct rope_setup {
    int dtype, cos_dtype, layout, backward;
    int64_t batch, tokens, q_heads, k_heads, head_dim, rotary_dim;
    int transposed; /* q and k as views of the other layout (a projection's transpose) */
    int shared; /* one table for the batch: batch stride 0 */
    size_t offset;
} rope_setup;

/* The dense strides of [d0, d1, d2, d3] in that order. */
static void dense_strides(int64_t *s, int64_t d1, int64_t d2, int64_t d3) {
    s[3] = 1, s[2] = d3, s[1] = d2 * d3, s[0] = d1 * d2 * d3;
}

static void run_rope(const rope_setup *s, uint64_t seed) {
    char what[200];
    uint64_t rng = seed;
    const int heads_first = s->layout == FO_ROPE_HEADS_FIRST;
    const int64_t half = s->rotary_dim / 2, tables = s->shared ? 1 : s->batch;
    snprintf(what, sizeof what,
             "rope %s %s/%s %s %" PRId64 "x(%" PRId64 ",%" PRId64 ")x%" PRId64 "x%" PRId64
             " rotary %" PRId64 "%s%s",
             s->backward ? "backward" : "forward", dtype_label(s->dtype), dtype_label(s->cos_dtype),
             heads_first ? "heads first" : "tokens first", s->batch, s->q_heads, s->k_heads,
             s->tokens, s->head_dim, s->rotary_dim, s->transposed ? ", transposed views" : "",
             s->shared ? ", shared table" : "");
    fo_rope_args a = {.struct_size = sizeof a,
                      .device_type = CPU,
                      .batch = s->batch,
                      .tokens = s->tokens,
                      .q_heads = s->q_heads,
                      .k_heads = s->k_heads,
                      .head_dim = s->head_dim,
                      .rotary_dim = s->rotary_dim,
                      .layout = s->layout,
                      .dtype = s->dtype,
                      .cos_dtype = s->cos_dtype};
    guarded in[2], out[2];
    const int64_t heads[2] = {s->q_heads, s->k_heads};
    for (int x = 0; x < 2; x++) {
        /* stored [B, T, H, D] (transposed heads first, or plain tokens
         * first) or [B, H, T, D]; strides given in the layout's order */
        int64_t *st = x ? a.k_strides : a.q_strides, dense[4];
        const int tokens_outer = heads_first == s->transposed;
        if (tokens_outer)
            dense_strides(dense, s->tokens, heads[x], s->head_dim);
        else
            dense_strides(dense, heads[x], s->tokens, s->head_dim);
        st[0] = dense[0], st[3] = 1;
        /* st[1], st[2]: the layout's dims 1, 2 */
        const int64_t head_stride = tokens_outer ? dense[2] : dense[1];
        const int64_t token_stride = tokens_outer ? dense[1] : dense[2];
        st[1] = heads_first ? head_stride : token_stride;
        st[2] = heads_first ? token_stride : head_stride;
        const int64_t n = s->batch * s->tokens * heads[x] * s->head_dim;
        in[x] = random_input(&rng, s->dtype, 1, n, n, s->offset, 0);
        out[x] = new_operand(s->dtype, n, s->offset);
    }
    guarded cos =
        random_input(&rng, s->cos_dtype, 1, tables * s->tokens * s->rotary_dim, 0, s->offset, 0);
    guarded sin =
        random_input(&rng, s->cos_dtype, 1, tables * s->tokens * s->rotary_dim, 0, s->offset, 0);
    a.q = addr(&in[0]), a.k = addr(&in[1]), a.q_out = addr(&out[0]), a.k_out = addr(&out[1]);
    a.cos = addr(&cos), a.sin = addr(&sin);
    a.cos_strides[0] = a.sin_strides[0] = s->shared ? 0 : s->tokens * s->rotary_dim;
    a.cos_strides[1] = a.sin_strides[1] = s->rotary_dim;
    a.cos_strides[2] = a.sin_strides[2] = 1;
    int st = s->backward ? fo_rope_backward(&a) : fo_rope_forward(&a);
    if (CHECK(st == OK, "%s: status %d (%s)", what, st, fo_last_error())) {
        for (int x = 0; x < 2; x++) {
            const int64_t *str = x ? a.k_strides : a.q_strides,
                          n = s->batch * s->tokens * heads[x] * s->head_dim;
            double *want = malloc(sizeof(double) * (size_t)(n + 1)),
                   *tol = malloc(sizeof(double) * (size_t)(n + 1));
            for (int64_t b = 0; b < s->batch; b++)
                for (int64_t h = 0; h < heads[x]; h++)
                    for (int64_t t = 0; t < s->tokens; t++) {
                        const int64_t i0 = b * str[0] + (heads_first ? h * str[1] + t * str[2]
                                                                     : t * str[1] + h * str[2]);
                        const int64_t o0 = heads_first
                                               ? ((b * heads[x] + h) * s->tokens + t) * s->head_dim
                                               : ((b * s->tokens + t) * heads[x] + h) * s->head_dim;
                        const int64_t c0 =
                            (s->shared ? 0 : b) * s->tokens * s->rotary_dim + t * s->rotary_dim;
                        for (int64_t j = 0; j < s->head_dim; j++) {
                            const double v = get(in[x].data, i0 + j, s->dtype);
                            double w = v;
                            if (j < s->rotary_dim) {
                                const int lower = j < half;
                                const double partner =
                                    get(in[x].data, i0 + (lower ? j + half : j - half), s->dtype);
                                const double c = get(cos.data, c0 + j, s->cos_dtype);
                                /* rotate_half(x)[j] = -x[j + h] (lower), x[j - h] (upper);
                                 * backward: its transpose */
                                if (!s->backward)
                                    w = v * c + (lower ? -partner : partner) *
                                                    get(sin.data, c0 + j, s->cos_dtype);
                                else
                                    w = v * c + (lower ? partner * get(sin.data, c0 + j + half,
                                                                       s->cos_dtype)
                                                       : -partner * get(sin.data, c0 + j - half,
                                                                        s->cos_dtype));
                            }
                            want[o0 + j] = w;
                            tol[o0 + j] = j < s->rotary_dim ? elementwise_tol(w, s->dtype) : 0.0;
                        }
                    }
            check_output(what, &out[x], want, tol, n, s->dtype);
            free(want), free(tol);
        }
    }
    CHECK(guards_intact(&in[0]) && guards_intact(&in[1]) && guards_intact(&cos) &&
              guards_intact(&sin),
          "%s: an input was written", what);
    for (int x = 0; x < 2; x++) guarded_free(&in[x]), guarded_free(&out[x]);
    guarded_free(&cos), guarded_free(&sin);
}

static void test_rope_values(void) {
    section("RoPE values against a double reference");
    static const int64_t sizes[][6] = {
        /* batch, tokens, q_heads, k_heads, head_dim, rotary_dim */
        {1, 1, 1, 1, 2, 2}, {2, 3, 4, 2, 16, 16},   {1, 5, 3, 1, 80, 32}, {2, 2, 2, 2, 10, 6},
        {1, 3, 2, 1, 8, 0}, {3, 4, 1, 3, 600, 520}, {2, 1, 2, 0, 12, 12}};
    uint64_t seed = 500;
    for (size_t d = 0; d < COUNT(ALL_DTYPES); d++)
        for (int companion = 0; companion < 2; companion++)
            for (size_t k = 0; k < COUNT(sizes); k++)
                for (int variant = 0; variant < 8; variant++) {
                    const int dt = ALL_DTYPES[d];
                    if (companion && (dt == F32 || dt == F64)) continue;
                    rope_setup s = {dt,
                                    companion ? F32 : dt,
                                    variant & 1,
                                    (variant >> 1) & 1,
                                    sizes[k][0],
                                    sizes[k][1],
                                    sizes[k][2],
                                    sizes[k][3],
                                    sizes[k][4],
                                    sizes[k][5],
                                    (variant >> 2) & 1,
                                    (int)(k & 1),
                                    (size_t)(k % 3 == 2)};
                    run_rope(&s, seed++);
                }
}

/* q_out 0: q is neither read (an address no one may read) nor written; k
 * is rotated as ever. */
static void test_rope_one_tensor(void) {
    section("RoPE: one tensor skipped");
    uint64_t rng = 9;
    guarded k = random_input(&rng, F32, 1, 2 * 8, 16, 0, 0), out = new_operand(F32, 16, 0);
    guarded table = random_input(&rng, F32, 1, 2 * 8, 16, 0, 0);
    fo_rope_args a = {.struct_size = sizeof a,
                      .device_type = CPU,
                      .k_out = addr(&out),
                      .q = 8 /* never read */,
                      .k = addr(&k),
                      .k_strides = {16, 16, 8, 1},
                      .cos = addr(&table),
                      .sin = addr(&table),
                      .cos_strides = {0, 8, 1},
                      .sin_strides = {0, 8, 1},
                      .batch = 1,
                      .tokens = 2,
                      .q_heads = 3,
                      .k_heads = 1,
                      .head_dim = 8,
                      .rotary_dim = 8,
                      .dtype = F32,
                      .cos_dtype = F32};
    int st = fo_rope_forward(&a);
    CHECK(st == OK, "k only: status %d (%s)", st, fo_last_error());
    double want[16];
    for (int t = 0; t < 2; t++)
        for (int j = 0; j < 8; j++) {
            const double c = get(table.data, t * 8 + j, F32), v = get(k.data, t * 8 + j, F32);
            const double partner = get(k.data, t * 8 + (j < 4 ? j + 4 : j - 4), F32);
            want[t * 8 + j] = v * c + (j < 4 ? -partner : partner) * c;
        }
    double tol[16];
    for (int i = 0; i < 16; i++) tol[i] = elementwise_tol(want[i], F32);
    check_output("k only", &out, want, tol, 16, F32);
    guarded_free(&k), guarded_free(&out), guarded_free(&table);
}

/* ========================================================================
 * The argument structs: struct_size and the NULL pointer, for every entry
 * point that takes one. A struct whose struct_size is outside [the first
 * version's size, the library's sizeof] is refused before anything else of
 * it is read; one within is read only up to struct_size (every struct is in
 * its first version, so the two bounds are equal today). A `reserved` field
 * that is not 0 is refused too.
 * ======================================================================== */

static int64_t struct_query_bytes;

static int call_relu_forward(const void *a) { return fo_bias_scale_relu_forward(a); }
static int call_relu_backward(const void *a) { return fo_bias_scale_relu_backward(a); }
static int call_relu_query(const void *a) {
    return fo_bias_scale_relu_backward_workspace_bytes(a, &struct_query_bytes);
}
static int call_norm_forward(const void *a) { return fo_norm_forward(a); }
static int call_norm_backward(const void *a) { return fo_norm_backward(a); }
static int call_norm_query(const void *a) {
    return fo_norm_backward_workspace_bytes(a, &struct_query_bytes);
}
static int call_geglu_forward(const void *a) { return fo_geglu_forward(a); }
static int call_geglu_backward(const void *a) { return fo_geglu_backward(a); }
static int call_rope_forward(const void *a) { return fo_rope_forward(a); }
static int call_rope_backward(const void *a) { return fo_rope_backward(a); }
static int call_square_forward(const void *a) { return fo_square_forward(a); }
static int call_square_backward(const void *a) { return fo_square_backward(a); }
static int call_reduce_sum(const void *a) { return fo_reduce_sum(a); }
static int call_reduce_sum_query(const void *a) {
    return fo_reduce_sum_workspace_bytes(a, &struct_query_bytes);
}
static int call_swiglu_forward(const void *a) { return fo_swiglu_forward(a); }
static int call_swiglu_backward(const void *a) { return fo_swiglu_backward(a); }

/* fo_rope_args before the output strides */
#define ROPE_FIRST_SIZE (offsetof(fo_rope_args, pairs) + sizeof(int32_t))

typedef struct struct_entry {
    const char *op;
    int (*call)(const void *args);
    const void *valid; /* a call that succeeds, struct_size = size */
    size_t size;
    size_t first; /* the size of its first version (0: size) */
    size_t reserved; /* the offset of its int32_t `reserved` (0: none) */
} struct_entry;

/* A copy of the first `readable` bytes of `valid`, with struct_size set to
 * `struct_size`, placed so that the next byte is in a page that cannot be
 * read: a library reading past `readable` bytes crashes the test. */
static int call_at_page_end(const struct_entry *e, unsigned char *page_end, size_t readable,
                            int64_t struct_size) {
    unsigned char *copy = page_end - readable;
    memcpy(copy, e->valid, readable);
    memcpy(copy, &struct_size, sizeof struct_size);
    return e->call(copy);
}

static void test_struct_size(void) {
    section("argument structs: struct_size and NULL");
    const uintptr_t OUT = addr(&E_OUT), OUT2 = addr(&E_OUT2), IN = addr(&E_IN), IN2 = addr(&E_IN2);
    const fo_bias_scale_relu_forward_args relu_fwd = {.struct_size = sizeof relu_fwd,
                                                      .device_type = CPU,
                                                      .y = OUT,
                                                      .mask = OUT2,
                                                      .x = IN,
                                                      .x_row_stride = 4,
                                                      .rows = 2,
                                                      .cols = 4,
                                                      .dtype = F32,
                                                      .bias_dtype = F32,
                                                      .scale = 1.0};
    const fo_bias_scale_relu_backward_args relu_bwd = {.struct_size = sizeof relu_bwd,
                                                       .device_type = CPU,
                                                       .dx = OUT,
                                                       .dy = IN,
                                                       .dy_row_stride = 4,
                                                       .mask = IN2,
                                                       .rows = 2,
                                                       .cols = 4,
                                                       .dtype = F32,
                                                       .bias_dtype = F32,
                                                       .scale = 1.0};
    const fo_norm_forward_args norm_fwd = {.struct_size = sizeof norm_fwd,
                                           .device_type = CPU,
                                           .y = OUT,
                                           .x = IN,
                                           .x_row_stride = 4,
                                           .param_dtype = F32,
                                           .rows = 2,
                                           .cols = 4,
                                           .dtype = F32,
                                           .kind = FO_NORM_LAYER,
                                           .eps = 1e-5};
    const fo_norm_backward_args norm_bwd = {.struct_size = sizeof norm_bwd,
                                            .device_type = CPU,
                                            .dx = OUT,
                                            .dy = IN,
                                            .dy_row_stride = 4,
                                            .h = IN2,
                                            .h_row_stride = 4,
                                            .h_dtype = F32,
                                            .mean = IN2,
                                            .rstd = IN2,
                                            .param_dtype = F32,
                                            .rows = 2,
                                            .cols = 4,
                                            .dtype = F32,
                                            .kind = FO_NORM_LAYER};
    const fo_geglu_forward_args geglu_fwd = geglu_forward_base();
    const fo_geglu_backward_args geglu_bwd = geglu_backward_base();
    const fo_rope_args rope = rope_base();
    const fo_square_forward_args square_fwd = {.struct_size = sizeof square_fwd,
                                               .device_type = CPU,
                                               .y = OUT,
                                               .x = IN,
                                               .x_row_stride = 4,
                                               .rows = 2,
                                               .cols = 4,
                                               .dtype = F32};
    const fo_square_backward_args square_bwd = {.struct_size = sizeof square_bwd,
                                                .device_type = CPU,
                                                .dx = OUT,
                                                .dy = IN,
                                                .dy_row_stride = 4,
                                                .x = IN2,
                                                .x_row_stride = 4,
                                                .rows = 2,
                                                .cols = 4,
                                                .dtype = F32};
    const fo_reduce_sum_args sum = reduce_sum_args(CPU, 0, 0, OUT, 0, 0, IN, 8, F32);
    const fo_swiglu_forward_args swiglu_fwd = {.struct_size = sizeof swiglu_fwd,
                                               .device_type = CPU,
                                               .y = OUT,
                                               .gate = IN,
                                               .gate_row_stride = 4,
                                               .up = IN2,
                                               .up_row_stride = 4,
                                               .rows = 2,
                                               .cols = 4,
                                               .dtype = F32};
    const fo_swiglu_backward_args swiglu_bwd = {.struct_size = sizeof swiglu_bwd,
                                                .device_type = CPU,
                                                .dgate = OUT,
                                                .dup = OUT2,
                                                .dy = IN,
                                                .dy_row_stride = 4,
                                                .gate = IN,
                                                .gate_row_stride = 4,
                                                .up = IN2,
                                                .up_row_stride = 4,
                                                .rows = 2,
                                                .cols = 4,
                                                .dtype = F32};
    const struct_entry entries[] = {
        {"fo_bias_scale_relu_forward", call_relu_forward, &relu_fwd, sizeof relu_fwd, 0, 0},
        {"fo_bias_scale_relu_backward", call_relu_backward, &relu_bwd, sizeof relu_bwd, 0, 0},
        {"fo_bias_scale_relu_backward_workspace_bytes", call_relu_query, &relu_bwd, sizeof relu_bwd,
         0, 0},
        {"fo_norm_forward", call_norm_forward, &norm_fwd, sizeof norm_fwd,
         offsetof(fo_norm_forward_args, fp8), 0},
        {"fo_norm_backward", call_norm_backward, &norm_bwd, sizeof norm_bwd, 0, 0},
        {"fo_norm_backward_workspace_bytes", call_norm_query, &norm_bwd, sizeof norm_bwd, 0, 0},
        {"fo_geglu_forward", call_geglu_forward, &geglu_fwd, sizeof geglu_fwd,
         offsetof(fo_geglu_forward_args, fp8), 0},
        {"fo_geglu_backward", call_geglu_backward, &geglu_bwd, sizeof geglu_bwd, 0, 0},
        {"fo_rope_forward", call_rope_forward, &rope, sizeof rope, ROPE_FIRST_SIZE, 0},
        {"fo_rope_backward", call_rope_backward, &rope, sizeof rope, ROPE_FIRST_SIZE, 0},
        {"fo_square_forward", call_square_forward, &square_fwd, sizeof square_fwd, 0,
         offsetof(fo_square_forward_args, reserved)},
        {"fo_square_backward", call_square_backward, &square_bwd, sizeof square_bwd, 0,
         offsetof(fo_square_backward_args, reserved)},
        {"fo_reduce_sum", call_reduce_sum, &sum, sizeof sum, 0,
         offsetof(fo_reduce_sum_args, reserved)},
        {"fo_reduce_sum_workspace_bytes", call_reduce_sum_query, &sum, sizeof sum, 0,
         offsetof(fo_reduce_sum_args, reserved)},
        {"fo_swiglu_forward", call_swiglu_forward, &swiglu_fwd, sizeof swiglu_fwd,
         offsetof(fo_swiglu_forward_args, fp8), offsetof(fo_swiglu_forward_args, reserved)},
        {"fo_swiglu_backward", call_swiglu_backward, &swiglu_bwd, sizeof swiglu_bwd, 0,
         offsetof(fo_swiglu_backward_args, reserved)},
    };
    /* two pages, the second unreadable */
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    unsigned char *pages =
        mmap(NULL, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (!CHECK(pages != MAP_FAILED && mprotect(pages + page, page, PROT_NONE) == 0,
               "mmap/mprotect of a guard page failed"))
        return;
    unsigned char *page_end = pages + page;

    for (size_t i = 0; i < COUNT(entries); i++) {
        const struct_entry *e = &entries[i];
        const int64_t size = (int64_t)e->size;
        /* the whole struct, its last byte the page's last: accepted */
        before_case();
        int st = call_at_page_end(e, page_end, e->size, size);
        CHECK(st == OK, "%s, struct_size = sizeof = %" PRId64 ": status %d (%s)", e->op, size, st,
              fo_last_error());

        /* a caller of the first version (fields since then read as 0): accepted */
        const int64_t first = e->first ? (int64_t)e->first : size;
        before_case();
        st = call_at_page_end(e, page_end, (size_t)first, first);
        CHECK(st == OK, "%s, struct_size = %" PRId64 " (the first version's): status %d (%s)",
              e->op, first, st, fo_last_error());

        before_case();
        expect_status(e->op, "args NULL", e->call(NULL), INVALID, "args", "null");

        if (e->reserved) {
            const int32_t one = 1;
            memcpy(page_end - e->size, e->valid, e->size);
            memcpy(page_end - e->size + e->reserved, &one, sizeof one);
            before_case();
            expect_status(e->op, "reserved 1", e->call(page_end - e->size), INVALID, "reserved=1",
                          NULL);
        }

        /* refused sizes, each named in the message; nothing written */
        const int64_t refused[] = {0,        -1,       8,         first - 8, first - 1,
                                   size + 1, size + 8, INT64_MIN, INT64_MAX};
        for (size_t k = 0; k < COUNT(refused); k++) {
            char why[96], needle[64];
            snprintf(why, sizeof why, "struct_size %" PRId64 " (sizeof is %" PRId64 ")", refused[k],
                     size);
            snprintf(needle, sizeof needle, "struct_size=%" PRId64 " ", refused[k]);
            /* with all of the struct readable */
            before_case();
            expect_status(e->op, why, call_at_page_end(e, page_end, e->size, refused[k]), INVALID,
                          needle, "sizeof(fo_");
            /* with only struct_size itself readable: the refusal reads no more */
            before_case();
            expect_status(e->op, why, call_at_page_end(e, page_end, sizeof(int64_t), refused[k]),
                          INVALID, needle, NULL);
        }
    }
    munmap(pages, 2 * page);
}

/* ========================================================================
 * Empty operands: rows == 0 or cols == 0 is a no-op, null addresses included
 * ======================================================================== */

static void test_empty_operands(void) {
    section("empty operands");
    static const int64_t shapes[][2] = {{0, 5}, {5, 0}, {0, 0}};
    for (size_t d = 0; d < COUNT(ALL_DTYPES); d++) {
        int dt = ALL_DTYPES[d];
        for (size_t s = 0; s < COUNT(shapes); s++) {
            int64_t rows = shapes[s][0], cols = shapes[s][1];
            char what[96];
            snprintf(what, sizeof what, "%s %" PRId64 " x %" PRId64 ", null addresses",
                     dtype_label(dt), rows, cols);
            int st = relu_forward_call(CPU, 0, 0, 0, 0, 0, 3, 0, rows, cols, dt, dt, 1.0f);
            CHECK(st == OK, "relu forward, %s: status %d (%s)", what, st, fo_last_error());
            st = relu_backward_call(CPU, 0, 0, 0, 0, 0, 0, 0, 3, 0, rows, cols, dt, dt, 1.0f);
            CHECK(st == OK, "relu backward, %s: status %d (%s)", what, st, fo_last_error());
            st = square_forward_call(CPU, 0, 0, 0, 0, 3, rows, cols, dt);
            CHECK(st == OK, "square forward, %s: status %d (%s)", what, st, fo_last_error());
            st = square_backward_call(CPU, 0, 0, 0, 0, 3, 0, 3, rows, cols, dt);
            CHECK(st == OK, "square backward, %s: status %d (%s)", what, st, fo_last_error());
            const fo_geglu_forward_args gf = {.struct_size = sizeof gf,
                                              .device_type = CPU,
                                              .gate_row_stride = 3,
                                              .up_row_stride = 3,
                                              .rows = rows,
                                              .cols = cols,
                                              .dtype = dt};
            st = fo_geglu_forward(&gf);
            CHECK(st == OK, "geglu forward, %s: status %d (%s)", what, st, fo_last_error());
            const fo_geglu_backward_args gb = {.struct_size = sizeof gb,
                                               .device_type = CPU,
                                               .dy_row_stride = 3,
                                               .rows = rows,
                                               .cols = cols,
                                               .dtype = dt,
                                               .approximate = FO_GELU_TANH};
            st = fo_geglu_backward(&gb);
            CHECK(st == OK, "geglu backward, %s: status %d (%s)", what, st, fo_last_error());
            /* rows as batch x tokens, cols as head_dim (and rotary_dim) */
            const fo_rope_args ra = {.struct_size = sizeof ra,
                                     .device_type = CPU,
                                     .batch = rows,
                                     .tokens = 3,
                                     .q_heads = 2,
                                     .k_heads = 1,
                                     .head_dim = cols,
                                     .rotary_dim = cols - cols % 2,
                                     .dtype = dt,
                                     .cos_dtype = dt};
            st = fo_rope_forward(&ra);
            CHECK(st == OK, "rope forward, %s: status %d (%s)", what, st, fo_last_error());
            st = fo_rope_backward(&ra);
            CHECK(st == OK, "rope backward, %s: status %d (%s)", what, st, fo_last_error());
        }

        /* Poisoned outputs of an empty call stay untouched... */
        guarded y = guarded_new(0, 0), dbias = guarded_new(5 * dtype_size(dt), 0);
        int st = relu_forward_call(CPU, 0, 0, addr(&y), addr(&y), 0, 5, 0, 0, 5, dt, dt, 1.0f);
        CHECK(st == OK && untouched(&y), "%s 0 x 5 relu forward wrote to y or mask",
              dtype_label(dt));
        /* ...except the bias gradient over no rows, which is a sum of nothing: 0 */
        st = relu_backward_call(CPU, 0, 0, 0, addr(&dbias), 0, 0, 0, 5, 0, 0, 5, dt, dt, 1.0f);
        CHECK(st == OK, "%s 0 x 5 relu backward: status %d (%s)", dtype_label(dt), st,
              fo_last_error());
        static const double zeros[5] = {0, 0, 0, 0, 0};
        check_output("dbias over 0 rows", &dbias, zeros, NULL, 5, dt);

        /* ...and reduce_sum of 0 elements writes 0 (x may be null). */
        guarded out = guarded_new(dtype_size(dt), 0);
        st = reduce_sum_call(CPU, 0, 0, addr(&out), 0, 0, 0, 0, dt);
        CHECK(st == OK, "%s reduce_sum of nothing: status %d (%s)", dtype_label(dt), st,
              fo_last_error());
        check_output("reduce_sum of nothing", &out, zeros, NULL, 1, dt);
        CHECK(get_bits(out.data, 0, dt) == 0, "%s reduce_sum of nothing is not +0",
              dtype_label(dt));
        guarded_free(&y);
        guarded_free(&dbias);
        guarded_free(&out);
    }
}

/* ========================================================================
 * device_type CUDA. Without CUDA built in: FO_ERR_CUDA_NOT_BUILT from every
 * entry point. With it: the argument checks that come before any CUDA call
 * (device_index, workspace size), then, only when FO_TEST_HAS_GPU is not 1,
 * one call per op that must fail in the CUDA runtime (no GPU) and not crash.
 * Host addresses are passed: no call here may dereference them.
 * ======================================================================== */

static void test_cuda_device(void) {
    section("device_type CUDA");
    const int built = fo_cuda_built();
    const char *env = getenv("FO_TEST_HAS_GPU");
    const int has_gpu = env && strcmp(env, "1") == 0;
    const uintptr_t Y = addr(&E_OUT), Y2 = addr(&E_OUT2), X = addr(&E_IN), X2 = addr(&E_IN2);
    int64_t bytes = -77;
    int st;

    if (!built) {
        /* Each entry point refuses, whatever else is wrong with the call. */
        before_case();
        st = relu_forward_call(CUDA, 0, 0, Y, Y2, X, 8, X2, 2, 8, F32, F32, 1);
        expect_status("fo_bias_scale_relu_forward", "CPU-only build", st, NOT_BUILT, NULL, NULL);
        before_case();
        st = relu_backward_call(CUDA, 0, 0, Y, Y2, 0, 0, X, 8, X2, 2, 8, F32, F32, 1);
        expect_status("fo_bias_scale_relu_backward", "CPU-only build", st, NOT_BUILT, NULL, NULL);
        before_case();
        st = square_forward_call(CUDA, 0, 0, Y, X, 8, 2, 8, F16);
        expect_status("fo_square_forward", "CPU-only build", st, NOT_BUILT, NULL, NULL);
        before_case();
        st = square_backward_call(CUDA, -1, 0, Y, X, 8, X2, 8, 2, 8, BF16);
        expect_status("fo_square_backward", "CPU-only build, device_index -1", st, NOT_BUILT, NULL,
                      NULL);
        before_case();
        st = reduce_sum_call(CUDA, 0, 0, Y, 0, 0, X, 16, F64);
        expect_status("fo_reduce_sum", "CPU-only build", st, NOT_BUILT, NULL, NULL);
        fo_geglu_forward_args gf = geglu_forward_base();
        fo_geglu_backward_args gb = geglu_backward_base();
        fo_rope_args ra = rope_base();
        gf.device_type = gb.device_type = ra.device_type = CUDA;
        before_case();
        expect_status("fo_geglu_forward", "CPU-only build", fo_geglu_forward(&gf), NOT_BUILT, NULL,
                      NULL);
        before_case();
        expect_status("fo_geglu_backward", "CPU-only build", fo_geglu_backward(&gb), NOT_BUILT,
                      NULL, NULL);
        before_case();
        expect_status("fo_rope_forward", "CPU-only build", fo_rope_forward(&ra), NOT_BUILT, NULL,
                      NULL);
        before_case();
        expect_status("fo_rope_backward", "CPU-only build", fo_rope_backward(&ra), NOT_BUILT, NULL,
                      NULL);
        before_case();
        const fo_bias_scale_relu_backward_args relu =
            relu_backward_args(CUDA, 0, 0, Y, Y2, 0, 0, X, 8, X2, 2, 8, F32, F32, 1);
        st = fo_bias_scale_relu_backward_workspace_bytes(&relu, &bytes);
        expect_status("fo_bias_scale_relu_backward_workspace_bytes", "CPU-only build", st,
                      NOT_BUILT, NULL, NULL);
        before_case();
        const fo_reduce_sum_args sum = reduce_sum_args(CUDA, 0, 0, Y, 0, 0, X, 16, F32);
        st = fo_reduce_sum_workspace_bytes(&sum, &bytes);
        expect_status("fo_reduce_sum_workspace_bytes", "CPU-only build", st, NOT_BUILT, NULL, NULL);
        CHECK(bytes == -77, "a refused workspace query wrote *bytes = %" PRId64, bytes);
        return;
    }

    /* Refused before any CUDA runtime call: safe with or without a GPU. */
    before_case();
    st = square_forward_call(CUDA, -1, 0, Y, X, 8, 2, 8, F32);
    expect_status("fo_square_forward", "device_index -1", st, BAD_DEVICE, "device_index=-1", NULL);

    int64_t sum_bytes = -1, relu_bytes = -1;
    const fo_reduce_sum_args sum = reduce_sum_args(CUDA, 0, 0, Y, 0, 0, X, 1000, F32);
    st = fo_reduce_sum_workspace_bytes(&sum, &sum_bytes);
    CHECK(st == OK && sum_bytes >= 0 && (size_t)sum_bytes <= E_IN2.bytes,
          "reduce_sum CUDA workspace query: status %d, %" PRId64 " bytes", st, sum_bytes);
    const fo_bias_scale_relu_backward_args relu =
        relu_backward_args(CUDA, 0, 0, Y, Y2, 0, 0, X, 8, X2, 2, 8, F32, F32, 1);
    st = fo_bias_scale_relu_backward_workspace_bytes(&relu, &relu_bytes);
    CHECK(st == OK && relu_bytes >= 0 && (size_t)relu_bytes <= E_IN2.bytes,
          "relu backward CUDA workspace query: status %d, %" PRId64 " bytes", st, relu_bytes);
    /* without a bias gradient the call needs none, and the query says so */
    fo_bias_scale_relu_backward_args relu_dx_only = relu;
    relu_dx_only.dbias = 0;
    int64_t dx_only_bytes = -1;
    st = fo_bias_scale_relu_backward_workspace_bytes(&relu_dx_only, &dx_only_bytes);
    CHECK(st == OK && dx_only_bytes == 0,
          "relu backward CUDA workspace query without dbias: status %d, %" PRId64 " bytes", st,
          dx_only_bytes);
    if (sum_bytes < 0 || (size_t)sum_bytes > E_IN2.bytes || relu_bytes < 0 ||
        (size_t)relu_bytes > E_IN2.bytes)
        return;
    const uintptr_t WS = X2; /* host memory; only its size is looked at here */

    before_case();
    st = reduce_sum_call(CUDA, 0, 0, Y, WS, -1, X, 1000, F32);
    expect_status("fo_reduce_sum", "negative workspace_bytes", st, INVALID, "workspace_bytes=-1",
                  "negative");
    if (sum_bytes > 0) {
        char needle[64];
        snprintf(needle, sizeof needle, "workspace_bytes=%" PRId64, sum_bytes - 1);
        before_case();
        st = reduce_sum_call(CUDA, 0, 0, Y, WS, sum_bytes - 1, X, 1000, F32);
        expect_status("fo_reduce_sum", "workspace 1 byte short", st, TOO_SMALL, needle, NULL);
        before_case();
        st = reduce_sum_call(CUDA, 0, 0, Y, 0, sum_bytes, X, 1000, F32);
        expect_status("fo_reduce_sum", "null workspace", st, INVALID, "workspace", "null");
    }
    if (relu_bytes > 0) {
        before_case();
        st = relu_backward_call(CUDA, 0, 0, Y, Y2, WS, relu_bytes - 1, X, 8, X2, 2, 8, F32, F32, 1);
        expect_status("fo_bias_scale_relu_backward", "workspace 1 byte short", st, TOO_SMALL,
                      "workspace_bytes=", NULL);
        before_case();
        st = relu_backward_call(CUDA, 0, 0, Y, Y2, 0, relu_bytes, X, 8, X2, 2, 8, F32, F32, 1);
        expect_status("fo_bias_scale_relu_backward", "null workspace", st, INVALID, "workspace",
                      "null");
    }

    if (has_gpu) {
        printf("   FO_TEST_HAS_GPU=1: not calling CUDA paths that expect no GPU\n");
        return;
    }
    /* No GPU: the runtime refuses (cudaGetDevice fails first) and the status
     * says so; nothing is written to the host buffers passed. */
    before_case();
    st = relu_forward_call(CUDA, 0, 0, Y, Y2, X, 8, X2, 2, 8, F32, F32, 1);
    expect_status("fo_bias_scale_relu_forward", "no GPU", st, CUDA_RUNTIME, "CUDA", NULL);
    before_case();
    st = relu_backward_call(CUDA, 0, 0, Y, Y2, WS, relu_bytes, X, 8, X2, 2, 8, BF16, F32, 1);
    expect_status("fo_bias_scale_relu_backward", "no GPU", st, CUDA_RUNTIME, "CUDA", NULL);
    before_case();
    st = square_forward_call(CUDA, 0, 0, Y, X, 8, 2, 8, F16);
    expect_status("fo_square_forward", "no GPU", st, CUDA_RUNTIME, "CUDA", NULL);
    before_case();
    st = square_backward_call(CUDA, 0, 0, Y, X, 8, X2, 8, 2, 8, F64);
    expect_status("fo_square_backward", "no GPU", st, CUDA_RUNTIME, "CUDA", NULL);
    before_case();
    st = reduce_sum_call(CUDA, 0, 0, Y, WS, sum_bytes, X, 1000, F32);
    expect_status("fo_reduce_sum", "no GPU", st, CUDA_RUNTIME, "CUDA", NULL);
    fo_geglu_forward_args gf = geglu_forward_base();
    fo_rope_args ra = rope_base();
    gf.device_type = ra.device_type = CUDA;
    gf.device_index = ra.device_index = 0;
    before_case();
    expect_status("fo_geglu_forward", "no GPU", fo_geglu_forward(&gf), CUDA_RUNTIME, "CUDA", NULL);
    before_case();
    expect_status("fo_rope_backward", "no GPU", fo_rope_backward(&ra), CUDA_RUNTIME, "CUDA", NULL);
}

/* ========================================================================
 * fo_bias_scale_relu_forward values
 * ======================================================================== */

typedef struct relu_forward_setup {
    int dtype, bias_dtype;
    int64_t rows, cols, x_row_stride;
    int with_bias, with_mask;
    float scale;
    int exact; /* dyadic inputs: bit-exact outputs; else a tolerance */
    size_t offset; /* elements past a 64-byte boundary, of every operand */
} relu_forward_setup;

/* Checks every mask bit: bit (c % 8) of byte r * row_bytes + c / 8 is 1
 * exactly where the y written is not <= 0 (> 0 or NaN, as torch passes the
 * gradient of a NaN); the bits past cols in a row's last byte are 0 (every
 * byte is written whole). */
static void check_mask(const char *what, const guarded *mask, const guarded *y, int64_t rows,
                       int64_t cols, int dtype) {
    int64_t row_bytes = mask_row_bytes(cols), bad = 0;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < row_bytes * 8; c++) {
            unsigned byte = mask->data[r * row_bytes + c / 8];
            int got = (byte >> (c % 8)) & 1u;
            int want = c < cols && !(get(y->data, r * cols + c, dtype) <= 0.0);
            if (got != want && ++bad <= 5)
                CHECK(0,
                      "%s: mask bit of row %" PRId64 " col %" PRId64
                      " is %d, want %d (mask byte 0x%02x)",
                      what, r, c, got, want, byte);
        }
    CHECK(bad == 0, "%s: %" PRId64 " wrong mask bits", what, bad);
    CHECK(guards_intact(mask), "%s: written outside the mask", what);
}

static void run_relu_forward(const relu_forward_setup *s, uint64_t seed) {
    char what[160];
    snprintf(what, sizeof what,
             "relu forward %s x, %s bias%s, %" PRId64 " x %" PRId64 " stride %" PRId64
             ", scale %g%s",
             dtype_label(s->dtype), dtype_label(s->bias_dtype), s->with_bias ? "" : " (none)",
             s->rows, s->cols, s->x_row_stride, (double)s->scale, s->with_mask ? ", mask" : "");
    uint64_t rng = seed;
    int64_t n = s->rows * s->cols;
    guarded x =
        random_input(&rng, s->dtype, s->rows, s->cols, s->x_row_stride, s->offset, s->exact);
    guarded bias = random_input(&rng, s->bias_dtype, 1, s->cols, 0, s->offset, s->exact);
    guarded y = new_operand(s->dtype, n, s->offset);
    /* the mask is bytes: any address will do, so give it an odd one */
    guarded mask = guarded_new((size_t)(s->rows * mask_row_bytes(s->cols)), 1);

    int st = relu_forward_call(CPU, 0, 0, addr(&y), s->with_mask ? addr(&mask) : 0, addr(&x),
                               s->x_row_stride, s->with_bias ? addr(&bias) : 0, s->rows, s->cols,
                               s->dtype, s->bias_dtype, s->scale);
    if (CHECK(st == OK, "%s: status %d (%s)", what, st, fo_last_error())) {
        double *want = malloc(sizeof(double) * (size_t)(n + 1));
        double *tol = malloc(sizeof(double) * (size_t)(n + 1));
        for (int64_t r = 0; r < s->rows; r++)
            for (int64_t c = 0; c < s->cols; c++) {
                double xv = get(x.data, r * (s->rows > 1 ? s->x_row_stride : 0) + c, s->dtype);
                double bv = s->with_bias ? get(bias.data, c, s->bias_dtype) : 0.0;
                double t = xv * (double)s->scale + bv;
                want[r * s->cols + c] = t < 0.0 ? 0.0 : t; /* NaN stays NaN */
                /* fp32 arithmetic (the header's promise) may round x * scale
                 * first: a few units in the last place of the terms */
                double unit = s->dtype == F64 ? 0x1p-51 : 0x1p-22;
                tol[r * s->cols + c] = unit * (fabs(xv * (double)s->scale) + fabs(bv));
            }
        check_output(what, &y, want, s->exact ? NULL : tol, n, s->dtype);
        if (s->with_mask)
            check_mask(what, &mask, &y, s->rows, s->cols, s->dtype);
        else
            CHECK(untouched(&mask), "%s: no mask asked for, one written", what);
        free(want);
        free(tol);
    }
    CHECK(guards_intact(&x) && guards_intact(&bias), "%s: an input was written", what);
    guarded_free(&x);
    guarded_free(&bias);
    guarded_free(&y);
    guarded_free(&mask);
}

static void test_relu_forward_values(void) {
    section("fo_bias_scale_relu_forward values (CPU)");
    static const relu_forward_setup setups[] = {
        /* dtype, bias_dtype, rows, cols, x_row_stride, bias, mask, scale,
         * exact, offset */
        {F32, F32, 7, 13, 13, 1, 1, 0.75f, 1, 0},
        {F32, F32, 5, 37, 40, 0, 1, -1.5f, 1, 0}, /* strided rows, no bias */
        {F32, F32, 4, 16, 0, 1, 1, 2.0f, 1, 1}, /* one row broadcast */
        {F32, F32, 3, 10, 3, 1, 1, 1.0f, 1, 0}, /* overlapping rows */
        {F32, F32, 2, 1000, 1003, 1, 1, 0.5f, 1, 0}, /* several CPU chunks, cols % 8 = 0 */
        {F32, F32, 3, 1001, 1001, 1, 1, 0.5f, 1, 1}, /* several chunks, cols % 8 = 1 */
        {F32, F32, 1, 9, -5, 1, 1, 1.25f, 1, 0}, /* one row: the stride is ignored */
        {F32, F32, 1, 1, 1, 1, 1, -1.0f, 1, 0},
        {F32, F32, 33, 70, 75, 1, 1, 0.3f, 0, 0}, /* full precision */
        {F64, F64, 3, 300, 301, 1, 1, 2.0f, 1, 1},
        {F64, F64, 9, 31, 31, 1, 1, 0.3f, 0, 0}, /* full precision */
        {F16, F16, 4, 21, 24, 1, 1, 0.75f, 1, 1},
        {F16, F32, 4, 21, 21, 1, 1, -0.5f, 1, 0}, /* f32 bias with a half x */
        {F16, F16, 3, 8, 8, 0, 0, 1.0f, 1, 0}, /* plain relu */
        {BF16, BF16, 6, 17, 17, 1, 1, 1.5f, 1, 0}, /* results round to bf16 */
        {BF16, F32, 6, 17, 20, 1, 1, 0.75f, 1, 1}, /* f32 bias with a bf16 x */
        {BF16, F32, 2, 1000, 1000, 1, 1, 0.75f, 1, 0},
    };
    for (size_t i = 0; i < COUNT(setups); i++) run_relu_forward(&setups[i], 1000 + i);

    /* Special values (f32, scale 2, no bias): NaN stays NaN with mask bit 0;
     * +inf and overflow give +inf with bit 1; -inf gives 0. */
    static const float specials[] = {NAN,     INFINITY, -INFINITY,    0.0f,  -0.0f,
                                     FLT_MAX, -FLT_MAX, FLT_TRUE_MIN, -1.0f, 1.0f};
    enum { NS = COUNT(specials) };
    guarded x = guarded_new(sizeof specials, 0), y = guarded_new(sizeof specials, 0),
            mask = guarded_new(2, 0);
    memcpy(x.data, specials, sizeof specials);
    int st =
        relu_forward_call(CPU, 0, 0, addr(&y), addr(&mask), addr(&x), NS, 0, 1, NS, F32, F32, 2.0f);
    CHECK(st == OK, "special values: status %d (%s)", st, fo_last_error());
    double want[NS];
    for (int i = 0; i < NS; i++) {
        double t = (double)specials[i] * 2.0;
        want[i] = t < 0.0 ? 0.0 : t;
    }
    check_output("relu forward, special values", &y, want, NULL, NS, F32);
    check_mask("relu forward, special values", &mask, &y, 1, NS, F32);
    CHECK((mask.data[0] & 1u) == 1, "the mask bit of NaN is clear (torch passes its gradient)");
    guarded_free(&x);
    guarded_free(&y);
    guarded_free(&mask);
}

/* ========================================================================
 * fo_bias_scale_relu_backward values
 * ======================================================================== */

typedef struct relu_backward_setup {
    int dtype, bias_dtype;
    int64_t rows, cols, dy_row_stride;
    int with_dx, with_dbias;
    float scale;
    size_t offset;
} relu_backward_setup;

static void run_relu_backward(const relu_backward_setup *s, uint64_t seed) {
    char what[160];
    snprintf(what, sizeof what,
             "relu backward %s dy, %s dbias, %" PRId64 " x %" PRId64 " stride %" PRId64
             ", scale %g%s%s",
             dtype_label(s->dtype), dtype_label(s->bias_dtype), s->rows, s->cols, s->dy_row_stride,
             (double)s->scale, s->with_dx ? ", dx" : "", s->with_dbias ? ", dbias" : "");
    uint64_t rng = seed;
    int64_t n = s->rows * s->cols, row_bytes = mask_row_bytes(s->cols);
    int64_t dy_stride = s->rows > 1 ? s->dy_row_stride : 0;
    guarded dy = random_input(&rng, s->dtype, s->rows, s->cols, s->dy_row_stride, s->offset, 1);
    /* random mask bytes, the unused bits past cols included: they must be
     * ignored */
    guarded mask = guarded_new((size_t)(s->rows * row_bytes), 1);
    for (int64_t i = 0; i < s->rows * row_bytes; i++) mask.data[i] = (unsigned char)rng_next(&rng);
    guarded dx = new_operand(s->dtype, n, s->offset);
    guarded dbias = new_operand(s->bias_dtype, s->cols, s->offset);

    int st = relu_backward_call(CPU, 0, 0, s->with_dx ? addr(&dx) : 0,
                                s->with_dbias ? addr(&dbias) : 0, 0, 0, addr(&dy), s->dy_row_stride,
                                addr(&mask), s->rows, s->cols, s->dtype, s->bias_dtype, s->scale);
    if (CHECK(st == OK, "%s: status %d (%s)", what, st, fo_last_error())) {
        double *want_dx = calloc((size_t)n + 1, sizeof(double));
        double *want_dbias = calloc((size_t)s->cols + 1, sizeof(double));
        for (int64_t r = 0; r < s->rows; r++)
            for (int64_t c = 0; c < s->cols; c++) {
                int m = (mask.data[r * row_bytes + c / 8] >> (c % 8)) & 1u;
                double g = m ? get(dy.data, r * dy_stride + c, s->dtype) : 0.0;
                want_dx[r * s->cols + c] = g * (double)s->scale;
                want_dbias[c] += g; /* exact: dyadic values */
            }
        char label[200];
        snprintf(label, sizeof label, "%s: dx", what);
        if (s->with_dx)
            check_output(label, &dx, want_dx, NULL, n, s->dtype);
        else
            CHECK(untouched(&dx), "%s: dx not asked for, but written", what);
        snprintf(label, sizeof label, "%s: dbias", what);
        if (s->with_dbias)
            check_output(label, &dbias, want_dbias, NULL, s->cols, s->bias_dtype);
        else
            CHECK(untouched(&dbias), "%s: dbias not asked for, but written", what);
        free(want_dx);
        free(want_dbias);
    }
    CHECK(guards_intact(&dy) && guards_intact(&mask), "%s: an input was written", what);
    guarded_free(&dy);
    guarded_free(&mask);
    guarded_free(&dx);
    guarded_free(&dbias);
}

/* The mask the forward pass writes is the one the backward pass reads:
 * dx = dy * scale where y > 0, else 0. */
static void test_relu_round_trip(int dtype, int bias_dtype) {
    enum { R = 6, C = 19 };
    uint64_t rng = 77;
    const float scale = -1.5f;
    guarded x = random_input(&rng, dtype, R, C, C, 0, 1);
    guarded bias = random_input(&rng, bias_dtype, 1, C, 0, 0, 1);
    guarded dy = random_input(&rng, dtype, R, C, C, 0, 1);
    guarded y = guarded_new(R * C * dtype_size(dtype), 0),
            dx = guarded_new(R * C * dtype_size(dtype), 0),
            mask = guarded_new(R * mask_row_bytes(C), 0);
    int st = relu_forward_call(CPU, 0, 0, addr(&y), addr(&mask), addr(&x), C, addr(&bias), R, C,
                               dtype, bias_dtype, scale);
    int st2 = relu_backward_call(CPU, 0, 0, addr(&dx), 0, 0, 0, addr(&dy), C, addr(&mask), R, C,
                                 dtype, bias_dtype, scale);
    if (CHECK(st == OK && st2 == OK, "round trip %s: statuses %d, %d (%s)", dtype_label(dtype), st,
              st2, fo_last_error())) {
        double want[R * C];
        for (int i = 0; i < R * C; i++)
            want[i] = get(y.data, i, dtype) > 0.0 ? get(dy.data, i, dtype) * scale : 0.0;
        check_output("relu forward then backward: dx", &dx, want, NULL, R * C, dtype);
    }
    guarded_free(&x);
    guarded_free(&bias);
    guarded_free(&dy);
    guarded_free(&y);
    guarded_free(&dx);
    guarded_free(&mask);
}

static void test_relu_backward_values(void) {
    section("fo_bias_scale_relu_backward values (CPU)");
    static const relu_backward_setup setups[] = {
        /* dtype, bias_dtype, rows, cols, dy_row_stride, dx, dbias, scale,
         * offset */
        {F32, F32, 7, 13, 16, 1, 1, 0.75f, 0},
        {F32, F32, 300, 9, 9, 1, 1, -2.0f, 1}, /* many rows summed */
        {F32, F32, 5, 20, 0, 1, 1, 1.0f, 0}, /* dy broadcast over rows */
        {F32, F32, 4, 12, 5, 1, 1, 1.0f, 0}, /* overlapping dy rows */
        {F32, F32, 3, 10, 10, 1, 0, 2.0f, 0}, /* dx only */
        {F32, F32, 3, 10, 10, 0, 1, 2.0f, 0}, /* dbias only */
        {F32, F32, 1, 1000, -3, 1, 1, 0.5f, 0}, /* one row, stride ignored; chunks */
        {F64, F64, 3, 300, 305, 1, 1, 0.5f, 1}, /* several CPU chunks */
        {F16, F16, 4, 21, 21, 1, 1, 1.5f, 1},
        {F16, F32, 4, 21, 24, 1, 1, 1.0f, 0}, /* f32 dbias with an f16 dy */
        {BF16, F32, 6, 17, 17, 1, 1, 0.75f, 0}, /* f32 dbias with a bf16 dy */
        {BF16, F32, 64, 3, 3, 0, 1, 1.0f, 0}, /* its sums need f32's bits */
        {BF16, BF16, 50, 11, 11, 1, 1, 1.0f, 1}, /* dbias rounds to bf16 */
    };
    for (size_t i = 0; i < COUNT(setups); i++) run_relu_backward(&setups[i], 2000 + i);
    test_relu_round_trip(F32, F32);
    test_relu_round_trip(BF16, F32);
    test_relu_round_trip(F16, F16);
}

/* ========================================================================
 * fo_square_forward / fo_square_backward values
 * ======================================================================== */

typedef struct square_setup {
    int dtype;
    int64_t rows, cols, x_row_stride, dy_row_stride;
    size_t offset;
} square_setup;

/* Any input will do: x * x and 2 * x * dy are exact in double for every
 * dtype but f64 (and computed the same way for f64), so the output is the
 * exact value rounded once, bit for bit. */
static void run_square(const square_setup *s, uint64_t seed) {
    char what[160];
    uint64_t rng = seed;
    int64_t n = s->rows * s->cols;
    int64_t xs = s->rows > 1 ? s->x_row_stride : 0, ds = s->rows > 1 ? s->dy_row_stride : 0;
    guarded x = random_input(&rng, s->dtype, s->rows, s->cols, s->x_row_stride, s->offset, 0);
    guarded dy = random_input(&rng, s->dtype, s->rows, s->cols, s->dy_row_stride, s->offset, 0);
    guarded out = new_operand(s->dtype, n, s->offset);
    double *want = malloc(sizeof(double) * (size_t)(n + 1));

    snprintf(what, sizeof what, "square forward %s %" PRId64 " x %" PRId64 " stride %" PRId64,
             dtype_label(s->dtype), s->rows, s->cols, s->x_row_stride);
    int st = square_forward_call(CPU, 0, 0, addr(&out), addr(&x), s->x_row_stride, s->rows, s->cols,
                                 s->dtype);
    if (CHECK(st == OK, "%s: status %d (%s)", what, st, fo_last_error())) {
        for (int64_t r = 0; r < s->rows; r++)
            for (int64_t c = 0; c < s->cols; c++) {
                double v = get(x.data, r * xs + c, s->dtype);
                want[r * s->cols + c] = v * v;
            }
        check_output(what, &out, want, NULL, n, s->dtype);
    }

    guarded_fill(&out, POISON);
    snprintf(what, sizeof what,
             "square backward %s %" PRId64 " x %" PRId64 " strides dy %" PRId64 " x %" PRId64,
             dtype_label(s->dtype), s->rows, s->cols, s->dy_row_stride, s->x_row_stride);
    st = square_backward_call(CPU, 0, 0, addr(&out), addr(&dy), s->dy_row_stride, addr(&x),
                              s->x_row_stride, s->rows, s->cols, s->dtype);
    if (CHECK(st == OK, "%s: status %d (%s)", what, st, fo_last_error())) {
        for (int64_t r = 0; r < s->rows; r++)
            for (int64_t c = 0; c < s->cols; c++)
                want[r * s->cols + c] =
                    2.0 * get(x.data, r * xs + c, s->dtype) * get(dy.data, r * ds + c, s->dtype);
        check_output(what, &out, want, NULL, n, s->dtype);
    }
    CHECK(guards_intact(&x) && guards_intact(&dy), "%s: an input was written", what);
    free(want);
    guarded_free(&x);
    guarded_free(&dy);
    guarded_free(&out);
}

/* One element, given and expected as bits. */
typedef struct bits_case {
    const char *why;
    int dtype;
    int backward; /* 0: y = x * x; 1: dx = 2 * x * dy */
    uint16_t x, dy, want;
    int want_nan; /* any NaN will do */
} bits_case;

static void test_square_bits(void) {
    section("square: float16/bfloat16 conversions, case by case");
    static const bits_case cases[] = {
        /* forward: y = x * x */
        {"f16 1.5^2 = 2.25", F16, 0, 0x3E00, 0, 0x4080, 0},
        {"bf16 1.5^2 = 2.25", BF16, 0, 0x3FC0, 0, 0x4010, 0},
        {"bf16 3^2 = 9", BF16, 0, 0x4040, 0, 0x4110, 0},
        {"bf16 (1+2^-7)^2 = 1+2^-6+2^-14 rounds down", BF16, 0, 0x3F81, 0, 0x3F82, 0},
        {"bf16 17^2 = 289: a tie of 288 and 290, to even 288", BF16, 0, 0x4188, 0, 0x4390, 0},
        {"bf16 1.4140625^2 = 1.99957... rounds up to 2", BF16, 0, 0x3FB5, 0, 0x4000, 0},
        {"bf16 (2^64)^2 overflows to +inf", BF16, 0, 0x5F80, 0, 0x7F80, 0},
        {"bf16 NaN stays NaN", BF16, 0, 0x7FC0, 0, 0, 1},
        {"bf16 signalling NaN stays NaN", BF16, 0, 0x7F81, 0, 0, 1},
        {"bf16 -inf^2 = +inf", BF16, 0, 0xFF80, 0, 0x7F80, 0},
        {"f16 300^2 = 90000 > 65504 overflows to +inf", F16, 0, 0x5CB0, 0, 0x7C00, 0},
        {"f16 (-300)^2 overflows to +inf", F16, 0, 0xDCB0, 0, 0x7C00, 0},
        {"f16 255.875^2 = 65472.015625 rounds to 65472", F16, 0, 0x5BFF, 0, 0x7BFE, 0},
        {"f16 (2^-10)^2 = 16 * 2^-24, subnormal", F16, 0, 0x1400, 0, 0x0010, 0},
        {"f16 (2^-12)^2 = 2^-24, the smallest subnormal", F16, 0, 0x0C00, 0, 0x0001, 0},
        {"f16 (1.5*2^-12)^2 = 2.25 * 2^-24 rounds to 2 * 2^-24", F16, 0, 0x0E00, 0, 0x0002, 0},
        {"f16 (1.5*2^-13)^2 = 0.5625 * 2^-24 rounds up to 2^-24", F16, 0, 0x0A00, 0, 0x0001, 0},
        {"f16 (2^-13)^2 = 2^-26 underflows to 0", F16, 0, 0x0800, 0, 0x0000, 0},
        {"f16 (-0)^2 = +0", F16, 0, 0x8000, 0, 0x0000, 0},
        {"f16 NaN stays NaN", F16, 0, 0x7E00, 0, 0, 1},
        {"f16 signalling NaN stays NaN (not inf)", F16, 0, 0x7C01, 0, 0, 1},
        {"f16 negative NaN stays NaN", F16, 0, 0xFE00, 0, 0, 1},
        {"f16 inf^2 = inf", F16, 0, 0x7C00, 0, 0x7C00, 0},
        /* backward: dx = 2 * x * dy */
        {"bf16 2*129*0.75 = 193.5: a tie of 193 and 194, to even 194 (up)", BF16, 1, 0x4301, 0x3F40,
         0x4342, 0},
        {"bf16 2*131*0.75 = 196.5: a tie of 196 and 197, to even 196 (down)", BF16, 1, 0x4303,
         0x3F40, 0x4344, 0},
        {"bf16 2*1.5*-0.5 = -1.5", BF16, 1, 0x3FC0, 0xBF00, 0xBFC0, 0},
        {"f16 2*(1+2^-10)*0.75: a tie, to even (up)", F16, 1, 0x3C01, 0x3A00, 0x3E02, 0},
        {"f16 2*(1+3*2^-10)*0.75: a tie, to even (down)", F16, 1, 0x3C03, 0x3A00, 0x3E04, 0},
        {"f16 2*256*256 overflows to +inf", F16, 1, 0x5C00, 0x5C00, 0x7C00, 0},
        {"f16 2*2^-24*0.5 = 2^-24, subnormal kept", F16, 1, 0x0001, 0x3800, 0x0001, 0},
        /* subnormal ties (squares never give one) */
        {"f16 2*2^-24*0.25 = 0.5 * 2^-24: a tie of 0 and 2^-24, to 0", F16, 1, 0x0001, 0x3400,
         0x0000, 0},
        {"f16 2*3*2^-24*0.25 = 1.5 * 2^-24: a tie, to even 2 (up)", F16, 1, 0x0003, 0x3400, 0x0002,
         0},
        {"f16 2*5*2^-24*0.25 = 2.5 * 2^-24: a tie, to even 2 (down)", F16, 1, 0x0005, 0x3400,
         0x0002, 0},
        {"f16 2*inf*0 = NaN", F16, 1, 0x7C00, 0x0000, 0, 1},
    };
    guarded x = guarded_new(2, 0), dy = guarded_new(2, 0), out = guarded_new(2, 0);
    for (size_t i = 0; i < COUNT(cases); i++) {
        const bits_case *c = &cases[i];
        put_bits(x.data, 0, c->dtype, c->x);
        put_bits(dy.data, 0, c->dtype, c->dy);
        guarded_fill(&out, POISON);
        int st = c->backward
                     ? square_backward_call(CPU, 0, 0, addr(&out), addr(&dy), 1, addr(&x), 1, 1, 1,
                                            c->dtype)
                     : square_forward_call(CPU, 0, 0, addr(&out), addr(&x), 1, 1, 1, c->dtype);
        if (!CHECK(st == OK, "%s: status %d (%s)", c->why, st, fo_last_error())) continue;
        uint16_t got = (uint16_t)get_bits(out.data, 0, c->dtype);
        if (c->want_nan)
            CHECK(bits_are_nan(got, c->dtype), "%s: got 0x%04x, want a NaN", c->why, got);
        else
            CHECK(got == c->want, "%s: got 0x%04x, want 0x%04x", c->why, got, c->want);
        CHECK(guards_intact(&out), "%s: written out of bounds", c->why);

        /* the table and the reference in harness.c must agree */
        double xv = half_decode(c->x, c->dtype), dv = half_decode(c->dy, c->dtype);
        uint16_t ref = half_encode(c->backward ? 2.0 * xv * dv : xv * xv, c->dtype);
        CHECK(c->want_nan ? bits_are_nan(ref, c->dtype) : ref == c->want,
              "%s: the test's own reference gives 0x%04x", c->why, ref);
    }
    guarded_free(&x);
    guarded_free(&dy);
    guarded_free(&out);
}

/* All 65536 bit patterns of a half dtype as one 256 x 256 operand.
 *  - backward with dy = 0.5: 2 * x * 0.5 = x exactly, so each output has its
 *    input's bits (NaN: any NaN): both conversions are exact and round-trip;
 *  - forward: x * x is exact in double, so each output is it rounded once,
 *    as the reference in harness.c rounds it. */
static void test_square_exhaustive(int dtype) {
    char what[96];
    snprintf(what, sizeof what, "square, every %s bit pattern", dtype_label(dtype));
    section(what);
    enum { N = 65536 };
    guarded x = guarded_new(2 * N, 0), dy = guarded_new(2 * N, 0), out = guarded_new(2 * N, 0);
    const uint16_t half = half_encode(0.5, dtype);
    for (int i = 0; i < N; i++) {
        put_bits(x.data, i, dtype, (uint64_t)i);
        put_bits(dy.data, i, dtype, half);
    }
    /* the reference round-trips too (else the checks below mean little) */
    int64_t bad = 0;
    for (int i = 0; i < N; i++)
        if (!bits_are_nan((uint64_t)i, dtype) &&
            half_encode(half_decode((uint16_t)i, dtype), dtype) != i)
            bad++;
    CHECK(bad == 0, "%s: the test's reference fails to round-trip %" PRId64 " values", what, bad);

    /* Two fills: the element whose correct output equals the poison pattern
     * is seen written by the other run. */
    static const unsigned char fills[] = {POISON, 0x5A};
    for (size_t f = 0; f < COUNT(fills); f++) {
        guarded_fill(&out, fills[f]);
        int st = square_backward_call(CPU, 0, 0, addr(&out), addr(&dy), 256, addr(&x), 256, 256,
                                      256, dtype);
        if (!CHECK(st == OK, "%s backward: status %d (%s)", what, st, fo_last_error())) break;
        bad = 0;
        for (int i = 0; i < N; i++) {
            uint64_t got = get_bits(out.data, i, dtype);
            int ok =
                bits_are_nan((uint64_t)i, dtype) ? bits_are_nan(got, dtype) : got == (uint64_t)i;
            if (!ok && ++bad <= 5)
                CHECK(0, "%s backward with dy 0.5: 0x%04x gave 0x%04" PRIx64, what, i, got);
        }
        CHECK(bad == 0, "%s backward: %" PRId64 " patterns wrong", what, bad);
        CHECK(guards_intact(&out), "%s backward: written out of bounds", what);
    }

    guarded_fill(&out, POISON);
    int st = square_forward_call(CPU, 0, 0, addr(&out), addr(&x), 256, 256, 256, dtype);
    if (CHECK(st == OK, "%s forward: status %d (%s)", what, st, fo_last_error())) {
        bad = 0;
        for (int i = 0; i < N; i++) {
            double v = half_decode((uint16_t)i, dtype);
            uint16_t want = half_encode(v * v, dtype);
            uint64_t got = get_bits(out.data, i, dtype);
            int ok = isnan(v) ? bits_are_nan(got, dtype) : got == want;
            if (!ok && ++bad <= 5)
                CHECK(0, "%s forward: 0x%04x (%g) squared gave 0x%04" PRIx64 ", want 0x%04x", what,
                      i, v, got, want);
        }
        CHECK(bad == 0, "%s forward: %" PRId64 " patterns wrong", what, bad);
        CHECK(guards_intact(&out), "%s forward: written out of bounds", what);
    }
    guarded_free(&x);
    guarded_free(&dy);
    guarded_free(&out);
}

static void test_square_values(void) {
    section("fo_square_forward / fo_square_backward values (CPU)");
    static const square_setup setups[] = {
        /* dtype, rows, cols, x_row_stride, dy_row_stride, offset */
        {F32, 7, 13, 13, 13, 0},       {F32, 5, 37, 40, 0, 1}, /* strided x, dy broadcast over rows
                                                                */
        {F32, 3, 1001, 1001, 1003, 0}, /* several CPU chunks */
        {F32, 4, 10, 3, 7, 0}, /* overlapping rows */
        {F32, 1, 17, -4, -9, 0}, /* one row: strides ignored */
        {F64, 3, 300, 300, 310, 1},    {F64, 2, 5, 0, 5, 0},     {F16, 4, 21, 24, 21, 1},
        {F16, 2, 520, 520, 520, 0},    {BF16, 4, 21, 21, 30, 0}, {BF16, 6, 8, 8, 0, 1},
    };
    for (size_t i = 0; i < COUNT(setups); i++) run_square(&setups[i], 3000 + i);
}

/* ========================================================================
 * fo_reduce_sum values
 * ======================================================================== */

/* Sums x (numel elements of dtype, at `offset` past a 64-byte boundary) and
 * checks out against want (tolerance tol, or the exact bits when tol < 0).
 * Sums twice: a fixed order gives the same bits both times. */
static void check_reduce_sum(const char *what, const guarded *x, int64_t numel, int dtype,
                             double want, double tol) {
    guarded out = guarded_new(dtype_size(dtype), 0);
    int st = reduce_sum_call(CPU, 0, 0, addr(&out), 0, 0, numel ? addr(x) : 0, numel, dtype);
    if (CHECK(st == OK, "%s: status %d (%s)", what, st, fo_last_error())) {
        double tols[1] = {tol};
        check_output(what, &out, &want, tol < 0 ? NULL : tols, 1, dtype);
        uint64_t first = get_bits(out.data, 0, dtype);
        guarded_fill(&out, 0x5A);
        st = reduce_sum_call(CPU, 0, 0, addr(&out), 0, 0, numel ? addr(x) : 0, numel, dtype);
        CHECK(st == OK && get_bits(out.data, 0, dtype) == first, "%s: a second run gave other bits",
              what);
    }
    CHECK(guards_intact(x), "%s: x was written", what);
    guarded_free(&out);
}

static void test_reduce_sum_values(void) {
    section("fo_reduce_sum values (CPU)");
    static const int64_t sizes[] = {0, 1, 7, 1000003};
    for (size_t d = 0; d < COUNT(ALL_DTYPES); d++) {
        int dt = ALL_DTYPES[d];
        for (size_t s = 0; s < COUNT(sizes); s++) {
            int64_t n = sizes[s];
            uint64_t rng = 4000 + s;
            /* aligned to the element, not to 16 bytes, for the odd sizes */
            guarded x = guarded_new((size_t)n * dtype_size(dt), s % 2 ? dtype_size(dt) : 0);
            /* small multiples of 1/2 (integers for f32/f64): every partial
             * sum is exact in fp32, so any summation order gives the exact
             * sum, rounded once to the dtype */
            double sum = 0.0;
            for (int64_t i = 0; i < n; i++) {
                double v = dt == F32 || dt == F64 ? (double)rng_int(&rng, -8, 8)
                                                  : (double)rng_int(&rng, -4, 4) / 2.0;
                put(x.data, i, dt, v);
                sum += v;
            }
            char what[96];
            snprintf(what, sizeof what, "reduce_sum of %" PRId64 " %s", n, dtype_label(dt));
            check_reduce_sum(what, &x, n, dt, sum, -1.0);
            guarded_free(&x);
        }
    }

    /* Accumulated wider than f16: 60000 + 60000 - 60000 = 60000, although
     * 120000 is past the f16 range. */
    {
        guarded x = guarded_new(3 * 2, 0);
        put(x.data, 0, F16, 60000.0);
        put(x.data, 1, F16, 60000.0);
        put(x.data, 2, F16, -60000.0);
        check_reduce_sum("reduce_sum f16 60000 + 60000 - 60000", &x, 3, F16, 60000.0, -1.0);
        guarded_free(&x);
    }
    /* A sum rounded to bf16 at the end: 1000003 ones -> 999424 (0x4974). */
    {
        enum { N = 1000003 };
        guarded x = guarded_new(N * 2, 0);
        for (int i = 0; i < N; i++) put(x.data, i, BF16, 1.0);
        CHECK(half_encode(1000003.0, BF16) == 0x4974, "reference: bf16(1000003)");
        check_reduce_sum("reduce_sum of 1000003 bf16 ones", &x, N, BF16, 1000003.0, -1.0);
        guarded_free(&x);
    }
    /* Full-precision values: within a few units of the fp32 (f64) rounding
     * of sum |x| (the header promises fp32 accumulation, in some fixed
     * order; the CPU may do better). */
    for (int k = 0; k < 2; k++) {
        int dt = k ? F64 : F32;
        enum { N = 1000003 };
        uint64_t rng = 4100 + k;
        guarded x = guarded_new(N * dtype_size(dt), 0);
        double sum = 0.0, abs_sum = 0.0;
        for (int i = 0; i < N; i++) {
            put(x.data, i, dt, rng_uniform(&rng));
            double v = get(x.data, i, dt);
            sum += v;
            abs_sum += fabs(v);
        }
        char what[96];
        snprintf(what, sizeof what, "reduce_sum of %d full-precision %s", N, dtype_label(dt));
        check_reduce_sum(what, &x, N, dt, sum, (dt == F64 ? 0x1p-47 : 0x1p-18) * abs_sum);
        guarded_free(&x);
    }
}

/* ========================================================================
 * The CPU kernels' threads
 * ======================================================================== */

/* The outputs of relu(x * 0.5 + bias) forward (y, mask), its backward (dx,
 * dbias) and reduce_sum of x, f64 (the CPU adds in double: f32 outputs
 * would round away a sum taken in another order), on `threads` threads,
 * into out (dense: y, dx, dbias, the sum, then the mask). Odd sizes: each
 * row ends in a short piece. */
enum { SPLIT_ROWS = 1031, SPLIT_COLS = 1029 };
static int split_outputs(int threads, const guarded *x, const guarded *bias, const guarded *dy,
                         unsigned char *out) {
    const int64_t n = (int64_t)SPLIT_ROWS * SPLIT_COLS;
    unsigned char *y = out, *dx = y + n * 8, *dbias = dx + n * 8;
    unsigned char *sum = dbias + SPLIT_COLS * 8, *mask = sum + 8; /* doubles first */
    fo_set_cpu_threads(threads);
    int st = relu_forward_call(CPU, 0, 0, (uintptr_t)y, (uintptr_t)mask, addr(x), SPLIT_COLS,
                               addr(bias), SPLIT_ROWS, SPLIT_COLS, F64, F64, 0.5);
    if (st == OK)
        st = relu_backward_call(CPU, 0, 0, (uintptr_t)dx, (uintptr_t)dbias, 0, 0, addr(dy),
                                SPLIT_COLS, (uintptr_t)mask, SPLIT_ROWS, SPLIT_COLS, F64, F64, 0.5);
    if (st == OK) st = reduce_sum_call(CPU, 0, 0, (uintptr_t)sum, 0, 0, addr(x), n, F64);
    fo_set_cpu_threads(0);
    return CHECK(st == OK, "%d threads: status %d (%s)", threads, st, fo_last_error());
}

static void test_cpu_threads(void) {
    section("fo_set_cpu_threads, and the same bits on any number of threads");
    fo_set_cpu_threads(0);
    const int usable = fo_get_cpu_threads();
    CHECK(usable >= 1, "the default is %d threads", usable);
    fo_set_cpu_threads(3);
    CHECK(fo_get_cpu_threads() == 3, "set to 3, got %d", fo_get_cpu_threads());
    fo_set_cpu_threads(-1);
    CHECK(fo_get_cpu_threads() == usable, "a count below 1 gave %d, not the default %d",
          fo_get_cpu_threads(), usable);

    /* the sums (dbias down the rows, reduce_sum) are where an order could
     * follow the split: 1, 2 and 7 threads asked for (the work is worth 4
     * or 5) must give the same bytes */
    const int64_t n = (int64_t)SPLIT_ROWS * SPLIT_COLS;
    const size_t bytes =
        (size_t)(n * 8 + n * 8 + SPLIT_COLS * 8 + 8 + SPLIT_ROWS * ((SPLIT_COLS + 7) / 8));
    guarded x = guarded_new((size_t)n * 8, 0), dy = guarded_new((size_t)n * 8, 0);
    guarded bias = guarded_new(SPLIT_COLS * 8, 0);
    uint64_t rng = 5000;
    for (int64_t i = 0; i < n; i++) {
        put(x.data, i, F64, rng_uniform(&rng));
        put(dy.data, i, F64, rng_uniform(&rng));
    }
    for (int64_t i = 0; i < SPLIT_COLS; i++) put(bias.data, i, F64, rng_uniform(&rng));
    unsigned char *one = malloc(bytes), *many = malloc(bytes);
    if (CHECK(one && many, "out of memory") && split_outputs(1, &x, &bias, &dy, one)) {
        static const int counts[] = {2, 7};
        for (size_t k = 0; k < COUNT(counts); k++) {
            memset(many, 0x5A, bytes);
            if (split_outputs(counts[k], &x, &bias, &dy, many))
                CHECK(memcmp(one, many, bytes) == 0,
                      "relu forward/backward and reduce_sum: other bytes on %d threads than on 1",
                      counts[k]);
        }
    }
    free(one);
    free(many);
    guarded_free(&x);
    guarded_free(&dy);
    guarded_free(&bias);
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    printf("libfused_ops %d (ABI %d), CUDA %s%s%s\n", fo_version(), fo_abi_version(),
           fo_cuda_built() ? "built: " : "not built", fo_cuda_archs(),
           getenv("FO_TEST_HAS_GPU") ? " (FO_TEST_HAS_GPU set)" : "");

    E_OUT = guarded_new(256, 0);
    E_OUT2 = guarded_new(256, 0);
    E_IN = guarded_new(256, 0);
    E_IN2 = guarded_new(256, 0);

    test_last_error(); /* first: it needs a thread with no failing call yet */
    test_versions();
    test_status_strings();
    test_last_error_thread_local();

    test_errors_relu_forward();
    test_errors_relu_backward();
    test_errors_reduce_sum_workspace_query();
    test_errors_square_forward();
    test_errors_square_backward();
    test_errors_reduce_sum();
    test_errors_geglu();
    test_errors_clamped_swiglu();
    test_errors_dyt();
    test_errors_quantize_fp8();
    test_errors_swiglu_fp8();
    test_errors_norm_fp8();
    test_errors_rope();
    test_struct_size();
    test_empty_operands();
    test_cuda_device();

    test_relu_forward_values();
    test_relu_backward_values();
    test_square_bits();
    test_square_exhaustive(F16);
    test_square_exhaustive(BF16);
    test_square_values();
    test_reduce_sum_values();
    test_geglu_values();
    test_clamped_swiglu_values();
    test_rope_values();
    test_rope_one_tensor();
    test_cpu_threads();

    guarded_free(&E_OUT);
    guarded_free(&E_OUT2);
    guarded_free(&E_IN);
    guarded_free(&E_IN2);
    return finish();
}
