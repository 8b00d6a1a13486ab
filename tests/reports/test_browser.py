"""The report as a browser shows it: headless Chromium loads every image, logs no error, puts
the summary first, shows every figure unscaled at the page's width, finds every figure's
legend inside the figure (measured on the SVGs, with a cut-off legend as the control), and lays
the page out at 1400 and 400 px without sideways scrolling, each table once.

Chromium is Debian's ``chromium`` package (or ``LAYERSTATE_CHROMIUM``); without one every test
here is skipped, saying so. Each test is one Chromium run of a few seconds (marked slow). A
screenshot is kept under the test's tmp dir and copied to ``$LAYERSTATE_ARTIFACTS`` if set.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import numpy as np
import pytest

FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
#: Injected into a copy of the page only: the report itself carries no script.
CHECK_SCRIPT = """
<script>
window.__errors = [];
window.addEventListener('error', e => window.__errors.push(String(e.message || e.target.src || e.type)), true);
window.addEventListener('load', () => {
  const imgs = Array.from(document.images);
  document.body.dataset.nImages = imgs.length;
  document.body.dataset.imagesOk = imgs.every(i => i.complete && i.naturalWidth > 0) ? 'yes' : 'no';
  // shrunk below its pixel size, a figure's text is smaller than drawn
  document.body.dataset.shrunk = imgs.filter(i => i.getBoundingClientRect().width + 1.5 < i.naturalWidth).length;
  document.body.dataset.firstSection = document.querySelector('main > section').className;
  document.body.dataset.headings = Array.from(document.querySelectorAll('main h2')).map(h => h.id).join(' ');
  document.body.dataset.errors = window.__errors.join(' | ');
});
</script>
"""
#: Measures every legend of the inlined SVG figures against the figure's own box.
LEGEND_SCRIPT = """
<script>
window.addEventListener('load', () => {
  const over = [], seen = [];
  document.querySelectorAll('div.fig').forEach(div => {
    const svg = div.querySelector('svg'), vb = svg.viewBox.baseVal;
    svg.querySelectorAll('g[id^="legend"]').forEach(g => {
      const b = g.getBBox();
      seen.push(div.dataset.name);
      if (b.x < vb.x - 1 || b.y < vb.y - 1 || b.x + b.width > vb.x + vb.width + 1 ||
          b.y + b.height > vb.y + vb.height + 1) over.push(div.dataset.name);
    });
  });
  document.body.dataset.legends = seen.join(' ');
  document.body.dataset.overflow = over.join(' ');
});
</script>
"""


#: Where Chromium is looked for: ``$LAYERSTATE_CHROMIUM``, then these names on PATH.
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome")

pytestmark = pytest.mark.slow


@pytest.fixture(scope="session")
def chromium() -> str:
    """Path of a working chromium; the tests are skipped when there is none."""
    given = os.environ.get("LAYERSTATE_CHROMIUM")
    exe = given or next((p for p in map(shutil.which, CHROMIUM_NAMES) if p), None)
    if exe is None:
        pytest.skip(f"no chromium binary found ({', '.join(CHROMIUM_NAMES)} on PATH, or LAYERSTATE_CHROMIUM): "
                    "install Debian's chromium package to run the browser checks of the report")
    try:
        version = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=60, check=False)
    except OSError as exc:
        pytest.skip(f"chromium at {exe} does not start: {exc}")
    if version.returncode != 0:
        pytest.skip(f"chromium does not start: {version.stderr.strip()[-200:]}")
    return exe


def _run(exe: str, profile, *args: str, timeout: int = 120) -> subprocess.CompletedProcess:
    return subprocess.run([exe, *FLAGS, f"--user-data-dir={profile}", *args], capture_output=True,
                          text=True, timeout=timeout, check=False)


def test_report_loads_every_image_without_console_errors(full_report, chromium, tmp_path):
    folder, index = full_report
    site = tmp_path / "site"
    shutil.copytree(folder, site)
    page = site / "check.html"
    page.write_text(index.read_text().replace("</body>", CHECK_SCRIPT + "</body>"))
    res = _run(chromium, tmp_path / "profile", "--enable-logging=stderr", "--v=0", "--window-size=1280,2000",
               "--virtual-time-budget=10000", "--dump-dom", page.as_uri())
    assert res.returncode == 0, res.stderr[-2000:]
    body = re.search(r"<body[^>]*>", res.stdout).group(0)
    n_images = int(re.search(r'data-n-images="(\d+)"', body).group(1))
    assert n_images == index.read_text().count("<img ") and n_images >= 7
    assert 'data-images-ok="yes"' in body
    assert 'data-shrunk="0"' in body  # every figure fits the page's width at its own pixel size
    assert 'data-first-section="summary"' in body
    headings = re.search(r'data-headings="([^"]*)"', body).group(1).split()
    assert headings[0] == "summary" and headings[-1] == "provenance"
    assert 'data-errors=""' in body
    console = [line for line in res.stderr.splitlines() if "CONSOLE" in line or "Uncaught" in line]
    assert console == []


def test_no_legend_overflows_its_figure(full_report, chromium, tmp_path):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

    folder, _ = full_report
    svgs = {p.stem: p.read_text() for p in sorted((folder / "figures").glob("*.svg"))}
    # the control: a legend far wider than its figure, which the check must see
    control = Figure(figsize=(3, 2))
    FigureCanvasAgg(control)
    control.legend([Line2D([], [])] * 8, [f"architecture number {i}" for i in range(8)], loc="lower center", ncol=8)
    control.savefig(tmp_path / "control.svg", format="svg")
    svgs["control"] = (tmp_path / "control.svg").read_text()
    divs = "".join(f'<div class="fig" data-name="{name}">{text[text.index("<svg"):]}</div>'
                   for name, text in svgs.items())
    page = tmp_path / "legends.html"
    page.write_text(f"<!DOCTYPE html><html><body>{divs}{LEGEND_SCRIPT}</body></html>")
    res = _run(chromium, tmp_path / "profile", "--virtual-time-budget=10000", "--dump-dom", page.as_uri())
    assert res.returncode == 0, res.stderr[-2000:]
    body = re.search(r"<body[^>]*>", res.stdout).group(0)
    legends = set(re.search(r'data-legends="([^"]*)"', body).group(1).split())
    assert {"behaviour_accuracy", "probe_profiles", "claims_forest", "ablation_default_drop"} <= legends
    assert re.search(r'data-overflow="([^"]*)"', body).group(1).split() == ["control"]


def test_report_screenshot_is_readable(full_report, chromium, tmp_path):
    from PIL import Image

    _, index = full_report
    shot = tmp_path / "report.png"
    res = _run(chromium, tmp_path / "profile", f"--screenshot={shot}", "--window-size=1280,2000",
               "--hide-scrollbars", index.as_uri())
    assert res.returncode == 0 and shot.is_file(), res.stderr[-2000:]
    pixels = np.asarray(Image.open(shot).convert("L"))
    assert pixels.shape == (2000, 1280)
    assert 0.03 < (pixels < 200).mean() < 0.6   # text and tables drawn, not a blank or black page
    artifacts = os.environ.get("LAYERSTATE_ARTIFACTS")
    if artifacts:
        os.makedirs(artifacts, exist_ok=True)
        shutil.copy(shot, os.path.join(artifacts, "report-screenshot.png"))


#: Every table either fits its box or scrolls inside it, and no box reaches past the page's text
#: column; the control (a wide table in a box that does not scroll) must be caught.
TABLE_SCRIPT = """
<div style="overflow: hidden; width: 300px"><div class="table-wrap" style="overflow-x: visible">
<table id="table-control"><tr><td style="white-space: nowrap">""" + "a wide control cell " * 30 + """</td></tr></table>
</div></div>
<script>
window.addEventListener('load', () => {
  const main = document.querySelector('main').getBoundingClientRect(), bad = [], wide = [];
  document.querySelectorAll('.table-wrap').forEach(wrap => {
    const t = wrap.querySelector('table'), w = wrap.getBoundingClientRect(), tb = t.getBoundingClientRect();
    const scrolls = ['auto', 'scroll'].includes(getComputedStyle(wrap).overflowX);
    const name = t.id.replace('table-', '');
    if (tb.width > w.width + 1) wide.push(name);
    if (w.left < main.left - 1 || w.right > main.right + 1 || (tb.right > w.right + 1 && !scrolls)) bad.push(name);
  });
  document.body.dataset.wideTables = wide.join(' ');
  document.body.dataset.badTables = bad.join(' ');
  document.body.dataset.pageScrolls = document.documentElement.scrollWidth > window.innerWidth ? 'yes' : 'no';
});
</script>
"""


def test_claims_table_fits_or_scrolls_inside_its_box(full_report, chromium, tmp_path):
    folder, index = full_report
    site = tmp_path / "site"
    shutil.copytree(folder, site)
    page = site / "tables.html"
    page.write_text(index.read_text().replace("</main>", TABLE_SCRIPT + "</main>"))
    res = _run(chromium, tmp_path / "profile", "--window-size=1280,2000", "--virtual-time-budget=10000",
               "--dump-dom", page.as_uri())
    assert res.returncode == 0, res.stderr[-2000:]
    body = re.search(r"<body[^>]*>", res.stdout).group(0)
    assert re.search(r'data-bad-tables="([^"]*)"', body).group(1).split() == ["control"]
    # the full claims table (cross-checks, variance components) fits a wide screen now (issue 73 item 1)
    assert "claims" not in re.search(r'data-wide-tables="([^"]*)"', body).group(1).split()
    assert 'data-page-scrolls="no"' in body


#: Measures a report laid out in each iframe of the harness (at its own width): whether the page
#: scrolls sideways, each table box (scrolls, scrolls in its own box, lies inside the text column,
#: shows its last column), the tables' ids, the nav badges' heights, the intervention section's
#: missing-notes and the text of the numbered sections.
LAYOUT_SCRIPT = """
<script>
window.addEventListener('load', () => {
  const out = {};
  document.querySelectorAll('iframe').forEach(f => {
    const w = f.contentWindow, d = f.contentDocument, root = d.documentElement;
    const main = d.querySelector('main').getBoundingClientRect();
    const tables = Array.from(d.querySelectorAll('.table-wrap')).map(wrap => {
      const t = wrap.querySelector('table'), wr = wrap.getBoundingClientRect();
      const last = t.querySelector('thead th:last-child').getBoundingClientRect();
      return {name: t.id.slice(6), scrolls: wrap.scrollWidth > wrap.clientWidth + 1,
              own: ['auto', 'scroll'].includes(w.getComputedStyle(wrap).overflowX),
              inside: wr.left >= main.left - 1 && wr.right <= main.right + 1,
              last_visible: last.right <= wr.right + 1};
    });
    out[f.id] = {
      width: w.innerWidth, page_overflow: root.scrollWidth - root.clientWidth, tables,
      ids: Array.from(d.querySelectorAll('table')).map(t => t.id),
      badges: Array.from(d.querySelectorAll('nav .badge')).map(b => b.getBoundingClientRect().height),
      line: parseFloat(w.getComputedStyle(d.querySelector('nav li')).lineHeight),
      intervention_notes: d.querySelectorAll('section.interventions p.missing, section.interventions div.error').length,
      verdicts_cut: Array.from(d.querySelectorAll("td[class*='v-']")).filter(td => td.scrollWidth > td.clientWidth + 1 ||
        td.getBoundingClientRect().right > w.innerWidth + 1).map(td => td.textContent),
      n_verdicts: d.querySelectorAll("td[class*='v-']").length,
      summary_order: (() => { const s = d.querySelector('section.summary');
        return [s.querySelector('#table-summary_claims') ? 1 : 0, s.querySelector(':scope > ul.notes') ? 1 : 0,
                s.innerHTML.indexOf('table-summary_claims') < s.innerHTML.indexOf('<ul class="notes">')]; })(),
      text: Array.from(d.querySelectorAll('main > section:not(.appendix)')).map(s => s.innerText).join('\\n'),
    };
  });
  document.body.dataset.layout = JSON.stringify(out);
});
</script>
"""


def _layout(chromium, tmp_path, pages: dict[str, tuple[str, int]]) -> dict:
    """Each page (name -> (html, width)) in an iframe of that width, measured in one Chromium run."""
    import html as html_lib
    import json

    frames = "".join(f'<iframe id="{name}" style="width: {width}px; height: 900px; border: 0" '
                     f'srcdoc="{html_lib.escape(page, quote=True)}"></iframe>'
                     for name, (page, width) in pages.items())
    harness = tmp_path / "layout.html"
    harness.write_text(f"<!DOCTYPE html><html><body>{frames}{LAYOUT_SCRIPT}</body></html>")
    res = _run(chromium, tmp_path / "profile", "--window-size=1500,1000", "--virtual-time-budget=10000",
               "--dump-dom", harness.as_uri())
    assert res.returncode == 0, res.stderr[-2000:]
    found = re.search(r'data-layout="([^"]*)"', res.stdout)
    assert found, "the layout script did not run"
    return json.loads(html_lib.unescape(found.group(1)))


def test_the_page_fits_1400_and_400_px_and_shows_each_table_once(full_report, bare_store, chromium, tmp_path):
    import pandas as pd

    from reports import build_report

    folder, index = full_report
    bare = build_report(bare_store, tmp_path / "bare", check_chunks=False)
    page = index.read_text()
    got = _layout(chromium, tmp_path, {"wide": (page, 1400), "narrow": (page, 400),
                                       "bare": (bare.read_text(), 1400)})
    wide, narrow = got["wide"], got["narrow"]
    assert (wide["width"], narrow["width"]) == (1400, 400)
    for at in (wide, narrow, got["bare"]):
        assert at["page_overflow"] <= 0  # the page never scrolls sideways
        assert len(at["ids"]) == len(set(at["ids"]))  # each table once
        for t in at["tables"]:  # a box wider than its table scrolls inside itself, within the text column
            assert t["inside"] and (t["own"] or not t["scrolls"]), t
    # at 1400 px every table fits its box: the claims section's tests and the probe table's seeds
    # column included (the receiver found both cut off)
    assert [t["name"] for t in wide["tables"] if t["scrolls"] or not t["last_visible"]] == []
    assert {"claims", "probe_profiles", "summary_claims"} <= {t["name"] for t in wide["tables"]}
    # at 400 px the tables of sentences are one card per row, nothing to scroll and no verdict cut
    # ("inconclusive", not "inco"); numeric grids scroll in their own boxes (checked above) (issue 73 item 1)
    by_name = {t["name"]: t for t in narrow["tables"]}
    assert not by_name["claims"]["scrolls"] and not by_name["summary_claims"]["scrolls"]
    assert any(t["scrolls"] for t in narrow["tables"])
    for at in (wide, narrow):
        assert at["n_verdicts"] and at["verdicts_cut"] == []
    # the summary's verdicts come before its caveats
    assert narrow["summary_order"] == [1, 1, True]
    # a claim's statement and reason are shown once on the page, in the Summary's table
    claims = pd.read_csv(folder / "tables" / "summary_claims.csv")
    for text in [*claims["reason"], *claims["statement"]]:
        assert wide["text"].count(text) == 1, text
    # missing results: each nav badge one line high, the interventions one short note, not four boxes
    bare_at = got["bare"]
    assert max(bare_at["badges"]) <= bare_at["line"]
    assert bare_at["intervention_notes"] == 1
