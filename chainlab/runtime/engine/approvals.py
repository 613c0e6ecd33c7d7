"""Who decides a call (DESIGN §21): the deployment's rules, then the run's rules, then the
grants people gave, then a person; within a level ``reject`` > ``ask`` > ``approve``, and
``always_ask`` (on a tool or a rule) is a person's alone.

:func:`who_decides` is the precedence, a pure function over data (the property test reads
it); :func:`decide` is what the confirmation gate (``attempt.call.gate``, the one place
every call of every kind passes) does with it: a rule's or a grant's decision is recorded as
an ordinary ``step_waiting_confirmation`` + ``step_approved`` / ``step_rejected`` with
``by`` (``policy:ID``, ``grant:ID``) and the args hash it evaluated, emitted before the
call's ``step_started`` (so it is durable with or before it). A grant is made with a person's
approval (:func:`make_grant`) and decides, on the run's loop, the calls in its scope that
wait now (:func:`covered`) and later ones at the gate.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from chainlab._text import safe_repr
from chainlab.errors import DecisionError, PlanError, Problem
from chainlab.events import EventKind, StepStatus
from chainlab.events.fold_decisions import grant_status
from chainlab.plan.conditions import evaluate
from chainlab.plan.policies import (
    Policy,
    Rules,
    args_refs,
    args_resolver,
    condition,
    fingerprint,
    policy_findings,
)
from chainlab.runtime.engine.flow import finished

if TYPE_CHECKING:
    from chainlab.runtime.engine.compile import Node
    from chainlab.runtime.engine.core import RunCore
    from chainlab.tools import Tool

__all__ = [
    "GRANT_SCOPES",
    "Outcome",
    "PolicyWarning",
    "covered",
    "decide",
    "deployment_rules",
    "make_grant",
    "parse_ttl",
    "rules_in_force",
    "who_decides",
]

K = EventKind
GRANT_SCOPES = ("step", "run", "chain")


class PolicyWarning(UserWarning):
    """A rule that can never apply (its tool glob matches no tool in the toolbox)."""


# ================================================================ the rules in force
def deployment_rules(policies: Iterable[Policy | Mapping[str, Any]],
                     toolbox: Any) -> Rules:
    """The deployment's rules, checked against ``toolbox``. Raises PlanError (the rule's
    id and field) for a rule that reads an arg its tool lacks or compares a type it cannot;
    warns (PolicyWarning) for a tool glob matching no tool, with the names it could mean."""
    try:
        rules = Rules(policies)
    except ValueError as exc:  # (a pydantic ValidationError is a ValueError)
        raise PlanError([Problem("invalid_field", str(exc), None, "policies")]) from None
    check_rules(rules.policies, toolbox, "policies")
    return rules


def check_rules(policies: Sequence[Policy], toolbox: Any, where: str) -> None:
    """Raise PlanError for the findings of :func:`policy_findings`; warn for its warnings."""
    findings, notes = policy_findings(policies, toolbox, where)
    for note in notes:
        warnings.warn(note, PolicyWarning, stacklevel=3)
    if findings:
        raise PlanError([Problem(code, message, None, field) for code, message, field
                         in findings])


_COMPILED: dict[tuple[Policy, ...], Rules] = {}


def rules_in_force(deployment: Rules, run: Sequence[Policy]) -> tuple[Rules, ...]:
    """The levels a run's calls are decided by: the deployment's, then the run's (compiled
    once per distinct rule set); () when there are none."""
    if not run:
        return (deployment,) if deployment else ()
    key = tuple(run)
    compiled = _COMPILED.get(key)
    if compiled is None:
        if len(_COMPILED) > 256:
            _COMPILED.clear()
        compiled = _COMPILED[key] = Rules(key)
    return (deployment, compiled) if deployment else (compiled,)


# ================================================================ the precedence (pure)
class Outcome(NamedTuple):
    """What decides a call: ``run`` (nothing needs deciding), ``wait`` (a person),
    ``approve`` / ``reject`` by ``by`` (``policy:ID``, ``grant:ID``) for ``reason``. (A
    named tuple: one is made per call, and a frozen dataclass's init costs 3x.)"""

    action: Literal["run", "wait", "approve", "reject"]
    by: str | None = None
    reason: str = ""


RUN = Outcome("run")
WAIT = Outcome("wait")


def who_decides(levels: Sequence[Rules], tool: str, args: Mapping[str, Any], *,
                needs: bool, person_only: bool,
                grants: Iterable[Mapping[str, Any]] = ()) -> Outcome:
    """The precedence of DESIGN §21 for one call of ``tool`` with ``args``. ``needs``: the
    call waits for a person by itself (its tool or step asks); ``person_only``: only a
    person may decide it (the tool's ``always_ask``, a fork's confirm-first); ``grants``:
    the live grants in the call's scope (each ``id``, ``expr``: its parsed condition)."""
    reject = ask = approve = None
    for level in levels:  # the deployment's first: its rule is the one named
        for p in level.matching(tool, args):
            if p.decision == "reject":
                reject = reject or p
            elif p.decision == "ask":
                if ask is None or (p.always_ask and not ask.always_ask):
                    ask = p
            else:
                approve = approve or p
    if reject is not None:
        return Outcome("reject", f"policy:{reject.id}", reject.reason)
    if ask is not None:
        needs = True
        person_only = person_only or ask.always_ask
    if not needs:
        return RUN
    if person_only:
        return WAIT
    if ask is None and approve is not None:
        return Outcome("approve", f"policy:{approve.id}", approve.reason)
    resolve = args_resolver(args)
    for g in grants:
        try:
            if evaluate(g["expr"], resolve):
                return Outcome("approve", f"grant:{g['id']}", f"grant {g['id']} by {g['by']}")
        except TypeError:
            continue  # cannot be evaluated on this call: the grant does not cover it
    return WAIT


# ================================================================ in the gate
def decide(k: RunCore, node: Node, args: dict[str, Any], h: str, needs: bool,
           person_only: bool) -> Outcome:
    """Decide a call (``args``, their hash ``h``) at the gate: ``run`` and ``wait`` are for
    the gate to act on; an ``approve`` or ``reject`` is recorded here (the call waits with
    its args, then is decided bound to their hash, both before its start; no preview is
    made: nobody reads it), a reject ending the step."""
    tool = node.tool
    name = tool.name if tool is not None else (node.step.tool or "")
    person_only = person_only or (tool is not None and tool.always_ask)
    grants = _live_grants(k, node, name) if k.state.grants and not person_only else ()
    out = who_decides(k.rules, name, args, needs=needs, person_only=person_only,
                      grants=grants)
    if out.action in ("run", "wait"):
        return out
    k.emit(K.STEP_WAITING_CONFIRMATION, node.id,
           payload={"args": args, "args_hash": h, "tool": node.step.tool})
    payload = {"args_hash": h, "by": out.by, "reason": out.reason}
    if out.action == "approve":
        k.emit(K.STEP_APPROVED, node.id, payload={**payload, "note": None})
    else:
        k.emit(K.STEP_REJECTED, node.id, payload=payload)
        finished(k, node)
    return out


def covered(k: RunCore, grant: Mapping[str, Any]) -> list[str]:
    """The calls a grant just given decides among those waiting for a person now (in its
    scope, of its tool, args matching, no rule or always_ask in the way), in order. The
    caller approves each (``by="grant:ID"``, bound to its own args) on the run's loop, so a
    decision racing it finds them decided."""
    by = f"grant:{grant['id']}"
    expr = condition(grant["when"])
    out = []
    for step_id, st in k.steps.items():
        if st.status != StepStatus.WAITING_CONFIRMATION or st.reason or step_id == grant[
                "step_id"]:
            continue
        node = k.nodes.get(step_id)
        if node is None or node.tool is None or node.tool.always_ask \
                or step_id in k.state.confirm_first \
                or not _in_scope(grant, node.tool.name, step_id, st.parent):
            continue
        decided = who_decides(k.rules, node.tool.name, dict(st.args or {}), needs=True,
                              person_only=False, grants=[{**grant, "expr": expr}])
        if decided.by == by:
            out.append(step_id)
    return out


def _live_grants(k: RunCore, node: Node, tool: str) -> list[dict[str, Any]]:
    now = k.clock.now()
    rules = fingerprint(k.rules)
    parent = k.steps[node.id].parent
    return [{**g, "expr": condition(g["when"])} for g in k.state.grants.values()
            if grant_status(g, now, rules) == "active" and _in_scope(g, tool, node.id, parent)]


def _in_scope(g: Mapping[str, Any], tool: str, step_id: str, parent: str | None) -> bool:
    if g["tool"] != tool:
        return False
    if g["scope"] == "step":
        return (parent or step_id) == g["parent"]
    return True


# ================================================================ a person's grant
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_TTL = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$")


def parse_ttl(value: Any, step_id: str = "") -> float:
    """A grant's time to live in seconds: a number of seconds or a duration (``90s``,
    ``10m``, ``2h``, ``1d``). Raises DecisionError naming the value and the forms."""
    if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
        return float(value)
    m = _TTL.match(value) if isinstance(value, str) else None
    if m is None or float(m.group(1)) <= 0:
        raise DecisionError(f"step {step_id!r}: grant ttl {safe_repr(value)} is not a duration;"
                            " give seconds (600) or a duration such as 90s, 10m, 2h, 1d",
                            step_id=step_id, field="grant.ttl_s")
    return float(m.group(1)) * _UNITS[m.group(2) or "s"]


def make_grant(k: RunCore, step_id: str, grant: Any) -> dict[str, Any]:
    """The record of a grant a person gives with the approval of ``step_id``: ``{"when":
    CONDITION, "scope": "step" | "run", "ttl_s": SECONDS | "10m"}`` checked (the condition
    parses, reads only args the tool has). Raises DecisionError naming the field."""
    if not isinstance(grant, Mapping):
        raise DecisionError(f"step {step_id!r}: a grant is an object {{when, scope, ttl_s}}, "
                            f"got {safe_repr(grant)}", step_id=step_id, field="grant")
    extra = sorted(set(grant) - {"when", "scope", "ttl_s"})
    if extra:
        raise DecisionError(f"step {step_id!r}: a grant takes when, scope and ttl_s, not "
                            f"{', '.join(extra)}", step_id=step_id, field="grant")
    tool = k.nodes[step_id].tool
    when = grant.get("when")
    if not isinstance(when, str) or not when.strip():
        raise DecisionError(f"step {step_id!r}: a grant needs a condition over the call's "
                            "args, e.g. when='args.amount <= 100'", step_id=step_id,
                            field="grant.when")
    try:
        expr = condition(when)
    except ValueError as exc:
        raise DecisionError(f"step {step_id!r}: grant {exc}", step_id=step_id,
                            field="grant.when") from None
    _check_arg_names(tool, step_id, args_refs(expr))
    scope = grant.get("scope", "step")
    if scope == "chain":
        raise DecisionError(f"step {step_id!r}: grant scope 'chain' is not built yet; use "
                            "'step' or 'run'", step_id=step_id, field="grant.scope")
    if scope not in GRANT_SCOPES:
        raise DecisionError(f"step {step_id!r}: grant scope {safe_repr(scope)} is not one of "
                            "step, run", step_id=step_id, field="grant.scope")
    ttl = parse_ttl(grant.get("ttl_s", 600), step_id)
    st = k.steps[step_id]
    return {"id": f"g{len(k.state.grants) + 1}", "when": when, "scope": scope,
            "tool": tool.name if tool is not None else "", "parent": st.parent or step_id,
            "expires_at": k.clock.now() + ttl, "rules": fingerprint(k.rules)}


def _check_arg_names(tool: Tool | None, step_id: str, names: list[str]) -> None:
    if tool is None:
        return
    from chainlab._text import did_you_mean

    params = tool.input_schema().get("properties") or {}
    for name in names:
        if name not in params:
            raise DecisionError(f"step {step_id!r}: grant reads args.{name}, but tool "
                                f"{tool.name!r} has no arg {name!r}"
                                f"{did_you_mean(name, params, list_known=True)}",
                                step_id=step_id, field="grant.when")
