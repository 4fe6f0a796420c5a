"""Public names loaded from private modules on first use (PEP 562), for packages whose
``__init__`` must stay cheap to import: ``sandlock`` (the proxy process imports
``sandlock.proxy`` and ``sandlock.ca`` without the sandbox) and ``sandlock.ca``
(cryptography costs ~40 ms)."""

from __future__ import annotations

import importlib

TYPE_CHECKING = False  # typing costs ~5 ms to import: not on the CLI's start-up path
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from typing import Any


def lazy_exports(package: str, exports: Mapping[str, str], namespace: dict,
                 public: Sequence[str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package``: name -> ``exports[name]`` (a
    module of the package), imported once, then kept in ``namespace`` (its globals)."""

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{module}"), name)
        namespace[name] = value  # the next access is a plain lookup
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *public})

    return __getattr__, __dir__
