/* test_cpu_exp.c: the float exp of the CPU kernels (lib/cpu/cpu_exp.h)
 * against libm's exp in double: its relative error bound over [-87, 0]
 * (every 61st float here; all of them were checked once), and its values
 * at the edges (0 below -87 and at -inf, NaN for NaN, 1 at 0). Built twice
 * on x86-64, with and without FMA, since its bits differ. Exit status 0
 * when every check passes, 77 (skipped) on an x86-64 without FMA for the
 * FMA build. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "cpu/cpu_exp.h"

static int failures;

static void expect_value(float x, float want) {
    const float got = fo_expf_nonpositive(x);
    if (!(got == want || (isnan(got) && isnan(want)))) {
        fprintf(stderr, "fo_expf_nonpositive(%.9g) is %.9g, want %.9g\n", x, got, want);
        failures++;
    }
}

int main(void) {
#if defined(__FMA__) && (defined(__x86_64__) || defined(__i386__))
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("fma")) return 77;
#endif
    const double bound = 1.1e-7; /* cpu_exp.h's */
    double worst = 0.0, worst_x = 0.0;
    const float lowest = -87.0f;
    uint32_t last;
    memcpy(&last, &lowest, sizeof last);
    for (uint64_t bits = 0x80000000u; bits <= last; bits += 61) {
        const uint32_t b = (uint32_t)bits;
        float x;
        memcpy(&x, &b, sizeof x);
        const double want = exp((double)x), error = fabs(fo_expf_nonpositive(x) - want) / want;
        if (error > worst) worst = error, worst_x = x;
    }
    if (!(worst < bound)) {
        fprintf(stderr, "fo_expf_nonpositive: relative error %.3g at %.9g, over %.3g\n", worst,
                worst_x, bound);
        failures++;
    }
    expect_value(0.0f, 1.0f);
    expect_value(-0.0f, 1.0f);
    expect_value(-87.0001f, 0.0f);
    expect_value(-1000.0f, 0.0f);
    expect_value(-INFINITY, 0.0f);
    expect_value(NAN, NAN);
    printf("fo_expf_nonpositive: worst relative error %.3g at %.9g; %d failures\n", worst, worst_x,
           failures);
    return failures != 0;
}
