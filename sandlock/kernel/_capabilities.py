"""Capabilities: none for a confined command (nor for sandlock's threads that act as it).

The command keeps its uid (root's files stay root's) but no capability: not in the
bounding, permitted, effective, inheritable or ambient sets, and none that an exec can
give back, as uid 0 or of a file with file capabilities (securebits, locked). What root
inside may still do, and why: docs/usage.md ("Running as root").
"""

from __future__ import annotations

import ctypes
import errno
import os

from ._libc import prctl, syscall
from ._syscalls import nr

CAP_SETPCAP = 8  # changes the bounding set and the securebits
# What a command keeps: nothing. CAP_NET_BIND_SERVICE, the one candidate, would change
# nothing in a sandbox: its supervisor binds every TCP port itself, with sandlock's own
# capabilities (and the command's, held in its own user namespace, would not count on
# the host's network anyway); a process that confines itself (sandlock.confine) binds
# a privileged port before it does.
KEPT_CAPABILITIES: tuple[int, ...] = ()

_PR_CAPBSET_DROP = 24
_PR_GET_SECUREBITS, _PR_SET_SECUREBITS = 27, 28
_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_RAISE, _PR_CAP_AMBIENT_CLEAR_ALL = 47, 2, 4
_CAPABILITY_VERSION_3 = 0x20080522
_MAX_CAPABILITIES = 64  # two 32-bit words; the kernel knows fewer (EINVAL past its last)
# securebits(7), each locked: an exec as uid 0 gives no capability (NOROOT); a change of
# uid to or from 0 leaves the sets alone (NO_SETUID_FIXUP) and keeps none (KEEP_CAPS
# locked as it is: with nothing permitted there is nothing to keep); nothing can be
# raised into the ambient set (NO_CAP_AMBIENT_RAISE).
_SECBIT_NOROOT, _SECBIT_NO_SETUID_FIXUP, _SECBIT_KEEP_CAPS, _SECBIT_NO_CAP_AMBIENT_RAISE = 1, 4, 16, 64
_SECUREBITS = sum(bit | bit << 1 for bit in (_SECBIT_NOROOT, _SECBIT_NO_SETUID_FIXUP,
                                             _SECBIT_NO_CAP_AMBIENT_RAISE)) | _SECBIT_KEEP_CAPS << 1
# struct __user_cap_header_struct, and {effective, permitted, inheritable} x 2 words:
# made once here (a ctypes type made in the command's fork costs ~60 us each).
_Header, _Data = ctypes.c_uint32 * 2, ctypes.c_uint32 * 6


def drop_capabilities(kept: tuple[int, ...] = KEPT_CAPABILITIES) -> None:
    """Leave the calling thread only ``kept``, for good: the rest out of every set, the
    kept ones ambient too (so that they survive exec), the securebits locked. Nothing
    to do for a thread that holds no capability (no_new_privs keeps it so); without
    CAP_SETPCAP (a process given a few capabilities), the bounding set and the
    securebits cannot change, and no_new_privs makes them harmless."""
    header, data = _Header(_CAPABILITY_VERSION_3, 0), _Data()
    syscall(nr("capget"), header, data)
    if not any(data):
        return
    permitted = data[1] | data[4] << 32
    kept = tuple(cap for cap in kept if permitted & 1 << cap)  # (capset would refuse others)
    keep = sum(1 << cap for cap in kept)
    if data[0] & 1 << CAP_SETPCAP:  # (effective, first word)
        _drop_bounding(kept)
        _capset(header, keep | 1 << CAP_SETPCAP, keep)  # the kept ones inheritable: ambient
        _set_ambient(kept)
        prctl(_PR_SET_SECUREBITS, prctl(_PR_GET_SECUREBITS) | _SECUREBITS)
    else:
        _set_ambient(())
    _capset(header, keep, keep)


def _drop_bounding(kept: tuple[int, ...]) -> None:
    """One prctl a capability (~3 us each: the kernel makes new credentials)."""
    for cap in range(_MAX_CAPABILITIES):
        if cap in kept:
            continue
        try:
            prctl(_PR_CAPBSET_DROP, cap)
        except OSError as exc:
            if exc.errno != errno.EINVAL:
                raise
            return  # past the kernel's last capability


def _set_ambient(kept: tuple[int, ...]) -> None:
    prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL)
    for cap in kept:
        prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_RAISE, cap)


def _capset(header: ctypes.Array, held: int, inheritable: int) -> None:
    """Effective and permitted ``held``, inheritable ``inheritable`` (bit masks)."""
    data = _Data()
    for word in range(2):
        shift = 32 * word
        data[3 * word] = data[3 * word + 1] = held >> shift & 0xFFFFFFFF
        data[3 * word + 2] = inheritable >> shift & 0xFFFFFFFF
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
            header, data = _Header(_CAPABILITY_VERSION_3, 0), _Data()
            syscall(nr("capget"), header, data)
            self._saved = (header, bytes(data))
            lowered = _Data.from_buffer_copy(data)
            lowered[0] = lowered[3] = 0  # the effective set, both words
            syscall(nr("capset"), header, lowered)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._saved is not None:
            header, data = self._saved
            syscall(nr("capset"), header, _Data.from_buffer_copy(data))
