"""The answer to the enclosing supervisor's one question about a thread: is it one of
mine? Given by a nested sandbox's resident (``sb.sandbox``) and by the keeper of a
``sandlock run`` inside a sandbox, when their sandbox may make sockets: for its network
rules of its own, and for the Landlock rules its socket files are bound under (see
net._nests for who asks, and why the answer cannot be forged).
"""

from __future__ import annotations

import _signal
import errno
import os
import socket


def answer(probe: socket.socket) -> bool:
    """One question (``?N``, with the thread's pidfd), answered ``N ERRNO``: the errno of
    a null signal to the thread, which Landlock's signal scope refuses (EPERM) to a
    thread outside the answerer's domain. False once the asker has hung up."""
    try:
        question, fds, _flags, _address = socket.recv_fds(probe, 32, 1)
    except (InterruptedError, BlockingIOError):
        return True
    except OSError:
        return False
    if not question:
        return False
    error = errno.EBADF
    for pidfd in fds:
        try:
            _signal.pidfd_send_signal(pidfd, 0)
            error = 0
        except OSError as exc:
            error = exc.errno or errno.EPERM
        finally:
            os.close(pidfd)
    try:
        probe.send(question[1:] + b" %d" % error)
    except OSError:
        return False
    return True
