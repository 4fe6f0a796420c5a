"""The files that show the sandbox its own machine (upstream Sandlock's "/proc
virtualisation"): written in sandlock's process, mounted by init over the kernel's
files in the sandbox's mount namespace (``_isolation``), read-only.

* ``/proc/meminfo`` under ``max_memory``: MemTotal is the limit;
* ``/proc/cpuinfo`` and ``/sys/devices/system/cpu/online`` under ``num_cpus``: the
  sandbox's CPUs only (its affinity is set to them: ``limits.KernelLimits``), so
  nproc (affinity), os.cpu_count() (glibc reads the online file) and the file agree.

Mounts, not an interception of open: a run that does not ask for them pays nothing, and
a run that does pays nothing per open (every openat would otherwise reach the
supervisor, whose answer for the others would have to be CONTINUE, open to a swap of
the path after the supervisor read it). Only ``/proc/PID/...`` files of every process
cannot be mounted over this way (docs/usage.md, "Virtual /proc").
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ..policy import Policy

CPU_ONLINE = "/sys/devices/system/cpu/online"
_KIB = 1024


def sandbox_cpus(policy: Policy) -> tuple[int, ...]:
    """The CPUs the sandbox runs on: cpu_cores (or those sandlock may run on), the
    first num_cpus of them when it is set; () for no restriction."""
    if policy.num_cpus is None:
        return policy.cpu_cores
    return (policy.cpu_cores or tuple(sorted(os.sched_getaffinity(0))))[:policy.num_cpus]


def virtual_files(policy: Policy, cpus: tuple[int, ...]) -> tuple[tuple[str, bytes], ...]:
    """(path, content) of each file to mount; ``cpus``: the sandbox's CPUs (its
    affinity), when ``num_cpus`` sets them."""
    files: list[tuple[str, bytes]] = []
    if policy.max_memory is not None:
        files.append(("/proc/meminfo", meminfo(int(policy.max_memory))))
    if policy.num_cpus is not None:
        with open("/proc/cpuinfo", "rb") as host:
            files.append(("/proc/cpuinfo", cpuinfo(host.read(), cpus)))
        if os.path.exists(CPU_ONLINE):
            files.append((CPU_ONLINE, cpu_range(len(cpus))))
    return tuple(files)


def meminfo(limit: int) -> bytes:
    """The lines programs read to size themselves (free, top, JVMs, Python's psutil):
    the limit as the total, all of it free at start. Not updated as the sandbox uses
    memory (a file, not an answer per read: docs/usage.md)."""
    total = limit // _KIB
    fields = (("MemTotal", total), ("MemFree", total), ("MemAvailable", total),
              ("Buffers", 0), ("Cached", 0), ("SwapCached", 0), ("Active", 0),
              ("Inactive", 0), ("SwapTotal", 0), ("SwapFree", 0), ("Dirty", 0),
              ("Shmem", 0), ("SReclaimable", 0), ("CommitLimit", total),
              ("Committed_AS", 0))
    return "".join(f"{name + ':':<16}{value:>8} kB\n" for name, value in fields).encode()


def cpuinfo(host: bytes, cpus: tuple[int, ...]) -> bytes:
    """The host's blocks of the sandbox's CPUs, numbered from 0 as the sandbox sees
    them, with as many siblings and cores as it has."""
    blocks = {}
    for block in host.strip(b"\n").split(b"\n\n"):
        number = _field(block, b"processor")
        if number is not None and number.isdigit():
            blocks[int(number)] = block
    shown = []
    for index, cpu in enumerate(cpus):
        block = blocks.get(cpu) or next(iter(blocks.values()), b"processor\t: 0")
        lines = []
        for line in block.split(b"\n"):
            name = line.split(b":", 1)[0].strip()
            if name == b"processor":
                line = b"processor\t: %d" % index
            elif name in (b"siblings", b"cpu cores"):
                line = line.split(b":", 1)[0] + b": %d" % len(cpus)
            elif name in (b"core id", b"apicid", b"initial apicid"):
                line = line.split(b":", 1)[0] + b": %d" % index
            lines.append(line)
        shown.append(b"\n".join(lines))
    return b"\n\n".join(shown) + b"\n\n"


def cpu_range(count: int) -> bytes:
    return b"0\n" if count == 1 else b"0-%d\n" % (count - 1)


def _field(block: bytes, name: bytes) -> bytes | None:
    for line in block.split(b"\n"):
        key, _, value = line.partition(b":")
        if key.strip() == name:
            return value.strip()
    return None
