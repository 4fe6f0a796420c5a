"""getsockname/getpeername performed for the command (only runs with --port-remap
supervise them): the name asked of sandlock's duplicate of the socket, then written
into the caller's buffer as the kernel would write it (truncated to the length the
caller gave, the full length written back). What the name says (a virtual port) is
decided between the two, by net/ (``_portmap``)."""

from __future__ import annotations

import ctypes
import errno
import struct

from ..kernel import write_memory
from ._materialize import SOCKADDR_MAX

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ._execute import Outcome
    from ._materialize import Request

NAME_CALLS = ("getsockname", "getpeername")
_LENGTH = struct.Struct("=I")  # socklen_t
_libc = ctypes.CDLL(None, use_errno=True)


def asked_name(request: Request) -> bytes | int:
    """The raw sockaddr the call asks for (of the socket, or of its peer), or an errno."""
    call = _libc.getpeername if request.syscall == "getpeername" else _libc.getsockname
    buffer = ctypes.create_string_buffer(SOCKADDR_MAX)
    length = ctypes.c_uint32(SOCKADDR_MAX)
    if call(request.socket.fd, buffer, ctypes.byref(length)) != 0:
        return ctypes.get_errno() or errno.EBADF
    return buffer.raw[:min(length.value, SOCKADDR_MAX)]


def give_name(request: Request, raw: bytes) -> Outcome:
    """``raw`` written where the caller asked for the name (``Request.name_buffer``)."""
    pointer, length_pointer, room = request.name_buffer  # type: ignore[misc]
    try:
        if room and raw:
            write_memory(request.notification.pid, pointer, raw[:room])
        write_memory(request.notification.pid, length_pointer, _LENGTH.pack(len(raw)))
    except OSError:  # (Fault: the buffer is not writable)
        return -1, errno.EFAULT
    return 0, 0
