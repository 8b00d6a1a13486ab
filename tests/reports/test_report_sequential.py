"""The claims' seeds in the report: the sequential design's section (stages, decisions, a figure per
claim) from a stored ``sequential`` result, and the seed planner's table whenever the experiment
declares claims; neither breaks the report, and no number is written 'nan'."""

from __future__ import annotations

import json
import re
from html import unescape

import numpy as np
import pandas as pd
import pytest
import xarray as xr

from reports import build_report
from store import Store
from tests.analysis.claims.test_claims import _write_run

NaN = np.nan
CLAIM_IDS = ["a-sup", "b-fut", "c-eq", "d-none"]
#: Per claim, per stage (3 stages at 3, 5, 7 seeds): decision, estimate, se, bound_low, bound_high.
LOOKS = {
    "a-sup": [("continue", 0.09, 0.03, 0.20, NaN), ("supported", 0.11, 0.02, 0.10, NaN), ("", NaN, NaN, NaN, NaN)],
    "b-fut": [("continue", 0.01, 0.04, -0.30, 0.30), ("futility", 0.00, 0.03, -0.12, 0.12),
              ("", NaN, NaN, NaN, NaN)],
    # within 0 +- 0.05: at the first stage the two one-sided boundaries cross (sorted, as stored)
    "c-eq": [("continue", 0.01, 0.05, -0.08, 0.08), ("continue", 0.00, 0.02, -0.01, 0.01),
             ("inconclusive", 0.02, 0.015, -0.02, 0.02)],
    "d-none": [("continue", NaN, NaN, NaN, NaN), ("continue", NaN, NaN, NaN, NaN),
               ("inconclusive", NaN, NaN, NaN, NaN)],
}
TESTS = ["greater than 0.05", "different from 0", "within 0 +- 0.05", "less than 0.9"]
DESIGN = {"first_seeds": 3, "stage_seeds": 2, "max_seeds": 7, "spending": "obrien-fleming",
          "futility": "conditional-power", "futility_power": 0.1, "alpha": 0.05, "max_seeds_by_arch": {}}


def sequential_result() -> xr.Dataset:
    """A 3-stage design over 4 claims in the schema ``layerstate run`` stores as ``sequential``."""
    K, J = 3, len(CLAIM_IDS)
    num = {v: np.full((K, J), NaN) for v in ("estimate", "se", "df", "level", "critical", "bound_low",
                                            "bound_high", "rci_low", "rci_high", "conditional_power")}
    decision = np.full((K, J), "", dtype=object)
    seeds = [3, 5, 7]
    for j, cid in enumerate(CLAIM_IDS):
        for k, (dec, est, se, lo, hi) in enumerate(LOOKS[cid]):
            decision[k, j] = dec
            if not dec or not np.isfinite(est):
                continue
            crit = 4.0 - k
            num["estimate"][k, j], num["se"][k, j], num["df"][k, j] = est, se, seeds[k] - 1
            num["level"][k, j], num["critical"][k, j] = 0.0125, crit
            num["bound_low"][k, j], num["bound_high"][k, j] = lo, hi
            num["rci_low"][k, j], num["rci_high"][k, j] = est - crit * se, est + crit * se
            num["conditional_power"][k, j] = 0.05 if dec == "futility" else 0.6
    data: dict[str, tuple] = {v: (("stage", "claim"), a) for v, a in num.items()}
    data["decision"] = (("stage", "claim"), decision.astype(str))
    data["final"] = (("claim",), np.array(["supported", "futility", "inconclusive", "inconclusive"], dtype=str))
    data["decided_at"] = (("claim",), np.array([2, 2, 3, 3], dtype=int))
    data["test"] = (("claim",), np.array(TESTS, dtype=str))
    data["max_seeds"] = (("claim",), np.array([7, 7, 7, 7], dtype=int))
    data["seeds"] = (("stage",), np.array(seeds, dtype=int))
    data["cells_next"] = (("stage",), np.array(["parity/lstm/default, parity/gru/default", "parity/gru/default", ""],
                                               dtype=str))
    data["runs_added"] = (("stage",), np.array([6, 4, 2], dtype=int))
    data["cpu_seconds"] = (("stage",), np.array([60.0, 40.5, NaN]))
    return xr.Dataset(data, coords={"stage": np.arange(1, K + 1), "claim": np.array(CLAIM_IDS, dtype=str)},
                      attrs={"design": json.dumps(DESIGN),
                             "fixed": json.dumps({"prof": "a profile_match claim is an exact permutation test: "
                                                          "evaluated at the maximum seeds"})})


def _text(html: str) -> str:
    return re.sub(r"<[^>]+>", " ", html)  # tags (and the embedded images in them) left out


def _no_nan(folder) -> None:
    for text in (_text((folder / "index.html").read_text()), (folder / "report.md").read_text(),
                 (folder / "report.json").read_text()):
        assert not re.search(r"\bnan\b", text, re.IGNORECASE)


def _table(html: str, name: str) -> list[list[str]]:
    start = html.index(f'<table id="table-{name}"')
    body = html[start: html.index("</table>", start)]
    rows = [[re.sub(r"\s+", " ", _text(c)).strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", row)]
            for row in re.findall(r"<tr>(.*?)</tr>", body, re.S)]
    return [r for r in rows if r]  # the header row has no <td>


@pytest.fixture(scope="module")
def sequential_report(tmp_path_factory):
    path = tmp_path_factory.mktemp("seq") / "s.zarr"
    st = Store.create(str(path), title="sequential")
    st.write_result("sequential", sequential_result())
    out = tmp_path_factory.mktemp("built") / "report"
    return out, build_report(st, out, check_chunks=False)


def _part(folder, key: str) -> dict | None:
    meta = json.loads((folder / "report.json").read_text())
    claims = next(s for s in meta["sections"] if s["key"] == "claims")
    return next((p for p in claims["parts"] if p["key"] == key), None)


def test_the_sequential_section_says_the_design_and_each_stage(sequential_report):
    folder, index = sequential_report
    part = _part(folder, "claims-sequential")
    assert part is not None and part["title"] == "Sequential design" and part["status"] == "ok"
    html = index.read_text()
    assert "2.1. Sequential design</h3>" in html
    found = re.search(r'<p class="intro">(Design: [^<]*)', html)
    assert found is not None
    design = unescape(found.group(1))
    assert "CPU time of the runs the stages added: 100 CPU s, without stage 3, whose runs record none." \
        in part["notes"]
    assert "3 seeds per cell at the first stage, then 2 more seeds a stage" in design
    assert "stages at 3, 5, 7 seeds per cell" in design and "O'Brien-Fleming-like" in design
    assert "conditional power of its test at its maximum seeds is below 0.1" in design
    assert any(n.startswith("prof: not decided sequentially") for n in part["notes"])
    stages = _table(html, "sequential_stages")
    assert stages[0] == ["1", "3", "6", "60", "none", "parity/lstm/default, parity/gru/default"]
    assert stages[1] == ["2", "5", "4", "40", "a-sup: supported; b-fut: futility", "parity/gru/default"]
    assert stages[2][:4] == ["3", "7", "2", "–"] and stages[2][-1] == "none"
    csv = pd.read_csv(folder / "tables" / "sequential_stages.csv")
    assert list(csv["runs_added"]) == [6, 4, 2] and csv["cpu_seconds"].iloc[1] == pytest.approx(40.5)


def test_each_claim_shows_its_decision_the_stage_and_its_look_there(sequential_report):
    folder, index = sequential_report
    rows = {r[0]: r for r in _table(index.read_text(), "sequential_claims")}
    # claim, test, decision, decided at stage, seeds, max seeds, estimate [RCI], boundary, level, cond. power
    a = rows["a-sup"]
    assert a[1:6] == ["greater than 0.05", "supported", "2", "5", "7"]
    assert a[6] == "0.110 [0.050, 0.170]" and a[7] == "≥ 0.100" and a[9] == "0.60"
    b = rows["b-fut"]
    assert b[2:5] == ["futility", "2", "5"] and b[7] == "≤ -0.120 or ≥ 0.120" and b[9] == "0.05"
    c = rows["c-eq"]
    assert c[2:5] == ["inconclusive", "3", "7"] and c[7] == "between -0.020 and 0.020"
    assert rows["d-none"][6] == "–" and rows["d-none"][7] == "–"
    csv = pd.read_csv(folder / "tables" / "sequential_claims.csv").set_index("claim")
    assert csv.loc["a-sup", "final"] == "supported" and csv.loc["a-sup", "decided_at"] == 2
    assert csv.loc["a-sup", "estimate"] == pytest.approx(0.11) and csv.loc["c-eq", "stage"] == 3
    looks = _table(index.read_text(), "sequential_looks")
    first_eq = next(r for r in looks if r[:2] == ["c-eq", "1"])
    assert first_eq[5].startswith("none at this stage")  # its boundaries cross at 3 seeds
    assert not any(r[0] == "a-sup" and r[1] == "3" for r in looks)  # decided: not looked at again


def test_one_figure_per_claim(sequential_report):
    folder, index = sequential_report
    part = _part(folder, "claims-sequential")
    assert part["figures"] == [f"figures/sequential_{c}.png" for c in CLAIM_IDS]
    for f in part["figures"]:
        assert (folder / f).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and (folder / f).with_suffix(".svg").is_file()
    html = index.read_text()
    assert html.count('alt="a-sup (greater than 0.05): estimate with its repeated 95% interval') == 1


def test_no_nan_is_written_and_no_plan_without_declared_claims(sequential_report):
    folder, _ = sequential_report
    _no_nan(folder)
    assert _part(folder, "claims-seeds") is None


def test_without_a_sequential_result_the_section_is_absent(tmp_path):
    st = Store.create(str(tmp_path / "s.zarr"))
    build_report(st, tmp_path / "r", check_chunks=False)
    assert _part(tmp_path / "r", "claims-sequential") is None
    assert "Sequential design" not in (tmp_path / "r" / "index.html").read_text()


# ---------------------------------------------------------------------- the seed planner
CLAIMS = [
    {"id": "s3-conv", "statement": "Removing Conv1D lowers S3 accuracy", "kind": "difference", "task": "s3",
     "arch": "mamba", "treatment": "no_conv", "reference": "default", "direction": "less", "margin": 0.05,
     "length": 12},
    {"id": "s3-high", "statement": "S3 accuracy above 0.8", "kind": "bound", "task": "s3", "arch": "mamba",
     "threshold": 0.8, "direction": "greater", "length": 12},
    {"id": "s3-any", "statement": "Removing Conv1D changes S3 accuracy", "kind": "difference", "task": "s3",
     "arch": "mamba", "treatment": "no_conv", "reference": "default", "length": 12},
]


@pytest.fixture(scope="module")
def plan_store(tmp_path_factory):
    """3 seeds; the conv costs 4 pp; a seed trains in 10 s with the conv and 30 s without, and its
    capture takes 2 s."""
    st = Store.create(str(tmp_path_factory.mktemp("plan") / "s.zarr"))
    rng = np.random.default_rng(2)
    with st.deferred_consolidation():
        for seed in range(3):
            offset = rng.normal(0, 0.03)
            for variant, drop, secs in (("default", 0.0, 10.0), ("no_conv", 0.04, 30.0)):
                rid = f"s3-{variant}-{seed}"
                _write_run(st, rid, "s3", variant, seed, 0.85 + offset - drop + rng.normal(0, 0.04), rng, n=60)
                st.update_run_attrs(rid, metrics={"train_seconds": secs}, capture_seconds=2.0,
                                    capture_seconds_by={"len_12": 2.0})
    return st


def test_the_seed_plan_is_the_planners_table(plan_store, tmp_path):
    from analysis.claims import evaluate_stored_claims, parse_claims
    from analysis.claims.planner import make_plan

    evaluate_stored_claims(plan_store, parse_claims(CLAIMS))  # stores the verdicts and their seed plan
    plan = make_plan(plan_store, parse_claims(CLAIMS))
    build_report(plan_store, tmp_path / "r", check_chunks=False, experiment={"claims": CLAIMS})
    folder = tmp_path / "r"
    part = _part(folder, "claims-seeds")
    assert part is not None and part["title"] == "Seeds: what deciding each claim would cost"
    html = (folder / "index.html").read_text()
    assert "Seeds: what deciding each claim would cost</h3>" in html
    rows = {r[0]: r for r in _table(html, "seed_plan")}
    for r in plan.rows:
        shown = rows[r.id]
        assert shown[1] == str(r.seeds) and shown[2] == f"{r.power_now:.2f}"
        assert shown[3] == str(r.needed) and shown[4] == str(r.more) and shown[5] == f"{r.cpu_s:.0f}"
    assert rows["s3-conv"][6].startswith("at its margin, at its Holm level")
    assert rows["s3-conv"][6].endswith("; route: a replication, its new seeds decided on their own")
    # a bound claim is decided by the exact sign test by default (docs/ceiling.md), so the planner
    # plans it at the share of seeds beyond its threshold, not at the mean's distance to it
    assert rows["s3-high"][6] == ("planned at the observed share of seeds beyond its threshold (exact sign test); "
                                  "route: a replication, its new seeds decided on their own")
    assert rows["s3-any"][1:6] == ["–"] * 5 and rows["s3-any"][6].startswith("not planned: no margin declared")
    cells = {r[0]: r for r in _table(html, "seed_plan_cells")}
    have, reach = plan.total["cells"][("s3", "mamba", "no_conv")]
    assert cells["s3/mamba/no_conv"] == ["s3/mamba/no_conv", str(have), str(reach), "32.0",
                                         f"{(reach - have) * 32.0:.0f}"]  # training + capture a seed
    assert reach - have == max(r.needed or 0 for c, r in zip(plan.claims, plan.rows, strict=True)
                               if ("s3", "mamba", "no_conv") in c.cells)  # new seeds, after those held
    assert f"Total: {plan.total['cpu_s']:.0f} CPU s" in " ".join(part["notes"])
    _no_nan(folder)


def test_a_store_without_a_stored_plan_says_how_to_make_one_and_computes_nothing(plan_store, tmp_path,
                                                                                 monkeypatch):
    import analysis.claims.planner

    def computed(*a, **kw):
        raise AssertionError("the report planned: it must only read the stored plan")

    monkeypatch.setattr(analysis.claims.planner, "make_plan", computed)
    if "seed_plan" in plan_store.results():
        plan_store.forget_result("seed_plan")
    build_report(plan_store, tmp_path / "r", check_chunks=False, experiment={"claims": CLAIMS})
    part = _part(tmp_path / "r", "claims-seeds")
    assert part is not None and part["status"] == "missing" and part["tables"] == []
    assert "No seed plan (results/seed_plan) is stored" in part["missing"]
    assert part["command"] == "layerstate stats STORE --claims CLAIMS.toml"
    html = (tmp_path / "r" / "index.html").read_text()
    assert "<code>layerstate stats STORE --claims CLAIMS.toml</code> computes it." in html


def test_stored_claims_without_an_experiment_get_the_seed_plan_part(plan_store, tmp_path):
    """A receiver's report: claims evaluated from a hand-written claims file, no experiment in the
    store; the seed plan is shown when stored, and its absence is said with the command."""
    from analysis.claims import evaluate_stored_claims, parse_claims

    evaluate_stored_claims(plan_store, parse_claims(CLAIMS))
    assert "experiment" not in plan_store.attrs
    build_report(plan_store, tmp_path / "with", check_chunks=False)
    part = _part(tmp_path / "with", "claims-seeds")
    assert part is not None and part["status"] == "ok" and part["tables"] == ["tables/seed_plan.csv",
                                                                            "tables/seed_plan_cells.csv"]
    plan_store.forget_result("seed_plan")
    build_report(plan_store, tmp_path / "without", check_chunks=False)
    part = _part(tmp_path / "without", "claims-seeds")
    assert part is not None and part["status"] == "missing" and "layerstate stats" in part["command"]
    plan_store.forget_result("claims")
    build_report(plan_store, tmp_path / "none", check_chunks=False)
    assert _part(tmp_path / "none", "claims-seeds") is None  # no claims declared anywhere: no part

def test_a_claims_figure_keeps_its_legend_inside():
    from reports.figures import legend_overflow, sequential_claim
    from reports.seeds import looks_frame

    looks = looks_frame(sequential_result(), {})
    fig = sequential_claim(looks[looks["claim"] == "c-eq"], "c-eq: inconclusive at stage 3 (7 seeds)", value=0.0)
    assert legend_overflow(fig) == []


@pytest.mark.parametrize("design_verdicts", [True, False])
def test_the_section_says_whether_the_claims_table_holds_the_designs_verdicts(tmp_path, design_verdicts):
    from reports import seeds
    from reports.snapshot import take_snapshot

    st = Store.create(str(tmp_path / "s.zarr"))
    st.write_result("sequential", sequential_result())
    claims = xr.Dataset({"verdict": ("claim", np.array(["supported"] * 4, dtype=str))},
                        coords={"claim": np.array(CLAIM_IDS, dtype=str)},
                        attrs={"sequential": "group-sequential design (3 -> 7 seeds)"} if design_verdicts else {})
    st.write_result("claims", claims)
    sec = seeds.sequential(take_snapshot(st))
    assert sec.intro.startswith("Design: 3 seeds per cell")
    said, other = (seeds.CLAIMS_HOLD_DESIGN, seeds.CLAIMS_HOLD_FIXED)[::1 if design_verdicts else -1]
    assert said in sec.intro and other not in sec.intro
