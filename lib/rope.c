/* rope.c: the rotary position embedding of q and k (rotate-half or
 * interleaved pairs, partial rotary) and its transpose: argument checks, CPU/CUDA dispatch
 * and the CPU implementation (double arithmetic, one thread a token, so
 * every thread count gives the same bits). */
#include <inttypes.h>
#include <stdio.h>

#include "cpu_convert.h"
#include "cpu_parallel.h"
#include "cpu/cpu_kernels.h"
#include "internal.h"

/* a * b, or -1 where a or b is negative or the product passes
 * INT64_MAX / 16 (the bound of every byte offset, as fo_check_shape's). */
static int64_t bounded_product(int64_t a, int64_t b) {
    const int64_t limit = INT64_MAX / 16;
    if (a < 0 || b < 0 || a > limit || b > limit || (a > 0 && b > limit / a)) return -1;
    return a * b;
}

/* A strided input of `dims` dimensions of sizes n and strides s (elements):
 * the address (0 where optional), its alignment, strides >= 0, the last 1,
 * and the farthest element within 64-bit byte offsets. An empty operand
 * is not looked at. */
static int check_strided(const char *op, const char *name, uintptr_t address, const int64_t *n,
                         const int64_t *s, int dims, int dtype, int optional) {
    for (int d = 0; d < dims; d++)
        if (n[d] == 0) return FO_OK;
    if (optional && !address) return FO_OK;
    int status;
    if ((status = fo_check_operand(op, name, address, 1, 1, 1, dtype, 0))) return status;
    int64_t extent = 0;
    for (int d = 0; d < dims; d++) {
        if (n[d] <= 1) continue;
        if (s[d] < 0)
            return fo_fail(FO_ERR_INVALID_ARGUMENT,
                           "%s: %s stride %" PRId64 " (dimension %d) is negative", op, name, s[d],
                           d);
        if (d == dims - 1 && s[d] != 1)
            return fo_fail(FO_ERR_INVALID_ARGUMENT,
                           "%s: %s stride %" PRId64
                           " (dimension %d, the last) must be 1: its rows are read as "
                           "contiguous",
                           op, name, s[d], d);
        const int64_t reach = bounded_product(n[d] - 1, s[d]);
        if (reach < 0 || reach > INT64_MAX / 16 - extent)
            return fo_fail(FO_ERR_INVALID_ARGUMENT,
                           "%s: %s stride %" PRId64 " x size %" PRId64
                           " (dimension %d) overflows 64-bit byte offsets",
                           op, name, s[d], n[d], d);
        extent += reach;
    }
    return FO_OK;
}

/* An output placed by strides s (all 0: dense, checked as such by the
 * caller): checked as a strided operand whose elements do not overlap,
 * each stride, smallest first, past the reach of the ones below it. */
static int check_placed(const char *op, const char *name, uintptr_t address, const int64_t *n,
                        const int64_t *s, int dtype) {
    int status;
    if ((status = check_strided(op, name, address, n, s, 4, dtype, 1))) return status;
    int order[4], used = 0;
    for (int d = 0; d < 4; d++) {
        if (n[d] == 0) return FO_OK;
        if (n[d] == 1) continue;
        int at = used++;
        for (; at > 0 && s[order[at - 1]] > s[d]; at--) order[at] = order[at - 1];
        order[at] = d;
    }
    for (int i = 1; i < used; i++) {
        const int64_t below = bounded_product(s[order[i - 1]], n[order[i - 1]]);
        if (below < 0 || s[order[i]] < below)
            return fo_fail(FO_ERR_INVALID_ARGUMENT,
                           "%s: %s strides %" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64
                           " for sizes %" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64
                           " place elements over each other",
                           op, name, s[0], s[1], s[2], s[3], n[0], n[1], n[2], n[3]);
    }
    return FO_OK;
}

static int all_zero(const int64_t *s) { return !s[0] && !s[1] && !s[2] && !s[3]; }

static int check_args(const char *op, const fo_rope_args *c) {
    int status;
    if ((status = fo_check_device(op, c->device_type, c->device_index)) ||
        (status = fo_check_dtype(op, "dtype", c->dtype)) ||
        (status = fo_check_dtype(op, "cos_dtype", c->cos_dtype)))
        return status;
    const int half_dtype = c->dtype == FO_DTYPE_F16 || c->dtype == FO_DTYPE_BF16;
    if (c->cos_dtype != c->dtype && !(half_dtype && c->cos_dtype == FO_DTYPE_F32))
        return fo_fail(FO_ERR_UNSUPPORTED_DTYPE,
                       "%s: cos_dtype %s beside dtype %s: cos and sin take dtype, or "
                       "float32 beside float16 and bfloat16",
                       op, fo_dtype_name(c->cos_dtype), fo_dtype_name(c->dtype));
    if (c->pairs != FO_ROPE_HALVES && c->pairs != FO_ROPE_INTERLEAVED)
        return fo_fail(FO_ERR_INVALID_ARGUMENT,
                       "%s: pairs=%d is neither FO_ROPE_HALVES (0) nor FO_ROPE_INTERLEAVED (1)", op,
                       c->pairs);
    if (c->layout != FO_ROPE_HEADS_FIRST && c->layout != FO_ROPE_TOKENS_FIRST)
        return fo_fail(FO_ERR_INVALID_ARGUMENT,
                       "%s: layout=%d is neither FO_ROPE_HEADS_FIRST (0) nor "
                       "FO_ROPE_TOKENS_FIRST (1)",
                       op, c->layout);
    if (c->batch < 0 || c->tokens < 0 || c->q_heads < 0 || c->k_heads < 0 || c->head_dim < 0)
        return fo_fail(FO_ERR_INVALID_ARGUMENT,
                       "%s: batch=%" PRId64 ", tokens=%" PRId64 ", q_heads=%" PRId64
                       ", k_heads=%" PRId64 " and head_dim=%" PRId64 " must be >= 0",
                       op, c->batch, c->tokens, c->q_heads, c->k_heads, c->head_dim);
    if (c->rotary_dim < 0 || c->rotary_dim % 2 != 0 || c->rotary_dim > c->head_dim)
        return fo_fail(FO_ERR_INVALID_ARGUMENT,
                       "%s: rotary_dim=%" PRId64 " must be even and in [0, head_dim=%" PRId64 "]",
                       op, c->rotary_dim, c->head_dim);
    const int64_t heads[2] = {c->q_heads, c->k_heads};
    const char *names[2] = {"q", "k"};
    const uintptr_t ins[2] = {c->q, c->k}, outs[2] = {c->q_out, c->k_out};
    const int64_t *strides[2] = {c->q_strides, c->k_strides};
    const int64_t *out_strides[2] = {c->q_out_strides, c->k_out_strides};
    for (int x = 0; x < 2; x++) {
        /* the sizes in the tensor's own dimension order */
        const int64_t n[4] = {c->batch, c->layout == FO_ROPE_HEADS_FIRST ? heads[x] : c->tokens,
                              c->layout == FO_ROPE_HEADS_FIRST ? c->tokens : heads[x], c->head_dim};
        const int64_t rows = bounded_product(bounded_product(c->batch, c->tokens), heads[x]);
        char out_name[8];
        snprintf(out_name, sizeof out_name, "%s_out", names[x]);
        if (rows < 0 || bounded_product(rows, c->head_dim) < 0)
            return fo_fail(FO_ERR_INVALID_ARGUMENT,
                           "%s: %s of batch=%" PRId64 " x tokens=%" PRId64 " x heads=%" PRId64
                           " x head_dim=%" PRId64 " overflows 64-bit byte offsets",
                           op, names[x], c->batch, c->tokens, heads[x], c->head_dim);
        if ((all_zero(out_strides[x])
                 ? (status = fo_check_operand(op, out_name, outs[x], c->head_dim, rows, c->head_dim,
                                              c->dtype, 1))
                 : (status = check_placed(op, out_name, outs[x], n, out_strides[x], c->dtype))) ||
            (outs[x] &&
             (status = check_strided(op, names[x], ins[x], n, strides[x], 4, c->dtype, 0))))
            return status;
    }
    const int64_t tables = (c->q_out && c->q_heads) || (c->k_out && c->k_heads) ? c->batch : 0;
    const int64_t n[3] = {tables, c->tokens, c->rotary_dim};
    if ((status = check_strided(op, "cos", c->cos, n, c->cos_strides, 3, c->cos_dtype, 0)) ||
        (status = check_strided(op, "sin", c->sin, n, c->sin_strides, 3, c->cos_dtype, 0)))
        return status;
    return FO_OK;
}

/* One tensor's params: its input and output strides put in (batch, head,
 * token) order; an output without strides is dense in the layout. */
static fo_rope_tensor tensor_params(const fo_rope_args *c, uintptr_t out, uintptr_t in,
                                    const int64_t *s, const int64_t *out_s, int64_t heads) {
    fo_rope_tensor x = {(void *)out, (const void *)in, s[0], 0, 0, out_s[0], 0, 0, heads};
    const int64_t row = c->head_dim;
    if (!c->batch || !c->tokens || !heads || !row) {
        x.out = 0; /* nothing to do for it (and its other sizes may be anything) */
        return x;
    }
    const int heads_first = c->layout == FO_ROPE_HEADS_FIRST;
    x.in_head_stride = s[heads_first ? 1 : 2], x.in_token_stride = s[heads_first ? 2 : 1];
    if (all_zero(out_s)) {
        x.out_head_stride = heads_first ? c->tokens * row : row;
        x.out_token_stride = heads_first ? row : heads * row;
        x.out_batch_stride = heads * c->tokens * row;
    } else {
        x.out_head_stride = out_s[heads_first ? 1 : 2];
        x.out_token_stride = out_s[heads_first ? 2 : 1];
    }
    return x;
}

#define ROPE_ARGS_FIRST FO_ARGS_END(fo_rope_args, pairs)

static int rope(const char *op, const fo_rope_args *args, int backward) {
    fo_rope_args c;
    int status;
    if ((status = fo_read_args(op, "fo_rope_args", &c, sizeof c, ROPE_ARGS_FIRST, args)) ||
        (status = check_args(op, &c)))
        return status;
    fo_rope_params a = {tensor_params(&c, c.q_out, c.q, c.q_strides, c.q_out_strides, c.q_heads),
                        tensor_params(&c, c.k_out, c.k, c.k_strides, c.k_out_strides, c.k_heads),
                        (const void *)c.cos,
                        (const void *)c.sin,
                        c.cos_strides[0],
                        c.cos_strides[1],
                        c.sin_strides[0],
                        c.sin_strides[1],
                        c.batch,
                        c.tokens,
                        c.head_dim,
                        c.rotary_dim,
                        c.dtype,
                        c.cos_dtype,
                        backward,
                        c.pairs == FO_ROPE_INTERLEAVED};
    if (c.batch == 0 || c.tokens == 0 || c.head_dim == 0 || (!a.q.out && !a.k.out)) return FO_OK;
    if (c.device_type == FO_DEVICE_CUDA) return fo_cuda_rope(c.device_index, c.stream, &a);
    fo_cpu()->rope(&a);
    return FO_OK;
}

int fo_rope_forward(const fo_rope_args *args) { return rope("fo_rope_forward", args, 0); }

int fo_rope_backward(const fo_rope_args *args) { return rope("fo_rope_backward", args, 1); }
