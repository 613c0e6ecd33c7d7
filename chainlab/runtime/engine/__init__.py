"""The engine: ONE run in ONE process (DESIGN §4-8). Compile a chain into a graph, schedule
it (the pure :mod:`.scheduler`), drive it (:mod:`.kernel`; its loop :mod:`.driver`, a step's
way through the graph :mod:`.flow`), run each step by its kind (the :mod:`.attempt` package:
one module per kind, :mod:`.attempt.call` the tool call with its seam and its fate,
:mod:`.attempt.job` a remote job, :mod:`.attempt.chain`, :mod:`.attempt.for_each`,
:mod:`.attempt.agent`), apply a person's decisions (:mod:`.decisions`), recover an
interrupted run (:mod:`.recovery`) and compensate (:mod:`.saga`). Imports nothing else from
``chainlab.runtime``."""
