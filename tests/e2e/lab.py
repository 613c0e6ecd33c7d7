"""A private, headless JupyterLab for the browser test.

Everything lives in a temporary directory: config, data, runtime, settings (with the
overrides that start the kernel without a dialog and switch off news and update checks),
workspaces, and a copy of the notebooks, so the repository is never written to.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

OVERRIDES = {
    "@jupyterlab/notebook-extension:tracker": {"autoStartDefaultKernel": True},
    "@jupyterlab/apputils-extension:notification": {"fetchNews": "false",
                                                    "checkForUpdates": False},
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Lab:
    """``with Lab(work_dir, files) as lab: lab.url("x.ipynb")``."""

    def __init__(self, work_dir: Path, files: list[Path], token: str = "e2e-token"):
        self.work = Path(work_dir)
        self.root = self.work / "notebooks"
        self.files = files
        self.token = token
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = self.work / "lab.log"

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def url(self, notebook: str) -> str:
        return f"{self.base}/lab/tree/{notebook}?reset&token={self.token}"

    def start(self, timeout: float = 60.0) -> Lab:
        self.root.mkdir(parents=True, exist_ok=True)
        for f in self.files:
            shutil.copy(f, self.root / f.name)
        settings = self.work / "app-settings"
        settings.mkdir(exist_ok=True)
        (settings / "overrides.json").write_text(json.dumps(OVERRIDES))
        env = dict(os.environ, JUPYTER_CONFIG_DIR=str(self.work / "cfg"),
                   JUPYTER_DATA_DIR=str(self.work / "data"),
                   JUPYTER_RUNTIME_DIR=str(self.work / "rt"), JUPYTER_PLATFORM_DIRS="1")
        env.pop("JPY_SESSION_NAME", None)
        cmd = self.command(settings)
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            cmd.append("--allow-root")
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(cmd, env=env, stdout=self._log, stderr=subprocess.STDOUT,
                                     cwd=self.root)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"JupyterLab exited: see {self.log_path}\n{self.log()}")
            try:
                self.api("GET", "/api/status")
                return self
            except (urllib.error.URLError, ConnectionError):
                time.sleep(0.25)
        self.stop()
        raise TimeoutError(f"JupyterLab did not start in {timeout} s:\n{self.log()}")

    def command(self, settings: Path) -> list[str]:
        """The server's command line (a subclass starts another Jupyter front end)."""
        return [sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1",
                f"--port={self.port}", f"--ServerApp.token={self.token}",
                f"--ServerApp.root_dir={self.root}", "--ServerApp.open_browser=False",
                f"--LabApp.app_settings_dir={settings}",
                f"--LabApp.workspaces_dir={self.work / 'workspaces'}",
                "--LabApp.news_url=None",
                "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
                "--expose-app-in-browser"]

    def api(self, method: str, path: str) -> Any:
        req = urllib.request.Request(f"{self.base}{path}", method=method,
                                     headers={"Authorization": f"token {self.token}"})
        with urllib.request.urlopen(req, timeout=10) as resp:
            body = resp.read()
        return json.loads(body) if body else None

    def shutdown_kernels(self) -> None:
        """Kernels outlive the page: delete every session and kernel."""
        for sess in self.api("GET", "/api/sessions"):
            self.api("DELETE", f"/api/sessions/{sess['id']}")
        for kernel in self.api("GET", "/api/kernels"):
            self.api("DELETE", f"/api/kernels/{kernel['id']}")

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-4000:]
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc is None:
            return
        with contextlib.suppress(urllib.error.URLError, ConnectionError, OSError):
            self.shutdown_kernels()
        self.proc.terminate()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=5)
        self.proc = None
        self._log.close()

    def __enter__(self) -> Lab:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


CHROMIUM = "/usr/bin/chromium"
CHROME_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
               "--disable-component-update", "--disable-sync", "--no-first-run",
               "--disable-dev-shm-usage"]


def write_notebook(path: Path, cells: list[str]) -> Path:
    """A notebook of these code cells on the python3 kernel, written to ``path``."""
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c) for c in cells]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    nbformat.write(nb, path)
    return path


@contextlib.contextmanager
def browser_page(failure_png: Path, *, width: int = 1280) -> Any:
    """A page in headless Debian Chromium (console errors collected in ``page.errors``); on a
    failure inside the block, a screenshot is saved to ``failure_png``."""
    from playwright.sync_api import sync_playwright

    failure_png.parent.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROME_ARGS, headless=True)
        page = browser.new_context(viewport={"width": width, "height": 1000}).new_page()
        page.errors = []
        page.on("console", lambda m: m.type == "error" and page.errors.append(m.text))
        try:
            yield page
        except BaseException:
            page.screenshot(path=str(failure_png))
            raise
        finally:
            browser.close()
