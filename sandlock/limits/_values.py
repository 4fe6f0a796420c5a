"""The values of the limits: sizes as the Sandlock documents write them ("512M") and
CPU lists as taskset and cpusets do ("0,2-3"). Pure: parsing and printing only."""

from __future__ import annotations

import os

# Binary units, as the seeds mean them (512M is 512 MiB); lower case accepted, and a
# trailing B ("512MB", "512MiB") too.
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


class Size(int):
    """A number of bytes that prints as it is usually written: ``Size(256 << 20)`` is
    ``256M``. Compares, hashes and computes as the int it is."""

    def __str__(self) -> str:
        for unit in ("T", "G", "M", "K"):
            if self and self % _UNITS[unit] == 0:
                return f"{int(self) // _UNITS[unit]}{unit}"
        return str(int(self))

    def __repr__(self) -> str:
        return repr(str(self))


def parse_size(value: object) -> Size:
    """``"512M"``, ``"1.5G"``, ``"64k"``, ``"100"`` or an int of bytes -> a positive
    Size; ValueError says what is expected."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ValueError(f"expected a size such as 512M, got {value!r}")
    if isinstance(value, int):
        number = value
    else:
        text = value.strip().upper()
        for suffix in ("IB", "B"):
            if text.endswith(suffix) and text[:-len(suffix)][-1:] in "KMGT":
                text = text[:-len(suffix)]
                break
        unit = text[-1:] if text[-1:] in "KMGT" else ""
        digits = text[:len(text) - len(unit)]
        try:
            amount = float(digits) if "." in digits else int(digits)
        except ValueError:
            raise ValueError(f"expected a size such as 512M (units K, M, G, T), got {value!r}") from None
        number = int(amount * _UNITS[unit])
        if not digits or digits.startswith(("+", "-")) or amount != amount:
            raise ValueError(f"expected a size such as 512M (units K, M, G, T), got {value!r}")
    if number <= 0:
        raise ValueError(f"must be more than 0 bytes, got {value!r}")
    return Size(number)


def parse_memory_size(value: object) -> Size:
    """``parse_size`` for a memory limit, which refuses a bare number below 1 MiB: no
    process lives in that, so ``-m 10`` meant 10M, not 10 bytes (killed at once)."""
    size = parse_size(value)
    bare = isinstance(value, int) or (isinstance(value, str) and value.strip().isdigit())
    if bare and size < _UNITS["M"]:
        raise ValueError(f"{value!r} is {int(size)} bytes (a number without a unit is bytes): "
                         f"write the unit, e.g. {str(value).strip()}M (units K, M, G, T)")
    return size


def parse_cpu_list(value: object) -> tuple[int, ...]:
    """``"0,2-3"`` or a list of CPU numbers -> the sorted CPUs; each must be one this
    process may run on (ValueError otherwise)."""
    if isinstance(value, str):
        cpus: set[int] = set()
        for part in value.split(","):
            first, dash, last = part.strip().partition("-")
            try:
                low, high = int(first), int(last if dash else first)
            except ValueError:
                raise ValueError(f"expected CPU numbers and ranges such as 0,2-3, got {value!r}") from None
            if low < 0 or high < low:
                raise ValueError(f"{part.strip()!r} is not a CPU range")
            cpus.update(range(low, high + 1))
    elif isinstance(value, (list, tuple, set, frozenset)) and value and all(
            isinstance(cpu, int) and not isinstance(cpu, bool) and cpu >= 0 for cpu in value):
        cpus = set(value)
    else:
        raise ValueError(f"expected CPU numbers and ranges such as 0,2-3, got {value!r}")
    usable = os.sched_getaffinity(0)
    outside = sorted(cpus - usable)
    if outside:
        raise ValueError(f"CPU {format_cpu_list(outside)} is not one sandlock may run on "
                         f"(it may use {format_cpu_list(usable)})")
    return tuple(sorted(cpus))


def format_cpu_list(cpus: object) -> str:
    """The CPUs as ranges: ``(0, 2, 3)`` -> ``"0,2-3"``."""
    ordered = sorted(cpus)  # type: ignore[call-overload]
    parts = []
    start = previous = None
    for cpu in [*ordered, None]:
        if start is not None and cpu != previous + 1:
            parts.append(f"{start}" if start == previous else f"{start}-{previous}")
            start = None
        if start is None:
            start = cpu
        previous = cpu
    return ",".join(parts)
