"""An analysis added from outside the packages (docs/guide/extending.md): one registration,
then scheduled by ``run``'s work list (asked for, or read by a claim), computed and stored by
its stage, and read by a claim like any metric."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pytest
import xarray as xr
from click.testing import CliRunner
from pydantic import BaseModel
from scipy import stats

import analysis.registry as registry
from analysis.claims import evaluate_claims, parse_claims
from analysis.registry import Analysis, Metric, register_analysis
from layerstate.cli import main
from layerstate.experiment import parse_experiment
from layerstate.stages import analysis_of
from layerstate.work import work_list
from reports.added import added
from reports.snapshot import take_snapshot


class NormParams(BaseModel):
    length: int = 12


def activation_norms(store: Any, task: str, runs: Sequence[str], params: Mapping[str, Any]) -> xr.Dataset:
    """The mean L2 norm of each layer's activations, per run, at one length."""
    L = int(params["length"])
    norms = [np.linalg.norm(store.open_length(r, L).hidden.values.astype(float), axis=-1).mean(axis=(0, 1))
             for r in runs]
    layers = [str(v) for v in store.open_length(runs[0], L).layer.values]
    return xr.Dataset({"norm": (("run", "layer"), np.array(norms))},
                      coords={"run": list(runs), "layer": layers}, attrs={"length": L})


NORMS = Analysis("act_norm", "mean activation norm per layer", compute=activation_norms, params=NormParams,
                 metrics=(Metric("mean_norm", "act_norm", (0.0, np.inf), values=lambda ds, claim: ds["norm"],
                                 layered=True),))


@pytest.fixture
def norms(monkeypatch):
    """The registry with the new analysis, restored afterwards."""
    monkeypatch.setattr(registry, "_ANALYSES", dict(registry._ANALYSES))
    register_analysis(NORMS)
    return NORMS


TOML = """
[experiment]
name = "norms"
[grid]
tasks = ["parity"]
archs = ["lstm"]
seeds = [0, 1, 2, 3, 4]
[train]
steps = 1
length = 12
[capture]
lengths = [12]
[analysis]
probe = false
{extra}
{claims}
"""

CLAIM = {"id": "norm", "statement": "L0's activations are not small", "kind": "bound", "task": "parity",
         "arch": "lstm", "metric": "mean_norm", "layer": "L0", "threshold": 0.5, "direction": "greater",
         "length": 12, "statistic": "mean"}


def _claims_toml() -> str:
    body = "\n".join(f"{k} = {json.dumps(v)}" for k, v in CLAIM.items())
    return "[[claims]]\n" + body


def test_run_schedules_it_when_asked_or_read(norms):
    import tomllib

    asked = parse_experiment(tomllib.loads(TOML.format(extra='extra = ["act_norm"]\n[analysis.params.act_norm]\n'
                                                       "length = 12", claims="")))
    units = {w.key: w for w in work_list(asked)}
    assert "act_norm/parity" in units and not units["act_norm/parity"].device
    assert all(k.startswith("capture") for k in units["act_norm/parity"].after)
    read = parse_experiment(tomllib.loads(TOML.format(extra="", claims=_claims_toml())))
    assert "act_norm/parity" in {w.key for w in work_list(read)}
    with pytest.raises(ValueError, match="unknown analysis 'act_nrom'"):
        parse_experiment(tomllib.loads(TOML.format(extra='extra = ["act_nrom"]', claims="")))


def test_its_stage_stores_it_and_a_claim_reads_it(norms, make_store):
    import tomllib

    st = make_store(runs=tuple(f"r{i}" for i in range(5)), n=32)
    exp = parse_experiment(tomllib.loads(TOML.format(extra='extra = ["act_norm"]', claims=_claims_toml())))
    unit = next(w for w in work_list(exp) if w.key == "act_norm/parity")
    unit = type(unit)(unit.stage, unit.key, kind=unit.kind, task=unit.task, runs=tuple(st.run_ids()))
    params, compute = analysis_of(unit, st, exp, None, None)
    assert params == {"length": 12}
    compute(params, {"analysis_params": "recorded"})
    stored = st.read_result("act_norm/parity")
    assert stored.norm.dims == ("run", "layer") and stored.attrs["analysis_params"] == "recorded"
    res = evaluate_claims(st, parse_claims([CLAIM]))
    row = res.sel(claim="norm")
    assert str(row.verdict.values) == "supported", str(row.reason.values)
    assert float(row.estimate) == pytest.approx(float(stored.norm.sel(layer="L0").mean()))
    assert str(row.result.values) == "act_norm/parity"
    # shown like a built-in's result: `layerstate show` and the report's part, every number with
    # its interval over the seeds (the cell's five runs)
    shown = CliRunner().invoke(main, ["show", str(st.location), "act_norm/parity"])
    assert shown.exit_code == 0, shown.output
    line = next(x for x in shown.output.splitlines() if x.startswith("norm  parity/lstm/default  layer L0: "))
    t = stats.t.ppf(0.975, 4) * stored.norm.sel(layer="L0").std(ddof=1) / np.sqrt(5)
    mean = float(stored.norm.sel(layer="L0").mean())
    assert line.endswith(f"{mean:.4g} [{mean - t:.4g}, {mean + t:.4g}] (5 seeds)"), line
    assert shown.output.startswith("results/act_norm/parity: mean activation norm per layer")
    assert "no result 'act_norm/dyck'" in CliRunner().invoke(main, ["show", str(st.location), "act_norm/dyck"]).output
    section = added(take_snapshot(st))
    assert section is not None and [p.title for p in section.parts] == ["act_norm/parity: mean activation norm per layer"]
    table = section.parts[0].tables[0]
    assert table.data.set_index(["variable", "layer"]).loc[("norm", "L0"), "estimate"] == pytest.approx(mean)
    assert list(table.shown()["layer"]) == ["embed", "L0", "L1"]
    assert table.shown()["mean [95% CI]"].iloc[1] == f"{mean:.3f} [{mean - t:.3f}, {mean + t:.3f}]"


def test_the_command_line_lists_it_with_the_built_ins(norms):
    res = CliRunner().invoke(main, ["analyses"])
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    mine = next(i for i, line in enumerate(lines) if line.startswith("act_norm "))
    assert "results/act_norm/<task>" in lines[mine] and "added" in lines[mine]
    assert lines[mine + 1].strip() == 'metric = "mean_norm", at a layer (layer = ...), in [0, inf]'
    assert any(line.strip().startswith('metric = "probe_accuracy"') for line in lines)
    assert lines[0].startswith("accuracy ")
