"""What converting an agent of another SDK needs, whichever the SDK (one place for each rule):

* :func:`check_version`: the SDK's version is in the range chainlab supports;
* :func:`agent_name`: the chainlab agent's name (its step id and tool prefix);
* :func:`contracts`: each tool's side-effect contract, from ``tools={...}``, else the tool's
  own metadata, else the safe default: side-effecting and not idempotent;
* :class:`ConvertedTool`: a tool of the SDK as a chainlab tool (``NAME.TOOL``): its JSON
  Schema unchanged, its body the SDK's own call of the function, given the call's context;
* :class:`PerRun`: a ``deps=`` / ``context=`` factory called once per run (and process);
* :func:`model_failure`: what a provider raised, as the transient or permanent failure the
  step's retry policy reads, naming the provider and the model.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from chainlab._json import code_fingerprint
from chainlab._text import did_you_mean, safe_repr
from chainlab.agent.model import status_error
from chainlab.agent.modes import one_line
from chainlab.errors import (
    AgentConversionError,
    PermanentError,
    ToolDefinitionError,
    ToolError,
    TransientError,
)
from chainlab.plan.parts import STEP_ID_PATTERN
from chainlab.tools import CallContext
from chainlab.tools.schema_tool import SchemaTool

__all__ = ["CONTRACT_KEYS", "CONTRACT_METADATA_KEY", "ConvertedTool", "PerRun", "agent_name",
           "check_version", "contracts", "model_failure", "own_compensation", "unique_tools",
           "version_tuple"]

#: the keys of a tool's contract ``tools={"NAME": {...}}`` may give (the Tool's metadata)
CONTRACT_KEYS = frozenset({
    "side_effects", "idempotent", "compensate", "requires_confirmation", "preview",
    "serial_key", "parallel_safe", "resources", "reconcile", "retry", "timeout_s",
    "expected_duration_s"})
#: the key of a tool's own metadata (Pydantic AI's ``metadata=``) that holds its contract
CONTRACT_METADATA_KEY = "chainlab"
#: the keyword under which the runtime hands a converted tool's body its CallContext
_CALL = "__chainlab_call__"
_NOT_NAME = re.compile(r"[^A-Za-z0-9_-]+")


def version_tuple(text: str) -> tuple[int, ...]:
    """``"2.78.0"`` -> ``(2, 78, 0)`` (a pre-release's suffix is left out)."""
    out = []
    for part in text.split("."):
        digits = re.match(r"\d+", part)
        if digits is None:
            break
        out.append(int(digits.group()))
    return tuple(out)


def check_version(sdk: str, version: str, low: tuple[int, ...], high: tuple[int, ...],
                  extra: str) -> None:
    """Raise AgentConversionError unless ``low <= version < high``, naming the range and
    how to install a supported version."""
    found = version_tuple(version)
    if low <= found < high:
        return
    want = f">={'.'.join(map(str, low))},<{'.'.join(map(str, high))}"
    raise AgentConversionError(
        f"of {sdk} {version}", f"chainlab converts agents of {sdk} {want} only (the versions "
        "it is tested with)", f'install a supported one: pip install "chainlab[{extra}]"')


def agent_name(given: str | None, sdk_name: str | None, what: str) -> str:
    """The chainlab agent's name: ``given`` (checked), else the SDK agent's name made a step
    id (``"Refund agent"`` -> ``refund_agent``). Raises AgentConversionError when there is
    none, or ``given`` is not one."""
    if given is not None:
        if not isinstance(given, str) or len(given) > 100 \
                or not re.fullmatch(STEP_ID_PATTERN, given):
            raise AgentConversionError(what, f"name={safe_repr(given)} is not a step id",
                                       "pass letters, digits, '_' and '-' only (at most 100)")
        return given
    slug = _NOT_NAME.sub("_", (sdk_name or "").strip()).strip("_").lower()[:100]
    if not slug:
        raise AgentConversionError(what, "the agent has no name", "pass name='support' (its "
                                   "step's id and the prefix of its tools)")
    return slug


def contracts(spec: Mapping[str, Any] | None, sdk: Mapping[str, Mapping[str, Any]],
              metadata: Mapping[str, Any], what: str) -> dict[str, dict[str, Any]]:
    """Each tool's contract (Tool keywords) by its SDK name, from (first found) ``spec[name]``
    (the ``tools=`` argument), the tool's own metadata (``metadata[name]``: what it holds
    under :data:`CONTRACT_METADATA_KEY`), what its SDK says (``sdk[name]``: an approval,
    sequential, a timeout), else the safe default: side-effecting and not idempotent.
    Raises AgentConversionError for a name the agent has no tool of, a key that is no
    contract key, or ``requires_confirmation=False`` for a tool its SDK makes ask."""
    spec = {} if spec is None else spec
    if not isinstance(spec, Mapping):
        raise AgentConversionError(what, f"tools={safe_repr(spec)} is not a mapping",
                                   'pass tools={"TOOL": {"side_effects": False}, ...}')
    unknown = [name for name in spec if name not in sdk]
    if unknown:
        raise AgentConversionError(
            what, f"tools={{...}} describes {unknown[0]!r}, which the agent has no tool of"
            f"{did_you_mean(str(unknown[0]), sdk)}",
            f"describe its tools by their names: {', '.join(sdk) or 'it has none'}")
    out: dict[str, dict[str, Any]] = {}
    for name, says in sdk.items():
        given = _checked(spec.get(name), f"tools[{name!r}]", what)
        own = _checked(metadata.get(name), f"the metadata[{CONTRACT_METADATA_KEY!r}] of tool "
                       f"{name!r}", what)
        merged = {**{k: v for k, v in says.items() if v is not None}, **own, **given}
        if says.get("requires_confirmation") and merged["requires_confirmation"] is False:
            raise AgentConversionError(
                what, f"tool {name!r} is described with requires_confirmation=False, but it "
                "requires approval in its own SDK", "leave requires_confirmation out: "
                "chainlab keeps the approval the tool asks for")
        if "side_effects" not in merged:  # nobody said: it may change the world, once only
            merged["side_effects"] = True
            merged.setdefault("idempotent", False)
        out[name] = merged
    return out


def _checked(given: Any, where: str, what: str) -> dict[str, Any]:
    if given is None:
        return {}
    if not isinstance(given, Mapping):
        raise AgentConversionError(what, f"{where} is {safe_repr(given)}",
                                   "describe a tool with a dict of contract keys")
    bad = sorted(set(given) - CONTRACT_KEYS)
    if bad:
        raise AgentConversionError(
            what, f"{where} has {bad[0]!r}, which is no contract key"
            f"{did_you_mean(str(bad[0]), CONTRACT_KEYS)}",
            f"use {', '.join(sorted(CONTRACT_KEYS))}")
    return dict(given)


class ConvertedTool(SchemaTool):
    """A tool of another SDK as a chainlab tool: its JSON Schema unchanged, its body
    ``call(context, args)`` (the SDK's own validation and call of the function), given the
    call's :class:`~chainlab.tools.CallContext`. ``origin`` says which SDK and agent it
    comes from (shown beside it), ``label`` names the agent in an error; its code
    fingerprint follows the function's code."""

    __slots__ = ("function",)

    def __init__(self, call: Callable[[CallContext, dict[str, Any]], Awaitable[Any]], *,
                 name: str, description: str, input_schema: Mapping[str, Any],
                 function: Callable[..., Any] | None, origin: str, label: str,
                 **contract: Any):
        async def body(**kwargs: Any) -> Any:
            context = kwargs.pop(_CALL)
            return await call(context, kwargs)

        body.__name__ = body.__qualname__ = name
        try:
            super().__init__(body, name=name, description=description,
                             input_schema=input_schema, origin=origin,
                             fingerprint_parts=[name, dict(input_schema),
                                                code_fingerprint(function) if function
                                                else None], **contract)
        except ToolDefinitionError as exc:
            raise AgentConversionError(label, f"its tool {name.split('.', 1)[-1]!r} "
                                       f"cannot be a chainlab tool: {exc}",
                                       "fix the tool's schema or its contract in "
                                       "tools={...}") from None
        self.function = function
        self.context_param = _CALL  # the runtime passes the call's context under it


class PerRun:
    """A factory (``deps=``, ``context=``) called once per run in this process (the last
    ``keep`` runs are remembered: a resumed run in another process calls it again). A
    factory that raises makes the call fail before the tool is called, naming it."""

    def __init__(self, factory: Callable[[], Any] | None, what: str, agent: str,
                 keep: int = 64):
        if factory is not None and not callable(factory):
            raise AgentConversionError(agent, f"{what}={safe_repr(factory)} is not a factory",
                                       f"pass {what}=a callable with no arguments that makes "
                                       "one (it is called once per run)")
        self.factory = factory
        self.what = what
        self.keep = keep
        self._made: OrderedDict[str, Any] = OrderedDict()

    def make(self, what: str) -> Any:
        """A new value, not remembered (for a check that runs outside a tool call: an
        OpenAI Agents SDK guardrail). Raises PermanentError when the factory raises."""
        if self.factory is None:
            return None
        return self._call(what)

    def get(self, run_id: str, tool: str) -> Any:
        """The run's value (made on first use). Raises PermanentError (``before_effect``:
        the tool was not called) when the factory raises."""
        if self.factory is None:
            return None
        if run_id in self._made:
            self._made.move_to_end(run_id)
            return self._made[run_id]
        value = self._call(tool)
        self._made[run_id] = value
        while len(self._made) > self.keep:
            self._made.popitem(last=False)
        return value

    def _call(self, what: str) -> Any:
        assert self.factory is not None
        try:
            return self.factory()
        except Exception as exc:
            name = getattr(self.factory, "__qualname__", None) or safe_repr(self.factory)
            raise PermanentError(f"the {self.what} factory {name} raised "
                                 f"{type(exc).__name__}: {one_line(exc)}; {what} was not "
                                 "called", before_effect=True) from None


def model_failure(exc: BaseException, provider: str, model: str) -> ToolError:
    """``exc`` (what a provider's model raised) as the failure the step's retry policy reads,
    the message naming the provider and the model: an HTTP status by the rule every model
    request follows (:func:`chainlab.agent.model.status_error`), a connection error or a
    timeout transient, anything else permanent."""
    said = f"{provider} model {model!r}"
    status = getattr(exc, "status_code", None)
    text = one_line(getattr(exc, "message", None) or exc)
    if isinstance(status, int) and not isinstance(status, bool):
        return status_error(status, f"{said} answered HTTP {status}: {text}")
    names = {cls.__name__ for cls in type(exc).__mro__}
    if isinstance(exc, TimeoutError | ConnectionError) or names & _TRANSIENT_CLASSES:
        return TransientError(f"{said}: cannot be reached ({type(exc).__name__}: {text})")
    return PermanentError(f"{said}: {type(exc).__name__}: {text}")


#: exception classes (by name: the SDKs are not imported here) that say the provider is
#: down, busy or slow: the openai client's and Pydantic AI's
_TRANSIENT_CLASSES = frozenset({
    "APIConnectionError", "APITimeoutError", "ModelConnectionError", "ModelTimeoutError",
    "ModelRequestTimeout", "ModelRateLimitError", "ModelUnavailableError",
    "ModelServerError"})


def own_compensation(contract: Mapping[str, Any], names: Mapping[str, str]
                     ) -> dict[str, Any]:
    """``contract`` with a ``compensate`` that names one of the agent's own tools by its SDK
    name (``"cancel_refund"``) pointed at that tool's chainlab name
    (``"support.cancel_refund"``); a toolbox tool's name is kept."""
    undo = contract.get("compensate")
    if isinstance(undo, str) and undo in names:
        undo = names[undo]
    elif isinstance(undo, tuple) and len(undo) == 2 and undo[0] in names:
        undo = (names[undo[0]], undo[1])
    elif isinstance(undo, Mapping) and undo.get("tool") in names:
        undo = {**undo, "tool": names[undo["tool"]]}
    else:
        return dict(contract)
    return {**contract, "compensate": undo}


def unique_tools(pairs: Sequence[tuple[str, Any]], what: str, where: str) -> dict[str, Any]:
    """``{name: tool}`` from ``(name, tool)`` pairs. Raises AgentConversionError for two
    tools of one name (the model could not tell them apart)."""
    out: dict[str, Any] = {}
    for name, tool in pairs:
        if name in out:
            raise AgentConversionError(what, f"two tools are named {name!r} ({where})",
                                       "rename one (the model calls a tool by its name)")
        out[name] = tool
    return out
