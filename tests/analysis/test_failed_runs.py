"""A run that did not learn is named (issue 69, item 4): its accuracy's lower bound (sequences
resampled) at or below chance, the share of its majority class. The behaviour result keeps chance
and the bound per run; `inspect`, `run`'s behaviour stage, `layerstate behaviour` and the
report's behaviour section name the run; an untrained baseline (chance by construction) is not."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
from click.testing import CliRunner

from analysis.behaviour import behaviour_result, failed_runs, run_chance
from layerstate.cli import main
from layerstate.stages import _say_failed
from reports.behaviour import behaviour
from reports.snapshot import take_snapshot
from store import Store

L, N = 12, 48


def _store(path) -> Store:
    """Parity at length 12: a run that reads it from its logits, one whose logits are noise,
    an untrained baseline whose logits are noise too, and a run trained on length 6 whose
    logits are noise at 12 (it does not extrapolate: not a run that did not learn)."""
    st = Store.create(str(path))
    rng = np.random.default_rng(3)
    for seed, (rid, learned, extra) in enumerate([("parity-lstm-s0", True, {}),
                                                   ("parity-lstm-s1", False, {"train_config": {"length": 12}}),
                                                   ("parity-lstm-base", False, {"untrained": True}),
                                                   ("parity-lstm-s3", False, {"train_config": {"length": 6}})]):
        st.add_run(rid, task="parity", arch="lstm", seed=seed, **extra)
        tokens = rng.integers(0, 2, size=(N, L))
        parity = np.cumsum(tokens, axis=1) % 2
        logits = (np.eye(2)[parity] * 4 if learned else rng.standard_normal((N, L, 2))).astype("float32")
        st.write_length(rid, L, hidden=rng.standard_normal((N, L, 2, 4)).astype("float32"), tokens=tokens,
                        labels={"parity": parity}, logits=logits)
    return st


def test_chance_is_the_majority_share_and_the_bound_resamples_sequences():
    correct = np.array([[[6.0, 6.0, 6.0, 6.0]]])
    labelled = np.array([[[8.0, 8.0, 8.0, 8.0]]])
    majority = np.array([[[5.0, 5.0, 6.0, 4.0]]])
    chance, lower = run_chance(correct, labelled, majority)
    assert chance[0, 0] == 20 / 32
    assert lower[0, 0] == 0.75  # every sequence at 0.75: no resample moves it
    empty = np.full((1, 1, 4), np.nan)
    assert np.isnan(run_chance(empty, empty, empty)[0]).all()


def test_a_run_at_chance_is_named_everywhere_and_the_baseline_is_not(tmp_path):
    st = _store(tmp_path / "s.zarr")
    ds = behaviour_result(st, target="parity")
    assert 0.45 < float(ds.chance.sel(run="parity-lstm-s0", length=L)) < 0.55
    assert float(ds.run_lower.sel(run="parity-lstm-s0", length=L)) == 1.0  # reads it everywhere
    failed = failed_runs(ds, st)
    assert len(failed) == 2 and failed[0].startswith("parity-lstm-s1 did not learn: accuracy 0.")
    assert f"at length {L} (chance 0." in failed[0] and "; 95% lower bound 0." in failed[0]
    assert failed[1].startswith(f"parity-lstm-s3 is at chance at length {L} (trained at 6): accuracy 0.")
    assert len(failed_runs(ds)) == 3  # without the store, the baseline is not known as one

    measured = CliRunner().invoke(main, ["behaviour", str(tmp_path / "s.zarr")])  # stores it
    assert measured.exit_code == 0, measured.output
    assert failed[0] in measured.output.splitlines() and "parity-lstm-base did not" not in measured.output
    said: list[str] = []  # `run`'s behaviour stage, on the stored result
    _say_failed(SimpleNamespace(kind="behaviour"), st, "behaviour/parity", said.append)
    assert said == [f"behaviour/parity: {f}" for f in failed]
    out = CliRunner().invoke(main, ["inspect", str(tmp_path / "s.zarr")])
    assert out.exit_code == 0, out.output
    assert [ln for ln in out.output.splitlines() if ln.startswith("failed")] == [f"failed   {f}" for f in failed]
    notes = behaviour(take_snapshot(st)).notes
    assert any(n.startswith("Runs at chance") and all(f in n for f in failed) for n in notes), notes
    assert not any("parity-lstm-base did not learn" in n for n in notes)


def test_the_plan_says_how_much_of_its_request_comes_from_a_failed_seed(tmp_path):
    """Five LSTM seeds near 0.9 on parity, one of them (s2) at chance: a bound claim on the mean
    accuracy asks for more seeds with it than without it (the plan made again on the store
    without that run), and the line names the run, both counts, the difference, and what the
    same claim decided by the share of seeds beyond its threshold would ask for."""
    from analysis.behaviour import did_not_learn
    from analysis.claims.planner import failed_seed_notes, make_plan
    from analysis.claims.spec import make_claim

    st = learned_store(tmp_path / "p.zarr", failed=(2,))
    assert list(did_not_learn(st)) == ["parity-lstm-s2"]
    claim = make_claim(id="lstm-learns", statement="the LSTM learns parity", kind="bound", metric="accuracy",
                  task="parity", arch="lstm", threshold=0.8, direction="greater", statistic="mean", length=L)
    plan = make_plan(st, [claim])
    (line,) = failed_seed_notes(st, [claim], plan)
    with_it = plan.rows[0].needed
    assert line.startswith("lstm-learns: its cells hold 1 run that did not learn (parity-lstm-s2); "
                           f"with it it asks for {with_it} seeds, without "), line
    without = int(line.split("without ")[1].split(" seeds")[0])
    assert without < with_it and f": {with_it - without} of its seeds come from the failed run" in line
    assert "decided by the share of seeds beyond 0.8 (statistic = 'share'), robust to a failed seed, it would " \
           "ask for " in line


def learned_store(path, failed: tuple[int, ...] = ()) -> Store:
    """Five LSTM parity runs, right but for a few sequences (a different few per seed: accuracies
    0.9-0.96), the seeds in ``failed`` at chance (noise logits); their behaviour result stored."""
    from analysis.behaviour import store_behaviour

    st = Store.create(str(path))
    rng = np.random.default_rng(5)
    for seed in range(5):
        rid = f"parity-lstm-s{seed}"
        st.add_run(rid, task="parity", arch="lstm", seed=seed, train_config={"length": L}, train_seconds=2.0)
        tokens = rng.integers(0, 2, size=(N, L))
        parity = np.cumsum(tokens, axis=1) % 2
        if seed in failed:
            logits = rng.standard_normal((N, L, 2))
        else:
            wrong = rng.random(N) < 0.04 + 0.02 * seed
            logits = np.eye(2)[np.where(wrong[:, None], 1 - parity, parity)] * 4
        st.write_length(rid, L, hidden=rng.standard_normal((N, L, 2, 4)).astype("float32"), tokens=tokens,
                        labels={"parity": parity}, logits=logits.astype("float32"))
    store_behaviour(st, "parity", target="parity")
    return st
