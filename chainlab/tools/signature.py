"""A tool's schemas from its Python signature.

* :func:`input_model`: a pydantic model of the parameters (the one a :class:`CallContext`
  parameter is left out of, and whose name is returned); a parameter whose name pydantic
  reserves is modelled under a stand-in field that carries the real name as its alias;
  ``**kwargs`` allows extra args.
* :func:`output_adapter`: a TypeAdapter for the return annotation (None when there is none
  worth checking).

Both raise :class:`~chainlab.errors.ToolDefinitionError` at definition time for what would
otherwise fail at call time (a positional-only parameter, a type hint that cannot be resolved).
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, create_model

from chainlab.errors import ToolDefinitionError
from chainlab.tools.context import CallContext

__all__ = ["input_model", "output_adapter"]


class _ArgsBase(BaseModel):
    # no protected namespaces: a parameter called model_name is an ordinary field here
    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True, protected_namespaces=())


def _hints(fn: Callable[..., Any]) -> dict[str, Any]:
    try:
        return typing.get_type_hints(fn, include_extras=True)
    except Exception:
        return dict(getattr(fn, "__annotations__", {}))


def _is_context(annotation: Any) -> bool:
    return annotation is CallContext or annotation == "CallContext"


def input_model(fn: Callable[..., Any], name: str) -> tuple[type[BaseModel], str | None]:
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


def output_adapter(fn: Callable[..., Any]) -> TypeAdapter[Any] | None:
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
