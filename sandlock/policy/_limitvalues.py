"""The values of the resource limits (``_values``' kind of checks): sizes, CPU share
and list, open files. Only policies setting one load this module
(``_values.checked_by``); the process cap, checked in every run, stays in ``_values``.
"""

from __future__ import annotations

import os

from .._errors import PolicyError
from ._values import shown


def size(name: str, value: object) -> object:
    """A size ("512M", or bytes) as a ``limits.Size``; None: no limit."""
    return _sized(name, value, "parse_size")


def memory_size(name: str, value: object) -> object:
    """max_memory: a size, never a bare number below 1 MiB (``-m 10`` is not 10 bytes)."""
    return _sized(name, value, "parse_memory_size")


def _sized(name: str, value: object, parser: str) -> object:
    if value is None:
        return None
    from .. import limits

    try:
        return getattr(limits, parser)(value)
    except ValueError as exc:
        raise PolicyError(name, str(exc)) from None


def cpu_share(name: str, value: object) -> float | None:
    """Percent of one CPU, for the sandbox as a whole: at most 100 per CPU it may use."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise PolicyError(name, f"expected a percentage of one CPU, got {shown(value)}")
    most = 100 * len(os.sched_getaffinity(0))
    if not 0 < value <= most:  # (NaN, infinities and huge ints too, compared unconverted)
        raise PolicyError(name, f"must be more than 0 and at most {most} (100 per CPU), "
                          f"got {shown(value)}")
    return float(value)


def cpu_list(name: str, value: object) -> tuple[int, ...]:
    if value in ((), [], None):
        return ()
    from ..limits import parse_cpu_list

    try:
        return parse_cpu_list(value)
    except ValueError as exc:
        raise PolicyError(name, str(exc)) from None


def open_files(name: str, value: object) -> int | None:
    """RLIMIT_NOFILE: at least 1, at most what sandlock itself may raise it to."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise PolicyError(name, "expected a number of descriptors (1 or more), "
                          f"got {shown(value)}")
    import resource

    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard != resource.RLIM_INFINITY and value > hard:
        raise PolicyError(name, f"{shown(value)} is above this session's hard limit ({hard})")
    return value
