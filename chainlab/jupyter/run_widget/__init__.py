"""The run widget (:class:`RunWidget`, :mod:`.widget`) and its panels: the live DAG, the
legend, the approvals inbox, the step inspector, the faults section, the rollback
confirmation, the scrubber and the static picture a notebook keeps. Each panel takes the
widget as a small host protocol (:mod:`.host`), never the widget itself."""

from chainlab.jupyter.run_widget.scrubber import RunAt, Scrubber
from chainlab.jupyter.run_widget.widget import RunWidget

__all__ = ["RunAt", "RunWidget", "Scrubber"]
