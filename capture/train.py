"""Training: per-position classification on labelled positions, stored as arrays.

AdamW with linear warm-up and cosine decay, gradient clipping, early stopping on held-out
accuracy (best weights kept). All randomness comes from the run's seed: the model's
initialisation through ``build_model(..., seed)``, and every batch from a numpy Generator
seeded by (seed, stream), so the same seed gives the same weights on a CPU.

Weights, the resolved configs (and their hash), the training curve and the accuracy at
every evaluation length go into the store. A finished run is skipped when trained again.
While a run trains, its state (model, best weights so far, AdamW moments, schedule, the data
generator's and torch's random states, the curve) is checkpointed into the store every
``[train] checkpoint_seconds`` (:class:`Checkpointer`, S46); an interrupted run resumes
from its last checkpoint and ends with the same weights, bit for bit, as one never
interrupted. A checkpoint left by a different ``[train]`` config is discarded.

Speed options, each off unless the experiment's ``[train]`` sets it (so a file that does not
trains as before, bit for bit, and records the same ``train_config``): ``compile`` trains
through ``torch.compile`` (:func:`training_forward`), ``fused_kernels`` runs Mamba and Mamba-2
through fused CPU kernels (:func:`training_forward`), ``fused_kernels_fma`` takes Mamba's scan
through their twins with fused multiply-adds, ``compile_through_kernels`` lets
``torch.compile`` trace through the fused kernels (as torch operators), ``fused_adamw`` steps AdamW with torch's fused
kernel (:func:`adamw`), ``plateau_delta`` stops a run whose
held-out accuracy has stopped gaining more than that (:class:`Stopping`). Each is recorded
in the run's ``train_config``, and a resumed run ends as one never interrupted.

An untrained baseline (a variant with ``train = false``) goes through the same path without
:func:`fit`: its model is built with the run's seed, exactly as the trained run of that seed
is before its first step, measured at the evaluation lengths (its readout is untrained: that
accuracy is chance-level by construction, not a model's behaviour) and stored with
``untrained = true`` and ``status = "untrained"`` in the run's attributes and no training
steps.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, cast

import numpy as np
import torch
from torch.nn import functional as F

from capture.device import Device, as_device, model_device
from capture.experiment import RunSpec, TrainConfig
from capture.interrupt import StopRequest
from capture.models import build_model, count_parameters
from capture.rebuild import rebuild_model as rebuild_model  # re-exported
from capture.tasks import CounterfactualBatch, TaskBatch, TaskConfig
from store import RunConflictError, Store
from store.contents.checkpoints import Checkpoint
from store.zarrutil import jsonable

# Independent random streams per purpose, so e.g. changing n_eval never changes training data.
STREAM_TRAIN, STREAM_VALID, STREAM_TEST, STREAM_CAPTURE, STREAM_CF = 1, 2, 3, 4, 5


def rng_for(seed: int, stream: int, *extra: int) -> np.random.Generator:
    """A Generator for one (seed, purpose, …) stream: reproducible and independent."""
    return np.random.default_rng([int(seed), stream, *map(int, extra)])


class RunnableTask(Protocol):
    """What every concrete :class:`TaskConfig` subclass defines (the base class does not declare it)."""

    @property
    def vocab_size(self) -> int: ...

    @property
    def n_classes(self) -> dict[str, int]: ...

    @property
    def target(self) -> str: ...

    @property
    def label_names(self) -> tuple[str, ...]: ...

    def generate(self, rng: np.random.Generator, n: int, length: int) -> TaskBatch: ...

    def counterfactual(self, rng: np.random.Generator, n: int, length: int) -> CounterfactualBatch: ...


def split_config(task: TaskConfig, split: str) -> RunnableTask:
    """Tasks with a file split (code_depth) draw held-out data from their eval files."""
    if "split" in type(task).model_fields:
        task = task.model_copy(update={"split": split})
    # Every registered config subclass implements the protocol; TaskConfig only documents it.
    return cast(RunnableTask, task)


@dataclass
class TrainResult:
    run_id: str
    skipped: bool
    steps: int
    seconds: float
    accuracy: dict[int, float]
    #: the steps this training was resumed from (its checkpoints), empty if it ran in one go
    resumed_at: tuple[int, ...] = ()


def masked_loss_and_accuracy(logits: torch.Tensor, batch: TaskBatch) -> tuple[torch.Tensor, float]:
    """Cross-entropy and accuracy over the positions that carry the target label."""
    # built on the logits' device: a CPU target against CUDA logits fails in cross_entropy
    labels = torch.as_tensor(batch.labels[batch.target], dtype=torch.long, device=logits.device)
    mask = torch.as_tensor(batch.mask, dtype=torch.bool, device=logits.device)
    sel_logits = logits[mask]  # (n_labelled, class)
    sel_labels = labels[mask]
    loss = F.cross_entropy(sel_logits.float(), sel_labels)
    acc = (sel_logits.argmax(-1) == sel_labels).float().mean().item()
    return loss, acc


@torch.no_grad()
def evaluate(model: torch.nn.Module, batch: TaskBatch, batch_size: int = 256) -> float:
    """Accuracy of the model's readout on every labelled position of a batch (run where the
    model is)."""
    model.eval()
    device = model_device(model)
    correct = total = 0
    for lo in range(0, batch.n, batch_size):
        tok = torch.as_tensor(batch.tokens[lo : lo + batch_size], device=device)
        pred = model(tok).argmax(-1).cpu().numpy()
        lab = batch.labels[batch.target][lo : lo + batch_size]
        m = batch.mask[lo : lo + batch_size]
        correct += int((pred[m] == lab[m]).sum())
        total += int(m.sum())
    return correct / max(total, 1)


def training_forward(model: torch.nn.Module, cfg: TrainConfig) -> Callable[[torch.Tensor], torch.Tensor]:
    """The callable training steps run tokens through: the model, or with ``[train] compile``
    the model through ``torch.compile`` (same parameters; evaluation stays eager).

    Inductor's code is fixed for a given machine, torch and shapes, so compiled training is
    as deterministic as eager, and a resumed run (compiled again) continues bit for bit.
    With ``[train] fused_kernels`` the model's Mamba and Mamba-2 mixers are switched, in
    place, to the fused CPU kernels (evaluation during training uses them too; the recorded
    ``implementation`` says "torch-fused-scan" or "torch-ssd-fused"). The kernels are
    deterministic, so the same holds for them.

    A compiled run starts from empty compiler caches (``torch._dynamo.reset()``, as in a fresh
    process), because where dynamo splits a step into graphs, and so how inductor's sums
    round, must follow from the run's own config: a worker process trains run after run, and
    a frame compiled for an earlier run can be reused for a later one whose flags it did not
    guard on. Measured: a Mamba-2 model compiled through the kernels after one compiled
    around them ran as 2 graphs instead of 1, its gradients 1.5e-5 from those of a fresh
    process, so a run resumed elsewhere would not have continued bit for bit. It costs the
    recompile, 1-7 s a run with inductor's on-disk cache warm (docs/measured.md).
    """
    if cfg.fused_kernels:
        from capture.models.mamba import set_fused_path  # noqa: PLC0415 -- it imports transformers

        set_fused_path(model, True, fma=cfg.fused_kernels_fma, traced=cfg.compile_through_kernels)
    if not cfg.compile:
        return model
    torch._dynamo.reset()
    return cast(Callable[[torch.Tensor], torch.Tensor], torch.compile(model, dynamic=False))


def adamw(model: torch.nn.Module, cfg: TrainConfig) -> torch.optim.AdamW:
    """The run's AdamW: torch's default implementation (a loop of tensor operations over the
    parameters, what runs trained before ``[train] fused_adamw`` record), or with that option
    its fused kernel, one pass over every parameter (0.3x the optimiser's time at the Jiang
    shapes, docs/measured.md; other rounding, deterministic). Its state, and so a checkpoint,
    is the same either way."""
    return torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay,
                             fused=True if cfg.fused_adamw else None)


class Stopping:
    """When training ends early: ``target_accuracy`` reached, or ``patience`` evaluations in a
    row without a gain of more than ``plateau_delta`` over ``reference``, the held-out
    accuracy of the last evaluation that made one (with ``plateau_delta`` = 0, the best so
    far: the old rule, unchanged).
    """

    def __init__(self, cfg: TrainConfig, stale: int = 0, reference: float = -1.0) -> None:
        self.cfg, self.stale, self.reference = cfg, stale, reference

    def update(self, accuracy: float) -> str | None:
        """Count one evaluation; the reason to stop ("target", "patience"), or None."""
        if accuracy > self.reference + self.cfg.plateau_delta:
            self.reference, self.stale = accuracy, 0
        else:
            self.stale += 1
        if accuracy >= self.cfg.target_accuracy:
            return "target"
        if self.stale >= self.cfg.patience:
            return "patience"
        return None


def lr_lambda(cfg: TrainConfig) -> Callable[[int], float]:
    """Linear warm-up, then cosine decay to 10% of the peak."""

    def f(step: int) -> float:
        if step < cfg.warmup:
            return (step + 1) / cfg.warmup
        progress = (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup)
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))

    return f


def fit(
    model: torch.nn.Module,
    task: TaskConfig,
    cfg: TrainConfig,
    seed: int,
    *,
    progress: Callable[[int, dict], None] | None = None,
    checkpoint: Checkpointer | None = None,
) -> tuple[list[dict], int]:
    """Train ``model`` in place, on the device it is on; returns the curve and the number of
    steps taken.

    The model ends with the weights of its best held-out evaluation. With ``checkpoint``,
    training starts from its stored state if it has one, and saves its state at evaluation
    steps once ``checkpoint`` says one is due.
    """
    device = model_device(model)
    forward = training_forward(model, cfg)
    opt = adamw(model, cfg)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda(cfg))
    train_task, valid_task = split_config(task, "train"), split_config(task, "eval")
    valid = valid_task.generate(rng_for(seed, STREAM_VALID), cfg.n_eval, cfg.length)
    data_rng = rng_for(seed, STREAM_TRAIN)
    curve: list[dict] = []
    best: tuple[float, dict[str, torch.Tensor] | None] = (-1.0, None)
    stale, step = 0, 0
    saved = checkpoint.load() if checkpoint is not None else None
    if saved is not None:
        step, curve, stale, best = _restore(saved, model, opt, sched, data_rng)
        if progress and curve:
            progress(step, curve[-1])
    reference = float(saved.state.get("plateau_reference", best[0])) if saved is not None else best[0]
    stopping = Stopping(cfg, stale, reference)
    first = step + 1
    with StopRequest() as stop:
        for step in range(first, cfg.steps + 1):
            model.train()
            batch = train_task.generate(data_rng, cfg.batch_size, cfg.length)
            logits = forward(torch.as_tensor(batch.tokens, device=device))
            loss, acc = masked_loss_and_accuracy(logits, batch)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
            opt.step()
            sched.step()
            if step % cfg.eval_every == 0 or step == cfg.steps:
                val = evaluate(model, valid)
                point = {"step": step, "loss": float(loss.detach()), "train_accuracy": acc, "valid_accuracy": val}
                curve.append(point)
                if progress:
                    progress(step, point)
                if val > best[0]:
                    best = (val, {k: v.detach().clone() for k, v in model.state_dict().items()})
                if stopping.update(val) is not None:
                    break
                if checkpoint is not None and step < cfg.steps and checkpoint.due():
                    checkpoint.save(step, model, opt, sched, data_rng, best, stopping.stale, curve,
                                    plateau_reference=stopping.reference)
            if stop.requested:  # Ctrl-C: stop here, at a step's end, checkpointed (unless checkpoints are off)
                if checkpoint is not None and cfg.checkpoint_seconds > 0:
                    checkpoint.save(step, model, opt, sched, data_rng, best, stopping.stale, curve,
                                    plateau_reference=stopping.reference)
                raise KeyboardInterrupt
    if best[1] is not None:
        model.load_state_dict(best[1])
    return curve, step


class Checkpointer:
    """Saves :func:`fit`'s state into a run's checkpoint (S46) and gives it back on resume.

    A save is due once ``cfg.checkpoint_seconds`` of training have passed since the last
    (never when it is 0). ``seconds_before`` is the training time the checkpoint had already
    spent, so a resumed run records its whole training time; ``resumed_at`` lists the steps
    it was resumed from. A checkpoint written under another ``[train]`` config (the fields
    that change what is trained) is not used, and the next save replaces it.
    """

    def __init__(self, store: Store, run_id: str, cfg: TrainConfig,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.store, self.run_id, self.cfg, self.clock = store, run_id, cfg, clock
        self.started = self.last = clock()
        self.seconds_before = 0.0
        self.resumed_at: list[int] = []

    def key(self) -> dict:
        return {k: v for k, v in recorded_config(self.cfg).items() if k not in _TRAIN_FIELDS_IGNORED}

    def load(self) -> Checkpoint | None:
        saved = self.store.read_checkpoint(self.run_id)
        if saved is None or saved.state.get("train_config") != self.key():
            return None
        self.seconds_before = float(saved.state.get("train_seconds", 0.0))
        self.resumed_at = [*saved.state.get("resumed_at_steps", []), saved.step]
        return saved

    def due(self) -> bool:
        every = self.cfg.checkpoint_seconds
        return every > 0 and self.clock() - self.last >= every

    def save(self, step: int, model: torch.nn.Module, opt: torch.optim.Optimizer,
             sched: torch.optim.lr_scheduler.LRScheduler, data_rng: np.random.Generator,
             best: tuple[float, dict[str, torch.Tensor] | None], stale: int, curve: list[dict],
             plateau_reference: float | None = None) -> None:
        moments, scalars, opt_doc = _flat_optimizer(opt.state_dict())
        sections: dict[str, dict] = {
            "model": model.state_dict(),
            "optimizer": moments,
            # torch's generators: training draws nothing from them today (no dropout), but a
            # resumed run must continue the same streams if it ever does
            "rng": _rng_states(model),
        }
        if best[1] is not None:
            sections["best"] = best[1]
        state = {
            "train_config": self.key(),
            "stale": stale,
            "best_valid": best[0],
            "curve": curve,
            "optimizer": opt_doc,
            "optimizer_scalars": scalars,
            "scheduler": sched.state_dict(),
            "data_rng": _encode_ints(data_rng.bit_generator.state),
            "train_seconds": self.seconds_before + self.clock() - self.started,
            "resumed_at_steps": self.resumed_at,
        }
        if self.cfg.plateau_delta > 0 and plateau_reference is not None:  # else it is best_valid
            state["plateau_reference"] = plateau_reference
        self.store.write_checkpoint(self.run_id, step, sections, state)
        self.last = self.clock()


def _flat_optimizer(sd: dict) -> tuple[dict[str, torch.Tensor], dict[str, dict], dict]:
    """An optimiser's state_dict as arrays (``"<param>.<key>"``), 0-d tensors as values with
    their dtype, and the rest (hyper-parameters per group) as JSON."""
    moments: dict[str, torch.Tensor] = {}
    scalars: dict[str, dict] = {}
    other: dict[str, dict] = {}
    for idx, st in sd["state"].items():
        for key, value in st.items():
            name = f"{idx}.{key}"
            if isinstance(value, torch.Tensor) and value.ndim > 0:
                moments[name] = value
            elif isinstance(value, torch.Tensor):
                scalars[name] = {"value": value.item(), "dtype": str(value.dtype).removeprefix("torch.")}
            else:
                other.setdefault(str(idx), {})[key] = value
    return moments, scalars, {"param_groups": sd["param_groups"], "other": other}


def _unflat_optimizer(saved: Checkpoint) -> dict:
    state: dict[int, dict] = {}
    arrays, dtypes = saved.arrays.get("optimizer", {}), saved.dtypes.get("optimizer", {})
    for name, arr in arrays.items():
        idx, key = name.split(".", 1)
        state.setdefault(int(idx), {})[key] = _tensor(arr, dtypes.get(name))
    for name, sv in saved.state["optimizer_scalars"].items():
        idx, key = name.split(".", 1)
        state.setdefault(int(idx), {})[key] = torch.tensor(sv["value"], dtype=getattr(torch, sv["dtype"]))
    doc = saved.state["optimizer"]
    for idx, extra in doc["other"].items():
        state.setdefault(int(idx), {}).update(extra)
    return {"state": state, "param_groups": doc["param_groups"]}


def _tensor(arr: np.ndarray, dtype: str | None) -> torch.Tensor:
    t = torch.from_numpy(np.ascontiguousarray(arr))
    return t.to(getattr(torch, dtype)) if dtype and str(t.dtype).removeprefix("torch.") != dtype else t


def _tensors(saved: Checkpoint, section: str) -> dict[str, torch.Tensor]:
    dtypes = saved.dtypes.get(section, {})
    return {k: _tensor(v, dtypes.get(k)) for k, v in saved.arrays[section].items()}


def _encode_ints(obj):
    """A bit generator's state with its integers as strings (they exceed JSON's 2**53)."""
    if isinstance(obj, dict):
        return {k: _encode_ints(v) for k, v in obj.items()}
    return str(obj) if isinstance(obj, int) and not isinstance(obj, bool) else obj


def _decode_ints(obj):
    if isinstance(obj, dict):
        return {k: (v if k == "bit_generator" else _decode_ints(v)) for k, v in obj.items()}
    return int(obj) if isinstance(obj, str) else obj


def _rng_states(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """torch's CPU generator state, and the CUDA one of the model's device when it is on a GPU."""
    out = {"torch": torch.get_rng_state()}
    device = model_device(model)
    if device.type == "cuda":
        out["cuda"] = torch.cuda.get_rng_state(device)
    return out


def _set_rng_states(states: dict[str, np.ndarray], model: torch.nn.Module) -> None:
    torch.set_rng_state(torch.from_numpy(np.ascontiguousarray(states["torch"])))
    device = model_device(model)
    if "cuda" in states and device.type == "cuda":  # a CPU resume of a GPU run: no CUDA stream
        torch.cuda.set_rng_state(torch.from_numpy(np.ascontiguousarray(states["cuda"])), device)


def _restore(saved: Checkpoint, model: torch.nn.Module, opt: torch.optim.Optimizer,
             sched: torch.optim.lr_scheduler.LRScheduler,
             data_rng: np.random.Generator) -> tuple[int, list[dict], int, tuple[float, dict[str, torch.Tensor] | None]]:
    """Put a checkpoint's state back into fit's objects; returns (step, curve, stale, best)."""
    model.load_state_dict(_tensors(saved, "model"))
    opt.load_state_dict(_unflat_optimizer(saved))
    sched.load_state_dict(saved.state["scheduler"])
    data_rng.bit_generator.state = _decode_ints(saved.state["data_rng"])
    _set_rng_states(saved.arrays["rng"], model)
    best_w = _tensors(saved, "best") if "best" in saved.arrays else None
    best = (float(saved.state["best_valid"]), best_w)
    return saved.step, list(saved.state["curve"]), int(saved.state["stale"]), best


def train_run(
    store: Store,
    spec: RunSpec,
    *,
    device: Device | str = "cpu",
    progress: Callable[[int, dict], None] | None = None,
) -> TrainResult:
    """Train one run of an experiment into the store (skipped if already trained), on
    ``device`` (a :class:`~capture.device.Device`, or its name: checked before the store is
    touched)."""
    where = as_device(device)
    with store.deferred_consolidation():  # one metadata snapshot per run, not three
        return _train_run(store, spec, device=where, progress=progress)


def _train_run(
    store: Store,
    spec: RunSpec,
    *,
    device: Device,
    progress: Callable[[int, dict], None] | None,
) -> TrainResult:
    task = spec.task_config()
    mcfg = spec.model_config()
    cfg = spec.train
    rid = store.add_run(
        spec.run_id, task=spec.task, arch=spec.arch, variant=spec.variant, seed=spec.seed,
        model_config=mcfg.model_dump(), task_config=task.model_dump(),
        experiment=spec.exp.experiment.name,
    )
    if store.has_weights(rid) and store.run_attrs(rid).get("status") == _status(spec):
        check_trained_with(store, rid, cfg)
        acc = {int(k): v for k, v in store.run_attrs(rid)["metrics"]["accuracy"].items()}
        return TrainResult(rid, True, 0, 0.0, acc)
    with store.lock(rid):
        threads_before = torch.get_num_threads()  # process-wide: restored below
        torch.set_num_threads(cfg.threads)
        try:
            n_classes = task.n_classes[task.target]
            model = build_model(mcfg, vocab_size=task.vocab_size, n_classes=n_classes, seed=spec.seed)
            model.to(device.torch_device)
            ckpt = Checkpointer(store, rid, cfg)
            t0 = time.perf_counter()
            curve: list[dict]
            if spec.untrained:  # the baseline: the weights this seed's trained run starts from
                curve, steps = [], 0
            else:
                curve, steps = fit(model, task, cfg, spec.seed, progress=progress, checkpoint=ckpt)
            seconds = ckpt.seconds_before + time.perf_counter() - t0
            acc = accuracy_by_length(model, task, cfg, spec.seed)
            store.write_weights(rid, model.state_dict(), overwrite=True)
            store.update_run_attrs(
                rid,
                status=_status(spec),
                train_config=recorded_config(cfg),
                n_classes=n_classes,
                vocab_size=task.vocab_size,
                target=task.target,
                n_parameters=count_parameters(model),
                implementation=getattr(model, "implementation", "torch"),
                device=device.name,
                **({"untrained": True} if spec.untrained else {}),
                metrics={
                    "accuracy": {str(k): v for k, v in acc.items()},
                    "steps": steps,
                    "train_seconds": seconds,
                    "sequences_per_second": steps * cfg.batch_size / max(seconds, 1e-9),
                    "curve": curve,
                    **({"resumed_at_steps": ckpt.resumed_at} if ckpt.resumed_at else {}),
                    **({"stopped_by": stopped_by(cfg, curve, steps)} if cfg.plateau_delta > 0 else {}),
                },
            )
            store.delete_checkpoint(rid)
            store.consolidate()
        finally:
            torch.set_num_threads(threads_before)
    return TrainResult(rid, False, steps, seconds, acc, tuple(ckpt.resumed_at))


def _status(spec: RunSpec) -> str:
    """A finished run's ``status``: "trained", or "untrained" for an untrained baseline (its
    weights final too, so capture takes it; the report's run table shows which it is)."""
    return "untrained" if spec.untrained else "trained"


#: [train] fields that do not change what is trained or measured (only how fast).
_TRAIN_FIELDS_IGNORED = frozenset({"threads", "checkpoint_seconds"})

#: Opt-in [train] fields and the value that means "off": a run recorded without one was
#: trained with it off, and one trained with it off records no such field (as before it existed).
_OPT_IN_DEFAULTS = {"compile": False, "fused_kernels": False, "fused_kernels_fma": False,
                    "compile_through_kernels": False, "fused_adamw": False, "plateau_delta": 0.0}


def recorded_config(cfg: TrainConfig) -> dict:
    """The ``[train]`` config as a run records it: every field, except the opt-in ones
    (``_OPT_IN_DEFAULTS``) that are off, so runs trained the old way record what they did."""
    return {k: v for k, v in jsonable(cfg.model_dump()).items()
            if not (k in _OPT_IN_DEFAULTS and v == _OPT_IN_DEFAULTS[k])}


def stopped_by(cfg: TrainConfig, curve: list[dict], steps: int) -> str:
    """Why a run ended: "target" (accuracy reached), "budget" (every step), or "patience"
    (``patience`` evaluations without a gain of more than ``plateau_delta``)."""
    if curve and curve[-1]["valid_accuracy"] >= cfg.target_accuracy:
        return "target"
    return "budget" if steps >= cfg.steps else "patience"


def check_trained_with(store: Store, run_id: str, cfg: TrainConfig) -> None:
    """Refuse to reuse a trained run whose stored ``[train]`` config differs from ``cfg``.

    The run's ``config_hash`` covers task, architecture, variant, seed, model and task
    configs; the training budget is checked here, so changing ``steps`` (say) and running
    the experiment again into the same store is an error, not a silent reuse of the old
    models.
    """
    stored = store.run_attrs(run_id).get("train_config")
    if stored is None:  # trained by hand through the API: nothing recorded to compare
        return
    now = recorded_config(cfg)
    keys = [*now, *(k for k in _OPT_IN_DEFAULTS if k in stored and k not in now)]
    diff = {k: (stored.get(k, _OPT_IN_DEFAULTS.get(k)), now.get(k, _OPT_IN_DEFAULTS.get(k))) for k in keys
            if k not in _TRAIN_FIELDS_IGNORED
            and stored.get(k, _OPT_IN_DEFAULTS.get(k)) != now.get(k, _OPT_IN_DEFAULTS.get(k))}
    if diff:
        shown = ", ".join(f"{k}: {a!r} stored, {b!r} now" for k, (a, b) in sorted(diff.items()))
        raise RunConflictError(
            f"run {run_id!r} in {store.location} was trained with a different [train] config "
            f"({shown}); use a new store (run --out, train --store) or restore the experiment file"
        )


def accuracy_by_length(model, task: TaskConfig, cfg: TrainConfig, seed: int) -> dict[int, float]:
    """Held-out accuracy at every evaluation length (fresh sequences per length), where the
    model is."""
    test_task = split_config(task, "eval")
    out = {}
    for L in cfg.eval_lengths:
        batch = test_task.generate(rng_for(seed, STREAM_TEST, L), cfg.n_test, L)
        out[L] = evaluate(model, batch)
    return out
