"""sandlock inside a sandbox: `sandlock run` (or ``Sandbox.run``) in a sandboxed process.

There sandlock can make neither namespaces nor a seccomp listener (the enclosing
sandbox refuses both), so a run is the static part of its policy on top of the
enclosing sandbox: the keeper (killing by kill(-1) in a signal-scoped domain), the
command with its own Landlock domain and a seccomp filter without notification. What
either policy forbids stays forbidden, and the enclosing sandbox's supervisor,
network and limits go on holding for the nested command. What only a supervisor or
namespaces of its own could enforce (HTTP rules, DNS options, memory, CPU and process
limits) is refused by name (``enclosed_confinement``). The network is none, the
enclosing sandbox's (``--net-allow '*'``), or the enclosing sandbox's narrowed by the
run's own rules: registered with the enclosing supervisor (net._nesting) before the
command starts, and applied to the threads the keeper vouches for (``process.answer``).
"""

from __future__ import annotations

import os

from .._errors import PolicyError, SetupError
from ..confinement import SIGNAL_SCOPE, EnclosedConfinement, protection_disabled
from ..process import ChildSpec, Foreground, spawn

TYPE_CHECKING = False
if TYPE_CHECKING:
    import socket
    from collections.abc import Callable

    from ..policy import Policy
    from ..process import SandboxedProcess
    from ._sandbox import Sandbox

_PROBED: list[bool] = []  # the answer, once per process
REGISTRATION_TIMEOUT = 10.0  # seconds for the enclosing supervisor to take the run's rules


def enclosed() -> bool:
    """Whether this process is in a sandbox that refuses sandlock a listener of its own
    (the caller saw it is under a seccomp filter). Probed in a forked child, which
    tries to install an allow-all filter with a listener; cached."""
    if not _PROBED:
        _PROBED.append(_probe())
    return _PROBED[0]


def _probe() -> bool:
    from ..kernel import PR_SET_NO_NEW_PRIVS, prctl, seccomp

    pid = os.fork()
    if pid == 0:
        try:
            prctl(PR_SET_NO_NEW_PRIVS, 1)
            seccomp.install(seccomp.ALLOW_ALL, seccomp.SECCOMP_FILTER_FLAG_NEW_LISTENER)
            code = 0
        except BaseException:  # noqa: BLE001 - any refusal is the answer
            code = 1
        os._exit(code)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) != 0


def launch_enclosed(sandbox: Sandbox, argv: list[str], function: Callable[[int], int] | None,
                    stdio: tuple[int | None, int | None, int | None], pass_fds: tuple[int, ...],
                    foreground: bool, resident: bool) -> SandboxedProcess:
    from ._confine_self import enclosed_confinement
    from ..process import child_environment, inherited_ignored_signals
    from ._launching import finish_launch, kernel_limits, open_audit

    if resident:
        raise SetupError("a long-lived sandbox cannot start inside a sandbox (no namespaces or "
                         "supervisor of its own here): use sb.sandbox() in the enclosing one")
    policy = sandbox.policy
    if policy.workdir is not None:
        raise SetupError("a copy-on-write workspace (--workdir) cannot be made inside a "
                         "sandbox (no namespaces of its own here)")
    if policy.net_private_loopback:
        raise SetupError("--net-private-loopback cannot be made inside a sandbox (no "
                         "namespaces of its own here); give it to the enclosing run")
    env = child_environment(policy, os.environ)
    cwd = policy.cwd or os.getcwd()
    confined, network = enclosed_confinement(policy, cwd, env)
    confinement = EnclosedConfinement(confined)
    try:
        probe = _register(policy, network, confinement.ruleset.fileno())
    except BaseException:
        confinement.close()
        raise
    audit = open_audit(sandbox.audit)
    terminal = Foreground.detect() if foreground else None
    spec = ChildSpec(argv=argv, env=env, cwd=cwd, confinement=confinement, stdio=stdio,
                     tty_fd=terminal.fd if terminal else None,
                     ignored_signals=inherited_ignored_signals(), pass_fds=pass_fds,
                     limits=kernel_limits(policy), function=function,
                     probe_fd=probe.fileno() if probe is not None else -1)
    try:
        process = spawn(spec, terminal)
    except BaseException:
        if audit is not None:
            audit.close()
        raise
    finally:
        confinement.close()
        if probe is not None:
            probe.close()  # the keeper's now
    return finish_launch(sandbox, process, audit)


def _register(policy: Policy, network: str, ruleset: int) -> socket.socket | None:
    """The enclosing supervisor told the run's network rules (net._nesting), and the
    Landlock ruleset its command's socket files are bound under (netcall._binder); returns
    the keeper's end of the socket its questions will come on (None: not registered).

    A run with the sandbox's network registers for its socket files alone, where its
    keeper can tell its processes apart (its command's signals scoped); outside a
    sandlock sandbox, where nothing would take it, the kernel binds them as the
    command anyway."""
    from ._confine_self import OWN, PARENTS, nested_network_rules

    if network == OWN:
        return _registration(nested_network_rules(policy), ruleset, required=True)
    if network == PARENTS and not protection_disabled(policy, SIGNAL_SCOPE):
        return _registration({"network": ["enclosing"]}, ruleset, required=False)
    return None


def _registration(rules: dict[str, list[str]], ruleset: int, *,
                  required: bool) -> socket.socket | None:
    import json
    import socket

    from ..net import NESTING_NAME

    theirs, keepers = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as service:
            service.settimeout(REGISTRATION_TIMEOUT)
            service.connect(b"\0" + NESTING_NAME)
            socket.send_fds(service, [json.dumps(rules).encode()], [theirs.fileno(), ruleset])
            reply = service.recv(4096)
    except OSError as exc:
        keepers.close()
        if not required:
            return None
        raise SetupError(f"the enclosing sandbox cannot apply this run's network rules "
                         f"({exc.strerror or exc}): only a sandlock sandbox can") from None
    finally:
        theirs.close()
    if reply != b"ok":
        keepers.close()
        words = reply.decode(errors="replace").split(" ", 2)  # error FIELD MESSAGE
        field, why = (words[1], words[2]) if len(words) == 3 else ("-", "no answer")
        if field != "-":
            raise PolicyError(field, why)
        raise SetupError(f"the enclosing sandbox refused this run's network rules: {why}")
    return keepers

