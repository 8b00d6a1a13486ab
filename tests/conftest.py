"""Shared fixtures: small synthetic stores and a local S3 server (moto) on 127.0.0.1."""

from __future__ import annotations

import os
import re
from pathlib import Path

# One BLAS thread per process: two threads under load turned 50 ms fits into 10 s
# (docs/measured.md, "Threads").
for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")
# torch.compile's tests build inductor's CPU kernels as plain C++ loops, not with vector
# intrinsics: the same graphs and the same kernels' loops, about 30% less g++ time on a cold
# cache (docs/measured.md, "CI time, 2026-12-07, second pass"). What they prove (a compiled
# run equals eager within rounding, resumes bit for bit, recompiles when it must) does not
# depend on how g++ vectorises a loop; the product and `bench/` compile as torch chooses.
# An environment variable, so the processes the tests start build the same way.
os.environ.setdefault("TORCHINDUCTOR_VEC_ISA_OK", "0")

import numpy as np  # noqa: E402  (after the thread pins above)
import pytest  # noqa: E402
from hypothesis import settings  # noqa: E402

from tests import module_times  # noqa: E402

# Property tests draw the same examples on every run: a fixed seed per test (derandomize) and
# no example database, so no submission fails or passes by chance, and a failure seen once is
# seen every time (then kept as an explicit @example). `HYPOTHESIS_PROFILE=explore` draws new
# random examples, to look for cases the fixed ones miss.
settings.register_profile("ci", derandomize=True, database=None, print_blob=True, deadline=None)
settings.register_profile("explore", derandomize=False, database=None, print_blob=True, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))



@pytest.hookimpl(trylast=True)
def pytest_configure(config):
    if hasattr(config.option, "loadscopereorder"):  # modules queued longest first, as ordered below
        config.option.loadscopereorder = False
    # Calibrated design boundaries are kept on disk between processes (analysis.stats.disk_cache):
    # for the tests, one folder per test run under pytest's own temporary root, shared by the
    # xdist workers and the commands they start, never the user's cache; pytest removes it with
    # the run's other folders.
    if "LAYERSTATE_CACHE_DIR" not in os.environ:
        base = config._tmp_path_factory.getbasetemp()
        root = base.parent if hasattr(config, "workerinput") else base
        os.environ["LAYERSTATE_CACHE_DIR"] = str(root / "layerstate-cache")


#: Test modules that time leases, kill -9 writers, race processes or start dask clusters.
#: `make test` runs them after the rest has run (pytest-xdist, a module to a worker, both
#: parts), so that no test of the first part competes with them for the cores while they
#: wait on processes and clocks. Marked ``serial`` here, in one place, by file name.
SERIAL_MODULES = frozenset({
    "test_cluster_faults.py", "test_cluster_pipeline.py", "test_scheduler_options.py",
    "test_concurrency.py", "test_resume.py", "test_transfer.py", "test_transfer_plain.py",
    "test_compute.py", "test_record.py", "test_ctrl_c.py",
})


def _serial_part(config) -> bool:
    """Whether this session runs only the serial modules (`make test`'s second part: ``-m
    "serial and not gpu"``)."""
    return re.fullmatch(r"serial( and not \w+)*", (config.getoption("markexpr", "") or "").strip()) is not None


def pytest_ignore_collect(collection_path, config):
    # the serial part imports only its own modules (9 s of collection instead of 19 s)
    if collection_path.suffix == ".py" and collection_path.name.startswith("test_") and _serial_part(config):
        return collection_path.name not in SERIAL_MODULES or None
    return None


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by marker
def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.path.name in SERIAL_MODULES:
            item.add_marker(pytest.mark.serial)
    # the longest modules first (tests/module_times.py), each module's tests in their own order;
    # pytest-xdist then queues the modules as collected (its reordering is off: pytest_configure)
    seconds = module_times.load()
    root = config.rootpath
    order = {}
    for i, item in enumerate(items):
        order.setdefault(item.path, (-seconds.get(item.path.relative_to(root).as_posix(), 0.0), i))
    items.sort(key=lambda item: order[item.path])


def synthetic_arrays(rng: np.random.Generator, n: int = 64, length: int = 12, n_layers: int = 2,
                     n_features: int = 8, n_classes: int = 2) -> dict:
    """Random activations shaped like a capture: hidden (sequence, position, layer, feature)."""
    tokens = rng.integers(0, 2, size=(n, length))
    parity = np.cumsum(tokens, axis=1) % 2
    return {
        "hidden": rng.standard_normal((n, length, n_layers + 1, n_features)).astype("float32"),
        "tokens": tokens,
        "labels": {"parity": parity, "ones": np.cumsum(tokens, axis=1)},
        "logits": rng.standard_normal((n, length, n_classes)).astype("float32"),
    }


@pytest.fixture(scope="session")
def build_once(tmp_path_factory):
    """``build_once(name, build)``: the folder ``name``, made once per test run for every
    pytest-xdist worker. The first worker to ask calls ``build(path)`` under a file lock; the
    others wait and get the same path once it is complete. For stores and reports the tests
    only read (open them read-only), which each worker otherwise built for itself."""
    import shutil

    from filelock import FileLock

    base = tmp_path_factory.getbasetemp()
    shared = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "built-once"
    shared.mkdir(exist_ok=True)

    def get(name: str, build) -> Path:
        path = shared / name
        with FileLock(str(shared / f"{name}.lock")):
            if not (shared / f"{name}.done").exists():
                if path.exists():  # a build that failed part-way, in another worker
                    shutil.rmtree(path)
                build(path)
                (shared / f"{name}.done").touch()
        return path

    return get


@pytest.fixture
def make_store(tmp_path):
    """Factory: a store with ``runs`` runs of synthetic data at the given lengths."""
    from store import Store

    def make(name="s.zarr", runs=("r0",), lengths=(12,), n=64, block_size=16, seed=0, **kw):
        st = Store.create(str(tmp_path / name), title="test")
        rng = np.random.default_rng(seed)
        for i, rid in enumerate(runs):
            st.add_run(rid, task="parity", arch="lstm", seed=i)
            for L in lengths:
                arrs = synthetic_arrays(rng, n=n, length=L, **kw)
                st.write_length(rid, L, **arrs, block_size=block_size)
        return st

    return make


@pytest.fixture(scope="session")
def s3_server():
    """A moto S3 endpoint on 127.0.0.1 with a bucket; yields fsspec storage options."""
    boto3 = pytest.importorskip("boto3")
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    creds = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}
    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", **creds).create_bucket(
        Bucket="layerstate-test"
    )
    opts = {
        "key": "testing",
        "secret": "testing",
        "client_kwargs": {"endpoint_url": endpoint, "region_name": "us-east-1"},
    }
    yield opts
    server.stop()
