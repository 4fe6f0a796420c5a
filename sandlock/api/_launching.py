"""What a launch sets up around the command's process, each only when the policy asks
for it (its package is not even imported otherwise): the copy-on-write workspace, the
HTTP proxy, the kernel limits, the audit log; and the hooks every started process gets."""

from __future__ import annotations

from .._errors import SetupError

TYPE_CHECKING = False  # typing costs ~2.5 ms to import: not on the start-up path
if TYPE_CHECKING:
    from .._auditlog import AuditLog
    from ..limits import KernelLimits
    from ..net import HttpRun
    from ..policy import Policy
    from ..process import CowRun, SandboxedProcess
    from ._sandbox import Sandbox


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
        from ._runevents import file_size_exceeded

        process.on_exit(lambda: file_size_exceeded(process, limit))
    if audit is not None:
        audit.follow(process)  # its execution: the log's last record, when it closes
        if sandbox.policy.max_output is None:  # else: Capture.drop_notices closes it
            process.on_exit(audit.close)
    return process
