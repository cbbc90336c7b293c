"""Screenshots of a training notebook in a real JupyterLab, for docs/ (issue 22).

Starts one JupyterLab server on a free port (on a copy of docs/training_tour.ipynb, so the committed
notebook keeps no outputs), opens the notebook in Debian's Chromium through Playwright, runs its cells
with the default backend (Inductor), and writes:

- docs/training_report.png: the rendered report of the ``%%compile`` cell;
- docs/training_gutter.png: the cell's editor with the graph-break marker on ``log_loss``'s print
  line hovered, its tooltip open;
- docs/training_panel.png: the panel after clicking ``disable`` next to ``log_loss`` (breaks down by
  the ones ``log_loss`` caused, the copies line above the functions).

The labextension served is the one last built into nbcompile/labextension (``cd labextension && npm
run build``), put first on JUPYTER_PATH so a stale copy in the venv's share/ does not hide it.
Usage: ``.venv/bin/python benchmarks/docs_screenshots.py [--out DIR]`` (needs Chromium and playwright,
as tests/test_browser.py does; takes a minute or two on a 2-core CPU, most of it Inductor).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import pathlib
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator

from playwright.sync_api import FloatRect, Locator, Page, sync_playwright

ROOT = pathlib.Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "docs" / "training_tour.ipynb"
BUILT_EXTENSION = ROOT / "nbcompile" / "labextension"
CHROMIUM = os.environ.get("CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
TOKEN = "nbcompile-docs-screenshots"
HELPER = "log_loss"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def start_server(root: pathlib.Path) -> tuple[subprocess.Popen[bytes], str]:
    config = root / ".jupyter"
    news = config / "lab" / "user-settings" / "@jupyterlab" / "apputils-extension"
    news.mkdir(parents=True)
    (news / "notification.jupyterlab-settings").write_text('{"fetchNews": "false", "checkForUpdates": false}')
    env = {**os.environ, "JUPYTER_CONFIG_DIR": str(config), "JUPYTER_RUNTIME_DIR": str(root / ".runtime")}
    if (BUILT_EXTENSION / "package.json").exists():  # the fresh build first, ahead of the venv's copy
        shared = root / ".share" / "labextensions"
        shared.mkdir(parents=True)
        (shared / "nbcompile").symlink_to(BUILT_EXTENSION)
        env["JUPYTER_PATH"] = os.pathsep.join(filter(None, [str(root / ".share"), os.environ.get("JUPYTER_PATH")]))
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}",
         f"--IdentityProvider.token={TOKEN}", f"--ServerApp.root_dir={root}", "--LabApp.expose_app_in_browser=True",
         "--ServerApp.open_browser=False", "--allow-root"],
        env=env, stdout=open(root / "server.log", "w"), stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.time() + 120
    while True:
        try:
            urllib.request.urlopen(f"{base}/api/status?token={TOKEN}", timeout=2)
            return server, base
        except OSError:
            if time.time() > deadline or server.poll() is not None:
                stop(server)
                raise SystemExit("JupyterLab did not start:\n" + (root / "server.log").read_text()[-2000:]) from None
            time.sleep(0.5)


@contextlib.contextmanager
def lab_page(root: pathlib.Path, notebook: str, workspace: str, height: int) -> Iterator[Page]:
    """JupyterLab serving ``root`` and Chromium with ``notebook`` open in it, its kernel started; both closed
    after."""
    server, base = start_server(root)
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
            try:
                page = browser.new_page(viewport={"width": 1400, "height": height})
                page.set_default_timeout(120_000)
                page.goto(f"{base}/lab/workspaces/{workspace}/tree/{notebook}?token={TOKEN}")
                page.wait_for_selector(".jp-Notebook .jp-Cell")
                page.wait_for_function("() => window.jupyterapp && window.jupyterapp.shell.currentWidget"
                                       " && window.jupyterapp.shell.currentWidget.sessionContext"
                                       " && window.jupyterapp.shell.currentWidget.sessionContext.session")
                yield page
            finally:
                browser.close()
    finally:
        stop(server)


def stop(server: subprocess.Popen[bytes]) -> None:
    server.terminate()
    try:
        server.wait(timeout=20)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()


def around(*found: FloatRect | None, pad: int = 8) -> FloatRect:
    """The rectangle around every box, with `pad` pixels to spare."""
    boxes = [b for b in found if b is not None]
    assert boxes, "nothing on screen to clip around"
    x0 = max(min(b["x"] for b in boxes) - pad, 0)
    y0 = max(min(b["y"] for b in boxes) - pad, 0)
    x1 = max(b["x"] + b["width"] for b in boxes) + pad
    y1 = max(b["y"] + b["height"] for b in boxes) + pad
    return {"x": x0, "y": y0, "width": x1 - x0, "height": y1 - y0}


def helper_row(page: Page) -> Locator:
    return page.locator(".nbcompile-panel .widget-hbox", has=page.locator("code", has_text=HELPER)).first


def print_line() -> int:
    """The cell line (1-based, the %%compile line included) of log_loss's print."""
    cells = json.loads(NOTEBOOK.read_text())["cells"]
    source = next("".join(c["source"]) for c in cells if "".join(c["source"]).startswith("%%compile"))
    return next(i for i, line in enumerate(source.splitlines(), 1) if "print(" in line)


def take(page: Page, out: pathlib.Path) -> None:
    started = time.time()
    page.evaluate("() => window.jupyterapp.commands.execute('notebook:run-all-cells')")
    report = page.locator(".nbcompile-report").first
    report.wait_for(state="visible", timeout=300_000)
    helper_row(page).wait_for(state="visible")
    summary = page.inner_text(".nbcompile-report .nbcompile-summary")
    print(f"first run: {time.time() - started:.1f} s; report: {summary}")

    # 1. the report, as rendered by the extension
    report.scroll_into_view_if_needed()
    report.screenshot(path=str(out / "training_report.png"))

    # 2. the gutter: hover the marker on the print line, the tooltip open
    line = print_line()
    marker = page.locator(f".nbcompile-marker-break[data-line='{line}']").first
    marker.wait_for(state="attached")
    cell = page.locator(".jp-Cell", has=page.locator(".nbcompile-gutter")).first
    cell.locator(".jp-InputArea").scroll_into_view_if_needed()
    marker.hover()
    tip = page.locator(".cm-tooltip.nbcompile-tip")
    tip.wait_for(state="visible")
    page.wait_for_timeout(300)
    lines = page.eval_on_selector_all(".nbcompile-marker-break", "es => es.map(e => e.dataset.line)")
    print(f"markers on lines {lines}; tooltip: {tip.inner_text()!r}")
    page.screenshot(path=str(out / "training_gutter.png"),
                    clip=around(cell.locator(".jp-InputArea").bounding_box(), tip.bounding_box()))
    page.mouse.move(5, 5)
    tip.wait_for(state="detached")

    # 3. the panel after disabling log_loss
    panel = page.locator(".nbcompile-panel").first
    before = panel.locator(".nbcompile-counts").first.inner_text()
    helper_row(page).get_by_role("button", name="disable", exact=True).click()
    started = time.time()
    page.wait_for_function("([before]) => { const s = document.querySelector('.nbcompile-panel .nbcompile-counts');"
                           " return s && s.innerText !== before; }", arg=[before], timeout=300_000)
    page.wait_for_timeout(500)
    after = panel.locator(".nbcompile-counts").first.inner_text()
    print(f"toggle: {time.time() - started:.1f} s; panel: {before!r} -> {after!r}")
    streams = page.eval_on_selector_all(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stdout']",
                                        "es => es.map(e => e.innerText)")
    lines = page.eval_on_selector_all(".nbcompile-marker-break", "es => es.map(e => e.dataset.line)")
    print(f"after the toggle: markers on lines {lines}; stdout outputs {streams}")
    page.set_viewport_size({"width": 1400, "height": 2400})  # the whole panel on screen: the notebook scrolls inside
    page.wait_for_timeout(500)
    panel.scroll_into_view_if_needed()
    panel.screenshot(path=str(out / "training_panel.png"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=pathlib.Path, default=ROOT / "docs", help="where the PNGs go (default docs/)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="nbcompile-shots-") as tmp:
        root = pathlib.Path(tmp)
        shutil.copyfile(NOTEBOOK, root / NOTEBOOK.name)
        with lab_page(root, NOTEBOOK.name, "shots", 1100) as page:
            take(page, args.out)
    print("wrote", ", ".join(str(args.out / f"training_{n}.png") for n in ("report", "gutter", "panel")))


if __name__ == "__main__":
    main()
