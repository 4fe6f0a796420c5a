"""The CAs a client's own configuration names, found where the client looks for it.

The variables of ``_trust`` reach most clients, but some read a CA setting of their own
that beats them (npm's ``cafile`` beats ``NODE_EXTRA_CA_CERTS``, curl's ``.curlrc``
``cacert`` beats ``CURL_CA_BUNDLE``), and the others' variables replace a CA the user
configured (pip's ``cert``, git's ``http.sslCAInfo``, cargo's ``http.cainfo``): a
private registry that CA vouches for, passed through untouched, would then fail. So
before an inspecting run sandlock reads, as the user, where each client finds its
CA setting (the command's environment, its directory, the user's and the system's
files), and ``_trust`` writes the client a bundle holding those CAs too
(docs/ca.md, "Clients with a CA setting of their own").

These files may hold secrets (``~/.npmrc`` holds tokens, and every sandbox is denied
it) or be the command's (a project's ``.npmrc``): nothing of them leaves this module but
the certificates of the files they name, never their own text. Every read is bounded
and never blocks (``read_bounded``: regular files only, 1 MiB).
"""

from __future__ import annotations

import os

from ..autorun import read_bounded
from ._pem import certificates, new_certificates, pem
from ._trust import CLIENTS

TYPE_CHECKING = False  # typing costs ~5 ms: an inspecting run's parent calls this
if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping

_MAX_INCLUDES = 10  # git's own bound on nested includes
_MAX_CONFIG_COUNT = 1000  # GIT_CONFIG_COUNT's entries looked at
_MAX_CAPATH_FILES = 1000  # a curl capath directory holds hash links: /etc/ssl/certs has ~300

Source = str | bytes  # a path, or certificates written into the configuration itself


def client_certificates(env: Mapping[str, str], cwd: str, base_bundle: str | None) -> dict[str, bytes]:
    """For each client whose own configuration names a CA, in PEM, the certificates it
    names that ``base_bundle`` (the run's bundle's base) lacks; b"" when none."""
    base = _identity(base_bundle) if base_bundle else None
    known: set[bytes] | None = None  # the base's, read once a client has CAs of its own
    found = {}
    for client, sources in configured_sources(env, cwd).items():
        # (the base itself, named again: PIP_CERT=/etc/ssl/certs/ca-certificates.crt)
        bodies = read_sources([s for s in sources if isinstance(s, bytes) or _identity(s) != base])
        if bodies and known is None:
            known = set(certificates((read_bounded(base_bundle) if base_bundle else None) or b""))
        found[client] = pem(new_certificates(bodies, known)) if bodies else b""
    return found


def configured_sources(env: Mapping[str, str], cwd: str) -> dict[str, list[Source]]:
    """For each client whose own configuration names a CA, what it names (paths
    resolved as the client resolves them), for a command run in ``cwd`` with ``env``."""
    home = env.get("HOME") or os.path.expanduser("~")
    finders = {"npm": _npm, "pip": _pip, "git": _git, "curl": _curl, "cargo": _cargo}
    found = {}
    for client in CLIENTS:
        finder = finders[client]
        try:
            sources = list(finder(env, cwd, home))
        except (OSError, ValueError, UnicodeError):  # a configuration the client cannot
            continue  # read either: it fails on its own, as it would outside
        if sources:
            found[client] = sources
    return found


def read_sources(sources: list[Source]) -> list[bytes]:
    """The certificates (base64 bodies) of each source: a file, every file of a
    directory (curl's ``capath``), or text."""
    found: list[bytes] = []
    for source in sources:
        if isinstance(source, bytes):
            found += certificates(source)
        elif os.path.isdir(source):
            try:
                names = sorted(os.listdir(source))[:_MAX_CAPATH_FILES]
            except OSError:
                names = []
            for name in names:
                found += certificates(read_bounded(os.path.join(source, name)) or b"")
        else:
            found += certificates(read_bounded(source) or b"")
    return found


# --- npm (and pnpm, which reads the same files and variables) ---------------------------


def _npm(env: Mapping[str, str], cwd: str, home: str) -> Iterator[Source]:
    """``cafile`` and ``ca`` from npm's variables and npmrc files: builtin, global, user
    and project (npm's precedence is the other way round, but every CA found goes into
    the bundle, which then beats them all)."""
    for name, value in env.items():
        if name.lower() == "npm_config_cafile" and value:
            yield _npm_path(_npm_expand(value, env), cwd, home)
    for path in _npmrc_files(env, cwd, home):
        text = (read_bounded(path) or b"").decode("utf-8", "replace")
        for key, value in _npmrc_entries(text):
            if key == "cafile" and value:
                yield _npm_path(_npm_expand(value, env), cwd, home)
            elif key in ("ca", "ca[]"):
                yield value.replace("\\n", "\n").encode()


def _npmrc_files(env: Mapping[str, str], cwd: str, home: str) -> list[str]:
    setting = {name.lower(): value for name, value in env.items()
               if name.lower().startswith("npm_config_") and value}
    files = []
    npm = _which("npm", env)
    if npm and os.path.basename(os.path.dirname(npm)) == "bin":  # <npm>/bin/npm-cli.js
        files.append(os.path.join(os.path.dirname(os.path.dirname(npm)), "npmrc"))  # builtin
    prefix = setting.get("npm_config_prefix") or env.get("PREFIX")
    if not prefix and (node := _which("node", env)):
        prefix = os.path.dirname(os.path.dirname(node))  # npm's default: node's prefix
    files.append(setting.get("npm_config_globalconfig") or os.path.join(prefix or "/usr", "etc", "npmrc"))
    user = setting.get("npm_config_userconfig") or os.path.join(home, ".npmrc")
    files.append(_npm_path(user, cwd, home))
    projects = [os.path.join(directory, ".npmrc") for directory in _ancestors(cwd)
                if any(os.path.exists(os.path.join(directory, marker))
                       for marker in ("package.json", "node_modules"))]
    files += projects or [os.path.join(cwd, ".npmrc")]  # (workspace roots included)
    return list(dict.fromkeys(files))


def _npmrc_entries(text: str) -> Iterator[tuple[str, str]]:
    """(key, value) of an npmrc's top level, as npm's ini parser reads them: quoted
    values unquoted, a ``;`` or ``#`` ending an unquoted one; sections are not npm's."""
    for line in text.splitlines():
        line = line.strip()
        if not line or line[0] in ";#":
            continue
        if line.startswith("["):
            return
        key, equals, value = line.partition("=")
        yield key.strip().lower(), _ini_value(value.strip()) if equals else ""


def _ini_value(value: str) -> str:
    if len(value) > 1 and value[0] == value[-1] and value[0] in "\"'":
        return value[1:-1]
    out, escaped = [], False
    for c in value:
        if escaped:
            out.append(c if c in ";#\\" else "\\" + c)
            escaped = False
        elif c == "\\":
            escaped = True
        elif c in ";#":
            break
        else:
            out.append(c)
    return "".join(out).strip()


def _npm_expand(value: str, env: Mapping[str, str]) -> str:
    """npm's ``${NAME}`` (left as written when unset) and ``${NAME?}`` (empty when unset)."""
    out, rest = [], value
    while (start := rest.find("${")) >= 0 and (end := rest.find("}", start)) > 0:
        name = rest[start + 2:end]
        optional = name.endswith("?")
        name = name.removesuffix("?")
        out.append(rest[:start])
        out.append(env.get(name, "" if optional else rest[start:end + 1]))
        rest = rest[end + 1:]
    return "".join(out) + rest


def _npm_path(value: str, cwd: str, home: str) -> str:
    if value.startswith("~/"):
        return os.path.join(home, value[2:])
    return os.path.join(cwd, value)  # (an absolute value stays itself)


# --- pip -------------------------------------------------------------------------------


def _pip(env: Mapping[str, str], cwd: str, home: str) -> Iterator[Source]:
    """``cert`` from PIP_CERT and every pip configuration file, in any section; and
    REQUESTS_CA_BUNDLE, which the run's replaces (requests reads it: pip, poetry...)."""
    for name in ("PIP_CERT", "REQUESTS_CA_BUNDLE"):
        if env.get(name):
            yield _user_path(env[name], cwd, home)
    files = []
    if env.get("PIP_CONFIG_FILE") != os.devnull:
        dirs = (env.get("XDG_CONFIG_DIRS") or "/etc/xdg").split(":")
        files += [os.path.join(d, "pip", "pip.conf") for d in dirs if d] + ["/etc/pip.conf"]
        config_home = env.get("XDG_CONFIG_HOME") or os.path.join(home, ".config")
        files += [os.path.join(home, ".pip", "pip.conf"), os.path.join(config_home, "pip", "pip.conf")]
        if env.get("VIRTUAL_ENV"):
            files.append(os.path.join(env["VIRTUAL_ENV"], "pip.conf"))
        if env.get("PIP_CONFIG_FILE"):
            files.append(_user_path(env["PIP_CONFIG_FILE"], cwd, home))
    for path in dict.fromkeys(files):
        text = (read_bounded(path) or b"").decode("utf-8", "replace")
        for line in text.splitlines():
            cut = min((at for at in (line.find("="), line.find(":")) if at >= 0), default=-1)
            key, value = line[:cut].strip().lower(), line[cut + 1:].strip()
            if cut > 0 and key == "cert" and value:  # (configparser: "=" or ":")
                yield _user_path(value, cwd, home)


def _user_path(value: str, cwd: str, home: str) -> str:
    """``~`` expanded (pip, git), relative to the command's directory."""
    if value == "~" or value.startswith("~/"):
        value = home + value[1:]
    return os.path.join(cwd, value)


# --- git -------------------------------------------------------------------------------


def _git(env: Mapping[str, str], cwd: str, home: str) -> Iterator[Source]:
    """``http.sslCAInfo`` and ``http.<url>.sslCAInfo`` from GIT_SSL_CAINFO, the system,
    global and repository configs (with what they include) and GIT_CONFIG_COUNT."""
    if env.get("GIT_SSL_CAINFO"):
        yield _user_path(env["GIT_SSL_CAINFO"], cwd, home)
    files = []
    if not env.get("GIT_CONFIG_NOSYSTEM"):
        files.append(env.get("GIT_CONFIG_SYSTEM") or "/etc/gitconfig")
    if env.get("GIT_CONFIG_GLOBAL"):
        files.append(env["GIT_CONFIG_GLOBAL"])
    else:
        config_home = env.get("XDG_CONFIG_HOME") or os.path.join(home, ".config")
        files += [os.path.join(config_home, "git", "config"), os.path.join(home, ".gitconfig")]
    git_dir = env.get("GIT_DIR") or _git_dir(cwd)
    if git_dir:
        files.append(os.path.join(cwd, git_dir, "config"))
    for path in dict.fromkeys(files):
        yield from _git_config(_user_path(path, cwd, home), cwd, home, 0)
    count = env.get("GIT_CONFIG_COUNT", "")
    for index in range(min(int(count), _MAX_CONFIG_COUNT) if count.isdigit() else 0):
        if _is_ca_key(env.get(f"GIT_CONFIG_KEY_{index}", "")) and env.get(f"GIT_CONFIG_VALUE_{index}"):
            yield _user_path(env[f"GIT_CONFIG_VALUE_{index}"], cwd, home)


def _git_config(path: str, cwd: str, home: str, depth: int) -> Iterator[Source]:
    data = read_bounded(path)
    lowered = (data or b"").lower()
    if depth > _MAX_INCLUDES or b"sslcainfo" not in lowered and b"include" not in lowered:
        return  # (most configs: not even parsed)
    from ..autorun import parse_git_config

    parsed = parse_git_config(data.decode("utf-8", "surrogateescape"))
    for entry in parsed.entries:
        if entry.section == "http" and entry.name == "sslcainfo" and entry.value:
            yield _user_path(entry.value, cwd, home)
    for included in parsed.includes():  # (whatever their condition: a CA the user trusts)
        yield from _git_config(_user_path(included, os.path.dirname(path), home), cwd, home, depth + 1)


def _is_ca_key(key: str) -> bool:
    section, _, rest = key.partition(".")
    return section.lower() == "http" and rest.rpartition(".")[2].lower() == "sslcainfo"


def _git_dir(cwd: str) -> str | None:
    """The git directory of the repository holding ``cwd`` (a ``.git`` directory, or
    the one a ``.git`` file names; the common directory of a linked worktree)."""
    for directory in _ancestors(cwd):
        dot_git = os.path.join(directory, ".git")
        if os.path.isdir(dot_git):
            return dot_git
        data = read_bounded(dot_git, 4096)
        if data and data.startswith(b"gitdir:"):
            git_dir = os.path.join(directory, data[7:].strip().decode("utf-8", "surrogateescape"))
            common = (read_bounded(os.path.join(git_dir, "commondir"), 4096) or b"").strip()
            return os.path.join(git_dir, common.decode("utf-8", "surrogateescape")) if common else git_dir
    return None


# --- curl ------------------------------------------------------------------------------


def _curl(env: Mapping[str, str], cwd: str, home: str) -> Iterator[Source]:
    """``cacert`` and ``capath`` of the .curlrc curl reads: the first of $CURL_HOME,
    $XDG_CONFIG_HOME and $HOME that holds one."""
    for directory in (env.get("CURL_HOME"), env.get("XDG_CONFIG_HOME"), home):
        data = read_bounded(os.path.join(directory, ".curlrc")) if directory else None
        if data is not None:
            for option, value in _curlrc_options(data.decode("utf-8", "replace")):
                if option in ("cacert", "capath") and value:
                    yield os.path.join(cwd, value)
            return


def _curlrc_options(text: str) -> Iterator[tuple[str, str]]:
    """(option, value) of a curl config file: ``option = value``, ``option: value``,
    ``--option value``; a value in double quotes has backslash escapes."""
    for line in text.splitlines():
        line = line.strip()
        if not line or line[0] == "#":
            continue
        option, value = line.lstrip("-"), ""
        for at, c in enumerate(option):
            if c in " \t=:":
                option, value = option[:at], option[at:].lstrip(" \t=:")
                break
        if value.startswith('"'):
            value = _curl_unquote(value[1:])
        else:
            value = value.split()[0] if value.split() else ""
        yield option.lower(), value


def _curl_unquote(text: str) -> str:
    out, escaped = [], False
    for c in text:
        if escaped:
            out.append({"t": "\t", "n": "\n", "r": "\r", "v": "\v"}.get(c, c))
            escaped = False
        elif c == "\\":
            escaped = True
        elif c == '"':
            break
        else:
            out.append(c)
    return "".join(out)


# --- cargo -----------------------------------------------------------------------------


def _cargo(env: Mapping[str, str], cwd: str, home: str) -> Iterator[Source]:
    """``http.cainfo`` from CARGO_HTTP_CAINFO and the config files of the directories
    above ``cwd`` and of $CARGO_HOME; a file's relative path is relative to the
    directory holding its ``.cargo``."""
    if env.get("CARGO_HTTP_CAINFO"):
        yield os.path.join(cwd, env["CARGO_HTTP_CAINFO"])
    cargo_home = env.get("CARGO_HOME") or os.path.join(home, ".cargo")
    homes = [os.path.join(directory, ".cargo") for directory in _ancestors(cwd)]
    for directory in dict.fromkeys([*homes, os.path.join(cwd, cargo_home)]):
        for name in ("config.toml", "config"):
            data = read_bounded(os.path.join(directory, name))
            if data and b"cainfo" in data:  # tomllib (~6 ms) only for a file that may say it
                import tomllib

                try:
                    http = tomllib.loads(data.decode("utf-8", "replace")).get("http")
                except tomllib.TOMLDecodeError:  # (cargo refuses it too)
                    continue
                cainfo = http.get("cainfo") if isinstance(http, dict) else None
                if isinstance(cainfo, str) and cainfo:
                    yield os.path.join(os.path.dirname(directory), cainfo)


# --- helpers ---------------------------------------------------------------------------


def _identity(path: str) -> tuple[int, int] | None:
    try:
        info = os.stat(path)
    except OSError:
        return None
    return info.st_dev, info.st_ino


def _ancestors(directory: str) -> Iterator[str]:
    directory = os.path.abspath(directory)
    while True:
        yield directory
        parent = os.path.dirname(directory)
        if parent == directory:
            return
        directory = parent


def _which(program: str, env: Mapping[str, str]) -> str | None:
    """The real path of ``program`` on the command's PATH."""
    for directory in env.get("PATH", "").split(":"):
        candidate = os.path.join(directory or ".", program)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return os.path.realpath(candidate)
    return None
