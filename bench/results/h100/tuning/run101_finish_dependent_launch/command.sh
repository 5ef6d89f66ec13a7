# Run 101: the partials' finishing pass as a programmatic dependent launch
# (pdl: it may start as the row kernel's last blocks exit, and waits for
# their writes with griddepcontrol.wait) against the plain launch (final,
# run 98's library). Run 100 had it at 2.0-3.0 us of the backward's
# 15.6-148 us. Norm, CUDA (graph capture included) and relu(x*s+b) tests
# on pdl; fused backward alone, each build timed twice in turn.
set -u
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
W=$OUT/w; mkdir -p $W; n=0
FUSED_OPS_PY_LIBRARY=$PWD/build_ab/pdl/libfused_ops.so timeout 120 python3 -m pytest -q tests/test_norms.py tests/test_cuda.py tests/test_bias_scale_relu.py -k "cuda" 2>&1 | tail -1 | tee $W/pytest_pdl.txt
bench() {  # variant, label, bench args...
  local v=$1 label=$2; shift 2
  FUSED_OPS_PY_LIBRARY=$PWD/build_ab/$v/libfused_ops.so timeout 60 python3 bench/bench_ops.py \
    --providers fused --out $W/$label "$@" > $W/log_$label.txt 2>&1
  echo "$label rc=$? $(grep -c '^| ' $W/log_$label.txt) rows $(date +%T)"
}
ARGS="--ops layer_norm,rms_norm,bias_scale_relu --directions bwd --dtypes bf16 --shapes 4096x512,4096x1024,4096x4096,16384x1024,65536x4096"
for v in final pdl final pdl; do bench $v bwd_$v-$((++n)) $ARGS; done
python3 - $W <<'PY' | tee $OUT/ab_table.txt
import csv, sys, glob, collections
out = sys.argv[1]; t = collections.defaultdict(dict)
for path in sorted(glob.glob(f"{out}/bwd_*-*/results.csv")):
    v = path.split("/")[-2].split("_", 1)[1]
    for r in csv.DictReader(open(path)):
        t[(r["op"], r["direction"], r["dtype"], int(r["rows"]), int(r["cols"]))][v] = float(r["kernel_ms"]) * 1e3
print("op dir dtype rows cols us: final-1 pdl-2 final-3 pdl-4 final/pdl final-3/final-1")
for k in sorted(t):
    g = [t[k].get(n, float("nan")) for n in ("final-1", "pdl-2", "final-3", "pdl-4")]
    print(*k, *(f"{x:.2f}" for x in g), f"{(g[0] + g[2]) / (g[1] + g[3]):.3f}", f"{g[2] / g[0]:.3f}")
PY
cd $W && tar czf $OUT/run101.tgz . && cd $OUT && rm -rf w; ls $OUT
