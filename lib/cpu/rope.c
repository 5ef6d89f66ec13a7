/* cpu/rope.c: the rotary position embedding of q and k and its transpose: the CPU kernels, compiled
 * once for each instruction set (cpu_kernels.h) and chosen at load. */
#include "cpu_convert.h"
#include "cpu_kernels.h"
#include "cpu_parallel.h"

/* The pairs [i0, i0 + n) of the row at `at`: lo[i] and hi[i] are elements
 * at + i0 + i and at + half + i0 + i (halves), or at + 2 (i0 + i) and the
 * one after it (interleaved). */
static void load_pairs(double *lo, double *hi, const void *src, int64_t at, int64_t i0, int64_t n,
                       int64_t half, int dtype, int interleaved) {
    if (!interleaved) {
        fo_cpu_load(lo, src, at + i0, n, dtype);
        fo_cpu_load(hi, src, at + half + i0, n, dtype);
        return;
    }
    double both[2 * CPU_CHUNK];
    fo_cpu_load(both, src, at + 2 * i0, 2 * n, dtype);
    for (int64_t i = 0; i < n; i++) lo[i] = both[2 * i], hi[i] = both[2 * i + 1];
}

static void store_pairs(void *dst, int64_t at, const double *lo, const double *hi, int64_t i0,
                        int64_t n, int64_t half, int dtype, int interleaved) {
    if (!interleaved) {
        fo_cpu_store(dst, at + i0, lo, n, dtype);
        fo_cpu_store(dst, at + half + i0, hi, n, dtype);
        return;
    }
    double both[2 * CPU_CHUNK];
    for (int64_t i = 0; i < n; i++) both[2 * i] = lo[i], both[2 * i + 1] = hi[i];
    fo_cpu_store(dst, at + 2 * i0, both, 2 * n, dtype);
}

/* The heads of one tensor at one token: the rotated pairs a CPU_CHUNK at a
 * time, each chunk's cos and sin read once for every head, then the
 * dimensions past rotary_dim copied. */
static void rotate_token(const fo_rope_params *a, const fo_rope_tensor *x, int64_t b, int64_t t,
                         const double *c_lo, const double *c_hi, const double *s_lo,
                         const double *s_hi, int64_t i0, int64_t n) {
    double lo[CPU_CHUNK], hi[CPU_CHUNK], out_lo[CPU_CHUNK], out_hi[CPU_CHUNK];
    const int64_t half = a->rotary_dim / 2;
    for (int64_t head = 0; head < x->heads; head++) {
        const int64_t in =
            b * x->in_batch_stride + head * x->in_head_stride + t * x->in_token_stride;
        const int64_t out =
            b * x->out_batch_stride + head * x->out_head_stride + t * x->out_token_stride;
        load_pairs(lo, hi, x->in, in, i0, n, half, a->dtype, a->interleaved);
        for (int64_t i = 0; i < n; i++) {
            if (a->backward) {
                out_lo[i] = lo[i] * c_lo[i] + hi[i] * s_hi[i];
                out_hi[i] = hi[i] * c_hi[i] - lo[i] * s_lo[i];
            } else {
                out_lo[i] = lo[i] * c_lo[i] - hi[i] * s_lo[i];
                out_hi[i] = hi[i] * c_hi[i] + lo[i] * s_hi[i];
            }
        }
        store_pairs(x->out, out, out_lo, out_hi, i0, n, half, a->dtype, a->interleaved);
    }
}

static void pass_token(const fo_rope_params *a, const fo_rope_tensor *x, int64_t b, int64_t t) {
    double v[CPU_CHUNK];
    for (int64_t head = 0; head < x->heads; head++) {
        const int64_t in =
            b * x->in_batch_stride + head * x->in_head_stride + t * x->in_token_stride;
        const int64_t out =
            b * x->out_batch_stride + head * x->out_head_stride + t * x->out_token_stride;
        for (int64_t j = a->rotary_dim; j < a->head_dim; j += CPU_CHUNK) {
            const int64_t n = a->head_dim - j < CPU_CHUNK ? a->head_dim - j : CPU_CHUNK;
            fo_cpu_load(v, x->in, in + j, n, a->dtype);
            fo_cpu_store(x->out, out + j, v, n, a->dtype);
        }
    }
}

/* Tokens [k0, k1) of the batch x tokens tokens. */
static void rope_tokens(const void *ctx, int64_t k0, int64_t k1) {
    const fo_rope_params *a = ctx;
    double c_lo[CPU_CHUNK], c_hi[CPU_CHUNK], s_lo[CPU_CHUNK], s_hi[CPU_CHUNK];
    const int64_t half = a->rotary_dim / 2;
    const fo_rope_tensor *tensors[2] = {&a->q, &a->k};
    for (int64_t k = k0; k < k1; k++) {
        const int64_t b = k / a->tokens, t = k % a->tokens;
        /* (without rotation the tables' strides are unchecked: not used) */
        const int64_t cos_row = half ? b * a->cos_batch_stride + t * a->cos_token_stride : 0;
        const int64_t sin_row = half ? b * a->sin_batch_stride + t * a->sin_token_stride : 0;
        for (int64_t i0 = 0; i0 < half; i0 += CPU_CHUNK) {
            const int64_t n = half - i0 < CPU_CHUNK ? half - i0 : CPU_CHUNK;
            load_pairs(c_lo, c_hi, a->cos, cos_row, i0, n, half, a->cos_dtype, a->interleaved);
            load_pairs(s_lo, s_hi, a->sin, sin_row, i0, n, half, a->cos_dtype, a->interleaved);
            for (int x = 0; x < 2; x++)
                if (tensors[x]->out)
                    rotate_token(a, tensors[x], b, t, c_lo, c_hi, s_lo, s_hi, i0, n);
        }
        for (int x = 0; x < 2; x++)
            if (tensors[x]->out) pass_token(a, tensors[x], b, t);
    }
}

void FO_CPU(rope)(const fo_rope_params *a) {
    const int64_t per_token = (a->q.out ? a->q.heads : 0) + (a->k.out ? a->k.heads : 0);
    fo_cpu_parallel(a->batch * a->tokens, per_token * a->head_dim, rope_tokens, a);
}
