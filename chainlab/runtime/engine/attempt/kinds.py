"""Every kind of step the engine runs, by name (``Node.kind``): what the kernel hands to
each :class:`~chainlab.runtime.engine.core.RunCore` as ``kinds``. The protocol is
:mod:`.kind`; each kind lives in the module (or folder) named after it:

==============  ===========================  ============================================
name            class                        a step that ...
==============  ===========================  ============================================
``call``        :class:`.call.ToolCall`      calls a tool
``job``         :class:`.job.RemoteJob`      submits a remote job once and waits on it
``chain``       :class:`.chain.SubChain`     runs a sub-chain's steps
``for_each``    :class:`.for_each.ForEach`   runs once per item of a list known at run time
``agent``       :class:`.agent.AgentStep`    lets a model choose tool calls turn by turn
==============  ===========================  ============================================

A new kind of step is a module of its own and one entry here."""

from __future__ import annotations

from collections.abc import Mapping

from chainlab.runtime.engine.attempt.agent import AgentStep
from chainlab.runtime.engine.attempt.call import ToolCall
from chainlab.runtime.engine.attempt.chain import SubChain
from chainlab.runtime.engine.attempt.for_each import ForEach
from chainlab.runtime.engine.attempt.job import RemoteJob
from chainlab.runtime.engine.attempt.kind import Kind

__all__ = ["KINDS"]

KINDS: Mapping[str, Kind] = {kind.name: kind for kind in (
    ToolCall(), RemoteJob(), SubChain(), ForEach(), AgentStep())}
