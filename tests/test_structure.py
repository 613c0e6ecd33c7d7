"""Guardrails of the layout (issue 24): no import cycle over every import statement (issue
35: module level, inside functions and under ``TYPE_CHECKING``). Exactly one kind of import
is exempt: the display hooks of ``HOOKS`` (tests/test_layering.py), each a method that loads
a view (chainlab.render, chainlab.timeline) to draw the object it is on; a view reads what
it draws, so the drawing may lead back. The one-line conveniences of ``CONVENIENCE``
(``Toolbox.add_mcp``) are counted like any import (issue 44). Also: no module but the
Runtime's own two reaching into the private members of the Runtime and its parts, no
capability probed with ``getattr`` on a store or an executor, at most ``AT_MOST_LONG``
modules over 400 lines, and identities that stored runs depend on pinned byte for byte."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_layering import CONVENIENCE, HOOKS, ROOT, all_modules, chainlab_imports

# ---------------------------------------------------------------------------- cycles


def import_graph() -> dict[str, set[str]]:
    """chainlab module -> chainlab modules it imports, by EVERY import statement: module
    level, inside a function and under ``TYPE_CHECKING`` (a type a module names is a module it
    depends on: a cycle through annotations is a cycle a reader walks, and the one that turns
    into an import error the day the annotation is needed at run time); the named display
    hooks (``HOOKS``) excluded. ``from pkg import name`` points at the longest module prefix
    of ``pkg.name`` that exists (the submodule ``name``, else ``pkg``)."""
    modules = {name for name, _ in all_modules()}
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in all_modules():
        source = path.read_text(encoding="utf-8")
        for _, target in chainlab_imports(source, _as_package(name, path),
                                          type_checking=True):
            while target not in modules and "." in target:
                target = target.rsplit(".", 1)[0]
            if target == name or target not in modules:
                continue
            if any(name == a and target.startswith(b) for a, b in HOOKS):
                continue
            graph[name].add(target)
    return graph


def _as_package(name: str, path: Path) -> str:
    # chainlab_imports resolves relative imports against the module's package: a package's
    # __init__ is its own package
    return f"{name}.__init__" if path.name == "__init__.py" else name


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's components with more than one member (or a self loop)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10_000))
    try:  # (restored: the plan's tests of deep input rely on the default limit)
        for v in sorted(graph):
            if v not in index:
                visit(v)
    finally:
        sys.setrecursionlimit(limit)
    return out


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert strongly_connected(graph) == [["a", "b", "c"]]


def test_a_package_init_importing_its_own_module_is_an_edge() -> None:
    # `from chainlab.runtime.engine import attempt` inside chainlab/runtime/__init__.py
    src = "from chainlab.runtime.engine import attempt\n"
    assert chainlab_imports(src, "chainlab.runtime.__init__") == [
        (1, "chainlab.runtime.engine")]
    assert chainlab_imports(src, "chainlab.runtime.__init__", type_checking=True) == [
        (1, "chainlab.runtime.engine.attempt")]


def test_the_cycle_walker_counts_type_checking_and_function_level_imports() -> None:
    src = ("from typing import TYPE_CHECKING\n"
           "if TYPE_CHECKING:\n    from chainlab.store.sqlite.store import SQLiteStore\n"
           "def f():\n    from . import drivers\n")
    assert chainlab_imports(src, "chainlab.store.sqlite.writer", type_checking=True) == [
        (3, "chainlab.store.sqlite.store.SQLiteStore"), (5, "chainlab.store.sqlite.drivers")]
    assert chainlab_imports(src, "chainlab.store.sqlite.writer") == [
        (5, "chainlab.store.sqlite")]


#: the contract and view packages, which must never be part of an import cycle: their
#: modules' heads say what they depend on (the plan's model no longer reaches its loaders,
#: checks and schema through imports inside its methods)
NEVER_IN_A_CYCLE = ("chainlab.plan", "chainlab.render", "chainlab.timeline", "chainlab.tools",
                    "chainlab._json")


def _within(module: str, packages: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


def test_plan_render_timeline_tools_and_json_are_in_no_import_cycle() -> None:
    graph = import_graph()
    assert "chainlab.plan.schema" in graph and "chainlab.plan.io" in graph["chainlab.plan.schema"]
    cycles = [c for c in strongly_connected(graph)
              if any(_within(m, NEVER_IN_A_CYCLE) for m in c)]
    assert cycles == [], "import cycles through the contract or the views:\n" + "\n".join(
        " <-> ".join(c) for c in cycles)


#: cycles still to break, each scope with the reason it is allowed for now. A cycle must lie
#: inside one of these scopes; a scope that holds no cycle any more must leave this list (it
#: only shrinks). Empty since issue 35 item 7; since issue 44 a Run names what it uses of
#: the Runtime (``run.RunOwner``, the one protocol left, because the Runtime makes handles),
#: coordination code holds the Runtime's parts by their real types (``host.Host``,
#: ``takeovers.Takeovers``), and a driver's ``Liveness`` serves a run through ``run.runtime``.
PENDING_CYCLES: dict[tuple[str, ...], str] = {}


def test_no_import_cycle_over_every_import_statement() -> None:
    """Every import statement counts: module level, inside functions, under
    ``TYPE_CHECKING`` (issue 35 item 7), the conveniences of ``CONVENIENCE`` included (issue
    44); only the display hooks of ``HOOKS`` are exempt."""
    cycles = strongly_connected(import_graph())
    outside = [c for c in cycles
               if not any(all(_within(m, scope) for m in c) for scope in PENDING_CYCLES)]
    assert outside == [], "import cycles (break them: move the shared concept below both, " \
        "or name a display hook):\n" + "\n".join(" <-> ".join(c) for c in outside)
    cleared = [scope for scope in PENDING_CYCLES
               if not any(all(_within(m, scope) for m in c) for c in cycles)]
    assert cleared == [], f"no cycle left in {cleared}: remove them from PENDING_CYCLES"


def test_a_convenience_is_an_edge_the_cycle_walker_counts() -> None:
    """A CONVENIENCE is exempt from the layer test only: its import is an edge of the graph,
    so the day the part it loads names what loads it again, the cycle test fails."""
    graph = import_graph()
    for module, target in CONVENIENCE:
        assert any(t == target or t.startswith(target + ".") for t in graph[module]), \
            (module, target)
    graph["chainlab.mcp"].add("chainlab.tools.toolbox")  # mcp typed against the Toolbox
    assert any({"chainlab.mcp", "chainlab.tools.toolbox"} <= set(c)
               for c in strongly_connected(graph))


def test_the_store_and_the_events_are_in_no_cycle() -> None:
    cycles = [c for c in strongly_connected(import_graph())
              if any(m.startswith(("chainlab.store", "chainlab.events")) for m in c)]
    assert cycles == []


def test_the_notebook_front_end_has_no_import_cycle() -> None:
    """chainlab.jupyter alone (issue 24, item 6): the panels take a host protocol, the magics
    sit on top of the widgets, so no jupyter module reaches back into another that imports
    it, even through a function-level import."""
    whole = import_graph()
    inside = {m for m in whole if m == "chainlab.jupyter" or m.startswith("chainlab.jupyter.")}
    graph = {m: {t for t in targets if t in inside} for m, targets in whole.items()
             if m in inside}
    assert len(graph) > 20  # the walker saw the package
    cycles = strongly_connected(graph)
    assert cycles == [], "import cycles in chainlab.jupyter:\n" + "\n".join(
        " <-> ".join(c) for c in cycles)


# ---------------------------------------------------------------------------- privates
ALLOWED_PRIVATE = {"chainlab/runtime/runtime.py", "chainlab/runtime/run.py"}


def runtime_private_names() -> set[str]:
    """The private members of a Runtime and of each of its parts (issue 44: the facade and
    the host, starts and takeovers it holds)."""
    from chainlab.runtime import Runtime
    from chainlab.store import MemoryStore

    rt = Runtime(store=MemoryStore())
    names: set[str] = set()
    for obj in (rt, rt.host, rt.starts, rt.takeovers):
        names |= {n for n in dir(obj) if n.startswith("_") and not n.startswith("__")}
    return names


def private_reaches(source: str, names: set[str]) -> list[tuple[int, str]]:
    """(line, name) for ``x._name`` where ``x`` is not ``self``/``cls`` and ``_name`` is one
    of ``names``."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr in names:
            base = node.value
            if isinstance(base, ast.Name) and base.id in {"self", "cls"}:
                continue
            out.append((node.lineno, node.attr))
    return out


def test_the_private_finder_sees_a_reach_in() -> None:
    src = "def f(runtime):\n    runtime._spawn(g)\n    self._spawn(g)\n    run.runtime._active\n"
    assert sorted(private_reaches(src, {"_spawn", "_active"})) == [(2, "_spawn"), (4, "_active")]


def test_only_runtime_and_run_touch_runtime_privates() -> None:
    names = runtime_private_names()
    assert {"_launch", "_active", "_drive", "_admit", "_recover"} <= names
    wrong = {}
    for _, path in all_modules():
        rel = path.relative_to(ROOT.parent).as_posix()
        if rel in ALLOWED_PRIVATE:
            continue
        found = private_reaches(path.read_text(encoding="utf-8"), names)
        if found:
            wrong[rel] = found
    assert wrong == {}, f"modules reaching into Runtime privates: {wrong}"


# ---------------------------------------------------------------------------- probes
PROBED = {"store", "executor"}


def capability_probes(source: str) -> list[tuple[int, str]]:
    """(line, attribute) for ``getattr(<store or executor>, "name", ...)`` and
    ``hasattr(...)`` of the same: a capability must be a protocol checked with isinstance."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id in {"getattr", "hasattr"} and len(node.args) >= 2):
            continue
        target, attr = node.args[0], node.args[1]
        name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
        if name in PROBED and isinstance(attr, ast.Constant):
            out.append((node.lineno, str(attr.value)))
    return out


def test_the_probe_finder_sees_a_probe() -> None:
    src = ("a = getattr(self.store, 'blocking', True)\nb = getattr(store, 'x', None)\n"
           "c = hasattr(executor, 'submit')\nd = getattr(exc, 'sqlstate', None)\n")
    assert capability_probes(src) == [(1, "blocking"), (2, "x"), (3, "submit")]


def test_no_capability_is_probed_with_getattr() -> None:
    wrong = {}
    for _, path in all_modules():
        found = capability_probes(path.read_text(encoding="utf-8"))
        if found:
            wrong[path.relative_to(ROOT.parent).as_posix()] = found
    assert wrong == {}, f"use the store/executor protocols (isinstance), not getattr: {wrong}"


# ---------------------------------------------------------------------------- identities
# Stored runs deduplicate and recover by these: a changed key would make a resumed run
# call an external API again under a new idempotency key. Never change them silently.


def test_args_hash_and_idempotency_key_are_pinned() -> None:
    from chainlab._json import args_hash, idempotency_key

    args = {"table": "t1", "rows": ["a", "é", 3, 1.5, None, True], "nested": {"b": 1, "a": 2}}
    assert args_hash(args) == "489c86287be82a22"
    assert args_hash({}) == "44136fa355b3678a"
    assert idempotency_key("run-1", "step", args_hash(args)) == \
        "fbe17868cfffb1d81e495a63138cbe08"
    assert idempotency_key("run-1", "step", "x", "compensate") == \
        "15db41170b63453803965d30a71fad3c"


_FINGERPRINT_SRC = '''
import json
from chainlab._json import code_fingerprint

def charge(amount: int, currency: str) -> dict:
    total = amount * 100
    return {"total": total, "currency": currency.upper()}

class Caller:
    def __call__(self, x: int) -> int:
        return x + 1

print(json.dumps([code_fingerprint(charge), code_fingerprint(Caller()),
                  code_fingerprint(len)]))
'''

#: per Python minor version: bytecode differs between versions
FINGERPRINTS = {
    (3, 11): ["b83a493cb55cc589", "ccbda392fc3d4206", "490c2fb5e063c0f1"],
}


def test_code_fingerprint_is_stable_across_processes() -> None:
    def run() -> list[str]:
        proc = subprocess.run([sys.executable, "-c", _FINGERPRINT_SRC], capture_output=True,
                              text=True, timeout=60, cwd=ROOT.parent)
        assert proc.returncode == 0, proc.stderr
        return __import__("json").loads(proc.stdout)

    first, second = run(), run()
    assert first == second
    pinned = FINGERPRINTS.get(sys.version_info[:2])
    if pinned is not None:
        assert first == pinned


@pytest.mark.parametrize("module", [m for m, p in all_modules() if p.name == "__init__.py"])
def test_every_package_all_is_sorted_and_resolves(module: str) -> None:
    import importlib

    from tests.test_layering import _isort_key

    if module in {"chainlab.jupyter", "chainlab.jupyter.magics", "chainlab.jupyter.run_widget",
                  "chainlab.jupyter.designer"}:
        pytest.importorskip("ipywidgets")
    mod = importlib.import_module(module)
    names = getattr(mod, "__all__", None)
    if names is None:
        # a package without __all__ exports nothing: its docstring is its only content
        public = [n for n, v in vars(mod).items() if not n.startswith("_")
                  and not isinstance(v, type(mod)) and n != "annotations"]
        assert public == [], f"{module} has public names but no __all__: {public}"
        return
    names = list(names)
    assert names == sorted(names, key=_isort_key), module
    assert len(set(names)) == len(names), module
    for name in names:
        assert hasattr(mod, name), f"{module}.{name}"


# ---------------------------------------------------------------------------- module size
LONG_LINES = 400
#: issue 24: 16 modules were over 400 lines (kernel.py 745) before the split, 4 after it.
#: Issue 44 made it 6, two modules that each hold one concept whole, where a cap that
#: forced them apart is the failure CONVENTIONS names ("a module over 400 lines that holds
#: one concept is better than three that hold a third of it each"): a run's handle
#: (runtime/run.py, ~630 lines) instead of one class stacked across two files by size
#: (RunView < Run), and the Runtime facade (runtime/runtime.py, ~480 lines), which keeps
#: every public method of the Runtime and its docstring in one place by design, each
#: delegating in one line to a part (host.py, starts.py, takeovers.py). Issue 45 made it 7:
#: errors.py (~405 lines) is the one exception tree by design (CONVENTIONS: every error in
#: one file, its tree drawn at the top); AgentConversionError joined it
AT_MOST_LONG = 7


def long_modules(root: Path = ROOT, limit: int = LONG_LINES) -> dict[str, int]:
    """chainlab modules over ``limit`` lines (as ``wc -l`` counts them) -> their length."""
    out = {}
    for path in sorted(root.rglob("*.py")):
        n = path.read_bytes().count(b"\n")
        if n > limit:
            out[path.relative_to(root).as_posix()] = n
    return out


def test_the_size_counter_counts_lines(tmp_path: Path) -> None:
    (tmp_path / "big.py").write_text("x = 1\n" * 401)
    (tmp_path / "small.py").write_text("x = 1\n" * 400)
    assert long_modules(tmp_path) == {"big.py": 401}


def test_few_modules_are_over_400_lines() -> None:
    """A module a reader has to scroll through for a concept is a module with more than one
    concept: split by concept (not by squeezing lines) before this fails; raise
    ``AT_MOST_LONG`` only for a module that holds one concept, and say which above it."""
    long = long_modules()
    assert len(long) <= AT_MOST_LONG, f"{len(long)} modules over {LONG_LINES} lines: {long}"


# ---------------------------------------------------------------------------- kinds
#: where a kind of step may be named: its own module (the engine's attempt package) and the
#: compiler that reads the plan's and the tool's word for it (DESIGN §17)
KIND_HOMES = ("chainlab/runtime/engine/attempt/", "chainlab/runtime/engine/compile.py")
KIND_SWITCHES = re.compile(
    r"\bJobTool\b|\.is_subchain\b|\.subchain_name\b|\.is_group\b|\bnode\.each\s+is\b"
    r"|\bnode\.kind\s*(==|!=|\bin\b|\bnot in\b)|\.each\.source\b|\bregrows_in_fork\b")


def kind_switches(source: str) -> list[tuple[int, str]]:
    """(line, text) of each place that asks which kind of step it holds."""
    out = []
    for lineno, line in enumerate(source.splitlines(), 1):
        code = line.split("#", 1)[0]
        m = KIND_SWITCHES.search(code)
        if m:
            out.append((lineno, m.group(0)))
    return out


def test_the_kind_switch_finder_sees_one() -> None:
    src = ("if isinstance(node.tool, JobTool):\n    pass\nif node.kind == 'job':\n"
           "    x = step.is_subchain  # fine in a comment: JobTool\n"
           "items = resolve(node.each.source)\nif KINDS[n.kind].regrows_in_fork:\n")
    assert [n for n, _ in kind_switches(src)] == [1, 3, 4, 5, 6]


def test_no_kind_switch_outside_a_kinds_own_module() -> None:
    """The kernel, recovery, the saga, fork, what-if and the other runtime parts call the
    one attempt protocol and never ask which kind of step they hold (issue 35 item 4)."""
    wrong = {}
    for _, path in all_modules():
        rel = path.relative_to(ROOT.parent).as_posix()
        if not rel.startswith(("chainlab/runtime/", "chainlab/dask", "chainlab/mcp")) \
                or rel.startswith(KIND_HOMES):
            continue
        found = kind_switches(path.read_text(encoding="utf-8"))
        if found:
            wrong[rel] = found
    assert wrong == {}, f"kind switches outside the kinds' modules: {wrong}"


#: every kind of step, by the name a node carries (``Node.kind``)
EVERY_KIND = ("call", "job", "chain", "for_each", "agent")


def test_every_registered_kind_lives_in_a_module_named_after_it() -> None:
    """Kind name = module (or folder) name = what the registry answers (issue 44): a reader
    who meets ``kind: for_each`` opens ``engine/attempt/for_each.py``."""
    from chainlab.runtime.engine.attempt import kind, kinds
    from chainlab.runtime.engine.attempt.kinds import KINDS, NAMES

    assert set(NAMES) == set(EVERY_KIND)
    for name in EVERY_KIND:
        found = KINDS[name]
        assert found.name == name
        assert type(found).__module__ == f"chainlab.runtime.engine.attempt.{name}", name
        # the protocol's and the registry's guides name every kind
        for guide in (kind, kinds):
            assert f"``{name}``" in (guide.__doc__ or ""), (guide.__name__, name)


# ---------------------------------------------------------------------------- views
#: the views and front ends: they use the runtime through its package face
#: (``chainlab.runtime``), its coordination, a run's handle and ``chainlab.workspace``, and
#: an agent's turns through ``chainlab.agent.turns``; never the engine (issue 44)
VIEWS_AND_FRONT_ENDS = ("chainlab.render", "chainlab.timeline", "chainlab.jupyter",
                        "chainlab.cli", "chainlab.http")


def engine_imports(source: str, module: str) -> list[tuple[int, str]]:
    """(line, target) of every import statement of ``source`` (module level, in a function,
    under ``TYPE_CHECKING``) that reaches into ``chainlab.runtime.engine``."""
    return sorted((line, target) for line, target in chainlab_imports(source, module,
                                                                      type_checking=True)
                  if _within(target, ("chainlab.runtime.engine",)))


def test_the_engine_import_finder_sees_every_form() -> None:
    src = ("from chainlab.runtime import engine\n"
           "if TYPE_CHECKING:\n    from chainlab.runtime.engine.compile import Graph\n"
           "def f():\n    import chainlab.runtime.engine.kernel\n"
           "from chainlab.runtime import Run\nfrom ..runtime.engine import decisions\n")
    assert [line for line, _ in engine_imports(src, "chainlab.cli.views")] == [1, 3, 5, 7]


def test_views_and_front_ends_never_import_the_engine() -> None:
    wrong = {}
    for name, path in all_modules():
        if _within(name, VIEWS_AND_FRONT_ENDS):
            found = engine_imports(path.read_text(encoding="utf-8"), _as_package(name, path))
            if found:
                wrong[name] = found
    assert len([m for m, _ in all_modules() if _within(m, VIEWS_AND_FRONT_ENDS)]) > 80
    assert wrong == {}, ("views and front ends import the engine (use chainlab.runtime's "
                         f"face, a run's handle, chainlab.agent.turns): {wrong}")


# ---------------------------------------------------------------------------- loading
_PLAIN_CHAIN = '''
import asyncio, json, sys
from chainlab import Chain, Runtime, Toolbox
from chainlab.store import SQLiteStore
tb = Toolbox()

@tb.tool
def fetch(n: int) -> dict:
    return {"total": n * 10}

@tb.tool(side_effects=True, requires_confirmation=True)
def send(total: int) -> str:
    return f"sent {total}"

chain = Chain.from_dict({"name": "invoice", "steps": [
    {"id": "fetch", "tool": "fetch", "args": {"n": 3}},
    {"id": "send", "tool": "send", "args": {"total": "{{ steps.fetch.output.total }}"}}]})

async def main(path):
    runtime = Runtime(tb, SQLiteStore(path))
    run = await runtime.start(chain)
    assert (await run.wait()).status == "suspended"
    if WIDGET:
        from chainlab.jupyter.run_widget import RunWidget
        RunWidget(run)  # the first draw: the DAG laid out, the waiting step inspected
        await asyncio.sleep(0.05)
        await run.approve("send")
        assert (await run.wait()).status == "succeeded"
    if CONTROL:  # the probe sees the agent kind when a run has one
        from chainlab.runtime.engine.attempt.kinds import KINDS
        KINDS["agent"]
    await runtime.aclose()
    print(json.dumps(sorted(m for m in sys.modules if m.startswith("chainlab.agent")
                            or m.startswith("chainlab.runtime.engine.attempt.agent"))))

asyncio.run(main(sys.argv[1]))
'''


def _agent_modules_after(tmp_path: Path, *, widget: bool, control: bool = False) -> list[str]:
    code = f"WIDGET = {widget}\nCONTROL = {control}\n{_PLAIN_CHAIN}"
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path / "runs.db")],
                          capture_output=True, text=True, timeout=120, cwd=ROOT.parent)
    assert proc.returncode == 0, proc.stderr
    loaded: list[str] = __import__("json").loads(proc.stdout.splitlines()[-1])
    return loaded


def test_a_plain_chain_loads_no_agent_module(tmp_path: Path) -> None:
    """A chain with no agent step starts, waits for a person and is drawn without loading
    ``chainlab.agent`` or the engine's agent kind (issue 44 item 6): the kinds registry loads
    a kind when a run first has a step of it, the runtime loads the ad-hoc agent only for a
    run that keeps one, and the views read an agent's turns only when the run grew."""
    assert _agent_modules_after(tmp_path, widget=False) == []
    control = _agent_modules_after(tmp_path, widget=False, control=True)
    assert {"chainlab.agent", "chainlab.runtime.engine.attempt.agent"} <= set(control)


def test_a_plain_chain_first_widget_draw_loads_no_agent_module(tmp_path: Path) -> None:
    pytest.importorskip("ipywidgets")
    assert _agent_modules_after(tmp_path, widget=True) == []
