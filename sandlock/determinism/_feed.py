"""The random devices under --random-seed: a pipe init holds open both ways, mounted
over /dev/urandom and /dev/random (``confinement._isolation``), fed by a thread of
init with the seeded stream. Readers share it in the order they read; the pipe never
ends (init keeps a writer) and holds what was written ahead (64 KiB)."""

from __future__ import annotations

import os

from ._stream import SeededStream

_CHUNK = 1 << 16


def feed_random_devices(fifo: int, seed: int) -> None:
    """A thread of init, until the sandbox ends (a write then fails, or init exits)."""
    stream = SeededStream(seed, b"random devices")
    try:
        while True:
            data = stream.read(_CHUNK)
            while data:
                data = data[os.write(fifo, data):]
    except OSError:
        return
