# Run 109: run 108 with only the owners holding rows (as few blocks as
# own a power-of-two run of chunks each; the other blocks write all their
# dx rows): the held bytes are the partials' own, not room padded to every
# block. held (the tree) against nohold (the tree with
# FO_BACKWARD_HELD_PARTIALS=0); the norm and CUDA tests and memcheck on
# held, then run 104's A/B, each build timed twice in turn.
set -u
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
FUSED_OPS_PY_LIBRARY=$PWD/build_ab/held/libfused_ops.so timeout 150 python3 -m pytest -q -x tests/test_norms.py tests/test_cuda.py -k "cuda" 2>&1 | tail -1 | tee $OUT/pytest_held.txt
FUSED_OPS_PY_LIBRARY=$PWD/build_ab/held/libfused_ops.so PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 100 compute-sanitizer --tool memcheck --error-exitcode 99 \
    python3 -m pytest -q tests/test_norms.py -k "cuda and not gradcheck and (bfloat16 or float32) and (test_layer_norm or test_add_norm or deterministic or allocates)" > $OUT/memcheck.txt 2>&1
echo "memcheck exit=$? $(grep -E 'ERROR SUMMARY|passed|failed' $OUT/memcheck.txt | tr '\n' ' ')"
W=$OUT/w; mkdir -p $W; n=0
bench() {  # variant, label, bench args...
  local v=$1 label=$2; shift 2
  FUSED_OPS_PY_LIBRARY=$PWD/build_ab/$v/libfused_ops.so timeout 130 python3 bench/bench_ops.py \
    --providers fused --out $W/$label "$@" > $W/log_$label.txt 2>&1
  echo "$label rc=$? $(grep -c '^| ' $W/log_$label.txt) rows $(date +%T)"
}
ARGS="--ops layer_norm,rms_norm,add_rms_norm --directions bwd,fwdbwd --dtypes bf16,fp32 --shapes 4096x512,4096x1024,4096x4096,4096x8192,16384x4096,65536x1024 --warmup-ms 20 --rep-ms 60"
for v in nohold held nohold held; do bench $v ab_$v-$((++n)) $ARGS; done
python3 - $W <<'PY' | tee $OUT/ab_table.txt
import csv, sys, glob, collections
out = sys.argv[1]; t = collections.defaultdict(dict); m = collections.defaultdict(dict)
for path in sorted(glob.glob(f"{out}/ab_*-*/results.csv")):
    v = path.split("/")[-2].split("_", 1)[1]
    for r in csv.DictReader(open(path)):
        k = (r["op"], r["direction"], r["dtype"], int(r["rows"]), int(r["cols"]))
        t[k][v] = float(r["kernel_ms"]) * 1e3; m[k][v.split("-")[0]] = float(r["peak_extra_mib"])
print("op dir dtype rows cols | kernel us: nohold-1 held-2 nohold-3 held-4 | nohold/held | peak MiB nohold held")
for k in sorted(t):
    g = [t[k].get(n, float("nan")) for n in ("nohold-1", "held-2", "nohold-3", "held-4")]
    print(*k, "|", *(f"{x:.2f}" for x in g), "|", f"{(g[0] + g[2]) / (g[1] + g[3]):.3f}",
          "|", f"{m[k].get('nohold', float('nan')):.2f}", f"{m[k].get('held', float('nan')):.2f}")
PY
cd $W && tar czf $OUT/run109.tgz . && cd $OUT && rm -rf w; ls $OUT
