"""What sandlock runs from: its own package, and the Python that runs it. Both are
read-only in the sandbox wherever a write grant covers them (autorun.protect), since
sandlock, its keeper, init and its proxy import from them while the command runs,
outside its confinement, and every later run of sandlock does."""

from __future__ import annotations

import os
import sys

from ._fspolicy import within

# sandlock's own package (its proxy and CA with it, in a regular install).
SANDLOCK_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Its proxy and CA packages: in a checkout, sandlock/proxy and sandlock/ca are links to
# ../proxy and ../ca, beside the package (the proxy's process holds the CA's key).
_OWN_LINKED = ("proxy", "ca")


def own_code() -> tuple[str, ...]:
    """sandlock's package and, where they lie outside it, its proxy and CA packages
    (real paths)."""
    package = os.path.realpath(SANDLOCK_PACKAGE)
    linked = (os.path.realpath(os.path.join(package, name)) for name in _OWN_LINKED)
    return (package, *(path for path in linked if not within(path, package)))


_SYSTEM_PREFIXES = ("/", "/usr", "/usr/local")


def own_environment() -> tuple[str, ...]:
    """The Python that runs sandlock, which every later run of it runs again (real
    paths, the outermost only): a venv whole (its scripts, the `sandlock` command among
    them; its site-packages with sandlock's dependencies, their .pth files that run at
    every start; its pyvenv.cfg, which names the interpreter), an interpreter installed
    in a prefix of its own whole (pyenv's, uv's), or else (the system's) its standard
    library, its binary and its site-packages; the user's site-packages where they are
    on its path."""
    paths = [sys.prefix] if sys.prefix != sys.base_prefix else []
    base = os.path.realpath(sys.base_prefix)
    paths += [base] if base not in _SYSTEM_PREFIXES else [os.path.dirname(os.__file__),
                                                          sys.executable]
    site = sys.modules.get("site")  # (not loaded under python -S: then no site-packages)
    if site is not None:
        paths += [path for path in site.getsitepackages() if os.path.isdir(path)]
        user = site.getusersitepackages() if site.ENABLE_USER_SITE else None
        if user in sys.path:
            paths.append(user)
    real = sorted(dict.fromkeys(map(os.path.realpath, paths)), key=len)
    return tuple(path for number, path in enumerate(real)  # (the outermost: one mount each)
                 if not any(within(path, outer) for outer in real[:number]))
