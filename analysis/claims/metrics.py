"""Per-seed values of a claim's metric, read from the stored results: accuracy counts per
sequence, probe profiles, restoration, ablation drops and refits, patching recovery."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import TypeVar, cast

import numpy as np
import xarray as xr

from analysis import registry
from analysis.behaviour import (
    FACTORS,
    by_factors,
    factor_coords,
    sequence_correctness,
    stored_behaviour,
)
from analysis.claims.probe_results import (
    choose_probes,
    require_runs,
    short_name,
)
from analysis.claims.spec import (
    Claim,
    ClaimError,
    NotEvaluable,
)
from analysis.interventions.mechanism import nontrivial_restoration
from analysis.interventions.twins import MIN_GAP
from analysis.stats import seed_estimates
from store import MissingError, Store, schema
from store.contents.results import describe_settings
from store.errors import did_you_mean

T = TypeVar("T")


@dataclass
class ClaimInputs:
    """What one evaluation of claims reads: the ``store``, its probe profiles (``probes``,
    :func:`~analysis.claims.evaluate.stored_probe_profiles`, or None), and every per-seed table
    computed from them on the way, each computed once (:meth:`once`) however many claims read it."""

    store: Store
    probes: xr.Dataset | None = None
    _memo: dict[tuple[Hashable, ...], object] = field(default_factory=dict, repr=False)

    def once(self, key: tuple[Hashable, ...], compute: Callable[[], T]) -> T:
        """``compute()``'s value, computed the first time ``key`` is asked for."""
        if key not in self._memo:
            self._memo[key] = compute()
        return cast(T, self._memo[key])

    def need_probes(self, claim: Claim) -> xr.Dataset:
        """The probe profiles, or the one-line error saying how to make them."""
        if self.probes is None:
            raise ClaimError(f"claim {claim.id!r} needs probe results; run `layerstate probe STORE` first")
        return self.probes


# ---------------------------------------------------------------------- the claim's length
def resolve_length(store: Store, claim: Claim, probes: xr.Dataset | None = None) -> Claim:
    """The claim with its ``length``: as declared, else the length its tasks' runs were
    trained at when they were captured there, else their only captured length.

    Raises
    ------
    ClaimError
        Neither rule gives one length: the message lists the captured lengths and asks for
        ``length = N`` in the claim.
    """
    if claim.length is not None:
        return claim
    tasks = set(claim.tasks())
    runs = [r for r in store.run_ids() if not tasks or str(store.run_attrs(r).get("task")) in tasks]
    captured = sorted({int(L) for r in runs for L in store.lengths(r)})
    trained = set()
    for r in runs:
        cfg = store.run_attrs(r).get("train_config")
        if isinstance(cfg, dict) and cfg.get("length") is not None:
            trained.add(int(cfg["length"]))
    if len(trained) == 1 and next(iter(trained)) in captured:
        return claim.model_copy(update={"length": next(iter(trained))})
    if len(captured) == 1:
        return claim.model_copy(update={"length": captured[0]})
    kind = claim.reads() if claim.reads() != registry.BEHAVIOUR else None
    if kind is not None:  # a metric read from results: the one length they hold
        held = set(_result_lengths(store, kind))
        if kind == registry.PROBES and probes is not None and "length" in probes.coords:
            held |= {int(v) for v in probes.length.values}
        if len(held) == 1 and (not captured or next(iter(held)) in captured):
            return claim.model_copy(update={"length": next(iter(held))})
    if not captured:
        captured = _result_lengths(store, kind)
    why = (f"its runs were trained at {', '.join(map(str, sorted(trained)))}" if trained
           else "its runs record no training length")
    raise ClaimError(
        f"claim {claim.id!r} declares no length and {why}; add length = N to the claim "
        f"(lengths captured for {', '.join(sorted(tasks)) or 'its runs'}: "
        f"{', '.join(map(str, captured)) or 'none'})"
    )


def _result_lengths(store: Store, kind: str | None = None) -> list[int]:
    """The lengths the stored analysis results (of ``kind``, default every kind) hold: their
    ``length`` coordinate or attribute."""
    found: set[int] = set()
    for name in store.results():
        parsed = schema.parse_result_name(name)
        if parsed is None or kind not in (None, parsed[0]):
            continue
        attrs = store.result_attrs(name)
        if isinstance(attrs.get("length"), int | np.integer):
            found.add(int(attrs["length"]))
        else:
            ds = store.read_result(name)
            if "length" in ds.coords:
                found.update(int(v) for v in np.atleast_1d(ds.length.values))
    return sorted(found)


def at_length(claim: Claim) -> int:
    """The claim's length, once :func:`resolve_length` has given it one."""
    if claim.length is None:
        raise ClaimError(f"claim {claim.id!r} has no length yet; evaluate it with evaluate_claims, "
                         "which gives it its runs' length, or add length = N to the claim")
    return claim.length


def sequence_counts(inputs: ClaimInputs, claim: Claim) -> xr.Dataset:
    """Per-sequence ``correct`` and ``labelled`` counts with dims (task, arch, variant, seed,
    sequence) at the claim's length: read from the stored behaviour results
    (``results/behaviour/<task>``) when they hold every run captured at that length, for
    the claim's target, else counted from the logits (a store without them)."""
    store = inputs.store

    def count() -> xr.Dataset:
        runs = [r for r in store.run_ids() if claim.length in store.lengths(r)]
        if not runs:
            raise MissingError(
                f"claim {claim.id!r}: no run has captured length {claim.length}; "
                "run `layerstate capture` (or change the claim's length)"
            )
        counts = stored_counts(store, runs, at_length(claim), claim.target)
        if counts is None:
            counts = sequence_correctness(store, runs, [at_length(claim)], target=claim.target)
        return by_factors(counts.sel(length=claim.length))

    return inputs.once(("sequences", claim.length, claim.target), count)


def stored_counts(store: Store, runs: list[str], length: int, target: str | None) -> xr.Dataset | None:
    """``correct`` and ``labelled`` (run, length, sequence) of ``runs`` at ``length`` as the
    stored behaviour results hold them (runs in ``runs``' order, sequences padded with NaN as
    :func:`~analysis.behaviour.sequence_correctness` pads them), with ``attrs["results"]``
    naming the results read; None unless every run is there with counts at ``length``,
    measured for ``target`` (None: each run's declared target)."""
    parts: list[xr.Dataset] = []
    source: list[str] = []
    for name in stored_behaviour(store):
        attrs = store.result_attrs(name)
        if attrs.get("target") != target:
            continue
        ds = store.read_result(name)
        if length not in ds.length.values:
            continue
        one = ds[["correct", "labelled"]].sel(length=[length])
        taken = {str(r) for p in parts for r in p.run.values}
        held = [str(r) for r, h in zip(ds.run.values, one.labelled.notnull().any(("length", "sequence")).values,
                                        strict=True) if h and str(r) in runs and str(r) not in taken]
        if held:
            parts.append(one.reset_coords(drop=True).assign_coords(run=[str(r) for r in one.run.values])
                         .sel(run=held))
            source.append(name)
    have = {str(r) for p in parts for r in p.run.values}
    if not set(runs) <= have:
        return None
    both = xr.concat(parts, dim="run", join="outer") if len(parts) > 1 else parts[0]
    both = both.sel(run=runs)
    filled = both.labelled.notnull().any(("run", "length")).values
    n_seq = int(np.flatnonzero(filled)[-1]) + 1 if filled.any() else 0
    out = both.isel(sequence=slice(0, n_seq)).assign_coords(factor_coords(store, runs))
    out.attrs["results"] = ", ".join(sorted(source))
    return out


def seed_metric(inputs: ClaimInputs, claim: Claim) -> xr.DataArray:
    """The claim's metric, one value per trained model: dims (task, arch, variant, seed) at
    the claim's length, plus ``site`` (restoration), ``layer`` (probe_accuracy,
    patch_recovery) or ``layer, setting`` (ablation_drop, refit_accuracy)."""
    reader = _SEED_READERS.get(claim.metric)
    if reader is not None:
        return reader(inputs, claim)
    if claim.metric in registry.metrics():  # an added analysis's
        return _seed_added(inputs, claim)

    def accuracy() -> xr.DataArray:
        corr = sequence_counts(inputs, claim)
        return seed_estimates(corr.correct, corr.labelled)

    return inputs.once(("accuracy", claim.length, claim.target), accuracy)


def _seed_probes(inputs: ClaimInputs, claim: Claim) -> xr.DataArray:
    """Per-seed probe accuracy of the probe result the claim reads, at its length: dims (task,
    arch, variant, seed, layer)."""
    store, probes, tasks = inputs.store, inputs.need_probes(claim), claim.tasks()
    return inputs.once(("probe", claim.length, tuple(tasks), claim.result_key),
                       lambda: seed_profiles(store, choose_probes(store, probes, claim, tasks), at_length(claim)))


def _seed_added(inputs: ClaimInputs, claim: Claim) -> xr.DataArray:
    """Per-seed values of an added analysis's metric (:mod:`analysis.registry`): its reader over
    the stored ``<analysis>/*`` results that hold the claim's length (a ``length`` coordinate, or
    attribute, where the result has one)."""
    metric = registry.metrics()[claim.metric]
    read = metric.values
    if read is None:
        raise ClaimError(f"claim {claim.id!r}: metric {claim.metric!r} has no reader of its results; "
                         "register it with values=...")
    L = claim.length

    def length_ok(ds: xr.Dataset) -> bool:
        if "length" in ds.coords and ds.length.ndim:
            return L in ds.length.values
        stored = ds.attrs.get("length")
        return stored is None or int(stored) == L

    def extract(ds: xr.Dataset, name: str) -> xr.DataArray:
        out = read(ds, claim)
        if "length" in out.dims:
            out = out.sel(length=L, drop=True)
        return out.astype(float)

    return inputs.once(
        (metric.analysis, claim.metric, claim.task, L, claim.result_key),
        lambda: per_run_metric(inputs.store, claim, metric.analysis, length_ok, extract,
                               f"add it to the experiment's [analysis] extra (or run a claim that reads it with "
                               f"`layerstate run`): {metric.analysis} computes it"))


def _seed_restoration(inputs: ClaimInputs, claim: Claim) -> xr.DataArray:
    """Per-seed interchange restoration, dims (task, arch, variant, seed, site), at the
    claim's layer or, without one, at the best layer that is not trivially restored (the
    embedding at the corrupted token itself, the last layer at the readout position), as
    :func:`~analysis.interventions.classify_mechanism` reads it."""
    def extract(part: xr.Dataset, name: str) -> xr.DataArray:
        if claim.layer is not None:
            layers = [str(v) for v in part.layer.values]
            if claim.layer not in layers:
                raise ClaimError(
                    f"claim {claim.id!r}: layer {claim.layer!r} was not patched in {name}; "
                    f"layers: {', '.join(layers)}{did_you_mean(claim.layer, layers)}"
                )
            rest = part.restoration.sel(layer=claim.layer, drop=True)
        else:  # masked per result, so each keeps its own layer order
            rest = nontrivial_restoration(part).max("layer")
        if "p_clean" in part:  # a ratio over a ~0 gap is noise, not a restoration
            rest = rest.where((part.p_clean - part.p_corrupt).mean(("layer", "sequence")) >= MIN_GAP)
        return rest

    return inputs.once(
        ("restoration", claim.task, claim.length, claim.layer, claim.result_key),
        lambda: per_run_metric(inputs.store, claim, "interchange",
                               lambda ds: int(ds.attrs.get("length", -1)) == claim.length, extract,
                               f"run `layerstate patch STORE --interchange --tasks {claim.task} "
                               f"--length {claim.length}`"))


def per_run_metric(store: Store, claim: Claim, prefix: str, length_ok, extract, missing: str) -> xr.DataArray:
    """``extract(dataset, name) -> DataArray (run, ...)`` over the stored ``<prefix>/*`` results that
    hold runs of the claim's task (``result``: only ``<prefix>/<result>``), merged along run,
    then by factors; a run in two results must be told apart by ``result``."""
    names = [n for n in store.results() if (schema.parse_result_name(n) or ("",))[0] == prefix]
    one = claim.one_result
    if one is not None:
        wanted = schema.result_name(prefix, one) if schema.parse_result_name(one) is None or \
            one.startswith(f"{prefix}/") else one
        if wanted not in names:
            raise ClaimError(f"claim {claim.id!r}: no result {wanted}; stored {prefix} results: "
                             f"{', '.join(names) or 'none'}")
        names = [wanted]
    parts: list[xr.DataArray] = []
    source: dict[str, str] = {}
    for name in names:
        ds = store.read_result(name)
        if not length_ok(ds):
            continue
        keep = [i for i, r in enumerate(ds.run.values) if store.run_attrs(str(r)).get("task") == claim.task]
        for i in keep:
            rid = str(ds.run.values[i])
            if rid in source:
                both = "; ".join(f"{n}: {describe_settings(store.result_attrs(n))}" for n in (source[rid], name))
                raise ClaimError(
                    f"claim {claim.id!r}: run {rid!r} has {prefix} results in {source[rid]} and {name}; say "
                    f"which with result = \"{short_name(source[rid])}\" ({both})"
                )
            source[rid] = name
        if keep:
            parts.append(extract(ds.isel(run=keep), name))
    if not parts:
        raise MissingError(f"claim {claim.id!r}: no {prefix} results for task {claim.task!r} at length "
                           f"{claim.length}; {missing}")
    require_runs(store, claim, ", ".join(sorted(set(source.values()))), set(source), missing,
                 kind="cfclean" if prefix in (registry.PATCHING, registry.INTERCHANGE) else "len", task=claim.task)
    out = xr.concat(parts, dim="run", join="outer", coords="minimal", compat="override") if len(parts) > 1 else parts[0]
    res = by_factors(out.reset_coords(drop=True), store)
    res.attrs["results"] = ", ".join(sorted(set(source.values())))  # what the claim read (its claims row)
    return res


def _seed_ablation(inputs: ClaimInputs, claim: Claim) -> xr.DataArray:
    """Per-seed ``accuracy_drop`` or refitted-probe ``probe_accuracy`` (minus ``chance`` with
    ``baseline = "chance"``) of ``results/ablation/*`` at the claim's length: dims (task,
    arch, variant, seed, layer, setting)."""
    L = claim.length
    var = "accuracy_drop" if claim.metric == "ablation_drop" else "probe_accuracy"

    def extract(ds: xr.Dataset, name: str) -> xr.DataArray:
        if var not in ds:
            raise ClaimError(f"claim {claim.id!r}: the ablation results hold no {var} (ablated without "
                             "the refitted probe?); run `layerstate ablate` with the refit")
        out = ds[var].sel(length=L, drop=True)
        if claim.baseline == "chance":
            out = out - ds["chance"].sel(length=L, drop=True)
        return out.astype(float)

    return inputs.once(
        ("ablation", claim.metric, claim.baseline, claim.task, claim.length, claim.result_key),
        lambda: per_run_metric(inputs.store, claim, "ablation",
                               lambda ds: "length" in ds.coords and L in ds.length.values, extract,
                               f"run `layerstate ablate STORE --tasks {claim.task}` with length {L}"))


def _seed_patching(inputs: ClaimInputs, claim: Claim) -> xr.DataArray:
    """Per-seed patching ``recovery`` of ``results/patching/*`` (length attribute = the claim's
    length), averaged over the claim's ``positions`` (default all): dims (task, arch, variant,
    seed, layer). The mean of per-position recoveries is the share of the gap one patched
    position recovers on average, as every position's recovery has the same denominator
    (the run's summed gap); a run whose summed gap is not positive has none (NaN)."""
    def extract(ds: xr.Dataset, name: str) -> xr.DataArray:
        rec = ds["recovery"]
        if claim.positions:
            have = [int(p) for p in ds.position.values]
            lost = [p for p in claim.positions if p not in have]
            if lost:
                raise ClaimError(f"claim {claim.id!r}: positions {lost} were not patched; patched: "
                                 f"{have[0]}..{have[-1]} ({len(have)} positions)")
            rec = rec.sel(position=list(claim.positions))
        out = rec.mean("position")
        if "gap" in ds:
            out = out.where(ds["gap"].sum("sequence") > 0)
        return out.astype(float)

    return inputs.once(
        ("patching", claim.task, claim.length, tuple(claim.positions), claim.result_key),
        lambda: per_run_metric(inputs.store, claim, "patching",
                               lambda ds: int(ds.attrs.get("length", -1)) == claim.length, extract,
                               f"run `layerstate patch STORE --tasks {claim.task} --length {claim.length}`"))


def _seed_mdl(inputs: ClaimInputs, claim: Claim) -> xr.DataArray:
    """Per-seed ``compression_profile`` of ``results/mdl/*`` (uniform over online codelength of
    the label, summed over the result's positions) at the claim's length: dims (task, arch,
    variant, seed, layer)."""
    L = claim.length

    def extract(ds: xr.Dataset, name: str) -> xr.DataArray:
        return ds["compression_profile"].sel(length=L, drop=True).astype(float)

    return inputs.once(
        ("mdl", claim.task, claim.length, claim.result_key),
        lambda: per_run_metric(inputs.store, claim, registry.MDL,
                               lambda ds: "length" in ds.coords and L in ds.length.values, extract,
                               f"run `layerstate mdl STORE --task {claim.task} --lengths {L}`"))


def _seed_stability(inputs: ClaimInputs, claim: Claim) -> xr.DataArray:
    """Per-seed ``seed_pseudo`` of ``results/stability/*`` (each seed's jackknife pseudo-value of
    the mean probe-subspace overlap over its cell's seed pairs: their mean is the pair mean and
    a test over them is a test over seeds) at the claim's length: dims (task, arch, variant,
    seed, layer)."""
    L = claim.length

    def extract(ds: xr.Dataset, name: str) -> xr.DataArray:
        return ds["seed_pseudo"].sel(length=L, drop=True).astype(float)

    return inputs.once(
        ("stability", claim.task, claim.length, claim.result_key),
        lambda: per_run_metric(inputs.store, claim, registry.STABILITY,
                               lambda ds: "length" in ds.coords and L in ds.length.values, extract,
                               f"run `layerstate stability STORE --task {claim.task} --lengths {L}`"))


def require_levels(da: xr.DataArray, dim: str, wanted: list[str | None], claim: Claim) -> None:
    have = [str(v) for v in da[dim].values]
    for w in wanted:
        if w is not None and w not in have:
            raise ClaimError(
                f"claim {claim.id!r}: {dim} {w!r} has no results; stored {dim}s: {', '.join(have)}"
                f"{did_you_mean(w, have)}"
            )


def paired_levels(da: xr.DataArray, claim: Claim) -> tuple[xr.DataArray, xr.DataArray]:
    """The claim's treatment and reference cells of ``da`` (dims task, arch, variant[, site],
    seed[, sequence]), each left with its seed (and sequence) dims."""
    # The variant is pinned when the claim names one or the results hold several (the claim's
    # default, "default"); a store with one variant, whatever its name, needs no pin.
    pin = "variant" in claim.model_fields_set or ("variant" in da.dims and da.sizes["variant"] > 1)
    fixed: dict[str, str | None] = {"task": claim.task, "arch": claim.arch,
                                    "variant": claim.variant if pin else None}
    if claim.metric == "restoration":
        fixed["site"] = claim.site
    for dim, level in (("layer", claim.layer), ("setting", claim.setting)):
        if dim in da.dims:
            fixed[dim] = level
    fixed[claim.compare] = None
    for dim, level in fixed.items():
        if level is not None:
            require_levels(da, dim, [level], claim)
            da = da.sel({dim: level})
    require_levels(da, claim.compare, [claim.treatment, claim.reference], claim)
    t = da.sel({claim.compare: claim.treatment})
    r = da.sel({claim.compare: claim.reference})
    extra = [d for d in t.dims if d not in ("seed", "sequence") and t.sizes[d] > 1]
    if extra:
        raise ClaimError(
            f"claim {claim.id!r} is ambiguous: results vary over {extra}; name them in the claim "
            f"(e.g. arch = ...)"
        )
    other = [d for d in t.dims if d not in ("seed", "sequence")]
    return t.squeeze(other, drop=True), r.squeeze(other, drop=True)


def too_few(claim: Claim, found: int, what: str = "with results in both conditions") -> NotEvaluable:
    why = {"restoration": f"; restoration is undefined for models whose answer the corruption does not move "
                          f"(mean probability gap < {MIN_GAP})",
           "patch_recovery": "; recovery is undefined for models whose summed logit gap is not positive"
           }.get(claim.metric, "")
    return NotEvaluable(
        f"claim {claim.id!r} needs at least 2 seeds {what} (found {found}){why}; train more seeds "
        "(or longer) — seeds are the unit of replication"
    )


def seed_list(seeds: np.ndarray) -> str:
    return ", ".join(str(int(s)) for s in seeds)


def seed_profiles(store: Store, probes: xr.Dataset, length: int) -> xr.DataArray:
    """Probe accuracy across layers per trained model, as dims (task, arch, variant, seed, layer).

    Each run's profile is its cross-validated accuracy averaged over folds (and positions),
    i.e. the ``profile`` variable of a probe result; runs become the grid's factors.
    """
    if "profile" not in probes or length not in probes.length.values:
        have = [int(v) for v in probes.length.values] if "length" in probes.coords else []
        captured = any(length in store.lengths(str(r)) for r in probes.run.values)
        fix = (f"run `layerstate probe STORE --lengths {length}`" if captured else
               f"the runs were not captured at {length}: set length = {have[0] if have else 'N'} in the "
               "claim" + (f" (one of {', '.join(map(str, have))})" if len(have) > 1 else ""))
        raise ClaimError(f"probe results have no profile at length {length} (lengths: {have}); {fix}")
    prof = probes["profile"].sel(length=length, drop=True)
    # the factors always come from the runs' attributes
    return by_factors(prof.drop_vars([f for f in FACTORS if f in prof.coords]), store)


def probe_seed_profile(store: Store, probes: xr.Dataset, claim: Claim, task: str | None,
                        arch: str | None) -> xr.DataArray:
    """Per-seed probe accuracy across layers, (seed, layer), for one task/arch/variant, from
    the probe result the claim reads for that task (:func:`choose_probes`)."""
    prof = seed_profiles(store, choose_probes(store, probes, claim, [str(task)]), at_length(claim))
    sel: dict[str, str] = {"task": str(task), "variant": claim.variant}
    if arch is not None:
        sel["arch"] = arch
    for dim, level in sel.items():
        require_levels(prof, dim, [level], claim)
    out = prof.sel(sel)
    finite = cast(xr.DataArray, np.isfinite(out))  # numpy ufuncs on a DataArray return one
    return out.isel(seed=np.flatnonzero(finite.any("layer").values))


#: The built-in metrics' per-seed readers (an added analysis's metric: :func:`_seed_added`).
_SEED_READERS = {"restoration": _seed_restoration, "probe_accuracy": _seed_probes,
                 "ablation_drop": _seed_ablation, "refit_accuracy": _seed_ablation,
                 "patch_recovery": _seed_patching, "mdl_compression": _seed_mdl,
                 "probe_stability": _seed_stability}
