"""A disposable driver process, for demos and tests of crash recovery: a notebook (or a test)
starts a run in a REAL subprocess, the subprocess is SIGKILLed mid-step (or while the run is
suspended), and the notebook continues the run with ``runtime.resume(run_id)``.

    driver = SubprocessDriver(chain, db="gallery.db", tools="chainlab.examples.gallery:toolbox",
                              kill_at="charge")
    driver.wait()                    # -9: killed while charge's call ran
    run = await driver.take_over(runtime)   # runtime.resume(run_id) without waiting for
                                            # the dead driver's heartbeat to go stale

The child is ``python -m chainlab.testing.driver``; it injects the kill with the ordinary
fault API (``faults.inject(run, "kill", ...)``, recorded as a ``fault_injected`` event
before the process dies) after declaring itself disposable. Nothing else ever kills a driver: the
``chainlab`` command line has no such option.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from chainlab.errors import RunStateError
from chainlab.plan.schema import Chain
from chainlab.tools import Toolbox

if TYPE_CHECKING:
    from chainlab.runtime.run import Run
    from chainlab.runtime.runtime import Runtime

__all__ = ["SubprocessDriver", "main"]


class SubprocessDriver:
    """Drive ``chain`` (a new run with id ``run_id``) or ``resume`` (a stored run's id) in a
    fresh ``python -m chainlab.testing.driver`` process on the store ``db`` (a SQLite path or
    a URL: not ``:memory:``), with tools imported from ``tools`` (``MODULE:ATTR``: the child
    cannot see a notebook's cells). ``kill_at``: SIGKILL the child when that step's call
    runs (after its body, unless ``effect=False``); ``kill_when_suspended``: when the run
    suspends. ``by`` names who injected the kill in its event.

    Raises ValueError for a ``:memory:`` store or neither/both of ``chain`` and ``resume``.
    """

    def __init__(self, chain: Chain | None = None, *, db: str | os.PathLike[str], tools: str,
                 run_id: str | None = None, resume: str | None = None,
                 context: Mapping[str, Any] | None = None, kill_at: str | None = None,
                 effect: bool = True, kill_when_suspended: bool = False, by: str = "notebook",
                 env: Mapping[str, str] | None = None):
        if str(db) == ":memory:":
            raise ValueError("db=':memory:' lives in one process only; give the subprocess a "
                             "SQLite file or a postgresql:// URL")
        if (chain is None) == (resume is None):
            raise ValueError("give a chain to start, or resume=RUN_ID to continue (not both)")
        self.run_id = resume or run_id or f"driven-{os.getpid()}-{time.time_ns() % 10**9}"
        self._dir = tempfile.TemporaryDirectory(prefix="chainlab-driver-")
        argv = [sys.executable, "-m", "chainlab.testing.driver", "--db", str(db),
                "--tools", tools, "--run-id", self.run_id, "--by", by]
        if chain is not None:
            path = Path(self._dir.name) / "chain.json"
            path.write_text(chain.model_dump_json(exclude_defaults=True))
            argv += ["--chain", str(path), "--context", json.dumps(dict(context or {}))]
        else:
            argv += ["--resume"]
        if kill_at is not None:
            argv += ["--kill-at", kill_at] + ([] if effect else ["--no-effect"])
        if kill_when_suspended:
            argv += ["--kill-when-suspended"]
        self.argv = argv
        self._out = Path(self._dir.name) / "out.txt"
        path_env = os.pathsep.join([os.getcwd(), *sys.path[1:]])
        full_env = {**os.environ, "PYTHONPATH": path_env, **dict(env or {})}
        with self._out.open("wb") as out:
            self.process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                            env=full_env)

    @property
    def pid(self) -> int:
        return self.process.pid

    def wait(self, timeout: float = 120.0) -> int:
        """Wait for the child to end; its return code (``-9``: SIGKILLed). Raises
        TimeoutError (after killing it) when it outlives ``timeout`` seconds."""
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise TimeoutError(f"driver {self.pid} still ran after {timeout}s:\n"
                               f"{self.output()}") from None

    def kill(self) -> None:
        """SIGKILL the child now (if it still runs)."""
        if self.process.poll() is None:
            os.kill(self.pid, signal.SIGKILL)
            self.process.wait()

    async def take_over(self, runtime: Runtime) -> Run:
        """Continue the dead child's run in ``runtime`` (``runtime.resume``, next epoch). The
        child was reaped, so its last heartbeat is known to be a dead driver's: the takeover
        does not wait for it to go stale (``force=True``). Raises RunStateError while the child
        still runs."""
        if self.process.poll() is None:
            raise RunStateError(f"driver {self.pid} of run {self.run_id!r} still runs: "
                                "driver.wait() (or driver.kill()) first", run_id=self.run_id)
        return await runtime.resume(self.run_id, force=True)

    @property
    def killed(self) -> bool:
        return self.process.poll() == -signal.SIGKILL

    def output(self) -> str:
        """What the child printed (its last line is a JSON report when it was not killed)."""
        return self._out.read_text(errors="replace") if self._out.exists() else ""

    def __repr__(self) -> str:
        rc = self.process.poll()
        state = "running" if rc is None else ("killed" if rc == -signal.SIGKILL else f"rc={rc}")
        return f"<SubprocessDriver {self.run_id} pid={self.pid} {state}>"


# --------------------------------------------------------------------------- the child
def _toolbox(spec: str) -> Toolbox:
    module_name, _, attr = spec.partition(":")
    obj: Any = importlib.import_module(module_name)
    for part in (attr or "toolbox").split("."):
        obj = getattr(obj, part)
    if not isinstance(obj, Toolbox):
        raise SystemExit(f"--tools {spec!r} is a {type(obj).__name__}, not a Toolbox")
    return obj


async def _drive(ns: argparse.Namespace) -> dict[str, Any]:
    from chainlab.runtime.faults import declare_disposable, inject
    from chainlab.runtime.runtime import Runtime
    from chainlab.store.open import open_store

    declare_disposable()
    runtime = Runtime(_toolbox(ns.tools), open_store(ns.db))
    if ns.chain:
        chain = Chain.model_validate_json(Path(ns.chain).read_text())
        run = await runtime.start(chain, json.loads(ns.context), run_id=ns.run_id)
    else:
        run = await runtime.resume(ns.run_id)
    if ns.kill_at:  # armed before the driver's first step (no await in between)
        await inject(run, "kill", ns.kill_at, by=ns.by, effect=ns.effect)
    result = await run.wait()
    if ns.kill_when_suspended and result.suspended:
        await inject(run, "kill", by=ns.by)
    await runtime.aclose()
    return {"run_id": result.run_id, "status": str(result.status), "steps": result.steps}


def main(argv: Sequence[str] | None = None) -> None:
    """The child: ``python -m chainlab.testing.driver --db DB --tools MOD:ATTR --run-id ID
    (--chain FILE --context JSON | --resume) [--kill-at STEP [--no-effect]]
    [--kill-when-suspended] [--by WHO]``."""
    p = argparse.ArgumentParser(prog="python -m chainlab.testing.driver")
    p.add_argument("--db", required=True)
    p.add_argument("--tools", required=True)
    p.add_argument("--run-id", required=True)
    p.add_argument("--chain")
    p.add_argument("--context", default="{}")
    p.add_argument("--resume", action="store_true")
    p.add_argument("--kill-at")
    p.add_argument("--no-effect", dest="effect", action="store_false")
    p.add_argument("--kill-when-suspended", action="store_true")
    p.add_argument("--by", default="notebook")
    ns = p.parse_args(argv)
    report = anyio.run(_drive, ns)
    sys.stdout.write(json.dumps(report) + "\n")


if __name__ == "__main__":
    main()
