"""A :class:`SchemaTool`: a tool described by JSON Schemas instead of a Python signature (the
tools of an MCP server, :mod:`chainlab.mcp`). Its body is an async callable taking the args as
keywords; its args are checked against the input schema and its output against the output
schema, with the same errors a Python tool gives: a pydantic ``ValidationError`` whose
locations are the fields, so plan validation reports ``invalid_args`` with the field and a
call reports ``invalid_input``.

An arg the input schema does not list is refused unless the schema allows additional
properties *explicitly* (``additionalProperties: true`` or a schema): servers' generated
schemas usually leave the keyword out, and a misspelt arg should not pass validation.

The JSON Schema checks use the ``jsonschema`` package (installed with ``chainlab[mcp]``).
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, ValidationError
from pydantic.fields import FieldInfo
from pydantic_core import InitErrorDetails, PydanticCustomError

from chainlab._json import to_json_value
from chainlab._text import safe_repr
from chainlab.errors import MissingExtraError, ToolDefinitionError
from chainlab.tools.contract import Tool
from chainlab.tools.patterns import check_patterns, linear_validator

__all__ = ["SchemaTool", "schema_fingerprint"]


class _SchemaArgs(BaseModel):
    """The input model of a schema tool: no fields of its own; its JSON Schema is the tool's."""

    model_config = ConfigDict(extra="forbid", protected_namespaces=())
    json_schema_source: ClassVar[dict[str, Any]] = {}

    @classmethod
    def model_json_schema(cls, by_alias: bool = True,  # type: ignore[override]
                          ref_template: str = "#/$defs/{model}", *args: Any,
                          **kwargs: Any) -> dict[str, Any]:
        return _retemplate(copy.deepcopy(cls.json_schema_source), ref_template)


class _SchemaArgsExtra(_SchemaArgs):
    model_config = ConfigDict(extra="allow", protected_namespaces=())


def _retemplate(schema: Any, template: str) -> Any:
    """``$ref: "#/$defs/X"`` rewritten to ``template.format(model=X)`` (where the plan's JSON
    Schema moves a tool's definitions)."""
    if isinstance(schema, dict):
        out = {k: _retemplate(v, template) for k, v in schema.items()}
        ref = out.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            out["$ref"] = template.format(model=ref.removeprefix("#/$defs/"))
        return out
    if isinstance(schema, list):
        return [_retemplate(v, template) for v in schema]
    return schema


def _validator(schema: Any, tool: str, which: str) -> Any:
    try:
        import jsonschema
    except ImportError:
        raise MissingExtraError("jsonschema", "mcp", "a tool described by JSON Schema") from None
    if not isinstance(schema, dict):
        raise ToolDefinitionError(f"{tool}: its {which} schema must be a JSON object, got "
                                  f"{safe_repr(schema)}")
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    try:
        cls.check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise ToolDefinitionError(
            f"{tool}: invalid {which} schema: {exc.message} (at "
            f"{'/'.join(str(p) for p in exc.absolute_path) or 'the top'})") from None
    _check_refs(schema, tool, which)
    check_patterns(schema, tool, which)
    return linear_validator(cls)(schema)


def _refs(schema: Any, *, top: bool = True) -> Any:
    """The ``$ref`` strings of a schema (not those under a subschema with its own ``$id``,
    which resolve against it, nor inside data keywords such as ``default``)."""
    if isinstance(schema, list):
        for item in schema:
            yield from _refs(item, top=False)
    elif isinstance(schema, dict):
        if not top and "$id" in schema:
            return
        if isinstance(schema.get("$ref"), str):
            yield schema["$ref"]
        for key, value in schema.items():
            if key not in ("const", "enum", "default", "examples"):
                yield from _refs(value, top=False)


def _check_refs(schema: dict[str, Any], tool: str, which: str) -> None:
    """Every ``$ref`` resolves within the schema (nothing is fetched). Raises
    ToolDefinitionError naming the tool and the ref (else validation would fail later,
    inside jsonschema, on every plan that uses the tool)."""
    import referencing
    import referencing.jsonschema
    from referencing.exceptions import Unresolvable

    spec = referencing.jsonschema.specification_with(
        schema.get("$schema", ""), default=referencing.jsonschema.DRAFT202012)
    resource = spec.create_resource(schema)
    base = resource.id() or ""
    resolver = referencing.Registry().with_resource(base, resource).resolver(base)
    for ref in _refs(schema):
        try:
            resolver.lookup(ref)
        except Unresolvable:
            raise ToolDefinitionError(
                f"{tool}: its {which} schema refers to {safe_repr(ref)}, which it does not "
                "define (a $ref must point inside the schema, e.g. #/$defs/Name; nothing is "
                "fetched)") from None


def schema_fingerprint(*parts: Any) -> str:
    """A short stable hash of JSON data (a schema tool's code fingerprint)."""
    text = json.dumps(parts, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class SchemaTool(Tool):
    """A tool whose args and output are described by JSON Schemas.

    ``call`` is an async callable taking the args as keywords. ``origin`` says where the tool
    comes from (``"MCP: server"``: the designer shows it as a badge); ``hints`` are the
    source's own descriptions of the tool (MCP annotations) shown beside it;
    ``fingerprint_parts``: JSON data whose hash is the code fingerprint (default: name and
    schemas). The side-effect contract (``side_effects=...``, ``requires_confirmation=...``)
    is the same keywords as :class:`~chainlab.tools.Tool`.

    Raises ToolDefinitionError for a schema that is not a valid JSON Schema of an object.
    """

    __slots__ = ("_extra_ok", "_in_check", "_out_check", "_prop_checks", "hints",
                 "input_json_schema", "origin", "output_json_schema")

    def __init__(self, call: Callable[..., Awaitable[Any]], *, name: str,
                 input_schema: Mapping[str, Any], output_schema: Mapping[str, Any] | None = None,
                 origin: str | None = None, hints: Mapping[str, Any] | None = None,
                 fingerprint_parts: Any = None, **meta: Any):
        serial_key = meta.pop("serial_key", None)
        super().__init__(call, name=name, **meta)
        self.input_json_schema = dict(input_schema)
        if self.input_json_schema.get("type", "object") != "object":
            raise ToolDefinitionError(f"{name}: its input schema must describe an object, got "
                                      f"type {safe_repr(self.input_json_schema.get('type'))}")
        self.output_json_schema = dict(output_schema) if output_schema is not None else None
        self._in_check = _validator(self.input_json_schema, name, "input")
        self._out_check = (_validator(self.output_json_schema, name, "output")
                           if self.output_json_schema is not None else None)
        self._prop_checks: dict[str, Any] = {}
        self.origin = origin
        self.hints = dict(hints or {})
        extra = self.input_json_schema.get("additionalProperties", False)
        self._extra_ok = extra not in (False, None)
        base = _SchemaArgsExtra if self._extra_ok else _SchemaArgs
        self.input_model = type(f"{name}_input", (base,),
                                {"json_schema_source": self.input_json_schema,
                                 "__module__": __name__})
        required = set(self.input_json_schema.get("required") or ())
        self.params = {
            prop: FieldInfo(annotation=Any) if prop in required
            else FieldInfo(annotation=Any, default=None)
            for prop in (self.input_json_schema.get("properties") or {})
        }
        self._aliases = {}
        self.output_adapter = None
        self._check_out = None
        self.context_param = None
        self.is_async = True
        if serial_key is not None:
            self.serial_key = serial_key
            self._check_key_template(serial_key)
        self.fingerprint = schema_fingerprint(
            fingerprint_parts if fingerprint_parts is not None
            else [name, self.input_json_schema, self.output_json_schema])

    # ------------------------------------------------------------------ checks
    def validate_args(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """The args as keywords for the call. Raises pydantic ValidationError (one error per
        problem, located at its field)."""
        values = dict(args)
        errors = [_error(e) for e in self._in_check.iter_errors(values)]
        if not self._extra_ok:
            known = set(self.params)
            errors += [InitErrorDetails(
                type=PydanticCustomError("extra_forbidden", "Extra inputs are not permitted"),
                loc=(key,), input=values[key]) for key in values if key not in known]
        if errors:
            raise ValidationError.from_exception_data(f"{self.name}_input", errors)
        return values

    def field_adapter(self, name: str) -> Any:
        """A checker of one arg (``.validate_python(value)`` raises ValidationError), or None
        when the schema does not describe it."""
        prop = (self.input_json_schema.get("properties") or {}).get(name)
        if prop is None:
            return None
        if name not in self._prop_checks:
            # the property's schema with the definitions it may refer to
            sub = {**({"$defs": self.input_json_schema["$defs"]}
                      if "$defs" in self.input_json_schema else {}),
                   **(prop if isinstance(prop, dict) else {})}
            self._prop_checks[name] = _PropCheck(_validator(sub, self.name, f"{name!r} arg"),
                                                 name, self.name)
        return self._prop_checks[name]

    def check_output(self, value: Any) -> Any:
        """The output as JSON data, checked against the output schema when there is one.
        Raises ValidationError (wrong shape) or NotJSONError."""
        value = to_json_value(value)
        if self._out_check is not None:
            errors = [_error(e) for e in self._out_check.iter_errors(value)]
            if errors:
                raise ValidationError.from_exception_data(f"{self.name}_output", errors)
        return value

    def input_schema(self) -> dict[str, Any]:
        return copy.deepcopy(self.input_json_schema)

    def output_schema(self) -> dict[str, Any] | None:
        return copy.deepcopy(self.output_json_schema)

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "origin": self.origin, "hints": dict(self.hints)}

    def __repr__(self) -> str:
        return super().__repr__().replace("<Tool ", "<SchemaTool ", 1)[:-1] + (
            f" from {self.origin}>" if self.origin else ">")


class _PropCheck:
    """What plan validation calls on a literal arg (the TypeAdapter role)."""

    __slots__ = ("arg", "check", "tool")

    def __init__(self, check: Any, arg: str, tool: str):
        self.check, self.arg, self.tool = check, arg, tool

    def validate_python(self, value: Any) -> Any:
        errors = [_error(e) for e in self.check.iter_errors(value)]
        if errors:
            raise ValidationError.from_exception_data(f"{self.tool}.{self.arg}", errors)
        return value


def _error(e: Any) -> InitErrorDetails:
    """One jsonschema error as a pydantic error located at its field (a missing required
    property is located at that property)."""
    loc: tuple[str | int, ...] = tuple(e.absolute_path)
    if e.validator == "required" and isinstance(e.instance, dict):
        missing = [r for r in e.validator_value if r not in e.instance]
        if missing:
            loc = (*loc, missing[0])
            return InitErrorDetails(type=PydanticCustomError("missing", "Field required"),
                                    loc=loc, input=e.instance)
    return InitErrorDetails(type=PydanticCustomError("json_schema", "{reason}",
                                                     {"reason": e.message}),
                            loc=loc, input=e.instance)
