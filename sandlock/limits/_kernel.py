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
    runs on; ``no_coredump``: RLIMIT_CORE 0; ``no_randomize_memory``: ADDR_NO_RANDOMIZE;
    ``no_huge_pages``: PR_SET_THP_DISABLE."""

    open_files: int | None = None
    file_size: int | None = None
    cpus: tuple[int, ...] = ()
    no_coredump: bool = False
    no_randomize_memory: bool = False
    no_huge_pages: bool = False

    def __bool__(self) -> bool:
        return bool(self.open_files or self.file_size or self.cpus or self.no_coredump
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


def _lowered(current: int, wanted: int) -> int:
    import resource

    return wanted if current == resource.RLIM_INFINITY else min(current, wanted)


def kernel_limits(policy: object) -> KernelLimits:
    """The per-process limits and attributes of a Policy."""
    return KernelLimits(open_files=policy.max_open_files,  # type: ignore[attr-defined]
                        file_size=policy.max_file_size,  # type: ignore[attr-defined]
                        cpus=policy.cpu_cores,  # type: ignore[attr-defined]
                        no_coredump=policy.no_coredump,  # type: ignore[attr-defined]
                        no_randomize_memory=policy.no_randomize_memory,  # type: ignore[attr-defined]
                        no_huge_pages=policy.no_huge_pages)  # type: ignore[attr-defined]
