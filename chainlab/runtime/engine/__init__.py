"""The engine: ONE run in ONE process (DESIGN §4-8). Compile a chain into a graph, schedule
it (the pure :mod:`.scheduler`), drive it (:mod:`.kernel`; its loop :mod:`.driver`, a step's
way through the graph :mod:`.flow`), run each attempt (the :mod:`.attempt` package, an
attempt's whole life: :mod:`.attempt.life`; :mod:`.attempt.call`: the one place a tool is
called; :mod:`.attempt.fate`: what its outcome means; a remote job: :mod:`.attempt.jobsubmit`,
:mod:`.attempt.jobwait`), apply a person's decisions (:mod:`.decisions`), recover
an interrupted run (:mod:`.recovery`) and compensate (:mod:`.saga`). Imports nothing else
from ``chainlab.runtime``."""
