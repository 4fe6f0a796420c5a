"""Capabilities taken from a command that runs as root (and from sandlock's threads
that act as the command)."""

from __future__ import annotations

import ctypes
import os

from ._libc import prctl, syscall
from ._syscalls import nr

# Capabilities a command running as root would use to step over the sandbox:
# CAP_SYS_ADMIN and CAP_PERFMON read /proc/PID/environ, maps and auxv of any process
# (sandlock's and the keeper's too) whatever Landlock says; CAP_NET_ADMIN reconfigures
# the host's network (addresses, routes, qdiscs) over NETLINK_ROUTE, which is allowed;
# CAP_MKNOD makes device nodes (kmsg, disks) in a writable directory; CAP_SYS_RAWIO
# reads raw devices and I/O ports.
DROPPED_CAPABILITIES = (12, 17, 21, 27, 38)  # NET_ADMIN, SYS_RAWIO, SYS_ADMIN, MKNOD, PERFMON
_PR_CAPBSET_DROP = 24
_CAPABILITY_VERSION_3 = 0x20080522


def drop_capabilities(capabilities: tuple[int, ...]) -> None:
    """Remove ``capabilities`` from the calling process for good: bounding, effective,
    permitted and inheritable sets (ambient follows). no_new_privs keeps exec from
    adding them back, even for root; without CAP_SETPCAP (not root) the bounding set
    stays as it is, which no_new_privs makes harmless."""
    for cap in capabilities:
        try:
            prctl(_PR_CAPBSET_DROP, cap)
        except OSError:
            pass  # EPERM (no CAP_SETPCAP) or EINVAL (a capability this kernel lacks)
    header = (ctypes.c_uint32 * 2)(_CAPABILITY_VERSION_3, 0)
    data = (ctypes.c_uint32 * 6)()  # {effective, permitted, inheritable} x 2 words
    syscall(nr("capget"), header, data)
    for cap in capabilities:
        word, bit = divmod(cap, 32)
        for index in range(3):
            data[3 * word + index] &= ~(1 << bit) & 0xFFFFFFFF
    syscall(nr("capset"), header, data)


class EffectiveDropped:
    """``with EffectiveDropped():`` the calling thread acts without its effective
    capabilities (its permitted set is kept, and they come back on the way out): what
    sandlock does for a command that holds none (a root command's were dropped) must
    not succeed by sandlock's own. Capabilities are per thread; nothing to do but for
    root."""

    def __enter__(self) -> EffectiveDropped:
        self._saved = None
        if os.geteuid() == 0:
            header = (ctypes.c_uint32 * 2)(_CAPABILITY_VERSION_3, 0)
            data = (ctypes.c_uint32 * 6)()
            syscall(nr("capget"), header, data)
            self._saved = (header, bytes(data))
            lowered = (ctypes.c_uint32 * 6).from_buffer_copy(data)
            lowered[0] = lowered[3] = 0  # the effective set, both words
            syscall(nr("capset"), header, lowered)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._saved is not None:
            header, data = self._saved
            syscall(nr("capset"), header, (ctypes.c_uint32 * 6).from_buffer_copy(data))
