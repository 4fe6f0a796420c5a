"""Unpickling what comes out of a sandbox, without letting it run code in sandlock.

A pickle names callables (``find_class``) that loading then calls: a plain
``pickle.loads`` of bytes a confined process wrote is code execution in the caller,
outside every confinement (the function of a call may run untrusted code, which can
write anything to the result pipe). Here only values of plain types load: the
builtin scalars and containers (which pickle names no callable for), and the few
classes below, whose construction does nothing but build the value.
"""

from __future__ import annotations

import io
import pickle

_ALLOWED = {
    "builtins": {"set", "frozenset", "bytearray", "complex", "range", "slice"},
    "collections": {"OrderedDict", "deque", "Counter"},
    "datetime": {"date", "time", "datetime", "timedelta", "timezone"},
    "decimal": {"Decimal"},
    "fractions": {"Fraction"},
    "uuid": {"UUID"},
    "pathlib": {"PurePath", "PurePosixPath", "PosixPath", "Path"},
}


class RefusedValue(pickle.UnpicklingError):
    """The pickle names a class or function outside the allowed plain types."""


class _PlainUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> object:
        if name in _ALLOWED.get(module, ()):
            return super().find_class(module, name)
        raise RefusedValue(f"{module}.{name} is not a plain type that sandlock takes back from "
                           "a sandbox (return builtin values: numbers, strings, bytes, lists, "
                           "dicts, tuples, sets, datetimes ...)")


def loads(data: bytes) -> object:
    """The value pickled in ``data``, if it is made of plain types only; else
    RefusedValue (or another UnpicklingError for bytes that are no pickle)."""
    return _PlainUnpickler(io.BytesIO(data)).load()
