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
``redact``                 a function of a value returning it masked: applied to the args,
                           output, error and preview of its steps before they leave the
                           process (:mod:`chainlab.redaction`)
``always_ask``             only a person decides its calls (never a rule, grant or reviewer)
``approvers``              ``["finance"]``: only a principal with one of these roles may
                           approve or grant for it
=========================  ================================================================

A tool that declares a parameter annotated :class:`CallContext` receives the run id, step id,
attempt number and the idempotency key (stable across retries and recovery) in it.

* :mod:`.contract`: :class:`Tool`, a function plus its schemas and the contract above;
* :mod:`.signature`: the input model and output adapter read from a function's signature;
* :mod:`.context`: what a tool body receives (:class:`CallContext`) and what ``reconcile``
  answers (:class:`Reconciliation`);
* :mod:`.schema_tool`: :class:`SchemaTool`, a tool described by JSON Schemas (an MCP
  server's tools, ``toolbox.add_mcp(...)``);
* :mod:`.job`: remote jobs (``@toolbox.job``): :class:`JobStatus`, :class:`JobTool`;
* :mod:`.toolbox`: :class:`Toolbox`, :data:`default_toolbox` and :func:`tool`.

JSON values and the run identities (:func:`to_json_value`, :func:`args_hash`,
:func:`idempotency_key`, ``code_fingerprint``) live in :mod:`chainlab._json`; the names this
package always exported stay importable from here.
"""

# NotJSONError and code_fingerprint were importable from chainlab.tools before chainlab._json
# existed: re-exported by the redundant alias, outside __all__ as before
from chainlab._json import NotJSONError as NotJSONError
from chainlab._json import args_hash, idempotency_key, to_json_value
from chainlab._json import code_fingerprint as code_fingerprint
from chainlab.tools.context import CallContext, Reconciliation
from chainlab.tools.contract import Tool
from chainlab.tools.job import JobStatus, JobTool
from chainlab.tools.schema_tool import SchemaTool
from chainlab.tools.toolbox import Toolbox, default_toolbox, tool

__all__ = [
    "CallContext",
    "JobStatus",
    "JobTool",
    "Reconciliation",
    "SchemaTool",
    "Tool",
    "Toolbox",
    "args_hash",
    "default_toolbox",
    "idempotency_key",
    "to_json_value",
    "tool",
]
