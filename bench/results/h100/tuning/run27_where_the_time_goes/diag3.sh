set -u
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONPATH=/tmp/site:$PWD/bench:$PWD
[ -f build/base/libfused_ops.so ] || (meson setup build/base -Dcuda=enabled -Dgpu_archs=90 -Dgpu_ptx=false >/dev/null && ninja -C build/base >/dev/null)
export FUSED_OPS_PY_LIBRARY=$PWD/build/base/libfused_ops.so
for p in liger fused,liger; do python3 bench/bench_ops.py --ops layer_norm --directions fwd --dtypes bf16 --shapes 4096x2048 --providers $p --out /tmp/o 2>&1 | grep -E "^\| layer"; python3 -c "
import csv; [print(r['provider'], round(float(r['kernel_ms'])*1e3,2), round(float(r['call_ms'])*1e3,2)) for r in csv.DictReader(open('/tmp/o/results.csv'))]"; done
PLAIN_FIRST=1 python3 exp/graph_gap.py layer_norm fwd 4096x2048 liger fused 2>&1 | grep -v -i warn
