"""Materialize an exec: copy execve/execveat's file name and argv out of the calling
thread, once, and say where in its memory they lie (the freezer needs to know who
could change them before the kernel copies them again)."""

from __future__ import annotations

import os
import struct

from .._record import record
from ._paths import PathCall

_POINTER = struct.Struct("=Q")
_POINTERS_PER_READ = 64
MAX_ARGUMENTS = 1 << 17  # the kernel's own bound is the stack's size; this is ample
MAX_STRING = 1 << 17  # MAX_ARG_STRLEN
_AT_FDCWD = -100
_AT_EMPTY_PATH = 0x1000


@record
class ExecCall:
    """What an exec asks for: ``argv`` decoded as the program will see it (bytes
    undecodable as UTF-8 escaped), ``path`` the file name made absolute, ``ranges``
    the (start, end) pieces of the caller's memory they were read from."""

    argv: tuple[str, ...]
    path: str
    ranges: tuple[tuple[int, int], ...]
    file: PathCall  # the file name as given, for deny_path


def read_exec(tid: int, syscall: str, args: tuple[int, ...]) -> ExecCall:
    """OSError (EFAULT, E2BIG, ENAMETOOLONG...) if the arguments cannot be read whole."""
    from ..kernel import read_memory, read_string

    if syscall == "execveat":
        dirfd, name_at, argv_at, flags = _signed(args[0]), args[1], args[2], args[4]
    else:
        dirfd, name_at, argv_at, flags = _AT_FDCWD, args[0], args[1], 0
    name = read_string(tid, name_at, 4096)
    ranges = [(name_at, name_at + len(name) + 1)]
    argv: list[bytes] = []
    pointer_at = argv_at
    while argv_at:  # a NULL argv: the kernel runs the file with no arguments
        block = read_memory(tid, pointer_at, _POINTER.size * _POINTERS_PER_READ) \
            if _readable_block(tid, pointer_at) else read_memory(tid, pointer_at, _POINTER.size)
        pointers = [value for (value,) in _POINTER.iter_unpack(block)]
        end = next((index for index, value in enumerate(pointers) if value == 0), None)
        for value in pointers[:end]:
            argument = read_string(tid, value, MAX_STRING)
            argv.append(argument)
            ranges.append((value, value + len(argument) + 1))
            if len(argv) > MAX_ARGUMENTS:
                raise OSError(7, os.strerror(7))  # E2BIG
        if end is not None:
            ranges.append((argv_at, pointer_at + (end + 1) * _POINTER.size))
            break
        pointer_at += len(block)
    path = _absolute(tid, dirfd, os.fsdecode(name), flags)
    return ExecCall(tuple(os.fsdecode(argument) for argument in argv), path, tuple(ranges),
                    PathCall(dirfd, name))


def _readable_block(tid: int, address: int) -> bool:
    """A whole block of pointers fits before the next page boundary (reads may not
    cross into memory that is not mapped)."""
    return address % 4096 + _POINTER.size * _POINTERS_PER_READ <= 4096


def _absolute(tid: int, dirfd: int, name: str, flags: int) -> str:
    """The file name as an absolute path, as the caller's directory or ``dirfd``
    gives it (what the callback is told; the kernel resolves it again)."""
    if name.startswith("/"):
        return os.path.normpath(name)
    try:
        base = (os.readlink(f"/proc/{tid}/cwd") if dirfd == _AT_FDCWD
                else os.readlink(f"/proc/{tid}/fd/{dirfd}"))
    except OSError:
        return name
    if not name and flags & _AT_EMPTY_PATH:
        return base
    return os.path.normpath(os.path.join(base, name))


def _signed(value: int) -> int:
    """A register's int argument (dirfd) as the kernel reads it: 32-bit, signed."""
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value
