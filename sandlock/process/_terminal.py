"""Controlling-terminal handoff, so the command runs as the terminal's foreground job.

The command gets its own process group (signals are forwarded to that group), so
sandlock hands it the terminal while it runs, takes it back when it stops or ends,
and relays job control (Ctrl-Z, fg, bg) the way a shell would expect.
"""

from __future__ import annotations

import _signal as signal  # signal without its enum wrappers (enum: ~3 ms of start-up)
import os


class Foreground:
    """sandlock's terminal, when sandlock is the terminal's foreground job."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.own_group = os.getpgrp()

    @classmethod
    def detect(cls) -> Foreground | None:
        for fd in (0, 1, 2):
            try:
                if os.isatty(fd) and os.tcgetpgrp(fd) == os.getpgrp():
                    return cls(fd)
            except OSError:
                continue
        return None

    def is_ours(self) -> bool:
        try:
            return os.tcgetpgrp(self.fd) == self.own_group
        except OSError:
            return False

    def hand_to(self, group: int) -> None:
        set_foreground(self.fd, group)

    def take_back(self) -> None:
        set_foreground(self.fd, self.own_group)

    def relay_stop(self, command_group: int) -> None:
        """The command stopped (Ctrl-Z): stop sandlock too, then resume it on fg/bg."""
        self.take_back()
        os.kill(os.getpid(), signal.SIGTSTP)  # returns once the shell continues us
        if self.is_ours():  # `fg`; after `bg` the terminal stays with the shell
            self.hand_to(command_group)
        try:
            os.killpg(command_group, signal.SIGCONT)
        except ProcessLookupError:
            pass


def set_foreground(fd: int, group: int) -> None:
    """Make ``group`` the terminal's foreground process group (quietly, if the tty is gone)."""
    # Only a foreground process may change the foreground group without SIGTTOU.
    previous = signal.signal(signal.SIGTTOU, signal.SIG_IGN)
    try:
        os.tcsetpgrp(fd, group)
    except OSError:
        pass  # the terminal went away (hangup): nothing left to hand over
    finally:
        signal.signal(signal.SIGTTOU, previous)
