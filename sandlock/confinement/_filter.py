"""Which syscalls a policy's seccomp filter denies, waives, and hands to the supervisor:
the rule choice behind ``Confinement.prepare`` (and ``SelfConfinement``, with no
supervisor), assembled by ``kernel.seccomp``."""

from __future__ import annotations

from .._errors import SetupError
from ..kernel import action_available, filter_actions, native_arch, seccomp

TYPE_CHECKING = False  # typing costs ~2.5 ms to import: not on the start-up path
if TYPE_CHECKING:
    from collections.abc import Mapping

    from ..kernel._seccomp import Rule
    from ..policy import Policy

OPEN_CALLS = ("open", "creat", "openat", "openat2")  # supervised for a runtime policy
# Under a memory limit: the memory watch learns that memfds exist, which only their
# descriptors reach, and looks for them at every sample from then on.
MEMFD_CALL = "memfd_create"


def seccomp_program(policy: Policy, count_processes: bool,
                     unsupervised: Mapping[str, Rule] | None = None, *,
                     observed: bool = False, memfds: bool = False, files: bool = False) -> bytes:
    """The filter, with the network syscalls for the supervisor; without one, with the
    ``unsupervised`` rules standing for them, and no action that needs a listener.
    ``files``: the file calls Landlock does not judge go to the supervisor too.
    Required even with --best-effort: without it there would be no network policy at
    all, silently."""
    arch = native_arch()  # SetupError on a machine without a verified syscall table
    needed = [(seccomp.SECCOMP_RET_KILL_PROCESS, "seccomp filtering")]
    if unsupervised is None:
        needed.append((seccomp.SECCOMP_RET_USER_NOTIF, "seccomp user notification"))
    for action, what in needed:
        if not action_available(action):
            raise SetupError(f"{what} is not available: the network policy cannot be "
                             "enforced (run `sandlock check`)")
    waived = {*policy.allow_syscalls, *(seccomp.SYSV_IPC if policy.allow_sysv_ipc else ())}
    if policy.deny_syscalls is not None:  # its list instead of the default one (SysV IPC)
        waived.update(seccomp.SYSV_IPC)
    denied = {*(policy.deny_syscalls or ()), *policy.extra_deny_syscalls}
    extra = dict(seccomp.FIXED_AFFINITY) if policy.cpu_cores or policy.num_cpus else {}
    if count_processes:
        extra.update(seccomp.counted_process_creation(frozenset(waived)))
    if observed:  # (opens: for deny_path, answered at once until it is used)
        extra.update(seccomp.OBSERVED_EXEC)
        extra.update((name, seccomp.for_supervisor(name, frozenset(waived))) for name in OPEN_CALLS)
    if memfds:
        extra[MEMFD_CALL] = seccomp.Rule(default=seccomp.NOTIFY)
    denials = {name: seccomp.Rule(default=seccomp.EPERM) for name in denied}
    extra.update(denials)  # (first: the file calls' rules are made from those in force)
    if policy.port_remap and unsupervised is None:
        extra.update(seccomp.PORT_NAME_CALLS)
    if unsupervised is None:
        extra.update(seccomp.deterministic_calls(policy.time_start is not None,
                                                 policy.random_seed is not None,
                                                 policy.deterministic_dirs))
    if files and unsupervised is None:
        in_force = {name: rule for name, rule in seccomp.RULES.items() if name not in waived}
        extra.update(seccomp.judged_file_calls({**in_force, **extra}))
    extra.update(denials)  # (last: a denial is never turned into a notification)
    if unsupervised is None:
        supervised = frozenset(seccomp.SUPERVISED) - denied
        return seccomp.build_filter(arch, frozenset(waived), supervised, extra)
    program = seccomp.build_filter(arch, frozenset(waived), extra={**extra, **unsupervised,
                                                                   **denials})
    if seccomp.NOTIFY in filter_actions(program):  # nothing would answer: the call would fail
        raise SetupError("the seccomp filter needs a supervisor, and there is none")
    return program
