"""Packaging (issue 18, item 5): environment.yml agrees with pyproject.toml, and the command
line starts without its extra with one line that names it, ``--version`` and
``python -m chainlab``."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

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
