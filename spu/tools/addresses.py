"""Addresses as the egress proxy's deny list holds them (shared by the host and the proxy).

Its own module, light, so that the host side need not import the ``proxy.py`` plugin
(which registers its flags on import) to write the list the plugin reads.
"""

from __future__ import annotations

import ipaddress


def normal_address(address: str) -> str:
    """An address as the deny list holds it: no zone, IPv4-mapped IPv6 as IPv4.

    >>> normal_address("::ffff:93.184.216.34"), normal_address("2001:DB8::1")
    ('93.184.216.34', '2001:db8::1')
    """
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return str(ip)
