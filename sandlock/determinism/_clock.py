"""--time-start: the realtime clocks read as the sandbox's, answered by the supervisor.

The wall clock is offset once, at launch, by the date given minus the time then, and
runs from there at the host's pace. The monotonic and boot-time clocks are the time
namespace's (they start at 0; the kernel and the vDSO read them): not here.
"""

from __future__ import annotations

import struct
import time

_BILLION = 1_000_000_000


class Clock:
    def __init__(self, start: float) -> None:
        self.offset = round(start * _BILLION) - time.time_ns()

    def now(self, clock: int = time.CLOCK_REALTIME) -> int:
        """Nanoseconds since the epoch on the sandbox's ``clock`` (a realtime one)."""
        return time.clock_gettime_ns(clock) + self.offset

    def clock_gettime(self, args: tuple[int, ...], write: object) -> int:
        """clock_gettime(clockid, *tp): the filter passes the realtime ids only."""
        clock = args[0] & 0xFFFFFFFF
        seconds, nanoseconds = divmod(self.now(clock), _BILLION)
        write(args[1], struct.pack("<qq", seconds, nanoseconds))  # type: ignore[operator]
        return 0

    def gettimeofday(self, args: tuple[int, ...], write: object) -> int:
        """gettimeofday(*tv, *tz): tz, obsolete, says UTC (the kernel's is unset too)."""
        seconds, nanoseconds = divmod(self.now(), _BILLION)
        if args[0]:
            write(args[0], struct.pack("<qq", seconds, nanoseconds // 1000))  # type: ignore[operator]
        if args[1]:
            write(args[1], struct.pack("<ii", 0, 0))  # type: ignore[operator]
        return 0

    def time(self, args: tuple[int, ...], write: object) -> int:
        seconds = self.now() // _BILLION
        if args[0]:
            write(args[0], struct.pack("<q", seconds))  # type: ignore[operator]
        return seconds
