"""What a network call is, and how it is performed on the command's behalf: the only
code that reads the child (materialize: owned copies of its sockaddrs, messages and
the first part of a send's bytes, its socket duplicated) and the only code that acts
for it (execute: connect, bind, listen and send on sandlock's duplicate; the
Landlock-confined worker; the binder, which binds paths as the command would), with
the supervisor's worker threads and pidfd cache. It judges nothing: the verdict
between the two is net/'s.

Internal to sandlock (not public API).
"""

from __future__ import annotations

from .._lazy import lazy_exports

TYPE_CHECKING = False  # typing costs ~5 ms to import: not on the start-up path
if TYPE_CHECKING:
    from . import _execute as execute
    from . import _sending as sending
    from ._binder import Binder, PathBind, become_the_command, perform
    from ._binder import serve as serve_binds
    from ._execute import ConfinedWorker, Deferred, Outcome, connect, disconnect, local_port
    from ._materialize import Message, Refused, Request, Socket, materialize
    from ._names import NAME_CALLS, asked_name, give_name
    from ._payload import HeldBytes, passes_memfd
    from ._sockaddr import (
        AF_NETLINK,
        AF_UNIX,
        InetAddress,
        OtherAddress,
        SockAddress,
        UnixAddress,
        describe,
        inet,
        printable,
    )
    from ._sockaddr import encode as encode_address
    from ._sockaddr import parse as parse_address
    from ._workers import PidfdCache, WorkerPool

# name -> the private module defining it (``module:attribute`` when renamed here,
# ``module:`` for the module itself); each module is imported on first use, so
# importing the package costs nothing (init's binder thread imports it at its first
# request only)
_EXPORTS = {
    "AF_NETLINK": "_sockaddr",
    "AF_UNIX": "_sockaddr",
    "Binder": "_binder",
    "ConfinedWorker": "_execute",
    "Deferred": "_execute",
    "HeldBytes": "_payload",
    "InetAddress": "_sockaddr",
    "Message": "_materialize",
    "NAME_CALLS": "_names",
    "OtherAddress": "_sockaddr",
    "Outcome": "_execute",
    "PathBind": "_binder",
    "PidfdCache": "_workers",
    "Refused": "_materialize",
    "Request": "_materialize",
    "SockAddress": "_sockaddr",
    "Socket": "_materialize",
    "UnixAddress": "_sockaddr",
    "WorkerPool": "_workers",
    "asked_name": "_names",
    "become_the_command": "_binder",
    "connect": "_execute",
    "describe": "_sockaddr",
    "disconnect": "_execute",
    "encode_address": "_sockaddr:encode",
    "execute": "_execute:",
    "give_name": "_names",
    "inet": "_sockaddr",
    "local_port": "_execute",
    "materialize": "_materialize",
    "parse_address": "_sockaddr:parse",
    "passes_memfd": "_payload",
    "perform": "_binder",
    "printable": "_sockaddr",
    "sending": "_sending:",
    "serve_binds": "_binder:serve",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals(), __all__)
