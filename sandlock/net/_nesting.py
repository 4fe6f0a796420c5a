"""Where a ``sandlock run`` inside the sandbox hands the sandbox's supervisor its network
rules (net._nests judges by them).

The run connects a SOCK_SEQPACKET unix socket to the abstract name ``NESTING_NAME``
(``_judge``);
the supervisor performs that connect to this service instead (the name is never looked
up), and the run sends one registration: its rules, as JSON lists in the grammars of
--net-allow, --net-deny, --net-bind, --http-allow and --http-deny (and "scope":
``ABSTRACT_SCOPE`` if its command's IPC is scoped), or ``{"network": ["enclosing"]}``
for a run whose network is the sandbox's (which registers for its socket files alone),
with the socket its keeper answers the supervisor's questions on attached, and its
command's Landlock ruleset (the binder binds its socket files under it too: _binder).
The reply is ``ok``, or ``error FIELD MESSAGE``
(FIELD: the policy field at fault, or ``-``). Anything
in the sandbox may register: a registration only narrows the threads its keeper claims
(an untrusted nest, in net._nests), and at most ``MAX_NESTS`` are kept.

    sandlock run (inside) ──connect("\\0sandlock-nesting")──> supervisor
             ══ this service: {"allow": [...], ...} + keeper's socket, ruleset ══> "ok"
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import stat
import threading

from .._hostfile import private_directory
from ..netcall import UnixAddress

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    Register = Callable[..., None]  # (rules or None, probe, name, ruleset=...)

MAX_REGISTRATION = 1 << 16  # bytes of rules
REGISTRATION_TIMEOUT = 5.0  # seconds a connected run has to send its registration


class NestingService:
    """A listening socket of sandlock's, in a directory of its own, and the thread that
    takes registrations on it; ``target`` is where the supervisor connects a run."""

    def __init__(self, register: Register) -> None:
        self._register = register
        self._directory = private_directory("sandlock-nesting-")
        path = os.path.join(self._directory, "socket")
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._server.bind(path)
        self._server.listen(8)
        found = os.stat(path)
        self.target = UnixAddress(os.fsencode(path), False, identity=(found.st_dev, found.st_ino))
        threading.Thread(target=self._serve, daemon=True, name="sandlock-nesting").start()

    def _serve(self) -> None:
        while True:
            try:
                connection, _address = self._server.accept()
            except OSError:
                return  # closed
            with connection:
                connection.settimeout(REGISTRATION_TIMEOUT)
                try:
                    connection.send(self._take(connection))
                except OSError:
                    pass  # the run is gone: nothing registered (or its keeper's socket closed)

    def _take(self, connection: socket.socket) -> bytes:
        data, fds, _flags, _address = socket.recv_fds(connection, MAX_REGISTRATION, 2)
        try:
            if not fds or not stat.S_ISSOCK(os.fstat(fds[0]).st_mode):
                return b"error - a registration comes with its keeper's socket"
            if len(fds) > 1 and not _is_ruleset(fds[1]):
                return b"error - the second descriptor of a registration is a Landlock ruleset"
            try:
                rules = _rules(data)
            except ValueError as exc:
                return b"error - " + str(exc).encode()
            ruleset = fds.pop() if len(fds) > 1 else -1
            probe = socket.socket(fileno=fds.pop())
            try:
                self._register(rules, probe, "a sandlock run in the sandbox", ruleset=ruleset)
            except ValueError as exc:  # (a bad rule, too many nests; the probe is closed)
                return b"error %s %s" % (getattr(exc, "field", "-").encode(), str(exc).encode())
            return b"ok"
        finally:
            for fd in fds:
                os.close(fd)

    def close(self) -> None:
        try:
            self._server.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._server.close()
        shutil.rmtree(self._directory, ignore_errors=True)


RULES = ("allow", "deny", "bind", "http_allow", "http_deny", "scope")
ENCLOSING = {"network": ["enclosing"]}  # a run whose network is the sandbox's


def _is_ruleset(fd: int) -> bool:
    try:
        return os.readlink(f"/proc/self/fd/{fd}") == "anon_inode:[landlock-ruleset]"
    except OSError:
        return False


def _rules(data: bytes) -> dict[str, list[str]] | None:
    """The registration's lists of rule strings, None for ENCLOSING (ValueError if
    malformed)."""
    try:
        rules = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        raise ValueError("the registration is not JSON") from None
    if rules == ENCLOSING:
        return None
    if not isinstance(rules, dict) or not set(rules) <= set(RULES):
        raise ValueError(f"a registration has {', '.join(RULES)}, and nothing else")
    if not all(isinstance(items, list) and all(isinstance(item, str) for item in items)
               for items in rules.values()):
        raise ValueError("its values are lists of rules (strings)")
    return rules
