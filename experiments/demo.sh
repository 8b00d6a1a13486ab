#!/usr/bin/env bash
# The demo: build a store, then show the store commands on it. Called by `make demo`.
set -euo pipefail
PY=${1:-.venv/bin/python}
BIN=$(dirname "$PY")
OUT=${DEMO_OUT:-demo-out}
rm -rf "$OUT"; mkdir -p "$OUT"
"$PY" -m layerstate.demo "$OUT/store.zarr"
"$BIN/layerstate" inspect "$OUT/store.zarr"
"$BIN/layerstate" validate "$OUT/store.zarr"
"$BIN/layerstate" pack "$OUT/store.zarr" "$OUT/store.zip"
"$BIN/layerstate" validate "$OUT/store.zip"
echo "demo store: $OUT/store.zarr (packed: $OUT/store.zip)"
