"""The static part of a policy, for the calling process itself (``sandlock.confine``):
no supervisor, no namespaces, no fork.

What sandlock's supervisor would decide while a command runs is decided here once, or
not at all: TCP connect and bind by Landlock's port rules, every other socket refused
when it is made (``seccomp.unsupervised_network``), and a seccomp filter without user
notification, which nothing would answer. Autorun files under a write grant, which a
sandbox keeps read-only in its mount namespace, cannot be protected without one: a
grant that covers some is refused unless the policy lets them be written.
"""

from __future__ import annotations

import os

from .._errors import PolicyError, SetupError
from .._record import record
from ..kernel import (
    PR_SET_NO_NEW_PRIVS,
    drop_capabilities,
    landlock,
    prctl,
    seccomp,
)
from ..autorun import autorun as _autorun
from ._confinement import _Filesystem, _filesystem_ruleset
from ._filter import seccomp_program
from ._protections import missing_landlock
from ._isolation import SCRATCH

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

    from ..policy import Policy

_NAMED = 3  # autorun files named in a refusal


@record
class TcpRules:
    """What TCP may do without a supervisor: ``connect`` to these ports (None: to any);
    bind any port and listen (``any_bind``), or else bind none but port 0 (the kernel's
    choice, as a sandbox allows) and never listen."""

    connect: tuple[int, ...] | None = ()
    any_bind: bool = False


class SelfConfinement:
    """The Landlock ruleset and the seccomp program the calling process confines itself
    with: compiled by ``prepare``, nothing applied until ``apply``."""

    def __init__(self, ruleset: landlock.Ruleset, program: bytes) -> None:
        self.ruleset = ruleset
        self.program = program

    @classmethod
    def prepare(cls, policy: Policy, tcp: TcpRules,
                network: dict[str, seccomp.Rule] | None = None, *, cwd: str = "/",
                env: Mapping[str, str] | None = None, enclosed: bool = False,
                readable: tuple[str, ...] = ()) -> SelfConfinement:
        """``policy`` has nothing that needs a supervisor (the caller checked);
        PolicyError for a write grant over autorun files, SetupError for what the
        kernel lacks. ``network``: the filter's rules for the network instead of those
        ``tcp`` implies ({}: none, the network is a supervisor's). ``readable``: what
        must be readable whatever the policy (a parent sandbox's CA bundle). ``enclosed``: for
        a process already in a sandbox, whose mounts hold its autorun files, and whose
        default workspace (of ``cwd`` and ``env``) may then be granted as it is."""
        any_connect = tcp.connect is None
        handled_net = ((0 if any_connect else landlock.NET_CONNECT_TCP)
                       | (0 if tcp.any_bind else landlock.NET_BIND_TCP))
        # "/" for the working directory unless enclosed: only the default workspace
        # would use it, and there it is refused (a whole machine writable).
        abi = landlock.abi_version()
        missing_landlock(policy, abi, [])  # (nothing may degrade here: SetupError)
        filesystem = _filesystem_ruleset(policy, abi, cwd,
                                         os.environ if env is None else env, readable, [],
                                         handled_net)
        if filesystem is None or filesystem.ruleset is None:  # full access (the caller refuses it)
            raise PolicyError("mode", "full-access confines nothing")
        ruleset = filesystem.ruleset
        try:
            for port in tcp.connect or ():
                ruleset.allow_port(port, landlock.NET_CONNECT_TCP)
            if not tcp.any_bind:
                ruleset.allow_port(0, landlock.NET_BIND_TCP)
            if not (policy.allow_autorun_writes or enclosed):
                _refuse_autorun_files(filesystem)
            if network is None:
                network = seccomp.unsupervised_network(
                    tcp=any_connect or bool(tcp.connect) or tcp.any_bind,
                    any_connect=any_connect, any_bind=tcp.any_bind)
            program = seccomp_program(policy, False, network)
        except BaseException:
            ruleset.close()
            raise
        return cls(ruleset, program)

    def apply(self) -> None:
        """Confine the calling process for good: no_new_privs, every capability
        dropped, Landlock (the calling thread: the caller made sure
        it is the only one), then seccomp (every thread)."""
        try:
            apply_static(self.ruleset.fileno(), self.program, all_threads=True)
        finally:
            self.ruleset.close()

    def close(self) -> None:
        self.ruleset.close()


class EnclosedConfinement:
    """A command's confinement when sandlock itself runs in a sandbox, where it can make
    neither namespaces nor a listener: the static part of its policy, on top of the
    enclosing sandbox's (whose supervisor, network and limits go on holding). Stands in
    for a ``Confinement`` with the keeper and the command's side of the fork."""

    isolation = None
    counts_processes = False
    scopes_signals = True  # the keeper kills with kill(-1) in a signal-scoped domain

    def __init__(self, inner: SelfConfinement) -> None:
        self.ruleset = inner.ruleset
        self._program = inner.program
        self.warnings: list[str] = []

    def apply(self) -> int:
        """Confine the calling process (the command's side, single-threaded); no listener
        (-1): nothing is left to supervise but what the enclosing sandbox does."""
        apply_static(self.ruleset.fileno(), self._program)
        return -1

    def close(self) -> None:
        self.ruleset.close()


def apply_static(ruleset_fd: int, program: bytes, *, all_threads: bool = False) -> None:
    """no_new_privs, every capability dropped, the Landlock domain of
    ``ruleset_fd`` (the calling thread), the seccomp ``program`` (``all_threads``:
    TSYNC) with no listener: a confinement that needs no supervisor."""
    prctl(PR_SET_NO_NEW_PRIVS, 1)
    drop_capabilities()
    landlock.restrict_self(ruleset_fd)
    flags = seccomp.SECCOMP_FILTER_FLAG_TSYNC if all_threads else 0
    try:
        thread = seccomp.install(program, flags)
    except OSError as exc:
        raise SetupError(f"the seccomp filter could not be installed ({exc.strerror}): the "
                         "process is confined by Landlock only") from None
    if thread:  # TSYNC: the thread that could not take the filter
        raise SetupError(f"thread {thread} could not take the seccomp filter: the process "
                         "is partly confined")


def _refuse_autorun_files(filesystem: _Filesystem) -> None:
    """PolicyError when a write grant covers autorun files or repositories (as a
    sandbox finds them: ``Isolation.plan``)."""
    protection = _autorun.protect(filesystem.write, filesystem.homes,
                                  (*SCRATCH, *filesystem.caches))
    found = (*protection.read_only, *protection.pinned)
    if found:
        named = ", ".join(found[:_NAMED]) + (", ..." if len(found) > _NAMED else "")
        raise PolicyError(
            "fs_writable", f"it covers autorun files ({named}), which a sandbox keeps read-only "
            "in its mount namespace and a confined process cannot: grant narrower paths, or "
            "set allow_autorun_writes=True to let this process write them")
