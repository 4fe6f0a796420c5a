"""The kernel interfaces, through ctypes: Landlock, the seccomp filter and its BPF
assembler, syscall tables, seccomp user notification, pidfds and reads of another
process's memory, what sock_diag says about a unix socket and about the TCP sockets
listening on a port, capabilities, prctl,
namespaces and mounts, and the feature probe behind `sandlock check`.

Internal to sandlock (not public API). Nothing here knows about policies: the other
subpackages decide, this one talks to the kernel.
"""

from __future__ import annotations

from .._lazy import lazy_exports

TYPE_CHECKING = False  # typing costs ~5 ms to import: not on the start-up path
if TYPE_CHECKING:
    from . import _netns as netns
    from . import _landlock as landlock, _mounts as mounts, _ptrace as ptrace, _seccomp as seccomp
    from . import _tasks as tasks
    from ._bpf import returns as filter_actions
    from ._capabilities import EffectiveDropped, drop_capabilities
    from ._features import PID_MAX, action_available, namespaces, probe, protection_level
    from ._landlock import restrict_self
    from ._libc import (
        PR_GET_SECCOMP,
        PR_SET_CHILD_SUBREAPER,
        PR_SET_DUMPABLE,
        PR_SET_NO_NEW_PRIVS,
        PR_SET_PDEATHSIG,
        RESOLVE_IN_ROOT,
        RESOLVE_NO_MAGICLINKS,
        RESOLVE_NO_SYMLINKS,
        SECCOMP_MODE_FILTER,
        IoVec,
        close_on_exec_from,
        filesystem_type,
        inet_pton,
        ioctl,
        limit_tasks,
        openat2,
        prctl,
        seqpacket_pair,
        socket_option,
        syscall,
        take_fd,
    )
    from ._notify import Gone, Listener, Notification
    from ._remote import (
        MAX_COPY,
        cwd_of,
        duplicate_fd,
        open_pidfd,
        read_memory,
        read_string,
        write_memory,
    )
    from ._sockdiag import (SharedDiag, sock_diag_dump, socket_cookie, tcp_listeners,
                            tcp_sockets, unix_socket_file, unix_socket_name)
    from ._tasks import exited_children
    from ._seccomp import MSG_FASTOPEN, PROCESS_CREATION, SUPERVISED, WAIVABLE
    from ._syscalls import Arch, every_syscall, native_arch, nr

# name -> the private module defining it (``module:attribute`` when renamed here,
# ``module:`` for the module itself);
# each module is imported on first use, so importing the package costs nothing
_EXPORTS = {
    "Arch": "_syscalls",
    "EffectiveDropped": "_capabilities",
    "Gone": "_notify",
    "IoVec": "_libc",
    "Listener": "_notify",
    "MAX_COPY": "_remote",
    "MSG_FASTOPEN": "_seccomp",
    "Notification": "_notify",
    "PR_SET_CHILD_SUBREAPER": "_libc",
    "PR_SET_DUMPABLE": "_libc",
    "PR_GET_SECCOMP": "_libc",
    "PR_SET_NO_NEW_PRIVS": "_libc",
    "SECCOMP_MODE_FILTER": "_libc",
    "PR_SET_PDEATHSIG": "_libc",
    "RESOLVE_IN_ROOT": "_libc",
    "RESOLVE_NO_MAGICLINKS": "_libc",
    "RESOLVE_NO_SYMLINKS": "_libc",
    "SUPERVISED": "_seccomp",
    "PROCESS_CREATION": "_seccomp",
    "WAIVABLE": "_seccomp",
    "close_on_exec_from": "_libc",
    "cwd_of": "_remote",
    "drop_capabilities": "_capabilities",
    "duplicate_fd": "_remote",
    "exited_children": "_tasks",
    "filesystem_type": "_libc",
    "filter_actions": "_bpf:returns",
    "landlock": "_landlock:",
    "mounts": "_mounts:",
    "netns": "_netns:",
    "ptrace": "_ptrace:",
    "tasks": "_tasks:",
    "read_string": "_remote",
    "native_arch": "_syscalls",
    "every_syscall": "_syscalls",
    "namespaces": "_features",
    "nr": "_syscalls",
    "open_pidfd": "_remote",
    "openat2": "_libc",
    "prctl": "_libc",
    "inet_pton": "_libc",
    "ioctl": "_libc",
    "limit_tasks": "_libc",
    "probe": "_features",
    "PID_MAX": "_features",
    "action_available": "_features",
    "protection_level": "_features",
    "read_memory": "_remote",
    "restrict_self": "_landlock",
    "seccomp": "_seccomp:",
    "seqpacket_pair": "_libc",
    "socket_option": "_libc",
    "syscall": "_libc",
    "take_fd": "_libc",
    "SharedDiag": "_sockdiag",
    "sock_diag_dump": "_sockdiag",
    "socket_cookie": "_sockdiag",
    "tcp_listeners": "_sockdiag",
    "tcp_sockets": "_sockdiag",
    "unix_socket_file": "_sockdiag",
    "unix_socket_name": "_sockdiag",
    "write_memory": "_remote",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals(), __all__)
