"""The claims section: each claim's tests, p-values, power and verdict (the verdicts themselves are
shown once, in the summary).

Each function reads a :class:`~reports.snapshot.Snapshot` and returns a
:class:`~reports.model.Section`; a section whose results are absent says which command
produces them instead of failing. Intervals go through :func:`reports.intervals.apply_rules`.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from analysis.claims.kinds import trait
from analysis.claims.profiles import CLAIM_PROFILES, profiles_frame
from analysis.claims.stored import stale_table
from analysis.claims.verdicts import power_words, seeds_note, share_words
from reports import figures as F
from reports.intervals import RANGES, apply_rules, interval_text
from reports.model import Figure, Section, Table, missing_section
from reports.numbers import fmt, fmt_p, read_result
from reports.snapshot import Snapshot

CLAIMS_TITLE = "Claims: tests and power"
CLAIMS_INTRO = (
    "Hypotheses declared before looking, each with its estimate, 95% interval, test, p-value, "
    "p-value corrected across all claims (Holm), power and a verdict with its reason. A claim with a "
    "margin ends in one of four outcomes: supported (different from zero and beyond the margin), "
    "negligible (different from zero but inside the margin: real, too small to matter), equivalent "
    "(inside the margin and not different from zero), or inconclusive (neither shown; its power and "
    "minimum detectable effect say how far the data were from deciding); contradicted means the "
    "interval lies on the wrong side and a test of that side passes, Holm-corrected across the "
    "claims like support. A non-significant difference is never read as 'no effect'. "
    "Accuracy claims are fitted by one claim model: the paired t on per-seed differences (the default, "
    "best calibrated), a binomial GEE with seeds as clusters, or a linear mixed model (mixedlm: REML, with "
    "intercepts for seed, trained model and sequence), which also runs beside the default as a cross-check. "
    "Both the GEE and the mixed model test with a cluster-robust (CR2) standard error, seeds as clusters, "
    "and Bell-McCaffrey degrees of freedom (when every seed is scored on as many sequences, the mixed "
    "model's test is exactly the paired t); a GLMM gives estimates "
    "and variance components only, never a verdict. A bound or readable_by claim is decided by the exact "
    "sign test on the share of seeds beyond its threshold (its estimate is the median seed), which holds "
    "at the accuracy ceiling and with a failing seed; it needs at least 5 seeds, more at a Holm step below "
    "alpha, and says so when it has fewer (docs/ceiling.md)."
)
#: Said under the claims table when it shows variance components.
SD_NOTE = (
    "SD seed, SD model and SD sequence (accuracy claims, from the mixed model, accuracy scale) split "
    "the spread between seeds, between a seed's trained models and between evaluation sequences: "
    "when the seed and model SDs are large beside SD sequence / sqrt(sequences), more seeds narrow "
    "the interval and more sequences barely do."
)
#: Marks a cross-check whose verdict differs from the claim's (the page colours the cell).
DISAGREES = "⚠ disagrees"
#: The columns of :func:`claims_display` the Summary's claims table shows; the claims section
#: leaves them out (each is shown once on the page).
SHOWN_IN_SUMMARY = ("statement", "reason", "estimate [95% CI]")
#: The anchor of a claim's row in the Summary's claims table (the claims section links to it).
CLAIM_ANCHOR = "claim"


def claims(snap: Snapshot, experiment: dict | None = None) -> Section:
    """The claims table and forest plot from ``results/claims``; ``experiment`` (its
    ``claims`` tables) says which metric each claim reads, hence its interval's range."""
    if "claims" not in snap.results():
        sec = missing_section("claims", CLAIMS_TITLE, "No evaluated claims in this store.", "stats", CLAIMS_INTRO)
        kept = kept_profiles(snap)  # a part whose tasks only the grid's profile claims read
        if kept is not None:
            sec.tables.append(kept)
        return sec
    ds = read_result(snap.store, "claims")
    stale = stale_table(snap.store, ds)
    if stale is not None:  # verdicts from fewer seeds than the store holds are not shown as verdicts
        return missing_section("claims", CLAIMS_TITLE, f"The stored verdicts are out of date: {stale}. Decide "
                               "them again on what the store holds now.", "stats", CLAIMS_INTRO)
    frame = claims_frame(ds, claim_metrics(experiment, ds))
    sec = Section("claims", CLAIMS_TITLE, intro=CLAIMS_INTRO)
    alpha = ds.attrs.get("alpha", 0.05)
    sec.notes.append(f"alpha = {alpha}; correction: {ds.attrs.get('correction', 'holm')}. "
                     "A profile-match estimate is how much closer the profile lies to the one it should "
                     "match than to the one it should differ from (a difference of profile-shape distances), "
                     "with a seed-bootstrap interval that must clear the claim's margin; whether it differs "
                     "is the exact permutation p.")
    shown = claims_display(frame)
    if any(c.startswith("SD ") for c in shown.columns):
        sec.notes.append(SD_NOTE)
    if "cross-check verdict" in shown.columns:
        n = int(frame["disagreement"].sum()) if "disagreement" in frame else 0
        sec.notes.append("Cross-check: a second claim model fitted to the same data, its interval under the "
                         "same rules; " + (f"{n} claim(s) where its verdict differs are marked '{DISAGREES}'."
                                           if n else "its verdict agrees with every claim's."))
    # each claim's statement, estimate and reason are the Summary's claims table (section 1), shown once:
    # this one holds the tests behind them, its claims linked to their rows there
    tests = shown.drop(columns=[c for c in SHOWN_IN_SUMMARY if c in shown.columns])
    sec.tables.append(Table("claims", "The tests behind each claim's verdict: claim model, test, p-values, power, "
                            "the cross-check and variance components (each claim's statement, estimate with its "
                            "95% interval and reason are in the Summary, section 1; every column in the CSV).",
                            frame, tests, link=CLAIM_ANCHOR))
    sec.figures.append(Figure("claims_forest", "Claim estimates with 95% intervals, coloured by verdict.",
                              F.forest(frame)))
    kept = kept_profiles(snap)
    if kept is not None:
        sec.tables.append(kept)
    return sec


def kept_profiles(snap: Snapshot) -> Table | None:
    """The per-seed layer profiles the declared profile claims read of this store's tasks
    (``results/claim_profiles``): the CSV holds every seed's accuracy per layer, what
    ``layerstate combine`` decides a profile claim across parts from; the page lists what is
    kept (the profiles themselves, with intervals, are in the probe section)."""
    if CLAIM_PROFILES not in snap.results():
        return None
    ds = read_result(snap.store, CLAIM_PROFILES)
    if stale_table(snap.store, ds) is not None:  # seeds trained since: combining them would read fewer
        return None
    data = profiles_frame(ds, "this store")
    if data.empty:
        return None
    shown = (data.groupby(["claim", "task", "arch", "variant", "length", "result"], sort=False)
             .agg(seeds=("seed", lambda s: ", ".join(map(str, sorted(set(s))))),
                  layers=("layer", lambda s: " ".join(dict.fromkeys(s))))
             .reset_index())
    return Table("claim_profiles", "Per-seed probe profiles kept for the profile claims (every seed's accuracy "
                 "per layer in the CSV): `layerstate combine` decides a claim comparing tasks of several parts "
                 "from the parts' tables.", data, shown)


def _text(frame: pd.DataFrame, col: str) -> pd.Series:
    """A text column, '' where absent (stores written before the column existed)."""
    if col not in frame:
        return pd.Series([""] * len(frame), index=frame.index, dtype=str)
    return frame[col].fillna("").astype(str).replace("nan", "")


def _floats(frame: pd.DataFrame, col: str) -> pd.Series:
    if col not in frame:
        return pd.Series(np.nan, index=frame.index, dtype=float)
    return pd.to_numeric(frame[col], errors="coerce").astype(float)


def _power_text(kind: str, power: float, at: float, margin: float, stage: float = 0.0, model: str = "") -> str:
    words = power_words(kind, power, at, margin, sequential=bool(np.isfinite(stage) and stage > 0),
                        share=model == "sign_test")
    return words.removeprefix("power: ").removeprefix("power ")


def claims_display(frame: pd.DataFrame) -> pd.DataFrame:
    """The claims table as the page shows it: verdict and reason, the test, power at its effect,
    the cross-check, and (when any claim has them) variance components, dropped data and the
    GLMM's text."""
    shown = pd.DataFrame({
        "claim": frame["claim"],
        "statement": frame["statement"],
        "verdict": frame["verdict"],
        "reason": reason_texts(frame),
        "estimate [95% CI]": claim_texts(frame),
        "model": _text(frame, "model"),
        "test": frame["test"],
        "p": [fmt_p(p) for p in frame["p"]],
        "p (Holm)": [fmt_p(p) for p in frame["p_adjusted"]],
        "power at effect": [_power_text(k, p, a, m, st, md) for k, p, a, m, st, md in zip(
            frame["kind"], frame["power"], _floats(frame, "power_at"), _floats(frame, "margin"),
            _floats(frame, "sequential_stage").fillna(0.0), _text(frame, "model"), strict=True)],
        "MDE": [fmt(m, 3) for m in frame["mde"]],
        "seeds": [str(int(n)) if np.isfinite(n) else "–" for n in frame["n_seeds"]],
    }, index=frame.index)
    if (_text(frame, "model") == "").all():
        shown = shown.drop(columns=["model"])
    cross = _text(frame, "crosscheck_model")
    if (cross != "").any():
        verdicts = _text(frame, "crosscheck_verdict")
        disagree = frame["disagreement"].astype(bool) if "disagreement" in frame else pd.Series(False, index=frame.index)
        shown["cross-check"] = cross.replace("", "–")
        shown["cross-check [95% CI]"] = claim_texts(frame, prefix="crosscheck_")
        shown["cross-check p"] = [fmt_p(p) for p in _floats(frame, "crosscheck_p")]
        shown["cross-check verdict"] = [f"{DISAGREES}: {v}" if d else (v or "–")
                                        for v, d in zip(verdicts, disagree, strict=True)]
    for col, head in (("sd_seed", "SD seed"), ("sd_model", "SD model"), ("sd_sequence", "SD sequence")):
        values = _floats(frame, col)
        if np.isfinite(values).any():
            shown[head] = [fmt(v, 3) for v in values]
    for col, head in (("dropped", "dropped"), ("variance", "variance")):
        values = _text(frame, col)
        if (values != "").any():
            shown[head] = values.replace("", "–")
    return shown.reset_index(drop=True)


def claim_metrics(experiment: dict | None, stored=None) -> dict[str, str]:
    """Claim id -> the metric it reads: from the stored claims result's ``metric`` variable
    (``stored``, written since the claims record it), else from the experiment's ``claims``
    tables (the default, ``accuracy``, where a table does not say). Without either, a report
    built by ``layerstate report STORE`` could not bound an accuracy claim's interval."""
    out = {}
    for c in (experiment or {}).get("claims") or []:
        if isinstance(c, dict) and c.get("id"):
            out[str(c["id"])] = str(c.get("metric") or "accuracy")
    if stored is not None and "metric" in stored:
        out.update(zip(map(str, stored["claim"].values), map(str, stored["metric"].values), strict=True))
    return out


def claim_range(kind: str, metric: str | None) -> tuple[float, float]:
    """What a claim's estimate can take: differences of accuracies [-1, 1], probe accuracy
    [0, 1], a profile's difference of shape distances [-1, 1]; a bound claim's estimate is the metric itself
    (accuracies and probe stability's overlaps [0, 1], ablation drops and refitted accuracies above chance [-1, 1], patching
    recovery unbounded); restoration and drop differences, and comparisons whose metric is
    not known (no experiment given), are not bounded."""
    if trait(kind, "per_arch"):
        return RANGES["shape_difference"]
    if trait(kind, "reads_probes"):
        return RANGES["probe_accuracy"]
    if trait(kind, "thresholded"):
        if metric in ("accuracy", "probe_accuracy", "probe_stability"):
            return RANGES["accuracy"]
        if metric in ("ablation_drop", "refit_accuracy"):
            return RANGES["drop"]
        return RANGES["recovery"]
    if metric in ("accuracy", "probe_accuracy", "refit_accuracy", "probe_stability"):
        return RANGES["accuracy_difference"]
    return RANGES["restoration_difference"]


def claims_frame(ds, metrics: dict[str, str] | None = None) -> pd.DataFrame:
    """The claims Dataset (dim ``claim``) as one row per claim, plus the reference value,
    with the interval rules applied (:mod:`reports.intervals`).

    ``metrics`` maps claim ids to the metric each reads (:func:`claim_metrics`); a
    ``metric`` variable in the Dataset is used where present.
    """
    frame = ds.to_dataframe().reset_index()
    for col in ("statement", "kind", "test", "verdict", "claim", "reason", "outcome", "model",
                "crosscheck_model", "crosscheck_verdict", "dropped", "variance"):
        if col in frame:
            frame[col] = frame[col].astype(str)
    ref = np.where(frame["kind"].map(lambda k: trait(k, "compares")), 0.0, np.nan)
    if "reference_mean" in frame:
        # readable_by and bound claims are judged against their threshold
        ref = np.where(frame["kind"].map(lambda k: trait(k, "thresholded")), frame["reference_mean"], ref)
    frame["reference"] = ref
    metrics = metrics or {}
    if "metric" in frame:
        known = frame["metric"].astype(str)
    else:
        known = pd.Series([metrics.get(c.split("[", 1)[0]) for c in frame["claim"]], index=frame.index)
    ranges = [claim_range(k, m) for k, m in zip(frame["kind"], known, strict=True)]
    low, high = [r[0] for r in ranges], [r[1] for r in ranges]
    # a claim's interval is the one its test used: shown from 2 seeds, as the CLI shows it
    frame = apply_rules(frame, low, high, t_based=(~frame["kind"].map(lambda k: trait(k, "per_arch")).astype(bool) & (frame.get("model", "") != "sign_test")).to_numpy(), min_seeds=2)
    for other in ("crosscheck",):  # a second model's interval of the same estimate: the same rules
        if {f"{other}_estimate", f"{other}_lower", f"{other}_upper"} <= set(frame.columns):
            frame = apply_rules(frame, low, high, value=f"{other}_estimate", lower=f"{other}_lower",
                                  upper=f"{other}_upper", note=f"{other}_interval_note",
                                  seed_values=None, min_seeds=2)
    first = ["claim", "statement", "kind", "verdict", "outcome", "reason", "estimate", "lower", "upper",
             "interval_note", "model", "test", "p", "p_adjusted", "power", "power_at", "mde", "n_seeds", "margin",
             "crosscheck_model", "crosscheck_estimate", "crosscheck_lower", "crosscheck_upper",
             "crosscheck_interval_note", "crosscheck_p", "crosscheck_verdict", "disagreement",
             "sd_seed", "sd_model", "sd_sequence", "variance", "dropped"]
    return frame[[c for c in first if c in frame] + [c for c in frame if c not in first]]


def reason_texts(frame: pd.DataFrame) -> list[str]:
    """Each claim's ``reason``, with the interval it quotes shown as the table shows it: an
    interval the rules of :mod:`reports.intervals` hide (too few seeds, spans the whole range)
    or clip is not quoted raw in the sentence beside it; '–' where there is no reason."""
    out = []
    for r, text, shown in zip(frame.itertuples(index=False), _text(frame, "reason"), claim_texts(frame), strict=True):
        note = str(getattr(r, "interval_note", "") or "")
        if note and " [" in shown:
            bracket = shown[shown.index(" [") + 1:].replace("\\", "\\\\")
            text = _RAW_INTERVAL.sub(f"95% interval {bracket}", text)
        out.append(text or "–")
    return out


_RAW_INTERVAL = re.compile(r"95% interval \[[^\]]*\]")


def claim_texts(frame: pd.DataFrame, prefix: str = "") -> list[str]:
    """Estimate and interval of each claim (signed for differences); ``prefix="crosscheck_"``
    gives the cross-check's (its interval went through the same rules, :func:`claims_frame`;
    without the two seeds' values, which only a paired t interval gives back)."""
    out = []
    for _, r in frame.iterrows():
        if prefix:
            est, lo, hi = (float(r.get(f"{prefix}{k}", np.nan)) for k in ("estimate", "lower", "upper"))
            note, seeds = str(r.get(f"{prefix}interval_note", "") or ""), None
            why = "no interval" if str(r.get(f"{prefix}model", "")) != "glmm" else "GLMM: estimate only"
        else:
            est, lo, hi = float(r.estimate), float(r.lower), float(r.upper)
            note, seeds = str(r.interval_note), (r.seed_a, r.seed_b)
            why = "permutation test: no interval" if trait(r.kind, "per_arch") else "no interval"
        text = interval_text(est, lo, hi, note, seeds, signed=trait(r.kind, "compares"),
                               why_none=why)
        if (not prefix and np.isfinite(lo) and np.isfinite(hi) and str(r.get("model", "")) != "sign_test"
                and not trait(r.kind, "per_arch")):  # a profile's interval is a seed bootstrap, not a t
            text += seeds_note(float(r.get("n_seeds", np.nan)))  # a t interval from 2 seeds: how wide
        if not prefix and str(r.get("model", "")) == "sign_test":  # the counts first, then the median seed
            head = share_words(float(r.get("beyond", np.nan)), float(r.get("n_seeds", np.nan)),
                               float(r.get("reference_mean", np.nan)), str(r.get("test", "")))
            text = f"{head} {text}" if head else text
        out.append(text)
    return out
