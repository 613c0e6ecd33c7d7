"""The durability scoreboard (issue 45 item 4): the same support agent -- ``lookup_order``
reads, ``refund`` charges a ledger and needs approval -- written natively in the OpenAI
Agents SDK, Pydantic AI and LangChain's ``create_agent`` on LangGraph, as chainlab's own
``Agent``, and the same Pydantic AI / Agents SDK objects converted to chainlab, driven
through the same scenarios against ONE scripted OpenAI-compatible server.

    .venv/bin/python benchmarks/crash_matrix.py [--systems a,b] [--scenarios x,y]
        [--md FILE] [--no-timing] [--reps 9] [--shapes 1x1,1x16,9x1] [--install]

Each system's agent runs in its own subprocess (``benchmarks/crash_matrix/*_agent.py``,
protocol in ``crash_matrix/common.py``), so a SIGKILL is real; the tools append to a
ledger file (fsync'ed) and the harness counts the lines from outside.

**Virtualenvs.** Each peer runs in its OWN virtualenv outside the repository, made from
``crash_matrix/requirements-NAME.txt`` when missing (``python3 -m venv`` + ``pip install
-r``; pip's configured index or mirror is used, so it works offline from a local mirror):
``$CRASH_VENV_<NAME>`` (``CRASH_VENV_OPENAI_AGENTS``, ``CRASH_VENV_PYDANTIC_AI``,
``CRASH_VENV_LANGGRAPH``), else ``$CRASH_MATRIX_VENVS/peer-NAME`` (default folder
``/work/venvs``). ``--install`` runs ``pip install -r`` again in existing ones. chainlab's
rows run in this interpreter (its venv); the converted rows need
``chainlab.integrations.pydantic_ai`` / ``.openai_agents`` and the SDK in it
(``pip install -e ".[pydantic-ai,openai-agents]"``) and are skipped with a note otherwise.

**Scenarios** (the model is scripted per scenario: turn 1 ``lookup_order(7)``, turn 2
``refund(7, 15)``, turn 3 a final answer, unless said otherwise):

=================  ==================================================================
``approve``        the refund is approved
``kill_waiting``   SIGKILL while the approval waits; a new process resumes the way the
                   system documents (see each driver's docstring) and the refund is
                   approved there
``kill_in_refund`` approved; SIGKILL once the refund's body wrote its ledger line (its
                   result not returned yet); a new process resumes the documented way
                   (the decision given again where the system asks for it again; an
                   ``in_doubt`` call resolved with the effect found in the ledger)
``reask``          after the approved refund the model asks ``refund(7, 25)``: other args;
                   if asked, the person rejects it
``reject``         the refund is rejected with a reason (does it reach the model?)
``turn_limit``     2 model requests allowed, the model wants 3; a limit that waits for a
                   person is told to stop
``slow_beside``    turn 1 asks a slow ``lookup_order`` (1.5 s) AND the refund at once;
                   the person takes 1 s to approve: when is the approval asked, when
                   does the lookup end (does it run while the approval waits?)
=================  ==================================================================

Printed per system and scenario: model requests (before a kill + after), ledger lines per
tool, what the (resumed) run says, notes; then the overhead per tool call and per model
turn (model time -- the time waiting for the model's HTTP answers, measured at httpx's
transport in each process -- excluded), with the load average and the versions.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import queue
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
DRIVERS = HERE / "crash_matrix"
sys.path.insert(0, str(HERE.parent))

from chainlab.testing.openai_script import Call, RecordedRequest, tool_calls  # noqa: E402
from chainlab.testing.openai_server import FakeOpenAI  # noqa: E402

REASON = "refunds over 10 need a manager"
SECOND_REASON = "one refund per order"
FINAL = "Your order 7 is refunded."
SLOW_S = 1.5
HOLD_S = 1.0  # slow_beside: the person takes this long to decide (less than the lookup)
PHASE_TIMEOUT_S = 90.0


@dataclass(frozen=True)
class System:
    """One row family: ``peer`` is the venv's name (None: this interpreter)."""

    name: str
    label: str
    driver: str
    peer: str | None = None
    converted: str | None = None
    store: str = "memory"  # the timing run's store (chainlab rows)

    def python(self) -> str:
        return sys.executable if self.peer is None else str(venv_dir(self.peer) / "bin/python")

    def argv(self, phase: str) -> list[str]:
        extra = ["--converted", self.converted] if self.converted else []
        return [self.python(), str(DRIVERS / self.driver), phase, *extra]


SYSTEMS = (
    System("openai-agents", "OpenAI Agents SDK", "openai_agents_agent.py", "openai-agents"),
    System("pydantic-ai", "Pydantic AI", "pydantic_ai_agent.py", "pydantic-ai"),
    System("langgraph", "LangGraph create_agent", "langgraph_agent.py", "langgraph"),
    System("chainlab", "chainlab Agent", "chainlab_agent.py", store="memory"),
    System("chainlab-pydantic-ai", "Pydantic AI -> chainlab", "chainlab_agent.py",
           converted="pydantic-ai"),
    System("chainlab-openai-agents", "Agents SDK -> chainlab", "chainlab_agent.py",
           converted="openai-agents"),
)
SCENARIOS = ("approve", "kill_waiting", "kill_in_refund", "reask", "reject", "turn_limit",
             "slow_beside")
CONVERTERS = {"pydantic-ai": "chainlab.integrations.pydantic_ai, pydantic_ai",
              "openai-agents": "chainlab.integrations.openai_agents, agents"}


# --------------------------------------------------------------------------- virtualenvs
def venv_dir(peer: str) -> Path:
    own = os.environ.get("CRASH_VENV_" + peer.upper().replace("-", "_"))
    if own:
        return Path(own)
    return Path(os.environ.get("CRASH_MATRIX_VENVS") or "/work/venvs") / f"peer-{peer}"


def ensure_venv(peer: str, install: bool) -> None:
    """Make the peer's virtualenv from its requirements file when it is missing."""
    where = venv_dir(peer)
    requirements = DRIVERS / f"requirements-{peer}.txt"
    fresh = not (where / "bin/python").exists()
    if fresh:
        print(f"# making {where} from {requirements.name} ...", flush=True)
        subprocess.run(["python3", "-m", "venv", str(where)], check=True)
    if fresh or install:
        subprocess.run([str(where / "bin/python"), "-m", "pip", "install", "-q", "-r",
                        str(requirements)], check=True)


def converter_missing(system: System) -> str | None:
    """Why a converted row cannot run here (None: it can)."""
    if system.converted is None:
        return None
    probe = subprocess.run([sys.executable, "-c", f"import {CONVERTERS[system.converted]}"],
                           capture_output=True, text=True)
    if probe.returncode == 0:
        return None
    last = (probe.stderr.strip().splitlines() or ["?"])[-1]
    return f"skipped: the converter is not importable here ({last})"


# --------------------------------------------------------------------------- the model
def _text(content: Any) -> str:
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return str(content or "")


def turn_of(messages: Sequence[dict[str, Any]]) -> int:
    """Which model turn a request asks for: 1 + the assistant messages already in it."""
    return 1 + sum(1 for m in messages if m.get("role") == "assistant")


def answer(scenario: str, messages: Sequence[dict[str, Any]]) -> Any:
    """The scripted model's answer (a FakeOpenAI script item) to a request's messages."""
    asked = " ".join(_text(m.get("content")) for m in messages if m.get("role") == "user")
    turn = turn_of(messages)
    shape = re.search(r"timing (\d+)x(\d+)", asked)
    if shape:  # the overhead run: `calls` pings in each of `turns` turns, then "done"
        turns, calls = int(shape[1]), int(shape[2])
        return tool_calls(*(Call("ping", {"n": i}) for i in range(calls))) \
            if turn <= turns else "done"
    lookup = Call("lookup_order", {"order_id": 7})
    refund = Call("refund", {"order_id": 7, "amount": 15})
    if scenario == "slow_beside":
        return tool_calls(lookup, refund) if turn == 1 else FINAL
    plan = [lookup, refund]
    if scenario == "reask":
        plan.append(Call("refund", {"order_id": 7, "amount": 25}))
    return plan[turn - 1] if turn <= len(plan) else FINAL


def responder(scenario: str) -> Callable[[RecordedRequest], Any]:
    return lambda request: answer(scenario, request.messages)


# --------------------------------------------------------------------------- the ledger
def read_ledger(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def count_by_tool(lines: Sequence[dict[str, Any]]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for line in lines:
        counts[line["tool"]] = counts.get(line["tool"], 0) + 1
    return counts


# --------------------------------------------------------------------------- one process
class Driver:
    """One driver process: JSON events from its stdout, decisions to its stdin."""

    def __init__(self, system: System, phase: str, env: dict[str, str], log: Path):
        self.log = log
        self.errfile = open(log, "a")  # noqa: SIM115 (closed in close())
        self.proc = subprocess.Popen(system.argv(phase), env=env, cwd=DRIVERS,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.errfile, text=True, start_new_session=True)
        self.events: queue.Queue[dict[str, Any] | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("{"):
                self.events.put(json.loads(line))
        self.events.put(None)

    def next(self, timeout: float = PHASE_TIMEOUT_S) -> dict[str, Any] | None:
        """The next event (None: the process ended). Raises TimeoutError."""
        try:
            return self.events.get(timeout=timeout)
        except queue.Empty:
            raise TimeoutError(f"no event in {timeout:.0f} s") from None

    def send(self, decisions: list[dict[str, Any]]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"decisions": decisions}) + "\n")
        self.proc.stdin.flush()

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def close(self) -> None:
        self.kill()
        self.errfile.close()

    def stderr_tail(self) -> str:
        lines = [ln for ln in self.log.read_text().splitlines() if ln.strip()]
        return lines[-1][:160] if lines else ""


@dataclass
class Cell:
    """What one system did in one scenario."""

    requests: list[int] = field(default_factory=list)  # model requests per process
    ledger: dict[str, int] = field(default_factory=dict)
    says: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    versions: dict[str, Any] = field(default_factory=dict)
    marks: dict[str, float] = field(default_factory=dict)  # when (time.time())


def decide(scenario: str, call: dict[str, Any], ledger: Path) -> dict[str, Any]:
    """The person's decision on a waiting call (the same one after a resume)."""
    if call["kind"] == "in_doubt":
        effect = next(e for e in reversed(read_ledger(ledger)) if e["tool"] == "refund")
        return {"id": call["id"], "resolve": {"order_id": effect["args"]["order_id"],
                                              "refunded": effect["args"]["amount"]}}
    if call["kind"] == "limit":
        return {"id": call["id"], "reject": "turn limit reached: stop here"}
    if call["tool"] == "refund" and scenario == "reject":
        return {"id": call["id"], "reject": REASON}
    if call["tool"] == "refund" and (call.get("args") or {}).get("amount") != 15:
        return {"id": call["id"], "reject": SECOND_REASON}
    return {"id": call["id"], "approve": True}


def run_cell(system: System, scenario: str, scratch: Path) -> Cell:
    """Drive one system through one scenario (one or two processes)."""
    cell = Cell()
    scratch.mkdir(parents=True, exist_ok=True)
    ledger, state = scratch / "ledger.jsonl", scratch / "state"
    with FakeOpenAI([responder(scenario)] * 1000) as server:
        env = {**os.environ, "OPENAI_BASE_URL": server.base_url, "CRASH_LEDGER": str(ledger),
               "CRASH_STATE": str(state), "OPENAI_API_KEY": "test",
               "CRASH_MAX_TURNS": "2" if scenario == "turn_limit" else "10",
               "CRASH_SLOW_S": str(SLOW_S) if scenario == "slow_beside" else "0",
               "CRASH_BLOCK_REFUND": "1" if scenario == "kill_in_refund" else "0"}
        phases = ["start", "resume"] if scenario.startswith("kill_") else ["start"]
        for phase in phases:
            env["CRASH_BLOCK_REFUND"] = "1" if scenario == "kill_in_refund" and \
                phase == "start" else "0"
            before = len(server.completions)
            killed = drive(system, scenario, phase, env, scratch, ledger, cell)
            cell.requests.append(len(server.completions) - before)
            if killed:
                cell.says.append("SIGKILL")
        if scenario == "slow_beside" and server.completions:
            cell.notes.append(slow_note(cell.marks, read_ledger(ledger),
                                        server.completions[0].received_at))
        if scenario == "reject":
            told = any(REASON in r.text() for r in server.completions)
            cell.notes.append(f"reason reached the model: {'yes' if told else 'NO'}")
    cell.ledger = count_by_tool(read_ledger(ledger))
    return cell


def drive(system: System, scenario: str, phase: str, env: dict[str, str], scratch: Path,
          ledger: Path, cell: Cell) -> bool:
    """One process of a cell; True when the harness killed it on purpose."""
    driver = Driver(system, phase, env, scratch / f"{phase}.log")
    try:
        while True:
            event = driver.next()
            if event is None:
                cell.says.append(f"exit {driver.proc.wait()}: {driver.stderr_tail()}")
                return False
            kind = event["event"]
            if kind == "versions":
                cell.versions = {**event["versions"], "python": event["python"]}
            elif kind == "done":
                says = str(event["status"])
                if event.get("error"):
                    says += f" ({event['error'][:110]})"
                elif event.get("output") not in (FINAL, None):
                    says += f": {str(event.get('output'))[:60]!r}"
                cell.says.append(says)
                return False
            elif kind == "waiting":
                calls = event["calls"]
                for call in calls:
                    if call["kind"] != "approval":
                        cell.says.append(f"{call['kind']} {call['tool']}")
                refunds = [c for c in calls if c["tool"] == "refund" and c["kind"] == "approval"]
                if refunds:
                    cell.marks.setdefault("asked", time.time())
                    if scenario == "slow_beside":
                        time.sleep(HOLD_S)
                if scenario == "reask" and any(c["args"].get("amount") == 25 for c in refunds):
                    cell.notes.append("refund(7, 25) asked for approval again")
                if scenario == "kill_waiting" and phase == "start" and refunds:
                    driver.kill()
                    return True
                driver.send([decide(scenario, c, ledger) for c in calls])
                cell.marks.setdefault("decided", time.time())
                if scenario == "kill_in_refund" and phase == "start" and refunds:
                    wait_for_refund(ledger, driver)
                    driver.kill()
                    return True
    except TimeoutError as exc:
        cell.says.append(f"{exc}: {driver.stderr_tail()}")
        return False
    finally:
        driver.close()


def slow_note(marks: dict[str, float], ledger: Sequence[dict[str, Any]], origin: float
              ) -> str:
    """When, after the model asked for the slow lookup and the refund at once, the approval
    was asked, decided, and the lookup ended (seconds from the model's first request)."""
    lookups = [e["t"] for e in ledger if e["tool"] == "lookup_order"]
    at = {k: f"{v - origin:.2f} s" for k, v in marks.items()}
    return (f"approval asked {at.get('asked', '-')}, decided {at.get('decided', '-')}, slow "
            f"lookup done {f'{lookups[0] - origin:.2f} s' if lookups else '-'}")


def wait_for_refund(ledger: Path, driver: Driver) -> None:
    deadline = time.monotonic() + PHASE_TIMEOUT_S
    while not any(e["tool"] == "refund" for e in read_ledger(ledger)):
        if driver.proc.poll() is not None or time.monotonic() > deadline:
            raise TimeoutError("the refund never started")
        time.sleep(0.01)


# --------------------------------------------------------------------------- overhead
def overhead(rows: Sequence[dict[str, Any]]) -> tuple[float, float]:
    """Per call and per model turn, in µs, from three shapes (``turns x calls``): the base
    (``1x1``), more calls in the same turns (``1x16``) and more turns of the same calls
    (``9x1``). A run's own time (wall minus model) is ``turns+1`` turns and
    ``turns*calls`` calls: the extra calls give the cost of a call, the extra turns (less
    their calls) the cost of a turn. Few turns in the calls' pair keep the turns' noise
    (a model client made per request, say) out of the cost of a call."""
    def own(r: dict[str, Any]) -> float:
        return float(r["wall_s"] - r["model_s"])

    base = min(rows, key=lambda r: (r["turns"], r["calls"]))
    wide = [r for r in rows if r["turns"] == base["turns"] and r["calls"] > base["calls"]]
    long = [r for r in rows if r["calls"] == base["calls"] and r["turns"] > base["turns"]]
    if not wide or not long:
        raise ValueError("overhead needs a base shape, one with the same turns and more "
                         "calls, and one with the same calls and more turns (1x1,1x16,9x1)")
    w, n = wide[0], long[0]
    per_call = (own(w) - own(base)) / (base["turns"] * (w["calls"] - base["calls"]))
    extra_turns = n["turns"] - base["turns"]
    per_turn = (own(n) - own(base) - per_call * extra_turns * base["calls"]) / extra_turns
    return per_call * 1e6, per_turn * 1e6


def run_timing(system: System, scratch: Path, reps: int, shapes: str) -> dict[str, Any]:
    scratch.mkdir(parents=True, exist_ok=True)
    with FakeOpenAI([responder("timing")] * 100_000) as server:
        env = {**os.environ, "OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "test",
               "CRASH_STATE": str(scratch), "CRASH_REPS": str(reps), "CRASH_SHAPES": shapes,
               "CRASH_STORE": system.store}
        env.pop("CRASH_LEDGER", None)
        done = subprocess.run(system.argv("timing"), env=env, cwd=DRIVERS, capture_output=True,
                              text=True, timeout=600)
    events = [json.loads(ln) for ln in done.stdout.splitlines() if ln.startswith("{")]
    rows = next((e["rows"] for e in events if e["event"] == "timing"), None)
    if rows is None:
        tail = (done.stderr.strip().splitlines() or ["?"])[-1]
        return {"error": tail[:160]}
    per_call, per_turn = overhead(rows)
    return {"rows": rows, "per_call_us": per_call, "per_turn_us": per_turn}


# --------------------------------------------------------------------------- tables
def cell_row(system: System, scenario: str, cell: Cell) -> list[str]:
    requests = " + ".join(str(n) for n in cell.requests)
    ledger = f"{cell.ledger.get('lookup_order', 0)} / {cell.ledger.get('refund', 0)}"
    return [system.label, scenario, requests, ledger, " → ".join(cell.says),
            "; ".join(cell.notes)]


CELL_HEADER = ["system", "scenario", "model requests", "ledger lookup / refund",
               "what the run says (→ after a kill: the resumed run)", "notes"]
TIMING_HEADER = ["system", "shape", "wall ms", "model ms", "own ms", "µs per call",
                 "µs per turn"]


def timing_rows(system: System, timing: dict[str, Any]) -> list[list[str]]:
    label = system.label + (f" ({system.store})" if system.driver == "chainlab_agent.py" else "")
    if "error" in timing:
        return [[label, "-", "-", "-", "-", timing["error"], ""]]
    out = []
    for i, r in enumerate(timing["rows"]):
        own = (r["wall_s"] - r["model_s"]) * 1e3
        out.append([label, f"{r['turns']}x{r['calls']}", f"{r['wall_s'] * 1e3:.1f}",
                    f"{r['model_s'] * 1e3:.1f}", f"{own:.1f}",
                    f"{timing['per_call_us']:.0f}" if i == 0 else "",
                    f"{timing['per_turn_us']:.0f}" if i == 0 else ""])
    return out


def text_table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows, strict=False)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    return "\n".join([fmt.format(*header), fmt.format(*("-" * w for w in widths)),
                      *(fmt.format(*row) for row in rows)])


def md_table(header: list[str], rows: list[list[str]]) -> str:
    def esc(x: str) -> str:
        return str(x).replace("|", "\\|")
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(esc(x) for x in row) + " |" for row in rows]
    return "\n".join(lines)


# --------------------------------------------------------------------------- main
def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--systems", default=",".join(s.name for s in SYSTEMS))
    p.add_argument("--scenarios", default=",".join(SCENARIOS))
    p.add_argument("--md", help="also write the tables as markdown to this file")
    p.add_argument("--no-timing", action="store_true")
    p.add_argument("--reps", type=int, default=9)
    p.add_argument("--shapes", default="1x1,1x16,9x1")
    p.add_argument("--install", action="store_true", help="pip install -r in existing venvs")
    p.add_argument("--keep", action="store_true", help="keep the scratch folder")
    ns = p.parse_args(argv)
    wanted = ns.systems.split(",")
    systems = [s for s in SYSTEMS if s.name in wanted]
    unknown = set(wanted) - {s.name for s in SYSTEMS}
    if unknown:
        p.error(f"unknown systems {sorted(unknown)}; choose from {[s.name for s in SYSTEMS]}")
    scenarios = ns.scenarios.split(",")
    if set(scenarios) - set(SCENARIOS):
        p.error(f"unknown scenarios {sorted(set(scenarios) - set(SCENARIOS))}; "
                f"choose from {list(SCENARIOS)}")
    for peer in sorted({s.peer for s in systems if s.peer}):
        ensure_venv(peer, ns.install)
    scratch = Path(tempfile.mkdtemp(prefix="crash-matrix-"))
    load_before = os.getloadavg()
    started = datetime.datetime.now(datetime.UTC)
    rows: list[list[str]] = []
    skipped: list[str] = []
    versions: dict[str, dict[str, Any]] = {}
    timings: list[list[str]] = []
    try:
        for system in systems:
            why = converter_missing(system)
            if why:
                skipped.append(f"{system.label}: {why}")
                print(f"# {system.label}: {why}", flush=True)
                continue
            for scenario in scenarios:
                cell = run_cell(system, scenario, scratch / system.name / scenario)
                versions.setdefault(system.label, cell.versions)
                rows.append(cell_row(system, scenario, cell))
                print(" | ".join(rows[-1]), flush=True)
        if not ns.no_timing:
            for system in systems:
                if converter_missing(system):
                    continue
                variants = [system]
                if system.name == "chainlab":
                    variants.append(System(system.name, system.label, system.driver,
                                           store="sqlite"))
                for variant in variants:
                    t = run_timing(variant, scratch / "timing" / variant.name / variant.store,
                                   ns.reps, ns.shapes)
                    timings += timing_rows(variant, t)
    finally:
        if not ns.keep:
            shutil.rmtree(scratch, ignore_errors=True)
    load_after = os.getloadavg()
    head = (f"crash matrix, {started:%Y-%m-%d %H:%M} UTC, {platform.node()} "
            f"({os.cpu_count()} cores), load average {load_before[0]:.2f} before, "
            f"{load_after[0]:.2f} after")
    vlines = [f"{label}: " + ", ".join(f"{k} {v}" for k, v in sorted(vs.items()))
              for label, vs in versions.items()]
    print("\n" + head)
    print(text_table(CELL_HEADER, rows))
    if timings:
        print(f"\noverhead per tool call and per model turn (model time excluded), fastest of "
              f"{ns.reps} runs after a warm-up, shapes {ns.shapes} (turns x calls per turn)")
        print(text_table(TIMING_HEADER, timings))
    print("\nversions:\n" + "\n".join(vlines))
    for line in skipped:
        print(line)
    if ns.md:
        parts = [f"_{head}_", "", md_table(CELL_HEADER, rows)]
        if timings:
            parts += ["", f"Overhead (model time excluded; fastest of {ns.reps} runs, shapes "
                      f"{ns.shapes}):", "", md_table(TIMING_HEADER, timings)]
        parts += ["", "Versions: " + "; ".join(vlines)] + [f"\n{s}" for s in skipped]
        Path(ns.md).write_text("\n".join(parts) + "\n")


if __name__ == "__main__":
    main()
