#!/usr/bin/env bash
# The GPU checks of layerstate in one script (docs/gpu.md): the tests marked `gpu`, the quick
# experiment end to end on the GPU, and the capture benchmark at Pythia-160M's shape. Results
# (logs, JSON lines, the quick report) go under $OUT. Each check has its own time limit
# (270 + 170 + 130 s at most, under the 10 minutes one device command may take).
#
#   bash bench/gpu_check.sh wheels   # here, with the package registry: fetch the wheels
#   bash bench/gpu_check.sh          # there, on the GPU machine (no network needed)
#   bash bench/gpu_check.sh tests|quick|bench   # one of the three checks alone
#
# The GPU machine has Python 3.12 and torch with CUDA but not every dependency: `wheels`
# downloads the missing ones (py3.12 manylinux builds, the versions this checkout's .venv
# runs) into .gpu-wheels/ (about 45 MB; excluded from git through .git/info/exclude), which
# travels with the checkout; the check installs them with --no-deps into .gpu-site/.
set -uo pipefail
cd "$(dirname "$0")/.."
WHEELS=${WHEELS:-.gpu-wheels}

# What the GPU machine lacks (measured there), with pytest for the tests.
NEEDED="zarr numcodecs crc32c google-crc32c donfig dask distributed partd locket tblib zict
tornado xarray pydantic pydantic_core annotated-types typing-inspection arviz-base arviz-stats
arviz-plots kernels transformers huggingface_hub hf-xet httpx2 httpcore2 truststore pytest
pluggy iniconfig pytest-timeout typer shellingham rich regex tqdm PyYAML sortedcontainers"

if [ "${1:-}" = wheels ]; then
  VENV_PY=${VENV_PY:-.venv/bin/python}
  mkdir -p "$WHEELS"
  grep -qx "/$WHEELS/" .git/info/exclude 2>/dev/null || echo "/$WHEELS/" >> .git/info/exclude
  pins=()
  for p in $NEEDED; do
    v=$("$VENV_PY" -c "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))" "$p" 2>/dev/null) \
      && pins+=("$p==$v") || pins+=("$p")
  done
  "$VENV_PY" -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --abi cp312 --abi abi3 --abi none --platform manylinux_2_28_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform any \
    -d "$WHEELS" "${pins[@]}"
  ls "$WHEELS" | wc -l; du -sh "$WHEELS"
  exit 0
fi

PY=${PY:-python3}
OUT=${OUT:-gpu-check-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1
export CUBLAS_WORKSPACE_CONFIG=:4096:8
if compgen -G "$WHEELS/*.whl" > /dev/null; then
  if ! "$PY" -m pip install --quiet --no-deps --no-index --target .gpu-site "$WHEELS"/*.whl 2>&1 | tail -3; then
    for w in "$WHEELS"/*.whl; do "$PY" -m zipfile -e "$w" .gpu-site; done  # no pip: a wheel is a zip
  fi
  export PYTHONPATH="$PWD/.gpu-site:$PWD"
else
  export PYTHONPATH="$PWD"
fi

{
  date -u; nvidia-smi -L; nproc
  "$PY" -c "import torch, transformers, zarr, xarray; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name(0)); print('transformers', transformers.__version__, 'zarr', zarr.__version__, 'xarray', xarray.__version__)"
} 2>&1 | tee "$OUT/machine.txt"

status=0
step() {  # step NAME SECONDS COMMAND...: its log in $OUT/NAME.txt, its time in $OUT/times.txt
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS
  timeout "$limit" "$@" > "$OUT/$name.txt" 2>&1
  local rc=$?
  echo "$name rc=$rc seconds=$((SECONDS - t0))" | tee -a "$OUT/times.txt"
  tail -3 "$OUT/$name.txt"
  [ $rc -eq 0 ] || status=1
}

WHAT=${1:-all}
want() { [ "$WHAT" = all ] || [ "$WHAT" = "$1" ]; }

# 1. The tests marked gpu (a tiny grid of all ten architectures through every stage).
want tests && step gpu-tests 270 "$PY" -m pytest -q -p no:cacheprovider -m gpu tests/gpu -o addopts="-ra --strict-markers"

# 2. The quick experiment end to end on the GPU, four training processes sharing it; the
#    report comes back, the store stays on the machine.
if want quick; then
  rm -rf /tmp/layerstate-quick
  step quick-cuda 170 "$PY" -m layerstate.cli run experiments/quick.toml --out /tmp/layerstate-quick --device cuda --jobs 4
  (cd /tmp/layerstate-quick 2>/dev/null && tar czf - --exclude='*.zarr' . ) > "$OUT/quick-report.tgz"
fi

# 3. Capture against the bare forward with the float16 copy to host and an fsynced write of
#    the same bytes (Pythia-160M's shape, random weights): one JSON line.
want bench && step capture-bench 130 "$PY" -m bench.capture --device cuda

exit $status
