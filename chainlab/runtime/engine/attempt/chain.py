"""The ``chain`` kind: a sub-chain step (``tool: chain:NAME``). Its steps (ids namespaced
``parent/child``) run on the same scheduler and limits; the step holds no slot while they do
and settles when they have: succeeded with their outputs (or the sub-chain's declared
``output``), or failed naming the steps that did not succeed (DESIGN §4).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from chainlab.events import ErrorKind, EventKind, StepStatus
from chainlab.events.status import RELEASES_DEPENDANTS
from chainlab.plan.inputs import select_output
from chainlab.runtime.engine.attempt.kind import Parent
from chainlab.runtime.engine.flow import children_failed, finished, start_children

if TYPE_CHECKING:
    from chainlab.runtime.engine.compile import Node
    from chainlab.runtime.engine.core import RunCore

K = EventKind
S = StepStatus

__all__ = ["SubChain"]


class SubChain(Parent):
    """A sub-chain step (``chain``)."""

    name = "chain"
    what = "sub-chain"

    async def run(self, k: RunCore, node: Node) -> None:
        """It starts: its steps are started, it holds no slot while they run."""
        st = k.steps[node.id]
        k.emit(K.STEP_STARTED, node.id, st.attempts + 1,
               {"args": k.args[node.id], "tool": node.step.tool, "subchain": True})
        k.sched.park(node.id)
        start_children(k, node, node.children)

    def child_settled(self, k: RunCore, node: Node) -> None:
        st = k.steps[node.id]
        if st.status != S.RUNNING:
            return
        bad = children_failed(k, node.children)
        if bad:
            k.emit(K.STEP_FAILED, node.id, st.attempts, {
                "error_kind": ErrorKind.EXECUTION_FAILED,
                "error": f"sub-chain steps did not succeed: {', '.join(bad)}"})
        else:
            prefix = node.id + "/"
            steps = k.steps
            output = {c[len(prefix):]: steps[c].output for c in node.children
                      if steps[c].status in RELEASES_DEPENDANTS}
            if node.subchain is not None and node.subchain.output is not None:
                output = select_output(node.subchain, output, st.args or {})
            k.emit(K.STEP_SUCCEEDED, node.id, st.attempts, {"output": output})
        finished(k, node)
