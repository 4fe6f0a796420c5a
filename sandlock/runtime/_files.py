"""File events (``Sandbox(policy_fn=..., events={"file"})``): the callback hears of
each open, once per path and process, while the whole sandbox is held (the same hold
as deny_path's: the path it is told is the one the kernel then opens). Its answer
for that path stands for the process's later opens of it (denied again with the same
errno, or let through), until the process ends.
"""

from __future__ import annotations

import os

from ._events import FILE, Answer, Event

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ._callback import Callback
    from ._paths import PathCall

MAX_PATHS = 65536  # remembered per process; past it, the callback is asked again


class FileEvents:
    def __init__(self, callback: Callback) -> None:
        self._callback = callback
        self._answers: dict[int, dict[str, Answer]] = {}  # pid -> path -> answer

    def answer(self, tid: int, pid: int, parent: int, syscall: str, call: PathCall) -> Answer:
        """The callback's word on ``call`` by thread ``tid`` of process ``pid``."""
        try:
            path = call.absolute(tid)
        except OSError:  # (its working directory or descriptor cannot be read)
            path = os.fsdecode(call.path)
        known = self._answers.setdefault(pid, {})
        answer = known.get(path)
        if answer is None:
            answer = self._callback.ask(Event(syscall, FILE, pid, parent, path=path,
                                              flags=call.flags))
            if len(known) >= MAX_PATHS:
                known.clear()
            known[path] = answer
        return answer

    def forget(self, pid: int) -> None:
        self._answers.pop(pid, None)
