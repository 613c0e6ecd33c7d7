"""The documentation site (issue 18, item 6) builds with warnings as errors and says what the
code says: every command of the CLI, the docstrings of the API, the tutorial notebooks with
their outputs, nothing loaded from outside the site, and README links that lead into it."""

from __future__ import annotations

import html
import importlib.util
import inspect
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("docs")]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``mkdocs build --strict`` of the repository's site, in a temporary directory."""
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--clean",
         "-f", str(ROOT / "mkdocs.yml"), "-d", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=600, env=env,
    )
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{done.stdout}\n{done.stderr}"
    assert "WARNING" not in done.stderr, done.stderr
    return out


def page_text(path: Path) -> str:
    """The visible text of a built page: tags dropped, entities decoded, spaces collapsed."""
    body = re.sub(r"<(script|style)\b.*?</\1>", " ", path.read_text(), flags=re.S)
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", body)).split())


def plain(docstring: str) -> str:
    """A docstring's text as the site shows it (after the site's griffe extension), without
    its code marks and spaces (the page's markup adds spaces at tag boundaries: compare with
    :func:`squeeze` of the page)."""
    spec = importlib.util.spec_from_file_location(
        "griffe_docstrings", ROOT / "docs" / "_hooks" / "griffe_docstrings.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return squeeze(module.clean(docstring).replace("`", ""))


def squeeze(text: str) -> str:
    return re.sub(r"\s+", "", text)


def test_the_cli_reference_lists_every_command_with_its_options(site: Path) -> None:
    from typer.testing import CliRunner

    from chainlab.cli import app

    top = subprocess.run([sys.executable, "-m", "chainlab", "--help"], capture_output=True,
                         text=True, timeout=60, env={**os.environ, "COLUMNS": "80"})
    assert top.returncode == 0, top.stderr
    listed = top.stdout.split("Commands:", 1)[1]
    commands = re.findall(r"^  ([a-z][a-z-]*)\s", listed, re.M)
    assert len(commands) >= 10, top.stdout  # run, validate, approve, ... (the parse worked)
    page = (site / "reference" / "cli.html").read_text()
    text = page_text(site / "reference" / "cli.html")
    for name in commands:
        assert f'id="chainlab-{name}"' in page, f"the CLI reference has no section for {name!r}"
        usage = CliRunner().invoke(app, [name, "--help"], prog_name="chainlab",
                                   env={"COLUMNS": "80"}).output
        assert f"Usage: chainlab {name}" in text
        for option in set(re.findall(r"(?<![\w-])--[a-z][a-z-]+", usage)):
            assert option in text, f"`chainlab {name}` option {option} is not on the page"


def test_the_api_reference_holds_the_docstrings(site: Path) -> None:
    from chainlab.runtime import Run, Runtime
    from chainlab.tools import Toolbox

    runtime = squeeze(page_text(site / "api" / "runtime.html"))
    for fn in (Runtime.start, Runtime.resume, Runtime.fork, Run.approve, Run.wait):
        doc = inspect.getdoc(fn)
        assert doc, fn
        first = plain(doc.split("\n\n")[0])
        assert first in runtime, f"{fn.__qualname__}'s docstring is not on the API page"
    tools = squeeze(page_text(site / "api" / "tools.html"))
    assert plain((inspect.getdoc(Toolbox.tool) or "").split("\n\n")[0]) in tools
    # Sphinx roles in docstrings are turned into code, never shown raw
    for path in (site / "api").glob("*.html"):
        assert ":class:`" not in path.read_text() and ":meth:`" not in path.read_text(), path


def test_every_tutorial_notebook_is_a_page_with_its_outputs(site: Path) -> None:
    notebooks = sorted((ROOT / "notebooks").glob("0*.ipynb"))
    assert len(notebooks) >= 7
    index = (site / "index.html").read_text()
    for notebook in notebooks:
        built = site / "tutorials" / f"{notebook.stem}.html"
        assert built.exists(), f"no tutorial page for {notebook.name}"
        assert f'href="tutorials/{notebook.stem}.html"' in index, f"{notebook.name} not in nav"
    # the quick start: a printed output, the static picture of the run, the Gantt chart image
    nb = json.loads((ROOT / "notebooks" / "01-quickstart.ipynb").read_text())
    printed = [
        "".join(out["text"]).strip()
        for cell in nb["cells"] for out in cell.get("outputs", [])
        if out.get("output_type") == "stream" and out.get("name") == "stdout"
    ]
    assert printed, "the quick start notebook lost its printed output"
    page = (site / "tutorials" / "01-quickstart.html").read_text()
    text = page_text(site / "tutorials" / "01-quickstart.html")
    for line in printed[0].splitlines():
        assert line.strip() in text
    assert 'class="cl-static-run"' in page and "<svg" in page  # the run, drawn without a kernel
    # the Gantt chart: a PNG, embedded in the output's HTML or written beside the page
    images = re.findall(r'<img[^>]+src="(data:image/png;base64,[^"]{1000,}|01-quickstart_files/'
                        r'[^"]+)"', page)
    assert images, "the timeline picture of the quick start is missing"
    for src in images:
        assert src.startswith("data:") or (site / "tutorials" / src).stat().st_size > 1000


def test_nothing_is_loaded_from_outside_the_site(site: Path) -> None:
    loads = re.compile(r"<(?:script|img|iframe|source|link)\b[^>]*\b(?:src|href)=\"(?:https?:)?//",
                       re.I)
    for path in site.rglob("*.html"):
        text = path.read_text()
        assert not loads.search(text), f"{path.relative_to(site)} loads from outside"
        assert 'class="mermaid"' not in text  # mermaid would be fetched from a CDN
    for path in site.rglob("*.css"):
        text = path.read_text()
        assert not re.search(r"url\(\s*['\"]?(?:https?:)?//", text), path
        assert "@import" not in text, path


def test_readme_links_into_the_docs_and_never_outside_the_repository() -> None:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Documentation", 1)
    assert len(section) == 2, "README has no Documentation section"
    links = re.findall(r"\]\(([^)]+)\)", section[1].split("\n## ", 1)[0])
    assert any(link.startswith("docs/") for link in links)
    for link in links:
        assert not re.match(r"[a-z]+:", link), f"README links outside the repository: {link}"
        assert (ROOT / link.split("#")[0]).exists(), f"README links to a missing file: {link}"
    assert ".venv/bin/mkdocs serve" in readme
