"""A launch: the policy → confinement, network, proxy → a started command (``launch``,
what ``Sandbox._launch`` does); what it sets up around the command's process, each only
when the policy asks for it (its package is not even imported otherwise): the
copy-on-write workspace, the HTTP proxy, the kernel limits, the audit log; the hooks
every started process gets; and what a run says of its particular ends (a command
killed for its file size, a full-access run, a command that could not start)."""

from __future__ import annotations

import _signal as signal
import os
import sys

from .._errors import PolicyError, SetupError
from ..confinement import Confinement
from ..kernel import PR_GET_SECCOMP, SECCOMP_MODE_FILTER, prctl
from ..process import (
    ChildSpec,
    Foreground,
    Supervision,
    child_environment,
    inherited_ignored_signals,
    spawn,
)

TYPE_CHECKING = False  # typing costs ~2.5 ms to import: not on the start-up path
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from .._auditlog import AuditLog
    from ..limits import KernelLimits
    from ..net import HttpRun
    from ..policy import Policy
    from ..process import CowRun, SandboxedProcess
    from ._sandbox import Sandbox


def launch(sandbox: Sandbox, argv: list[str], function: Callable[[int], int] | None,
           stdio: tuple[int | None, int | None, int | None], pass_fds: tuple[int, ...],
           foreground: bool = False, resident: bool = False, *, dry_run: bool = False,
           parked: bool = False, pausable: bool = False,
           fd_map: tuple[tuple[int, int], ...] = ()) -> SandboxedProcess:
    """``sandbox._launch``'s work (its docstring says what each argument asks for)."""
    pausable = pausable or resident
    if sandbox.policy.full_access and not sandbox.full_access_allowed:
        raise PolicyError("mode", "full-access runs the command unconfined: it needs "
                          "--dangerously-allow-full-access as well")
    if prctl(PR_GET_SECCOMP) == SECCOMP_MODE_FILTER:
        from ._enclosed import enclosed, launch_enclosed

        if enclosed():  # sandlock itself in a sandbox: no namespaces, no listener
            _check_enclosable(sandbox, parked, fd_map)
            return launch_enclosed(sandbox, argv, function, stdio, pass_fds, foreground, resident)
    policy = sandbox.policy
    if dry_run and policy.workdir is None:  # the current directory, previewed
        policy = policy.replace(workdir=policy.cwd or os.getcwd())
    env = child_environment(policy, os.environ)
    cwd = policy.cwd or policy.workdir or os.getcwd()
    audit = open_audit(sandbox.audit)
    if sandbox.policy.full_access:
        record_full_access(audit, argv)
    cow = http = registration = None
    try:
        if sandbox.named:
            from .. import registry

            registration = registry.Registration(sandbox.name, policy, argv)
        if policy.image is not None:
            pull_image(policy)
        cow = start_workspace(policy, dry_run, audit)
        http = start_http(policy, env, cwd, audited=audit is not None)
        # Every run is supervised: even `--net-allow '*'` keeps pathname unix sockets
        # to --unix-allow, and listening to --net-allow-bind.
        confinement = Confinement.prepare(
            policy, cwd, env, http.readable_paths if http else (), observed=sandbox.policy_fn is not None,
            overlay=cow and cow.overlay, dry_run=dry_run, policy_files=sandbox.policy_files)
    except BaseException:
        _close(http, cow, audit, registration)
        raise
    if registration and confinement.isolation is not None:  # the name is its hostname
        confinement.isolation.hostname = sandbox.name.encode()
    if policy.net_private_loopback is None and confinement.isolation is not None \
            and confinement.isolation.private_network:  # the default: the supervisor's too
        policy = _with_private_network(policy)
    sandbox.warnings, level = confinement.warnings, confinement.level(policy)
    counted = policy.max_output is not None  # no terminal past it: leave_the_terminal
    terminal = Foreground.detect() if foreground and not counted else None
    spec = ChildSpec(
        argv=argv,
        env=env,
        cwd=cwd,
        confinement=confinement,
        stdio=stdio,
        tty_fd=terminal.fd if terminal else None,
        ignored_signals=inherited_ignored_signals(),
        pass_fds=pass_fds,
        limits=kernel_limits(sandbox.policy),
        function=function,
        keep_host_proc=resident,
        no_terminal=counted,
        fd_map=fd_map,
    )
    supervision = Supervision(policy, confinement, audit, sandbox.quiet, http,
                              pausable=pausable, policy_fn=sandbox.policy_fn)
    try:
        process = spawn(supervision.prepared(spec), terminal, supervision.take_listener,
                        parked=parked)
    except BaseException:
        supervision.close()
        _close(cow, audit, registration)
        raise
    finally:
        confinement.close()  # the child holds its own copy until it restricts itself
        supervision.launched()  # (its end of the binder's channel: init's now)
    process.pauser, process.level = supervision.watches if pausable else None, level
    process.nest_network = supervision.nest_network if resident else None
    process.readable = http.readable_paths if http else ()  # (its CA bundle)
    process.ports = supervision.ports
    process.limits_hit = supervision.limits_hit
    process.on_exit(supervision.close)
    process.on_task_cap(supervision.task_cap_reached)
    if registration:
        registration.started(process)
    if (leftovers := confinement.leftovers(audit)) is not None:  # what it left for later
        process.on_exit(leftovers.check)
    if cow is not None:
        cow.follow(process, leftovers)
    if supervision.watches is not None:
        supervision.watches.watch(process.kill, process.scratch)
    return finish_launch(sandbox, process, audit)


def pull_image(policy: Policy) -> None:
    """A registry's image (``--image`` naming no local path) pulled into the store now,
    by sandlock itself, before the sandbox exists; its registry's name resolved with the
    policy's own settings (``--resolve``, ``--dns-server``), else the system's."""
    from ..confinement import image_store
    from ..dns import own_resolver
    from ..image import ensure_pulled

    ensure_pulled(policy.image, image_store(os.environ, os.path.expanduser("~")),
                  lambda: own_resolver(policy))  # (DNS's modules: only for a pull)


def _check_enclosable(sandbox: Sandbox, parked: bool, fd_map: tuple[tuple[int, int], ...]) -> None:
    """What a run inside a sandbox cannot have, refused by name."""
    if sandbox.named:  # (the registry is out of its reach: docs/usage.md)
        raise SetupError("--name: a sandbox in a sandbox cannot be named")
    if parked or fd_map:
        raise SetupError("create() and a gather's consumer need sandlock's own "
                         "keeper, which it cannot make inside a sandbox")
    if sandbox.policy_fn is not None:
        raise SetupError("policy_fn needs a supervisor, which sandlock cannot "
                         "make inside a sandbox")


def _with_private_network(policy: Policy) -> Policy:
    """``policy`` with sandlock's choice of a private network made explicit: a copy with
    that one field True, unchecked (None to True passes every check, which replace()
    would run again: ~0.1 ms of the start)."""
    resolved = object.__new__(type(policy))
    resolved.__dict__.update(policy.__dict__, net_private_loopback=True)
    return resolved


def _close(*resources: object) -> None:
    """What a launch that failed had set up (None: not yet)."""
    for resource in resources:
        if resource is not None:
            resource.close()  # type: ignore[attr-defined]


def start_workspace(policy: Policy, dry_run: bool, audit: AuditLog | None) -> CowRun | None:
    """The run's copy-on-write workspace, if it has a workdir."""
    if policy.workdir is None:
        return None  # sandlock.cow is never imported by other runs
    from ..process import CowRun

    return CowRun(policy, dry_run=dry_run, audit=audit)


def start_http(policy: Policy, env: dict[str, str], cwd: str, *, audited: bool) -> HttpRun | None:
    """The proxy for a run with HTTP rules (its trust variables go into ``env``); the
    credentials' secrets are read here, once, and go to the proxy process only."""
    secrets = None
    if policy.credentials:  # (read even if no rule uses them: a missing one is an error)
        from ..policy import check_sendable, read_secrets

        secrets = read_secrets(policy.credentials)
        check_sendable(policy.http_auth, secrets)
    if not policy.has_http_rules:
        return None  # the proxy package is never imported by other runs
    from ..net import HttpRun

    try:
        http = HttpRun(policy, env, audited=audited, secrets=secrets, cwd=cwd)
    except OSError as exc:
        raise SetupError(f"the HTTP proxy could not start: {exc}") from None
    env.update(http.env_updates)
    return http


def kernel_limits(policy: Policy) -> KernelLimits | None:
    if not policy.sets_process_limits and policy.max_memory_mode == "kill":
        return None  # the limits package is not even imported
    from ..limits import kernel_limits

    return kernel_limits(policy)


def open_audit(path: str | None) -> AuditLog | None:
    if path is None:
        return None  # not even imported
    from .._auditlog import AuditLog

    return AuditLog(path)


def finish_launch(sandbox: Sandbox, process: SandboxedProcess,
                  audit: AuditLog | None) -> SandboxedProcess:
    """Every started process's hooks: its audit log (ending on its run), a file size notice."""
    process.audit, sandbox._process = audit, process  # (sandbox.pid, ports())
    limit = sandbox.policy.max_file_size
    if limit is not None:
        process.on_exit(lambda: file_size_exceeded(process, limit))
    if audit is not None:
        audit.follow(process)  # its execution: the log's last record, when it closes
        if sandbox.policy.max_output is None:  # else: Capture.drop_notices closes it
            process.on_exit(audit.close)
    return process


def file_size_exceeded(process: SandboxedProcess, limit: int) -> str | None:
    """The command was killed by SIGXFSZ: it wrote past --max-file-size (a process that
    handles or ignores the signal gets EFBIG instead, and knows)."""
    if process.returncode != 128 + signal.SIGXFSZ:
        return None
    reason = f"file size limit {limit} exceeded: the command was killed by SIGXFSZ (--max-file-size)"
    process.limits_hit.append(("max_file_size", "kill"))
    if process.audit is not None:
        process.audit.limit("max_file_size", str(limit), "kill", reason)
    return f"sandlock: {reason}"


def record_full_access(audit: AuditLog | None, argv: list[str]) -> None:
    """Announced on stderr whatever -q says, and recorded in the audit log."""
    program = os.path.basename(argv[0])  # not the arguments: they may carry tokens
    print(f"sandlock: warning: full-access mode: {program} runs unconfined (filesystem, "
          "network and IPC open; only the syscall filter stays)", file=sys.stderr, flush=True)
    if audit is not None:
        audit.write({"event": "full-access", "program": program})


def start_report(sandbox: Sandbox, argv: Sequence[str], process: SandboxedProcess,
                 stderr: bytes | None) -> bytes | None:
    """A command that could not start says why in its Result's ``stderr`` (else empty:
    only ``start_error`` would tell), as the CLI prints it, with the notes naming the
    grant that would let it start (unless quiet); without a capture (``stderr`` None),
    on sandlock's own stderr."""
    from ..confinement import failure_notes

    policy = sandbox.policy
    lines = [f"sandlock: {process.start_error}"]
    if not sandbox.quiet:
        cwd = policy.cwd or policy.workdir or os.getcwd()
        lines += failure_notes(policy, argv, cwd, child_environment(policy, os.environ),
                               process.start_errno)
    if stderr is None:
        print(*lines, sep="\n", file=sys.stderr)
        return None
    return "".join(f"{line}\n" for line in lines).encode(errors="replace") + stderr
