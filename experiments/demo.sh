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
# MDL probes (online codelength of each task's label, last position, length 40; about 20 s on the
# quick demo store; DEMO_MDL=0 leaves them out) and cross-seed stability of the probe directions
# (each seed's model re-run on the other's sequences, 20 label permutations for the shuffled-label
# null; about 60 s; DEMO_STABILITY=0 leaves it out), then the report again so that it shows them
# beside the probe profiles (about 20 s more)
if [ "${DEMO_MDL:-1}" != 0 ]; then
  "$BIN/layerstate" mdl "$OUT/store.zarr" --lengths 40 --positions last
fi
if [ "${DEMO_STABILITY:-1}" != 0 ]; then
  "$BIN/layerstate" stability "$OUT/store.zarr"
fi
if [ "${DEMO_MDL:-1}" != 0 ] || [ "${DEMO_STABILITY:-1}" != 0 ]; then
  "$BIN/layerstate" report "$OUT/store.zarr" --out "$OUT/report" --force --no-chunk-check  # run's report checked them
fi
"$BIN/layerstate" inspect "$OUT/store.zarr" | head -n 12
"$BIN/layerstate" validate "$OUT/store.zarr"
"$BIN/layerstate" pack "$OUT/store.zarr" "$OUT/store.zip" --force
echo
echo "demo finished in $(( $(date +%s) - start ))s"
echo "report:      $OUT/report/index.html   (Markdown: $OUT/report/report.md)"
echo "store:       $OUT/store.zarr   (packed for sharing: $OUT/store.zip)"
