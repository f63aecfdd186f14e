"""Object names as Kubernetes validates them (apimachinery's validation.IsDNS1123Label etc.).

The API server never stores a name that breaks these rules, so a name that does comes from a
hand-edited manifest or a hostile one: it could carry spaces, newlines or text that forges
lines of a plan, and is refused.
"""

from __future__ import annotations

import re

_LABEL = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_LABEL = re.compile(_LABEL)
_DNS1123_SUBDOMAIN = re.compile(rf"{_LABEL}(\.{_LABEL})*")
_DNS1035_LABEL = re.compile("[a-z]([-a-z0-9]*[a-z0-9])?")
LABEL_MAX = 63
SUBDOMAIN_MAX = 253


def is_dns1123_label(name: str) -> bool:
    """Namespaces and port names: lower-case alphanumerics and '-', at most 63."""
    return len(name) <= LABEL_MAX and _DNS1123_LABEL.fullmatch(name) is not None


def is_dns1123_subdomain(name: str) -> bool:
    """EndpointSlice and Node names: dot-separated labels, at most 253."""
    return len(name) <= SUBDOMAIN_MAX and _DNS1123_SUBDOMAIN.fullmatch(name) is not None


def is_dns1035_label(name: str) -> bool:
    """Service names: a DNS-1123 label that starts with a letter."""
    return len(name) <= LABEL_MAX and _DNS1035_LABEL.fullmatch(name) is not None
