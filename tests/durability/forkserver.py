"""A pre-imported process that forks durability workers on request.

Starting a fresh interpreter costs about a second of wall time on a loaded 2-core machine
(imports), and the crash and fencing suites need a few hundred worker processes. So the test
starts this server once (a real subprocess); it imports everything and then, for each
request, ``fork()``s a child that runs :mod:`tests.durability.worker` as its own process
(own pid, own SQLite connections, killed for real by SIGKILL). The server never opens a
database or starts a thread, so forking it is safe.

Protocol: one JSON request per line on stdin, one JSON reply per line on stdout.
``{"op": "spawn", "argv": [...], "out": PATH}`` -> ``{"pid": N}`` (the child's stdout and
stderr go to PATH); ``{"op": "poll", "pid": N}`` -> ``{"returncode": None | int}`` (a
negative code is the signal that ended it, as in subprocess).
"""

from __future__ import annotations

import contextlib
import faulthandler
import json
import os
import sys
import traceback

import anyio

from chainlab.plan import find_problems
from tests.durability import chainlib, worker


def _child(argv: list[str], out: str) -> None:
    code = 1
    try:
        fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        os.close(0)
        faulthandler.dump_traceback_later(45, exit=True)  # a hung worker tells where
        code = anyio.run(worker.main, worker.parse(argv))
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _returncode(status: int) -> int:
    return -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


def _warm_up() -> None:
    """Load what the runtime imports lazily (the event loop backend, the YAML loader behind
    ``Chain.from_dict``, pydantic's schema machinery) once, here, instead of in every child:
    otherwise each worker spends most of its life importing before its run even exists. No
    thread is started and no database opened, so forking stays safe."""
    anyio.run(anyio.sleep, 0)
    with contextlib.suppress(ImportError):  # the PostgreSQL trials' store (no connection yet)
        import chainlab.store.postgres  # noqa: F401
    toolbox = chainlib.make_toolbox(chainlib.Ledger(os.devnull))
    for make in chainlib.CHAINS.values():
        assert not find_problems(make(), toolbox, context={"seed": chainlib.SEED})


def main() -> None:
    _warm_up()
    for line in sys.stdin:
        request = json.loads(line)
        if request["op"] == "spawn":
            pid = os.fork()
            if pid == 0:
                _child(request["argv"], request["out"])
            reply: dict[str, object] = {"pid": pid}
        elif request["op"] == "poll":
            pid, status = os.waitpid(request["pid"], os.WNOHANG)
            reply = {"returncode": None if pid == 0 else _returncode(status)}
        else:
            reply = {"error": f"unknown op {request['op']!r}"}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
