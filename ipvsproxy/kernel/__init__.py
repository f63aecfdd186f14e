"""The kernel layer: IPVS, addresses, ipsets, iptables, conntrack and sysctls.

pyroute2's package ``__init__`` imports every module it has (NDB, wireless, devlink, plan9
and more), which was about half of ``sync --once``'s start in the lab, where every file read
crosses hostfs. This layer uses a few submodules, so the package is registered bare before
any of them is imported: they load alone. The first name asked of the package itself
(``from pyroute2 import IPRoute``, as some tests write) runs its ``__init__`` then.
"""

from __future__ import annotations

from ipvsproxy.lean_import import register_bare

register_bare("pyroute2")
