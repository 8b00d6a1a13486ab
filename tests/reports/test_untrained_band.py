"""The probe figure shows an untrained baseline's band beside the trained one, and says what
it is: a run-recorded ``untrained`` variant, or an imported variant named ``untrained...``."""

from __future__ import annotations

import numpy as np

from reports import readout
from reports.snapshot import take_snapshot
from tests.analysis.claims.test_learned import _planted_store


def _profile_lines(fig):
    """(line style, y values) of the probe-accuracy lines with markers (not control/baseline)."""
    ax = fig.axes[0]
    return [(ln.get_linestyle(), np.asarray(ln.get_ydata(), float)) for ln in ax.get_lines()
            if ln.get_marker() not in ("", "None", None, "|")]


def test_the_probe_figure_draws_and_names_the_untrained_band(tmp_path):
    st = _planted_store(tmp_path / "s.zarr", untrained_reads=False)
    sec = readout.probes(take_snapshot(st))
    (fig,) = [f for f in sec.figures if f.name == "probe_profiles"]
    assert ("Untrained baseline, variant untrained (dashed, with markers, in the architecture's colour): the "
            "same architecture at initialisation (imported: as the store's runs were given)") in fig.caption
    assert "for parity/lstm" in fig.caption and "not a model's behaviour" in fig.caption
    lines = dict(_profile_lines(fig.figure))
    # trained solid line reads the label at L0 (index 1); the untrained dashed one does not
    assert lines["-"][1] > 0.95 and abs(lines["--"][1] - 0.5) < 0.1
    table = next(t for t in sec.tables if t.name == "probe_profiles")
    assert set(table.data["variant"]) == {"default", "untrained"}


def test_a_baseline_is_known_by_its_runs_flag_or_an_imported_variants_name(tmp_path):
    def baselines(name, flag):
        st = _planted_store(tmp_path / f"{name}{flag}.zarr", untrained_reads=True, baseline=name, flag=flag)
        frame = readout.profile_frame(readout.read_result(st, "probes/parity"), st, target="parity")
        return readout.untrained_variants(frame, st), readout.untrained_text(frame, st)

    # runs trained with train = false record untrained, whatever the variant is called
    names, text = baselines("init", True)
    assert names == ["init"] and "at initialisation with the same seeds (each the starting point" in text
    # an imported store records nothing: a variant named untrained... is the baseline, others not
    assert baselines("untrained", False)[0] == ["untrained"]
    assert baselines("init", False) == ([], "")
