"""The HTML `python -m nbcompile run --html` writes shows everything with no network at all: the
reports, their split bars, the plotly figures and the panels (widget manager inline), in Chromium
with every request outside the page refused."""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys

import pytest

from nbcompile import runner

CHROMIUM = os.environ.get("CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
NOTEBOOKS = pathlib.Path(__file__).resolve().parents[1] / "notebooks"

pytestmark = [
    pytest.mark.browser,
    pytest.mark.kernel,  # `nbcompile run` executes the notebook in a kernel
    pytest.mark.slow,  # 01_quickstart compiles with Inductor
    pytest.mark.skipif(not pathlib.Path(CHROMIUM).exists(), reason="no Chromium (apt-get install chromium)"),
    pytest.mark.skipif(not runner.WIDGETS_EMBED.exists(),
                       reason=f"{runner.WIDGETS_EMBED} not built (the extension's npm build copies it)"),
]


def test_the_exported_page_renders_reports_figures_and_panels_offline(tmp_path):
    pytest.importorskip("playwright")
    from playwright.sync_api import sync_playwright

    out = tmp_path / "quickstart.html"
    done = subprocess.run([sys.executable, "-m", "nbcompile", "run", str(NOTEBOOKS / "01_quickstart.ipynb"),
                           "--html", str(out)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    html = out.read_text()
    assert "addWidgetsRenderer" not in html and 'src="https://cdn.plot.ly' not in html  # both loaders replaced
    refused: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})

            def route(r):
                if r.request.url.startswith("file://"):
                    return r.continue_()
                refused.append(r.request.url)
                return r.abort()

            page.route("**/*", route)
            page.goto(out.as_uri())
            page.wait_for_selector(".widget-toggle-buttons", timeout=60_000)  # a panel, from saved state
            page.wait_for_selector(".js-plotly-plot .main-svg", timeout=60_000)  # a plotly figure, drawn
            assert page.locator(".nbcompile-report").count() >= 1
            assert page.locator(".nbcompile-report .nbcompile-summary, .nbcompile-report p").count() >= 1
            assert "graph break" in page.inner_text(".nbcompile-report >> nth=0")
            assert page.locator(".nbcompile-bench, .js-plotly-plot").count() >= 1  # the speedup figure
            # inside the panel too: its Graph splits tab draws the split bar from the saved widget state
            assert page.locator(".jupyter-widgets .nbcompile-splits").count() >= 1
            buttons = page.locator(".widget-toggle-buttons button")
            assert buttons.count() >= 3 and "allow_in_graph" in buttons.all_inner_texts()
        finally:
            browser.close()
    assert not any("jupyter-widgets" in u or "plot.ly" in u for u in refused), refused
