# layerstate -- the two commands that matter: `make demo` and `make test`.
PYTHON ?= python3.11
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

# Pin BLAS to one thread per process: two threads under load made a 50 ms fit take 10 s
# (docs/measured.md, "Threads").
export OMP_NUM_THREADS ?= 1
export OPENBLAS_NUM_THREADS ?= 1
export MKL_NUM_THREADS ?= 1
export OMP_WAIT_POLICY ?= PASSIVE
# Bytecode is cached: where the environment says PYTHONDONTWRITEBYTECODE, every new process (each
# test worker, CLI subprocess and dask worker) compiled every module it imported from source
# again, 2.5-4 s of ~9 s to import the analysis stack (docs/measured.md, "Install and tests").
unexport PYTHONDONTWRITEBYTECODE

.PHONY: demo test bench lint install clean

$(PY):
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "make: $(PYTHON) not found; install Python 3.11 or run 'make PYTHON=python3 ...'" >&2; exit 2; }
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

# torch first, pinned: an unpinned torch pulls a multi-GB CUDA build; the project only asks torch>=2.4.
# Where pip is pointed at a folder holding the CPU wheel (PIP_FIND_LINKS), uv installs it from
# there (4 s; pip took 34 s); anywhere else pip installs it as pip is configured.
# The rest through uv, which keeps that torch and installs the other ~180 packages in about
# 15 s where pip takes about 140 s (docs/measured.md, "Install and tests"); pip is the
# fallback if uv fails.
TORCH_VERSION := 2.13.0
$(STAMP): $(PY) pyproject.toml
	$(PY) -m pip install --quiet "uv>=0.5"
	$(PY) -c "import torch" 2>/dev/null \
	  || { ls "$${PIP_FIND_LINKS:-/nonexistent}"/torch-$(TORCH_VERSION)+cpu-*.whl >/dev/null 2>&1 \
	       && $(VENV)/bin/uv pip install --python $(PY) --quiet --find-links "$$PIP_FIND_LINKS" "torch==$(TORCH_VERSION)"; } \
	  || $(PY) -m pip install --quiet "torch==$(TORCH_VERSION)"
	$(VENV)/bin/uv pip install --python $(PY) --quiet -e ".[test,dev]" \
	  || $(PY) -m pip install --quiet -e ".[test,dev]"
	@# Headless Chromium (Debian's package) for the report's browser tests; where it cannot be
	@# installed (no apt, not root) those tests skip, saying so.
	@command -v chromium >/dev/null 2>&1 || { (apt-get update -qq && apt-get install -y -qq --no-install-recommends chromium) >/dev/null 2>&1 \
	  || echo "make: chromium could not be installed; the report's browser tests will skip" >&2; }
	@touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	bash experiments/demo.sh $(PY)

# Most tests in parallel, pytest-xdist workers (TEST_JOBS: 2, the cores CI has; `make test
# TEST_JOBS=8` on a larger machine), a whole module to a worker (its fixtures are built once);
# then the modules marked serial (tests/conftest.py), also a module to a worker, so that no
# test of the first part competes with their processes and clocks. Not `-n auto`: a container's
# CPU quota is not what Python's CPU count sees, and each worker holds torch (~0.3 GB).
TEST_JOBS ?= 2
test: $(STAMP)
	$(PY) -m pytest -q -n $(TEST_JOBS) --dist loadfile -m "not serial and not gpu"
	$(PY) -m pytest -q -n $(TEST_JOBS) --dist loadfile -m "serial and not gpu"

bench: $(STAMP)
	@for b in bench/[a-z]*.py; do m=$$(basename $$b .py); echo "== bench.$$m" >&2; $(PY) -m bench.$$m || exit 1; done

# lint-imports: the layer contract of pyproject.toml's [tool.importlinter] (a few seconds;
# --no-cache leaves no cache folder in the work tree); vulture: dead code ([tool.vulture]).
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports --no-cache
	$(VENV)/bin/vulture

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info demo-out
