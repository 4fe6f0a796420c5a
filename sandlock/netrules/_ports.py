"""Port lists: the PORTS of a network rule and the value of --net-allow-bind.

Pure, like ``_spec``: a ``parse_*`` function returns a frozen value or raises
ValueError quoting the offending text.
"""

from __future__ import annotations

from .._grammar import check_printable, is_digits, shown, whole
from .._record import record

MAX_PORT = 65535


@record
class PortSet:
    """Ports 1-65535 as inclusive ranges, stored sorted with overlaps merged."""

    ranges: tuple[tuple[int, int], ...]

    def __post_init__(self) -> None:
        merged: list[tuple[int, int]] = []
        for lo, hi in sorted(self.ranges):
            if not 1 <= lo <= hi <= MAX_PORT:
                raise ValueError(f"invalid port range {lo}-{hi}")
            if merged and lo <= merged[-1][1] + 1:
                merged[-1] = (merged[-1][0], max(hi, merged[-1][1]))
            else:
                merged.append((lo, hi))
        object.__setattr__(self, "ranges", tuple(merged))

    @property
    def all(self) -> bool:
        return self.ranges == ((1, MAX_PORT),)

    def __contains__(self, port: int) -> bool:
        return any(lo <= port <= hi for lo, hi in self.ranges)

    def __or__(self, other: PortSet) -> PortSet:
        return PortSet(self.ranges + other.ranges)

    @property
    def text(self) -> str:
        """The set as a port list, for messages (``*`` for every port)."""
        if self.all:
            return "*"
        return ",".join(str(lo) if lo == hi else f"{lo}-{hi}" for lo, hi in self.ranges)


ALL_PORTS = PortSet(((1, MAX_PORT),))


def parse_ports(text: str) -> PortSet:
    """``*`` or a comma list of ports and LO-HI ranges (also the --net-allow-bind value)."""
    if text == "*":
        return ALL_PORTS
    check_printable(text)
    if not text:
        raise ValueError("empty port list")
    return PortSet(tuple(_port_range(item, text) for item in text.split(",")))


def _port_range(item: str, text: str) -> tuple[int, int]:
    if not item:
        raise ValueError(f"empty item in port list {text!r}")
    if item == "*":
        raise ValueError(f"'*' cannot be combined with other ports in {text!r}")
    lo_text, dash, hi_text = item.partition("-")
    if dash and not (lo_text and hi_text):
        raise ValueError(f"incomplete port range {item!r}")
    lo = parse_port(lo_text)
    hi = parse_port(hi_text) if dash else lo
    if lo > hi:
        raise ValueError(f"reversed port range {item!r} (write {hi}-{lo})")
    return lo, hi


def parse_port(text: str) -> int:
    """A port number: the one grammar of numbers (ASCII digits), from 1 to MAX_PORT."""
    if not is_digits(text):
        raise ValueError(f"invalid port {shown(text)} (expected a number from 1 to {MAX_PORT})")
    try:
        port = whole(text, MAX_PORT)
    except ValueError:
        digits = text if len(text) <= 20 else text[:20] + "..."
        raise ValueError(f"port {digits} is out of range (1 to {MAX_PORT})") from None
    if port == 0:
        raise ValueError(f"port 0 is not a port number (ports are 1 to {MAX_PORT})")
    return port
