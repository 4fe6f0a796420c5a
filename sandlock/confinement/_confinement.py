"""Policy -> kernel confinement: compiled in the parent, applied in the child before exec.

Everything costly (directory expansion, Landlock rules, the BPF program) happens in
``Confinement.prepare`` in sandlock's own process. The forked child only runs
``apply``: a handful of syscalls, in the order the kernel requires
(NO_NEW_PRIVS, Landlock, then seccomp last so that nothing after it is filtered).
"""

from __future__ import annotations

import errno

from .._errors import SetupError
from .._record import field, record
from ..kernel import (
    PR_SET_NO_NEW_PRIVS,
    drop_capabilities,
    landlock,
    limit_tasks,
    namespaces,
    prctl,
    seccomp,
)
from . import _fspolicy
from ._execcaches import executable_caches
from ._filter import seccomp_program
from ._isolation import Isolation, Overlay
from ._workspace import caches, dry_run_grants, granted_paths, user_homes

TYPE_CHECKING = False  # typing costs ~2.5 ms to import: not on the start-up path
if TYPE_CHECKING:
    from collections.abc import Mapping

    from .._auditlog import AuditLog
    from ..policy import Policy
    from ..autorun import Leftovers

MIN_SCOPE_ABI = 6  # Landlock IPC scoping (abstract unix sockets, signals)
# Without -P, what stops a fork bomb: the kernel's RLIMIT_NPROC, which in the sandbox's
# own user namespace counts only the sandbox's tasks (threads too, hence the margin),
# refuses the fork with EAGAIN, costs nothing, and never fails one with EINTR as a
# supervised cap can. It exempts root: for root the PID namespace's own pid_max, set
# RESERVED_PIDS above the cap (once pids wrap, the kernel numbers them from there, so
# the sandbox always has room for the cap), is the bound (docs/usage.md).
DEFAULT_TASK_CAP = 1024
RESERVED_PIDS = 300
# The protections every run decides on (sandlock.Protection's numbers; the others, and
# what is known of each, are _protections', loaded only when one needs a decision: a
# protection the kernel lacks, a policy that names one).
SIGNAL_SCOPE, ABSTRACT_UNIX_SOCKET_SCOPE, NAMESPACES = 4, 5, 17
EVERY_PROTECTION_ABI = 6  # the Landlock ABI that has every one of them


@record(frozen=False)
class Confinement:
    """Kernel objects ready to be applied to a freshly forked child."""

    ruleset: landlock.Ruleset | None
    seccomp_program: bytes  # with the network syscalls handed to sandlock's supervisor
    scopes_signals: bool
    warnings: list[str] = field(factory=list)
    isolation: Isolation | None = None  # the namespaces' mounts (None: no namespaces)
    counts_processes: bool = False  # fork-like calls go to the supervisor (process cap)
    task_cap: int = 0  # RLIMIT_NPROC in the sandbox's user namespace (0: none)
    memory_watched: bool = False  # a memory limit, now or later: memfd_create supervised
    # A rule lets the sandbox write under /proc (or nothing confines its files): a
    # process may write another's memory there (/proc/PID/mem, Yama permitting).
    writes_proc: bool = True
    # The Landlock rules by inode, (st_dev, st_ino) -> access, for the supervisor's
    # verdict on the file calls Landlock does not judge (sandlock.files); None: no
    # filesystem rules, and those calls are not supervised.
    file_grants: dict[tuple[int, int], int] | None = None

    @classmethod
    def prepare(cls, policy: Policy, cwd: str, env: Mapping[str, str],
                extra_read: tuple[str, ...] = (), *, observed: bool = False,
                overlay: Overlay | None = None, dry_run: bool = False,
                policy_files: tuple[str, ...] = ()) -> Confinement:
        """``extra_read``: sandlock's own files the command must read whatever the
        policy (the trust bundle of an HTTPS-inspecting run); ``observed``: a runtime
        policy (policy_fn) hears of execs and process creations too; ``overlay``: the
        copy-on-write workspace (policy.workdir's); ``dry_run``: it is the only place
        written, every other write grant but the run's private scratch becomes a read;
        ``policy_files``: those the policy was read from (kept read-only, and said)."""
        warnings: list[str] = []
        abi = landlock.abi_version()
        if abi < EVERY_PROTECTION_ABI or policy.disable:
            from . import _protections

            warnings += _protections.disabled_notices(policy)
            _protections.missing_landlock(policy, abi, warnings)
        namespaced = _namespaces_usable(policy, warnings)
        filesystem = _filesystem_ruleset(policy, abi, cwd, env, extra_read, warnings,
                                         dry_run=dry_run, namespaced=namespaced)
        ruleset = filesystem.ruleset if filesystem else None
        try:
            isolation = (_isolation(policy, filesystem, env, warnings, overlay, policy_files)
                         if filesystem and namespaced else None)
            if observed and isolation is None:
                raise SetupError("policy_fn needs the sandbox's own PID namespace, which "
                                 "cannot be made here (run `sandlock check`)")
            if isolation is None:
                _needs_namespaces(policy)
            if policy.net_private_loopback and isolation is None:
                raise SetupError("--net-private-loopback needs the sandbox's own user and "
                                 "network namespaces, which cannot be made here (run "
                                 "`sandlock check`); it never falls back to the host's loopback")
            if (policy.chroot or policy.image) and isolation is None:
                raise SetupError(f"{'--chroot' if policy.chroot else '--image'} needs the "
                                 "sandbox's own user and mount namespaces, which cannot be "
                                 "made here (run `sandlock check`)")
            if isolation is not None:  # (asked for, or the default: Policy.private_network)
                isolation.private_network = policy.private_network
                if isolation.private_network:  # loaded now: the keeper's import, after the
                    from ..kernel import netns  # noqa: F401  fork, took ~0.8 ms (its pages copied)
                if policy.chroot or policy.image:  # (only runs with another root load it)
                    from ._newroot import new_root

                    isolation.root = new_root(policy.chroot, policy.image)
            if overlay is not None and isolation is None:
                raise SetupError("the copy-on-write workspace (--workdir) needs the sandbox's "
                                 "user and mount namespaces, which cannot be made here (run "
                                 "`sandlock check`); it never falls back to writing DIR")
            # Processes are counted in the sandbox's PID namespace: none, no count.
            counted = bool(policy.max_processes or observed) and isolation is not None
            if policy.max_processes and not counted:
                warnings.append("no PID namespace: the process cap (--max-processes) is not "
                                "enforced (the namespaces degraded or disabled)")
            for field, flag in (("max_memory", "--max-memory"), ("max_cpu", "--max-cpu")):
                if getattr(policy, field) is not None and isolation is None:
                    warnings.append(f"no PID namespace: {flag} is not enforced (the namespaces "
                                    "degraded or disabled)")
            # (policy_fn may set a memory limit later)
            memory = isolation is not None and (policy.max_memory is not None or observed)
            program = seccomp_program(policy, counted, observed=observed, memfds=memory,
                                       files=filesystem is not None)
        except BaseException:
            if ruleset is not None:
                ruleset.close()
            raise
        scopes_signals = (ruleset is not None and abi >= MIN_SCOPE_ABI
                          and not protection_disabled(policy, SIGNAL_SCOPE))
        if isolation is not None:
            isolation.inside_ids = _inside_ids(policy)
        elif policy.user is not None or policy.privileged:
            raise SetupError("--user and --privileged need the sandbox's user namespace, "
                             "which this run has not")
        # (Outside a user namespace of its own, RLIMIT_NPROC would count every process
        # of the user on the machine.)
        task_cap = DEFAULT_TASK_CAP if isolation is not None and not policy.max_processes else 0
        return cls(ruleset, program, scopes_signals, warnings, isolation, counted, task_cap,
                   memory, filesystem is None or _writes_proc(filesystem.rules),
                   filesystem.grants if filesystem else None)

    def level(self, policy: Policy) -> str:
        """LocalGPT's name for what holds: full (filesystem, IPC and signal scoping, the
        sandbox's namespaces, syscall filter), standard (filesystem and syscall filter:
        a --best-effort run without the rest), minimal (the syscall filter only), none
        (full-access)."""
        if policy.full_access:
            return "none"
        if self.ruleset is None:
            return "minimal"
        if self.isolation is None or not (self.scopes_signals or policy.allow_ipc):
            return "standard"
        return "full"

    def apply(self) -> int:
        """Confine the calling process (the child, right before exec); returns the
        seccomp listener fd, for sandlock's supervisor."""
        if self.task_cap:
            limit_tasks(self.task_cap)
        prctl(PR_SET_NO_NEW_PRIVS, 1)
        drop_capabilities()
        self.restrict_filesystem()
        # WAIT_KILLABLE_RECV: once the supervisor holds a call, only a fatal signal can
        # abandon it, so no connect is performed for a caller that already gave up.
        flags = seccomp.SECCOMP_FILTER_FLAG_NEW_LISTENER | seccomp.SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV
        try:
            return seccomp.install(self.seccomp_program, flags)
        except OSError as exc:
            if exc.errno != errno.EINVAL:  # before Linux 5.19: no WAIT_KILLABLE_RECV
                raise
        return seccomp.install(self.seccomp_program, seccomp.SECCOMP_FILTER_FLAG_NEW_LISTENER)

    def restrict_filesystem(self) -> None:
        """Apply the Landlock domain to the calling thread (no_new_privs already set)."""
        if self.ruleset is not None:
            self.ruleset.restrict_self()

    def leftovers(self, audit: AuditLog | None) -> Leftovers | None:
        """The check, once the sandbox is gone, of what the command left for the user's
        tools to run (None: nothing to check)."""
        return self.isolation.protection.leftovers(audit) if self.isolation else None

    def close(self) -> None:
        """Release the ruleset (the child holds its own copy)."""
        if self.ruleset is not None:
            self.ruleset.close()


@record
class _Filesystem:
    """The compiled filesystem policy: the ``ruleset`` and what it was made of: ``rules``
    ((path, Landlock access), as added), the ``read`` and ``write`` grants, the scratch
    directories made ``private`` to the run, the ``homes``, the toolchain ``caches``
    among ``write``; the rules' ``grants`` by inode; the denied paths a grant encloses,
    ``masked`` in the sandbox."""

    ruleset: landlock.Ruleset | None
    rules: tuple[tuple[str, int], ...]
    read: tuple[str, ...]
    write: tuple[str, ...]
    private: tuple[str, ...]
    homes: tuple[str, ...]
    caches: tuple[str, ...]
    grants: dict[tuple[int, int], int]
    masked: tuple[str, ...]


def _filesystem_ruleset(
    policy: Policy, abi: int, cwd: str, env: Mapping[str, str], extra_read: tuple[str, ...],
    warnings: list[str], handled_net: int = 0, *, dry_run: bool = False,
    namespaced: bool = False,
) -> _Filesystem | None:
    """``handled_net``: the TCP rights the ruleset restricts too (without a supervisor);
    ``dry_run``: see Confinement.prepare; ``namespaced``: the private scratch
    directories will be the sandbox's own (their rules then stay whole)."""
    if abi == 0 or policy.full_access:  # (missing: said by _protections.missing_landlock)
        return None
    scoped = 0
    if abi >= MIN_SCOPE_ABI:
        for protection, scope in ((SIGNAL_SCOPE, landlock.SCOPE_SIGNAL),
                                  (ABSTRACT_UNIX_SOCKET_SCOPE, landlock.SCOPE_ABSTRACT_UNIX_SOCKET)):
            if not protection_disabled(policy, protection):
                scoped |= scope
    handled = landlock.fs_handled(abi)
    if policy.disable:
        from ._protections import disabled_rights

        handled &= ~disabled_rights(policy)
    ruleset = landlock.Ruleset(handled_fs=handled, handled_net=handled_net, scoped=scoped)
    access = {level: rights & handled for level, rights in level_access(abi).items()}
    added = []
    grants: dict[tuple[int, int], int] = {}
    masked: list[str] = []
    try:
        homes = user_homes(env)
        read, write, deny, private = granted_paths(policy, cwd, env, homes)
        if dry_run:
            read, write = dry_run_grants(policy, read, write, private)
        read = [*read, *extra_read]
        for rule in _fspolicy.compile_grants(read, write, deny, masked,
                                             private if namespaced else ()):
            try:
                inode, granted = ruleset.allow_path(rule.path, access[rule.level])
            except FileNotFoundError:
                continue  # vanished since it was listed: granting less is safe
            added.append((rule.path, access[rule.level]))
            grants[inode] = grants.get(inode, 0) | granted
    except BaseException:
        ruleset.close()
        raise
    return _Filesystem(ruleset, tuple(added), tuple(read), tuple(write), private,
                       tuple(home for home, _ in homes), caches(homes[0][0], env), grants,
                       tuple(masked))


def _writes_proc(rules: tuple[tuple[str, int], ...]) -> bool:
    return any(access & landlock.FS_WRITE_FILE and (path == "/" or path == "/proc"
                                                    or path.startswith("/proc/"))
               for path, access in rules)


def _scratch_size(policy: Policy) -> int | None:
    """Under a memory limit, each private tmpfs holds at most twice the limit: a bound
    for when the memory watch, which counts their files with the processes' memory and
    kills the sandbox past the limit (137), is slower than a writer. (At the limit
    itself, a mapped file would die of SIGBUS before the watch could say why.)"""
    return None if policy.max_memory is None else 2 * int(policy.max_memory)


def _namespaces_usable(policy: Policy, warnings: list[str]) -> bool:
    """False where disabled, or unavailable and allowed to degrade (said in ``warnings``)."""
    if NAMESPACES in policy.disable:
        return False
    if (policy.best_effort or NAMESPACES in policy.allow_degraded) and not policy.full_access:
        available, found = namespaces()  # (the probe forks: only here)
        if not available:
            from ._protections import require

            require(policy, NAMESPACES, f"the sandbox's namespaces are not available "
                    f"({found}): /proc shows the host, /tmp is shared, autorun files are "
                    "writable", warnings)
            return False
    return True


def protection_disabled(policy: Policy, protection: int) -> bool:
    """True when the policy turns ``protection`` off: ``disable``; the IPC scopes by
    ``allow_ipc`` and full access too."""
    if protection in (SIGNAL_SCOPE, ABSTRACT_UNIX_SOCKET_SCOPE) and (policy.allow_ipc
                                                                    or policy.full_access):
        return True
    return protection in policy.disable


def _inside_ids(policy: Policy) -> tuple[int, int] | None:
    """(uid, gid) the command has in its user namespace (None: its own)."""
    if policy.privileged:
        return (0, 0)
    if policy.user is None:
        return None
    uid, gid = policy.user.split(":")  # (validated: "UID:GID")
    return (int(uid), int(gid))


def _needs_namespaces(policy: Policy) -> None:
    """What is made in the sandbox's namespaces never silently goes without them."""
    needing = [flag for flag, given in (("--time-start", policy.time_start is not None),
                                        ("--random-seed", policy.random_seed is not None),
                                        ("--num-cpus", policy.num_cpus is not None)) if given]
    if needing:
        raise SetupError(f"{needing[0]} needs the sandbox's own namespaces (its clocks, random "
                         "devices and /proc files are made there), which cannot be made here "
                         "(run `sandlock check`)")


def _isolation(policy: Policy, filesystem: _Filesystem, env: Mapping[str, str],
               warnings: list[str], overlay: Overlay | None,
               policy_files: tuple[str, ...]) -> Isolation:
    """The namespaces' plan; what it says of the policy files goes to ``warnings``."""
    isolation = Isolation.plan(
        private=filesystem.private, rules=filesystem.rules,
        granted=(*filesystem.read, *filesystem.write, *policy.unix_allow),
        writable=filesystem.write, homes=filesystem.homes,
        protect_autorun=not policy.allow_autorun_writes, unscanned=filesystem.caches,
        # a TMPDIR of the host's /tmp (a per-user one) is made again in the sandbox's
        temporary=[env[name] for name in ("TMPDIR", "TMP", "TEMP") if env.get(name)],
        overlay=overlay, scratch_size=_scratch_size(policy), masked=filesystem.masked,
        policy_files=policy_files,
        executable_caches=executable_caches(filesystem.homes[0], env) if filesystem.homes else ())
    warnings += isolation.protection.policy_notices()
    if policy.max_memory is not None or policy.num_cpus is not None:
        from ._virtual import sandbox_cpus, virtual_files

        isolation.virtual = virtual_files(policy, sandbox_cpus(policy))
    isolation.clocks_from_zero = policy.time_start is not None
    isolation.device_seed = policy.random_seed
    # The grants of the files shown instead of the kernel's name those files' inodes: given
    # again, by path, once init has mounted the new ones.
    shown = {path for path, _ in isolation.virtual}
    if isolation.device_seed is not None:
        from ._isolation import RANDOM_DEVICES

        shown.update(RANDOM_DEVICES)
    isolation.reanchored += tuple(rule for rule in filesystem.rules if rule[0] in shown)
    return isolation


def level_access(abi: int) -> dict[int, int]:
    """Landlock rights of each _fspolicy access level on this ABI."""
    return {
        _fspolicy.LIST: landlock.FS_READ_DIR,
        _fspolicy.READ: landlock.fs_read_access(abi),
        _fspolicy.WRITE: landlock.fs_write_access(abi),
    }


def keeper_scope(confinement: Confinement) -> landlock.Ruleset | None:
    """A domain for the keeper, scoped for signals, so kill(-1) reaches only the sandbox."""
    if not confinement.scopes_signals:
        return None
    return neutral_layer(landlock.SCOPE_SIGNAL)


def neutral_layer(scoped: int = 0) -> landlock.Ruleset:
    """A Landlock layer that grants every file access its domain had (``scoped``
    aside): a new domain, nested in the caller's. What matters is Landlock's ptrace
    rule: no process in it can reach (ptrace, /proc/PID/mem or environ,
    process_vm_readv, pidfd_getfd) one of an enclosing or a sibling domain.

    Every Landlock domain denies cross-directory rename and link (REFER) unless a
    rule grants it, even when the ruleset does not handle it: this layer grants it
    everywhere, so that the only filesystem decisions are the other layers'.
    """
    ruleset = landlock.Ruleset(handled_fs=landlock.FS_REFER, scoped=scoped)
    ruleset.allow_path("/", landlock.FS_REFER)
    return ruleset
