"""Every kind of step the engine runs, by name (``Node.kind``): what the kernel hands to
each :class:`~chainlab.runtime.engine.core.RunCore` as ``kinds``. The protocol is
:mod:`.kind`; a new kind of call is a module of its own and one entry here."""

from __future__ import annotations

from collections.abc import Mapping

from chainlab.runtime.engine.attempt.agent import AgentStep
from chainlab.runtime.engine.attempt.job import RemoteJob
from chainlab.runtime.engine.attempt.kind import Kind
from chainlab.runtime.engine.attempt.life import ToolCall
from chainlab.runtime.engine.attempt.mapped import ForEach
from chainlab.runtime.engine.attempt.subchain import SubChain

__all__ = ["KINDS"]

KINDS: Mapping[str, Kind] = {kind.name: kind for kind in (
    ToolCall(), RemoteJob(), SubChain(), ForEach(), AgentStep())}
