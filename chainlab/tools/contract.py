"""The :class:`Tool`: a function plus its schemas and side-effect contract (the metadata is
described in :mod:`chainlab.tools`)."""

from __future__ import annotations

import contextlib
import inspect
import string
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import TypeAdapter, ValidationError
from pydantic.fields import FieldInfo
from pydantic_core import PydanticSerializationError

from chainlab._json import (
    NotJSONError,
    code_fingerprint,
    nonfinite_at,
    scalar_problem,
    to_json_value,
)
from chainlab._text import did_you_mean, int_too_long, safe_repr
from chainlab.errors import ToolDefinitionError
from chainlab.plan.parts import RetryPolicy, Rollback
from chainlab.tools.context import Reconciliation
from chainlab.tools.signature import input_model, output_adapter

__all__ = ["Tool"]

# an int under 19 digits fits any limit int_too_long checks (the interpreter's is >= 640)
_SHORT_INT = 10**18


class Tool:
    """A registered tool: the function plus its schemas and side-effect contract."""

    #: how the runtime runs a call of it (the name of its attempt kind: one call of the
    #: function; a remote job says "job")
    kind = "call"

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
        self.input_model, self.context_param = input_model(fn, self.name)
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
        self.output_adapter = output_adapter(fn)
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
        one, through the value gate (:func:`chainlab._json.to_json_value`). Raises
        ValidationError (wrong shape) or NotJSONError (not JSON data chainlab can keep,
        naming where in the output)."""
        if self._check_out is not None:
            value = self._check_out(value)
            kind = type(value)
            if value is None or kind is bool or (kind is int and (
                    -_SHORT_INT < value < _SHORT_INT or not int_too_long(value))) \
                    or (kind is str and scalar_problem(value) is None):
                return value  # already JSON (the common `-> int` / `-> str`): skip the dump
            adapter = self.output_adapter
            assert adapter is not None  # (set whenever _check_out is)
            # e.g. object() under `-> dict`, or data nested too deeply for pydantic (a
            # ValueError): left as is, to_json_value names where it sits
            with contextlib.suppress(PydanticSerializationError, UnicodeDecodeError,
                                     RecursionError, ValueError):
                # pydantic's JSON form writes NaN and infinities as null: look for them in
                # its Python form first, so that no number is changed without a word
                where = nonfinite_at(adapter.dump_python(value))
                if where is not None:
                    raise NotJSONError(where[0], where[1], scalar_problem(where[1]) or "")
                value = adapter.dump_python(value, mode="json")
        return to_json_value(value)

    def input_schema(self) -> dict[str, Any]:
        return self.input_model.model_json_schema()

    def fit_findings(self, toolbox: Any, chains: Mapping[str, Any],
                     seen: tuple[str, ...] = ()) -> list[tuple[str, str, str]]:
        """What is wrong with this tool in ``toolbox`` beyond its name and args, as plan
        validation's findings ``(code, message, field)``: none for a tool; an agent
        (``agent:NAME``) names tools the toolbox must have (``seen``: the agents whose
        tools are being checked, to find a circle)."""
        return []

    def output_schema(self) -> dict[str, Any] | None:
        return self.output_adapter.json_schema() if self.output_adapter else None

    async def aclose(self) -> None:
        """Close what the tool holds open between calls (nothing, for a function; an agent's
        connection to its model endpoint). :meth:`Toolbox.aclose` calls it; the tool stays
        usable (what it holds opens again on the next call)."""

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
