"""Materialize an exec: copy execve/execveat's file name and argv out of the calling
thread, once, and say where in its memory they lie (the freezer needs to know who
could change them before the kernel copies them again)."""

from __future__ import annotations

import errno
import os
import struct

from .._record import record
from ._paths import AT_FDCWD, PATH_MAX, PathCall, lookup_error, signed_int

_POINTER = struct.Struct("=Q")
_POINTERS_PER_READ = 64
MAX_ARGUMENTS = 1 << 17  # the kernel's own bound is the stack's size; this is ample
MAX_STRING = 1 << 17  # MAX_ARG_STRLEN


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

    dirfd, name_at, argv_at = _arguments(syscall, args)
    name = read_string(tid, name_at, PATH_MAX)
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
                raise OSError(errno.E2BIG, os.strerror(errno.E2BIG))
        if end is not None:
            ranges.append((argv_at, pointer_at + (end + 1) * _POINTER.size))
            break
        pointer_at += len(block)
    file = PathCall(dirfd, name)
    try:  # what the callback is told (the kernel resolves the name again)
        path = os.path.normpath(file.absolute(tid))
    except OSError:
        path = os.fsdecode(name)
    return ExecCall(tuple(os.fsdecode(argument) for argument in argv), path, tuple(ranges), file)


def absent(tid: int, syscall: str, args: tuple[int, ...]) -> int:
    """ENOENT (or ENOTDIR) if the file an exec names is not there: the kernel would
    fail it so, and nothing would run. A search along PATH (a shell's, execvp's) tries
    several such names before the one that runs: each is answered at once, without the
    hold and the callback an exec costs (~0.4 ms). Read without a hold, so a racing
    writer can only make an exec fail; nothing goes on unchecked. 0: look closer."""
    from ..kernel import read_string

    dirfd, name_at, _ = _arguments(syscall, args)
    try:
        name = read_string(tid, name_at, PATH_MAX)
    except OSError:
        return 0
    return lookup_error(tid, PathCall(dirfd, name)) if name else 0  # "": a descriptor's file


def _arguments(syscall: str, args: tuple[int, ...]) -> tuple[int, int, int]:
    """(the directory descriptor, the file name's address, argv's address)."""
    if syscall == "execveat":
        return signed_int(args[0]), args[1], args[2]
    return AT_FDCWD, args[0], args[1]


def _readable_block(tid: int, address: int) -> bool:
    """A whole block of pointers fits before the next page boundary (reads may not
    cross into memory that is not mapped)."""
    return address % 4096 + _POINTER.size * _POINTERS_PER_READ <= 4096
