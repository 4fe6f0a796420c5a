"""The syscall numbers the runtime policy tells apart, from the machine's table."""

from __future__ import annotations

from .._record import record

CLONE_VM = 0x100
CLONE_VFORK = 0x4000
CLONE_THREAD = 0x10000
EXEC_CALLS = ("execve", "execveat")


@record
class CallNumbers:
    """``notified``: every call the filter hands to the supervisor; ``execs``,
    ``opens``, ``creation`` (fork, vfork, clone), ``names``: number -> name."""

    notified: frozenset[int]
    execs: frozenset[int]
    opens: frozenset[int]
    creation: frozenset[int]
    names: dict[int, str]

    @classmethod
    def native(cls) -> CallNumbers:
        from ..confinement import OPEN_CALLS
        from ..kernel import PROCESS_CREATION, SUPERVISED, native_arch

        numbers = native_arch().numbers
        names = (*SUPERVISED, *EXEC_CALLS, *OPEN_CALLS, *PROCESS_CREATION)
        return cls(*(frozenset(numbers[name] for name in group)
                     for group in (names, EXEC_CALLS, OPEN_CALLS, PROCESS_CREATION)),
                   {numbers[name]: name for name in names})

    def parks(self, number: int, first: int) -> bool:
        """Whether a task blocked (state D) in call ``number`` (first argument
        ``first``) cannot return to its program while sandlock holds the answers to
        its calls: it waits for such an answer, or in vfork for its child. A clone
        making a thread is never supervised: it may be about to make one."""
        if self.names.get(number) == "clone" and first & CLONE_THREAD:
            return bool(first & CLONE_VFORK)
        return number in self.notified
