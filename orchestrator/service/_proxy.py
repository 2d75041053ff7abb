"""Who is asking, and through what: the client address, scheme and host of a request,
taking ``X-Forwarded-*`` headers only from peers the operator trusts.

Behind a TLS proxy the socket says ``http`` and the proxy's address; the proxy's
``X-Forwarded-Proto``/``-For``/``-Host`` say what the client used. Anyone can send those
headers, so they count only when the peer is one of ``trusted`` networks (the proxies'
addresses, set by ``skillog serve --trusted-proxy``). ``public_origin``
(``--public-origin https://skillog.example.com``) is the one origin browsers use: writes
must come from it, requests must be addressed to its host, and the console's cookie is
``Secure`` when it is ``https``.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.types import Scope

from eventlog import SkillogError

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class ProxySettingError(SkillogError):
    """A ``--trusted-proxy`` or ``--public-origin`` that is not one."""


def trusted_networks(values: list[str]) -> tuple[Network, ...]:
    """``--trusted-proxy`` values (an address or a CIDR network each) as networks."""
    networks = []
    for value in values:
        try:
            networks.append(ipaddress.ip_network(value.strip(), strict=False))
        except ValueError as e:
            raise ProxySettingError(
                f"--trusted-proxy {value!r}: not an IP address or network ({e}); "
                "give the proxy's address, e.g. 127.0.0.1 or 10.0.0.0/8"
            ) from e
    return tuple(networks)


def public_origin(value: str | None) -> str | None:
    """``--public-origin`` checked and normalised to ``scheme://host[:port]``."""
    if value is None:
        return None
    parts = urlsplit(value.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc or parts.path not in ("", "/"):
        raise ProxySettingError(
            f"--public-origin {value!r}: give the scheme and host browsers use, and nothing "
            "more, e.g. https://skillog.example.com"
        )
    if parts.query or parts.fragment or "@" in parts.netloc:
        raise ProxySettingError(f"--public-origin {value!r}: no user, query or fragment")
    return f"{parts.scheme}://{parts.netloc.lower()}"


@dataclass(frozen=True)
class Proxying:
    """The operator's settings (see the module docstring)."""

    trusted: tuple[Network, ...] = ()
    origin: str | None = None

    @classmethod
    def from_settings(cls, trusted: list[str], origin: str | None) -> Proxying:
        """From ``--trusted-proxy`` values and ``--public-origin`` (checked: a clear
        :class:`ProxySettingError` otherwise)."""
        return cls(trusted_networks(trusted), public_origin(origin))

    def trusts(self, peer: str | None) -> bool:
        if peer is None or not self.trusted:
            return False
        try:
            address = ipaddress.ip_address(peer)
        except ValueError:
            return False
        return any(address in network for network in self.trusted)


@dataclass(frozen=True)
class Seen:
    """A request as its client made it: ``client`` address, ``scheme``, ``host``."""

    client: str
    scheme: str
    host: str
    host_rewritten: bool = False  # by a trusted proxy that did not say the original


def _last(value: str | None) -> str | None:
    # The proxy nearest to us appends last: with several values, the last one is its own.
    if value is None:
        return None
    parts = [p.strip() for p in value.split(",") if p.strip()]
    return parts[-1] if parts else None


def seen(scope: Scope, headers: Headers, proxying: Proxying) -> Seen:
    """The request as its client made it (forwarded headers from trusted peers only)."""
    peer = scope.get("client")
    address = peer[0] if peer else "-"
    scheme: str = scope.get("scheme", "http")
    host = headers.get("host", "")
    if not proxying.trusts(peer[0] if peer else None):
        return Seen(address, scheme, host)
    # X-Forwarded-For: the rightmost address not itself a trusted proxy is the client.
    chain = [p.strip() for p in headers.get("x-forwarded-for", "").split(",") if p.strip()]
    client = address
    for hop in reversed(chain):
        client = hop
        if not proxying.trusts(hop):
            break
    proto = (_last(headers.get("x-forwarded-proto")) or scheme).lower()
    forwarded_host = _last(headers.get("x-forwarded-host"))
    return Seen(
        client,
        proto if proto in ("http", "https") else scheme,
        forwarded_host or host,
        forwarded_host is None,
    )


def host_refusal(request: Seen, proxying: Proxying) -> str | None:
    """Why a request addressed to another host than the public origin's is refused
    (a DNS-rebinding page reaches the server under its own name), or None."""
    if proxying.origin is None:
        return None
    expected = urlsplit(proxying.origin).netloc
    if request.host.lower() == expected or request.host_rewritten:
        return None
    return (
        f"this server answers as {proxying.origin} (--public-origin), not for host "
        f"{request.host!r}; a proxy in front must pass X-Forwarded-Host or keep the Host"
    )


def write_refusal(origin: str | None, request: Seen, proxying: Proxying) -> str | None:
    """Why a browser write from ``origin`` is refused, or None: it must come from the
    public origin, or (without one) from the origin the request was addressed to."""
    if origin is None:
        return None
    allowed: tuple[str, ...]
    if proxying.origin is not None:
        allowed = (proxying.origin,)
    else:  # the scheme the browser used may be unknown here (a proxy not trusted)
        allowed = (f"http://{request.host.lower()}", f"https://{request.host.lower()}")
    if origin.lower() in allowed:
        return None
    return f"cross-origin writes are refused (this console's origin is {allowed[0]})"


def secure(request: Seen, proxying: Proxying) -> bool:
    """Whether the console's cookie is ``Secure``: the browser used https."""
    if proxying.origin is not None:
        return proxying.origin.startswith("https://")
    return request.scheme == "https"
