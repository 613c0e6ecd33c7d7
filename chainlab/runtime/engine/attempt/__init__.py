"""How each kind of step runs, one module (or folder) per kind, named after the kind (issue 24
deliverable 4, issue 44): a new kind of step goes here and nowhere else.

- :mod:`.kind`: the protocol every kind runs through (:class:`~.kind.Kind`, and
  :class:`~.kind.Parent` for a kind with steps of its own); the kernel, recovery, the saga,
  fork and what-if call it and never ask which kind they hold;
- :mod:`.kinds`: the registry, every kind by name (``Node.kind``), each loaded the first
  time a run has a step of it;
- :mod:`.call` (``call``): :class:`~.call.ToolCall` and :func:`~.call.gate`, the rule before
  any call of any kind (confirmation for exactly these args, the budget); with
  :mod:`.call.seam`, the one seam that calls a tool body (shared with remote jobs,
  compensations and the Dask executor) and how its failure is classified, and
  :mod:`.call.fate`, the safety rule (retry, in doubt, failed) and :func:`~.call.fate.record`,
  which writes an outcome, parks the step or arms its back-off timer;
- :mod:`.job` (``job``): :class:`~.job.RemoteJob`, submitted once (:mod:`.job.submit`, or found
  again after a crash) and waited on without holding a slot (:mod:`.job.wait`);
- :mod:`.chain` (``chain``): :class:`~.chain.SubChain`, a sub-chain step;
- :mod:`.for_each` (``for_each``): :class:`~.for_each.ForEach`, a step run once per item of a
  list known at run time;
- :mod:`.agent` (``agent``): :class:`~.agent.AgentStep`, a step whose model chooses tool calls
  turn by turn, and :mod:`.agent.calls`, the steps its calls become.

Import from the modules (``from chainlab.runtime.engine.attempt.call import gate``): this
file re-exports nothing, so a module that needs one kind loads that kind (and what it builds
on: a job and an agent step go through the call's gate, seam and fate), never the others.
"""

__all__: list[str] = []
