"""MkDocs hook: the tutorial notebooks (notebooks/NN-*.ipynb) as pages, with their outputs.

Each executed notebook is converted at build time with nbconvert's MarkdownExporter, so the
site always shows the notebooks as committed (they are executed and checked by nbval): no
copy to go stale. Why nbconvert markdown and not mkdocs-jupyter: the Markdown exporter shows
the ``text/html`` static picture that follows every chainlab widget view in an output of its
own (the widget view itself, live only, is left out), while an HTML export of a notebook with
saved widget state pulls the widget manager script from a CDN; here nothing is loaded from
outside the site. An output that is only an
image (PNG, SVG) becomes a file beside the page. The "Tutorials" section of the nav is
filled here too, titled by each notebook's first heading, so a new notebook needs no edit of
mkdocs.yml.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"
PAGE_DIR = "tutorials"
NAME = re.compile(r"^\d\d-[a-z0-9-]+\.ipynb$")
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def tutorial_notebooks() -> list[Path]:
    """The tutorial notebooks, in order (``NN-name.ipynb``)."""
    return sorted(p for p in NOTEBOOKS.glob("*.ipynb") if NAME.match(p.name))


def notebook_title(path: Path) -> str:
    """The text of the notebook's first ``# heading`` (else its file name)."""
    import nbformat

    for cell in nbformat.read(path, as_version=4).cells:  # type: ignore[no-untyped-call]
        if cell.cell_type == "markdown":
            for line in str(cell.source).splitlines():
                if line.startswith("# "):
                    return line[2:].strip()
    return path.stem


def on_config(config: MkDocsConfig, **_: Any) -> MkDocsConfig:
    """Fill the nav's (empty) "Tutorials" section with one page per tutorial notebook."""
    pages = [{notebook_title(p): f"{PAGE_DIR}/{p.stem}.md"} for p in tutorial_notebooks()]
    for item in config.nav or []:
        if isinstance(item, dict) and "Tutorials" in item:
            item["Tutorials"] = pages
            return config
    raise ValueError("mkdocs.yml: the nav has no 'Tutorials' section for the notebooks; "
                     "add `- Tutorials: []`")


def notebook_markdown(path: Path) -> tuple[str, dict[str, bytes]]:
    """The notebook as Markdown with its outputs, and the files its outputs became
    (``{name relative to the page: bytes}``)."""
    import nbformat
    from nbconvert import MarkdownExporter

    notebook = nbformat.read(path, as_version=4)  # type: ignore[no-untyped-call]
    for cell in notebook.cells:
        if "outputs" in cell:  # a bare widget view is live only (a run's picture follows it)
            cell.outputs = [o for o in cell.outputs if not _bare_widget_view(o)]
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            if "text/html" in data:  # one raw HTML block: Markdown must not split it
                data["text/html"] = f'<div class="nb-output">\n{data["text/html"]}\n</div>'
    files_dir = f"{path.stem}_files"
    body, resources = MarkdownExporter().from_notebook_node(  # type: ignore[no-untyped-call]
        notebook, resources={"output_files_dir": files_dir}
    )
    # only the files the page shows (an SVG or PNG beside a chosen text/html is not used)
    outputs: dict[str, bytes] = {
        name: data for name, data in resources.get("outputs", {}).items() if name in body
    }
    source = f"notebooks/{path.name}"
    note = (f'!!! note "An executed notebook"\n    This page is `{source}` as committed, outputs '
            "included. Open it in JupyterLab (`./run.sh demo`) to run it yourself.\n\n")
    return _after_title(body, note), outputs


def _bare_widget_view(output: Any) -> bool:
    data = output.get("data", {})
    return WIDGET_VIEW in data and "text/html" not in data


def _after_title(body: str, note: str) -> str:
    lines = body.splitlines(keepends=True)
    for i, line in enumerate(lines):
        if line.startswith("# "):
            return "".join([*lines[: i + 1], "\n", note, *lines[i + 1 :]])
    return note + body


def on_files(files: Files, config: MkDocsConfig, **_: Any) -> Files:
    """Add one generated page per tutorial notebook, and the images of its outputs."""
    for path in tutorial_notebooks():
        body, outputs = notebook_markdown(path)
        files.append(File.generated(config, f"{PAGE_DIR}/{path.stem}.md", content=body))
        for name, data in outputs.items():
            files.append(File.generated(config, f"{PAGE_DIR}/{name}", content=data))
    return files
