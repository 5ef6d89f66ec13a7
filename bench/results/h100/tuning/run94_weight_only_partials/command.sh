# Run 94: the norm backward writing the bias partials only where dbias is
# wanted, RMSNorm's workspace half of LayerNorm's (build_ab/half) against
# the tree before it (build_ab/base): norm and CUDA tests; memcheck without
# torch's caching allocator (every workspace its own cudaMalloc, so a write
# past the halved workspace is caught) on RMSNorm bf16 and LayerNorm
# weight-only fp32; bwd and fwdbwd bf16 timed twice in turn, with the peak.
# (The first try ran base with this tree's Python, whose workspace query
# has one argument more: base segfaulted, hence FO_ABI_VERSION 2. Base now
# runs with its own package, build_ab/base_py, git archive of e862867 (fused_ops_py and lib/fused_ops.h).)
set -u
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
W=$OUT/w; mkdir -p $W; n=0
export FUSED_OPS_PY_LIBRARY=$PWD/build_ab/half/libfused_ops.so
timeout 130 python3 -m pytest -q tests/test_norms.py tests/test_cuda.py -k "cuda" 2>&1 | tail -1 | tee $W/pytest_norms_cuda.txt
PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 120 compute-sanitizer --tool memcheck --error-exitcode 99 \
    python3 -m pytest -q tests/test_norms.py -k "cuda and not gradcheck and test_rms_norm and bfloat16" > $W/memcheck_rms.txt 2>&1
echo "memcheck rms exit=$? $(grep -E 'ERROR SUMMARY|passed|failed' $W/memcheck_rms.txt | tr '\n' ' ')"
PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 90 compute-sanitizer --tool memcheck --error-exitcode 99 \
    python3 -m pytest -q tests/test_norms.py -k "cuda and test_layer_norm and float32 and not bias and not none" > $W/memcheck_ln_weight.txt 2>&1
echo "memcheck ln weight exit=$? $(grep -E 'ERROR SUMMARY|passed|failed' $W/memcheck_ln_weight.txt | tr '\n' ' ')"
bench() {  # variant, label, bench args...
  local v=$1 label=$2; shift 2
  local py=$PWD; [ $v = base ] && py=$PWD/build_ab/base_py
  PYTHONPATH=/tmp/site:$py FUSED_OPS_PY_LIBRARY=$PWD/build_ab/$v/libfused_ops.so timeout 80 python3 bench/bench_ops.py \
    --providers fused --out $W/$label "$@" > $W/log_$label.txt 2>&1
  echo "$label rc=$? $(grep -c '^| ' $W/log_$label.txt) rows $(date +%T)"
}
ARGS="--ops rms_norm,layer_norm --directions bwd,fwdbwd --dtypes bf16 --shapes 4096x1024,4096x4096,4096x8192,16384x4096,65536x1024,4096x65536"
for v in base half base half; do bench $v fwd_$v-$((++n)) $ARGS; done
python3 - $W <<'PY' | tee $OUT/ab_table.txt
import csv, sys, glob, collections
out = sys.argv[1]; t = collections.defaultdict(dict); peak = collections.defaultdict(dict)
for path in sorted(glob.glob(f"{out}/fwd_*-*/results.csv")):
    v = path.split("/")[-2].split("_", 1)[1]
    for r in csv.DictReader(open(path)):
        k = (r["op"], r["direction"], r["dtype"], int(r["rows"]), int(r["cols"]))
        t[k][v] = float(r["gbs"]); peak[k][v.split("-")[0]] = r["peak_extra_mib"]
print("op dir dtype rows cols base-1 half-2 base-3 half-4 half/base base-3/base-1 peak_MiB_base peak_MiB_half")
for k in sorted(t):
    g = [t[k].get(n, float("nan")) for n in ("base-1", "half-2", "base-3", "half-4")]
    print(*k, *(f"{x:.0f}" for x in g), f"{(g[1] + g[3]) / (g[0] + g[2]):.3f}", f"{g[2] / g[0]:.3f}",
          peak[k].get("base", ""), peak[k].get("half", ""))
PY
cd $W && tar czf $OUT/run94.tgz . && cd $OUT && rm -rf w; ls $OUT
