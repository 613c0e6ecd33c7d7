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

Each kind is loaded the first time a run has a step of it (a dict that makes a missing kind
on first lookup, then answers at dict speed): a chain with no agent step never loads the agent
kind, nor the agent package it runs on. A new kind of step is a module of its own and one
entry here."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from chainlab.runtime.engine.attempt.kind import Kind

__all__ = ["KINDS", "NAMES"]


def _call() -> Kind:
    from chainlab.runtime.engine.attempt.call import ToolCall

    return ToolCall()


def _job() -> Kind:
    from chainlab.runtime.engine.attempt.job import RemoteJob

    return RemoteJob()


def _chain() -> Kind:
    from chainlab.runtime.engine.attempt.chain import SubChain

    return SubChain()


def _for_each() -> Kind:
    from chainlab.runtime.engine.attempt.for_each import ForEach

    return ForEach()


def _agent() -> Kind:
    from chainlab.runtime.engine.attempt.agent import AgentStep

    return AgentStep()


_LOADERS: dict[str, Callable[[], Kind]] = {
    "call": _call, "job": _job, "chain": _chain, "for_each": _for_each, "agent": _agent}
#: every kind's name, in the table's order
NAMES: tuple[str, ...] = tuple(_LOADERS)


class _Kinds(dict[str, Kind]):
    """The kinds made so far; a kind asked for the first time is made then."""

    def __missing__(self, name: str) -> Kind:
        kind = self[name] = _LOADERS[name]()  # (KeyError for a name that is no kind)
        return kind


#: every kind by name (``Node.kind``); only ``NAMES`` lists them all
KINDS: Mapping[str, Kind] = _Kinds()
