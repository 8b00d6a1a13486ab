"""A small store with every kind of result a report shows, built with the real writers.

Two tasks x two architectures, three seeds on parity and two on dyck (``seeds_for``), as a
``make demo`` store has two: both kinds of cell, with an interval and with too few seeds for
one, are in one report (s3 can be added with ``tasks=``); hidden states
carry the label with a per-layer strength that reverses between tasks (LSTM readable only at
the last layer on parity/s3, the transformer early on dyck), so the probe figure has
something to show.
Probes and claims are computed by the real analysis functions; ablation, patching and
interchange results are synthetic Datasets in the layouts `analysis.interventions` writes
(they need trained models to compute for real).
"""

from __future__ import annotations

import numpy as np
import xarray as xr

from store import Store

TASKS = {"parity": 2, "s3": 6, "dyck": 3}
FULL_TASKS = ("parity", "dyck")
#: Seeds per task in the full store: dyck has too few for intervals.
SEEDS_FOR = {"dyck": (0, 1)}
ARCHS = ("lstm", "transformer")
SEEDS = (0, 1, 2)
LAYERS = ["embed", "L0", "L1", "L2"]
N_SEQ, LENGTH, OOD_LENGTH, N_FEAT = 32, 10, 14, 8
#: label strength per layer: (task kind, arch) -> profile
STRENGTH = {
    ("late", "lstm"): [0.0, 0.1, 0.2, 3.0],
    ("late", "transformer"): [0.0, 0.8, 1.6, 3.0],
    ("early", "lstm"): [0.0, 0.6, 1.4, 3.0],
    ("early", "transformer"): [0.2, 3.0, 3.0, 3.0],
}
ACCURACY = {"parity": {"lstm": 0.97, "transformer": 0.80}, "s3": {"lstm": 0.95, "transformer": 0.70},
            "dyck": {"lstm": 0.85, "transformer": 0.90}}


def _run_id(task: str, arch: str, seed: int) -> str:
    return f"{arch}-{task}-s{seed}"


def _write_run(st: Store, task: str, arch: str, seed: int, rng: np.random.Generator, lengths=(LENGTH, OOD_LENGTH)) -> str:
    rid = _run_id(task, arch, seed)
    n_cls = TASKS[task]
    st.add_run(rid, task=task, arch=arch, seed=seed, model_config={"d_model": N_FEAT, "n_layers": 3},
               task_config={"name": task, "n_classes": n_cls})
    st.update_run_attrs(rid, status="trained", n_parameters=1234 + 10 * seed,
                        metrics={"steps": 50, "train_seconds": 1.5 + seed},
                        train_config={"length": LENGTH, "steps": 50})
    profile = np.array(STRENGTH["early" if task == "dyck" else "late", arch])
    means = rng.standard_normal((n_cls, N_FEAT))
    for L in lengths:
        y = rng.integers(0, n_cls, size=(N_SEQ, L))
        noise = rng.standard_normal((N_SEQ, L, len(LAYERS), N_FEAT))
        hidden = noise + profile[None, None, :, None] * means[y][:, :, None, :]
        p = ACCURACY[task][arch] - (0.05 if L > LENGTH else 0.0) + rng.normal(0, 0.01)
        right = rng.random((N_SEQ, L)) < p
        pred = np.where(right, y, (y + 1) % n_cls)
        logits = np.eye(n_cls, dtype="float32")[pred] * 4
        tokens = rng.integers(0, 4, size=(N_SEQ, L))  # unrelated to the label: the control task stays low
        st.write_length(rid, L, hidden=hidden.astype("float32"), tokens=tokens, labels={"state": y}, logits=logits)
    return rid


def _site(run: str, layer: str, where: str) -> str:
    """A site description as the analyses write it."""
    from analysis.interventions._common import site_description

    return site_description(run.split("-")[0], layer, where)


def _sites(runs: list[str], where: str) -> list[list[str]]:
    return [[_site(r, y, where) for y in LAYERS] for r in runs]


def synthetic_ablation(runs: list[str], rng: np.random.Generator) -> xr.Dataset:
    """`results/ablation/<name>` layout: per-sequence hits before and after erasure."""
    settings = ["probe", "pca:2"]
    R, T, Y, S, N = len(runs), 2, len(LAYERS), len(settings), N_SEQ
    n_lab = np.full((R, T, N), float(LENGTH))
    clean = rng.binomial(LENGTH, 0.9, (R, T, Y, N)).astype(float)
    hit = np.clip(clean[:, :, :, None, :] - rng.binomial(LENGTH, 0.3, (R, T, Y, S, N)), 0, None)
    probe = rng.binomial(LENGTH, 0.6, (R, T, Y, S, N)).astype(float)
    ds = xr.Dataset(
        {
            "correct": (("run", "length", "layer", "setting", "sequence"), hit),
            "correct_clean": (("run", "length", "layer", "sequence"), clean),
            "probe_correct": (("run", "length", "layer", "setting", "sequence"), probe),
            "probe_correct_clean": (("run", "length", "layer", "sequence"), rng.binomial(LENGTH, 0.95, (R, T, Y, N)).astype(float)),
            "n_labelled": (("run", "length", "sequence"), n_lab),
            "chance": (("run", "length"), np.full((R, T), 0.5)),
        },
        coords={"run": runs, "length": [LENGTH, OOD_LENGTH], "layer": LAYERS, "setting": settings,
                "sequence": np.arange(N), "site": (("run", "layer"), _sites(runs, "every position"))},
        attrs={"analysis": "ablation", "mode": "zero", "fit_length": LENGTH, "fit_fraction": 0.5, "folds": 2},
    )
    total = ds.n_labelled.sum("sequence")
    ds["accuracy"] = ds.correct.sum("sequence") / total
    ds["accuracy_clean"] = ds.correct_clean.sum("sequence") / total
    ds["drop"] = ds.accuracy_clean - ds.accuracy
    return ds


def synthetic_patching(runs: list[str], rng: np.random.Generator) -> xr.Dataset:
    R, Y, P, N = len(runs), len(LAYERS), LENGTH, 16
    gap = rng.uniform(1, 2, (R, Y, N))
    share = np.linspace(0, 1, P)[None, None, :, None] * rng.uniform(0.5, 1, (R, Y, 1, 1))
    recovered = share * gap[:, :, None, :] + rng.normal(0, 0.05, (R, Y, P, N))
    ds = xr.Dataset(
        {"recovered": (("run", "layer", "position", "sequence"), recovered),
         "gap": (("run", "layer", "sequence"), gap)},
        coords={"run": runs, "layer": LAYERS, "position": np.arange(P), "sequence": np.arange(N),
                "patched_site": (("run", "layer"), _sites(runs, "one position at a time"))},
        attrs={"analysis": "patching", "length": LENGTH},
    )
    ds["recovery"] = ds.recovered.sum("sequence") / ds.gap.sum("sequence")
    return ds


def synthetic_interchange(runs: list[str], rng: np.random.Generator) -> xr.Dataset:
    sites = ["key", "value", "divider", "query"]
    R, Y, S, N = len(runs), len(LAYERS), len(sites), 16
    gap = rng.uniform(0.5, 0.9, (R, Y, N))
    level = np.array([0.1, 0.8, 0.05, 0.3])[None, None, :, None]
    restored = level * gap[:, :, None, :] + rng.normal(0, 0.02, (R, Y, S, N))
    ds = xr.Dataset(
        {"restored": (("run", "layer", "site", "sequence"), restored),
         "gap": (("run", "layer", "sequence"), gap),
         "p_clean": (("run", "layer", "sequence"), gap + 0.05),
         "p_corrupt": (("run", "layer", "sequence"), np.full((R, Y, N), 0.05)),
         "trivial": (("run", "site"), np.zeros((R, S), dtype=bool))},
        coords={"run": runs, "layer": LAYERS, "site": sites, "sequence": np.arange(N),
                "patched_site": (("run", "layer", "site"), [[[_site(r, y, f"position {s!r}") for s in sites]
                                                             for y in LAYERS] for r in runs])},
        attrs={"analysis": "interchange", "length": LENGTH},
    )
    ds["restoration"] = ds.restored.sum("sequence") / ds.gap.sum("sequence")
    return ds


CLAIMS = [
    {"id": "parity-lstm-beats-transformer", "statement": "On Parity the LSTM is more accurate than the Transformer",
     "kind": "difference", "task": "parity", "compare": "arch", "treatment": "lstm", "reference": "transformer",
     "direction": "greater", "length": LENGTH, "margin": 0.05},
    {"id": "dyck-equal", "statement": "On Dyck the LSTM and the Transformer are within ±20 pp",
     "kind": "equivalence", "task": "dyck", "compare": "arch", "treatment": "lstm", "reference": "transformer",
     "length": LENGTH, "margin": 0.2},
]


#: Values "a paper reported", for the paper comparison (the experiment's [[reference]] tables).
REFERENCES = [
    {"source": "Paper A (2026), Table 1", "metric": "claim", "claim": "parity-lstm-beats-transformer",
     "value": 17.0, "unit": "pp"},
    {"source": "Paper A (2026), Table 1", "metric": "claim", "claim": "parity-lstm-beats-transformer",
     "value": -50.0, "unit": "pp", "note": "a value far below ours"},
    {"source": "Paper B", "metric": "accuracy", "task": "parity", "arch": "lstm", "length": LENGTH, "value": 0.97},
    {"source": "Paper B", "metric": "probe_accuracy", "task": "parity", "arch": "lstm", "layer": "L2", "value": 0.99},
    {"source": "Paper B", "metric": "claim", "claim": "dyck-equal", "value": 0.0},
    {"source": "Paper C", "metric": "claim", "claim": "no-such-claim", "value": 0.1},
]


def experiment(**extra) -> dict:
    """The experiment dict the pipeline hands the report (``Experiment.model_dump(mode="json")``)."""
    return {"experiment": {"name": "unit", "title": "t"}, "claims": CLAIMS, "reference": REFERENCES, **extra}


def build_store(path, *, probes: bool = True, interventions: bool = True, claims: bool = True,
                tasks=FULL_TASKS, seeds=SEEDS, seeds_for: dict | None = None) -> Store:
    """The full demo store at ``path`` (real probes and claims; synthetic interventions);
    ``seeds_for`` gives some tasks other seeds than ``seeds``."""
    rng = np.random.default_rng(7)
    st = Store.create(str(path), title="Report test <store> & friends")
    with st.deferred_consolidation():  # one snapshot for every run, not one per write
        runs = [_write_run(st, task, arch, seed, rng) for task in tasks for arch in ARCHS
                for seed in (seeds_for or {}).get(task, seeds)]
    if probes:
        from analysis.probes import probe

        probe(st, "state", positions="pooled", folds=2, method="screen", scheduler="sync", save=True,
              train_length=LENGTH)
    if interventions:
        st.write_result("ablation/default", synthetic_ablation(runs, rng))
        st.write_result("patching/default", synthetic_patching(runs, rng))
        st.write_result("interchange/default", synthetic_interchange(runs, rng))
    if claims:  # the verdicts and their seed plan, as `layerstate stats` stores them
        from analysis.claims import evaluate_stored_claims, parse_claims

        evaluate_stored_claims(st, parse_claims(CLAIMS))
    return st
