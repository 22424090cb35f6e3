"""Who may connect to the tap and inline listeners."""

from __future__ import annotations

import ipaddress
from typing import Any

__all__ = ["Networks", "peer_allowed", "peer_name"]

Networks = tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]


def peer_allowed(peer: Any, allow: Networks) -> bool:
    """Whether a connection from ``peer`` (the socket's peername) may be served: from
    an address in ``allow``, or from loopback when ``allow`` is empty."""
    try:
        addr = ipaddress.ip_address(peer[0].split("%", 1)[0])
    except (TypeError, ValueError, IndexError):
        return False
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped
    if not allow:
        return addr.is_loopback
    return any(addr in net for net in allow)


def peer_name(peer: Any) -> str:
    try:
        return str(peer[0])
    except (TypeError, IndexError):
        return "unknown"
