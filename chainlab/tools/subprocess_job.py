"""``SubprocessJob``: the built-in remote job: run a command DETACHED from the driver; the
handle (pid, the job's directory, its exit file) survives the driver, so a run killed while
the command runs re-attaches to it after a restart instead of starting it again.

    from chainlab.tools.subprocess_job import register_subprocess_job
    register_subprocess_job(toolbox, workdir=".chainlab/jobs")   # tool name: "subprocess"

    steps:
      - id: train
        tool: subprocess
        args: {command: ["python", "train.py", "--epochs", "3"]}

Each job lives in ``workdir/<idempotency key>/``: ``reserved`` (taken with O_EXCL before the
spawn, so one key spawns at most one process), ``pid``, ``stdout``, ``stderr`` and
``exit`` (written atomically by a small wrapper process when the command ends). So the job
deduplicates by key (``dedupe_by_key=True``) and ``find(key)`` reads the directory.
``poll`` reads the exit file; a process that vanished without one failed (killed, the host
rebooted). ``cancel`` sends SIGTERM to the job's process group. The output is
``{"exit_code", "stdout"}`` (the last 4,000 characters).

Why a subprocess job rather than a Dask-future job: a Dask future belongs to the client
that made it; when the driver dies, the scheduler releases the futures it held and the task
is forgotten (or cancelled), unless published to a named dataset, which needs a long-lived
scheduler the user has to run. A detached process with its state in files needs nothing
but the filesystem, is what "a long simulation / a training script" most often is on one
machine, and its handle is meaningful to any later process on the same host (or on a
shared filesystem with a pid check per host, which this job records).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from typing_extensions import TypedDict  # (pydantic needs it below Python 3.12)

from chainlab.tools.context import CallContext
from chainlab.tools.job import JobStatus

__all__ = ["SubprocessHandle", "SubprocessJob", "register_subprocess_job"]


class SubprocessHandle(TypedDict):
    """What a subprocess job's handle holds (validated on every re-attach)."""

    pid: int
    dir: str
    exit_file: str
    host: str

#: the wrapper: runs the command, then writes its exit code atomically (tmp + rename)
_WRAPPER = r"""
import os, subprocess, sys
d = sys.argv[1]
with open(os.path.join(d, "stdout"), "wb") as out, open(os.path.join(d, "stderr"), "wb") as err:
    try:
        code = subprocess.call(sys.argv[2:], stdout=out, stderr=err)
    except OSError as exc:
        err.write(str(exc).encode()); code = 127
tmp = os.path.join(d, "exit.tmp")
with open(tmp, "w") as fh:
    fh.write(str(code)); fh.flush(); os.fsync(fh.fileno())
os.replace(tmp, os.path.join(d, "exit"))
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie child of this process counts as ended: reap it if it is ours
    with contextlib.suppress(ChildProcessError, OSError):
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return False
    return True


class SubprocessJob:
    """Run a command detached from the driver; wait on its exit file."""

    def __init__(self, workdir: str | Path = ".chainlab/jobs"):
        self.workdir = Path(workdir)

    def _dir(self, key: str) -> Path:
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in key) or "job"
        return self.workdir / safe

    def _handle(self, d: Path, wait_s: float = 5.0) -> dict[str, Any] | None:
        deadline = time.monotonic() + wait_s
        while True:
            pid_file = d / "pid"
            if pid_file.exists():
                text = pid_file.read_text().strip()
                if text:
                    pid = int(text)
                    return {"pid": pid, "dir": str(d), "exit_file": str(d / "exit"),
                            "host": socket.gethostname()}
            if time.monotonic() > deadline:
                return None
            time.sleep(0.01)

    def submit(self, command: list[str], ctx: CallContext, cwd: str | None = None,
               env: dict[str, str] | None = None) -> dict[str, Any]:
        """Start ``command`` (a list: no shell) detached, in its own session."""
        if not command or not all(isinstance(c, str) for c in command):
            raise ValueError("command must be a non-empty list of strings, e.g. "
                             '["python", "train.py"]')
        d = self._dir(ctx.idempotency_key)
        d.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(d / "reserved", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:  # submitted under this key before: the same job
            handle = self._handle(d)
            if handle is None:
                raise RuntimeError(f"job directory {d} is reserved but has no pid; a submit "
                                   "died while spawning: remove the directory to run "
                                   "again") from None
            return handle
        os.close(fd)
        (d / "command.json").write_text(json.dumps({"command": command, "cwd": cwd}))
        proc = subprocess.Popen(
            [sys.executable, "-c", _WRAPPER, str(d), *command], cwd=cwd,
            env={**os.environ, **env} if env else None, stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        tmp = d / "pid.tmp"
        tmp.write_text(str(proc.pid))
        os.replace(tmp, d / "pid")
        handle = self._handle(d, 0)
        assert handle is not None
        return handle

    def poll(self, handle: dict[str, Any]) -> JobStatus:
        exit_file = Path(handle["exit_file"])
        if exit_file.exists():
            code = int(exit_file.read_text().strip() or "-1")
            out = Path(handle["dir"], "stdout")
            text = out.read_text(errors="replace")[-4000:] if out.exists() else ""
            if code == 0:
                return JobStatus.succeeded({"exit_code": 0, "stdout": text})
            err = Path(handle["dir"], "stderr")
            tail = err.read_text(errors="replace")[-1000:] if err.exists() else ""
            return JobStatus.failed(f"exit code {code}: {tail.strip()}")
        if not Path(handle["dir"]).exists():
            return JobStatus.not_found(f"the job directory {handle['dir']} is gone")
        if handle.get("host") not in (None, socket.gethostname()):
            return JobStatus.running(note=f"on host {handle['host']}")
        if not _alive(int(handle["pid"])):
            if exit_file.exists():  # it ended between the two checks
                return self.poll(handle)
            return JobStatus.failed("the process ended without an exit code (killed?)")
        return JobStatus.running(note=f"pid {handle['pid']}")

    def cancel(self, handle: dict[str, Any]) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(int(handle["pid"]), signal.SIGTERM)

    def find(self, key: str) -> dict[str, Any] | None:
        d = self._dir(key)
        return self._handle(d, 1.0) if (d / "reserved").exists() else None


def register_subprocess_job(toolbox: Any, *, workdir: str | Path = ".chainlab/jobs",
                            name: str = "subprocess", **meta: Any) -> Any:
    """Register a :class:`SubprocessJob` in ``toolbox`` as ``name`` (args: ``command``,
    ``cwd``, ``env``). Returns the JobTool. ``meta``: ``poll_every_s``, ``timeout_s``..."""
    meta.setdefault("poll_every_s", 0.5)
    meta.setdefault("side_effects", True)
    return toolbox.job(SubprocessJob(workdir), name=name, dedupe_by_key=True,
                       handle_type=SubprocessHandle, **meta)
