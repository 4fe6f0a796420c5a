"""The seccomp-bpf filter: which syscalls a sandboxed process may not make, and how.

The policy is data (``RULES``: syscall name -> Rule); ``build_filter`` compiles it for
one architecture into a classic BPF program and ``install`` loads it into the calling
process. Hand-assembled rather than libseccomp: the program is small, the layout is
ours to reason about (ABI checks first), and nothing beyond ctypes is needed.

Program layout (``_bpf.compile_filter``):
  1. seccomp_data.arch is not the native one -> kill (i386 ``int 0x80`` from x86_64);
  2. nr at or above the x32 bit -> ENOSYS;
  3. a binary search of nr among the syscalls with a rule (~2 log2(rules) instructions,
     not a comparison per rule, for the calls that run the filter: a syscall the filter
     allows whatever its arguments is skipped by the kernel's action cache);
  4. ALLOW, then one block per rule with argument conditions, then one return per
     distinct action.
"""

from __future__ import annotations

import ctypes

from . import _bpf
from ._bpf import (  # the rule language and its compilation; the others use it through this module
    ALLOW,
    EACCES,
    ENOSYS,
    EPERM,
    NOTIFY,
    SECCOMP_RET_ALLOW,
    SECCOMP_RET_KILL_PROCESS,
    SECCOMP_RET_USER_NOTIF,
    WORD_MASK,
    Clause,
    Match,
    Rule,
    ret_errno,
    compile_filter,
)
from ._libc import syscall
from ._syscalls import Arch, nr

TYPE_CHECKING = False  # typing costs ~5 ms to import: not on the start-up path
if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

SECCOMP_SET_MODE_FILTER = 1  # seccomp(2) operations
SECCOMP_FILTER_FLAG_TSYNC = 1
SECCOMP_FILTER_FLAG_NEW_LISTENER = 8
SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV = 32
ALLOW_ALL = bytes.fromhex("060000000000ff7f")  # one BPF_RET|BPF_K of ALLOW: what a probe installs

# Constants from the uapi headers, spelled out: importing socket/termios costs
# milliseconds on every run.
_AF_UNIX, _AF_INET, _AF_INET6, _AF_NETLINK = 1, 2, 10, 16
_SOCK_TYPE_MASK = 0xF  # SOCK_NONBLOCK and SOCK_CLOEXEC live above it
_SOCK_STREAM, _SOCK_DGRAM = 1, 2
_NETLINK_ROUTE = 0
_IPPROTO_ICMP, _IPPROTO_TCP, _IPPROTO_UDP, _IPPROTO_ICMPV6, _IPPROTO_MPTCP = 1, 6, 17, 58, 262
_TIOCSTI, _TIOCLINUX = 0x5412, 0x541C
_SOL_IP, _SOL_IPV6 = 0, 41
_IP_OPTIONS = 4
_IPV6_2292RTHDR, _IPV6_2292PKTOPTIONS, _IPV6_RTHDR = 5, 6, 57
_CLONE_NEW_NAMESPACES = (
    0x00020000  # CLONE_NEWNS
    | 0x02000000  # CLONE_NEWCGROUP
    | 0x04000000  # CLONE_NEWUTS
    | 0x08000000  # CLONE_NEWIPC
    | 0x10000000  # CLONE_NEWUSER
    | 0x20000000  # CLONE_NEWPID
    | 0x40000000  # CLONE_NEWNET
    # not CLONE_NEWTIME (0x80): clone() reads those bits as the exit signal (CSIGNAL)
)

_DENIED = (
    # other processes' memory, mounts and namespaces
    "ptrace", "process_vm_writev",
    "mount", "umount2", "pivot_root", "move_mount", "open_tree", "open_tree_attr",
    "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr", "unshare", "setns",
    # kernel attack surface and machine-wide state
    "bpf", "perf_event_open", "userfaultfd",
    "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
    "keyctl", "add_key", "request_key",
    "acct", "swapon", "swapoff", "reboot", "iopl", "ioperm",
    # io_uring performs connect/sendmsg without passing through seccomp
    "io_uring_setup", "io_uring_enter", "io_uring_register",
)  # fmt: skip
# SysV IPC objects live in the machine-wide IPC namespace: a channel between sandboxes
# and to host processes. Waived together by --allow-sysv-ipc. (POSIX message queues
# are files of the mqueue filesystem, which no Landlock rule grants.)
SYSV_IPC = (
    "shmget", "shmat", "shmdt", "shmctl", "semget", "semop", "semtimedop", "semctl",
    "msgget", "msgsnd", "msgrcv", "msgctl",
)  # fmt: skip
_PER_LINUX, _PERSONALITY_QUERY = 0, 0xFFFFFFFF


def _inet(family: int, icmp: int) -> Clause:
    """Stream and datagram sockets of one IP family, with the usual protocols only.

    Refused: SOCK_RAW/SOCK_PACKET (they bypass connect) and SCTP (connects via
    setsockopt).
    """
    return Clause(
        ALLOW,
        Match(0, [family]),
        Match(1, [_SOCK_STREAM, _SOCK_DGRAM], mask=_SOCK_TYPE_MASK),
        Match(2, [0, _IPPROTO_TCP, _IPPROTO_UDP, _IPPROTO_MPTCP, icmp]),  # icmp: ping sockets
    )


_NETLINK_ROUTE_SOCKET = Clause(ALLOW, Match(0, [_AF_NETLINK]), Match(2, [_NETLINK_ROUTE]))

# Set-id bits (S_ISUID, S_ISGID) run a file with its owner's or its group's ids: one
# planted in a shared directory lends its owner's rights (root's, if root planted it) to
# whoever runs it. No call may set them, for any user: the calls that give a file its
# mode are refused (EPERM) when the mode has one. The sticky bit is not one; mkdir
# ignores them (a directory's set-group-ID comes from its parent). name -> (argument
# holding the mode, argument holding the flags when the mode counts only with O_CREAT
# or O_TMPFILE). mode_t is unsigned int, flags int: their low words.
MODE_ARGUMENTS: dict[str, tuple[int, int | None]] = {
    "chmod": (1, None), "fchmod": (1, None), "fchmodat": (2, None), "fchmodat2": (2, None),
    "mknod": (1, None), "mknodat": (2, None),  # (a regular file too: S_IFREG)
    "creat": (1, None), "open": (2, 1), "openat": (3, 2),
}
_S_ISUID, _S_ISGID = 0o4000, 0o2000
_CREATING = (0o100, 0o20000000)  # O_CREAT, __O_TMPFILE (O_TMPFILE is it with O_DIRECTORY)


def setid_refused(name: str, default: int = ALLOW) -> Rule:
    """The rule of ``name`` (one of MODE_ARGUMENTS): a set-id mode refused first, then
    ``default`` for everything else (ALLOW; NOTIFY where a supervisor judges the rest)."""
    mode, flags = MODE_ARGUMENTS[name]
    setid = Match(mode, [_S_ISUID, _S_ISGID, _S_ISUID | _S_ISGID], mask=_S_ISUID | _S_ISGID)
    if flags is None:
        return Rule(Clause(EPERM, setid), default=default)
    creating = (Match(flags, [bit], mask=bit) for bit in _CREATING)
    return Rule(*(Clause(EPERM, creates, setid) for creates in creating), default=default)


RULES: dict[str, Rule] = {
    **{name: Rule(default=EPERM) for name in _DENIED},
    **{name: Rule(default=EPERM) for name in SYSV_IPC},
    **{name: setid_refused(name) for name in MODE_ARGUMENTS},
    # openat2's flags and mode live in memory, out of the filter's reach: ENOSYS, as for
    # clone3, and its callers fall back to openat, whose are checked (glibc's open and
    # fopen never use it; those that do must run where it does not exist).
    "openat2": Rule(default=ENOSYS),
    # Persona flags weaken what runs next (ADDR_NO_RANDOMIZE turns off ASLR,
    # READ_IMPLIES_EXEC makes data executable): only PER_LINUX and the query pass.
    # persona is unsigned int.
    "personality": Rule(Clause(ALLOW, Match(0, [_PER_LINUX, _PERSONALITY_QUERY])), default=EPERM),
    # Namespaces would escape the sandbox's view. clone's flags are a register
    # argument (the kernel uses only the low 32 bits)...
    "clone": Rule(Clause(ALLOW, Match(0, [0], mask=_CLONE_NEW_NAMESPACES)), default=EPERM),
    # ...but clone3's live in memory, which BPF cannot read. ENOSYS makes glibc
    # (2.34+) fall back to clone, which is checked above.
    "clone3": Rule(default=ENOSYS),
    # Limits are the sandbox's to keep: a process may read any other's and lower its
    # own (raising a hard limit needs a capability it has not), but not set another's.
    # pid is pid_t; the new limit is a pointer (NULL: a read).
    "prlimit64": Rule(
        Clause(ALLOW, Match(0, [0])),
        Clause(ALLOW, Match(2, [0]), Match(2, [0], high=True)),
        default=EPERM,
    ),
    # Pushing input into a terminal would let the sandbox type into its parent's
    # shell. cmd is unsigned int: the kernel ignores its high word, so do we.
    "ioctl": Rule(Clause(EPERM, Match(1, [_TIOCSTI, _TIOCLINUX])), default=ALLOW),
    # A filter of its own with a listener could answer the sandbox's own intercepted
    # calls once the supervisor is gone. op and flags are unsigned int.
    "seccomp": Rule(
        Clause(
            EPERM,
            Match(0, [SECCOMP_SET_MODE_FILTER]),
            Match(1, [SECCOMP_FILTER_FLAG_NEW_LISTENER], mask=SECCOMP_FILTER_FLAG_NEW_LISTENER),
        ),
        default=ALLOW,
    ),
    # family, type and protocol are int.
    "socket": Rule(
        Clause(ALLOW, Match(0, [_AF_UNIX])),
        _NETLINK_ROUTE_SOCKET,
        _inet(_AF_INET, _IPPROTO_ICMP),
        _inet(_AF_INET6, _IPPROTO_ICMPV6),
        default=EPERM,
    ),
    "socketpair": Rule(Clause(ALLOW, Match(0, [_AF_UNIX])), default=EPERM),
    # Source routing: IP options (LSRR/SSRR) and IPv6 routing headers send every packet
    # to their first hop, an address the network verdict never sees. level and optname
    # are int. (Their sendmsg ancillary-data forms are refused by the supervisor.)
    "setsockopt": Rule(
        Clause(EPERM, Match(1, [_SOL_IP]), Match(2, [_IP_OPTIONS])),
        Clause(EPERM, Match(1, [_SOL_IPV6]), Match(2, [_IPV6_2292RTHDR, _IPV6_2292PKTOPTIONS, _IPV6_RTHDR])),
        default=ALLOW,
    ),
}

# With a process cap: every call that makes a process goes to the supervisor, which
# counts; making a thread (CLONE_THREAD) never does. Namespace flags stay refused
# unless clone's own rule is waived (``counted_clone``).
_CLONE_THREAD = 0x00010000


def counted_process_creation(waived: frozenset[str] = frozenset()) -> dict[str, Rule]:
    threads = Match(0, [_CLONE_THREAD], mask=_CLONE_THREAD)
    if "clone" in waived:
        clone = Rule(Clause(ALLOW, threads), default=NOTIFY)
    else:
        no_namespaces = Match(0, [0], mask=_CLONE_NEW_NAMESPACES)
        clone = Rule(Clause(ALLOW, no_namespaces, threads), Clause(NOTIFY, no_namespaces),
                     default=EPERM)
    return {"clone": clone, "fork": Rule(default=NOTIFY), "vfork": Rule(default=NOTIFY)}


PROCESS_CREATION = ("clone", "fork", "vfork")  # the calls counted_process_creation notifies

# With policy_fn: execs are supervised; kernel AIO, which writes memory while its tasks are held, is refused.
OBSERVED_EXEC = {"execve": Rule(default=NOTIFY), "execveat": Rule(default=NOTIFY), "io_setup": Rule(default=EPERM)}

# Reproducible runs (sandlock.determinism), each only when asked for: the realtime
# clocks (CLOCK_REALTIME, _COARSE, _TAI; the others are the time namespace's, in the
# kernel), getrandom, and directory listings (the old getdents, which nothing on
# x86_64 needs, refused rather than left unsorted) are answered by the supervisor;
# arch_prctl, which every program calls before its own code runs, is its moment to
# make the vDSO's clock and getrandom functions enter the kernel.
_REALTIME_CLOCKS = (0, 5, 11)


def deterministic_calls(clock: bool, random: bool, listings: bool) -> dict[str, Rule]:
    rules: dict[str, Rule] = {}
    if clock:
        rules["clock_gettime"] = Rule(Clause(NOTIFY, Match(0, _REALTIME_CLOCKS)), default=ALLOW)
        rules["gettimeofday"] = rules["time"] = Rule(default=NOTIFY)
    if random:
        rules["getrandom"] = Rule(default=NOTIFY)
    if clock or random:
        rules["arch_prctl"] = Rule(default=NOTIFY)
    if listings:
        rules["getdents64"] = Rule(default=NOTIFY)
        rules["getdents"] = Rule(default=ENOSYS)
    return rules


# With --cpu-cores: the affinity sandlock set is not the command's to widen.
FIXED_AFFINITY: dict[str, Rule] = {"sched_setaffinity": Rule(default=EPERM)}

# Changes to a file's metadata and watches on it, which Landlock does not judge: the
# supervisor judges the file against the sandbox's grants (sandlock.files). Among the
# ioctls, those setting inode flags (chattr): FS_IOC_SETFLAGS, FS_IOC32_SETFLAGS,
# FS_IOC_FSSETXATTR (request is unsigned int).
FILE_CALLS = (
    "chmod", "fchmod", "fchmodat", "fchmodat2", "chown", "fchown", "lchown", "fchownat",
    "utime", "utimes", "futimesat", "utimensat", "setxattr", "lsetxattr", "fsetxattr",
    "removexattr", "lremovexattr", "fremovexattr", "setxattrat", "removexattrat",
    "file_setattr", "inotify_add_watch", "fanotify_mark", "ioctl",
)  # fmt: skip
INODE_FLAG_REQUESTS = (0x40086602, 0x40046602, 0x401C5820)


def judged_file_calls(rules: Mapping[str, Rule]) -> dict[str, Rule]:
    """FILE_CALLS handed to the supervisor where ``rules`` (those in force, by name)
    would let them through; what those rules refuse stays refused in the filter."""
    judged = {}
    for name in FILE_CALLS:
        rule = rules.get(name, Rule(default=ALLOW))
        if name == "ioctl":
            judged[name] = Rule(*rule.clauses, Clause(NOTIFY, Match(1, INODE_FLAG_REQUESTS)),
                                default=rule.default)
        else:
            judged[name] = Rule(*rule.clauses, default=NOTIFY if rule.default == ALLOW else rule.default)
    return judged


# What --allow-syscall NAME may waive: every rule, as a whole.
WAIVABLE: frozenset[str] = frozenset(RULES)
# For sandlock's own helper processes (the HTTP proxy), on top of RULES.
NO_EXEC: dict[str, Rule] = {"execve": Rule(default=EPERM), "execveat": Rule(default=EPERM)}

MSG_FASTOPEN = 0x20000000
# Syscalls whose verdict depends on runtime values, for the network supervisor.
# sendto without a destination (plain send on a connected socket) stays in the
# kernel: its register arguments cannot change after this check. With an address,
# or with MSG_FASTOPEN (which connects a TCP socket), it is supervised.
SUPERVISED: dict[str, Rule] = {
    "connect": Rule(default=NOTIFY),
    "bind": Rule(default=NOTIFY),
    # listen() on an unbound TCP socket binds an ephemeral port with no bind() call.
    "listen": Rule(default=NOTIFY),
    "sendmsg": Rule(default=NOTIFY),  # the address lives in memory: always supervised
    "sendmmsg": Rule(default=NOTIFY),
    "sendto": Rule(
        Clause(ALLOW, Match(4, [0]), Match(4, [0], high=True), Match(3, [0], mask=MSG_FASTOPEN)),
        default=NOTIFY,
    ),
}

# --port-remap's: the names the command asks for show virtual ports (net/_portmap.py).
# In the filter only when the option is on: no other run pays for them.
PORT_NAME_CALLS: dict[str, Rule] = {"getsockname": Rule(default=NOTIFY),
                                    "getpeername": Rule(default=NOTIFY)}


# Without a supervisor (``sandlock.confine``), the network is decided where it can be
# statically: TCP connect and bind by Landlock's port rules; a socket Landlock cannot
# judge is refused when it is made, with EACCES (Landlock's errno): unix (a host's
# socket and the process's own look alike to a filter), UDP, ICMP, MPTCP (Landlock's
# TCP rules do not see it). Two TCP paths Landlock does not see either: MSG_FASTOPEN
# connects from a send, and listen() on an unbound socket binds an ephemeral port.
def unsupervised_network(tcp: bool, any_connect: bool, any_bind: bool) -> dict[str, Rule]:
    """The rules standing for SUPERVISED: ``tcp``: TCP sockets may be made;
    ``any_connect``/``any_bind``: Landlock restricts no TCP connect/bind, so MSG_FASTOPEN
    may connect and listen() may take any port (each refused otherwise)."""
    stream = [Clause(ALLOW, Match(0, [family]), Match(1, [_SOCK_STREAM], mask=_SOCK_TYPE_MASK),
                     Match(2, [0, _IPPROTO_TCP])) for family in (_AF_INET, _AF_INET6) if tcp]
    unjudged = Clause(EACCES, Match(0, [_AF_UNIX, _AF_INET, _AF_INET6]))
    rules = {"socket": Rule(*stream, unjudged, _NETLINK_ROUTE_SOCKET, default=EPERM)}
    if not any_connect:  # the flags: sendto's and sendmmsg's fourth argument, sendmsg's third
        fastopen = {"sendto": 3, "sendmsg": 2, "sendmmsg": 3}
        rules.update((name, Rule(Clause(EACCES, Match(arg, [MSG_FASTOPEN], mask=MSG_FASTOPEN)),
                                 default=ALLOW)) for name, arg in fastopen.items())
    if not any_bind:
        rules["listen"] = Rule(default=EACCES)
    return rules


def for_supervisor(name: str, waived: frozenset[str] = frozenset()) -> Rule:
    """``name``'s rule for a supervisor: what RULES allows by default is notified, what
    its clauses refuse stays refused (a set-id mode, unless ``name`` is waived), and a
    call it refuses altogether (openat2) stays refused."""
    rule = None if name in waived else RULES.get(name)
    if rule is None:
        return Rule(default=NOTIFY)
    return Rule(*rule.clauses, default=NOTIFY) if rule.default == ALLOW else rule


def unknown_waivers(names: Iterable[str]) -> list[str]:
    """The names (each once, in order) that are not in WAIVABLE."""
    return [name for name in dict.fromkeys(names) if name not in WAIVABLE]


def build_filter(
    arch: Arch, waived: frozenset[str] = frozenset(), notify: frozenset[str] = frozenset(),
    extra: Mapping[str, Rule] | None = None,
) -> bytes:
    """The packed sock_filter array enforcing RULES minus ``waived`` on ``arch``.

    ``notify`` names syscalls (without a rule of their own) to hand to a user-space
    supervisor with SECCOMP_RET_USER_NOTIF (with SUPERVISED's conditions where it has
    them); it needs a listener (NEW_LISTENER). ``extra``: more rules (e.g. no exec for
    sandlock's own proxy process).
    """
    unknown = unknown_waivers(waived)
    if unknown:
        raise ValueError(f"cannot waive {', '.join(unknown)}: not restricted by sandlock")
    rules = {name: rule for name, rule in RULES.items() if name not in waived}
    rules.update(extra or {})
    for name in notify:
        if name in rules:
            raise ValueError(f"{name} already has a rule; it cannot also be notified")
        rules[name] = SUPERVISED.get(name, Rule(default=NOTIFY))

    numbers = {_number(arch, name): rule for name, rule in rules.items()}
    return compile_filter(arch.audit_arch, arch.syscall_bit, numbers, kill=SECCOMP_RET_KILL_PROCESS,
                          unsupported=ENOSYS, allow=ALLOW)


def _number(arch: Arch, name: str) -> int:
    """``name``'s number: sandlock's own table, or every syscall's for a policy's denials."""
    if name in arch.numbers:
        return arch.numbers[name]
    from ._syscalls import every_syscall

    return every_syscall()[name]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def install(program: bytes, flags: int = 0) -> int:
    """Load ``program`` as a seccomp filter of the calling thread (all threads with TSYNC).

    The caller must already have set prctl(PR_SET_NO_NEW_PRIVS, 1): without it an
    unprivileged process gets EACCES. Returns the syscall's result: the listener fd
    when ``flags`` has SECCOMP_FILTER_FLAG_NEW_LISTENER, else 0. Raises OSError.
    """
    count, rest = divmod(len(program), _bpf.INSN_SIZE)
    if rest or not 0 < count <= _bpf.MAX_INSNS:
        raise ValueError(f"not a BPF program: {len(program)} bytes")
    buffer = ctypes.create_string_buffer(program, len(program))  # alive until we return
    fprog = _SockFprog(count, ctypes.addressof(buffer))
    return syscall(nr("seccomp"), SECCOMP_SET_MODE_FILTER, flags, ctypes.byref(fprog))
