/* Force-included into the C sources by scripts/build_wheel.sh.
 *
 * glibc 2.29 gave exp and log new symbol versions (the same results, without
 * the old SVID error handling), so a library linked against glibc 2.29 or
 * newer asks for GLIBC_2.29 and cannot install on RHEL 8 (glibc 2.28), where
 * torch does. Every glibc still exports the old versions: bound to those, the
 * wheel's floor is what cudart_static asks for. */
__asm__(".symver exp,exp@GLIBC_2.2.5");
__asm__(".symver log,log@GLIBC_2.2.5");
