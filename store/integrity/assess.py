"""What a store's damaged chunks take away, and what can still be analysed.

Chunk data has no second copy (:mod:`store.integrity.repair`): a damaged chunk is lost until it
is captured again, which needs the experiment file the store was made from and the run's
weights. A receiver without them can still analyse everything the damage does not touch:
analyses read a length group layer by layer, so the other layers of a damaged group, the
other lengths and the other runs read as usual. :func:`damage_lines` says which, from what
``validate`` found (:class:`~store.integrity.validation.Report`: ``lost``, ``groups``).
"""

from __future__ import annotations

from .. import schema
from .validation import Report


def _split(path: str) -> tuple[str, str]:
    """``runs/<run>/<group>`` -> (run, group)."""
    parts = path.split("/")
    return parts[1], parts[2]


def _length_flag(group: str) -> str:
    parsed = schema.parse_length_group(group)
    if parsed is None or parsed[0] != "len":
        return ""
    return f" --lengths {parsed[1]}"


def damage_lines(rep: Report, where: str) -> list[str]:
    """Lines saying what the damaged chunks of ``rep`` lose, what is intact and how to
    analyse it, and what recapturing needs; [] when no chunk is damaged."""
    if not rep.damaged_chunks:
        return []
    lines = ["damage: what is lost and what can still be analysed"]
    runs = sorted({_split(g)[0] for g in rep.groups} | set(rep.weights_damaged))
    hit_runs = sorted({_split(g)[0] for g in rep.lost})
    intact_parts: list[str] = []
    hints: list[str] = []
    for path in sorted(rep.lost):
        run, group = _split(path)
        lost = rep.lost[path]
        layers = rep.groups.get(path, [])
        if "*" in lost:
            lines.append(f"  lost: run {run} {group}, all of it (a chunk every analysis of it reads is damaged)")
            continue
        gone = [x for x in layers if x in lost]
        other = sorted(lost - set(layers))
        what = ", ".join(([f"layer{'s' if len(gone) > 1 else ''} {', '.join(gone)}"] if gone else []) + other)
        lines.append(f"  lost: run {run} {group} {what}")
        keep = [x for x in layers if x not in lost]
        if keep:
            intact_parts.append(f"run {run} {group} layers {', '.join(keep)}")
            hints.append(f"--runs {run}{_length_flag(group)} --layers {','.join(keep)}")
        if "logits" in lost:
            intact_parts.append(f"run {run} {group}'s hidden states (probe, ablate); not its logits (behaviour, patching)")
    for run in rep.weights_damaged:
        lines.append(f"  lost: run {run}'s weights (ablate and patch re-run the model; probes on the stored "
                     "activations still work)")
    for path in sorted(p for p in rep.groups if p not in rep.lost and _split(p)[0] in hit_runs):
        intact_parts.append(f"run {path.split('/')[1]} {path.split('/')[2]} whole")
    untouched = [r for r in runs if r not in hit_runs and r not in rep.weights_damaged]
    if untouched:
        intact_parts.append(f"{len(untouched)} other run{'s' if len(untouched) > 1 else ''} whole"
                            if hit_runs else f"every run's activations ({len(untouched)} runs)")
    results = sorted({a.split("/")[1] + "/" + a.split("/")[2] for a, *_ in rep.damaged_chunks
                      if a.startswith(f"{schema.RESULTS}/") and a.count("/") >= 3})
    for r in results:
        lines.append(f"  lost: result {r} (run the analysis that wrote it again; it replaces the result)")
    if intact_parts:
        lines.append("  intact: " + "; ".join(intact_parts))
    if hit_runs:
        others = [r for r in runs if r not in hit_runs]
        how = []
        if others:
            shown = " ".join(f"--runs {r}" for r in others[:3]) + (" …" if len(others) > 3 else "")
            how.append(f"leave {', '.join(hit_runs)} out ({shown})")
        how += [f"read a damaged length's intact layers ({h})" for h in hints]
        if how:
            lines.append(f"  to analyse what is intact: {'; or '.join(how)}, e.g. `layerstate probe {where} "
                         f"{hints[0] if hints else shown}`")
        lines.append(
            "  to get it back: `layerstate repair --forget-damaged STORE`, then `layerstate capture EXPERIMENT.toml "
            "--store STORE` recaptures it; that needs the experiment file the store was made from (and the run's "
            "weights). Without that file keep the store as it is (a forgotten block makes its whole length "
            "unreadable until recaptured) and ask the sender for the file or an intact copy"
            + ("; a packed store: `layerstate unpack` it first" if where.endswith(".zip") else ""))
    return lines


def fix(rep: Report, where: str) -> str:
    """The next step for a store that failed validation, in a few words (the verdict line
    ends with it), or "" when its problems say their own fix."""
    meta = rep.metadata
    repairable = bool(meta is not None and any(f.action in ("restore", "restore_root", "consolidate")
                                               for f in meta.problems))
    if rep.damaged_chunks:
        return (f"`layerstate repair --dry-run {where}` lists what repair can do; the damage lines above say "
                "what can still be analysed and what recapturing needs")
    if repairable:
        return f"`layerstate repair {where}` rebuilds the damaged metadata (`--dry-run` first lists what it would do)"
    return ""
