"""Many processes, one store (DESIGN §13, §19): driver heartbeats and the decision mailbox
(:mod:`.liveness`), decisions sent to a run's driver through the store (:mod:`.routing`),
following a run another process drives (:mod:`.watching`), the cross-run inbox of what
waits for a person (:mod:`.inbox`) and of the runs that stand still with nothing to decide
(:mod:`.stalls`: nobody drives one, or its concurrency key is held), and the worker fleet:
what an enqueue checks (:mod:`.queue`), the worker that claims and drives queued runs
(:mod:`.workers`) and the factory of a worker with its own runtime (:mod:`.fleet`,
``new_worker``).

This code holds the runtime's parts by their real types and never touches their private
state: routing, the inbox and watching work on a :class:`~chainlab.runtime.host.Host`
(the store, the runs driven here, the liveness) and decide through
:class:`~chainlab.runtime.takeovers.Takeovers`; a worker holds its
:class:`~chainlab.runtime.Runtime`. A driver's :class:`~.liveness.Liveness` serves a run
through the runtime the run holds (``run.runtime``, a
:class:`~chainlab.runtime.run.RunOwner`), so the Host that owns the liveness is named by
no module the Host imports."""
