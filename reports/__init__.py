"""Reports: a store's results as a page a researcher can read and trust.

Every number comes with its interval; a section whose results are missing names the command
that produces them. Nothing in layerstate imports this package (the command line calls it)::

    from reports import build_report
    build_report(Store.open("acts.zarr"), "report/")   # -> report/index.html

The page opens with the findings (:mod:`.summary`) and ends with the appendix (experiment,
provenance). Modules: :mod:`.build` (the public function, section order, the output folder),
:mod:`.summary` (claims' verdicts, paper comparison, behaviour table, probe grid),
:mod:`.behaviour`, :mod:`.claims`, :mod:`.provenance` (the appendix), :mod:`.seeds` (the claims' seeds: the
sequential design, the seed plan), :mod:`.readout` (probe profiles),
:mod:`.interventions` (ablation, patching, interchange), :mod:`.intervals` (which intervals
are shown: metric ranges, too few seeds), :mod:`.references` (published values beside ours),
:mod:`.numbers` (intervals over seeds and number formatting), :mod:`.figures` (matplotlib,
headless), :mod:`.render` and ``templates/`` (Jinja2).
"""

from reports.build import build_report

__all__ = ["build_report"]
