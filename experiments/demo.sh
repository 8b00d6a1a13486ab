#!/usr/bin/env bash
# `make demo`: the main job on the embedded default experiment, then the store commands.
set -euo pipefail
PY=${1:-.venv/bin/python}
BIN=$(dirname "$PY")
OUT=${DEMO_OUT:-demo-out}
EXP=${DEMO_EXPERIMENT:-experiments/quick.toml}
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1
start=$(date +%s)
"$BIN/layerstate" run "$EXP" --out "$OUT" --jobs 2
"$BIN/layerstate" inspect "$OUT/store.zarr" | head -n 12
"$BIN/layerstate" validate "$OUT/store.zarr"
"$BIN/layerstate" pack "$OUT/store.zarr" "$OUT/store.zip" --force
echo
echo "demo finished in $(( $(date +%s) - start ))s"
echo "report:      $OUT/report/index.html   (Markdown: $OUT/report/report.md)"
echo "store:       $OUT/store.zarr   (packed for sharing: $OUT/store.zip)"
