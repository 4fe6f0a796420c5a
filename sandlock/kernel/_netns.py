"""A network namespace of the sandbox's own (``--net-private-loopback``), and what the
supervisor needs to act across it: which namespace a socket lives in, and putting a
socket made in the host's namespace in the command's descriptor table.

A socket belongs for life to the namespace it was made in; connect() and send() never
leave it. So a destination of the host's (what the rules allow) is reached by a
socket sandlock makes in its own namespace, connected there, then installed under the
command's descriptor number (SECCOMP_IOCTL_NOTIF_ADDFD with SETFD: an atomic dup2
into the caller, while its call is held).
"""

from __future__ import annotations

import ctypes
import errno
import os
import struct

from ._libc import ioctl, syscall
from ._syscalls import nr

CLONE_NEWNET = 0x40000000

_AF_INET, _SOCK_DGRAM = 2, 2
_AF_NETLINK, _NETLINK_SOCK_DIAG = 16, 4
DIAG_MESSAGE = b"diag"  # what comes with the sock_diag socket (``send_diag_socket``)
_MSG_CMSG_CLOEXEC = 0x40000000
_SIOCGIFFLAGS, _SIOCSIFFLAGS = 0x8913, 0x8914
_SIOCGSKNS = 0x894C  # a socket's network namespace, as a descriptor (CAP_NET_ADMIN over it)
_IFF_UP = 0x1
_IFREQ = struct.Struct("16sh22x")  # ifr_name, ifr_flags, the rest of the union

_IOCTL_ADDFD = 0x40182103
_ADDFD = struct.Struct("<QIIII")  # id, flags, srcfd, newfd, newfd_flags
_ADDFD_FLAG_SETFD = 1  # install at newfd, replacing what is there (dup2)


def bring_loopback_up() -> None:
    """``lo`` up in the caller's network namespace (a new one comes with it down),
    with a raw ioctl: no netlink. Needs CAP_NET_ADMIN there (the namespace's creator)."""
    fd = syscall(nr("socket"), _AF_INET, _SOCK_DGRAM | os.O_CLOEXEC, 0)
    try:
        request = ctypes.create_string_buffer(_IFREQ.pack(b"lo", 0), _IFREQ.size)
        ioctl(fd, _SIOCGIFFLAGS, request)
        _, flags = _IFREQ.unpack(request.raw)
        ioctl(fd, _SIOCSIFFLAGS, _IFREQ.pack(b"lo", flags | _IFF_UP))
    finally:
        os.close(fd)


def send_diag_socket(channel: int) -> None:
    """Send a NETLINK_SOCK_DIAG socket of the caller's network namespace on unix
    socket ``channel`` (SCM_RIGHTS, with ``DIAG_MESSAGE``): the kernel answers about a
    namespace's unix sockets only a socket of that namespace, and sandlock may not take
    one from the keeper (not dumpable: it holds a copy of sandlock's memory)."""
    import _socket  # (after init's fork: not on the way to the command)

    fd = syscall(nr("socket"), _AF_NETLINK, _SOCK_DGRAM | os.O_CLOEXEC, _NETLINK_SOCK_DIAG)
    sender = _socket.socket(fileno=channel)
    try:
        sender.sendmsg([DIAG_MESSAGE], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, struct.pack("i", fd))])
    finally:
        sender.detach()
        os.close(fd)


def receive_diag_socket(channel: int, timeout: float) -> int:
    """The descriptor ``send_diag_socket`` sent on ``channel`` (close-on-exec; -1: none
    within ``timeout`` seconds: the keeper is gone)."""
    import _socket

    view = _socket.socket(fileno=channel)
    try:
        view.settimeout(timeout)
        message, ancillary, _, _ = view.recvmsg(len(DIAG_MESSAGE), _socket.CMSG_SPACE(4),
                                                _MSG_CMSG_CLOEXEC)
    except OSError:
        return -1
    finally:
        view.setblocking(True)
        view.detach()
    fds = [struct.unpack_from("i", data)[0] for level, kind, data in ancillary
           if (level, kind) == (_socket.SOL_SOCKET, _socket.SCM_RIGHTS) and len(data) >= 4]
    if message == DIAG_MESSAGE and len(fds) == 1:
        return fds[0]
    for fd in fds:
        os.close(fd)
    return -1


def own_network_namespace() -> int:
    """The inode of sandlock's own network namespace."""
    return os.stat("/proc/self/ns/net").st_ino


def socket_namespace(fd: int) -> int | None:
    """The inode of the network namespace socket ``fd`` lives in; None when the kernel
    will not say, which is when sandlock has no CAP_NET_ADMIN over that namespace (the
    host's, for a user without privileges: never the sandbox's, which sandlock's user
    owns)."""
    try:
        namespace = ioctl(fd, _SIOCGSKNS, 0)
    except OSError as exc:
        if exc.errno == errno.EPERM:
            return None
        raise
    try:
        return os.fstat(namespace).st_ino
    finally:
        os.close(namespace)


def install_fd(listener: int, notif_id: int, fd: int, target: int, cloexec: bool) -> None:
    """Put ``fd`` (sandlock's) at ``target`` in the descriptor table of the thread whose
    call ``notif_id`` is held, replacing what is there; raises OSError (ENOENT: gone)."""
    ioctl(listener, _IOCTL_ADDFD, _ADDFD.pack(notif_id, _ADDFD_FLAG_SETFD, fd, target,
                                               os.O_CLOEXEC if cloexec else 0))


def fd_close_on_exec(pid: int, fd: int) -> bool:
    """Is thread ``pid``'s descriptor ``fd`` close-on-exec (its fdinfo's flags)?"""
    with open(f"/proc/{pid}/fdinfo/{fd}", "rb") as info:
        for line in info:
            if line.startswith(b"flags:"):
                return bool(int(line.split()[1], 8) & os.O_CLOEXEC)
    return False
