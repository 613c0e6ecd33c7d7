"""The run widget (:class:`RunWidget`, :mod:`.widget`) and its panels: the live DAG, the
legend, the approvals inbox, the step inspector, the faults section, the rollback
confirmation and the static picture a notebook keeps."""

from chainlab.jupyter.run_widget.widget import RunAt, RunWidget, Scrubber

__all__ = ["RunAt", "RunWidget", "Scrubber"]
