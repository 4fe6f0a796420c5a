"""The values of the limits: sizes as the Sandlock documents write them ("512M") and
CPU lists as taskset and cpusets do ("0,2-3"). Pure: parsing and printing only."""

from __future__ import annotations

import os

from .._grammar import BLANKS, MAX_INT, is_digits, shown, split_decimal, whole

# Binary units, as the seeds mean them (512M is 512 MiB); lower case accepted, and a
# trailing B ("512MB", "512MiB") too.
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_LETTERS = ("K", "M", "G", "T")
# The largest size: what RLIMIT_FSIZE, a tmpfs's size= and every count of bytes take
# (a 64-bit signed value); past it, setrlimit failed after the sandbox had started.
MAX_SIZE = MAX_INT
_MOST_DIGITS = len(str(MAX_SIZE))  # a longer number is too large whatever its unit


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

    @classmethod
    def parse(cls, value: object) -> Size:
        """``Size.parse("512M")`` (upstream's ``ByteSize.parse``): ``parse_size``."""
        return parse_size(value)


def parse_size(value: object) -> Size:
    """``"512M"``, ``"1.5G"``, ``"64k"``, ``"100"`` or an int of bytes -> a Size from 1
    byte to MAX_SIZE; ValueError says what is expected. The number is the one grammar
    of numbers (``_grammar``: ASCII digits, a fraction if given), computed exactly."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ValueError(f"expected a size such as 512M, got {shown(value)}")
    number = value if isinstance(value, int) else _bytes(value)
    if number <= 0:
        raise ValueError(f"must be more than 0 bytes, got {shown(value)}")
    if number > MAX_SIZE:
        raise _too_large(value)
    return Size(number)


def _bytes(text: str) -> int:
    """``"1.5G"`` -> 1610612736 (rounded down to a whole byte)."""
    written = text.strip(BLANKS)
    upper = written.upper() if written.isascii() else ""  # (no 'ı'.upper() == 'I' here)
    for suffix in ("IB", "B"):
        if upper.endswith(suffix) and upper[:-len(suffix)][-1:] in _LETTERS:
            upper = upper[:-len(suffix)]
            break
    unit = upper[-1:] if upper[-1:] in _LETTERS else ""
    digits = upper[:len(upper) - len(unit)]
    try:
        whole_part, fraction = split_decimal(digits, text)
    except ValueError:
        raise ValueError(f"expected a size such as 512M (units K, M, G, T), "
                         f"got {shown(text)}") from None
    if len(whole_part.lstrip("0")) > _MOST_DIGITS:
        raise _too_large(text)
    if len(fraction) > _MOST_DIGITS:
        raise ValueError(f"{shown(text)}: more digits after the '.' than a size can mean")
    whole_bytes = int(whole_part.lstrip("0") or "0") * _UNITS[unit]
    return whole_bytes + int(fraction or "0") * _UNITS[unit] // 10 ** len(fraction)


def _too_large(value: object) -> ValueError:
    return ValueError(f"{shown(value)} is more than the largest size, {MAX_SIZE} bytes")


def parse_memory_size(value: object) -> Size:
    """``parse_size`` for a memory limit, which refuses a bare number below 1 MiB: no
    process lives in that, so ``-m 10`` meant 10M, not 10 bytes (killed at once)."""
    size = parse_size(value)
    bare = isinstance(value, int) or (isinstance(value, str) and is_digits(value.strip(BLANKS)))
    if bare and size < _UNITS["M"]:
        raise ValueError(f"{value!r} is {int(size)} bytes (a number without a unit is bytes): "
                         f"write the unit, e.g. {str(value).strip(BLANKS)}M (units K, M, G, T)")
    return size


def parse_cpu_list(value: object) -> tuple[int, ...]:
    """``"0,2-3"`` or a list of CPU numbers -> the sorted CPUs; each must be one this
    process may run on (ValueError otherwise). A range is checked by its ends before
    any of it is built (``0-1111111111`` would be a billion CPUs)."""
    usable = os.sched_getaffinity(0)
    if isinstance(value, str):
        cpus = _cpus_of(value, usable)
    elif isinstance(value, (list, tuple, set, frozenset)) and value and all(
            isinstance(cpu, int) and not isinstance(cpu, bool) and 0 <= cpu <= MAX_INT
            for cpu in value):
        cpus = set(value)
    else:
        raise ValueError(f"expected CPU numbers and ranges such as 0,2-3, got {shown(value)}")
    outside = sorted(cpus - usable)
    if outside:
        raise ValueError(_not_usable(format_cpu_list(outside), usable))
    return tuple(sorted(cpus))


def _cpus_of(text: str, usable: set[int]) -> set[int]:
    """The CPUs of ``"0,2-3"``, as bits of one int: each range costs a shift, whatever
    the length of the list, and none goes past the last usable CPU."""
    last = max(usable)
    mask = 0
    for part in text.split(","):
        first, dash, final = part.strip(BLANKS).partition("-")
        low, high = _cpu(first, text, usable), _cpu(final if dash else first, text, usable)
        if high < low:
            raise ValueError(f"{shown(part.strip(BLANKS))} is not a CPU range")
        if high > last:
            beyond = max(low, last + 1)
            cpus = f"{beyond}-{high}" if high > beyond else f"{high}"
            raise ValueError(_not_usable(cpus, usable))
        mask |= ((1 << (high - low + 1)) - 1) << low
    return {cpu for cpu in range(last + 1) if mask >> cpu & 1}


def _cpu(item: str, text: str, usable: set[int]) -> int:
    if not is_digits(item):
        raise ValueError(f"expected CPU numbers and ranges such as 0,2-3, got {shown(text)}")
    try:
        return whole(item)
    except ValueError:  # too many digits to be read at all
        raise ValueError(_not_usable(shown(item), usable)) from None


def _not_usable(cpus: str, usable: set[int]) -> str:
    return f"CPU {cpus} is not one sandlock may run on (it may use {format_cpu_list(usable)})"


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
