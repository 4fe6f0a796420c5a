"""The limits the kernel holds by itself, per process: set by the command's process
right before it is confined and execs, inherited by everything it starts, and never
raised again (hard limits need a capability no sandboxed process has; setting another
process's limits and widening the CPU affinity are refused by the seccomp filter)."""

from __future__ import annotations

import os

from .._record import record


@record
class KernelLimits:
    """``open_files``: RLIMIT_NOFILE; ``file_size``: RLIMIT_FSIZE (a write past it
    fails with EFBIG and raises SIGXFSZ); ``cpus``: the CPUs the sandbox runs on;
    ``data``: RLIMIT_DATA of the commands it execs (--max-memory-mode refuse)."""

    open_files: int | None = None
    file_size: int | None = None
    cpus: tuple[int, ...] = ()
    data: int | None = None

    def __bool__(self) -> bool:
        return bool(self.open_files or self.file_size or self.cpus or self.data)

    def restrict_cpus(self) -> None:
        """In the command's process, before its seccomp filter (which then refuses
        sched_setaffinity)."""
        if self.cpus:
            os.sched_setaffinity(0, self.cpus)

    def apply_rlimits(self) -> None:
        """In the command's process, right before exec: its setup may still open
        descriptors above the limit. Soft and hard limits alike: nothing to raise to."""
        if self.open_files or self.file_size:
            import resource

            if self.open_files:
                resource.setrlimit(resource.RLIMIT_NOFILE, (self.open_files, self.open_files))
            if self.file_size:
                resource.setrlimit(resource.RLIMIT_FSIZE, (self.file_size, self.file_size))

    def limit_data(self) -> None:
        """Right before exec, in a command's process only: a copy of sandlock's
        interpreter (a function run, a long-lived sandbox's resident) may already hold
        more than the limit, inherited from the host; a program exec'd starts at zero."""
        if self.data:
            limit_data(self.data)


def limit_data(size: int, ceiling: int | None = None) -> None:
    """RLIMIT_DATA: brk, and private writable mappings (every heap), past ``size``
    bytes fail with ENOMEM. The hard limit is ``ceiling`` (default: ``size``): the
    process can raise its own soft limit up to that, never past it."""
    import resource

    resource.setrlimit(resource.RLIMIT_DATA, (size, ceiling or size))


def kernel_limits(policy: object) -> KernelLimits:
    """The per-process limits of a Policy."""
    refuse = policy.max_memory_mode == "refuse"  # type: ignore[attr-defined]
    return KernelLimits(open_files=policy.max_open_files,  # type: ignore[attr-defined]
                        file_size=policy.max_file_size,  # type: ignore[attr-defined]
                        cpus=policy.cpu_cores,  # type: ignore[attr-defined]
                        data=int(policy.max_memory) if refuse else None)  # type: ignore[attr-defined]


def relimit_data(member: int, size: int) -> int:
    """sb.update(max_memory=...) under --max-memory-mode refuse: the soft RLIMIT_DATA
    ``size`` (at most the hard one, the starting limit) for every process of the PID
    namespace of host pid ``member`` that holds a data limit (the commands exec'd and
    what they started; not init, the resident or a function's process, copies of
    sandlock's interpreter, which hold none). Only the soft limit: raising a hard one
    takes CAP_SYS_RESOURCE, which sandlock may not have, so that a hard limit lowered
    could not be loosened again. Listed again until no new one shows (a process
    forked meanwhile copied its parent's old limit). Returns how many were set.
    (Between the namespace check and prlimit a process may end; its pid is not
    reused until the kernel has cycled through every other one.)"""
    import resource

    namespace = os.stat(f"/proc/{member}/ns/pid").st_ino
    seen: set[int] = set()
    limited = 0
    while True:
        found = [pid for pid in _host_pids() if pid not in seen and _in_namespace(pid, namespace)]
        if not found:
            return limited
        seen.update(found)
        for pid in found:
            try:
                hard = resource.prlimit(pid, resource.RLIMIT_DATA)[1]
                if hard != resource.RLIM_INFINITY:
                    resource.prlimit(pid, resource.RLIMIT_DATA, (min(size, hard), hard))
                    limited += 1
            except ProcessLookupError:
                pass  # gone meanwhile


def _host_pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def _in_namespace(pid: int, namespace: int) -> bool:
    try:
        return os.stat(f"/proc/{pid}/ns/pid").st_ino == namespace
    except OSError:
        return False
