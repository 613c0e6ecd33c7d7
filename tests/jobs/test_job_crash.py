"""Issue 27, items 3 and 6: the driver of a run with remote jobs (a wave of two jobs,
ordinary steps and a sub-chain holding a third job) is killed with SIGKILL at random
moments (while it reserves, submits, records or waits), then the run is resumed in a NEW
process; the test job server (a subprocess, its jobs in a file) counts the submissions per
key. Over SQLite and PostgreSQL:

* with ``find`` (the backend lists jobs by key) or with ``dedupe_by_key`` (the backend
  deduplicates), every job was submitted exactly once and the run succeeds;
  (with ``find`` only, a submit request never sent, or still in flight, is not found:
  that step is in_doubt too, and counted);
* with neither, a job killed between its reservation and the record of its handle is
  ``in_doubt`` for a person (never resubmitted blindly): at most one submission, always.

The figures (trials, kills per phase, submissions per key) are printed (``-s``) and written
to ``$CHAINLAB_JOB_TRIALS_OUT`` when set."""

from __future__ import annotations

import collections
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from chainlab.store import open_store
from chainlab.testing.job_server import JobServer
from tests.durability.harness import ROOT, Child

pytestmark = pytest.mark.xdist_group("durability")

SQLITE_TRIALS = int(os.environ.get("CHAINLAB_JOB_SQLITE_TRIALS") or 36)
PG_TRIALS = int(os.environ.get("CHAINLAB_JOB_PG_TRIALS") or 27)
SEED = 2027
CONFIGS = [("find", ["--find"], False), ("dedupe", ["--dedupe"], True), ("neither", [], False)]
JOB_STEPS = ("a", "b", "s/y")  # two jobs, and one in a sub-chain of the same wave
PHASES = ("reserve", "submit", "record", "wait", "ended")


class _Forked(Child):
    def __init__(self, fs: _ForkServer, pid: int, out: Path):
        self.fs, self.pid, self.out = fs, pid, out
        self.rc: int | None = None

    def poll(self) -> int | None:
        if self.rc is None:
            self.rc = self.fs.ask({"op": "poll", "pid": self.pid})["returncode"]
        return self.rc


class _ForkServer:
    def __init__(self) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.jobs.forkjobs"], cwd=ROOT,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def ask(self, request: dict[str, Any]) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        assert line, "the fork server died"
        return json.loads(line)  # type: ignore[no-any-return]

    def spawn(self, argv: list[str], out: Path) -> _Forked:
        return _Forked(self, self.ask({"op": "spawn", "argv": argv, "out": str(out)})["pid"],
                       out)

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


def _events(url: str, run_id: str) -> list[Any]:
    from chainlab.errors import RunNotFoundError

    store = open_store(url)
    try:
        return store.load_events(run_id)
    except RunNotFoundError:
        return []
    finally:
        store.close()


def _exists(url: str, run_id: str) -> bool:
    from chainlab.errors import RunNotFoundError

    store = open_store(url)
    try:
        store.get_run(run_id)
        return True
    except RunNotFoundError:
        return False
    finally:
        store.close()


def _phase(events: list[Any], step_id: str, answered: dict[str, int]) -> str:
    """Where the kill caught the job step: ``reserve`` (no durable reservation), ``submit``
    (reserved; the backend never answered the submit), ``record`` (the backend answered,
    the handle is not in the log), ``wait`` (handle recorded), ``ended``."""
    kinds = [e for e in events if e.step_id == step_id]
    if any(e.kind in ("step_succeeded", "step_failed", "step_in_doubt") for e in kinds):
        return "ended"
    if any(e.kind == "job_submitted" for e in kinds):
        return "wait"
    reserved = [e for e in kinds if e.kind == "job_submitting"]
    if reserved:
        return "record" if answered.get(reserved[-1].payload["key"]) else "submit"
    return "reserve"


def _aim(server: JobServer, base: dict[str, Any], target: str, rng: random.Random,
         child: Child, url: str, run_id: str) -> None:
    """Sleep until a random moment of the ``target`` phase, as the job server (or, before
    any job, the store) sees it: the kill lands where it lands (the phase is read back from
    the log afterwards)."""
    if target == "reserve":  # once the run exists, somewhere before its first reservation
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and child.poll() is None and not _exists(url, run_id):
            time.sleep(0.002)
        time.sleep(rng.uniform(0.0, 0.01))
        return
    field, window = {"submit": ("received", 0.1), "record": ("answered", 0.04),
                     "wait": ("polls", 0.25)}[target]
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and child.poll() is None:
        now = server.stats()
        if field == "answered":
            moved = sum(now["answered"].values()) > sum(base["answered"].values())
        else:
            moved = now[field] > base[field]
        if moved:
            break
        time.sleep(0.003)
    time.sleep(rng.uniform(0.0, window))


def _trials(tmp_path: Path, store_url: Any, n_trials: int, backend: str) -> dict[str, Any]:
    rng = random.Random(f"{SEED}-{backend}")
    fs = _ForkServer()
    servers = {name: JobServer(tmp_path / f"jobs-{backend}-{name}.json", duration_s=0.35,
                               accept_latency_s=0.03, submit_latency_s=0.08,
                               dedupe=dedupe).start()
               for name, _, dedupe in CONFIGS}
    kills: collections.Counter[str] = collections.Counter()
    per_key: collections.Counter[int] = collections.Counter()
    outcomes: collections.Counter[str] = collections.Counter()
    rows = []
    try:
        for n in range(n_trials):
            name, flags, _ = CONFIGS[n % len(CONFIGS)]
            server = servers[name]
            run_id = f"{backend}{n}"
            url = store_url(n)
            argv = [url, server.url, run_id]
            target = PHASES[n % 4] if n % 8 < 4 else rng.choice(PHASES[:4])
            base = server.stats()
            child = fs.spawn([*argv, "start", *flags], tmp_path / f"{run_id}-start.out")
            _aim(server, base, target, rng, child, url, run_id)
            child.kill()
            assert child.wait() in (-9, 0), child.output()
            time.sleep(0.12)  # a request already sent reaches the server
            answered = server.stats()["answered"]
            before = _events(url, run_id)
            phases = {s: _phase(before, s, answered) for s in JOB_STEPS}
            kills.update(phases.values())
            created = _exists(url, run_id)
            resumed = fs.spawn([*argv, "resume", *flags], tmp_path / f"{run_id}-resume.out")
            if created:  # (a run killed before it was created has nothing to resume)
                assert resumed.wait(60) == 0, resumed.output()
                report = resumed.result()
            else:
                resumed.wait(60)
                report = {"status": "never created", "steps": {}}
            after = _events(url, run_id)
            subs = server.stats()["submissions"]
            keys = {e.step_id: e.payload["key"] for e in after if e.kind == "job_submitting"}
            counts = {s: subs.get(k, 0) for s, k in keys.items()}
            for k in keys.values():
                per_key[subs.get(k, 0)] += 1
            rows.append({"trial": n, "config": name, "phases": phases,
                         "status": report["status"], "steps": report["steps"],
                         "submissions": counts})
            outcomes[report["status"]] += 1
            # THE rule: never a second submission for a key
            assert all(c <= 1 for c in counts.values()), rows[-1]
            if not created:
                continue
            for s in JOB_STEPS:
                st = report["steps"].get(s)
                uncertain = phases[s] in ("submit", "record")
                if name == "neither" and uncertain:
                    assert st == "in_doubt", rows[-1]
                elif name == "find" and phases[s] == "submit" and st == "in_doubt":
                    # the dead driver never sent it, or it had not landed when find(key) asked:
                    # the step waits for a person instead of risking a second job
                    assert counts.get(s, 0) <= 1, rows[-1]
                    outcomes["in_doubt: find(key) found nothing"] += 1
                else:
                    assert st == "succeeded", rows[-1]
                    assert counts.get(s) == 1, rows[-1]
            if all(report["steps"].get(s) == "succeeded" for s in JOB_STEPS):
                assert report["status"] == "succeeded", rows[-1]
            # a recorded call is never made again: no attempt starts after a step succeeded
            ended: set[str] = set()
            for e in after:
                if e.kind == "step_started":
                    assert e.step_id not in ended, (e, rows[-1])
                elif e.kind == "step_succeeded" and e.step_id:
                    ended.add(e.step_id)
    finally:
        fs.close()
        for server in servers.values():
            server.stop()
    by_config: dict[str, dict[str, int]] = {}
    for row in rows:
        c = by_config.setdefault(row["config"], {"trials": 0, "job steps in_doubt": 0,
                                                 "job steps succeeded": 0,
                                                 "most submissions of one key": 0})
        c["trials"] += 1
        c["job steps in_doubt"] += sum(1 for s in JOB_STEPS if row["steps"].get(s) == "in_doubt")
        c["job steps succeeded"] += sum(1 for s in JOB_STEPS
                                        if row["steps"].get(s) == "succeeded")
        c["most submissions of one key"] = max([c["most submissions of one key"],
                                                *row["submissions"].values()])
    return {"backend": backend, "trials": n_trials, "kills_per_phase": dict(kills),
            "by_config": by_config,
            "submissions_per_key": {str(k): v for k, v in sorted(per_key.items())},
            "outcomes": dict(outcomes), "rows": rows}


def _report(result: dict[str, Any]) -> None:
    kills = result["kills_per_phase"]
    print(f"\n[{result['backend']}] trials={result['trials']} job steps killed per phase: "
          + ", ".join(f"{p}={kills.get(p, 0)}" for p in PHASES)
          + f"; keys by submissions: {result['submissions_per_key']}"
          + f"; run outcomes: {result['outcomes']}")
    for name, figures in result["by_config"].items():
        print(f"  {name:8} {figures}")
    out = os.environ.get("CHAINLAB_JOB_TRIALS_OUT")
    if out:
        path = Path(out)
        data = json.loads(path.read_text()) if path.exists() else {}
        data[result["backend"]] = {k: v for k, v in result.items() if k != "rows"}
        path.write_text(json.dumps(data, indent=1))


def test_crash_trials_sqlite(tmp_path: Path) -> None:
    result = _trials(tmp_path, lambda n: str(tmp_path / f"t{n}.db"), SQLITE_TRIALS, "sqlite")
    _report(result)
    kills = result["kills_per_phase"]
    assert kills.get("wait", 0) > 0 and kills.get("record", 0) + kills.get("submit", 0) > 0


def test_crash_trials_postgres(tmp_path: Path, pg_cluster: Any) -> None:
    def url(n: int) -> str:
        schema = f"jobs_trial_{n}"
        pg_cluster.dsn(schema)
        return f"{pg_cluster.url()}&options={quote(f'-csearch_path={schema}')}"

    result = _trials(tmp_path, url, PG_TRIALS, "postgres")
    _report(result)
    assert result["kills_per_phase"].get("wait", 0) > 0


def test_a_completion_from_another_process_goes_through_the_mailbox(tmp_path: Path) -> None:
    """A live driver in another process waits on three long jobs; this process completes
    them with ``runtime.complete_job`` (posted to the run's mailbox in the store, applied by
    the driver): the run ends without waiting the jobs' 30 s."""
    import anyio

    from chainlab.runtime import Runtime
    from chainlab.store import SQLiteStore
    from tests.jobs.jobdriver import make_toolbox

    db = str(tmp_path / "mail.db")
    with JobServer(tmp_path / "jobs.json", duration_s=30) as server:
        fs = _ForkServer()
        try:
            child = fs.spawn([db, server.url, "mail", "start", "--find"], tmp_path / "d.out")
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                events = _events(db, "mail")
                if {e.step_id for e in events if e.kind == "job_submitted"} == set(JOB_STEPS):
                    break
                time.sleep(0.02)

            async def complete() -> None:
                runtime = Runtime(make_toolbox(server.url, find=True, dedupe=False),
                                  SQLiteStore(db))
                try:
                    for step in JOB_STEPS:
                        assert await runtime.complete_job(
                            "mail", step, by="backend",
                            output={"payload": {"n": 2}, "result": "called back"}
                        ) == "applied"
                finally:
                    await runtime.aclose()

            anyio.run(complete)
            assert child.wait(30) == 0, child.output()
            report = child.result()
        finally:
            fs.close()
        assert report["status"] == "succeeded", report
        assert sum(server.stats()["submissions"].values()) == 3
    events = _events(db, "mail")
    done = [e for e in events if e.kind == "job_completed"]
    assert {e.step_id for e in done} == set(JOB_STEPS)
    assert {e.epoch for e in done} == {1}  # applied by the live driver, not taken over
