"""The limits the kernel holds by itself, per process: set by the command's process
right before it is confined and execs, inherited by everything it starts, and never
raised again (hard limits need a capability no sandboxed process has; setting another
process's limits and widening the CPU affinity are refused by the seccomp filter).
With them, the process attributes upstream Sandlock sets the same way: no core dumps,
no address-space randomisation, no transparent huge pages."""

from __future__ import annotations

import os

from .._record import record

_PR_SET_THP_DISABLE = 41  # inherited by children, kept across execve
_ADDR_NO_RANDOMIZE = 0x0040000  # a personality flag: kept across execve
_PERSONALITY_QUERY = 0xFFFFFFFF


@record
class KernelLimits:
    """``open_files``: RLIMIT_NOFILE (lowered, never raised); ``file_size``: RLIMIT_FSIZE
    (a write past it fails with EFBIG and raises SIGXFSZ); ``cpus``: the CPUs the sandbox
    runs on; ``data``: RLIMIT_DATA of the commands it execs (--max-memory-mode refuse);
    ``no_coredump``: RLIMIT_CORE 0; ``no_randomize_memory``: ADDR_NO_RANDOMIZE;
    ``no_huge_pages``: PR_SET_THP_DISABLE."""

    open_files: int | None = None
    file_size: int | None = None
    cpus: tuple[int, ...] = ()
    data: int | None = None
    no_coredump: bool = False
    no_randomize_memory: bool = False
    no_huge_pages: bool = False

    def __bool__(self) -> bool:
        return bool(self.open_files or self.file_size or self.cpus or self.data or self.no_coredump
                    or self.no_randomize_memory or self.no_huge_pages)

    def before_confinement(self) -> None:
        """In the command's process, before its seccomp filter (which then refuses
        sched_setaffinity, and the personality flags but PER_LINUX's)."""
        if self.cpus:
            os.sched_setaffinity(0, self.cpus)
        if self.open_files or self.file_size or self.no_coredump:
            import resource  # noqa: F401 - now: after Landlock, its file may be out of reach
        if self.no_randomize_memory or self.no_huge_pages:
            from ..kernel import prctl, syscall, nr

            if self.no_randomize_memory:
                current = syscall(nr("personality"), _PERSONALITY_QUERY)
                syscall(nr("personality"), current | _ADDR_NO_RANDOMIZE)
            if self.no_huge_pages:
                prctl(_PR_SET_THP_DISABLE, 1)

    def apply_rlimits(self) -> None:
        """In the command's process, right before exec: its setup may still open
        descriptors above the limit. The open files' limit only ever lowers what the
        command inherited (soft and hard each); the others set both."""
        if self.open_files or self.file_size or self.no_coredump:
            import resource

            if self.open_files:
                soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
                resource.setrlimit(resource.RLIMIT_NOFILE, (_lowered(soft, self.open_files),
                                                            _lowered(hard, self.open_files)))
            if self.file_size:
                resource.setrlimit(resource.RLIMIT_FSIZE, (self.file_size, self.file_size))
            if self.no_coredump:
                resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

    def limit_data(self) -> None:
        """Right before exec, in a command's process only: a copy of sandlock's
        interpreter (a function run, a long-lived sandbox's resident) may already hold
        more than the limit, inherited from the host; a program exec'd starts at zero."""
        if self.data:
            limit_data(self.data)


def _lowered(current: int, wanted: int) -> int:
    import resource

    return wanted if current == resource.RLIM_INFINITY else min(current, wanted)


def limit_data(size: int, ceiling: int | None = None) -> None:
    """RLIMIT_DATA: brk, and private writable mappings (every heap), past ``size``
    bytes fail with ENOMEM. The hard limit is ``ceiling`` (default: ``size``): the
    process can raise its own soft limit up to that, never past it."""
    import resource

    resource.setrlimit(resource.RLIMIT_DATA, (size, ceiling or size))


def kernel_limits(policy: object) -> KernelLimits:
    """The per-process limits and attributes of a Policy."""
    refuse = policy.max_memory_mode == "refuse"  # type: ignore[attr-defined]
    cpus = policy.cpu_cores  # type: ignore[attr-defined]
    if policy.num_cpus is not None:  # type: ignore[attr-defined]
        from ..confinement import sandbox_cpus  # (the first num_cpus: what /proc shows)
        cpus = sandbox_cpus(policy)
    return KernelLimits(open_files=policy.max_open_files,  # type: ignore[attr-defined]
                        file_size=policy.max_file_size,  # type: ignore[attr-defined]
                        cpus=cpus,
                        data=int(policy.max_memory) if refuse else None,  # type: ignore[attr-defined]
                        no_coredump=policy.no_coredump,  # type: ignore[attr-defined]
                        no_randomize_memory=policy.no_randomize_memory,  # type: ignore[attr-defined]
                        no_huge_pages=policy.no_huge_pages)  # type: ignore[attr-defined]


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
