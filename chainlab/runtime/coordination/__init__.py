"""Many processes, one store (DESIGN §13): driver heartbeats (:mod:`.liveness`), decisions
sent to a run's driver through the store (:mod:`.routing`), following a run another process
drives (:mod:`.watching`) and the cross-run inbox of what waits for a person
(:mod:`.inbox`)."""
