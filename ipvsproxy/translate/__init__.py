"""Pure translation of a cluster snapshot into the desired kernel state."""

from ipvsproxy.translate.settings import LocalDetectMode, Settings, parse_nodeport_addresses
from ipvsproxy.translate.translate import translate

__all__ = ["LocalDetectMode", "Settings", "parse_nodeport_addresses", "translate"]
