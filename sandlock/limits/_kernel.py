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
    fails with EFBIG and raises SIGXFSZ); ``cpus``: the CPUs the sandbox runs on."""

    open_files: int | None = None
    file_size: int | None = None
    cpus: tuple[int, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.open_files or self.file_size or self.cpus)

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


def kernel_limits(policy: object) -> KernelLimits:
    """The per-process limits of a Policy."""
    cpus = policy.cpu_cores  # type: ignore[attr-defined]
    if policy.num_cpus is not None:  # type: ignore[attr-defined]
        from ..confinement import sandbox_cpus  # (the first num_cpus: what /proc shows)

        cpus = sandbox_cpus(policy)
    return KernelLimits(open_files=policy.max_open_files,  # type: ignore[attr-defined]
                        file_size=policy.max_file_size,  # type: ignore[attr-defined]
                        cpus=cpus)
