"""Scale: a cluster against one worker, a store larger than memory, a model of real size.

Prints one JSON line with one object per part run. Each part can be run alone
(``--only scaleout|ram|model``) and is sized by flags, so a smoke run of each takes minutes:

* ``scaleout``: a store of ``--runs`` GPT-NeoX runs (random weights, 4 layers, d 128; capture
  needs no training) captured at length 40 with ``--scaleout-sequences`` sequences each; then
  the same probe sweep (every layer and position, ``method="exact"`` at C = 1, 5 folds, with
  the control task) and the same ablation (settings ``probe`` and ``random:4`` at every layer)
  on a ``local:1`` and a ``local:2`` cluster, both started before timing (their workers warmed
  by a small probe), in interleaved rounds, the fastest round of each kept.
  ``speedup_*`` = local:1 time / local:2 time (goal >= 1.7 on 2 cores).
* ``ram``: a store of ``--gb`` GB (default 30) of float16 hidden states at Pythia-160M's
  shape (13 layers x 768 features, length 64, one run, a 6-class label with a signal that
  grows with depth), written block by block through the Store API from generated arrays, so
  building it holds one block. It is probed at every layer, at the last position (``--positions
  all``: at every position, which reads each layer's chunks once per block of positions and
  spends hours fitting 832 cells of 23,000 rows x 768 features) with ``method="screen"`` (closed-form shrinkage LDA, 5 folds, no
  control task, no per-sequence output) in a fresh process; that process reports
  its peak resident set size (``VmHWM``; a process that only opens the store is measured
  too) and the bytes the sweep read (``/proc/self/io`` from after the store is opened:
  ``read_bytes``, what came from the disk, and ``rchar``, everything read through system
  calls, from the page cache or not: a chunk read again shows there). Before the sweep, and before timing one plain read of every file of the
  store, the page cache is emptied: ``/proc/sys/vm/drop_caches`` where writable, otherwise
  ``posix_fadvise(DONTNEED)`` on every file of the store. Goals: peak RSS / store <= 0.1,
  bytes read / store <= 1.05, sweep time / cold read time <= 1.5. The store is deleted at the
  end, whatever happens (``--dir`` says where it is written: it needs ``--gb`` free).
* ``model``: a GPT-NeoX at Pythia-160M's configuration (12 layers, d_model 768, 12 heads,
  MLP 3072, vocabulary 50304, rotary on a quarter of each head; random initialisation from
  the config, nothing downloaded; about 124M parameters, Pythia's 162M less the unembedding,
  which the task head replaces) stored as a run the way a pretrained checkpoint is (its
  transformers config and weights: ``capture.pretrained``), then ``capture_length`` of ``--sequences``
  sequences at length ``--length`` into the store against the bare forward of the same batches
  with ``output_hidden_states=True`` (hidden states stacked into one array, then dropped),
  one torch thread each, interleaved, fastest of ``--rounds``. Goal: capture / bare <= 1.2.
  Peak RSS of a capture of ``--rss-sequences`` and 10x as many sequences, each in a fresh
  process that rebuilds the model from the store (goal: ratio <= 1.2).

Full run, on a quiet machine with 35 GB free where ``--dir`` points (about an hour on 2 cores;
hours with ``--positions all``): ``nice python -m bench.scale``. Smoke run: ``python -m bench.scale --gb 0.5 --sequences 64
--rss-sequences 32 --runs 2 --scaleout-sequences 200 --rounds 1``. Figures measured on a loaded
machine are not results: say so wherever they are quoted.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from functools import partial
from pathlib import Path
from typing import Any, cast

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
# Pythia-160M (EleutherAI's config): what the ram and model parts are shaped like.
PYTHIA_160M = {
    "hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12,
    "intermediate_size": 3072, "vocab_size": 50304, "max_position_embeddings": 2048,
    "rotary_pct": 0.25, "rotary_emb_base": 10000, "use_parallel_residual": True,
    "hidden_act": "gelu", "layer_norm_eps": 1e-5, "tie_word_embeddings": False,
}
RAM_LAYERS, RAM_FEATURES, RAM_LENGTH, RAM_CLASSES = 13, 768, 64, 6
SCALE_LENGTH = 40


# ----------------------------------------------------------------------------- shared
def _child(code: str, *args: str) -> dict:
    """Run ``code`` in a fresh interpreter (one BLAS thread); its last stdout line is JSON."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-W", "ignore", "-c", code, *args], capture_output=True,
                         text=True, env=env, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"bench child failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


#: Prepended to every child: its peak RSS and I/O counters, as JSON fields.
MEASURE = """
import json, resource, time
def peak_rss():
    try:
        with open("/proc/self/status") as f:
            return next(int(l.split()[1]) * 1024 for l in f if l.startswith("VmHWM:"))
    except (OSError, StopIteration):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
def io():
    try:
        with open("/proc/self/io") as f:
            return {k: int(v) for k, v in (l.split(":") for l in f)}
    except OSError:
        return {}
"""


def _size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def _fastest(rounds: int, jobs: dict[str, Callable[[], Any]]) -> dict[str, float]:
    """Each job ``rounds`` times, interleaved (load falls on all alike); the fastest of each."""
    best = {name: float("inf") for name in jobs}
    for _ in range(rounds):
        for name, job in jobs.items():
            t0 = time.perf_counter()
            job()
            best[name] = min(best[name], time.perf_counter() - t0)
    return best


def _say(line: str) -> None:
    print(f"== {line}", file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------- scale-out
def _gpt_neox_run(st: Any, rid: str, hf: dict, seed: int, task: str = "s3") -> Any:
    """A run of random GPT-NeoX weights (config ``hf``), stored like an imported checkpoint."""
    from capture.models import build_from_hf_config
    from capture.tasks import get_task
    from capture.train import RunnableTask

    config = get_task(task)
    cfg = cast(RunnableTask, config)
    n_classes = cfg.n_classes[cfg.target]
    model = build_from_hf_config({"model_type": "gpt_neox", **hf}, n_classes=n_classes, seed=seed)
    st.add_run(rid, task=task, arch="transformer", variant="pretrained", seed=seed,
               model_config={"pretrained": "random", "hf_config": model.hf_config_dict},
               task_config=config.model_dump())
    st.write_weights(rid, model.state_dict())
    st.update_run_attrs(rid, status="trained", n_classes=n_classes, vocab_size=cfg.vocab_size,
                        target=cfg.target)
    return model


def scaleout(tmp: Path, runs: int, sequences: int, rounds: int) -> dict:
    import torch

    from analysis.compute import compute, connect
    from analysis.interventions import ablation
    from analysis.probes import probe
    from capture.record import capture_length
    from store import Store

    torch.set_num_threads(1)
    url = str(tmp / "scaleout.zarr")
    st = Store.create(url, title="bench scale-out")
    small = {"hidden_size": 128, "num_hidden_layers": 4, "num_attention_heads": 4,
             "intermediate_size": 512, "vocab_size": 16, "max_position_embeddings": 256}
    ids = [f"r{i}" for i in range(runs)]
    t0 = time.perf_counter()
    for i, rid in enumerate(ids):
        model = _gpt_neox_run(st, rid, small, seed=i)
        capture_length(st, rid, SCALE_LENGTH, n_sequences=sequences, model=model)
    st = Store.open(url)
    build_s = time.perf_counter() - t0

    def sweep(client: Any) -> Any:
        return probe(st, runs=ids, positions="all", C=1.0, folds=5, method="exact",
                     per_sequence=False, scheduler=client)

    def ablate(client: Any) -> Any:
        return compute([ablation(st, ids, [SCALE_LENGTH], settings=["probe", "random:4"],
                                 fit_length=SCALE_LENGTH)], scheduler=client)

    with ExitStack() as stack:
        clients = {n: stack.enter_context(connect(f"local:{n}", say=_say)) for n in (1, 2)}
        for client in clients.values():  # imports and the first read, outside the timing
            probe(st, runs=ids[:1], layers=["L0"], positions="last", C=1.0, folds=2,
                  method="exact", per_sequence=False, scheduler=client)
        best = _fastest(rounds, {f"{what}_local{n}": partial(job, client)
                                 for what, job in (("sweep", sweep), ("ablation", ablate))
                                 for n, client in clients.items()})
    total = {n: best[f"sweep_local{n}"] + best[f"ablation_local{n}"] for n in (1, 2)}
    return {
        "runs": runs, "sequences": sequences, "length": SCALE_LENGTH, "layers": 5, "features": 128,
        "store_bytes": _size(tmp / "scaleout.zarr"), "build_s": round(build_s, 1),
        "seconds": {k: round(v, 2) for k, v in best.items()},
        "speedup_sweep": round(best["sweep_local1"] / best["sweep_local2"], 3),
        "speedup_ablation": round(best["ablation_local1"] / best["ablation_local2"], 3),
        "speedup_both": round(total[1] / total[2], 3),
        "goal_speedup": 1.7,
    }


# ----------------------------------------------------------------------------- larger than RAM
def build_big(path: Path, gb: float, seed: int = 0) -> dict:
    """A one-run store of about ``gb`` GB of float16 hidden states, written block by block."""
    from store import Store

    per_sequence = RAM_LENGTH * RAM_LAYERS * RAM_FEATURES * 2
    n = max(64, int(gb * 1e9 / per_sequence))
    rng = np.random.default_rng(seed)
    class_dir = rng.standard_normal((RAM_CLASSES, RAM_FEATURES), dtype=np.float32)
    strength = np.linspace(0.0, 0.3, RAM_LAYERS, dtype=np.float32)  # decodable, more so deeper
    st = Store.create(str(path), title="bench larger than RAM")
    st.add_run("r0", task="s3", arch="transformer", seed=0)
    layers = ["embed", *(f"L{i}" for i in range(RAM_LAYERS - 1))]
    with st.length_writer("r0", RAM_LENGTH, n_sequences=n, layers=layers, n_features=RAM_FEATURES,
                          labels=["state"], dtype="float16") as w:
        for b in range(w.n_blocks):
            start, stop = w.block_range(b)
            m = stop - start
            tokens = rng.integers(0, RAM_CLASSES, (m, RAM_LENGTH))
            state = np.cumsum(tokens, axis=1) % RAM_CLASSES
            hidden = np.empty((m, RAM_LENGTH, RAM_LAYERS, RAM_FEATURES), dtype=np.float16)
            for layer in range(RAM_LAYERS):
                h = rng.standard_normal((m, RAM_LENGTH, RAM_FEATURES), dtype=np.float32)
                h += strength[layer] * class_dir[state]
                hidden[:, :, layer] = h
            w.write_block(b, hidden=hidden, tokens=tokens, labels={"state": state})
    return {"sequences": n, "block": w.block_size}


def drop_cache(path: Path) -> str:
    """Empty the page cache of the store: all caches if allowed, else each file's pages."""
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            os.sync()
            f.write("3\n")
        return "drop_caches"
    except OSError:
        pass
    for file in path.rglob("*"):
        if file.is_file():
            fd = os.open(file, os.O_RDONLY)
            try:
                os.fdatasync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)
    return "posix_fadvise"


def read_once(path: Path) -> int:
    """Read every file of the store once (16 MiB at a time); returns the bytes read."""
    total = 0
    buf = bytearray(16 << 20)
    view = memoryview(buf)
    for file in sorted(path.rglob("*")):
        if file.is_file():
            with open(file, "rb", buffering=0) as f:
                while (k := f.readinto(view)) > 0:
                    total += k
    return total


SCREEN = MEASURE + """
import sys
t0 = time.perf_counter()
from analysis.probes import probe
from store import Store
st = Store.open(sys.argv[1])
before = io()
extra = {}
if sys.argv[2] == "sweep":
    ds = probe(st, "state", positions=sys.argv[3], method="screen", folds=5, control=False,
               per_sequence=False)
    acc = ds["accuracy"].mean([d for d in ("fold", "position") if d in ds["accuracy"].dims])
    extra = {"cells": int(ds["accuracy"].notnull().all("fold").sum()),
             "best_layer_accuracy": round(float(acc.max()), 4)}
after = io()
print(json.dumps({"peak_rss": peak_rss(), "seconds": time.perf_counter() - t0,
                  "read_bytes": after.get("read_bytes", 0) - before.get("read_bytes", 0),
                  "rchar": after.get("rchar", 0) - before.get("rchar", 0), **extra}))
"""


def ram(tmp: Path, gb: float, positions: str) -> dict:
    path = tmp / "big.zarr"
    try:
        t0 = time.perf_counter()
        shape = build_big(path, gb)
        build_s = time.perf_counter() - t0
        size = _size(path)
        how = drop_cache(path)
        t0 = time.perf_counter()
        read_once(path)
        read_s = time.perf_counter() - t0
        base = _child(SCREEN, str(path), "open", positions)
        drop_cache(path)
        sweep = _child(SCREEN, str(path), "sweep", positions)
        mem = next((int(line.split()[1]) * 1024 for line in Path("/proc/meminfo").read_text().splitlines()
                    if line.startswith("MemTotal:")), 0)
        disk_read = sweep["read_bytes"]
        return {
            "store_bytes": size, "store_gb": round(size / 1e9, 2), "machine_memory_bytes": mem,
            "larger_than_ram": size > mem, **shape, "length": RAM_LENGTH, "layers": RAM_LAYERS,
            "features": RAM_FEATURES, "positions": positions, "build_s": round(build_s, 1), "cache_emptied_by": how,
            "cold_read_s": round(read_s, 2), "sweep_s": round(sweep["seconds"], 2),
            "cells": sweep["cells"], "best_layer_accuracy": sweep["best_layer_accuracy"],
            "peak_rss_bytes": sweep["peak_rss"], "open_only_peak_rss_bytes": base["peak_rss"],
            "ratio_peak_rss_to_store": round(sweep["peak_rss"] / size, 4),
            "goal_peak_rss_to_store": 0.1,
            "disk_read_bytes": disk_read, "rchar_bytes": sweep["rchar"],
            "ratio_rchar_to_store": round(sweep["rchar"] / size, 3),
            # 0 where the kernel does not account block I/O to the process (some containers)
            "ratio_bytes_read_to_store": round((disk_read or sweep["rchar"]) / size, 4),
            "bytes_read_counter": "read_bytes" if disk_read else "rchar",
            "goal_bytes_read_to_store": 1.05,
            "ratio_sweep_to_cold_read": round(sweep["seconds"] / read_s, 3),
            "goal_sweep_to_cold_read": 1.5,
        }
    finally:
        shutil.rmtree(path, ignore_errors=True)


# ----------------------------------------------------------------------------- real model size
CAPTURE = MEASURE + """
import sys
import torch
torch.set_num_threads(1)
from capture.record import capture_length
from store import Store
st = Store.open(sys.argv[1], mode="r+")
capture_length(st, sys.argv[2], int(sys.argv[3]), n_sequences=int(sys.argv[4]))
print(json.dumps({"peak_rss": peak_rss()}))
"""


def model_size(tmp: Path, sequences: int, length: int, rss_sequences: int, rounds: int) -> dict:
    import torch

    from capture.record import capture_length
    from capture.tasks import get_task
    from capture.train import STREAM_CAPTURE, RunnableTask, rng_for
    from store import Store

    torch.set_num_threads(1)
    path = tmp / "model.zarr"
    st = Store.create(str(path), title="bench model size")
    rid = "pythia160m-random"
    model = _gpt_neox_run(st, rid, PYTHIA_160M, seed=0)
    n_params = sum(p.numel() for p in model.parameters())
    task = cast(RunnableTask, get_task("s3"))
    group = path / "runs" / rid / f"len_{length:03d}"
    with st.length_writer(rid, length, n_sequences=sequences, layers=model.layer_names,
                          n_features=model.hidden_size, labels=list(task.label_names)) as w:
        block = w.block_size
    shutil.rmtree(group)

    @torch.no_grad()
    def bare() -> None:
        for b, lo in enumerate(range(0, sequences, block)):
            batch = task.generate(rng_for(0, STREAM_CAPTURE, length, b), min(block, sequences - lo), length)
            out = model.backbone(torch.as_tensor(batch.tokens), output_hidden_states=True, use_cache=False)
            torch.stack(out.hidden_states, dim=2).numpy()  # the array a user would keep

    def capture() -> None:
        shutil.rmtree(group, ignore_errors=True)
        capture_length(Store.open(str(path), mode="r+"), rid, length, n_sequences=sequences, model=model)

    best = _fastest(rounds, {"bare_forward_output_hidden_states": bare, "capture_to_store": capture})
    rss = {}
    for n in (rss_sequences, 10 * rss_sequences):
        copy = tmp / f"rss{n}.zarr"
        shutil.copytree(path, copy)
        shutil.rmtree(copy / "runs" / rid / f"len_{length:03d}", ignore_errors=True)
        try:
            rss[n] = _child(CAPTURE, str(copy), rid, str(length), str(n))["peak_rss"]
        finally:
            shutil.rmtree(copy, ignore_errors=True)
    small, large = rss_sequences, 10 * rss_sequences
    return {
        "config": {k: PYTHIA_160M[k] for k in ("num_hidden_layers", "hidden_size", "num_attention_heads")},
        "parameters": n_params, "layers_stored": len(model.layer_names), "sequences": sequences,
        "length": length, "block": block, "store_bytes": _size(path),
        "seconds": {k: round(v, 2) for k, v in best.items()},
        "ratio_capture_to_bare": round(best["capture_to_store"] / best["bare_forward_output_hidden_states"], 3),
        "goal_capture_to_bare": 1.2,
        "peak_rss_bytes": {f"{small}_sequences": rss[small], f"{large}_sequences": rss[large]},
        "ratio_peak_rss_10x_sequences": round(rss[large] / rss[small], 3),
        "goal_peak_rss_ratio": 1.2,
    }


# ----------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", choices=("scaleout", "ram", "model"), action="append",
                    help="run only this part (repeatable); default all three")
    ap.add_argument("--runs", type=int, default=4, help="scaleout: runs in the store (default 4)")
    ap.add_argument("--scaleout-sequences", type=int, default=2000,
                    help="scaleout: sequences per run (default 2000)")
    ap.add_argument("--gb", type=float, default=30.0, help="ram: store size in GB (default 30)")
    ap.add_argument("--positions", choices=("all", "last"), default="last",
                    help="ram: probe every layer at the last position (default: one cell per layer, "
                         "so the sweep is bound by reading) or at every position (bound by fitting)")
    ap.add_argument("--sequences", type=int, default=2000,
                    help="model: sequences of the timed capture and bare forward (default 2000)")
    ap.add_argument("--length", type=int, default=64, help="model: sequence length (default 64)")
    ap.add_argument("--rss-sequences", type=int, default=256,
                    help="model: peak RSS at this many sequences and 10x as many (default 256)")
    ap.add_argument("--rounds", type=int, default=2, help="timed rounds, fastest kept (default 2)")
    ap.add_argument("--dir", default=None, help="where the stores are written (default: a temporary directory)")
    args = ap.parse_args(argv)
    parts = args.only or ["scaleout", "ram", "model"]
    out: dict[str, Any] = {"bench": "scale", "cpus": os.cpu_count(),
                           "load_average_1min": round(os.getloadavg()[0], 2)}
    tmp = Path(tempfile.mkdtemp(prefix="layerstate-bench-scale-", dir=args.dir))
    try:
        if "scaleout" in parts:
            _say("scale-out: local:2 against local:1")
            out["scaleout"] = scaleout(tmp, args.runs, args.scaleout_sequences, args.rounds)
        if "ram" in parts:
            _say(f"larger than RAM: a {args.gb:g} GB store, screened at every layer")
            out["ram"] = ram(tmp, args.gb, args.positions)
        if "model" in parts:
            _say("real model size: GPT-NeoX at Pythia-160M's configuration")
            out["model"] = model_size(tmp, args.sequences, args.length, args.rss_sequences, args.rounds)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    out["peak_rss_driver_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main()
