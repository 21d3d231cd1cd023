"""Addresses as the egress proxy's deny list holds them (shared by the host and the proxy).

Its own module, light, so that the host side need not import the ``proxy.py`` plugin
(which registers its flags on import) to write the list the plugin reads.
"""

from __future__ import annotations

import ipaddress
import socket

NAT64_PREFIX = ipaddress.IPv6Network("64:ff9b::/96")
"""NAT64's well-known prefix (RFC 6052): its addresses stand for the IPv4 ones they embed."""

GLOBAL_UNICAST = ipaddress.IPv6Network("2000::/3")
"""IPv6's global unicast space (RFC 4291): every other IPv6 address is local to some network
or stands for another address (IPv4-compatible ``::a.b.c.d``, NAT64's local-use
``64:ff9b:1::/48``), and Python's ``is_global`` calls some of those global."""


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


def own_address(address: str) -> bool:
    """Whether ``address`` is assigned to an interface of this host (it can be bound).

    >>> own_address("127.0.0.1"), own_address("198.51.100.254")
    (True, False)
    """
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.bind((address, 0))
    except OSError:
        return False
    return True


def public_address(address: str) -> bool:
    """Whether a connection to ``address`` leaves this host for the internet.

    Not a loopback, private, link-local, reserved or multicast address, nor one of this
    host's own interfaces whatever its range (a host with a public address answers on it:
    services bound to every interface), nor an IPv6 address outside global unicast or one
    that embeds a local IPv4 address (IPv4-mapped, NAT64, 6to4, Teredo).

    >>> [public_address(a) for a in ("93.184.216.34", "127.0.0.1", "::ffff:10.0.0.1")]
    [True, False, False]
    >>> [public_address(a) for a in ("::10.0.0.1", "2002:a00:1::1", "64:ff9b:1::a00:1")]
    [False, False, False]
    """
    ip = ipaddress.ip_address(normal_address(address))
    if isinstance(ip, ipaddress.IPv6Address):
        if ip not in GLOBAL_UNICAST:
            return False
        embedded = [ip.sixtofour, *(ip.teredo or ())]
        if any(v4 is not None and not public_address(str(v4)) for v4 in embedded):
            return False
    return ip.is_global and not ip.is_multicast and not own_address(str(ip))
