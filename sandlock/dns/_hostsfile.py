"""Names the system resolves without DNS: /etc/hosts, in nsswitch's order, and localhost.

The command's own C library reads /etc/hosts before it asks DNS (``hosts: files dns``
in /etc/nsswitch.conf, the norm), so a name the user wrote into the hosts file, or
``localhost``, never reaches sandlock's responder from such a program. sandlock pins
those names the same way, so that the verdict allows the address the command's own
lookup gave, and a program without /etc/hosts in view (``-r`` without /etc) gets the
same answer from the responder.

Entries are the user's own configuration: pinned as written, like ``--resolve``
(loopback and private addresses included), never filtered as upstream answers are.
``localhost`` and every name under ``.localhost`` mean loopback whatever the file
says (RFC 6761): 127.0.0.1, ::1 and the file's loopback addresses for them, nothing
else, and never a DNS query.

The files are read once per run, in sandlock's process before the command starts
(``SystemFiles``, with /etc/resolv.conf), and the hosts file is searched per name
rather than parsed whole: hosts files of ad blockers have hundreds of thousands of
lines, of which a run needs a few.
"""

from __future__ import annotations

import os

from .._record import record
from ..netrules import is_localhost, normalise_name

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ..netrules import IPAddress

HOSTS = "/etc/hosts"
NSSWITCH = "/etc/nsswitch.conf"
RESOLV_CONF = "/etc/resolv.conf"
MAX_SIZE = 64 << 20  # read at most this much of a hosts file (the largest lists are ~20 MiB)
# Where the hosts file stands against DNS in nsswitch's "hosts:" line.
FIRST, AFTER_DNS, UNUSED = "first", "after dns", "unused"
_DNS_SOURCES = ("dns", "resolve")  # systemd-resolved's module reads /etc/hosts itself
_AFTER_NAME = frozenset(" \t\r\n#.")  # what may follow a name on a line (a trailing dot)


@record
class SystemFiles:
    """The resolver's files as they were before the command started (None: unreadable).

    Read in sandlock's process before the fork, and only then: a policy that lets the
    command write /etc (``-w /etc``, ``-w /``) would otherwise let it choose what a
    rule's name means (``10.0.0.5 api.openai.com`` in /etc/hosts, or its own server in
    /etc/resolv.conf) before sandlock pins the name.
    """

    hosts: str | None
    nsswitch: str | None
    resolv_conf: str | None

    @classmethod
    def read(cls) -> SystemFiles:
        return cls(_read(HOSTS), _read(NSSWITCH, 1 << 20), _read(RESOLV_CONF, 1 << 20))


class HostsFile:
    """What the system's hosts file says about a name, and when it counts."""

    def __init__(self, text: str, order: str = FIRST) -> None:
        """``text``: the file's content; ``order``: FIRST, AFTER_DNS or UNUSED."""
        self._text = text.lower()
        self.order = order
        self._found: dict[str, tuple[IPAddress, ...]] = {}

    @classmethod
    def of(cls, files: SystemFiles | None) -> HostsFile:
        """The hosts file of ``files`` (a missing or unreadable one is empty)."""
        order = hosts_order_of(files.nsswitch) if files is not None else UNUSED
        return cls((files.hosts or "") if order != UNUSED else "", order)

    def before_dns(self, name: str) -> tuple[IPAddress, ...] | None:
        """The addresses to pin for ``name`` without asking DNS, or None to ask it."""
        name = normalise_name(name)
        if is_localhost(name):
            loopback = tuple(a for a in self.entries(name) if a.is_loopback)
            return tuple(dict.fromkeys((*map(_address, ("127.0.0.1", "::1")), *loopback)))
        if self.order == FIRST:
            return self.entries(name) or None
        return None

    def after_dns(self, name: str) -> tuple[IPAddress, ...]:
        """The addresses to pin for ``name`` when DNS gave none ("dns files")."""
        return self.entries(normalise_name(name)) if self.order == AFTER_DNS else ()

    def entries(self, name: str) -> tuple[IPAddress, ...]:
        """Every address the file gives ``name`` (normalised), in the file's order, on
        every line that names it (as glibc's getaddrinfo collects them)."""
        found = self._found.get(name)
        if found is None:
            found = self._found[name] = tuple(dict.fromkeys(self._search(name)))
        return found

    def _search(self, name: str):
        text = self._text
        start = text.find(name)
        while start >= 0:
            end = start + len(name)
            if (start and not text[start - 1].isspace()) or \
                    (end < len(text) and text[end] not in _AFTER_NAME):
                start = text.find(name, end)  # a part of another name ("example" in "a.example")
                continue
            line_start = text.rfind("\n", 0, start) + 1
            line_end = text.find("\n", start)
            if line_end < 0:
                line_end = len(text)
            fields = text[line_start:line_end].partition("#")[0].split()
            if len(fields) > 1 and name in map(_entry_name, fields[1:]):
                address = _address(fields[0])
                if address is not None:
                    yield address
            start = text.find(name, line_end)


def hosts_order(path: str = NSSWITCH) -> str:
    """Where the nsswitch.conf at ``path`` puts the hosts file (``hosts_order_of``)."""
    return hosts_order_of(_read(path, 1 << 20))


def hosts_order_of(text: str | None) -> str:
    """Where nsswitch.conf's ``hosts:`` line puts the hosts file ("files") against DNS.

    A missing file, or one without a ``hosts:`` line, counts as ``files dns``: musl
    reads /etc/hosts first and has no nsswitch, and it is every distribution's line.
    """
    sources = None
    for line in (text or "").splitlines():
        key, colon, rest = line.partition("#")[0].partition(":")
        if colon and key.strip() == "hosts":
            sources = [word for word in rest.split() if not word.startswith("[")]
    if sources is None:
        return FIRST
    if "files" not in sources:
        return UNUSED
    dns = [sources.index(s) for s in _DNS_SOURCES if s in sources]
    return AFTER_DNS if dns and min(dns) < sources.index("files") else FIRST


def _entry_name(text: str) -> str:
    return text[:-1] if text.endswith(".") else text


def _address(text: str) -> IPAddress | None:
    from ipaddress import ip_address  # (not before the fork: ~2 ms)

    if "%" in text:  # a zone (fe80::1%eth0): a pin cannot keep one
        return None
    try:
        address = ip_address(text)
    except ValueError:
        return None
    mapped = getattr(address, "ipv4_mapped", None)
    return mapped or address


def _read(path: str, limit: int = MAX_SIZE) -> str | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        chunks = []
        size = 0
        while size < limit and (chunk := os.read(fd, min(1 << 20, limit - size))):
            chunks.append(chunk)
            size += len(chunk)
    except OSError:
        return None
    finally:
        os.close(fd)
    return b"".join(chunks).decode("utf-8", "replace")
