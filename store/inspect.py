"""``inspect``: what is inside a store, at a glance."""

from __future__ import annotations

import numpy as np

from .contents.checkpoints import checkpoint_state
from .core import Store
from .io import lengths
from .schema import RUNS, parse_length_group
from .zarrutil import iter_arrays


def _training(step: int, state: dict) -> dict:
    """Where a checkpointed training stands, and its remaining time at its pace so far (its
    steps still to go at the seconds per step of those done; less if it stops early)."""
    steps = (state.get("train_config") or {}).get("steps")
    seconds = state.get("train_seconds")
    left = None
    if steps is not None and seconds is not None and step > 0:
        left = float(seconds) / step * max(int(steps) - step, 0)
    return {
        "step": step, "steps": steps, "train_seconds": seconds, "seconds_left": left,
        "valid_accuracy": ((state.get("curve") or [{}])[-1]).get("valid_accuracy"),
    }


def summary(store: Store) -> dict:
    """A JSON-able description: root attrs, and per run its lengths, shapes, dtypes, labels."""
    runs = {}
    for rid in store.run_ids():
        a = store.run_attrs(rid)
        groups = {}
        for name, grp in store.run_group(rid).groups():
            if not parse_length_group(name):
                continue
            ga = dict(grp.attrs)
            arrays = dict(grp.arrays())
            state = lengths.completion(ga)
            labels = lengths.label_names(grp, arrays)
            problems = lengths.layout_problems(grp, f"{RUNS}/{rid}/{name}", arrays)
            groups[name] = {
                "complete": state.complete,
                "recorded": state.recorded,
                "blocks": state.blocks,
                "labels": labels,
                "target": lengths.declared_target(ga, labels, a),
                "problem": problems[0] if problems else None,
                "arrays": {n: {"shape": list(arr.shape), "dtype": str(arr.dtype), "chunks": list(arr.chunks)}
                           for n, arr in arrays.items() if n in ("hidden", "tokens", "logits")},
            }
        ck = checkpoint_state(store.run_group(rid))
        runs[rid] = {
            "task": a.get("task"), "arch": a.get("arch"), "variant": a.get("variant"),
            "seed": a.get("seed"), "weights": store.has_weights(rid), "groups": groups,
            "metrics": a.get("metrics"),
            "width": _width(a.get("model_config")),
            # a training in progress (or interrupted): where its last checkpoint stands
            "training": None if ck is None else _training(ck[0], ck[1]),
        }
    paired = getattr(store, "results_location", None)
    return {
        "location": str(store.location),
        "results_location": None if paired is None else str(paired),
        "schema": store.attrs.get("schema"),
        "title": store.attrs.get("title"),
        "created": store.attrs.get("created"),
        "tool_version": store.attrs.get("tool_version"),
        "size_bytes": size_on_disk(store),
        "runs": runs,
        "results": store.results(),
    }


def _width(config: object) -> str | None:
    """Why a run's ``feature`` width is what it is, when it is not its ``d_model``: the LSTM's
    and GRU's hidden size is chosen to match a Transformer layer's parameters at that d_model."""
    if not isinstance(config, dict) or not config.get("hidden_size") or not config.get("d_model"):
        return None
    if int(config["hidden_size"]) == int(config["d_model"]):
        return None
    return (f"{config['hidden_size']} = its hidden_size, not d_model {config['d_model']}: "
            f"{config.get('arch', 'the')} sizes are parameter-matched to a Transformer layer of width d_model "
            "(set hidden_size in [models.<arch>] to choose it)")


def size_on_disk(store: Store) -> int | None:
    try:
        if store.location.is_zip:
            return store.location.local_path.stat().st_size
        fs, root = store.location.filesystem()
        return int(fs.du(root))
    except Exception:
        return None


def format_summary(info: dict) -> str:
    """The summary as a few aligned lines of text."""
    lines = [
        f"store    {info['location']}  ({_size(info['size_bytes'])}, schema {info['schema']})",
        f"title    {info['title'] or '-'}   created {info['created'] or '-'}   "
        f"layerstate {info['tool_version'] or '- (written by another tool)'}",
        f"runs     {len(info['runs'])}",
    ]
    for rid, r in info["runs"].items():
        lines.append(
            f"  {rid}: task={r['task']} arch={r['arch']} variant={r['variant']} seed={r['seed']}"
            f" weights={'yes' if r['weights'] else 'no'}"
            + (f"\n    feature width {r['width']}" if r.get("width") else "")
        )
        if r.get("training"):
            t = r["training"]
            acc = t["valid_accuracy"]
            lines.append(
                f"    training: checkpoint at step {t['step']} of {t['steps']}, "
                f"{(t['train_seconds'] or 0):.0f}s trained, held-out accuracy "
                f"{'-' if acc is None else f'{acc:.3f}'} (`layerstate train`/`run` resumes it)"
            )
            if t.get("seconds_left") is not None:
                lines.append(
                    f"      about {t['seconds_left']:.0f}s of training left at its pace so far "
                    "(less if it stops early)"
                )
        for g, d in sorted(r["groups"].items()):
            h = d["arrays"].get("hidden")
            shape = "x".join(map(str, h["shape"])) if h else "?"
            if d.get("problem"):
                state = f"UNREADABLE: {d['problem']}"
            elif not d["complete"]:
                state = f"INCOMPLETE {d['blocks']} blocks"
            else:
                state = "complete" if d.get("recorded", True) else "complete (no completion record)"
            labels = ", ".join(d["labels"]) or "(none)"
            if len(d["labels"]) > 1:
                labels += f" (target {d['target']})" if d.get("target") else " (no target declared: pass --target)"
            lines.append(
                f"    {g}: hidden {shape} {h['dtype'] if h else ''} "
                f"(sequence x position x layer x feature), labels {labels}; {state}"
            )
    where = f"  (results store {info['results_location']})" if info.get("results_location") else ""
    lines.append(f"results  {', '.join(info['results']) or '(none)'}{where}")
    return "\n".join(lines)


def _size(n: float | None) -> str:
    if n is None:
        return "size unknown"
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if n < 1024 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def nbytes(store: Store) -> int:
    """Total uncompressed bytes of every array (for memory comparisons)."""
    return int(sum(np.prod(a.shape) * a.dtype.itemsize for _, a in iter_arrays(store.root)))
