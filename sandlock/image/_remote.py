"""What a registry reference names, by Docker's conventions: ``alpine`` is
``docker.io/library/alpine:latest`` (served by registry-1.docker.io); ``HOST[:PORT]/
REPO/NAME:TAG`` and ``...@sha256:HEX`` (a digest pin) name another registry's. The
first component is a registry when it holds a ``.`` or a ``:``, is ``localhost`` or a
bracketed IPv6 address, and more follow.

Names are checked by the distribution spec's grammar before anything is asked of a
registry (lowercase repository components of letters and digits, separated by one
``.``, ``_``, ``__`` or dashes; tags ``[A-Za-z0-9_][A-Za-z0-9._-]{0,127}``; a digest
exactly ``sha256:`` and 64 lowercase hex digits): ``../``, a newline or a ``%`` never
reaches a URL or the store's file names. The grammar is checked by character sets,
not regular expressions: ``re`` would cost each run of a pulled image ~4 ms to import.
"""

from __future__ import annotations

from .._record import record
from ._reference import ImageError

DOCKER_HUB = "docker.io"
_DOCKER_HUB_API = "registry-1.docker.io"
_MAX_NAME = 255  # the spec's bound on registry and repository together
_LOWER = frozenset("abcdefghijklmnopqrstuvwxyz0123456789")
_ALNUM = _LOWER | frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZ")
_TAG_CHARS = _ALNUM | frozenset("_.-")
_DIGITS = frozenset("0123456789")
_HEX = frozenset("0123456789abcdef")


def _is_component(text: str) -> bool:
    """``[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*``: a repository path component."""
    if not text or text[0] not in _LOWER or text[-1] not in _LOWER:
        return False
    separator = ""
    for char in text:
        if char in _LOWER:
            if separator not in ("", ".", "_", "__") and separator != "-" * len(separator):
                return False
            separator = ""
        elif char in "._-":
            separator += char
        else:
            return False
    return True


def _is_tag(text: str) -> bool:
    """``[A-Za-z0-9_][A-Za-z0-9._-]{0,127}``."""
    return 0 < len(text) <= 128 and text[0] in _ALNUM | {"_"} and _TAG_CHARS.issuperset(text)


def _is_digest(text: str) -> bool:
    return text.startswith("sha256:") and len(text) == 71 and _HEX.issuperset(text[7:])


def _is_domain(text: str) -> bool:
    """Labels of letters, digits and inner dashes, separated by dots."""
    return all(label and _ALNUM.issuperset(label.replace("-", "")) and label[0] != "-"
               and label[-1] != "-" for label in text.split("."))


def _is_port(text: str) -> bool:
    return 0 < len(text) <= 5 and _DIGITS.issuperset(text) and 0 < int(text) < 65536


@record
class Remote:
    registry: str  # as written: docker.io, registry.test:5000, [::1]:5000
    repository: str  # library/alpine, team/tool
    tag: str | None  # latest when neither a tag nor a digest is given
    digest: str | None  # a pin: sha256:HEX

    @property
    def api_host(self) -> str:
        """host[:port] the API is asked at (Docker Hub's is not docker.io)."""
        return _DOCKER_HUB_API if self.registry == DOCKER_HUB else self.registry

    @property
    def host(self) -> str:
        """The registry's host name or address, without port or brackets."""
        host, _ = split_host_port(self.api_host)
        return host

    @property
    def reference(self) -> str:
        """The manifest reference asked for: the digest if pinned, else the tag."""
        return self.digest or self.tag or "latest"

    @property
    def canonical(self) -> str:
        name = f"{self.registry}/{self.repository}"
        return name + (f":{self.tag}" if self.tag else "") + (f"@{self.digest}" if self.digest else "")

    @property
    def store_name(self) -> str:
        """Its directory's name in the store of pulled images: the canonical reference,
        ``/`` spelled ``%`` (which no reference holds); past a file name's length, the
        sha256 of that."""
        name = self.canonical.replace("/", "%")
        if len(name) <= 200:
            return name
        from ._source import hexdigest

        return "sha256-" + hexdigest(name.encode())

    @property
    def loopback(self) -> bool:
        """A registry on this machine by name (``localhost``, 127.0.0.0/8, ::1): the only
        one plain HTTP may reach, as Docker's default insecure registries."""
        return is_loopback_name(self.host)


def split_host_port(netloc: str) -> tuple[str, int | None]:
    if netloc.startswith("["):
        host, _, rest = netloc[1:].partition("]")
        return host, int(rest[1:]) if rest.startswith(":") and rest[1:] else None
    host, _, port = netloc.partition(":")
    return host, int(port) if port else None


def is_loopback_name(host: str) -> bool:
    import ipaddress  # (a pull's: not on the way of a run whose image is in the store)

    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def parse_remote(text: str) -> Remote:
    """The registry reference ``text``; ImageError saying what is malformed."""
    if not text or len(text) > 1024 or not text.isprintable() or text != text.strip():
        raise ImageError(f"{text!r}: not an image reference (empty, too long, or with "
                         "spaces or control characters)")
    rest, at, digest = text.partition("@")
    if at and not _is_digest(digest):
        raise ImageError(f"{text}: the digest after @ must be sha256: and 64 lowercase hex digits")
    name, tag = rest, None
    colon = rest.rfind(":")
    if colon > rest.rfind("/"):
        name, tag = rest[:colon], rest[colon + 1:]
        if not _is_tag(tag):
            raise ImageError(f"{text}: {tag!r} is not a tag ([A-Za-z0-9_][A-Za-z0-9._-], "
                             "at most 128)")
    first, slash, path = name.partition("/")
    if slash and ("." in first or ":" in first or first == "localhost" or first.startswith("[")):
        registry, repository = _registry(text, first), path
    else:
        registry, repository = DOCKER_HUB, name
    if registry in (DOCKER_HUB, "index.docker.io"):
        registry = DOCKER_HUB
        if "/" not in repository:
            repository = f"library/{repository}"
    components = repository.split("/")
    if not all(map(_is_component, components)):
        bad = next(c for c in components if not _is_component(c))
        raise ImageError(f"{text}: {bad!r} is not a repository name component (lowercase "
                         "letters and digits, separated by '.', '_', '__' or '-')")
    if len(registry) + 1 + len(repository) > _MAX_NAME:
        raise ImageError(f"{text}: the name is longer than {_MAX_NAME} characters")
    return Remote(registry, repository, tag if tag or at else "latest", digest or None)


def _registry(text: str, first: str) -> str:
    if first.startswith("["):
        import ipaddress

        address, _, port = first[1:].partition("]")
        try:
            ipaddress.IPv6Address(address)
        except ValueError:
            raise ImageError(f"{text}: {first!r} is not a registry address") from None
        if port and not (port.startswith(":") and _is_port(port[1:])):
            raise ImageError(f"{text}: {first!r} is not a registry address")
        return first
    host, _, port = first.partition(":")
    if not _is_domain(host) or (":" in first and not _is_port(port)):
        raise ImageError(f"{text}: {first!r} is not a registry host[:port]")
    return first.lower() if host.lower() in ("docker.io", "index.docker.io") else first
