"""The checks of the fields that make a run reproducible or size its view of the
machine (upstream Sandlock's names): ``time_start``, ``random_seed``, ``num_cpus``.
Loaded only by a policy that sets one of them."""

from __future__ import annotations

import os

from .._errors import PolicyError
from .._grammar import shown

MAX_SEED = 2**64 - 1  # upstream's u64
# Dates from the epoch to the end of year 9999 (what ISO 8601 writes with four digits):
# a realtime clock before 1970 breaks programs that take time_t as unsigned.
LAST_INSTANT = 253402300799.0


def time_start(name: str, value: object) -> float | None:
    """Unix seconds, from a number of them, an ISO 8601 date ("2000-01-01T00:00:00Z";
    without a zone, UTC) or a ``datetime`` (upstream's Python API takes one)."""
    if value is None:
        return None
    if isinstance(value, str):
        value = _instant(name, value)
    elif not isinstance(value, (int, float)):
        value = _moment(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise PolicyError(name, f"expected a date such as \"2000-01-01T00:00:00Z\" or Unix "
                          f"seconds, got {shown(value)}")
    if not 0 <= value <= LAST_INSTANT:  # (NaN fails it too)
        raise PolicyError(name, f"must be from 1970-01-01 to 9999-12-31, got {shown(value)}")
    return float(value)


def _instant(name: str, text: str) -> float:
    from .._grammar import decimal, is_digits

    if text[:1].isascii() and is_digits(text[:1]) and "-" not in text and ":" not in text:
        try:
            return decimal(text)
        except ValueError as exc:
            raise PolicyError(name, str(exc)) from None
    import datetime

    try:
        moment = datetime.datetime.fromisoformat(text.strip())
    except ValueError:
        raise PolicyError(name, f"expected a date such as \"2000-01-01T00:00:00Z\" or Unix "
                          f"seconds, got {shown(text)}") from None
    return _moment(moment)


def _moment(value: object) -> object:
    """A datetime's Unix seconds (naive: UTC); anything else as it is."""
    import datetime

    if not isinstance(value, datetime.datetime):
        return value
    if value.tzinfo is None:
        value = value.replace(tzinfo=datetime.timezone.utc)
    return value.timestamp()


def random_seed(name: str, value: object) -> int | None:
    if value is None:
        return None
    value = _whole(name, value, MAX_SEED)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_SEED:
        raise PolicyError(name, f"expected a whole number from 0 to {MAX_SEED}, got {shown(value)}")
    return value


def num_cpus(name: str, value: object) -> int | None:
    """At least 1, at most the CPUs sandlock itself may run on: the sandbox's are the
    first ``value`` of them (of cpu_cores', when given; checked by Policy)."""
    if value is None:
        return None
    value = _whole(name, value)
    most = len(os.sched_getaffinity(0))
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= most:
        raise PolicyError(name, f"expected a number of CPUs from 1 to {most} (those sandlock "
                          f"may run on), got {shown(value)}")
    return value


def _whole(name: str, value: object, most: int | None = None) -> object:
    """A whole number given as text (an option's value) read by sandlock's grammar;
    anything else as it is."""
    if not isinstance(value, str):
        return value
    from .._grammar import whole

    try:
        return whole(value) if most is None else whole(value, most)
    except ValueError as exc:
        raise PolicyError(name, str(exc)) from None
