"""The chain designer (:class:`ChainDesigner`, :mod:`.widget`): its draft (:mod:`.draft`,
pure Python), its step form (:mod:`.form`) and its palette and DAG preview (:mod:`.view`)."""

from chainlab.jupyter.designer.widget import (
    DAG_DELAY_S,
    YAML_DELAY_S,
    ChainDesigner,
    DesignerError,
    Reference,
)

__all__ = ["DAG_DELAY_S", "YAML_DELAY_S", "ChainDesigner", "DesignerError", "Reference"]
