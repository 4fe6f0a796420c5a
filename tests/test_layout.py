"""The tree is the architecture (docs/architecture.md): one subpackage per concern,
layered without cycles, each used by the others only through its ``__init__``, no
module past ~400 lines, and no package import that costs anything before it is used.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SANDLOCK = ROOT / "sandlock"
# Each may import only those before it (the base modules _auditlog, _errors, _grammar, _hostfile, _latch,
# _lazy and _record are below them all). proxy/ and ca/ install as sandlock.proxy and sandlock.ca; those two,
# shellpolicy and ray (the optional Ray pool, on top of the API: nothing imports it) are public, the others
# internal.
LAYERS = ("kernel", "cow", "image", "shellpolicy", "autorun", "confinement", "files", "determinism", "ca", "proxy",
          "netrules", "dns", "netcall", "net", "limits", "policy", "policyfiles", "registry", "runtime", "process", "api",
          "mcp", "cli", "ray")
INTERNAL = ("kernel", "cow", "image", "autorun", "netrules", "dns", "netcall", "net", "confinement", "files",
            "determinism", "limits", "policy", "policyfiles", "registry", "runtime", "process", "api", "mcp", "cli")
MAX_LINES = 400


def package_dir(package: str) -> Path:
    return ROOT / package if package in ("ca", "proxy") else SANDLOCK / package


def modules() -> list[tuple[str, Path]]:
    """(package, file) for every module of sandlock; package '' for the base modules."""
    found = [("", path) for path in SANDLOCK.glob("*.py")]
    for package in LAYERS:
        found += [(package, path) for path in sorted(package_dir(package).glob("*.py"))]
    return found


def runtime_imports(path: Path, package: str) -> list[tuple[int, str]]:
    """(line, absolute module) of every import that runs, wherever it is in the file
    (functions included); imports under ``if TYPE_CHECKING:`` never run."""
    tree = ast.parse(path.read_text())
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            skipped |= {id(child) for stmt in node.body for child in ast.walk(stmt)}
    here = ["sandlock", package] if package else ["sandlock"]
    found = []
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = here[: len(here) - node.level + 1]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            found.append((node.lineno, target))
            # the names too: `from .. import net`, `from ..net import _spec`
            found += [(node.lineno, f"{target}.{alias.name}") for alias in node.names]
        elif isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
    return [(line, name) for line, name in found if name.startswith("sandlock.")]


def test_every_module_belongs_to_a_layer():
    stray = [p.name for p in SANDLOCK.glob("*.py") if p.name not in
             ("__init__.py", "__main__.py", "_auditlog.py", "_errors.py", "_grammar.py", "_hostfile.py", "_latch.py",
              "_lazy.py", "_record.py")]
    assert stray == [], "a module at the top of sandlock/ belongs in a subpackage"
    subpackages = {p.name for p in SANDLOCK.iterdir() if (p / "__init__.py").exists()}
    assert subpackages == set(LAYERS)


@pytest.mark.parametrize("package", LAYERS)
def test_subpackages_import_only_the_layers_below(package):
    allowed = set(LAYERS[: LAYERS.index(package)])
    wrong = []
    for owner, path in modules():
        if owner != package:
            continue
        for line, name in runtime_imports(path, package):
            target = name.split(".")[1]
            if target in LAYERS and target != package and target not in allowed:
                wrong.append(f"{path.relative_to(ROOT)}:{line}: imports {name}")
    assert wrong == []


def test_the_base_modules_import_no_subpackage():
    for owner, path in modules():
        if owner == "" and path.name != "__main__.py":  # `python -m sandlock` is the CLI
            names = [name for _, name in runtime_imports(path, "")]
            assert all(name.split(".")[1] not in LAYERS for name in names), path


def test_internal_packages_are_used_through_their_init():
    """Another package never reaches into an internal package's private modules."""
    wrong = []
    for owner, path in modules():
        for line, name in runtime_imports(path, owner):
            parts = name.split(".")
            if len(parts) > 2 and parts[1] in INTERNAL and parts[1] != owner and parts[2].startswith("_"):
                wrong.append(f"{path.relative_to(ROOT)}:{line}: {name}")
    assert wrong == []


@pytest.mark.parametrize("package", INTERNAL)
def test_internal_packages_say_so(package):
    doc = ast.get_docstring(ast.parse((SANDLOCK / package / "__init__.py").read_text()))
    assert doc and "Internal to sandlock (not public API)" in doc


def test_no_module_is_over_the_size_limit():
    long = {str(path.relative_to(ROOT)): n for _, path in modules()
            if (n := len(path.read_text().splitlines())) > MAX_LINES}
    assert long == {}, "split the module that has grown a second responsibility"


def test_exports_resolve():
    """Every name an __init__ exports exists where it says (and the public API is as it was)."""
    code = """
import importlib, sandlock
for package in ("sandlock", *(f"sandlock.{p}" for p in %r)):
    module = importlib.import_module(package)
    for name in module.__all__:
        getattr(module, name)
print(sorted(sandlock.__all__))
""" % (LAYERS,)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == str(sorted([
        "ByteSize", "CallError", "CallResult", "Change", "Checkpoint", "Context", "Event", "ExitReason", "ExitStatus",
        "Gather", "NamedStage", "Pipeline", "PipelineResult", "Policy", "PolicyError", "Process", "Protection", "Result",
        "Sandbox", "SandboxedProcess", "SandlockError", "SetupError", "Stage", "StdioMode", "SyscallEvent",
        "TimeoutExpired", "confine", "inputs",
        # upstream Sandlock's value types for Policy fields (docs/api.md)
        "BranchAction", "FsIsolation", "NotifAction", "NotifPolicy", "PathRule"]))


def test_importing_a_package_imports_none_of_its_modules():
    code = """
import sys, sandlock
for package in %r:
    __import__(f"sandlock.{package}")
print(sorted(m for m in sys.modules if m.startswith("sandlock.") and m.count(".") > 1))
""" % (INTERNAL,)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


def test_every_subpackage_is_installed():
    """A regular install ships what pyproject's package list names: a subpackage
    left out works in an editable install and fails in a real one."""
    import tomllib

    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    assert {f"sandlock.{package}" for package in LAYERS} <= listed
