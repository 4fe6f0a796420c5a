"""Unix sockets the sandbox bound itself, and how a socket file is traced back to one."""

from __future__ import annotations

from .._record import replace
from ..kernel import unix_socket_file
from ._sockaddr import SockAddress, UnixAddress


class SandboxSockets:
    """Unix sockets the sandbox bound itself: its own IPC, always reachable.

    Recognised by the socket's own inode, read from sandlock's duplicate of it at bind
    time; which socket a file stands for is then asked of the kernel, never inferred
    from a path the sandbox could swap. ``files`` (socket files' identities, learnt
    from the kernel) only says when that question is worth asking; while a bound file
    is not known yet (``pending``: the command bound it itself), it always is.
    """

    def __init__(self) -> None:
        self.sockets: dict[int, None] = {}  # socket inodes, oldest first
        self.files: set[tuple[int, int]] = set()
        self.pending: set[int] = set()  # socket inodes bound to a file not yet known

    def add(self, socket_inode: int, file: tuple[int, int] | None) -> None:
        self.sockets[socket_inode] = None
        if file is not None:
            self.files.add(file)

    def add_pending(self, socket_inode: int) -> None:
        self.sockets[socket_inode] = None
        self.pending.add(socket_inode)

    def learn(self, socket_inode: int, file: tuple[int, int]) -> None:
        self.pending.discard(socket_inode)
        self.files.add(file)

    def forget(self, socket_inode: int) -> None:
        self.sockets.pop(socket_inode, None)
        self.pending.discard(socket_inode)

    def may_be_ours(self, address: UnixAddress) -> bool:
        return address.identity in self.files or bool(self.pending)

    def __contains__(self, address: UnixAddress) -> bool:
        return address.bound_socket is not None and address.bound_socket in self.sockets

    def identify(self, address: SockAddress | None) -> SockAddress | None:
        """For a socket file the sandbox may have bound: which of its sockets is bound
        there (asked of the kernel), so that the verdict recognises it by its inode."""
        if not isinstance(address, UnixAddress) or address.abstract or not self.may_be_ours(address):
            return address
        for socket_inode in reversed(list(self.sockets)):  # the newest are the likeliest
            file = unix_socket_file(socket_inode)
            if file is None:
                if socket_inode not in self.pending:
                    self.forget(socket_inode)  # closed: never the answer again
                continue
            self.learn(socket_inode, file)
            if file == address.identity:
                return replace(address, bound_socket=socket_inode)
        return address
