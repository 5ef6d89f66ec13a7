#!/bin/bash
# Run 117: cooperative launch combined with clusters (probe.cu)
D=bench/results/h100/tuning/run117_cooperative_clusters
nvcc -O2 -gencode arch=compute_90,code=sm_90 -o /tmp/probe $D/probe.cu && /tmp/probe | tee $OUT/probe.txt
