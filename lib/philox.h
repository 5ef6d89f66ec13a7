/* philox.h: the dropout mask, a pure function of (seed, counter, lane), the
 * same on the CPU and the GPU: Philox4x32-10 (Salmon et al., SC'11), the
 * counter-based generator torch and cuRAND use. Backward regenerates the mask
 * from the forward pass's seed and offset instead of storing it. */
#ifndef FO_PHILOX_H
#define FO_PHILOX_H

#include <stdint.h>

#ifdef __CUDACC__
#define FO_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define FO_HOST_DEVICE static inline
#endif

typedef struct fo_philox_block {
    uint32_t lane[4];
} fo_philox_block;

/* Four random 32-bit words for one 64-bit counter under a 64-bit key. */
FO_HOST_DEVICE fo_philox_block fo_philox(uint64_t key, uint64_t counter) {
    uint32_t c0 = (uint32_t)counter, c1 = (uint32_t)(counter >> 32), c2 = 0, c3 = 0;
    uint32_t k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32);
    for (int round = 0; round < 10; round++) {
        uint64_t p0 = (uint64_t)0xD2511F53u * c0;
        uint64_t p1 = (uint64_t)0xCD9E8D57u * c2;
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
        uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        c1 = (uint32_t)p1;
        c3 = (uint32_t)p0;
        c0 = n0;
        c2 = n2;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    fo_philox_block out = {{c0, c1, c2, c3}};
    return out;
}

/* Element (row, col) of a rows x cols tensor draws lane col % 4 of counter
 * offset + row * fo_dropout_row_counters(cols) + col / 4: every 8-element
 * chunk of a row takes exactly two whole counters. */
FO_HOST_DEVICE uint64_t fo_dropout_row_counters(int64_t cols) {
    return (uint64_t)((cols + 7) / 8) * 2u;
}

/* Words at or above this are kept: P(keep) = 1 - p. p in [0, 1). */
FO_HOST_DEVICE uint32_t fo_dropout_threshold(double p) {
    double t = p * 4294967296.0;
    return t >= 4294967295.0 ? 4294967295u : (uint32_t)t;
}

#endif
