"""Reports: a store's results as a page a researcher can read and trust.

Every number comes with its interval; a section whose results are missing names the command
that produces them. Nothing in layerstate imports this package (the command line calls it)::

    from reports import build_report
    build_report(Store.open("acts.zarr"), "report/")   # -> report/index.html

Modules: :mod:`.build` (the public function and the output folder), :mod:`.sections`
(provenance, behaviour, claims), :mod:`.readout` (probe profiles), :mod:`.interventions`
(ablation, patching, interchange), :mod:`.numbers` (intervals and number formatting),
:mod:`.figures` (matplotlib, headless), :mod:`.render` and ``templates/`` (Jinja2).
"""

from reports.build import build_report

__all__ = ["build_report"]
