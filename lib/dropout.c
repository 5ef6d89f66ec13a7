/* dropout.c: how much of a Philox stream a norm's dropout mask takes, for
 * callers that hand out (seed, offset) pairs. */
#include "internal.h"
#include "philox.h"

uint64_t fo_norm_dropout_counters(int64_t rows, int64_t cols) {
    if (rows <= 0 || cols <= 0) return 0;
    return (uint64_t)rows * fo_dropout_row_counters(cols);
}
