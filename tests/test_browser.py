"""Real-browser test: a real JupyterLab server and Debian's Chromium, driven by Playwright.

It opens a notebook, runs a `%%compile` cell whose helper prints, finds the gutter marker on
the print line, clicks the panel's toggle to disable the helper and sees the break count and
the marker change, saves, reopens it on a server that offers no kernel and finds the rendered report.
Screenshots go to build/screenshots/ (test artifacts).
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
SHOTS = ROOT / "build" / "screenshots"
CHROMIUM = os.environ.get("CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
TOKEN = "nbcompile-browser-test"

pytestmark = pytest.mark.skipif(not pathlib.Path(CHROMIUM).exists(), reason="no Chromium (apt-get install chromium)")
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


def _notebook(path: pathlib.Path) -> None:
    def cell(source: str) -> dict:
        return {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": source}

    path.write_text(json.dumps({
        "cells": [cell("%load_ext nbcompile"), cell(CELL)],
        "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
        "nbformat": 4, "nbformat_minor": 5,
    }))


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


def _command(page, command: str) -> None:
    page.evaluate(f"() => window.jupyterapp.commands.execute('{command}')")


def _kernels(base: str) -> list:
    with urllib.request.urlopen(f"{base}/api/kernels?token={TOKEN}") as response:
        return json.loads(response.read())


def _marker_lines(page) -> list[str]:
    return page.eval_on_selector_all(".nbcompile-marker-break", "els => els.map(e => e.dataset.line)")


def test_gutter_markers_panel_toggle_and_report_without_a_kernel(lab, lab_without_kernels):
    base, root = lab
    nokernel = lab_without_kernels
    SHOTS.mkdir(parents=True, exist_ok=True)
    with playwright_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page(viewport={"width": 1400, "height": 1100})
        page.set_default_timeout(120_000)
        page.goto(f"{base}/lab/tree/breaks.ipynb?token={TOKEN}")
        page.wait_for_selector(".jp-Notebook .jp-Cell")
        page.wait_for_function("() => window.jupyterapp && window.jupyterapp.shell.currentWidget"
                               " && window.jupyterapp.shell.currentWidget.sessionContext"
                               " && window.jupyterapp.shell.currentWidget.sessionContext.session")
        _command(page, "notebook:run-all-cells")

        # 1. the gutter marker on the print line (cell line 4), with its reason in the tooltip
        page.wait_for_selector(".nbcompile-marker-break", state="attached")
        assert _marker_lines(page) == ["4"]
        tip = page.eval_on_selector(".nbcompile-marker-break", "e => e.textContent")
        assert "Failed to trace builtin operator" in tip and "%nbcompile set helper disable" in tip
        page.wait_for_selector("text=3 graphs, 2 breaks")
        page.screenshot(path=str(SHOTS / "panel_and_gutter.png"), full_page=True)

        # the snippet command: in the palette's registry, enabled for this cell, and on the cell toolbar
        command = page.evaluate("""() => {
            const c = window.jupyterapp.commands, id = 'nbcompile:copy-snippet';
            return [c.hasCommand(id), c.label(id), c.isEnabled(id)];
        }""")
        assert command == [True, "nbcompile: Copy annotation snippet", True]
        assert page.locator(".jp-cell-toolbar", has_text="nbcompile: Copy annotation snippet").count() >= 1

        # 2. the panel's toggle: disable the helper; the break count and the marker follow
        row = page.locator(".widget-hbox", has=page.locator("code", has_text="helper")).first
        row.locator("button", has_text="disable").click()
        page.wait_for_selector("text=2 graphs, 1 break")
        page.wait_for_function("() => [...document.querySelectorAll('.nbcompile-marker-break')]"
                               ".map(e => e.dataset.line).join() === '7'")
        page.screenshot(path=str(SHOTS / "after_disable.png"), full_page=True)

        # save
        _command(page, "docmanager:save")
        page.wait_for_function("() => !window.jupyterapp.shell.currentWidget.context.model.dirty")
        # 3. reopen the saved notebook where no kernel can run: the report renders from the file
        page.goto(f"{nokernel}/lab/tree/breaks.ipynb?token={TOKEN}")
        page.wait_for_selector(".nbcompile-report")
        summary = page.inner_text(".nbcompile-report .nbcompile-summary")
        assert "2 graphs, 1 graph break" in summary
        assert _marker_lines(page) == ["7"]  # markers come back from the saved report
        assert _kernels(nokernel) == []  # rendered with no kernel running
        with urllib.request.urlopen(f"{nokernel}/api/kernelspecs?token={TOKEN}") as response:
            assert json.loads(response.read())["kernelspecs"] == {}
        no_kernel = page.locator(".jp-Dialog-button.jp-mod-reject")
        if no_kernel.count():
            no_kernel.click()  # JupyterLab asks which kernel to start; there is none to pick
        page.screenshot(path=str(SHOTS / "reopened_report.png"), full_page=True)
        browser.close()
    saved = json.loads((root / "breaks.ipynb").read_text())
    outputs = saved["cells"][1]["outputs"]
    assert any("application/vnd.nbcompile.report+json" in o.get("data", {}) for o in outputs)


def test_the_extension_is_installed_and_enabled():
    out = subprocess.run([sys.executable, "-m", "jupyterlab.labextensions", "list"], capture_output=True, text=True)
    listing = out.stdout + out.stderr
    line = next(l for l in listing.splitlines() if "nbcompile" in l)
    assert "enabled" in line and "OK" in line, listing
    installed = pathlib.Path(sys.prefix) / "share" / "jupyter" / "labextensions" / "nbcompile" / "package.json"
    assert json.loads(installed.read_text())["jupyterlab"]["_build"]["load"].startswith("static/remoteEntry.")
