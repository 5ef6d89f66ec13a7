# run 21, part 1: build this tree and main's forward (exp/old) side by side;
# CUDA norm tests; the fused forward A/B at every register width
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
rm -rf /tmp/old && mkdir /tmp/old && cp -r lib tests meson.build meson.options pyproject.toml fused_ops_py /tmp/old/ && cp exp/old/norm.cu exp/old/norm_registers.cuh /tmp/old/lib/cuda/
(meson setup build/gpu -Dcuda=enabled -Dgpu_archs=90 -Dgpu_ptx=false && ninja -C build/gpu) > /tmp/build_new.txt 2>&1 &
(cd /tmp/old && meson setup build -Dcuda=enabled -Dgpu_archs=90 -Dgpu_ptx=false && ninja -C build) > /tmp/build_old.txt 2>&1 &
time wait
cat /tmp/build_new.txt /tmp/build_old.txt > $OUT/build.txt
ls build/gpu/libfused_ops.so /tmp/old/build/libfused_ops.so || { tail -30 $OUT/build.txt; exit 1; }
export FUSED_OPS_PY_LIBRARY=$PWD/build/gpu/libfused_ops.so
python3 -m pytest -q tests/test_norms.py -k "cuda and not gradcheck" > $OUT/pytest_norms.txt 2>&1; tail -1 $OUT/pytest_norms.txt
SHAPES=4096x1024,4096x2048,4096x4096,4096x8192,4096x16384,16384x16384,65536x1024,65536x2048,65536x4096,65536x8192,65536x16384
ARGS="--ops layer_norm,rms_norm --directions fwd --providers fused --dtypes bf16,fp16,fp32 --shapes $SHAPES"
time timeout 170 python3 bench/bench_ops.py $ARGS --out /tmp/ab_new > /tmp/ab_new.txt 2>&1; echo new rc=$?
FUSED_OPS_PY_LIBRARY=/tmp/old/build/libfused_ops.so timeout 170 python3 bench/bench_ops.py $ARGS --out /tmp/ab_old > /tmp/ab_old.txt 2>&1; echo old rc=$?
cp /tmp/ab_new/results.csv $OUT/ab_new.csv; cp /tmp/ab_old/results.csv $OUT/ab_old.csv
python3 - $OUT <<'PY' | tee $OUT/ab_table.txt
import csv, sys
out = sys.argv[1]
rows = {}
for name in ("old", "new"):
    for r in csv.DictReader(open(f"{out}/ab_{name}.csv")):
        key = (r["op"], r["dtype"], f"{r['rows']}x{r['cols']}")
        rows.setdefault(key, {})[name] = float(r["gbs"])
print("op dtype shape old new new/old (fused fwd GB/s)")
for key, v in sorted(rows.items()):
    if "old" in v and "new" in v:
        print(*key, f"{v['old']:.0f} {v['new']:.0f} {v['new'] / v['old']:.3f}")
PY
# run 21, part 3: the forward with the peers at the widths that changed
set -u
export PYTHONPATH=/tmp/site:$PWD FUSED_OPS_PY_LIBRARY=$PWD/build/gpu/libfused_ops.so
SHAPES=4096x2048,4096x4096,4096x8192,4096x16384,16384x16384,65536x2048,65536x4096,65536x8192,65536x16384
time timeout 560 python3 bench/bench_ops.py --ops layer_norm,rms_norm --directions fwd --dtypes bf16,fp16,fp32 --shapes $SHAPES --out $OUT/register_forward > $OUT/bench_log.txt 2>&1; echo bench rc=$?
grep -E "^\| " $OUT/bench_log.txt | cut -d'|' -f2-10
