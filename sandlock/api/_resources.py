"""What a run holds besides its command, made before the launch: its audit log, its
copy-on-write workspace, its HTTP proxy, its kernel limits. Each package is imported
only by the runs that use it."""

from __future__ import annotations

from .._errors import SetupError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ..policy import Policy
    from .._auditlog import AuditLog
    from ..limits import KernelLimits
    from ..net import HttpRun
    from ..process import CowRun, SandboxedProcess
    from ._sandbox import Sandbox


def start_workspace(policy: Policy, dry_run: bool, audit: AuditLog | None) -> CowRun | None:
    """The run's copy-on-write workspace, if it has a workdir."""
    if policy.workdir is None:
        return None  # sandlock.cow is never imported by other runs
    from ..process import CowRun, SandboxedProcess
    from ._sandbox import Sandbox

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
    if not (policy.max_open_files or policy.max_file_size or policy.cpu_cores):
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
    """The hooks every started process has: its audit log, a file size limit's notice."""
    process.audit = audit
    limit = sandbox.policy.max_file_size
    if limit is not None:
        from ._runevents import file_size_exceeded

        process.on_exit(lambda: file_size_exceeded(process, limit))
    if audit is not None and sandbox.policy.max_output is None:  # else: Capture.drop_notices
        process.on_exit(audit.close)
    return process
