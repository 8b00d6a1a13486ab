"""Claims: hypotheses declared before looking, evaluated on stored results with honest tests.

A claim lives in the experiment TOML (``[[claims]]``) or its own TOML file; an experiment's
claims are validated, and checked against its grid (:meth:`Claim.check_levels`), as the file
loads (:mod:`layerstate.experiment`), so a malformed claim never waits for training::

    [[claims]]
    id = "conv1d-s3"
    statement = "Removing Conv1D lowers Mamba's S3 accuracy"
    kind = "difference"            # difference | equivalence | readable_by | profile_match
    task = "s3"
    arch = "mamba"
    treatment = "no_conv"          # levels of `compare` (default: variant)
    reference = "default"
    direction = "less"             # less | greater | two-sided
    margin = 0.05                  # smallest effect of interest: power and MDE are reported

Every claim gets an estimate, an interval, the test used, a p-value corrected (Holm) across
all claims of the file, the power at the achieved number of seeds, and a verdict:
``supported``, ``contradicted`` or ``inconclusive`` — or ``not evaluable`` (with the
reason) when the results cannot answer it, e.g. fewer than 2 seeds with a defined value. A non-significant difference is never
reported as "no effect": only an equivalence test against a declared margin can support a
null claim.

Tests (seeds are the unit; see :mod:`analysis.stats`):
- ``difference``/``equivalence``: paired by seed (same seed, same evaluation sequences),
  paired t on per-seed differences and paired TOST (at alpha/2 per side, whose p is doubled
  here so that every claim is judged at one alpha).
- ``metric = "restoration"`` (difference/equivalence): the interchange restoration of each
  seed (:func:`analysis.interventions.run_interchange`) at ``layer`` (default: the best
  non-trivial layer), compared between two ``site``s (``compare = "site"``: e.g. value vs
  query — the induction / direct-retrieval signature of Arora et al.) or between
  architectures/variants at one ``site``, paired by seed like accuracy.
- ``readable_by``: one-sided t test that the mean probe accuracy at ``layer`` exceeds
  ``threshold`` across seeds.
- ``profile_match``: exact permutation test over seeds of the layer-profile shape distance.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Collection, Mapping
from typing import Any, Literal, cast

import numpy as np
import xarray as xr
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from scipy import stats as sps

from store import LayerstateError, MissingError, Store

ALPHA = 0.05


class ClaimError(LayerstateError, ValueError):
    """A claim that is malformed or cannot be evaluated as written (one line, with the fix)."""


class NotEvaluable(ClaimError):
    """The stored results cannot answer a well-formed claim (e.g. fewer than 2 seeds with a
    defined value): the claim is reported with verdict ``not evaluable`` and the reason,
    while the other claims are still evaluated."""


#: Below this mean clean-corrupt probability gap a run's restoration is undefined: the
#: corruption does not change its answer (as in :func:`classify_mechanism`'s ``min_gap``).
MIN_GAP = 0.05


class Claim(BaseModel):
    """One declared hypothesis."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    id: str = Field(description="Short unique name.")
    statement: str = Field(description="The hypothesis in words, as it will appear in the report.")
    kind: Literal["difference", "equivalence", "readable_by", "profile_match"] = Field(
        description="Which test evaluates it."
    )
    metric: Literal["accuracy", "probe_accuracy", "restoration"] = Field(
        default="accuracy",
        description="accuracy (the model's own readout), probe_accuracy, or restoration "
        "(interchange interventions: fraction of the clean answer's probability restored).",
    )
    task: str | None = Field(default=None, description="Task the claim is about.")
    arch: str | None = Field(default=None, description="Architecture the claim is about.")
    archs: list[str] = Field(default=[], description="profile_match: architectures to test (each a claim row).")
    variant: str = Field(default="default", description="Variant for readable_by/profile_match.")
    length: int = Field(default=40, description="Sequence length the metric is taken at.")
    compare: Literal["variant", "arch", "task", "site"] = Field(
        default="variant", description="Factor compared (site: interchange sites, metric = restoration)."
    )
    site: str | None = Field(
        default=None, description="restoration: the patched site (key, value, divider, query) when not compared."
    )
    treatment: str | None = Field(default=None, description="Level of `compare` under test.")
    reference: str | None = Field(default=None, description="Level of `compare` compared against.")
    direction: Literal["less", "greater", "two-sided"] = Field(default="two-sided", description="Expected sign.")
    margin: float | None = Field(default=None, description="Smallest effect of interest (equivalence margin).")
    layer: str | None = Field(default=None, description="readable_by: the layer, e.g. L1.")
    threshold: float | None = Field(default=None, description="readable_by: accuracy to exceed.")
    matches: str | None = Field(default=None, description="profile_match: task whose profile `task` should match.")
    differs_from: str | None = Field(default=None, description="profile_match: task it should differ from.")
    target: str | None = Field(default=None, description="probe_accuracy: the probed label (default the run's target).")
    result: str | None = Field(
        default=None, description="restoration: which results/interchange/<name> to read when several cover the task."
    )

    @model_validator(mode="after")
    def _fields_for_kind(self) -> Claim:
        need = {
            "difference": ("task", "treatment", "reference"),
            "equivalence": ("task", "treatment", "reference", "margin"),
            "readable_by": ("task", "arch", "layer", "threshold"),
            "profile_match": ("task", "matches", "differs_from"),
        }[self.kind]
        missing = [f for f in need if getattr(self, f) is None]
        if missing:
            article = "an" if self.kind[0] in "aeiou" else "a"
            raise ValueError(f"{article} {self.kind} claim needs {', '.join(missing)}")
        if self.compare == "site" and self.metric != "restoration":
            raise ValueError("compare = 'site' needs metric = 'restoration' (interchange sites)")
        if self.metric == "restoration":
            if self.kind not in ("difference", "equivalence"):
                raise ValueError("metric = 'restoration' works with difference and equivalence claims")
            if self.compare == "task":
                raise ValueError("restoration claims compare sites, architectures or variants within one task")
            if self.compare != "site" and self.site is None:
                raise ValueError("a restoration claim compares sites (compare = 'site') or names one site = ...")
        if self.kind in ("difference", "equivalence") and self.metric == "probe_accuracy":
            raise ValueError(
                f"{self.kind} claims use metric = 'accuracy' or 'restoration'; "
                "for probe accuracy use readable_by or profile_match"
            )
        if self.margin is not None and not self.margin > 0:
            raise ValueError(f"margin must be positive (a declared effect size), got {self.margin}")
        return self

    def levels(self) -> list[tuple[str, str, str | int]]:
        """Every level of the experiment the claim names, as ``(field, factor, level)``:
        factors are ``task``, ``arch``, ``variant``, ``site``, ``layer`` and ``length``, in the
        order they are checked (tasks first: sites and layers depend on them)."""
        named: list[tuple[str, str, str | int | None]] = [
            ("task", "task", self.task),
            ("arch", "arch", self.arch),
            *(("archs", "arch", a) for a in self.archs),
        ]
        if self.kind in ("readable_by", "profile_match"):  # the others compare or span variants
            named.append(("variant", "variant", self.variant))
        named += [
            ("treatment", self.compare, self.treatment),
            ("reference", self.compare, self.reference),
            ("matches", "task", self.matches),
            ("differs_from", "task", self.differs_from),
            ("length", "length", self.length),
            ("site", "site", self.site),
            ("layer", "layer", self.layer),
        ]
        return [(f, factor, level) for f, factor, level in named if level is not None]

    def check_levels(self, valid: Mapping[str, Collection[str | int] | None]) -> None:
        """Refuse a claim naming a level not in ``valid`` (factor -> its levels; a factor
        missing or ``None`` is not checked).

        Raises
        ------
        ClaimError
            One line naming the claim, the field, and the levels there are.
        """
        for field, factor, level in self.levels():
            levels = valid.get(factor)
            if levels is not None and level not in levels:
                shown = ", ".join(str(v) for v in levels) or "none"
                raise ClaimError(
                    f"claim {self.id!r}: {field} {level!r} is not one of this experiment's "
                    f"{factor}s ({shown})"
                )


def parse_claims(items: list[dict[str, Any]], source: str | None = None) -> list[Claim]:
    """Validate a list of claim tables; one-line errors name the claim and the field.

    Raises
    ------
    ClaimError
        ``"<source>: claim '<id>': <field>: <problem>"`` (no source prefix when not given).
    """
    prefix = f"{source}: " if source else ""
    if not isinstance(items, list):
        raise ClaimError(f"{prefix}claims must be a list of [[claims]] tables")
    out, seen = [], set()
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise ClaimError(f"{prefix}claim #{i + 1} is not a table; write it as a [[claims]] table")
        try:
            claim = Claim(**item)
        except ValidationError as exc:
            name = item.get("id", f"#{i + 1}")
            raise ClaimError(f"{prefix}claim {name!r}: {_one_line(exc)}") from None
        if claim.id in seen:
            raise ClaimError(f"{prefix}claim id {claim.id!r} is used twice; ids must be unique")
        seen.add(claim.id)
        out.append(claim)
    return out


def _one_line(exc: ValidationError) -> str:
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err["loc"])
    msg = err["msg"].removeprefix("Value error, ")
    if err["type"] == "extra_forbidden":
        near = difflib.get_close_matches(where, list(Claim.model_fields), n=1)
        msg = f"unknown field; did you mean {near[0]!r}?" if near else (
            f"unknown field; a claim's fields are {', '.join(Claim.model_fields)}")
    return f"{where}: {msg}" if where else msg


# ---------------------------------------------------------------------- per-kind evaluation
def _seed_metric(store: Store, claim: Claim, cache: dict) -> xr.DataArray:
    """Per-seed accuracy with dims (task, arch, variant, seed) at the claim's length (plus
    ``site`` for restoration)."""
    from analysis.behaviour import by_factors, sequence_correctness
    from analysis.stats import seed_estimates

    if claim.metric == "restoration":
        return _seed_restoration(store, claim, cache)
    key = ("accuracy", claim.length)
    if key not in cache:
        runs = [r for r in store.run_ids() if claim.length in store.lengths(r)]
        if not runs:
            raise MissingError(
                f"claim {claim.id!r}: no run has captured length {claim.length}; "
                "run `layerstate capture` (or change the claim's length)"
            )
        corr = by_factors(sequence_correctness(store, runs, [claim.length]).sel(length=claim.length))
        cache[key] = seed_estimates(corr.correct, corr.labelled)
    return cache[key]


def _seed_restoration(store: Store, claim: Claim, cache: dict) -> xr.DataArray:
    """Per-seed interchange restoration, dims (task, arch, variant, seed, site), at the
    claim's layer or, without one, at the best layer that is not trivially restored (the
    embedding at the corrupted token itself, the last layer at the readout position), as
    :func:`~analysis.interventions.classify_mechanism` reads it."""
    from analysis.behaviour import by_factors

    key = ("restoration", claim.task, claim.length, claim.layer, claim.result)
    if key in cache:
        return cast(xr.DataArray, cache[key])
    from analysis.interventions.patching import nontrivial_restoration

    names = [n for n in store.results() if n.startswith("interchange/")]
    if claim.result is not None:
        if f"interchange/{claim.result}" not in names:
            raise ClaimError(
                f"claim {claim.id!r}: no result interchange/{claim.result}; stored: "
                f"{', '.join(names) or 'none'}"
            )
        names = [f"interchange/{claim.result}"]
    parts: list[xr.DataArray] = []
    source: dict[str, str] = {}
    for name in names:
        ds = store.read_result(name)
        if int(ds.attrs.get("length", -1)) != claim.length:
            continue
        keep = [i for i, r in enumerate(ds.run.values) if store.run_attrs(str(r)).get("task") == claim.task]
        for i in keep:
            rid = str(ds.run.values[i])
            if rid in source:
                raise ClaimError(
                    f"claim {claim.id!r}: run {rid!r} has interchange results in {source[rid]} and "
                    f"{name}; say which with result = \"{source[rid].split('/', 1)[1]}\""
                )
            source[rid] = name
        if not keep:
            continue
        part = ds.isel(run=keep)
        gap = (part.p_clean - part.p_corrupt).mean(("layer", "sequence")) if "p_clean" in part else None
        if claim.layer is not None:
            layers = [str(v) for v in part.layer.values]
            if claim.layer not in layers:
                raise ClaimError(
                    f"claim {claim.id!r}: layer {claim.layer!r} was not patched in {name}; "
                    f"layers: {', '.join(layers)}"
                )
            parts.append(part.restoration.sel(layer=claim.layer, drop=True))
        else:  # masked per result, so each keeps its own layer order
            parts.append(nontrivial_restoration(part).max("layer"))
        if gap is not None:  # a ratio over a ~0 gap is noise, not a restoration
            parts[-1] = parts[-1].where(gap >= MIN_GAP)
    if not parts:
        raise MissingError(
            f"claim {claim.id!r}: no interchange results for task {claim.task!r} at length "
            f"{claim.length}; run `layerstate patch STORE --interchange --tasks {claim.task} "
            f"--length {claim.length}`"
        )
    rest = xr.concat(parts, dim="run", join="outer") if len(parts) > 1 else parts[0]
    out = by_factors(rest.reset_coords(drop=True), store)
    cache[key] = out
    return out


def _levels(da: xr.DataArray, dim: str, wanted: list[str | None], claim: Claim) -> None:
    have = [str(v) for v in da[dim].values]
    for w in wanted:
        if w is not None and w not in have:
            raise ClaimError(
                f"claim {claim.id!r}: {dim} {w!r} has no results; stored {dim}s: {', '.join(have)}"
            )


def _paired(store: Store, claim: Claim, cache: dict) -> tuple[xr.DataArray, xr.DataArray]:
    per_seed = _seed_metric(store, claim, cache)
    fixed: dict[str, str | None] = {"task": claim.task, "arch": claim.arch, "variant": None}
    if claim.metric == "restoration":
        fixed["site"] = claim.site
    fixed[claim.compare] = None
    for dim, level in fixed.items():
        if level is not None:
            _levels(per_seed, dim, [level], claim)
            per_seed = per_seed.sel({dim: level})
    _levels(per_seed, claim.compare, [claim.treatment, claim.reference], claim)
    t = per_seed.sel({claim.compare: claim.treatment})
    r = per_seed.sel({claim.compare: claim.reference})
    extra = [d for d in t.dims if d != "seed" and t.sizes[d] > 1]
    if extra:
        raise ClaimError(
            f"claim {claim.id!r} is ambiguous: results vary over {extra}; name them in the claim "
            f"(e.g. arch = ...)"
        )
    t, r = t.squeeze(drop=True), r.squeeze(drop=True)
    ok = np.isfinite(t.values) & np.isfinite(r.values)
    if ok.sum() < 2:
        why = (f"; restoration is undefined for models whose answer the corruption does not move "
               f"(mean probability gap < {MIN_GAP})" if claim.metric == "restoration" else "")
        raise NotEvaluable(
            f"claim {claim.id!r} needs at least 2 seeds with results in both conditions "
            f"(found {int(ok.sum())}){why}; train more seeds (or longer) — seeds are the unit of replication"
        )
    return t.isel(seed=np.flatnonzero(ok)), r.isel(seed=np.flatnonzero(ok))


def _evaluate_comparison(store: Store, claim: Claim, cache: dict) -> dict:
    from analysis.stats import equivalence_test, minimum_detectable_effect

    t, r = _paired(store, claim, cache)
    margin = claim.margin or 0.05
    eq = equivalence_test(t, r, margin=margin, alpha=ALPHA)
    est = float(eq.estimate)
    n = int(t.sizes["seed"])
    row: dict[str, Any] = {
        "estimate": est, "lower": float(eq.lower), "upper": float(eq.upper),
        "n_seeds": n, "margin": claim.margin if claim.margin else np.nan,
        "mde": float(minimum_detectable_effect(n, float(eq.sd), ALPHA, 0.8)),
        "treatment_mean": float(t.mean()), "reference_mean": float(r.mean()),
    }
    if claim.kind == "equivalence":
        row.update(p=min(1.0, 2 * float(eq.p_tost)), power=float(eq.power_tost),
                   test=f"paired TOST, margin ±{margin:g}, alpha/2 per side (p doubled)")
    else:
        p2 = float(eq.p_difference)
        if claim.direction == "two-sided":
            p = p2
        else:
            right_sign = (est < 0) if claim.direction == "less" else (est > 0)
            p = p2 / 2 if right_sign else 1 - p2 / 2
        row.update(p=p, power=float(eq.power_difference) if claim.margin else np.nan,
                   test=f"paired t on per-seed differences ({claim.direction})")
    return row


def _verdict(claim: Claim, row: dict, p_adj: float) -> str:
    if row.get("not_evaluable"):
        return "not evaluable"
    significant = p_adj < ALPHA
    if claim.kind == "equivalence":
        if significant:
            return "supported"
        margin = claim.margin
        if margin is None:  # the Claim validator requires a margin for equivalence claims
            raise ClaimError(f"claim {claim.id!r}: an equivalence claim needs a margin")
        effect = row["lower"] > margin or row["upper"] < -margin
        return "contradicted" if effect else "inconclusive"
    if claim.kind == "difference":
        if significant:
            return "supported"
        if claim.direction != "two-sided" and claim.margin:
            # the whole interval on the wrong side of the expected effect contradicts it
            wrong = row["lower"] > 0 if claim.direction == "less" else row["upper"] < 0
            return "contradicted" if wrong else "inconclusive"
        return "inconclusive"
    if claim.kind == "readable_by":
        return "supported" if significant else (
            "contradicted" if row["upper"] < claim.threshold else "inconclusive")
    return "supported" if significant else "inconclusive"


def _evaluate_readable(store: Store, claim: Claim, probes: xr.Dataset) -> dict:
    threshold = claim.threshold
    if threshold is None:  # the Claim validator requires a threshold for readable_by claims
        raise ClaimError(f"claim {claim.id!r}: a readable_by claim needs a threshold")
    acc = _probe_seed_profile(store, probes, claim, claim.task, claim.arch)
    if claim.layer not in [str(v) for v in acc.layer.values]:
        raise ClaimError(
            f"claim {claim.id!r}: layer {claim.layer!r} not probed; layers: "
            f"{', '.join(map(str, acc.layer.values))}"
        )
    x = acc.sel(layer=claim.layer).values
    x = x[np.isfinite(x)]
    if x.size < 2:
        raise NotEvaluable(f"claim {claim.id!r} needs probe results from at least 2 seeds (found {x.size})")
    n, mean, sd = x.size, float(x.mean()), float(x.std(ddof=1))
    se = sd / math.sqrt(n) if sd > 0 else 1e-12
    tcrit = sps.t.ppf(1 - ALPHA / 2, n - 1)
    p = float(sps.t.sf((mean - threshold) / se, n - 1))
    return {
        "estimate": mean, "lower": mean - tcrit * se, "upper": mean + tcrit * se, "p": p,
        "n_seeds": n, "margin": np.nan, "power": np.nan, "mde": np.nan,
        "treatment_mean": mean, "reference_mean": claim.threshold,
        "test": f"one-sided t: mean probe accuracy at {claim.layer} > {claim.threshold:g}",
    }


def seed_profiles(store: Store, probes: xr.Dataset, length: int) -> xr.DataArray:
    """Probe accuracy across layers per trained model, as dims (task, arch, variant, seed, layer).

    Each run's profile is its cross-validated accuracy averaged over folds (and positions),
    i.e. the ``profile`` variable of a probe result; runs become the grid's factors.
    """
    from analysis.behaviour import FACTORS, by_factors

    if "profile" not in probes or length not in probes.length.values:
        have = [int(v) for v in probes.length.values] if "length" in probes.coords else []
        raise ClaimError(
            f"probe results have no profile at length {length} (lengths: {have}); "
            f"run `layerstate probe STORE --lengths {length}`"
        )
    prof = probes["profile"].sel(length=length, drop=True)
    # the factors always come from the runs' attributes
    return by_factors(prof.drop_vars([f for f in FACTORS if f in prof.coords]), store)


def _probe_seed_profile(store: Store, probes: xr.Dataset, claim: Claim, task: str | None,
                        arch: str | None) -> xr.DataArray:
    """Per-seed probe accuracy across layers, (seed, layer), for one task/arch/variant."""
    prof = seed_profiles(store, probes, claim.length)
    sel: dict[str, str] = {"task": str(task), "variant": claim.variant}
    if arch is not None:
        sel["arch"] = arch
    for dim, level in sel.items():
        _levels(prof, dim, [level], claim)
    out = prof.sel(sel)
    finite = cast(xr.DataArray, np.isfinite(out))  # numpy ufuncs on a DataArray return one
    return out.isel(seed=np.flatnonzero(finite.any("layer").values))


def _evaluate_profile(store: Store, claim: Claim, probes: xr.Dataset, arch: str) -> dict:
    from analysis.stats import profile_difference_test

    if claim.matches is None or claim.differs_from is None:  # required by the Claim validator
        raise ClaimError(f"claim {claim.id!r}: a profile_match claim needs matches and differs_from")
    profiles = {t: _probe_seed_profile(store, probes, claim, t, arch)
                for t in (claim.task, claim.matches, claim.differs_from)}

    def test(other: str) -> xr.Dataset:
        pair = xr.concat([profiles[claim.task], profiles[other]],
                         dim=xr.DataArray([claim.task, other], dims="task"))
        return profile_difference_test(pair.transpose("task", "seed", "layer"), rng=0)

    same, diff = test(claim.matches), test(claim.differs_from)
    d_same, d_diff = float(same.statistic), float(diff.statistic)
    return {
        # the tested statistic: shape distance to `differs_from`, with its bootstrap interval
        "estimate": d_diff, "lower": float(diff.lower), "upper": float(diff.upper),
        # supported needs the profile to differ from `differs_from` (the test) AND to sit
        # closer to `matches` than to it (a descriptive condition, reported beside it)
        "p": float(diff.p) if d_same < d_diff else 1.0,
        "n_seeds": int(profiles[claim.task].sizes["seed"]),
        "margin": np.nan, "power": np.nan, "mde": np.nan,
        "treatment_mean": d_same, "reference_mean": d_diff,
        "test": f"exact permutation over seeds of the profile-shape distance ({claim.task} vs "
                f"{claim.differs_from}; distance to {claim.matches} must be smaller)",
    }


def evaluate_claims(store: Store, claims: list[Claim], *, probes: xr.Dataset | None = None) -> xr.Dataset:
    """Evaluate every claim; returns one row per claim (dim ``claim``).

    Nothing is written if any claim fails to evaluate (no partial verdicts).

    Returns
    -------
    xarray.Dataset
        Dim ``claim``: ``statement``, ``kind``, ``test``, ``verdict`` (strings), ``estimate``,
        ``lower``, ``upper`` (95% interval), ``p``, ``p_adjusted`` (Holm over the claims),
        ``power``, ``mde``, ``n_seeds``, ``margin``.
    """
    from analysis.stats import adjust_pvalues

    if not claims:
        raise ClaimError("no claims to evaluate; add [[claims]] tables to the experiment file")
    cache: dict = {}
    rows, ids, kept = [], [], []

    def attempt(fn, *args) -> dict:
        try:
            return fn(*args)
        except NotEvaluable as exc:
            return {k: np.nan for k in ("estimate", "lower", "upper", "p", "power", "mde", "n_seeds",
                                        "margin", "treatment_mean", "reference_mean")} | {
                "test": f"not evaluable: {exc}", "not_evaluable": True}

    for claim in claims:
        if claim.kind in ("difference", "equivalence"):
            rows.append(attempt(_evaluate_comparison, store, claim, cache))
            ids.append(claim.id)
            kept.append(claim)
            continue
        if probes is None:
            raise ClaimError(
                f"claim {claim.id!r} needs probe results; run `layerstate probe STORE` first"
            )
        if claim.kind == "readable_by":
            rows.append(attempt(_evaluate_readable, store, claim, probes))
            ids.append(claim.id)
            kept.append(claim)
        else:
            for arch in claim.archs or ([claim.arch] if claim.arch else []):
                rows.append(attempt(_evaluate_profile, store, claim, probes, arch))
                ids.append(f"{claim.id}[{arch}]")
                kept.append(claim)
    p_raw = np.array([r["p"] for r in rows], dtype=float)
    p_adj = np.full(p_raw.shape, np.nan)
    tested = np.isfinite(p_raw)  # Holm over the claims that could be tested
    if tested.any():
        adj = adjust_pvalues(xr.DataArray(p_raw[tested], dims="claim"), method="holm", dims=["claim"], alpha=ALPHA)
        p_adj[tested] = np.asarray(adj["p_adjusted"].values, dtype=float)
    verdicts = [_verdict(c, r, pa) for c, r, pa in zip(kept, rows, p_adj, strict=True)]
    num = ("estimate", "lower", "upper", "p", "power", "mde", "n_seeds", "margin",
           "treatment_mean", "reference_mean")
    data = {k: ("claim", np.array([float(r[k]) for r in rows])) for k in num}
    data["p_adjusted"] = ("claim", p_adj)
    data["verdict"] = ("claim", np.array(verdicts, dtype=str))
    data["test"] = ("claim", np.array([r["test"] for r in rows], dtype=str))
    data["statement"] = ("claim", np.array([c.statement for c in kept], dtype=str))
    data["kind"] = ("claim", np.array([c.kind for c in kept], dtype=str))
    return xr.Dataset(
        data, coords={"claim": np.array(ids, dtype=str)},
        attrs={"alpha": ALPHA, "correction": "holm across the claims", "ci_level": 1 - ALPHA},
    )


def stored_probe_profiles(store: Store) -> xr.Dataset | None:
    """Every stored ``probes/*`` result's layer profiles, merged along ``run`` (None if none)."""
    names = [n for n in store.results() if n.startswith("probes/")]
    if not names:
        return None
    profiles = [store.read_result(n)[["profile"]] for n in names]
    return xr.concat(profiles, dim="run", join="outer", data_vars="all")


def evaluate_stored_claims(store: Store, claims: list[Claim]) -> xr.Dataset:
    """Evaluate ``claims`` on the results stored in ``store`` (probe profiles included) and
    store the verdicts as ``results/claims``; returns them (see :func:`evaluate_claims`)."""
    res = evaluate_claims(store, claims, probes=stored_probe_profiles(store))
    store.write_result("claims", res)
    return res
