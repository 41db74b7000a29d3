"""The HTML report in a real browser: headless Chromium renders a non-blank page, logs no console
messages (no script errors, nothing fetched), and the inline table sorting works.

Skipped where Chromium is absent (CI installs it: `apt-get install -y chromium`).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from jetflow_bench.report.html import write_report
from tests.helpers.fixtures_runs import write_fixture_run

CHROMIUM = Path("/usr/bin/chromium")
pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason="Chromium not installed: apt-get install -y chromium")
# Appended to the page under test: click the summary's "tau" header and log whether τ is now ascending.
SORT_PROBE = """<script>
const head = document.querySelector("#summary-table-1 thead tr");
const col = Array.from(head.cells).findIndex((th) => th.textContent === "tau");
head.cells[col].click();
const taus = Array.from(document.querySelectorAll("#summary-table-1 tbody tr"), (r) => parseFloat(r.cells[col].dataset.sort));
console.log("SORT-PROBE " + (taus.length > 1 && taus.every((t, i) => i === 0 || taus[i - 1] <= t)));
</script>"""


def render_in_chromium(page: Path, screenshot: Path, tmp_path: Path) -> list[str]:
    """Screenshot `page` with headless Chromium; returns the console lines Chromium logged."""
    command = [
        str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
        "--hide-scrollbars", f"--user-data-dir={tmp_path / 'profile'}", f"--screenshot={screenshot}",
        "--window-size=1400,1800", "--enable-logging=stderr", "--v=0", page.resolve().as_uri(),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=180)
    assert screenshot.is_file(), f"Chromium wrote no screenshot (exit {done.returncode}): {done.stderr[-2000:]}"
    return [line for line in done.stderr.splitlines() if re.search(r"CONSOLE|Uncaught", line)]


def test_harness_sees_script_errors(tmp_path: Path) -> None:
    page = tmp_path / "broken.html"
    page.write_text("<!DOCTYPE html><html><body><p>x</p><script>throw new Error('kaboom')</script></body></html>")
    lines = render_in_chromium(page, tmp_path / "broken.png", tmp_path)
    assert any("Uncaught Error: kaboom" in line for line in lines)


def test_report_renders_without_console_errors_and_sorts(tmp_path: Path) -> None:
    run = write_fixture_run(tmp_path / "run", drafters=("jetflow", "dflash", "eagle", "ngram"))
    page = write_report([run], tmp_path / "report.html")
    page.write_text(page.read_text().replace("</body>", SORT_PROBE + "</body>"))
    screenshot = tmp_path / "report.png"
    lines = render_in_chromium(page, screenshot, tmp_path)
    errors = [line for line in lines if "SORT-PROBE" not in line]
    assert errors == []
    assert any('"SORT-PROBE true"' in line for line in lines), lines
    pixels = np.asarray(Image.open(screenshot).convert("RGB"))  # (H, W, 3)
    assert pixels.shape[0] >= 1800 and pixels.shape[1] >= 1400  # the whole window was captured
    colours, counts = np.unique(pixels.reshape(-1, 3), axis=0, return_counts=True)
    assert len(colours) > 50 and counts.max() / counts.sum() < 0.95  # text, tables and a figure, not blank
