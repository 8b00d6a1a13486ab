"""Capture into the store against the bare forward pass and the disk, side by side in one run.

Prints one JSON line. Measured, each ``--rounds`` times, interleaved, fastest kept:

* ``bare``: the same batches through transformers' own forward with
  ``output_hidden_states=True``, the stacked hidden states left where they are computed;
* ``bare_copy``: the same, the hidden states cast to float16 and copied to host memory
  (what any capture must at least do);
* ``disk``: an fsynced write of as many bytes as the float16 hidden states, in 4 MB
  writes (as ``dd bs=4M conv=fsync`` does);
* ``capture``: ``capture.record.capture_length`` writing every layer, labels and logits to
  a store on disk (on an accelerator several store blocks per forward, cast on the device,
  pinned copies, chunk threads overlapped with the next forward).

Shapes: ``small`` (the default on the CPU) is the default GPT-NeoX (4 layers, d 128) at
L = 40, 2048 sequences (``BENCH_CAPTURE_N``); ``pythia160m`` (the default elsewhere) is a
GPT-NeoX at Pythia-160M's configuration with random weights, 4000 sequences of 64 tokens
(13 stored layers × 768 features, 5.16 GB of float16). Goals: on the CPU capture at most
1.1× the bare forward; on a GPU at most 1.25× the larger of ``bare_copy`` and ``disk``. On
the CPU the peak memory of a capture of N and 10N sequences is measured in fresh processes.

    python -m bench.capture                      # CPU, small
    python -m bench.capture --device cuda        # GPU, Pythia-160M's shape
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch

from capture.models import ModelConfig, build_model
from capture.record import blocks_per_forward, capture_length, full_float32
from capture.tasks import get_task
from capture.train import STREAM_CAPTURE, RunnableTask, rng_for
from store import Store

RID = "s3-transformer-default-s0"


def make_store(path: Path, shape: str) -> tuple[Store, str, Any]:
    st = Store.create(str(path))
    config = get_task("s3")
    task = cast(RunnableTask, config)
    if shape == "pythia160m":
        from bench.scale import PYTHIA_160M, _gpt_neox_run

        return st, RID, _gpt_neox_run(st, RID, PYTHIA_160M, seed=0)
    cfg = ModelConfig(arch="transformer")
    model = build_model(cfg, task.vocab_size, 6, seed=0)
    st.add_run(RID, task="s3", arch="transformer", seed=0,
               model_config=cfg.model_dump(), task_config=config.model_dump())
    st.write_weights(RID, model.state_dict())
    st.update_run_attrs(RID, n_classes=6, vocab_size=task.vocab_size, status="trained")
    return st, RID, model


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@torch.no_grad()
def bare(model, n: int, L: int, block: int, per_forward: int, device: torch.device, copy: bool) -> None:
    """The forward of the blocks' sequences, ``per_forward`` blocks at a time; with ``copy``
    the hidden states are cast to float16 and brought to host memory."""
    task = cast(RunnableTask, get_task("s3"))
    starts = list(range(0, n, block))
    for i in range(0, len(starts), per_forward):
        toks = [task.generate(rng_for(0, STREAM_CAPTURE, L, b), min(block, n - starts[b]), L).tokens
                for b in range(i, min(i + per_forward, len(starts)))]
        tok = torch.as_tensor(np.concatenate(toks), device=device)
        out = model.backbone(tok, output_hidden_states=True, use_cache=False)
        hidden = torch.stack(out.hidden_states, dim=2)
        if copy:
            hidden.to(torch.float16).cpu().numpy()
        elif device.type == "cpu":
            hidden.numpy()
    _sync(device)


def disk_write(path: Path, nbytes: int) -> None:
    """``nbytes`` written in 4 MB writes, then fsynced (what ``dd bs=4M conv=fsync`` does)."""
    buf = np.random.default_rng(0).integers(0, 255, 4 << 20, dtype=np.uint8).tobytes()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        left = nbytes
        while left > 0:
            left -= os.write(fd, buf[: min(len(buf), left)])
        os.fsync(fd)
    finally:
        os.close(fd)
    path.unlink()


PEAK = """
import resource, sys
from capture.record import capture_length
from store import Store
st = Store.open(sys.argv[1], mode="r+")
capture_length(st, sys.argv[2], 120, n_sequences=int(sys.argv[3]))
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
"""


def peak_rss(path: Path, rid: str, n: int) -> int:
    out = subprocess.run([sys.executable, "-c", PEAK, str(path), rid, str(n)], check=True,
                         capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    return int(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.capture", description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cpu", help="cpu (default) or cuda[:N]")
    ap.add_argument("--shape", choices=["small", "pythia160m"], default=None,
                    help="model and data shape (default: small on the CPU, pythia160m elsewhere)")
    ap.add_argument("--sequences", type=int, default=None)
    ap.add_argument("--length", type=int, default=None)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--no-rss", action="store_true", help="skip the peak-memory subprocesses")
    args = ap.parse_args(argv)
    device = torch.device(args.device)
    on_cpu = device.type == "cpu"
    shape = args.shape or ("small" if on_cpu else "pythia160m")
    n = args.sequences or (int(os.environ.get("BENCH_CAPTURE_N", "2048")) if shape == "small" else 4000)
    L = args.length or (40 if shape == "small" else 64)
    torch.set_num_threads(1)
    tmp = Path(tempfile.mkdtemp(prefix="layerstate-bench-capture-", dir=os.environ.get("BENCH_DIR")))
    try:
        st, rid, model = make_store(tmp / "s.zarr", shape)
        model.to(device).eval()
        group = tmp / "s.zarr" / "runs" / rid / f"len_{L:03d}"
        with st.length_writer(rid, L, n_sequences=n, layers=model.layer_names,
                              n_features=model.hidden_size, labels=["state"], n_classes=6) as w:
            block = w.block_size
        shutil.rmtree(group)
        n_layers = len(model.layer_names)
        per_forward = blocks_per_forward(str(device), block, L * n_layers * model.hidden_size * 4)
        hidden_bytes = n * L * n_layers * model.hidden_size * 2

        def capture() -> None:
            shutil.rmtree(group, ignore_errors=True)
            capture_length(Store.open(str(tmp / "s.zarr"), mode="r+"), rid, L, n_sequences=n,
                           model=model, device=str(device))

        jobs: dict[str, Any] = {
            "bare": lambda: bare(model, n, L, block, per_forward, device, copy=False),
            "bare_copy": lambda: bare(model, n, L, block, per_forward, device, copy=True),
            "disk": lambda: disk_write(tmp / "dd.bin", hidden_bytes),
            "capture": capture,
        }
        with full_float32(str(device)):
            bare(model, min(n, 4 * block), L, block, per_forward, device, copy=True)  # warm-up
            best = {k: float("inf") for k in jobs}
            for _ in range(args.rounds):
                for name, job in jobs.items():
                    t0 = time.perf_counter()
                    job()
                    best[name] = min(best[name], time.perf_counter() - t0)
        floor = max(best["bare_copy"], best["disk"])
        out: dict[str, Any] = {
            "bench": "capture", "device": str(device),
            "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
            "shape": shape, "sequences": n, "length": L, "layers": n_layers,
            "features": model.hidden_size, "block": block, "blocks_per_forward": per_forward,
            "hidden_float16_bytes": hidden_bytes, "host_cores": os.cpu_count(),
            "seconds": {k: round(v, 3) for k, v in best.items()},
            "tokens_per_s": {k: round(n * L / best[k]) for k in ("bare", "bare_copy", "capture")},
            "GBps": {k: round(hidden_bytes / best[k] / 1e9, 3) for k in ("bare_copy", "disk", "capture")},
            "capture_over_bare_time": round(best["capture"] / best["bare"], 3),
            "capture_over_bare_copy_time": round(best["capture"] / best["bare_copy"], 3),
            "capture_over_max_bare_copy_disk": round(best["capture"] / floor, 3),
        }
        if on_cpu:
            out["goal_capture_over_bare_time"] = 1.1
        else:
            out["goal_capture_over_max_bare_copy_disk"] = 1.25
        if on_cpu and not args.no_rss and shape == "small":
            small, large = 1000, 10000
            shutil.copytree(tmp / "s.zarr", tmp / "a.zarr")
            shutil.copytree(tmp / "s.zarr", tmp / "b.zarr")
            m_small, m_large = peak_rss(tmp / "a.zarr", rid, small), peak_rss(tmp / "b.zarr", rid, large)
            out["peak_rss_bytes"] = {f"{small}_seqs_L120": m_small, f"{large}_seqs_L120": m_large}
            out["peak_rss_ratio_10x_sequences"] = round(m_large / m_small, 3)
            out["goal_peak_rss_ratio"] = 1.2
        print(json.dumps(out))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
