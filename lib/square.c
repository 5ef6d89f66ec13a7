/* square.c: y = x * x and its gradient dx = 2 * x * dy: argument checks,
 * CPU/CUDA dispatch and the CPU implementation. */
#include "cpu_convert.h"
#include "cpu_parallel.h"
#include "internal.h"

/* A float32 piece straight from and to memory, the same bits as the
 * generic path: x * x rounds once in float as in double, and 2 * x * dy is
 * taken in double (in float, 2 * x can overflow where the product does not). */
static void square_piece_f32(const fo_square_args *a, int64_t r, int64_t c0,
                             int64_t n) {
    const float *restrict x = (const float *)a->x + r * a->x_row_stride + c0;
    float *restrict out = (float *)a->out + r * a->cols + c0;
    if (a->dy) {
        const float *restrict dy = (const float *)a->dy + r * a->dy_row_stride + c0;
        for (int64_t i = 0; i < n; i++) out[i] = (float)(2.0 * x[i] * dy[i]);
    } else {
        for (int64_t i = 0; i < n; i++) out[i] = x[i] * x[i];
    }
}

/* Pieces [k0, k1) of the rows x fo_cpu_chunks(cols) pieces (each
 * independent); one loop for both passes: dy == 0 means forward. */
static void square_pieces(const void *ctx, int64_t k0, int64_t k1) {
    const fo_square_args *a = ctx;
    double x[CPU_CHUNK], dy[CPU_CHUNK], out[CPU_CHUNK];
    const int64_t chunks = fo_cpu_chunks(a->cols);
    for (int64_t k = k0; k < k1; k++) {
        const int64_t r = k / chunks, c0 = k % chunks * CPU_CHUNK;
        const int64_t n = a->cols - c0 < CPU_CHUNK ? a->cols - c0 : CPU_CHUNK;
        if (a->dtype == FO_DTYPE_F32) {
            square_piece_f32(a, r, c0, n);
            continue;
        }
        fo_cpu_load(x, a->x, r * a->x_row_stride + c0, n, a->dtype);
        if (a->dy) {
            fo_cpu_load(dy, a->dy, r * a->dy_row_stride + c0, n, a->dtype);
            for (int64_t i = 0; i < n; i++) out[i] = 2.0 * x[i] * dy[i];
        } else {
            for (int64_t i = 0; i < n; i++) out[i] = x[i] * x[i];
        }
        fo_cpu_store(a->out, r * a->cols + c0, out, n, a->dtype);
    }
}

static int run(int device_type, int device_index,
               uintptr_t stream, const fo_square_args *a) {
    if (a->rows == 0 || a->cols == 0)
        return FO_OK;
    if (device_type == FO_DEVICE_CUDA)
        return fo_cuda_square(device_index, stream, a);
    fo_cpu_parallel(a->rows * fo_cpu_chunks(a->cols), CPU_CHUNK, square_pieces, a);
    return FO_OK;
}

int fo_square_forward(int device_type, int device_index, uintptr_t stream,
                      uintptr_t y, uintptr_t x, int64_t x_row_stride,
                      int64_t rows, int64_t cols, int dtype) {
    static const char op[] = "fo_square_forward";
    int status;
    if ((status = fo_check_device(op, device_type, device_index)) ||
        (status = fo_check_shape(op, rows, cols)) ||
        (status = fo_check_dtype(op, "dtype", dtype)) ||
        (status = fo_check_operand(op, "y", y, cols, rows, cols, dtype, 0)) ||
        (status = fo_check_operand(op, "x", x, x_row_stride, rows, cols, dtype,
                                   0)))
        return status;
    fo_square_args a = {(void *)y, (const void *)x, x_row_stride, 0, 0,
                        rows, cols, dtype};
    return run(device_type, device_index, stream, &a);
}

int fo_square_backward(int device_type, int device_index, uintptr_t stream,
                       uintptr_t dx, uintptr_t dy, int64_t dy_row_stride,
                       uintptr_t x, int64_t x_row_stride, int64_t rows,
                       int64_t cols, int dtype) {
    static const char op[] = "fo_square_backward";
    int status;
    if ((status = fo_check_device(op, device_type, device_index)) ||
        (status = fo_check_shape(op, rows, cols)) ||
        (status = fo_check_dtype(op, "dtype", dtype)) ||
        (status = fo_check_operand(op, "dx", dx, cols, rows, cols, dtype, 0)) ||
        (status = fo_check_operand(op, "dy", dy, dy_row_stride, rows, cols,
                                   dtype, 0)) ||
        (status = fo_check_operand(op, "x", x, x_row_stride, rows, cols, dtype,
                                   0)))
        return status;
    fo_square_args a = {(void *)dx,  (const void *)x, x_row_stride,
                        (const void *)dy, dy_row_stride, rows, cols, dtype};
    return run(device_type, device_index, stream, &a);
}
