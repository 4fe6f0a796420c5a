"""Public names loaded from private modules on first use (PEP 562), for packages whose
``__init__`` must stay cheap to import: ``sandlock`` (the proxy process imports
``sandlock.proxy`` and ``sandlock.ca`` without the sandbox) and ``sandlock.ca``
(cryptography costs ~40 ms)."""

from __future__ import annotations

import sys

TYPE_CHECKING = False  # typing costs ~5 ms to import: not on the CLI's start-up path
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from typing import Any


def lazy_exports(package: str, exports: Mapping[str, str], namespace: dict,
                 public: Sequence[str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package``: name -> ``exports[name]`` (a
    module of the package; ``module:attribute`` when the package exports it under
    another name; ``module:`` for the module itself), imported once, then kept in
    ``namespace`` (its globals)."""

    by_module: dict[str, list[tuple[str, str]]] = {}
    for exported, where in exports.items():
        module_name, colon, attribute = where.partition(":")
        # (name, attribute): "" for the module itself
        by_module.setdefault(module_name, []).append((exported, attribute if colon else exported))

    def __getattr__(name: str) -> Any:
        where = exports.get(name)
        if where is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module_name = where.partition(":")[0]
        # The import statement's own machinery: importlib (with warnings) costs ~0.5 ms
        # of start-up to import, and -X importtime does not see its imports.
        __import__(f"{package}.{module_name}")
        module = sys.modules[f"{package}.{module_name}"]
        # Every name of that module at once: `from pkg import a, b, c` then finds b and
        # c as plain attributes, without a call here for each. Only those it holds
        # already: a subpackage's own lazy names would import their modules (`from
        # sandlock import Sandbox` must not load the pipelines beside it).
        wanted = dict(by_module[module_name])
        namespace[name] = getattr(module, wanted[name]) if wanted[name] else module
        for exported, attribute in wanted.items():
            if not attribute:
                namespace[exported] = module
            elif attribute in vars(module):
                namespace[exported] = getattr(module, attribute)
        return namespace[name]

    def __dir__() -> list[str]:
        return sorted({*namespace, *public})

    return __getattr__, __dir__
