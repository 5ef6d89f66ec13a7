#!/usr/bin/env bash
# Builds the libFuzzer target tests/fuzz/fuzz_ops.c with clang, ASan and UBSan,
# linking the library's C sources directly (lib/*.c, whose lib/cuda_stubs.c
# stands in for CUDA: the fuzzer tests the CPU backend), and fuzzes for
# FUZZ_SECONDS (default 60) from a scratch copy of tests/fuzz/corpus, so the
# committed seeds stay as they are. Any finding (a crash, a sanitizer report,
# a mismatch the target aborts on, a timeout, a leak) exits non-zero; the
# input that caused it is left in the build folder (printed at the end).
#
#   tests/fuzz/run.sh                    build, then fuzz for 60 s
#   FUZZ_SECONDS=300 tests/fuzz/run.sh   longer
#   FUZZ_SEED=1 FUZZ_RUNS=40000 tests/fuzz/run.sh
#                                        reproducible: the same inputs on
#                                        every machine (CI runs this way, so
#                                        a red CI is never a coin toss; new
#                                        ground is for runs without a seed)
#   FUZZ_ISA=avx512 tests/fuzz/run.sh    the kernels as the wheel's AVX-512
#                                        (or avx2) object compiles them: -O2
#                                        and that -march, so the loops
#                                        vectorize (default: baseline, -O1)
#   tests/fuzz/run.sh CRASH_FILE...      build, then run those inputs once
#   FUZZ_STRICT=1 tests/fuzz/run.sh ...  also make the calls that hit the
#                                        known library bugs listed in
#                                        fuzz_ops.c (known_bug), e.g. to
#                                        check a fix
#   FUZZ_PRINT_CALLS=1                   print each decoded call before it
#                                        runs (for a timeout or a crash
#                                        inside the library)
#
# CC (default clang) must support -fsanitize=fuzzer (Debian: clang and
# libclang-rt-14-dev or newer). FUZZ_BUILD picks the build folder
# (default build/fuzz).
set -euo pipefail
cd "$(dirname "$0")/../.."

CC="${CC:-clang}"
ISA="${FUZZ_ISA:-baseline}"
case "$ISA" in
    baseline) isa_flags=(-O1) ;;
    avx2) isa_flags=(-O2 -march=x86-64-v3) ;;
    avx512) isa_flags=(-O2 -march=x86-64-v4 -mprefer-vector-width=512) ;;
    *) echo "run.sh: FUZZ_ISA=$ISA: baseline, avx2 or avx512" >&2 && exit 2 ;;
esac
OUT="${FUZZ_BUILD:-build/fuzz-$ISA}"
SECONDS_TO_FUZZ="${FUZZ_SECONDS:-60}"
mkdir -p "$OUT"
defines=()
if [ "${FUZZ_STRICT:-0}" = 1 ]; then
    defines+=(-DFUZZ_STRICT)
fi

# -fno-sanitize-recover=all: a UBSan report aborts like an ASan one, so
# libFuzzer counts it as a finding. -O1 -g: fast enough, with usable stacks.
"$CC" -std=c11 -g "${isa_flags[@]}" -fno-omit-frame-pointer \
    -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
    -Wall -Wextra \
    -Ilib -Itests/c "${defines[@]}" \
    lib/*.c lib/cpu/*.c tests/c/harness.c tests/fuzz/fuzz_ops.c \
    -lm -pthread -o "$OUT/fuzz_ops"

# The committed seeds plus whatever this run finds go to a scratch folder.
corpus="$OUT/corpus"
rm -rf "$corpus"
mkdir -p "$corpus"
cp tests/fuzz/corpus/* "$corpus/"

export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"

if [ "$#" -gt 0 ]; then
    exec "$OUT/fuzz_ops" "$@"
fi

# -timeout: one input running 10 s is a finding (a hang); -rss_limit_mb: so
# is growing past 2 GiB. -artifact_prefix keeps crash files out of the tree.
limits=(-max_total_time="$SECONDS_TO_FUZZ")
if [ -n "${FUZZ_SEED:-}" ]; then
    limits=(-seed="$FUZZ_SEED" -runs="${FUZZ_RUNS:-40000}")
    echo "fuzz_ops ($ISA): ${FUZZ_RUNS:-40000} runs with seed $FUZZ_SEED from $(ls "$corpus" | wc -l) seeds"
else
    echo "fuzz_ops ($ISA): fuzzing for ${SECONDS_TO_FUZZ} s from $(ls "$corpus" | wc -l) seeds"
fi
status=0
"$OUT/fuzz_ops" "${limits[@]}" -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$OUT/" "$corpus" 2>"$OUT/fuzz.log" || status=$?
# libFuzzer's log is long; the end has the finding, or the final stats.
tail -n 60 "$OUT/fuzz.log"
if [ "$status" -ne 0 ]; then
    echo "fuzz_ops: FAILED (exit $status); the input is in $OUT/ (crash-*, timeout-*," \
        "leak-*, oom-*); rerun it with: tests/fuzz/run.sh $OUT/crash-..."
    exit "$status"
fi
echo "fuzz_ops: no findings"
