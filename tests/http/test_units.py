"""The pieces of chainlab.http that need no server: the error mapping (complete), the
context's JSON Schema, who decided, the decision recorded with its author, the client's
reading of an error, and the missing extra named."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import chainlab.errors as errors
from chainlab import MemoryStore, Runtime
from chainlab.events import EventKind
from chainlab.http import ApiError
from chainlab.http.chains import context_schema
from chainlab.http.errors import api_error
from chainlab.plan.schema import Chain
from tests.http.served_tools import toolbox

#: the status each chainlab error gets (a new error class must be added here, and mapped)
EXPECTED = {
    "PlanError": 422, "CycleError": 422, "InputError": 422, "UsageError": 400, "CliError": 400,
    "SessionError": 400, "ArgsError": 400, "RunNotFoundError": 404, "UnknownStepError": 404,
    "UnknownChainStepError": 404, "DecisionTimeoutError": 504, "DriverAliveError": 409,
    "ApproverError": 403,
    "RunNotActiveError": 409, "RunStateError": 409, "InvalidTransition": 409,
    "StaleEpochError": 409, "StoreError": 503, "StoreFileError": 503,
    "StoreServerError": 503, "MissingExtraError": 503, "DecisionError": 409,
    "IdempotencyKeyError": 422, "RunExistsError": 409, "NotJSONError": 400,
    "CredentialInURLError": 400, "ExperimentError": 422, "ExperimentNotFoundError": 404,
    "RedactionError": 422,
}
#: never a client's doing (a tool's own errors stay in the run; a bug is a 500)
NOT_MAPPED = {"ChainlabError", "ToolDefinitionError", "UnknownToolError", "ToolError",
              "TransientError", "PermanentError", "PlannerError", "DesignerError",
              # a server's toolbox is built at start: no request can meet an MCP server error,
              # nor a conversion's (a run's --from agent that fails to load is a UsageError)
              "MCPServerError", "AgentConversionError",
              # replay (chainlab.testing): a test's errors, never an HTTP request's
              "ReplayError", "ReplayMismatch", "_Replayed",
              # a guardrail's failure fails its step: the run keeps it, no request meets it
              "GuardrailError"}


def _all_errors() -> list[type[BaseException]]:
    import chainlab.cli.common  # (CliError)
    import chainlab.jupyter  # noqa: F401

    seen: set[type[BaseException]] = set()
    todo: list[type[BaseException]] = [errors.ChainlabError]
    while todo:
        cls = todo.pop()
        if cls not in seen:
            seen.add(cls)
            todo += cls.__subclasses__()
    return sorted((c for c in seen if c.__module__.startswith("chainlab")
                   and c is not ApiError and not c.__name__.startswith("Graphviz")),
                  key=lambda c: c.__name__)


def _instance(cls: type[BaseException]) -> BaseException:
    made = {
        "DecisionError": lambda: cls("x", step_id="s", field="approve"),
        "ApproverError": lambda: cls("x", step_id="s", by="bob", roles=("support",),
                                     required=("finance",)),
        "DecisionTimeoutError": lambda: cls("r", host="h", pid=1, request_id=1, timeout_s=1),
        "DriverAliveError": lambda: cls("r", host="h", pid=1, epoch=1, beat_age_s=0,
                                        stale_in_s=1),
        "StaleEpochError": lambda: cls("r", 1, 2),
        "RunNotFoundError": lambda: cls("r"),
        "ExperimentNotFoundError": lambda: cls("e"),
        "ExperimentError": lambda: cls(["a problem"]),
        "RunExistsError": lambda: cls("r"),
        "IdempotencyKeyError": lambda: cls("k", "r"),
        "UnknownStepError": lambda: cls("s", []),
        "UnknownChainStepError": lambda: cls("s", []),
        "UnknownToolError": lambda: cls("t", []),
        "StoreFileError": lambda: cls("p", "gone", "m", "f"),
        "StoreServerError": lambda: cls("w", "server", "m", "f"),
        "MissingExtraError": lambda: cls("p", "e", "f"),
        "MCPServerError": lambda: cls("python -m srv", "exits at once", "run it by hand"),
        "AgentConversionError": lambda: cls("'support'", "a hosted tool", "leave it out"),
        "PlanError": lambda: cls([errors.Problem("invalid_field", "m")]),
        "InputError": lambda: cls([errors.Problem("missing_input", "m")]),
        "CycleError": lambda: cls([errors.Problem("cycle", "m")], ["a", "a"]),
        "NotJSONError": lambda: cls("context.x", float("nan"), "not a JSON number"),
        "CredentialInURLError": lambda: cls("base_url", "the query parameter 'api-key'"),
        "RedactionError": lambda: cls("m", redactor="mask", field="context"),
        "GuardrailError": lambda: cls("m", guardrail="g"),
    }
    if cls.__name__ in made:
        return made[cls.__name__]()
    return cls("message")


@pytest.mark.parametrize("cls", _all_errors(), ids=lambda c: c.__name__)
def test_every_chainlab_error_has_its_status(cls: type[BaseException]) -> None:
    error = api_error(_instance(cls))
    if cls.__name__ in NOT_MAPPED:
        assert error is None
        return
    assert cls.__name__ in EXPECTED, f"map {cls.__name__} in chainlab.http.errors"
    assert error is not None and error.status == EXPECTED[cls.__name__]
    assert error.body()["message"]


def test_a_decision_error_about_args_is_422_and_a_refusal_is_409() -> None:
    bad_args = errors.DecisionError("bad", step_id="s", field="args")
    assert api_error(bad_args).status == 422  # type: ignore[union-attr]
    refused = errors.DecisionError("it is running", step_id="s", field="approve")
    assert api_error(refused).status == 409  # type: ignore[union-attr]


def test_the_error_shape_round_trips_through_the_client() -> None:
    sent = ApiError(422, "invalid_chain", "chain 'x' has 1 problem", fix="fix it",
                    problems=[{"code": "cycle", "message": "a -> a"}], extra={"step_id": "a"})
    got = ApiError.from_body(422, sent.body())
    assert (got.status, got.error, got.message, got.fix, got.problems, got.extra) == \
        (422, "invalid_chain", sent.message, "fix it", sent.problems, {"step_id": "a"})
    assert "[cycle] a -> a" in str(got)
    proxy = ApiError.from_body(502, "<html>Bad Gateway</html>")
    assert proxy.error == "http_502" and "Bad Gateway" in proxy.message


def test_the_context_schema_takes_each_key_from_where_it_is_used() -> None:
    chain = Chain.from_dict({"name": "c", "steps": [
        {"id": "a", "tool": "add", "args": {"a": "{{ context.n }}", "b": 1}},
        {"id": "p", "tool": "pay", "args": {"to": "to {{ context.who }}",
                                           "amount": "{{ context.cost.total }}"},
         "when": "context.go == true"}]})
    schema = context_schema(chain, toolbox)
    assert schema["required"] == ["cost", "go", "n", "who"]
    assert schema["properties"]["n"]["type"] == "integer"  # passed whole to add(a: int)
    assert "type" not in schema["properties"]["who"]  # interpolated into text: anything
    assert "type" not in schema["properties"]["cost"]  # a path into it: an object
    assert schema["properties"]["go"]["description"] == "used by p.when"


def test_the_context_schema_of_a_chain_with_declared_inputs_is_their_schema() -> None:
    chain = Chain.from_dict({"name": "c", "inputs": {
        "n": {"type": "integer", "description": "how many"}, "b": {"default": 1}},
        "steps": [{"id": "a", "tool": "add", "args": {"a": "{{ context.n }}",
                                                     "b": "{{ context.b }}"}}]})
    schema = context_schema(chain, toolbox)
    assert schema == {"type": "object", "additionalProperties": False, "required": ["n"],
                      "properties": {"n": {"type": "integer", "description": "how many"},
                                     "b": {"default": 1}}}


@pytest.mark.anyio
async def test_a_decision_records_who_took_it(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # (pay writes effects.jsonl in the working directory)
    chain = Chain.from_dict({"name": "c", "steps": [
        {"id": "p", "tool": "pay", "args": {"to": "x", "amount": 1}},
        {"id": "q", "tool": "pay", "args": {"to": "y", "amount": 2}}]})
    async with Runtime(toolbox, MemoryStore()) as runtime:
        run = await runtime.start(chain)
        await run.wait()
        await runtime.decide(run.run_id, "p", "reject", reason="no", by="dave")
        await run.approve("q", by="erin")
        await run.wait()
        by = {e.step_id: e.payload.get("by") for e in run.event_list()
              if e.kind in (EventKind.STEP_APPROVED, EventKind.STEP_REJECTED)}
        assert by == {"p": "dave", "q": "erin"}
        assert run.steps["q"].approval["by"] == "erin"  # type: ignore[index]


def test_without_the_server_extra_one_line_names_it(tmp_path: object) -> None:
    code = ("import sys; sys.modules['uvicorn'] = None; sys.argv = ['chainlab', 'serve', "
            "'--tools', 'served_tools:toolbox', '--db', ':memory:']\n"
            "from chainlab.cli import main; main()")
    from tests.http.server import HERE, env

    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env(), cwd=HERE, timeout=60)
    assert done.returncode == 2, done.stderr
    assert 'pip install "chainlab[server]"' in done.stderr and "Traceback" not in done.stderr
