# grid_part.sh PART OPS DIRECTIONS DTYPES SECONDS: one part of the H100 grid
# (the providers in $PROVIDERS, a comma list, where set; else all; the
# shapes in $SHAPES, a comma list of MxN, where set; else the grid's),
# each provider in a process of its own, with the library in
# $FUSED_OPS_PY_LIBRARY; the part lands in $OUT/w/parts/PART, its log in
# $OUT/w/logs/PART.txt, and each provider's finished run in
# $OUT/w/provider_runs/PART (joinable with combine.py past a time limit).
part=$1 ops=$2 directions=$3 dtypes=$4 seconds=$5
mkdir -p $OUT/w/parts $OUT/w/logs $OUT/w/provider_runs
timeout $seconds python3 bench/bench_ops.py --isolate ${PROVIDERS:+--providers $PROVIDERS} ${SHAPES:+--shapes $SHAPES} --ops $ops --directions $directions --dtypes $dtypes \
    --provider-runs $OUT/w/provider_runs/$part --out $OUT/w/parts/$part > $OUT/w/logs/$part.txt 2>&1
echo "$part exit $? $(date +%T)"
