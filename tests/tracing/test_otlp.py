"""Spans over OTLP/HTTP to a real receiver (:class:`chainlab.testing.otlp_receiver.
OtlpReceiver`, protobuf decoded with opentelemetry-proto): ``chainlab run --otlp``, the
``OTEL_EXPORTER_OTLP_ENDPOINT`` variable, ``chainlab serve --otlp`` with an incoming
``traceparent`` (and one that does not parse), and an endpoint that is down: spans dropped
with ONE warning, the run goes on."""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult

from chainlab.testing.otlp_receiver import OtlpReceiver
from chainlab.tracing import parse_traceparent
from chainlab.tracing.context import kept_parent
from chainlab.tracing.otlp import DroppingExporter, traces_url
from tests.http.server import Server

ROOT = Path(__file__).resolve().parents[2]
CHAIN = """name: traced
steps:
  - {id: a, tool: fetch, args: {n: 2}}
  - {id: c, tool: fetch, args: {n: "{{ steps.a.output }}"}}
"""
PARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

pytestmark = pytest.mark.xdist_group("http-server")


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cli_run(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    chain = tmp_path / "chain.yaml"
    if not chain.exists():
        chain.write_text(CHAIN)
    clean = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    return subprocess.run(
        [sys.executable, "-m", "chainlab", "run", str(chain), "--tools",
         "tests.tracing.tracedtools:toolbox", "--db", str(tmp_path / "runs.db"), "-q", *args],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
        env={**clean, "PYTHONPATH": str(ROOT), **env})


def test_chainlab_run_otlp_sends_the_runs_trace(tmp_path: Path) -> None:
    with OtlpReceiver() as receiver:
        done = cli_run(tmp_path, "--otlp", receiver.url)
        assert done.returncode == 0, done.stderr
        spans = receiver.wait_for(lambda spans: any(s.name == "run traced" for s in spans))
    names = sorted(s.name for s in spans)
    assert names == ["run traced", "step a", "step c"]
    assert {s.resource["service.name"] for s in spans} == {"chainlab"}
    assert len({s.trace_id for s in spans}) == 1


def test_the_standard_variable_names_the_collector_too(tmp_path: Path) -> None:
    with OtlpReceiver() as receiver:
        done = cli_run(tmp_path, OTEL_EXPORTER_OTLP_ENDPOINT=receiver.url,
                       OTEL_SERVICE_NAME="billing")
        assert done.returncode == 0, done.stderr
        spans = receiver.wait_for(lambda spans: any(s.name == "run traced" for s in spans))
    assert {s.resource["service.name"] for s in spans} == {"billing"}


def test_a_run_approved_by_another_command_ends_its_trace_there(tmp_path: Path) -> None:
    """``chainlab run`` suspends at a confirmation (exit 3); ``chainlab approve`` in another
    process drives the run on and ends it: the same trace, its root from the approver."""
    chain = tmp_path / "chain.yaml"
    chain.write_text("name: traced\nsteps:\n  - {id: a, tool: fetch, args: {n: 2}}\n"
                     "  - {id: p, tool: pay, args: {n: 3}, depends_on: [a]}\n")
    with OtlpReceiver() as receiver:
        done = cli_run(tmp_path, "--json", OTEL_EXPORTER_OTLP_ENDPOINT=receiver.url)
        assert done.returncode == 3, done.stderr
        run_id = json.loads(done.stdout)["run_id"]
        clean = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
        approved = subprocess.run(
            [sys.executable, "-m", "chainlab", "approve", run_id, "p", "--db",
             str(tmp_path / "runs.db"), "-t", "tests.tracing.tracedtools:toolbox"],
            capture_output=True, text=True, timeout=120, cwd=ROOT,
            env={**clean, "PYTHONPATH": str(ROOT), "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url})
        assert approved.returncode == 0, approved.stderr
        spans = receiver.wait_for(lambda spans: any(s.name == "run traced" for s in spans))
    [root] = [s for s in spans if s.name == "run traced"]
    assert sorted(s.name for s in spans) == ["run traced", "step a", "step p"]
    assert {s.trace_id for s in spans} == {root.trace_id}
    assert all(s.parent_span_id == root.span_id for s in spans if s is not root)
    by = {s.name: s.resource["process.pid"] for s in spans}
    assert by["step a"] != by["step p"] == by["run traced"]
    assert [e for e in root.events if e[0] == "chainlab.decision"]


def test_an_endpoint_that_is_down_costs_one_warning_and_the_run_goes_on(
        tmp_path: Path) -> None:
    done = cli_run(tmp_path, "--otlp", f"http://127.0.0.1:{closed_port()}")
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("did not take") == 1, done.stderr
    assert "Traceback" not in done.stderr
    # a second run against the same dead endpoint: a new process, again one warning
    again = cli_run(tmp_path, "--otlp", f"http://127.0.0.1:{closed_port()}")
    assert again.returncode == 0 and again.stderr.count("did not take") == 1


def test_a_bad_otlp_url_is_refused_with_the_fix(tmp_path: Path) -> None:
    done = cli_run(tmp_path, "--otlp", "localhost:4318")
    assert done.returncode != 0
    assert "is not an http(s) URL" in done.stderr and "http://localhost:4318" in done.stderr
    assert traces_url("http://c:4318") == "http://c:4318/v1/traces"
    assert traces_url("http://c:4318/") == "http://c:4318/v1/traces"
    assert traces_url("http://c:4318/custom/path") == "http://c:4318/custom/path"


def test_the_dropping_exporter_warns_once_per_outage_and_sends_again_after(
        caplog: Any) -> None:
    now = [0.0]
    with OtlpReceiver() as receiver:
        exporter = DroppingExporter(OTLPSpanExporter(traces_url(receiver.url), timeout=0.3),
                                    receiver.url, retry_after_s=30, clock=lambda: now[0])
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        tracer = provider.get_tracer("t")

        def span(name: str) -> None:
            tracer.start_span(name).end()

        caplog.set_level(logging.WARNING, logger="chainlab.tracing")
        receiver.down()
        span("lost-1")
        span("lost-2")  # within the pause: dropped without trying
        requests = receiver.requests
        span("lost-3")
        assert receiver.requests == requests  # nothing was sent
        assert exporter.dropped == 3
        receiver.up()
        now[0] = 31.0  # the pause is over: tried again, and it answers
        span("kept")
        receiver.down()
        now[0] = 100.0
        span("lost-4")  # a new outage: a new warning
        provider.shutdown()
        names = [s.name for s in receiver.received()]
    assert names == ["kept"]
    warnings = [r for r in caplog.records if "did not take" in r.getMessage()]
    assert len(warnings) == 2
    assert exporter.export([]) in (SpanExportResult.FAILURE, SpanExportResult.SUCCESS)


def test_a_traceparent_that_does_not_parse_is_dropped_with_one_warning(caplog: Any) -> None:
    caplog.set_level(logging.WARNING, logger="chainlab.tracing")
    assert kept_parent({"traceparent": PARENT, "x": 1}) == {"traceparent": PARENT, "x": 1}
    for bad in ("00-xyz", "ff-" + PARENT[3:], "00-" + "0" * 32 + PARENT[35:],
                PARENT.upper(), 42):
        caplog.clear()
        assert kept_parent({"traceparent": bad, "x": 1}) == {"x": 1}
        assert len(caplog.records) == 1 and "not a W3C traceparent" in caplog.text
    parent = parse_traceparent(PARENT)
    assert parent is not None and parent.header() == PARENT


def test_post_runs_continues_the_callers_trace_and_ignores_one_that_does_not_parse(
        tmp_path: Path) -> None:
    with OtlpReceiver() as receiver:
        server = Server(tmp_path, args=("--otlp", receiver.url, "--no-access-log")).start()
        try:
            headers = {"Authorization": f"Bearer {server.token}"}
            good = httpx.post(f"{server.url}/runs", json={"chain": "quick"},
                              headers={**headers, "traceparent": PARENT}, timeout=30)
            bad = httpx.post(f"{server.url}/runs", json={"chain": "quick"},
                             headers={**headers, "traceparent": "00-not-a-parent"},
                             timeout=30)
            assert good.status_code == bad.status_code == 201, (good.text, bad.text)
            spans = receiver.wait_for(
                lambda spans: sum(s.name == "run quick" for s in spans) == 2, 60)
        finally:
            server.stop()
    roots = {s.attributes["chainlab.run.id"]: s for s in spans if s.name == "run quick"}
    continued, fresh = roots[good.json()["run_id"]], roots[bad.json()["run_id"]]
    assert continued.trace_id == 0x4BF92F3577B34DA6A3CE929D0E0E4736
    assert continued.parent_span_id == 0x00F067AA0BA902B7
    assert fresh.parent_span_id is None and fresh.trace_id != continued.trace_id
    assert server.log().count("not a W3C traceparent") == 1, server.log()
