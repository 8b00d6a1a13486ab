"""The work of an experiment, listed once: every unit, in order, with what it waits for.

:func:`work_list` turns an experiment into the units ``layerstate run`` does, in an order
in which each unit comes after everything it waits for::

    train <run>                       one per run of the grid
    capture <run> len_<L>             each captured length of the run, after its training
    capture <run> cf_<L>              then its counterfactual twins, one writer per run
    behaviour/<task>                  the readout's accuracy, after the captures of the task's runs
    probes/<task>                     after the captures of the task's runs
    mdl/<task>                        MDL probes ([analysis] mdl, or a claim reads them)
    stability/<task>                  after probes/<task> and behaviour/<task> ([analysis] stability, or a claim)
    pairs/<task>                      are the counterfactual twins there to patch?
    ablation/<task>, patching/<task>, interchange/<task>
    claims                            after every analysis
    report                            after the claims

The list says *what* and *after what*; :mod:`layerstate.executor` decides *where*: train
and capture units (:data:`WORKER_STAGES`) open the store themselves and may run in any
process (a pool's, a cluster worker's), the others run in the driver, handing their own
dask graphs to the scheduler. Units with ``device`` set use the compute device (the GPU,
with ``--device cuda``) while they run: training, capture, and the analyses that rerun the
runs' models (ablation, patching, interchange); the others (behaviour, probes, claims, the
report) read stored arrays on the CPU.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from analysis import registry
from capture.record import captures_of
from capture.tasks import TASKS

if TYPE_CHECKING:
    from capture.experiment import CapturePlan, RunSpec

#: The stages, in the order they run.
STAGES = ("train", "capture", "analyse", "claims", "report")
#: Stages whose units open the store themselves and may run in another process.
WORKER_STAGES = ("train", "capture")
#: Analyses that rerun the runs' models (rebuilt from their weights), on the command's device.
MODEL_ANALYSES = ("ablation", "patching", "interchange")


@dataclass(frozen=True)
class Work:
    """One unit of work.

    ``key`` names it (unique in its list); ``after`` holds the keys it waits for (only
    keys of the same list). ``run`` is the run a train or capture unit writes; ``kind`` is
    ``"len"`` or ``"cf"`` for a capture, the analysis (``"behaviour"``, ``"probes"``, ``"mdl"``,
    ``"stability"``, ``"pairs"``, ``"ablation"``, ``"patching"``, ``"interchange"``) for an analyse unit; ``task`` and
    ``runs`` are what an analysis reads. ``device``: the unit runs models, on the command's
    device (``--device``; :meth:`layerstate.executor.Executor.device_for`)."""

    stage: str
    key: str
    after: tuple[str, ...] = ()
    run: RunSpec | None = None
    kind: str = ""
    length: int | None = None
    task: str | None = None
    runs: tuple[str, ...] = ()
    device: bool = False

    @property
    def on_workers(self) -> bool:
        """Whether the unit may run in another process (it opens the store itself)."""
        return self.stage in WORKER_STAGES

    def __str__(self) -> str:
        return self.key


def work_list(exp: CapturePlan, *, stages: Sequence[str] = STAGES,
              runs: Sequence[RunSpec] | None = None) -> list[Work]:
    """The units of ``stages`` for the experiment ``exp``, in the order they run.

    ``exp``: an :class:`~layerstate.experiment.Experiment` (a plain
    :class:`~capture.experiment.CapturePlan` has only train and capture units). ``runs``:
    only these runs of the grid (default all). A unit waits only for units of the list: a
    capture listed without training waits for nothing (the run must be trained already).
    """
    unknown = [s for s in stages if s not in STAGES]
    if unknown:
        raise ValueError(f"unknown stages {unknown}; the stages are {', '.join(STAGES)}")

    specs = list(runs) if runs is not None else getattr(exp, "plan", exp).runs()  # capture's sections only
    work: list[Work] = []
    if "train" in stages:
        work += [Work("train", f"train {s.run_id}", run=s, device=True) for s in specs]
    captured: dict[str, list[str]] = {}  # run -> keys of its captures
    if "capture" in stages:
        for s in specs:
            before = f"train {s.run_id}" if "train" in stages else None
            for kind, length in captures_of(s):
                key = f"capture {s.run_id} {kind}_{length}"
                work.append(Work("capture", key, after=(before,) if before else (), run=s, kind=kind,
                                 length=length, device=True))
                captured.setdefault(s.run_id, []).append(key)
                before = key  # one writer per run at a time: its captures follow each other
    analyses: list[str] = []
    if "analyse" in stages and hasattr(exp, "analysis"):
        analysed = _analyses(exp, specs, captured)
        work += analysed
        analyses = [w.key for w in analysed]
    if "claims" in stages:
        work.append(Work("claims", "claims", after=tuple(analyses)))
    if "report" in stages:
        work.append(Work("report", "report", after=("claims",) if "claims" in stages else ()))
    return work


def _analyses(exp, specs: list[RunSpec], captured: dict[str, list[str]]) -> list[Work]:
    """The behaviour of every task (always), its probes, then each task's interventions: as
    configured, and whatever the experiment's claims read (:meth:`Claim.reads`), so a claim is
    never left without its results."""
    cfg = exp.analysis
    read = {c.reads() for c in getattr(exp, "claims", ())}
    by_task = {t: tuple(s.run_id for s in specs if s.task == t) for t in exp.grid.tasks}
    untrained = {s.run_id for s in specs if s.untrained}

    def unit(kind: str, task: str, length: int | None = None, *, then: tuple[str, ...] = ()) -> Work:
        runs = by_task[task]
        entry = registry.analysis(kind)
        models = kind in MODEL_ANALYSES or (entry is not None and entry.models)
        if models or kind == "pairs":  # an untrained baseline's readout is chance: nothing to intervene on
            runs = tuple(r for r in runs if r not in untrained)
        after = tuple(k for r in runs for k in captured.get(r, [])) + then
        return Work("analyse", f"{kind}/{task}", after=after, kind=kind, task=task, runs=runs,
                    length=length, device=models)

    stability = cfg.stability or "stability" in read  # read from the task's probe result
    out = [unit("behaviour", t) for t in by_task]
    out += [unit("probes", t) for t in by_task if cfg.probe or "probes" in read or stability]
    out += [unit("mdl", t) for t in by_task if cfg.mdl or "mdl" in read]
    # after behaviour too: the seeds that did not learn are left out of its intervals
    out += [unit("stability", t, then=(f"probes/{t}", f"behaviour/{t}")) for t in by_task if stability]
    for task in by_task:
        if cfg.patch or cfg.interchange:
            out.append(unit("pairs", task, cfg.patch_length))
        if cfg.ablate or "ablation" in read:
            out.append(unit("ablation", task))
        if cfg.patch:
            out.append(unit("patching", task, cfg.patch_length))
        if cfg.interchange and TASKS[task].interchange_sites:  # its pairs have sites to interchange
            out.append(unit("interchange", task, cfg.patch_length))
    for entry in registry.added():  # asked for, or read by a claim
        if entry.name in cfg.extra or entry.name in read:
            out += [unit(entry.name, t) for t in by_task]
    return out
