"""The trust stores a CA certificate is installed into, one step each: the system
store of each distribution family (``Layout``), NSS databases (certutil) and Java
keystores (keytool). A step knows how to make its change, undo it and record it;
``_install`` plans the steps and keeps the manifest.
"""

from __future__ import annotations

import glob
import os
import shlex
import shutil
import subprocess
from collections.abc import Callable, Mapping
from pathlib import Path

from .._record import record
from ._errors import CAError, NeedsPrivilege

TRUST_ROOT_VARIABLE = "SANDLOCK_CA_TRUST_ROOT"
NICKNAME = "sandlock-ca"  # NSS nickname, Java alias, system file stem
JAVA_STOREPASS = "changeit"  # the JDK's well-known default; cacerts holds no secret
# update-ca-certificates' Java hook copies new system CAs into this keystore under
# this alias, and never removes them: uninstall does.
DEBIAN_JAVA_KEYSTORE = "/etc/ssl/certs/java/cacerts"
DEBIAN_JAVA_ALIAS = f"debian:{NICKNAME}.pem"
_SBIN = "/usr/local/sbin:/usr/sbin:/sbin"


@record
class Layout:
    """Where a distribution family takes extra CAs, and the command that merges them."""

    name: str
    anchors: str
    filename: str
    update: tuple[str, ...]


# First match wins: the anchors directory exists (under the trust root, if any).
LAYOUTS = (
    Layout("fedora", "/etc/pki/ca-trust/source/anchors", f"{NICKNAME}.pem", ("update-ca-trust", "extract")),
    Layout("opensuse", "/etc/pki/trust/anchors", f"{NICKNAME}.pem", ("update-ca-certificates",)),
    Layout("arch", "/etc/ca-certificates/trust-source/anchors", f"{NICKNAME}.crt", ("update-ca-trust", "extract")),
    # Debian's tool only picks up files named *.crt.
    Layout("debian", "/usr/local/share/ca-certificates", f"{NICKNAME}.crt", ("update-ca-certificates",)),
)


@record
class Installation:
    """One thing install did: a file in the system anchors, an NSS database entry or
    a Java keystore entry. ``location`` is the file or database; ``alias`` the name
    of the entry in it (None for the system file)."""

    target: str
    location: str
    alias: str | None = None

    def describe(self) -> str:
        return f"{self.target}: {self.location}" + (f" (alias {self.alias})" if self.alias else "")


# --- steps ----------------------------------------------------------------------------


def _nothing_to_do() -> None:
    pass


def _no_side_effects(env: Mapping[str, str]) -> list[Installation]:
    return []


@record(frozen=False)
class Step:
    """One change: ``run`` makes it (replacing an earlier copy), ``undo`` reverses it,
    ``done`` records it; ``also`` finds side effects to record (Debian's Java hook)."""

    done: Installation
    run: Callable[[], None] = _nothing_to_do
    undo: Callable[[], None] = _nothing_to_do
    also: Callable[[Mapping[str, str]], list[Installation]] = _no_side_effects


def undo_step(entry: Installation, env: Mapping[str, str]) -> Step:
    if entry.target == "system":
        return _system_step(None, entry.location, env)
    if entry.target == "nss":
        return _nss_step(None, entry.location, _tool("certutil", _NSS_HINT, env))
    if entry.target == "java":
        return _java_step(None, entry.location, entry.alias or NICKNAME, env)
    raise CAError(f"the manifest names an unknown trust store {entry.target!r}")


# --- system ---------------------------------------------------------------------------


def plan_system(cert: Path, env: Mapping[str, str]) -> list[Step]:
    layout = _layout(env)
    return [_system_step(cert, str(under(env, layout.anchors) / layout.filename), env)]


def _system_step(cert: Path | None, location: str, env: Mapping[str, str]) -> Step:
    layout = _layout(env)
    path = Path(location)
    if path.parent != under(env, layout.anchors) or path.name != layout.filename:
        raise CAError(f"{location} is not where sandlock installs into the {layout.name} store")
    update = _update_command(layout, env, removing=cert is None)
    shown_update = shlex.join(update) if update else None
    if not os.access(path.parent, os.W_OK):
        action = f"install -m 644 {shlex.quote(str(cert))} {shlex.quote(location)}" if cert else \
            f"rm -f {shlex.quote(location)}"
        commands = [f"sudo {action}", *([f"sudo {shown_update}"] if shown_update else [])]
        what = "installing into" if cert else "removing from"
        raise NeedsPrivilege(f"{what} the system trust store needs root: run "
                             f"{' && '.join(commands)}", commands)

    def run() -> None:
        assert cert is not None
        _copy(cert, path)
        if update:
            _run(update)

    def undo() -> None:
        try:
            path.unlink()
        except FileNotFoundError:
            pass
        if update:
            _run(update)

    also = debian_java_copy if layout.name == "debian" else _no_side_effects
    return Step(Installation("system", location), run, undo, also)


def debian_java_copy(env: Mapping[str, str]) -> list[Installation]:
    """The copy Debian's Java hook made of the new system CA, if it made one."""
    keystore = under(env, DEBIAN_JAVA_KEYSTORE)
    keytool = shutil.which("keytool", path=_search_path(env))
    if keytool is None or not keystore.exists():
        return []
    if not _keystore_has(keytool, keystore, DEBIAN_JAVA_ALIAS):
        return []
    return [Installation("java", str(keystore), DEBIAN_JAVA_ALIAS)]


def _layout(env: Mapping[str, str]) -> Layout:
    for layout in LAYOUTS:
        if under(env, layout.anchors).is_dir():
            return layout
    known = ", ".join(layout.anchors for layout in LAYOUTS)
    raise CAError(f"no system trust store found that sandlock knows how to extend ({known})")


def known_layout(env: Mapping[str, str]) -> Layout | None:
    try:
        return _layout(env)
    except CAError:
        return None


def _update_command(layout: Layout, env: Mapping[str, str], removing: bool) -> list[str] | None:
    """The command that rebuilds the store; None under a trust root it cannot follow."""
    root = _root(env)
    if root is not None and layout.name != "debian":
        return None
    tool = shutil.which(layout.update[0], path=_search_path(env))
    if tool is None:
        raise CAError(f"{layout.update[0]} not found: cannot update the {layout.name} trust store")
    command = [tool, *layout.update[1:]]
    if layout.name == "debian":
        if removing:
            command.append("--fresh")  # otherwise a removed *.crt leaves its links behind
        if root is not None:
            command += [
                "--certsconf", f"{root}/etc/ca-certificates.conf",
                "--certsdir", f"{root}/usr/share/ca-certificates",
                "--localcertsdir", f"{root}{layout.anchors}",
                "--etccertsdir", f"{root}/etc/ssl/certs",
                "--hooksdir", f"{root}/etc/ca-certificates/update.d",
            ]
    return command


# --- NSS (Chromium, Firefox) ----------------------------------------------------------

_NSS_HINT = "install it: apt install libnss3-tools (Debian, Ubuntu) or dnf install nss-tools (Fedora)"
# Firefox profiles: native, snap and flatpak installs.
_FIREFOX_PROFILES = (".mozilla/firefox/*", "snap/firefox/common/.mozilla/firefox/*",
                     ".var/app/org.mozilla.firefox/.mozilla/firefox/*")


def plan_nss(cert: Path, env: Mapping[str, str]) -> list[Step]:
    certutil = _tool("certutil", _NSS_HINT, env)
    databases = nss_databases(env)
    if not databases:
        raise CAError("no NSS database found (~/.pki/nssdb, Firefox profiles): start "
                      "Chromium or Firefox once, or create one with certutil -N -d sql:$HOME/.pki/nssdb")
    return [_nss_step(cert, database, certutil) for database in databases]


def nss_databases(env: Mapping[str, str]) -> list[str]:
    """``sql:DIR`` (cert9.db) or ``dbm:DIR`` (legacy cert8.db) of every NSS database
    of the user's browsers."""
    home = env.get("HOME", "")
    if not os.path.isabs(home):
        return []
    directories = [os.path.join(home, ".pki", "nssdb")]
    for pattern in _FIREFOX_PROFILES:
        directories += sorted(glob.glob(os.path.join(glob.escape(home), pattern)))
    found = []
    for directory in directories:
        if os.path.exists(os.path.join(directory, "cert9.db")):
            found.append(f"sql:{directory}")
        elif os.path.exists(os.path.join(directory, "cert8.db")):
            found.append(f"dbm:{directory}")
    return found


def _nss_step(cert: Path | None, database: str, certutil: str) -> Step:
    def undo() -> None:
        listed = subprocess.run([certutil, "-L", "-d", database, "-n", NICKNAME],
                                capture_output=True, check=False)
        if listed.returncode == 0:
            _run([certutil, "-D", "-d", database, "-n", NICKNAME])

    def run() -> None:
        undo()
        # "C,,": a CA trusted to issue server certificates.
        _run([certutil, "-A", "-d", database, "-t", "C,,", "-n", NICKNAME, "-i", str(cert)])

    return Step(Installation("nss", database, NICKNAME), run, undo)


# --- Java -----------------------------------------------------------------------------

_JAVA_HINT = "install a JDK, or set JAVA_HOME"


def plan_java(cert: Path, env: Mapping[str, str]) -> list[Step]:
    keytool = _keytool(env)
    keystore = java_cacerts(keytool, env)
    return [_java_step(cert, str(keystore), NICKNAME, env)]


def java_cacerts(keytool: str, env: Mapping[str, str]) -> Path:
    """The cacerts of the JRE ``keytool`` belongs to (links resolved: Debian's is
    /etc/ssl/certs/java/cacerts), under the trust root if there is one."""
    home = Path(os.path.realpath(keytool)).parent.parent
    for candidate in (home / "lib" / "security" / "cacerts", home / "jre" / "lib" / "security" / "cacerts"):
        if candidate.exists():
            keystore = under(env, os.path.realpath(candidate))
            if not keystore.exists():
                raise CAError(f"{keystore}: no such keystore")
            return keystore
    raise CAError(f"no cacerts keystore found for {keytool}")


def _java_step(cert: Path | None, location: str, alias: str, env: Mapping[str, str]) -> Step:
    keytool = _keytool(env)
    store = ["-keystore", location, "-storepass", JAVA_STOREPASS]
    add = [keytool, "-importcert", "-noprompt", "-alias", alias, "-file", str(cert), *store]
    delete = [keytool, "-delete", "-alias", alias, *store]
    if not os.access(location, os.W_OK):
        if cert is None and not _keystore_has(keytool, Path(location), alias):
            return Step(Installation("java", location, alias))  # already gone
        command = f"sudo {shlex.join(add if cert else delete)}"
        what = "installing into" if cert else "removing from"
        raise NeedsPrivilege(f"{what} {location} needs root: run {command}", [command])

    def undo() -> None:
        if _keystore_has(keytool, Path(location), alias):
            _run(delete)

    def run() -> None:
        undo()
        _run(add)

    return Step(Installation("java", location, alias), run, undo)


def _keytool(env: Mapping[str, str]) -> str:
    java_home = env.get("JAVA_HOME", "")
    if java_home and os.access(os.path.join(java_home, "bin", "keytool"), os.X_OK):
        return os.path.join(java_home, "bin", "keytool")
    return _tool("keytool", _JAVA_HINT, env)


def _keystore_has(keytool: str, keystore: Path, alias: str) -> bool:
    listed = subprocess.run([keytool, "-list", "-keystore", str(keystore), "-storepass",
                             JAVA_STOREPASS, "-alias", alias], capture_output=True, check=False)
    return listed.returncode == 0


# --- helpers --------------------------------------------------------------------------


def _root(env: Mapping[str, str]) -> str | None:
    root = env.get(TRUST_ROOT_VARIABLE, "")
    if not root:
        return None
    if not os.path.isabs(root):
        raise CAError(f"{TRUST_ROOT_VARIABLE} must be an absolute path, not {root!r}")
    return root.rstrip("/")


def under(env: Mapping[str, str], path: str) -> Path:
    root = _root(env)
    return Path(f"{root}{path}" if root else path)


def _search_path(env: Mapping[str, str]) -> str:
    return f"{env.get('PATH', os.defpath)}:{_SBIN}"


def _tool(name: str, hint: str, env: Mapping[str, str]) -> str:
    found = shutil.which(name, path=_search_path(env))
    if found is None:
        raise CAError(f"{name} not found: {hint}")
    return found


def _copy(source: Path, destination: Path) -> None:
    from .._hostfile import write_file

    try:
        write_file(destination, source.read_bytes(), 0o644, exact=True)
    except OSError as exc:
        raise CAError(f"cannot install {source} as {destination}: {exc.strerror}") from None


def _run(command: list[str]) -> None:
    result = subprocess.run(command, capture_output=True, text=True, check=False,
                            stdin=subprocess.DEVNULL)
    if result.returncode != 0:
        output = (result.stderr.strip() or result.stdout.strip()).splitlines()
        detail = output[-1] if output else f"exit status {result.returncode}"
        raise CAError(f"{shlex.join(command)} failed: {detail}")
