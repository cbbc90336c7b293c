"""Real-browser tests: a real JupyterLab server and Debian's Chromium, driven by Playwright.

One notebook's story: run a `%%compile` cell whose helper prints, find the gutter marker on the
print line and hover it (a tooltip outside the gutter, with a GB link that opens), disable the
helper in the panel and see the break count and the marker change, save, reload the page with the
kernel still running and toggle again (the saved report output and the marker still follow), then
reopen the notebook on a server that offers no kernel and find the rendered report. Also: a failed
toggle in the panel, and the offline HTML export of `nbcompile run` opened with the network blocked.

Screenshots go to build/screenshots/ (test artifacts); with NBCOMPILE_DOCS_SCREENSHOTS=1 the ones
the README shows are written to docs/ too (and the export is of notebooks/01_quickstart.ipynb).
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
SHOTS = ROOT / "build" / "screenshots"
DOCS = ROOT / "docs"
DOCS_SHOTS = os.environ.get("NBCOMPILE_DOCS_SCREENSHOTS") == "1"
CHROMIUM = os.environ.get("CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
TOKEN = "nbcompile-browser-test"

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not pathlib.Path(CHROMIUM).exists(), reason="no Chromium (apt-get install chromium)"),
]
playwright_api = pytest.importorskip("playwright.sync_api")

CELL = (
    '%%compile --backend eager --run "outer(torch.ones(3))"\n'
    "import torch\n"
    "def helper(x):\n"
    '    print("in helper")\n'
    "    return x * 2\n"
    "def outer(x):\n"
    "    return helper(x.sin()).cos()"
)


# allow_in_graph on `scale` fails to compile (it raises on fake tensors): the panel keeps its last view
FAILING_ALLOW_CELL = (
    '%%compile --backend eager --run "model(torch.ones(3))"\n'
    "import torch\n"
    "W = torch.full((3,), 2.0)\n"
    "def scale(x):\n"
    '    if type(x).__name__ == "FakeTensor":\n'
    '        raise ValueError("boom")\n'
    "    return x * W\n"
    "def model(x):\n"
    "    y = scale(x.sin())\n"
    '    print("break")\n'
    "    return y + 1"
)


# f recompiles twice inside --run (static shapes): x.shape[0]: 2 -> 3, then 3 -> 4; the name x comes from line 3
RECOMPILE_CELL = (
    '%%compile --backend eager --no-dynamic --run "[f(torch.ones(n)) for n in (2, 3, 4)]"\n'
    "import torch\n"
    "def f(x):\n"
    "    return x.sin() * 2"
)


# Inductor, its FX graph cache off: the backend's stage takes seconds after Dynamo's view is drawn
STAGES_CELL = (
    '%%compile --run "outer(torch.randn(64, 64))"\n'
    "import torch\n"
    "torch._inductor.config.fx_graph_cache = False\n"
    "def helper(x):\n"
    '    print("in helper")\n'
    "    return torch.nn.functional.gelu(x @ x.T).softmax(-1)\n"
    "def outer(x):\n"
    "    return helper(x.sin()).cos() + x.tanh().sum(0)"
)


def _notebook(path: pathlib.Path, source: str = CELL) -> None:
    def cell(source: str) -> dict:
        return {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": source}

    path.write_text(json.dumps({
        "cells": [cell("%load_ext nbcompile"), cell(source)],
        "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
        "nbformat": 4, "nbformat_minor": 5,
    }))


def _shot(target, name: str, docs: bool = False, **kwargs) -> None:
    """A screenshot into build/screenshots/ (and docs/ when asked to refresh the README's)."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    target.screenshot(path=str(SHOTS / name), **kwargs)
    if docs and DOCS_SHOTS:
        shutil.copyfile(SHOTS / name, DOCS / name)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start_server(root: pathlib.Path, config_dir: pathlib.Path, log: str):
    port = _free_port()
    env = {**os.environ, "JUPYTER_CONFIG_DIR": str(config_dir), "JUPYTER_RUNTIME_DIR": str(root / ".runtime")}
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}",
         f"--IdentityProvider.token={TOKEN}", f"--ServerApp.root_dir={root}", "--LabApp.expose_app_in_browser=True",
         "--ServerApp.open_browser=False", "--allow-root"],
        env=env, stdout=open(root / log, "w"), stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.time() + 120
    while True:
        try:
            urllib.request.urlopen(f"{base}/api/status?token={TOKEN}", timeout=2)
            return server, base
        except OSError:
            if time.time() > deadline or server.poll() is not None:
                server.kill()
                pytest.fail("JupyterLab did not start: " + (root / log).read_text()[-2000:])
            time.sleep(0.5)


def _stop(server) -> None:
    server.terminate()
    try:
        server.wait(timeout=20)
    except subprocess.TimeoutExpired:
        server.kill()


def _settings(config_dir: pathlib.Path) -> None:
    news = config_dir / "lab" / "user-settings" / "@jupyterlab" / "apputils-extension"
    news.mkdir(parents=True)
    (news / "notification.jupyterlab-settings").write_text('{"fetchNews": "false", "checkForUpdates": false}')


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    root = tmp_path_factory.mktemp("lab")
    _notebook(root / "breaks.ipynb")
    _notebook(root / "failed_toggle.ipynb", FAILING_ALLOW_CELL)
    _notebook(root / "recompiles.ipynb", RECOMPILE_CELL)
    _notebook(root / "stages.ipynb", STAGES_CELL)
    config = root / ".jupyter"
    _settings(config)
    server, base = _start_server(root, config, "server.log")
    yield base, root
    _stop(server)


@pytest.fixture(scope="module")
def lab_without_kernels(lab):
    """A second server on the same files that offers no kernel at all."""
    _, root = lab
    config = root / ".jupyter-nokernel"
    _settings(config)
    (config / "jupyter_server_config.json").write_text(
        json.dumps({"KernelSpecManager": {"allowed_kernelspecs": ["no-such-kernel"]}}))
    server, base = _start_server(root, config, "server-nokernel.log")
    yield base
    _stop(server)


@pytest.fixture(scope="module")
def browser():
    with playwright_api.sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        yield chromium
        chromium.close()


def _open(browser, base: str, notebook: str, workspace: str):
    """A new page on `notebook`, in a JupyterLab workspace of its own (no other test's tabs restored)."""
    page = browser.new_page(viewport={"width": 1400, "height": 1100})
    page.set_default_timeout(120_000)
    page.goto(f"{base}/lab/workspaces/{workspace}/tree/{notebook}?token={TOKEN}")
    return page


def _command(page, command: str) -> None:
    page.evaluate(f"() => window.jupyterapp.commands.execute('{command}')")


def _wait_for_kernel(page) -> None:
    page.wait_for_selector(".jp-Notebook .jp-Cell")
    page.wait_for_function("() => window.jupyterapp && window.jupyterapp.shell.currentWidget"
                           " && window.jupyterapp.shell.currentWidget.sessionContext"
                           " && window.jupyterapp.shell.currentWidget.sessionContext.session")


def _save(page) -> None:
    """Save until the notebook stays clean: a report redrawn after a toggle (its fixes' proofs land on the
    event loop's next turn) may dirty it again right after a save."""
    for attempt in range(6):
        _command(page, "docmanager:save")
        try:
            page.wait_for_function("() => !window.jupyterapp.shell.currentWidget.context.model.dirty",
                                   timeout=20_000)
            return
        except playwright_api.TimeoutError:
            if attempt == 5:
                raise


def _kernels(base: str) -> list:
    with urllib.request.urlopen(f"{base}/api/kernels?token={TOKEN}") as response:
        return json.loads(response.read())


def _marker_lines(page) -> list[str]:
    return page.eval_on_selector_all(".nbcompile-marker-break", "els => els.map(e => e.dataset.line)")


def _wait_for_markers(page, lines: str) -> None:
    page.wait_for_function("lines => [...document.querySelectorAll('.nbcompile-marker-break')]"
                           ".map(e => e.dataset.line).join() === lines", arg=lines)


def _report_summary(page) -> str:
    return page.inner_text(".nbcompile-report .nbcompile-summary")


def _toggle(page, function: str, mode: str) -> None:
    row = page.locator(".widget-hbox", has=page.locator("code", has_text=function)).first
    row.get_by_role("button", name=mode, exact=True).click()


def _hover_the_marker_tooltip(page) -> None:
    """Hover the marker: a tooltip outside the gutter, in the viewport, whose GB link opens its page."""
    marker = page.locator(".nbcompile-marker-break").first
    marker.hover()
    tip = page.locator(".cm-tooltip.nbcompile-tip")
    tip.wait_for(state="visible")
    text = tip.inner_text()
    assert "Failed to trace builtin operator" in text and "%nbcompile set helper disable" in text
    box, view = tip.bounding_box(), page.viewport_size
    gutter = page.locator(".nbcompile-gutter").first.bounding_box()
    assert 0 <= box["x"] and box["x"] + box["width"] <= view["width"], (box, view)
    assert 0 <= box["y"] and box["y"] + box["height"] <= view["height"], (box, view)
    assert box["width"] > 5 * gutter["width"], (box, gutter)
    link = tip.locator("a[href]").first
    href = link.get_attribute("href")
    assert re.match(r"https://\S+/gb/gb\d{4}\.html$", href), href
    # nothing covers or clips it: the topmost element at the link's centre is the link
    assert page.evaluate("""a => { const r = a.getBoundingClientRect();
        return document.elementFromPoint(r.x + r.width / 2, r.y + r.height / 2) === a; }""", link.element_handle())
    link.hover()  # from the marker into the tooltip: it stays open
    page.wait_for_timeout(800)
    assert tip.is_visible()
    _shot(page, "gutter_tooltip.png", docs=True, clip=_around(page.locator(".jp-Cell").nth(1).bounding_box(), box))
    page.context.route(href, lambda route: route.fulfill(status=200, content_type="text/html", body="<h1>GB</h1>"))
    with page.expect_popup() as popup:
        link.click()
    assert popup.value.url == href
    popup.value.close()
    page.mouse.move(5, view["height"] - 5)  # away: it closes
    tip.wait_for(state="detached")


def _around(*boxes, pad: int = 8) -> dict:
    x0 = max(min(b["x"] for b in boxes) - pad, 0)
    y0 = max(min(b["y"] for b in boxes) - pad, 0)
    x1 = max(b["x"] + b["width"] for b in boxes) + pad
    y1 = max(b["y"] + b["height"] for b in boxes) + pad
    return {"x": x0, "y": y0, "width": x1 - x0, "height": y1 - y0}


def test_gutter_markers_panel_toggle_reload_and_report_without_a_kernel(lab, lab_without_kernels, browser):
    base, root = lab
    nokernel = lab_without_kernels
    page = _open(browser, base, "breaks.ipynb", "breaks")
    _wait_for_kernel(page)
    _command(page, "notebook:run-all-cells")

    # 1. the gutter marker on the print line (cell line 4); its tooltip with the reason and the GB link
    page.wait_for_selector(".nbcompile-marker-break", state="attached")
    assert _marker_lines(page) == ["4"]
    page.wait_for_selector("text=3 graphs, 2 breaks")
    _shot(page, "panel_and_gutter.png", full_page=True)
    _hover_the_marker_tooltip(page)

    # the snippet command: in the palette's registry, enabled for this cell, and on the cell toolbar
    command = page.evaluate("""() => {
        const c = window.jupyterapp.commands, id = 'nbcompile:copy-snippet';
        return [c.hasCommand(id), c.label(id), c.isEnabled(id)];
    }""")
    assert command == [True, "nbcompile: Copy annotation snippet", True]
    assert page.locator(".jp-cell-toolbar", has_text="nbcompile: Copy annotation snippet").count() >= 1

    # 2. the panel's toggle: disable the helper; the break count and the marker follow
    _toggle(page, "helper", "disable")
    page.wait_for_selector("text=2 graphs, 1 break")
    _wait_for_markers(page, "7")
    assert "2 graphs, 1 graph break," in _report_summary(page)
    _shot(page, "after_disable.png", full_page=True)

    # 3. save, reload the page (the kernel keeps running): the report output and the marker still
    # follow the panel, though the page no longer knows the output's transient display id
    _save(page)
    kernels = [k["id"] for k in _kernels(base)]
    page.reload()
    _wait_for_kernel(page)
    _wait_for_markers(page, "7")  # from the saved report
    _toggle(page, "helper", "compile")
    page.wait_for_selector("text=3 graphs, 2 breaks")  # the panel, live again from the kernel
    _wait_for_markers(page, "4")
    page.wait_for_function("() => document.querySelector('.nbcompile-report .nbcompile-summary')"
                           ".textContent.includes('3 graphs, 2 graph breaks,')")
    assert page.locator(".nbcompile-report").count() == 1  # replaced, not appended
    assert [k["id"] for k in _kernels(base)] == kernels  # the same kernel all along
    _save(page)
    page.close()
    saved = json.loads((root / "breaks.ipynb").read_text())
    mime = "application/vnd.nbcompile.report+json"
    (report,) = [o for o in saved["cells"][1]["outputs"] if mime in o.get("data", {})]
    assert report["data"]["application/vnd.nbcompile.report+json"]["break_count"] == 2
    assert report["metadata"]["application/vnd.nbcompile.report+json"]["display_id"].startswith("nbcompile-")

    # 4. reopen the saved notebook where no kernel can run: the report renders from the file
    page = _open(browser, nokernel, "breaks.ipynb", "nokernel")
    page.wait_for_selector(".nbcompile-report")
    assert "3 graphs, 2 graph breaks" in _report_summary(page)
    _wait_for_markers(page, "4")  # markers come back from the saved report
    assert _kernels(nokernel) == []  # rendered with no kernel running
    with urllib.request.urlopen(f"{nokernel}/api/kernelspecs?token={TOKEN}") as response:
        assert json.loads(response.read())["kernelspecs"] == {}
    no_kernel = page.locator(".jp-Dialog-button.jp-mod-reject")
    if no_kernel.count():
        no_kernel.click()  # JupyterLab asks which kernel to start; there is none to pick
    _shot(page, "reopened_report.png", full_page=True)
    page.close()


def test_a_failed_toggle_keeps_the_panel_and_shows_the_error(lab, browser):
    base, _ = lab
    page = _open(browser, base, "failed_toggle.ipynb", "failed")
    _wait_for_kernel(page)
    _command(page, "notebook:run-all-cells")
    page.wait_for_selector("text=2 graphs, 1 break")
    _wait_for_markers(page, "10")
    _toggle(page, "scale", "allow_in_graph")
    page.wait_for_selector(".nbcompile-status-errors:has-text('ValueError: boom')")  # the short error line
    panel = page.locator(".widget-vbox", has=page.locator("code", has_text="scale")).first
    status = panel.inner_text()
    assert "2 graphs, 1 break" in status and "ValueError: boom" in status  # the last good view, the error beside it
    row = page.locator(".widget-hbox", has=page.locator("code", has_text="scale")).first
    assert row.locator(".mod-active").inner_text() == "compile"  # the toggle went back
    assert "2 graphs, 1 graph break," in _report_summary(page)
    page.wait_for_selector(".nbcompile-report .nbcompile-notice:has-text('boom')")  # the kept report says so
    _wait_for_markers(page, "10")
    _shot(panel, "panel_failed_toggle.png", docs=True)
    page.close()


_WATCH_STAGES = """() => {
  window.__stages = [];
  const look = () => {
    for (const panel of document.querySelectorAll('.nbcompile-panel')) {
      const stage = panel.querySelector('.nbcompile-status-stage') ? 'dynamo' : 'complete';
      const line = panel.querySelector('.nbcompile-status-check');
      const check = line && /check ok/.test(line.textContent) ? '+check' : '';
      const counts = panel.querySelector('.nbcompile-counts');
      const state = stage + check;
      const last = window.__stages[window.__stages.length - 1];
      if (!last || last.state !== state) {
        window.__stages.push({ state, counts: counts ? counts.textContent : '', t: performance.now() });
      }
    }
  };
  new MutationObserver(look).observe(document.body, { subtree: true, childList: true, characterData: true });
}"""


def test_the_panel_shows_dynamos_view_before_the_kernels(lab, browser):
    base, _ = lab
    page = _open(browser, base, "stages.ipynb", "stages")
    _wait_for_kernel(page)
    page.evaluate(_WATCH_STAGES)
    _command(page, "notebook:run-all-cells")
    page.wait_for_function("() => window.__stages.some(s => s.state === 'complete+check')", timeout=300_000)
    stages = page.evaluate("() => window.__stages")
    assert stages[0]["state"] == "dynamo", stages  # graphs and breaks first, no check yet
    assert "3 graphs, 2 breaks" in stages[0]["counts"], stages
    done = next(s for s in stages if s["state"] == "complete+check")
    assert done["t"] > stages[0]["t"], stages
    assert "3 graphs, 2 breaks" in done["counts"], stages
    panel = page.locator(".nbcompile-panel").first
    assert "Dynamo's view" not in panel.inner_text()
    # a toggle: Dynamo's view of the new configuration first, then the kernels; back again at once
    page.evaluate("() => { window.__stages = []; }")
    _toggle(page, "helper", "disable")
    page.wait_for_function("() => window.__stages.some(s => s.state === 'complete+check'"
                           " && s.counts.includes('2 graphs, 1 break'))", timeout=300_000)
    stages = [s for s in page.evaluate("() => window.__stages") if "2 graphs, 1 break" in s["counts"]]
    assert stages[0]["state"] == "dynamo", stages  # the new configuration's first state drawn: Dynamo's view
    _toggle(page, "helper", "compile")  # back: kept, so the complete view at once, no first view
    page.wait_for_selector(".nbcompile-panel .nbcompile-counts:has-text('3 graphs, 2 breaks')")
    page.close()


def test_the_line_a_recompile_comes_from_has_its_own_marker(lab, browser):
    base, _ = lab
    page = _open(browser, base, "recompiles.ipynb", "recompiles")
    _wait_for_kernel(page)
    _command(page, "notebook:run-all-cells")
    page.wait_for_selector("text=2 recompiles")
    origin = page.locator(".nbcompile-marker-origin")
    origin.wait_for(state="attached")
    assert origin.evaluate("e => e.dataset.line") == "3" and origin.inner_text() == "◆"
    origin.hover()
    tip = page.locator(".cm-tooltip.nbcompile-tip")
    tip.wait_for(state="visible")
    text = tip.inner_text()
    assert "x.shape[0]: 2 → 3" in text and "x.shape[0]: 3 → 4" in text and "2 recompiles from this line" in text
    page.close()


def test_the_offline_html_export_renders_with_the_network_blocked(browser, tmp_path):
    """`nbcompile run --html` opened from disk with every network request refused: the report and its
    graph splits render from the file alone."""
    if DOCS_SHOTS:
        notebook, expect = ROOT / "notebooks" / "01_quickstart.ipynb", "2 graphs, 1 graph break"
    else:  # the tests' own small notebook: the same export path, a fraction of the time
        notebook, expect = tmp_path / "breaks.ipynb", "3 graphs, 2 graph breaks"
        _notebook(notebook)
    out = tmp_path / "export.html"
    done = subprocess.run([sys.executable, "-m", "nbcompile", "run", str(notebook), "--html", str(out)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    context = browser.new_context(viewport={"width": 1400, "height": 1100})
    blocked: list[str] = []

    def refuse(route):
        if route.request.url.startswith(("file:", "data:", "blob:")):
            route.continue_()
        else:
            blocked.append(route.request.url)
            route.abort()

    context.route("**/*", refuse)
    page = context.new_page()
    page.goto(out.as_uri(), wait_until="load")
    report = page.locator(".nbcompile-report").last
    report.wait_for(state="visible")
    assert expect in report.inner_text()
    assert page.locator(".nbcompile-report .nbcompile-splits div").count() >= 3  # graphs and breaks, in HTML
    # the %%compile cell at the top, its outputs under it
    page.locator(".jp-Cell", has_text="%%compile").first.evaluate("e => e.scrollIntoView()")
    _shot(page, "offline_export.png", docs=True)
    print("blocked:", sorted(set(blocked)))
    context.close()


def test_the_extension_is_installed_and_enabled():
    out = subprocess.run([sys.executable, "-m", "jupyterlab.labextensions", "list"], capture_output=True, text=True)
    listing = out.stdout + out.stderr
    line = next(text for text in listing.splitlines() if "nbcompile" in text)
    assert "enabled" in line and "OK" in line, listing
    installed = pathlib.Path(sys.prefix) / "share" / "jupyter" / "labextensions" / "nbcompile" / "package.json"
    assert json.loads(installed.read_text())["jupyterlab"]["_build"]["load"].startswith("static/remoteEntry.")
