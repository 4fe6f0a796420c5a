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
        "getsockname": 51,
        "getpeername": 52,
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
        "sethostname": 170,
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

# Every x86_64 syscall by number (Linux 6.18; "-N": N unassigned numbers), for the names
# a policy denies (--extra-deny-syscall): parsed only by a policy that names one.
_X86_64_ALL = (
    "read write open close stat fstat lstat poll lseek mmap mprotect munmap brk rt_sigaction "
    "rt_sigprocmask rt_sigreturn ioctl pread64 pwrite64 readv writev access pipe select "
    "sched_yield mremap msync mincore madvise shmget shmat shmctl dup dup2 pause nanosleep "
    "getitimer alarm setitimer getpid sendfile socket connect accept sendto recvfrom sendmsg "
    "recvmsg shutdown bind listen getsockname getpeername socketpair setsockopt getsockopt "
    "clone fork vfork execve exit wait4 kill uname semget semop semctl shmdt msgget msgsnd "
    "msgrcv msgctl fcntl flock fsync fdatasync truncate ftruncate getdents getcwd chdir "
    "fchdir rename mkdir rmdir creat link unlink symlink readlink chmod fchmod chown fchown "
    "lchown umask gettimeofday getrlimit getrusage sysinfo times ptrace getuid syslog getgid "
    "setuid setgid geteuid getegid setpgid getppid getpgrp setsid setreuid setregid getgroups "
    "setgroups setresuid getresuid setresgid getresgid getpgid setfsuid setfsgid getsid "
    "capget capset rt_sigpending rt_sigtimedwait rt_sigqueueinfo rt_sigsuspend sigaltstack "
    "utime mknod uselib personality ustat statfs fstatfs sysfs getpriority setpriority "
    "sched_setparam sched_getparam sched_setscheduler sched_getscheduler "
    "sched_get_priority_max sched_get_priority_min sched_rr_get_interval mlock munlock "
    "mlockall munlockall vhangup modify_ldt pivot_root _sysctl prctl arch_prctl adjtimex "
    "setrlimit chroot sync acct settimeofday mount umount2 swapon swapoff reboot sethostname "
    "setdomainname iopl ioperm create_module init_module delete_module get_kernel_syms "
    "query_module quotactl nfsservctl getpmsg putpmsg afs_syscall tuxcall security gettid "
    "readahead setxattr lsetxattr fsetxattr getxattr lgetxattr fgetxattr listxattr llistxattr "
    "flistxattr removexattr lremovexattr fremovexattr tkill time futex sched_setaffinity "
    "sched_getaffinity set_thread_area io_setup io_destroy io_getevents io_submit io_cancel "
    "get_thread_area lookup_dcookie epoll_create epoll_ctl_old epoll_wait_old "
    "remap_file_pages getdents64 set_tid_address restart_syscall semtimedop fadvise64 "
    "timer_create timer_settime timer_gettime timer_getoverrun timer_delete clock_settime "
    "clock_gettime clock_getres clock_nanosleep exit_group epoll_wait epoll_ctl tgkill utimes "
    "vserver mbind set_mempolicy get_mempolicy mq_open mq_unlink mq_timedsend mq_timedreceive "
    "mq_notify mq_getsetattr kexec_load waitid add_key request_key keyctl ioprio_set "
    "ioprio_get inotify_init inotify_add_watch inotify_rm_watch migrate_pages openat mkdirat "
    "mknodat fchownat futimesat newfstatat unlinkat renameat linkat symlinkat readlinkat "
    "fchmodat faccessat pselect6 ppoll unshare set_robust_list get_robust_list splice tee "
    "sync_file_range vmsplice move_pages utimensat epoll_pwait signalfd timerfd_create "
    "eventfd fallocate timerfd_settime timerfd_gettime accept4 signalfd4 eventfd2 "
    "epoll_create1 dup3 pipe2 inotify_init1 preadv pwritev rt_tgsigqueueinfo perf_event_open "
    "recvmmsg fanotify_init fanotify_mark prlimit64 name_to_handle_at open_by_handle_at "
    "clock_adjtime syncfs sendmmsg setns getcpu process_vm_readv process_vm_writev kcmp "
    "finit_module sched_setattr sched_getattr renameat2 seccomp getrandom memfd_create "
    "kexec_file_load bpf execveat userfaultfd membarrier mlock2 copy_file_range preadv2 "
    "pwritev2 pkey_mprotect pkey_alloc pkey_free statx io_pgetevents rseq -89 "
    "pidfd_send_signal io_uring_setup io_uring_enter io_uring_register open_tree move_mount "
    "fsopen fsconfig fsmount fspick pidfd_open clone3 close_range openat2 pidfd_getfd "
    "faccessat2 process_madvise epoll_pwait2 mount_setattr quotactl_fd "
    "landlock_create_ruleset landlock_add_rule landlock_restrict_self memfd_secret "
    "process_mrelease futex_waitv set_mempolicy_home_node cachestat fchmodat2 "
    "map_shadow_stack futex_wake futex_wait futex_requeue statmount listmount "
    "lsm_get_self_attr lsm_set_self_attr lsm_list_modules mseal setxattrat getxattrat "
    "listxattrat removexattrat open_tree_attr file_getattr file_setattr "
)
_every: dict[str, int] | None = None


def every_syscall() -> dict[str, int]:
    """Name -> number of every syscall of this machine (SetupError elsewhere)."""
    global _every
    native_arch()
    if _every is None:
        numbers, number = {}, 0
        for word in "".join(_X86_64_ALL).split():
            if word.startswith("-"):
                number += int(word[1:])
            else:
                numbers[word] = number
                number += 1
        _every = numbers
    return _every
