"""Addresses as the egress proxy's deny list holds them (shared by the host and the proxy).

Its own module, light, so that the host side need not import the ``proxy.py`` plugin
(which registers its flags on import) to write the list the plugin reads.
"""

from __future__ import annotations

import ipaddress

NAT64_PREFIX = ipaddress.IPv6Network("64:ff9b::/96")
"""NAT64's well-known prefix (RFC 6052): its addresses stand for the IPv4 ones they embed."""


def normal_address(address: str) -> str:
    """An address as the deny list holds it: no zone, IPv4-mapped IPv6 as IPv4.

    An address of NAT64's well-known prefix (``64:ff9b::/96``, RFC 6052) is the IPv4
    address it embeds: on an IPv6-only host with NAT64 a connection to it reaches that
    address (a provider's API, or the host's private network).

    >>> normal_address("::ffff:93.184.216.34"), normal_address("2001:DB8::1")
    ('93.184.216.34', '2001:db8::1')
    >>> normal_address("64:ff9b::10.0.0.5")
    '10.0.0.5'
    """
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        if ip in NAT64_PREFIX:
            return str(ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF))
    return str(ip)
