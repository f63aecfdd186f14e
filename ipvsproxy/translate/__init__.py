"""Pure translation of a cluster snapshot into the desired kernel state."""

from ipvsproxy.translate.incremental import translate
from ipvsproxy.translate.settings import LocalDetectMode, Settings, parse_nodeport_addresses
from ipvsproxy.translate.translate import ServiceCache

__all__ = [
    "LocalDetectMode",
    "ServiceCache",
    "Settings",
    "parse_nodeport_addresses",
    "translate",
]
