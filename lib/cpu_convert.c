/* cpu_convert.c: elements of any dtype to and from double (cpu_convert.h),
 * through the inline conversions the kernels use (cpu/cpu_double.h). */
#include "cpu_convert.h"
#include "cpu/cpu_double.h"

void fo_cpu_load(double *dst, const void *src, int64_t offset, int64_t n, int dtype) {
    fo_double_in(dst, src, offset, n, dtype);
}

void fo_cpu_store(void *dst, int64_t offset, const double *src, int64_t n, int dtype) {
    fo_double_out(dst, offset, src, n, dtype);
}
