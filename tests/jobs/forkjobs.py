"""A pre-imported process that forks job-trial drivers (:mod:`tests.jobs.jobdriver`) on
request, so a crash trial costs a fork, not an interpreter start (the protocol of
:mod:`tests.durability.forkserver`: one JSON request per line, one JSON reply per line)."""

from __future__ import annotations

import contextlib
import faulthandler
import json
import os
import sys
import traceback

import anyio

from tests.jobs import jobdriver


def _child(argv: list[str], out: str) -> None:
    code = 1
    try:
        fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        os.close(0)
        faulthandler.dump_traceback_later(60, exit=True)
        code = anyio.run(jobdriver.main, jobdriver.parse(argv))
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def main() -> None:
    anyio.run(anyio.sleep, 0)
    with contextlib.suppress(ImportError):
        import chainlab.store.postgres  # noqa: F401
    from chainlab import Chain

    Chain.from_yaml(jobdriver.CHAIN)
    jobdriver.make_toolbox("http://127.0.0.1:1", find=True, dedupe=False)
    for line in sys.stdin:
        request = json.loads(line)
        if request["op"] == "spawn":
            pid = os.fork()
            if pid == 0:
                _child(request["argv"], request["out"])
            reply: dict[str, object] = {"pid": pid}
        elif request["op"] == "poll":
            pid, status = os.waitpid(request["pid"], os.WNOHANG)
            code = None if pid == 0 else (
                -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status))
            reply = {"returncode": code}
        else:
            reply = {"error": f"unknown op {request['op']!r}"}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
