# run 24: what else the paired widening touched (the backward and the
# forward with a residual read Held too): fused A/B against the session's
# start (exp/old); then forward+backward with the peers at 16384 columns
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
rm -rf /tmp/old && mkdir /tmp/old && cp -r lib tests meson.build meson.options pyproject.toml fused_ops_py /tmp/old/ && cp exp/old/norm.cu exp/old/norm_registers.cuh /tmp/old/lib/cuda/
(meson setup build/gpu -Dcuda=enabled -Dgpu_archs=90 -Dgpu_ptx=false && ninja -C build/gpu) > /tmp/build_new.txt 2>&1 &
(cd /tmp/old && meson setup build -Dcuda=enabled -Dgpu_archs=90 -Dgpu_ptx=false && ninja -C build) > /tmp/build_old.txt 2>&1 &
wait
ls build/gpu/libfused_ops.so /tmp/old/build/libfused_ops.so || { tail -30 /tmp/build_*.txt; exit 1; }
export FUSED_OPS_PY_LIBRARY=$PWD/build/gpu/libfused_ops.so
ARGS="--ops layer_norm,rms_norm,add_rms_norm --directions fwd,bwd --providers fused --dtypes bf16,fp16 --shapes 4096x512,16384x1024,65536x2048,16384x4096,16384x8192"
timeout 150 python3 bench/bench_ops.py $ARGS --out /tmp/ab_new > /tmp/ab_new.txt 2>&1; echo new rc=$?
FUSED_OPS_PY_LIBRARY=/tmp/old/build/libfused_ops.so timeout 150 python3 bench/bench_ops.py $ARGS --out /tmp/ab_old > /tmp/ab_old.txt 2>&1; echo old rc=$?
cp /tmp/ab_new/results.csv $OUT/ab_new.csv; cp /tmp/ab_old/results.csv $OUT/ab_old.csv
python3 - $OUT <<'PY' | tee $OUT/ab_table.txt
import csv, sys
out = sys.argv[1]
rows = {}
for name in ("old", "new"):
    for r in csv.DictReader(open(f"{out}/ab_{name}.csv")):
        key = (r["op"], r["direction"], r["dtype"], f"{r['rows']}x{r['cols']}")
        rows.setdefault(key, {})[name] = float(r["gbs"])
print("op dir dtype shape old new new/old (fused GB/s)")
for key, v in sorted(rows.items()):
    if "old" in v and "new" in v:
        print(*key, f"{v['old']:.0f} {v['new']:.0f} {v['new'] / v['old']:.3f}")
PY
timeout 200 python3 bench/bench_ops.py --ops layer_norm,rms_norm --directions fwdbwd --dtypes bf16,fp16 --shapes 4096x16384,16384x16384,65536x16384 --out /tmp/fwdbwd > $OUT/fwdbwd_log.txt 2>&1; echo fwdbwd rc=$?
cp /tmp/fwdbwd/results.csv $OUT/fwdbwd.csv
grep -E "^\| " $OUT/fwdbwd_log.txt | cut -d'|' -f2-10
