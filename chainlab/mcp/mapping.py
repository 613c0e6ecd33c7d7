"""How an MCP tool becomes a chainlab :class:`~chainlab.tools.schema_tool.SchemaTool`
(DESIGN §16). Each rule is overridable per tool (``overrides={"tool": {...}}`` or
``confirm=...`` on ``add_mcp``):

==================================================  ==========================================
MCP                                                 chainlab
==================================================  ==========================================
``inputSchema``                                     argument validation (plan ``validate()``:
                                                    ``invalid_args`` with the field; a call:
                                                    ``invalid_input``) and the designer's form
``outputSchema``                                    output validation
``structuredContent`` (else the text content)       the step's output
``readOnlyHint: true``                              no side effects (retried freely)
``readOnlyHint`` false or missing                   side effects
``idempotentHint: true`` (not read-only)            idempotent
``destructiveHint`` true or missing (not read-only) requires confirmation by default
``destructiveHint: false`` (not read-only)          no confirmation
``openWorldHint``                                   shown, no effect on the contract
``isError: true``                                   a ToolError (``execution_failed``),
                                                    classified like any other
==================================================  ==========================================

The code fingerprint is a hash of the tool's name, schemas and annotations and the server's
name and version, so a fork reruns a step whose tool changed. Names, descriptions and
outputs are untrusted data: kept as text, escaped by every view.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from chainlab.errors import ToolDefinitionError, ToolError
from chainlab.tools.schema_tool import SchemaTool

if TYPE_CHECKING:
    from mcp.types import CallToolResult
    from mcp.types import Tool as MCPToolSpec

    from chainlab.mcp.connection import MCPConnection

__all__ = ["contract_of", "hints_of", "output_of", "schema_tool"]

#: the MCP annotation fields, by their names on the wire
HINTS = {"readOnlyHint": "read_only_hint", "destructiveHint": "destructive_hint",
         "idempotentHint": "idempotent_hint", "openWorldHint": "open_world_hint"}


def hints_of(spec: MCPToolSpec) -> dict[str, bool]:
    """The annotations the server gave (absent ones left out), by their wire names."""
    ann = spec.annotations
    if ann is None:
        return {}
    out = {}
    for wire, attr in HINTS.items():
        value = getattr(ann, attr, None)
        if value is not None:
            out[wire] = bool(value)
    return out


def contract_of(hints: Mapping[str, bool]) -> dict[str, Any]:
    """The side-effect contract the hints map to (the table in this module's docstring)."""
    if hints.get("readOnlyHint") is True:
        return {"side_effects": False, "idempotent": True, "requires_confirmation": False}
    return {"side_effects": True,
            "idempotent": hints.get("idempotentHint") is True,
            "requires_confirmation": hints.get("destructiveHint", True) is not False}


def schema_tool(spec: MCPToolSpec, connection: MCPConnection, *, name: str,
                overrides: Mapping[str, Any] | None = None) -> SchemaTool:
    """The chainlab tool for ``spec`` (registered as ``name``) calling it over
    ``connection``. ``overrides``: Tool keywords that replace what the hints say.
    Raises ToolDefinitionError for a bad schema or override."""
    hints = hints_of(spec)
    meta = contract_of(hints) | dict(overrides or {})
    remote = spec.name
    annotations = spec.annotations.model_dump(mode="json", by_alias=True, exclude_none=True) \
        if spec.annotations is not None else None

    unsafe = bool(meta["side_effects"]) and not meta["idempotent"]

    async def call(**args: Any) -> Any:
        result = await connection.call_tool(remote, args, unsafe=unsafe)
        return output_of(result, remote)

    call.__name__ = call.__qualname__ = name
    origin = f"MCP: {connection.server_name or connection.label}"
    try:
        return SchemaTool(
            call, name=name, description=spec.description or spec.title or "",
            input_schema=spec.input_schema, output_schema=spec.output_schema,
            origin=origin, hints=hints,
            fingerprint_parts=["mcp", remote, spec.input_schema, spec.output_schema,
                               annotations, connection.server_name,
                               connection.server_version], **meta)
    except TypeError as exc:  # an override that is no Tool keyword
        if isinstance(exc, ToolDefinitionError):
            raise
        raise ToolDefinitionError(f"{name}: bad override: {exc}") from None


def output_of(result: CallToolResult, tool: str) -> Any:
    """The step's output: the structured content, else the text (one text block: that
    text; several: joined by newlines; none: the content blocks as data). Raises ToolError
    for an ``isError`` result, with the server's text as its message."""
    from mcp.types import TextContent

    texts = [block.text for block in result.content if isinstance(block, TextContent)]
    if result.is_error:
        text = "\n".join(texts) or "no message"
        raise ToolError(f"MCP tool {tool!r} answered with an error: {text}")
    if result.structured_content is not None:
        return result.structured_content
    if texts and len(texts) == len(result.content):
        return texts[0] if len(texts) == 1 else "\n".join(texts)
    return [block.model_dump(mode="json", by_alias=True, exclude_none=True)
            for block in result.content]
