"""`compare --format html` laid out by headless Chromium: at 16 and 104 groups (`--by gpu`), no text
overlaps other text and the page is no wider than the window; outliers are marked, not scaled to.

A fleet of 13 simulated hosts × 8 H100 (5 min at 30 s) is backfilled into the real influxd; some of
its GPUs idle at 0-1 % utilisation, so their energy per busy GPU-hour is tens of thousands of Wh
(issue 29, item 14). The layout check is a script added to a copy of the page (the report itself
has none) that writes its findings into the DOM, read back with `--dump-dom`.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from compare_helpers import sim_fleet_args

from gpuagent.compare.html_report import TOP_N, Bar, axis_top, bar_chart

pytestmark = pytest.mark.servers

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
WINDOW = (1280, 900)

# Every visible text box (clipped by its scrolling / overflow-hidden ancestors) against every other;
# the page's width against the window's; any box that scrolls sideways.
LAYOUT_CHECK = """
<script>
(function () {
  function clip(rect, el) {
    let r = {l: rect.left, t: rect.top, r: rect.right, b: rect.bottom};
    for (let a = el; a && a !== document.documentElement; a = a.parentElement) {
      const cs = getComputedStyle(a);
      if (cs.overflowX !== 'visible' || cs.overflowY !== 'visible') {
        const c = a.getBoundingClientRect();
        r = {l: Math.max(r.l, c.left), t: Math.max(r.t, c.top), r: Math.min(r.r, c.right), b: Math.min(r.b, c.bottom)};
      }
    }
    return r;
  }
  const boxes = [];
  const walk = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  let n;
  while ((n = walk.nextNode())) {
    const text = n.textContent.trim();
    if (!text) continue;
    const p = n.parentElement;
    let rects;
    if (p.closest('svg')) rects = [p.getBoundingClientRect()];
    else { const rg = document.createRange(); rg.selectNodeContents(n); rects = [...rg.getClientRects()]; }
    for (const rc of rects) {
      const r = clip(rc, p);
      if (r.r - r.l > 0.5 && r.b - r.t > 0.5) boxes.push({r: r, text: text.slice(0, 40)});
    }
  }
  boxes.sort((a, b) => a.r.l - b.r.l);
  const overlaps = [];
  for (let i = 0; i < boxes.length; i++) {
    for (let j = i + 1; j < boxes.length && boxes[j].r.l < boxes[i].r.r - 1; j++) {
      const a = boxes[i].r, b = boxes[j].r;
      if (Math.min(a.r, b.r) - Math.max(a.l, b.l) > 1 && Math.min(a.b, b.b) - Math.max(a.t, b.t) > 1)
        overlaps.push([boxes[i].text, boxes[j].text]);
    }
  }
  const scrollers = [];
  for (const el of document.querySelectorAll('body *')) {
    const cs = getComputedStyle(el);
    if ((cs.overflowX === 'auto' || cs.overflowX === 'scroll') && el.scrollWidth > el.clientWidth + 1)
      scrollers.push(el.tagName);
  }
  // A group's label stays on one line, in the tables (first cell of a row) and beside the bars.
  const wrapped = [];
  for (const el of document.querySelectorAll('tbody tr > :first-child, .bl')) {
    const rg = document.createRange(); rg.selectNodeContents(el);
    const lines = new Set([...rg.getClientRects()].map(r => Math.round(r.top)));
    if (lines.size > 1) wrapped.push(el.textContent.slice(0, 40));
  }
  const root = document.documentElement;
  const out = {page_width: root.scrollWidth, window_width: root.clientWidth, texts: boxes.length,
               overlaps: overlaps.slice(0, 20), overlap_count: overlaps.length, scrollers: scrollers,
               bars: document.querySelectorAll('.track').length, wrapped: wrapped};
  const pre = document.createElement('pre');
  pre.id = 'layout-check';
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
})();
</script>
"""


def _chromium(tmp_path: Path, page: Path, *mode: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            f"--user-data-dir={tmp_path / 'profile'}", f"--window-size={WINDOW[0]},{WINDOW[1]}",
            *mode, page.as_uri(),
        ],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def layout(tmp_path: Path, page: Path) -> dict:
    """The layout check's findings for `page` (a checked copy is laid out; a screenshot is kept beside it)."""
    checked = page.with_name(page.stem + "-checked.html")
    checked.write_text(page.read_text().replace("</body>", LAYOUT_CHECK + "</body>"))
    proc = _chromium(tmp_path, checked, "--dump-dom")
    assert proc.returncode == 0, proc.stderr[-2000:]
    found = re.search(r'<pre id="layout-check">(.*?)</pre>', proc.stdout, re.S)
    assert found, proc.stdout[-2000:]
    shot = page.with_suffix(".png")
    assert _chromium(tmp_path, page, f"--screenshot={shot}").returncode == 0
    assert shot.stat().st_size > 20_000
    return json.loads(
        found.group(1).replace("&quot;", '"').replace("&amp;", "&").replace("&lt;", "<").replace("&gt;", ">")
    )


@pytest.fixture(scope="module")
def big_fleet(influxdb_v1, cli):
    """13 hosts × 8 H100, 5 min at 30 s: (database, start_ns, end_ns)."""
    db = f"html_{uuid.uuid4().hex[:8]}"
    influxdb_v1.create_database(db)
    end_s = int(time.time()) // 60 * 60 - 120
    result = cli(*sim_fleet_args(influxdb_v1.url, db, hosts=13, duration_s=300, step_s=30, end_s=end_s, seed=3,
                                 specs=("h100-sxm:8",)))  # fmt: skip
    assert result.exit_code == 0, result.output
    yield db, (end_s - 300) * 10**9, end_s * 10**9 + 1
    influxdb_v1.drop_database(db)


def _epoch(ns: int) -> str:
    return f"{ns // 10**9}.{ns % 10**9:09d}"


def _html(cli, server, fleet, tmp_path, name, *extra) -> tuple[Path, dict]:
    db, start_ns, end_ns = fleet
    base = ["compare", "--url", server.url, "--database", db, "--by", "gpu",
            "--start", _epoch(start_ns), "--end", _epoch(end_ns), *extra]  # fmt: skip
    page = tmp_path / f"{name}.html"
    result = cli(*base, "--format", "html", "-o", str(page))
    assert result.exit_code == 0, result.output
    doc = json.loads(cli(*base, "--format", "json").stdout)
    return page, doc


@pytest.mark.parametrize("hosts", [2, 13])
def test_report_is_readable_at_16_and_104_groups(big_fleet, influxdb_v1, cli, tmp_path, hosts):
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian's chromium is not installed (apt-get install chromium)")
    where = ("--where", "host =~ /^sim-0[01]$/") if hosts == 2 else ()
    page, doc = _html(cli, influxdb_v1, big_fleet, tmp_path, f"gpus{hosts * 8}", *where)
    assert len(doc["groups"]) == hosts * 8
    found = layout(tmp_path, page)
    print(f"\n{hosts * 8} groups: {found['texts']} text boxes, {found['bars']} bars, page {found['page_width']} px")
    assert found["overlap_count"] == 0, found["overlaps"]
    assert found["page_width"] <= found["window_width"], found
    assert found["scrollers"] == [] and found["wrapped"] == []
    # 4 bar charts of one bar per group up to TOP_N, then TOP_N and a row for the rest
    assert found["bars"] == 4 * (len(doc["groups"]) if hosts == 2 else TOP_N + 1)
    text = page.read_text()
    # The range to the second, not to the nanosecond.
    assert not re.search(r"\d\d:\d\d:\d\d\.\d", text)
    assert "<script" not in text and "src=" not in text and 'href="http' not in text
    # The idle GPUs' energy per busy GPU-hour is marked off scale; the axis is set by the others.
    idle = [g for g in doc["groups"] if (g["energy_wh_per_busy_gpu_hour"] or 0) > 5000]
    busy = [g for g in doc["groups"] if (g["energy_wh_per_busy_gpu_hour"] or 1e9) < 1000]
    assert idle and busy
    assert "off scale" in text and f"{idle[0]['energy_wh_per_busy_gpu_hour']:,.0f} ▸" in text


def test_power_chart_puts_the_mean_and_the_p95_in_their_own_columns():
    bars = [Bar("a", 300.0, mark=400.0), Bar("b", 700.0, mark=700.0)]
    chart = bar_chart("Power", "W", bars, value_name="mean W", mark_name="p95 W")
    rows = re.findall(
        r'<span class="bl"[^>]*>([^<]*)</span><span class="track">(.*?)</span>'
        r'<span class="bv">([^<]*)</span><span class="bv mark">([^<]*)</span>',
        chart,
    )
    assert [(r[0], r[2], r[3]) for r in rows] == [("a", "300", "400"), ("b", "700", "700")]
    assert 'class="tick" style="left:57.14%"' in rows[0][1]  # the p95 tick at 400 of 700


def test_an_outlier_is_drawn_to_the_edge_and_marked_not_scaled_to():
    values = [520.0, 530.0, 610.0, 700.0, 27847.0]
    top, threshold = axis_top(values)
    assert top == pytest.approx(700 * 1.05) and 700 < threshold < 27847
    chart = bar_chart("Energy", "Wh", [Bar(f"g{i}", v) for i, v in enumerate(values)])
    widths = [float(w) for w in re.findall(r'class="seg" style="left:0;width:([\d.]+)%', chart)]
    assert widths[-1] == 100 and min(widths[:-1]) > 65  # the others keep their length
    assert chart.count('class="break"') == 1 and "27,847 ▸" in chart and "off scale" in chart
    assert axis_top([400.0, 500.0, 700.0])[0] == 700  # no outlier: the axis ends at the largest


def test_beyond_top_n_the_highest_and_a_row_for_the_rest():
    bars = [Bar(f"g{i:03d}", float(i)) for i in range(100)]
    chart = bar_chart("Power", "W", bars)
    labels = re.findall(r'<span class="bl"[^>]*>([^<]*)</span>', chart)
    assert labels[:TOP_N] == [f"g{i:03d}" for i in range(99, 99 - TOP_N, -1)]
    assert labels[TOP_N:] == [f"the other {100 - TOP_N}"] and "0–79" in chart


def test_html_needs_nothing_beyond_the_base_install(big_fleet, influxdb_v1, tmp_path):
    """Issue 29, item 3: after the README's ./scripts/run.sh (no extras), --format html ended in
    ModuleNotFoundError: matplotlib. It is blocked here, as in a venv without it."""
    import sys

    db, start_ns, end_ns = big_fleet
    page = tmp_path / "plain.html"
    run = (
        "import sys; sys.modules['matplotlib'] = None; sys.argv[0] = 'gpuagent'; from gpuagent.cli import main; main()"
    )
    proc = subprocess.run(
        [sys.executable, "-c", run, "compare", "--url", influxdb_v1.url, "--database", db, "--by", "host",
         "--start", _epoch(start_ns), "--end", _epoch(end_ns), "--format", "html", "-o", str(page)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr and page.read_text().count('<span class="track">') == 4 * 13
