/* cpu_philox.h: philox.h's words for a run of counters at once, as the CPU's
 * dropout draws them: AVX-512 and AVX2 take 8 or 4 counters a vector, with a
 * 32-bit word in each 64-bit lane so that each round's products are one
 * vpmuludq (which reads the low halves; the high halves hold garbage until
 * the words are stored), where gcc would emit vpmullq for the scalar form.
 * The same words as fo_philox (tests/c/test_cpu_philox.c). */
#ifndef FO_CPU_PHILOX_H
#define FO_CPU_PHILOX_H

#include <stdint.h>

#include "../philox.h"

#if defined(__AVX2__)
#include <immintrin.h>
#endif

/* At most this many counters a call: a CPU_CHUNK of elements. */
#define FO_PHILOX_RUN 64

/* word[l][j] = lane l of fo_philox(key, base + j), for j < blocks <= FO_PHILOX_RUN (the vector
 * paths compute whole vectors past blocks, within the arrays). */
static inline void fo_philox_words(uint64_t key, uint64_t base, int64_t blocks,
                                   uint32_t word[4][FO_PHILOX_RUN]) {
#if defined(__AVX2__)
    uint32_t key0[10], key1[10];
    for (int round = 0; round < 10; round++) {
        key0[round] = (uint32_t)key + (uint32_t)round * 0x9E3779B9u;
        key1[round] = (uint32_t)(key >> 32) + (uint32_t)round * 0xBB67AE85u;
    }
#endif
#if defined(__AVX512F__)
    const __m512i m0 = _mm512_set1_epi64(0xD2511F53), m1 = _mm512_set1_epi64(0xCD9E8D57);
    for (int64_t j = 0; j < blocks; j += 8) {
        const __m512i counter = _mm512_add_epi64(_mm512_set1_epi64((long long)(base + (uint64_t)j)),
                                                 _mm512_setr_epi64(0, 1, 2, 3, 4, 5, 6, 7));
        __m512i c0 = counter, c1 = _mm512_srli_epi64(counter, 32), c2 = _mm512_setzero_si512(),
                c3 = c2;
        for (int round = 0; round < 10; round++) {
            const __m512i p0 = _mm512_mul_epu32(c0, m0), p1 = _mm512_mul_epu32(c2, m1);
            /* 0x96: a ^ b ^ c */
            c0 = _mm512_ternarylogic_epi64(_mm512_srli_epi64(p1, 32), c1,
                                           _mm512_set1_epi64(key0[round]), 0x96);
            c2 = _mm512_ternarylogic_epi64(_mm512_srli_epi64(p0, 32), c3,
                                           _mm512_set1_epi64(key1[round]), 0x96);
            c1 = p1;
            c3 = p0;
        }
        _mm256_storeu_si256((__m256i *)&word[0][j], _mm512_cvtepi64_epi32(c0));
        _mm256_storeu_si256((__m256i *)&word[1][j], _mm512_cvtepi64_epi32(c1));
        _mm256_storeu_si256((__m256i *)&word[2][j], _mm512_cvtepi64_epi32(c2));
        _mm256_storeu_si256((__m256i *)&word[3][j], _mm512_cvtepi64_epi32(c3));
    }
#elif defined(__AVX2__)
    const __m256i m0 = _mm256_set1_epi64x(0xD2511F53), m1 = _mm256_set1_epi64x(0xCD9E8D57);
    const __m256i low_halves = _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6);
    for (int64_t j = 0; j < blocks; j += 4) {
        const __m256i counter = _mm256_add_epi64(
            _mm256_set1_epi64x((long long)(base + (uint64_t)j)), _mm256_setr_epi64x(0, 1, 2, 3));
        __m256i c0 = counter, c1 = _mm256_srli_epi64(counter, 32), c2 = _mm256_setzero_si256(),
                c3 = c2;
        for (int round = 0; round < 10; round++) {
            const __m256i p0 = _mm256_mul_epu32(c0, m0), p1 = _mm256_mul_epu32(c2, m1);
            c0 = _mm256_xor_si256(_mm256_xor_si256(_mm256_srli_epi64(p1, 32), c1),
                                  _mm256_set1_epi64x(key0[round]));
            c2 = _mm256_xor_si256(_mm256_xor_si256(_mm256_srli_epi64(p0, 32), c3),
                                  _mm256_set1_epi64x(key1[round]));
            c1 = p1;
            c3 = p0;
        }
        const __m256i *words[4] = {&c0, &c1, &c2, &c3};
        for (int l = 0; l < 4; l++)
            _mm_storeu_si128(
                (__m128i *)&word[l][j],
                _mm256_castsi256_si128(_mm256_permutevar8x32_epi32(*words[l], low_halves)));
    }
#else
    for (int64_t j = 0; j < blocks; j++) {
        const fo_philox_block block = fo_philox(key, base + (uint64_t)j);
        for (int l = 0; l < 4; l++) word[l][j] = block.lane[l];
    }
#endif
}

#endif
