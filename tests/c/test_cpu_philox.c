/* test_cpu_philox.c: the CPU dropout's Philox words for runs of counters
 * (lib/cpu/cpu_philox.h) against philox.h's one-counter fo_philox, which the
 * GPU draws too: every lane of every counter of runs of each length, under
 * keys and bases that carry across the counter's 32-bit halves. Built once
 * for each instruction set the CPU kernels carry on x86-64 (baseline, AVX2,
 * AVX-512); exit status 0 when every word matches, 77 (skipped) where this
 * CPU lacks the build's instruction set. */
#include <stdint.h>
#include <stdio.h>

#include "cpu/cpu_philox.h"

int main(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
#if defined(__AVX512F__)
    if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512vl")) return 77;
#elif defined(__AVX2__)
    if (!__builtin_cpu_supports("avx2")) return 77;
#endif
#endif
    int failures = 0;
    int64_t checked = 0;
    uint64_t key = 0x9E3779B97F4A7C15ull;
    for (int trial = 0; trial < 200; trial++) {
        key = key * 6364136223846793005ull + 1442695040888963407ull;
        /* within a few counters of a carry into the high half, or anywhere */
        const uint64_t base = trial % 2 ? (key >> 7) : ((key >> 40) << 32) - (uint64_t)(trial % 70);
        for (int64_t blocks = 1; blocks <= FO_PHILOX_RUN; blocks += 1 + trial % 7) {
            uint32_t word[4][FO_PHILOX_RUN];
            fo_philox_words(key, base, blocks, word);
            for (int64_t j = 0; j < blocks; j++) {
                const fo_philox_block want = fo_philox(key, base + (uint64_t)j);
                for (int l = 0; l < 4; l++, checked++)
                    if (word[l][j] != want.lane[l] && failures++ < 10)
                        fprintf(stderr, "key %llx counter %llx lane %d: %08x, want %08x\n",
                                (unsigned long long)key, (unsigned long long)(base + j), l,
                                word[l][j], want.lane[l]);
            }
        }
    }
    printf("%lld words, %d wrong\n", (long long)checked, failures);
    return failures ? 1 : 0;
}
