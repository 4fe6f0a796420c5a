"""Request paths as the HTTP rules see them: one canonical form, for rules and requests
alike, and every reading a server could make of it. Pure: no I/O.

The canonical form (``canonical``): percent-escapes of printable ASCII are decoded
(``%61`` is ``a``, ``%2e`` is ``.``, ``%21`` is ``!``) except for the characters that
change how a path is read (``% / \\ ? # ; *`` and space), whose escapes are kept with
upper-case hex; non-ASCII characters, raw or escaped, are upper-case escapes of their
UTF-8 bytes (``é`` and ``%c3%a9`` are both ``%C3%A9``); dot-segments are resolved and
repeated slashes collapsed. Two spellings a server takes for the same path have the
same canonical form, so a rule written one way matches a request sent the other.

Deny when in doubt: a path no server reads one way only is refused (``UnclearPath``,
whose message is the reason the proxy gives): a malformed escape, a NUL, a ``#``, a
``..`` above the root, overlong UTF-8 (``%C0%AE``, a ``.`` to lax decoders), and an
escape hidden under ``%25`` that a server decoding twice would make a ``.``, ``/``,
``\\``, ``;``, NUL or overlong UTF-8 (``%252e``, ``%25%32%65``).
"""

from __future__ import annotations

_HEX = frozenset("0123456789abcdefABCDEF")
# Printable ASCII that is read the same whether sent raw or escaped: decoded.
_STRUCTURAL = frozenset("%/\\?#;* ")
_PRINTABLE = frozenset(chr(code) for code in range(0x21, 0x7F))  # ASCII, space excluded
_DECODED = _PRINTABLE - _STRUCTURAL
# Upper-case escapes that start overlong UTF-8: C0 and C1 lead bytes, E0 followed by
# 80-9F, F0 followed by 80-8F (each a shorter character, '.' and '/' among them).
_OVERLONG = ("%C0", "%C1", "%E0%8", "%E0%9", "%F0%8")
# Escapes that, revealed by one more decoding, change the path's structure.
_HIDDEN = ("%2E", "%2F", "%5C", "%3B", "%00", *_OVERLONG)
_MAX_DECODINGS = 4  # a path still hiding escapes after that many decodings: in doubt


class UnclearPath(ValueError):
    """A request path that servers could read in different ways: denied. The message
    says why (it becomes the X-Sandlock-Denied reason)."""


def canonical(target: str) -> str:
    """The canonical path of a request target (its query dropped); UnclearPath if it
    has none."""
    if "#" in target:
        raise UnclearPath("malformed path: '#' in the request target")
    path = target.split("?", 1)[0]
    if not path.startswith("/"):
        raise UnclearPath("malformed path: not an absolute path")
    if "%" in path or " " in path or not (path.isascii() and path.isprintable()):
        path = _decoded(path)
        if any(start in path for start in _OVERLONG):
            raise UnclearPath("unclear path: overlong UTF-8 (%C0%AE and the like)")
        if "%25" in path and _hides_escapes(path):
            raise UnclearPath("unclear path: an escape under %25 that decoding twice makes "
                              "'.', '/', '\\', ';', NUL or overlong UTF-8 (%252e and the like)")
    return _resolved(path)


def normalise_path(target: str) -> str | None:
    """The canonical path of a request target, or None when it is refused."""
    try:
        return canonical(target)
    except UnclearPath:
        return None


def readings(target: str) -> tuple[str, ...]:
    """Every path a server could take ``target`` for: the canonical path; with encoded
    or backslash separators taken as ``/``; with ``;params`` cut from each segment (as
    Tomcat and Jetty do: ``/x/..;/y`` is ``/y`` to them). UnclearPath: refused."""
    normal = canonical(target)
    found = [normal]
    if "%2F" in normal or "%5C" in normal or "\\" in normal:
        found.append(normal.replace("%2F", "/").replace("%5C", "/").replace("\\", "/"))
    if ";" in normal or "%3B" in normal:
        found += ["/".join(segment.split(";", 1)[0] for segment in path.replace("%3B", ";").split("/"))
                  for path in list(found)]
    return tuple(dict.fromkeys(_resolved(path) for path in found))


def _decoded(path: str) -> str:
    """``path`` with its escapes and raw characters in canonical form (see the module)."""
    out: list[str] = []
    start = 0
    while True:
        percent = path.find("%", start)
        out.append(_raw(path[start:] if percent < 0 else path[start:percent]))
        if percent < 0:
            return "".join(out)
        escape = path[percent + 1 : percent + 3]
        if len(escape) != 2 or not set(escape) <= _HEX:
            raise UnclearPath("malformed path: bad %-escape")
        char = chr(int(escape, 16))
        if char == "\0":
            raise UnclearPath("malformed path: NUL")
        out.append(char if char in _DECODED else "%" + escape.upper())
        start = percent + 3


def _raw(text: str) -> str:
    """Unescaped characters: printable ASCII as is, the rest escaped (UTF-8 bytes; the
    bytes mitmproxy could not decode come back through surrogateescape)."""
    if text.isascii() and text.isprintable() and " " not in text:
        return text
    if "\0" in text:
        raise UnclearPath("malformed path: NUL")
    return "".join(char if char in _PRINTABLE else _escaped(char) for char in text)


def _escaped(char: str) -> str:
    return "".join(f"%{byte:02X}" for byte in char.encode("utf-8", "surrogateescape"))


def _hides_escapes(path: str) -> bool:
    """Would a server that decodes ``path`` more than once meet an escape of ``_HIDDEN``
    (``%252e`` -> ``%2e`` -> ``.``)?"""
    level = path
    for _ in range(_MAX_DECODINGS):
        level, before = _percent_decoded(level), level
        if level == before:
            return False  # nothing left to decode ('50%off')
        upper = level.upper()
        if any(escape in upper for escape in _HIDDEN):
            return True
    return True


def _percent_decoded(text: str) -> str:
    """Every well-formed escape of ``text`` decoded (one byte, one character); a ``%``
    not followed by two hex digits stays, as lenient decoders leave it."""
    first, *rest = text.split("%")
    out = [first]
    for part in rest:
        if len(part) >= 2 and part[0] in _HEX and part[1] in _HEX:
            out.append(chr(int(part[:2], 16)) + part[2:])
        else:
            out.append("%" + part)
    return "".join(out)


def _resolved(path: str) -> str:
    segments: list[str] = []
    parts = path.split("/")[1:]
    for part in parts:
        if part in ("", "."):
            continue
        if part == "..":
            if not segments:  # above the root: a server would clamp, a scanner probes
                raise UnclearPath("malformed path: '..' above the root")
            segments.pop()
            continue
        segments.append(part)
    trailing = parts[-1] in ("", ".", "..") and bool(segments)
    return "/" + "/".join(segments) + ("/" if trailing else "")
