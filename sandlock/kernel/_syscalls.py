"""Syscall numbers and audit architecture of the machines sandlock supports.

Only x86_64 is supported (and tested). Another architecture is a setup error,
never a silent fallback to a table that would be wrong for it.
"""

from __future__ import annotations

import os

from .._errors import SetupError
from .._record import record


@record
class Arch:
    """A machine's syscall ABI: ``name``; ``audit_arch``, the AUDIT_ARCH_* value seccomp
    reports in seccomp_data.arch; ``syscall_bit``: numbers at or above it belong to an
    ABI we refuse (x32); ``numbers``: name -> number."""

    name: str
    audit_arch: int
    syscall_bit: int
    numbers: dict[str, int]


_X86_64 = Arch(
    name="x86_64",
    audit_arch=0xC000003E,  # AUDIT_ARCH_X86_64
    syscall_bit=0x40000000,  # __X32_SYSCALL_BIT
    numbers={
        "ioctl": 16,
        "socket": 41,
        "connect": 42,
        "sendto": 44,
        "sendmsg": 46,
        "bind": 49,
        "listen": 50,
        "socketpair": 53,
        "setsockopt": 54,
        "clone": 56,
        "fork": 57,
        "vfork": 58,
        "execve": 59,
        "execveat": 322,
        "close_range": 436,
        "ptrace": 101,
        "kcmp": 312,
        "io_setup": 206,
        "open": 2, "creat": 85, "openat": 257, "openat2": 437,
        "chmod": 90, "fchmod": 91, "fchmodat": 268, "fchmodat2": 452, "mknod": 133, "mknodat": 259,
        "capget": 125,
        "capset": 126,
        "pivot_root": 155,
        "chroot": 161,
        "acct": 163,
        "mount": 165,
        "umount2": 166,
        "swapon": 167,
        "swapoff": 168,
        "reboot": 169,
        "iopl": 172,
        "ioperm": 173,
        "init_module": 175,
        "delete_module": 176,
        "add_key": 248,
        "request_key": 249,
        "keyctl": 250,
        "kexec_load": 246,
        "unshare": 272,
        "perf_event_open": 298,
        "setns": 308,
        "process_vm_readv": 310,
        "process_vm_writev": 311,
        "finit_module": 313,
        "seccomp": 317,
        "memfd_create": 319,
        "kexec_file_load": 320,
        "bpf": 321,
        "userfaultfd": 323,
        "sendmmsg": 307,
        "io_uring_setup": 425,
        "io_uring_enter": 426,
        "io_uring_register": 427,
        "open_tree": 428,
        "move_mount": 429,
        "fsopen": 430,
        "fsconfig": 431,
        "fsmount": 432,
        "fspick": 433,
        "pidfd_open": 434,
        "clone3": 435,
        "pidfd_getfd": 438,
        "openat2": 437,
        "mount_setattr": 442,
        "landlock_create_ruleset": 444,
        "landlock_add_rule": 445,
        "landlock_restrict_self": 446,
        "open_tree_attr": 467,
        # SysV IPC (machine-wide objects), personality
        "shmget": 29, "shmat": 30, "shmctl": 31, "semget": 64, "semop": 65, "semctl": 66,
        "shmdt": 67, "msgget": 68, "msgsnd": 69, "msgrcv": 70, "msgctl": 71,
        "semtimedop": 220, "personality": 135,
        # resource limits
        "setrlimit": 160, "prlimit64": 302, "sched_setaffinity": 203,
        # a file's metadata and watches on it (Landlock judges neither: sandlock.files)
        "chmod": 90, "fchmod": 91, "chown": 92, "fchown": 93, "lchown": 94, "utime": 132,
        "setxattr": 188, "lsetxattr": 189, "fsetxattr": 190, "removexattr": 197,
        "lremovexattr": 198, "fremovexattr": 199, "utimes": 235, "inotify_add_watch": 254,
        "fchownat": 260, "futimesat": 261, "fchmodat": 268, "utimensat": 280,
        "fanotify_mark": 301, "fchmodat2": 452, "setxattrat": 463, "removexattrat": 466,
        "file_setattr": 469,
        # reproducible runs (sandlock.determinism): the clocks, randomness, listings, and
        # the call every program makes before its own code runs (its TLS: the vDSO's
        # moment)
        "clock_gettime": 228, "gettimeofday": 96, "time": 201, "getrandom": 318,
        "getdents64": 217, "getdents": 78, "arch_prctl": 158,
    },
)

_SUPPORTED = {"x86_64": _X86_64}


_native: Arch | None = None


def native_arch() -> Arch:
    """The Arch of this machine; SetupError where sandlock has no verified table."""
    global _native
    if _native is None:
        machine = os.uname().machine
        try:
            _native = _SUPPORTED[machine]
        except KeyError:
            raise SetupError(f"unsupported architecture {machine} (sandlock supports x86_64)") from None
    return _native


def nr(name: str) -> int:
    """Syscall number of ``name`` on this machine (looked up on every supervised call)."""
    return (_native or native_arch()).numbers[name]
