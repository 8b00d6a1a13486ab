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
                "layers": _group_layers(ga),
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
    cells, notes = by_cell(runs)
    return {
        "location": str(store.location),
        "results_location": None if paired is None else str(paired),
        "schema": store.attrs.get("schema"),
        "title": store.attrs.get("title"),
        "created": store.attrs.get("created"),
        "tool_version": store.attrs.get("tool_version"),
        "size_bytes": size_on_disk(store),
        "runs": runs,
        "cells": cells,
        "notes": notes,
        "results": store.results(),
        "result_runs": result_coverage(store, runs),
    }


def result_coverage(store: Store, runs: dict) -> dict[str, dict]:
    """Per stored result with runs: how many it holds, and per cell it holds runs of, the seeds
    the store has there that the result lacks (a result computed before they were trained or
    captured: what a verdict on it would not see)."""
    cells: dict[str, dict[str, int]] = {}
    for rid, r in runs.items():
        cells.setdefault(f"{r['task']}/{r['arch']}/{r.get('variant') or 'default'}", {})[rid] = int(r["seed"] or 0)
    out: dict[str, dict] = {}
    for name in store.results():
        try:
            held = store.result_runs(name)
        except Exception:  # a result another tool wrote, or damaged: validate names it
            continue
        if held is None:
            continue
        mine = set(held)
        lacks = {cell: sorted(s for rid, s in seeds.items() if rid not in mine)
                 for cell, seeds in cells.items() if mine & set(seeds)}
        out[name] = {"runs": len(held), "lacks": {c: s for c, s in lacks.items() if s}}
    return out


def _group_layers(ga: dict) -> list[str] | None:
    spec = ga.get("spec")
    layers = spec.get("layers") if isinstance(spec, dict) else None
    return [str(x) for x in layers] if isinstance(layers, list) else None


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


# ---------------------------------------------------------------------- at a glance: by cell
#: The table's columns: (heading, key of a run's row)
COLUMNS = (("cell (task/arch/variant)", "cell"), ("seeds", "seeds"), ("weights", "weights"),
           ("lengths", "lengths"), ("sequences", "sequences"), ("layers", "layers"), ("width", "width"),
           ("dtype", "dtype"), ("labels (target)", "labels"), ("state", "state"))


def _cell(r: dict) -> str:
    return f"{r['task']}/{r['arch']}/{r['variant']}"


def _labels(d: dict) -> str:
    """A group's labels with its target, as both listings print them."""
    labels = ", ".join(d["labels"]) or "(none)"
    if len(d["labels"]) > 1:
        labels += f" (target {d['target']})" if d.get("target") else " (no target declared: pass --target)"
    return labels


def _state(d: dict) -> str:
    if d.get("problem"):
        return f"UNREADABLE: {d['problem']}"
    if not d["complete"]:
        return f"INCOMPLETE {d['blocks']} blocks"
    return "complete" if d.get("recorded", True) else "complete (no completion record)"


def _training_text(t: dict) -> str:
    acc = t["valid_accuracy"]
    text = (f"training: checkpoint at step {t['step']} of {t['steps']}, {(t['train_seconds'] or 0):.0f}s trained, "
            f"held-out accuracy {'-' if acc is None else f'{acc:.3f}'} (`layerstate train`/`run` resumes it)")
    if t.get("seconds_left") is not None:
        text += f"; about {t['seconds_left']:.0f}s of training left at its pace so far (less if it stops early)"
    return text


def _layers_text(layers: list[str]) -> str:
    """``embed,L0..L3`` for the usual coordinate, else the names (the first and last of many)."""
    n = len(layers)
    if n > 2 and layers[0] == "embed" and layers[1:] == [f"L{i}" for i in range(n - 1)]:
        return f"embed,L0..L{n - 2}"
    return ",".join(layers) if n <= 4 else f"{layers[0]},…,{layers[-1]} ({n})"


def _seeds_text(seeds: list) -> str:
    """``0,1,2``; a long consecutive run of seeds as ``0-9``."""
    ints = sorted(s for s in seeds if isinstance(s, int))
    rest = sorted(str(s) for s in seeds if not isinstance(s, int))
    if len(ints) <= 4:
        return ",".join([*map(str, ints), *rest])
    parts: list[str] = []
    lo = ints[0]
    for i, a in enumerate(ints):
        if i + 1 == len(ints) or ints[i + 1] != a + 1:
            parts.append(str(lo) if lo == a else f"{lo}-{a}")
            lo = ints[i + 1] if i + 1 < len(ints) else a
    return ",".join([*parts, *rest])


def _row(r: dict, notes: dict[str, list[str]], rid: str) -> dict[str, str]:
    """One run as the table's values; what does not fit a column goes to ``notes`` (text -> runs)."""
    groups = r["groups"]
    main = {g: d for g, d in sorted(groups.items()) if (parse_length_group(g) or ("", 0))[0] == "len"}
    others = sorted(g for g in groups if g not in main)

    def one(values: list[str]) -> str:
        distinct = list(dict.fromkeys(values))
        return "/".join(distinct) if distinct else "-"

    hidden = [d["arrays"].get("hidden") for d in main.values()]
    states = [_state(d) for d in main.values()]
    for g, d in sorted(groups.items()):
        state = _state(d)
        if state == "complete (no completion record)":
            state = "complete, with no completion record (written in one go by another tool)"
        if state != "complete":
            notes.setdefault(f"{g}: {state}", []).append(rid)
        if len(d["labels"]) > 1 and not d.get("target"):
            notes.setdefault(f"{g}: labels {_labels(d)}", []).append(rid)
    if others:
        shapes = one(["x".join(map(str, d["arrays"]["hidden"]["shape"][:2])) for g in others
                      if (d := groups[g])["arrays"].get("hidden")])
        notes.setdefault(f"also captured: {', '.join(others)} ({shapes} sequences x positions"
                         + ("; the counterfactual twins `patch` reads" if all(g.startswith("cf") for g in others)
                            else "") + ")", []).append(rid)
    if r.get("width"):
        notes.setdefault(f"feature width {r['width']}", []).append(rid)
    if r.get("training"):
        notes.setdefault(_training_text(r["training"]), []).append(rid)
    worst = ("UNREADABLE" if any(s.startswith("UNREADABLE") for s in states) else
             "INCOMPLETE" if any(s.startswith("INCOMPLETE") for s in states) else
             "complete" if states else "no activations")
    return {
        "cell": _cell(r),
        "weights": "yes" if r["weights"] else "no",
        "lengths": ",".join(str(parse_length_group(g)[1]) for g in main) or "-",  # type: ignore[index]
        "sequences": one([str(h["shape"][0]) for h in hidden if h]),
        "layers": one([_layers_text(d["layers"]) if d.get("layers") else str(h["shape"][2])
                       for d, h in zip(main.values(), hidden, strict=True) if h]),
        "width": one([str(h["shape"][3]) for h in hidden if h and len(h["shape"]) == 4]),
        "dtype": one([h["dtype"] for h in hidden if h]),
        "labels": one([_labels(d) for d in main.values()]),
        "state": worst,
    }


def by_cell(runs: dict[str, dict]) -> tuple[dict[str, dict], list[dict]]:
    """The runs as one row per cell (task/arch/variant): its seeds and run ids, and each column's
    value when its runs agree (``varies`` and a note naming which run has what when they do
    not); and the notes, each once with the runs it applies to: ``({cell: row}, [{"note",
    "runs", "applies_to"}])``."""
    notes: dict[str, list[str]] = {}
    rows = {rid: _row(r, notes, rid) for rid, r in runs.items()}
    cells: dict[str, dict] = {}
    for rid in sorted(runs, key=lambda i: (rows[i]["cell"], str(runs[i]["seed"]), i)):
        cells.setdefault(rows[rid]["cell"], {"runs": [], "seeds": []})
        cells[rows[rid]["cell"]]["runs"].append(rid)
        cells[rows[rid]["cell"]]["seeds"].append(runs[rid]["seed"])
    for cell, c in cells.items():
        c["seeds_text"] = _seeds_text(c["seeds"])
        for _head, key in COLUMNS:
            if key in ("cell", "seeds"):
                continue
            values = {rid: rows[rid][key] for rid in c["runs"]}
            distinct = list(dict.fromkeys(values.values()))
            if len(distinct) == 1:
                c[key] = distinct[0]
                continue
            c[key] = "varies"
            common = max(distinct, key=lambda v: sum(x == v for x in values.values()))
            for v in distinct:
                if v != common:
                    notes.setdefault(f"{cell} {key}: {v} (its other runs: {common})", []).extend(
                        r for r in c["runs"] if values[r] == v)
    cell_runs = {cell: c["runs"] for cell, c in cells.items()}
    return cells, [{"note": text, "runs": ids, "applies_to": _applies_to(ids, cell_runs, len(runs))}
                   for text, ids in notes.items()]


def _applies_to(ids: list[str], cell_runs: dict[str, list[str]], n_runs: int) -> str:
    """``all 12 runs``, ``parity/lstm/default, dyck/lstm/default (6 runs)`` or run ids."""
    if len(ids) == n_runs and n_runs > 1:
        return f"all {n_runs} runs"
    mine = set(ids)
    whole = [cell for cell, rs in cell_runs.items() if set(rs) <= mine and len(rs) > 1]
    rest = [r for r in ids if not any(r in cell_runs[c] for c in whole)]
    n = len(ids)
    parts = whole + ([f"run{'s' if len(rest) > 1 else ''} {', '.join(rest[:6])}"
                      + (f" and {len(rest) - 6} more" if len(rest) > 6 else "")] if rest else [])
    return ", ".join(parts) + (f" ({n} runs)" if whole and n > 1 else "")


def _header(info: dict) -> list[str]:
    return [
        f"store    {info['location']}  ({_size(info['size_bytes'])}, schema {info['schema']})",
        f"title    {info['title'] or '-'}   created {info['created'] or '-'}   "
        f"layerstate {info['tool_version'] or '- (written by another tool)'}",
    ]


def _footer(info: dict) -> list[str]:
    where = f"  (results store {info['results_location']})" if info.get("results_location") else ""
    held = info.get("result_runs") or {}
    shown = []
    for name in info["results"]:
        h = held.get(name)
        if h is None:
            shown.append(name)
            continue
        lacks = "; ".join(f"lacks {cell} {seed_range(s)}" for cell, s in sorted(h["lacks"].items()))
        shown.append(f"{name} ({h['runs']} run{'s' * (h['runs'] != 1)}{'; ' + lacks if lacks else ''})")
    return [f"results  {', '.join(shown) or '(none)'}{where}"]


def seed_range(seeds: list[int]) -> str:
    """``[0, 1, 2, 4]`` -> ``"seeds 0-2, 4"`` (``"seed 3"`` for one): seeds as messages name them."""
    if not seeds:
        return "no seeds"
    spans: list[str] = []
    start = prev = seeds[0]
    for s in [*seeds[1:], None]:
        if s is not None and s == prev + 1:
            prev = s
            continue
        spans.append(str(start) if start == prev else f"{start}-{prev}")
        if s is not None:
            start = prev = s
    return ("seed " if len(seeds) == 1 else "seeds ") + ", ".join(spans)



def _notes(info: dict) -> list[str]:
    notes = info.get("notes")
    if notes is None:
        notes = by_cell(info["runs"])[1]
    if not notes:
        return []
    return ["notes    (each once, with the runs it applies to)"] + [
        f"  {n['note']} — {n['applies_to']}" for n in notes]


def format_summary(info: dict, detail: bool = False) -> str:
    """The summary at a glance: one row per cell (task/arch/variant) with its seeds, lengths,
    sequences, layers, width, dtype, labels and state, then each note once with the runs it
    applies to. ``detail``: every run and captured group on its own lines instead."""
    if detail:
        return format_runs(info)
    cells = info.get("cells")
    if cells is None:
        cells = by_cell(info["runs"])[0]
    n = len(info["runs"])
    lines = _header(info)
    lines.append(f"runs     {n} in {len(cells)} cell{'s' if len(cells) != 1 else ''} (hidden: sequence x position "
                 "x layer x feature; `layerstate inspect --detail` lists every run)")
    if cells:
        table = [[head for head, _ in COLUMNS]] + [
            [cell, c["seeds_text"], *(c[key] for _h, key in COLUMNS[2:])] for cell, c in cells.items()]
        widths = [max(len(row[i]) for row in table) for i in range(len(COLUMNS))]
        for row in table:
            lines.append("  " + "  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())
        odd = [f"{cell}: runs {', '.join(c['runs'])}" for cell, c in cells.items()
               if any(r != f"{cell.replace('/', '-')}-s{s}" for r, s in zip(c["runs"], c["seeds"], strict=True))]
        if odd:
            lines.append("  run ids  " + "; ".join(odd) if len(odd) <= 3 else
                         f"  run ids: not <task>-<arch>-<variant>-s<seed> in {len(odd)} cells (--detail lists them)")
        else:
            lines.append("  run ids  <task>-<arch>-<variant>-s<seed>, e.g. "
                         f"{next(iter(cells)).replace('/', '-')}-s{next(iter(cells.values()))['seeds'][0]}")
    return "\n".join(lines + _notes(info) + _footer(info))


def format_runs(info: dict) -> str:
    """Every run and captured group on its own lines (``inspect --detail``), then the notes once."""
    lines = [*_header(info), f"runs     {len(info['runs'])}"]
    for rid, r in info["runs"].items():
        lines.append(
            f"  {rid}: task={r['task']} arch={r['arch']} variant={r['variant']} seed={r['seed']}"
            f" weights={'yes' if r['weights'] else 'no'}"
        )
        if r.get("training"):
            lines.append(f"    {_training_text(r['training'])}")
        for g, d in sorted(r["groups"].items()):
            h = d["arrays"].get("hidden")
            shape = "x".join(map(str, h["shape"])) if h else "?"
            lines.append(
                f"    {g}: hidden {shape} {h['dtype'] if h else ''} "
                f"(sequence x position x layer x feature), labels {_labels(d)}; {_state(d)}"
            )
    notes = [n for n in (info.get("notes") or by_cell(info["runs"])[1]) if n["note"].startswith("feature width")]
    if notes:
        lines += ["notes    (each once, with the runs it applies to)"] + [
            f"  {n['note']} — {n['applies_to']}" for n in notes]
    return "\n".join(lines + _footer(info))


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
