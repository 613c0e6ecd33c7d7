"""An attempt's whole life, one package (issue 24, deliverable 4): a new kind of attempt goes
here and nowhere else.

- :mod:`.life`: :func:`~.life.run`, what the kernel's workers call: the gates (confirmation
  for exactly these args, the budget), ``step_started``, the call, the outcome recorded;
- :mod:`.call`: the one seam that calls a tool body (shared with compensations and the Dask
  executor) and how its failure is classified;
- :mod:`.fate`: the safety rule (retry, in doubt, failed: :func:`~.fate.fate_of`) and
  :func:`~.fate.record`, which writes the outcome, parks the step or arms its back-off timer;
- :mod:`.jobsubmit` and :mod:`.jobwait`: a remote job, submitted once (or found again after a
  crash) and waited on without holding a slot.

Import from the modules (``from chainlab.runtime.engine.attempt.life import run``): this
file re-exports nothing, so a module that needs only the call seam loads only that.
"""

__all__: list[str] = []
