"""The tool contract: ``Toolbox``, ``@toolbox.tool(...)``, side-effect metadata, call context.

A tool is a sync or async function. Its input schema comes from the signature and its output
schema from the return annotation (pydantic). The metadata is a machine-readable side-effect
contract that the runtime obeys:

=========================  ================================================================
``side_effects``           the call changes the world
``idempotent``             repeating it with the same args is harmless (default: not
                           ``side_effects``)
``requires_confirmation``  bool, or a callable on the args: suspend before the call until a
                           person approves
``preview``                callable on the args: what the approver sees (default: the args)
``serial_key``             ``"table:{table_id}"``: two steps with the same resolved key never
                           overlap
``parallel_safe=False``    same as ``serial_key`` = the tool's name
``resources``              ``{"llm": 1}``: units drawn from named pools (capacities are run
                           options)
``compensate``             saga compensation: ``("delete_records", {"ids": "{{ output.ids }}"})``
``reconcile``              ``fn(args, idempotency_key) -> Reconciliation | None``: did an
                           interrupted call take effect?
``retry`` / ``timeout_s``  defaults for steps that use the tool
=========================  ================================================================

A tool that declares a parameter annotated :class:`CallContext` receives the run id, step id,
attempt number and the idempotency key (stable across retries and recovery) in it.
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import json
import math
import string
import typing
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, create_model
from pydantic.fields import FieldInfo
from pydantic_core import PydanticSerializationError

from chainlab._text import did_you_mean, safe_repr
from chainlab.errors import ToolDefinitionError, UnknownToolError
from chainlab.plan.schema import Chain, RetryPolicy, Rollback

__all__ = [
    "CallContext",
    "Reconciliation",
    "Tool",
    "Toolbox",
    "args_hash",
    "default_toolbox",
    "idempotency_key",
    "to_json_value",
    "tool",
]


class CallContext(NamedTuple):
    """What a tool body may know about the call it is serving (immutable; a named tuple:
    one is built per call)."""

    run_id: str
    step_id: str
    attempt: int
    idempotency_key: str
    epoch: int = 0
    kind: Literal["call", "compensation"] = "call"


@dataclass(frozen=True, slots=True)
class Reconciliation:
    """A ``reconcile`` callable's answer: did the interrupted call take effect?"""

    applied: bool
    output: Any = None

    @classmethod
    def took_effect(cls, output: Any = None) -> Reconciliation:
        """The call happened; ``output`` becomes the step's output."""
        return cls(True, output)

    @classmethod
    def no_effect(cls) -> Reconciliation:
        """The call never happened; running it again is safe."""
        return cls(False)


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def args_hash(args: Mapping[str, Any]) -> str:
    """A stable hash of resolved args (canonical JSON, sha256, 16 hex chars)."""
    return hashlib.sha256(_canonical(args).encode()).hexdigest()[:16]


def idempotency_key(run_id: str, step_id: str, args_digest: str, kind: str = "call") -> str:
    """The key of one logical call: the same across retries and recovery of that call."""
    raw = f"{run_id}\x1f{step_id}\x1f{args_digest}\x1f{kind}"
    return hashlib.sha256(raw.encode()).hexdigest()[:32]


class NotJSONError(TypeError):
    """A value is not JSON data; ``.path`` says where."""

    def __init__(self, path: str, value: Any):
        self.path = path
        super().__init__(
            f"{path or 'the value'} is {type(value).__name__} {safe_repr(value)}, not JSON data"
        )


def to_json_value(value: Any, path: str = "") -> Any:
    """``value`` as plain JSON data: pydantic models dumped, tuples made lists.

    Raises :class:`NotJSONError` naming where the offending value sits.
    """
    if value is None or isinstance(value, str | bool | int):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise NotJSONError(path, value)
        return value
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise NotJSONError(f"{path}[{safe_repr(k)}] (key)", k)
            out[k] = to_json_value(v, f"{path}.{k}" if path else k)
        return out
    if isinstance(value, list | tuple):
        return [to_json_value(v, f"{path}[{i}]") for i, v in enumerate(value)]
    raise NotJSONError(path, value)


class _ArgsBase(BaseModel):
    # no protected namespaces: a parameter called model_name is an ordinary field here
    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True, protected_namespaces=())


class Tool:
    """A registered tool: the function plus its schemas and side-effect contract."""

    __slots__ = (
        "_aliases",
        "_check_out",
        "_field_adapters",
        "compensate",
        "context_param",
        "description",
        "expected_duration_s",
        "fingerprint",
        "fn",
        "idempotent",
        "input_model",
        "is_async",
        "name",
        "output_adapter",
        "parallel_safe",
        "params",
        "preview",
        "reconcile",
        "requires_confirmation",
        "resources",
        "retry",
        "serial_key",
        "side_effects",
        "timeout_s",
    )

    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        side_effects: bool = False,
        idempotent: bool | None = None,
        requires_confirmation: bool | Callable[[dict[str, Any]], bool] = False,
        preview: Callable[[dict[str, Any]], Any] | None = None,
        serial_key: str | None = None,
        parallel_safe: bool = True,
        resources: Mapping[str, int] | None = None,
        compensate: Rollback | Mapping[str, Any] | tuple[str, Mapping[str, Any]] | None = None,
        reconcile: Callable[[dict[str, Any], str], Reconciliation | None] | None = None,
        retry: RetryPolicy | Mapping[str, Any] | None = None,
        timeout_s: float | None = None,
        expected_duration_s: float | None = None,
    ):
        if not callable(fn):
            raise ToolDefinitionError(f"a tool must be a function, got {safe_repr(fn)}")
        self.fn = fn
        self.name = name or getattr(fn, "__name__", None) or ""
        if (
            not isinstance(self.name, str)
            or not self.name
            or not all(c.isalnum() or c in "_-." for c in self.name)
        ):
            raise ToolDefinitionError(
                f"tool name {safe_repr(self.name)} must be letters, digits, '_', '-' or '.'"
            )
        if self.name.startswith("chain:"):
            raise ToolDefinitionError("tool names may not start with 'chain:' (sub-chains)")
        self.description = (description or inspect.getdoc(fn) or "").strip()
        # a callable object with an async __call__ counts as async too
        self.is_async = inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
            type(fn).__call__ if not inspect.isroutine(fn) else None
        )
        self.side_effects = bool(side_effects)
        self.idempotent = (not self.side_effects) if idempotent is None else bool(idempotent)
        if not (isinstance(requires_confirmation, bool) or callable(requires_confirmation)):
            raise ToolDefinitionError(
                f"{self.name}: requires_confirmation must be a bool or a callable on the args"
            )
        self.requires_confirmation = requires_confirmation
        if preview is not None and not callable(preview):
            raise ToolDefinitionError(f"{self.name}: preview must be a callable on the args")
        self.preview = preview
        self.input_model, self.context_param = _input_model(fn, self.name)
        # by the names args use: a field modelled under a stand-in name has its alias here
        self.params: dict[str, FieldInfo] = {
            info.alias or field: info for field, info in self.input_model.model_fields.items()
        }
        # stand-in field name -> real parameter name (only for names pydantic reserves)
        self._aliases = {
            field: info.alias
            for field, info in self.input_model.model_fields.items()
            if info.alias and info.alias != field
        }
        self._field_adapters: dict[str, TypeAdapter[Any]] = {}
        self.output_adapter = _output_adapter(fn)
        # the adapter's core validator, called directly on every output (TypeAdapter's own
        # validate_python is a Python wrapper around it)
        self._check_out = (
            self.output_adapter.validator.validate_python if self.output_adapter else None
        )
        self.parallel_safe = parallel_safe
        self.serial_key = (
            serial_key if serial_key is not None else (None if parallel_safe else self.name)
        )
        if self.serial_key is not None:
            self._check_key_template(self.serial_key)
        self.resources = dict(resources or {})
        for pool, units in self.resources.items():
            if not isinstance(units, int) or units < 1:
                raise ToolDefinitionError(
                    f"{self.name}: resources[{safe_repr(pool)}] must be an int >= 1"
                )
        self.compensate = _as_rollback(compensate, self.name)
        if reconcile is not None and not callable(reconcile):
            raise ToolDefinitionError(f"{self.name}: reconcile must be a callable")
        self.reconcile = reconcile
        self.retry = RetryPolicy.model_validate(retry) if isinstance(retry, Mapping) else retry
        self.timeout_s = timeout_s
        if expected_duration_s is not None and not (
            isinstance(expected_duration_s, int | float) and expected_duration_s >= 0
        ):
            raise ToolDefinitionError(
                f"{self.name}: expected_duration_s must be a number of seconds >= 0"
            )
        #: a hint for the critical-path release order before any run has been measured
        self.expected_duration_s = expected_duration_s
        #: what version of the code runs: recorded with every attempt (fork reruns a step
        #: whose tool changed)
        self.fingerprint = code_fingerprint(fn)

    def _check_key_template(self, template: str) -> None:
        params = set(self.params)
        try:
            fields = [f for _, f, _, _ in string.Formatter().parse(template) if f is not None]
        except ValueError as exc:
            raise ToolDefinitionError(f"{self.name}: bad serial_key {template!r}: {exc}") from None
        allows_extra = self.input_model.model_config.get("extra") == "allow"
        for f in fields:
            if f not in params and not allows_extra:
                raise ToolDefinitionError(
                    f"{self.name}: serial_key {template!r} names {f!r}, which is not a "
                    f"parameter{did_you_mean(f, params)}"
                )

    # ------------------------------------------------------------------ used by the runtime
    @property
    def safe_to_repeat(self) -> bool:
        """True when calling again after an unknown outcome is harmless."""
        return self.idempotent or not self.side_effects

    def validate_args(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """Validated keyword arguments for the function. Raises pydantic ValidationError."""
        model = self.input_model.__pydantic_validator__.validate_python(args)
        values = dict(model.__dict__)
        if self._aliases:  # on the hot path only for tools with a reserved parameter name
            values = {self._aliases.get(key, key): value for key, value in values.items()}
        extra = model.__pydantic_extra__
        if extra:
            values.update(extra)
        return values

    def field_adapter(self, name: str) -> TypeAdapter[Any] | None:
        """A TypeAdapter for one input field, by its name in args (used to check literal
        args in plans)."""
        info = self.params.get(name)
        if info is None:
            return None
        if name not in self._field_adapters:
            self._field_adapters[name] = TypeAdapter(info.annotation or Any)
        return self._field_adapters[name]

    def resolve_serial_key(self, args: Mapping[str, Any]) -> str | None:
        if self.serial_key is None:
            return None
        return self.serial_key.format_map(_Missing(args))

    def needs_confirmation(self, args: Mapping[str, Any]) -> bool:
        rc = self.requires_confirmation
        return bool(rc(dict(args))) if callable(rc) else rc

    def make_preview(self, args: Mapping[str, Any]) -> Any:
        return self.preview(dict(args)) if self.preview else dict(args)

    def check_output(self, value: Any) -> Any:
        """The output as JSON data, validated against the return annotation when there is
        one. Raises ValidationError (wrong shape) or NotJSONError (not serialisable)."""
        if self._check_out is not None:
            value = self._check_out(value)
            if value is None or type(value) in (str, int, bool):
                return value  # already JSON (the common `-> int` / `-> str`): skip the dump
            # e.g. object() under `-> dict`: left as is, to_json_value names where it sits
            with contextlib.suppress(PydanticSerializationError, UnicodeDecodeError):
                value = self.output_adapter.dump_python(  # type: ignore[union-attr]
                    value, mode="json")  # (set whenever _check_out is)
        return to_json_value(value)

    def input_schema(self) -> dict[str, Any]:
        return self.input_model.model_json_schema()

    def output_schema(self) -> dict[str, Any] | None:
        return self.output_adapter.json_schema() if self.output_adapter else None

    def describe(self) -> dict[str, Any]:
        """Name, description, schemas and side-effect contract as plain data."""
        return {
            "name": self.name,
            "description": self.description,
            "input_schema": self.input_schema(),
            "output_schema": self.output_schema(),
            "side_effects": self.side_effects,
            "idempotent": self.idempotent,
            "requires_confirmation": (
                "depends on args"
                if callable(self.requires_confirmation)
                else self.requires_confirmation
            ),
            "serial_key": self.serial_key,
            "resources": self.resources,
            "compensate": self.compensate.tool if self.compensate else None,
            "reconcile": self.reconcile is not None,
        }

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Calling a Tool calls the function (handy in notebooks and tests)."""
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        flags = [
            f
            for f, on in (
                ("side_effects", self.side_effects),
                ("idempotent", self.idempotent and self.side_effects),
                ("confirm", bool(self.requires_confirmation)),
                ("async", self.is_async),
            )
            if on
        ]
        return f"<Tool {self.name}{' [' + ', '.join(flags) + ']' if flags else ''}>"


class _Missing(dict):  # type: ignore[type-arg]
    """Format args for a key template; an arg that is absent formats as ``None``."""

    def __missing__(self, key: str) -> None:
        return None


def _hints(fn: Callable[..., Any]) -> dict[str, Any]:
    try:
        return typing.get_type_hints(fn, include_extras=True)
    except Exception:
        return dict(getattr(fn, "__annotations__", {}))


def _is_context(annotation: Any) -> bool:
    return annotation is CallContext or annotation == "CallContext"


def _input_model(fn: Callable[..., Any], name: str) -> tuple[type[BaseModel], str | None]:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError) as exc:
        raise ToolDefinitionError(f"{name}: cannot read the signature: {exc}") from None
    hints = _hints(fn)
    fields: dict[str, Any] = {}
    context_param = None
    extra = "forbid"
    taken = set(sig.parameters)
    for p in sig.parameters.values():
        ann = hints.get(p.name, p.annotation)
        if _is_context(ann):
            context_param = p.name
            continue
        if p.kind is p.VAR_KEYWORD:
            extra = "allow"
            continue
        if p.kind in (p.VAR_POSITIONAL, p.POSITIONAL_ONLY):
            raise ToolDefinitionError(
                f"{name}: parameter {p.name!r} must be passable by keyword (tools get their args "
                "by name)"
            )
        ann = Any if ann is inspect.Parameter.empty else ann
        default = ... if p.default is inspect.Parameter.empty else p.default
        field = _field_name(p.name, taken)
        if field != p.name:  # validated, serialised and shown in schemas by its real name
            taken.add(field)
            ann = Annotated[ann, Field(alias=p.name)]
        fields[field] = (ann, default)
    base = _ArgsBase if extra == "forbid" else _ArgsAllow
    try:
        model = create_model(f"{name}_input", __base__=base, **fields)
    except Exception as exc:
        raise ToolDefinitionError(f"{name}: cannot build an input schema: {exc}") from None
    if not model.__pydantic_complete__:  # a type named in a string annotation is not found
        raise ToolDefinitionError(f"{name}: {_unresolved(fn)}")
    return model, context_param


def _field_name(param: str, taken: set[str]) -> str:
    """The input model's field name for parameter ``param``.

    The parameter's own name, unless pydantic cannot use it as a field name: it shadows a
    BaseModel attribute (``schema``, ``json``, ``copy``, ``validate``, ``model_config``...)
    or starts with ``_`` (a private attribute to pydantic). Then a free stand-in such as
    ``arg_schema``, which carries the real name as its alias.
    """
    if not param.startswith("_") and not hasattr(_ArgsAllow, param):
        return param
    field = "arg_" + param.lstrip("_")
    while field in taken or hasattr(_ArgsAllow, field):
        field += "_"
    return field


def _unresolved(fn: Callable[..., Any]) -> str:
    try:
        typing.get_type_hints(fn)
    except Exception as exc:
        why = str(exc)
    else:  # pragma: no cover - only called when resolution failed
        why = "unknown reason"
    where = getattr(fn, "__qualname__", None) or repr(fn)
    return (
        f"cannot resolve the type hints of {where} ({why}); define the types "
        "they name at module level, where the tool's module can see them"
    )


class _ArgsAllow(BaseModel):
    model_config = ConfigDict(extra="allow", arbitrary_types_allowed=True, protected_namespaces=())


def _output_adapter(fn: Callable[..., Any]) -> TypeAdapter[Any] | None:
    ann = _hints(fn).get("return", inspect.Signature.empty)
    if ann in (inspect.Signature.empty, Any, None, type(None)):
        return None
    if isinstance(ann, str):  # unresolvable: TypeAdapter would fail only at call time
        raise ToolDefinitionError(f"{getattr(fn, '__name__', fn)!s}: {_unresolved(fn)}")
    origin = typing.get_origin(ann)
    if origin is not None and getattr(origin, "__name__", "") in ("Coroutine", "Awaitable"):
        return None
    try:
        return TypeAdapter(ann)
    except Exception:
        return None


def _as_rollback(value: Any, name: str) -> Rollback | None:
    if value is None or isinstance(value, Rollback):
        return value
    try:
        if isinstance(value, tuple) and len(value) == 2:
            return Rollback(tool=value[0], args=dict(value[1]))
        if isinstance(value, str):
            return Rollback(tool=value)
        return Rollback.model_validate(value)
    except (ValidationError, TypeError, ValueError) as exc:
        raise ToolDefinitionError(f"{name}: bad compensate {safe_repr(value)}: {exc}") from None


class Toolbox:
    """A named set of tools (and chains usable as sub-chains)."""

    def __init__(self, name: str = "toolbox"):
        self.name = name
        self._tools: dict[str, Tool] = {}
        self.chains: dict[str, Chain] = {}

    def tool(self, fn: Callable[..., Any] | None = None, /, **meta: Any) -> Any:
        """Register a function as a tool: ``@toolbox.tool`` or ``@toolbox.tool(side_effects=True)``.

        Returns the :class:`Tool` (still callable like the function).
        Raises ToolDefinitionError for a duplicate name or bad metadata.
        """
        if fn is not None:
            return self.add(Tool(fn, **meta))

        def decorate(f: Callable[..., Any]) -> Tool:
            return self.add(Tool(f, **meta))

        return decorate

    def add(self, tool: Tool) -> Tool:
        """Register a tool. Re-defining a function interactively (same qualified name in
        ``__main__``: a notebook cell run again) replaces it; any other function with a taken
        name is an error."""
        old = self._tools.get(tool.name)
        if old is not None and _same_definition(old.fn, tool.fn):
            self._tools[tool.name] = tool
            return tool
        if tool.name in self._tools:
            raise ToolDefinitionError(
                f"toolbox {self.name!r} already has a tool named {tool.name!r}; "
                "pass name=... to register this one under another name"
            )
        self._tools[tool.name] = tool
        return tool

    def add_chain(self, chain: Chain) -> Chain:
        """Make ``chain`` callable as a sub-chain step (``tool: chain:NAME``)."""
        self.chains[chain.name] = chain
        return chain

    def get(self, name: str) -> Tool:
        """The tool called ``name``.

        Raises :class:`~chainlab.errors.UnknownToolError` (a ``KeyError`` too) with a
        did-you-mean and, when there are few, the names the toolbox has.
        """
        try:
            return self._tools[name]
        except KeyError:
            raise UnknownToolError(name, self._tools, toolbox=self.name) from None

    def names(self) -> list[str]:
        return list(self._tools)

    def describe(self) -> list[dict[str, Any]]:
        return [t.describe() for t in self._tools.values()]

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __iter__(self) -> Iterator[Tool]:
        return iter(self._tools.values())

    def __len__(self) -> int:
        return len(self._tools)

    def __repr__(self) -> str:
        return f"<Toolbox {self.name!r}: {', '.join(self._tools) or 'empty'}>"


def _same_definition(a: Callable[..., Any], b: Callable[..., Any]) -> bool:
    return (getattr(a, "__module__", None) == getattr(b, "__module__", None) == "__main__"
            and getattr(a, "__qualname__", None) == getattr(b, "__qualname__", None))


default_toolbox = Toolbox("default")


def tool(fn: Callable[..., Any] | None = None, /, **meta: Any) -> Any:
    """Register a tool in :data:`default_toolbox` (``@chainlab.tool`` or with metadata)."""
    return default_toolbox.tool(fn, **meta)


def code_fingerprint(fn: Callable[..., Any]) -> str:
    """A short hash of a function's code (bytecode, constants and names, nested functions
    included): the same source gives the same fingerprint in any process; an edited body
    gives another. Callables without code (builtins) hash their qualified name."""
    target = getattr(fn, "__func__", fn)
    code = getattr(target, "__code__", None)
    if code is None:
        code = getattr(vars(type(fn)).get("__call__"), "__code__", None)  # a callable object
    digest = hashlib.sha256()
    if code is None:
        digest.update(repr(getattr(fn, "__qualname__", type(fn).__qualname__)).encode())
    else:
        _hash_code(code, digest)
    return digest.hexdigest()[:16]


def _hash_code(code: Any, digest: Any) -> None:
    digest.update(code.co_code)
    digest.update(repr(code.co_names).encode())
    for const in code.co_consts:
        if hasattr(const, "co_code"):
            _hash_code(const, digest)
        else:
            digest.update(repr(const).encode())

