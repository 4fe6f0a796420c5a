"""The vDSO made to enter the kernel: its clock functions answer without a syscall,
where no seccomp filter sees them, and so does its getrandom (Linux 6.11).

Each program gets a fresh vDSO at exec; before its own code runs it sets its thread
pointer (arch_prctl: dynamic and static glibc, musl, Go alike), a call the filter hands
the supervisor under --time-start and --random-seed. There the supervisor writes, through
/proc/PID/mem (the kernel copies the page for that process alone), over the entry of
each function: a syscall of the same number (the clocks: their arguments are already
where the syscall takes them), or -ENOSYS (getrandom: glibc then makes the syscall).
The offsets are those of sandlock's own vDSO: one kernel, one image (checked against the
caller's bytes before anything is written).
"""

from __future__ import annotations

import ctypes
import errno
import os
import struct

_AT_SYSINFO_EHDR = 33
_SYSCALL = b"\x0f\x05\xc3"  # syscall; ret
_ENOSYS = b"\x48\xc7\xc0" + struct.pack("<i", -errno.ENOSYS) + b"\xc3"  # mov rax, -ENOSYS; ret


def _enter(number: int) -> bytes:
    return b"\xb8" + struct.pack("<I", number) + _SYSCALL  # mov eax, NR; syscall; ret


CLOCKS = {"__vdso_clock_gettime": _enter(228), "__vdso_gettimeofday": _enter(96),
          "__vdso_time": _enter(201)}
RANDOM = {"__vdso_getrandom": _ENOSYS}


class VdsoPatch:
    """What to write where in a vDSO (offsets from its start), from sandlock's own."""

    def __init__(self, functions: dict[str, bytes]) -> None:
        image = _own_vdso()
        symbols = _symbols(image) if image else {}
        self.writes = [(symbols[name], stub, image[symbols[name]:symbols[name] + len(stub)])
                       for name, stub in functions.items() if name in symbols]

    def apply(self, tid: int, still_the_caller: object) -> None:
        """Over thread ``tid``'s vDSO, unless done already for this exec.
        ``still_the_caller()`` raises once ``tid`` no longer names the caller (checked
        after /proc/TID/mem is opened, before any write). OSError if the vDSO is not
        the image expected (nothing written then)."""
        base = _vdso_base(tid)
        if base is None or not self.writes:
            return
        mem = os.open(f"/proc/{tid}/mem", os.O_RDWR | os.O_CLOEXEC)
        try:
            still_the_caller()  # type: ignore[operator]
            pending = []
            for offset, stub, original in self.writes:
                found = os.pread(mem, len(stub), base + offset)
                if found != stub:
                    if found != original:
                        raise OSError(errno.ENOEXEC, "the vDSO is not the kernel's image sandlock knows")
                    pending.append((offset, stub))
            for offset, stub in pending:
                os.pwrite(mem, stub, base + offset)
        finally:
            os.close(mem)


def _vdso_base(tid: int) -> int | None:
    with open(f"/proc/{tid}/auxv", "rb") as f:
        auxv = f.read()
    for key, value in struct.iter_unpack("<QQ", auxv[:len(auxv) // 16 * 16]):
        if key == _AT_SYSINFO_EHDR:
            return value or None
    return None


def _own_vdso() -> bytes:
    # (getauxval, not /proc/self/auxv: after setuid a process is not dumpable, and its
    # auxv is root's, mode 0400)
    getauxval = ctypes.CDLL(None).getauxval
    getauxval.restype = ctypes.c_ulong
    getauxval.argtypes = (ctypes.c_ulong,)
    if not getauxval(_AT_SYSINFO_EHDR):
        return b""
    with open("/proc/self/maps") as maps:
        for line in maps:
            if line.rstrip().endswith("[vdso]"):
                start, end = (int(part, 16) for part in line.split()[0].split("-"))
                return ctypes.string_at(start, end - start)
    return b""


def _symbols(image: bytes) -> dict[str, int]:
    """The dynamic symbols of an ELF64 image (the vDSO's are offsets from its start)."""
    section_offset, = struct.unpack_from("<Q", image, 0x28)
    entry_size, count = struct.unpack_from("<HH", image, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", image, section_offset + index * entry_size)
                for index in range(count)]
    dynsym = next(section for section in sections if section[1] == 11)  # SHT_DYNSYM
    names = sections[dynsym[6]][4]  # sh_link: its string table's sh_offset
    symbols = {}
    for offset in range(dynsym[4], dynsym[4] + dynsym[5], 24):
        name_at, _, _, _, value, _ = struct.unpack_from("<IBBHQQ", image, offset)
        if value:
            start = names + name_at
            symbols[image[start:image.index(b"\0", start)].decode()] = value
    return symbols
