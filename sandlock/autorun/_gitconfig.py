"""git's config files, read as git reads them, and the keys a new repository may keep.

A repository the command made is the command's: git would obey its config's
``core.fsmonitor``, aliases, filters, ``include.path``... when the user next runs git
there. Its config is kept only if every entry is one that names no program and moves
no file git reads (``ALLOWED``); otherwise it is replaced by those entries alone. What
this parser cannot classify is not allowed (fail closed): git itself refuses a file
it cannot parse, and an entry that is not understood is one that could run something.

The grammar (git's config.c): ``[section]``, ``[section "subsection"]`` (its quotes
and backslashes escaped; case kept), the old ``[section.subsection]`` (lowered); a
``name = value`` line (names: a letter, then letters, digits, ``-``; case ignored), a
bare ``name`` (true); values with ``"`` quoting, ``\\n \\t \\b \\\\ \\"`` escapes, a
backslash-newline continuation, ``#`` and ``;`` comments outside quotes; a key may
follow its section header on the same line. No regular expressions: the start-up path
reads repository configs with this, and ``re`` costs milliseconds to import there.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing costs ~5 ms to import: not on the start-up path
if TYPE_CHECKING:
    from collections.abc import Iterable

# section.name, for any subsection when the section has them ("remote.*.url").
ALLOWED = frozenset((
    "core.repositoryformatversion", "core.filemode", "core.bare", "core.logallrefupdates",
    "core.ignorecase", "core.symlinks", "core.precomposeunicode",
    "core.worktree",  # a submodule's git directory names its work tree (a directory, no program)
    "extensions.objectformat",
    "remote.*.url", "remote.*.pushurl", "remote.*.fetch", "remote.*.tagopt",
    "branch.*.remote", "branch.*.merge", "branch.*.rebase",
    "submodule.*.url", "submodule.*.active",
    "user.name", "user.email", "init.defaultbranch",
))
_URLS = frozenset(("remote.*.url", "remote.*.pushurl", "submodule.*.url"))
_ESCAPES = {"n": "\n", "t": "\t", "b": "\b", "\\": "\\", '"': '"'}


class Entry:
    """One ``section.subsection.name = value``; ``value`` None for a bare name (true)."""

    __slots__ = ("section", "subsection", "name", "value")

    def __init__(self, section: str, subsection: str | None, name: str, value: str | None) -> None:
        self.section, self.subsection, self.name, self.value = section, subsection, name, value

    @property
    def key(self) -> str:
        """As ALLOWED spells it: lowered section and name, ``*`` for a subsection."""
        return f"{self.section}.{'*.' if self.subsection is not None else ''}{self.name}"

    def is_(self, section: str, name: str) -> bool:
        return self.section == section and self.name == name


class Parsed:
    """The entries of a file, and whether all of it was understood."""

    def __init__(self, entries: list[Entry], complete: bool) -> None:
        self.entries, self.complete = entries, complete

    def values(self, section: str, name: str) -> list[str]:
        return [e.value for e in self.entries if e.is_(section, name) and e.value is not None]

    def includes(self) -> list[str]:
        """``include.path`` and every ``includeIf.*.path``, whatever their condition."""
        return [e.value for e in self.entries if e.name == "path" and e.value is not None
                and (e.section == "include" and e.subsection is None or e.section == "includeif")]


def parse(text: str) -> Parsed:
    """Every entry up to the first thing git would not accept (``complete`` False then)."""
    reader = _Reader(text[1:] if text.startswith("\ufeff") else text)
    entries: list[Entry] = []
    section: tuple[str, str | None] = ("", None)  # (git reads a key before any section)
    try:
        while (c := reader.next()) is not None:
            if c in " \t\r\n\f\v":
                continue
            if c in "#;":
                reader.skip_line()
            elif c == "[":
                section = reader.header()
            elif c.isascii() and c.isalpha():
                name, value = reader.variable(c)
                entries.append(Entry(section[0], section[1], name, value))
            else:
                return Parsed(entries, False)
    except ValueError:
        return Parsed(entries, False)
    return Parsed(entries, True)


class Verdict:
    """A config a repository made during the run may keep (``allowed``), or the entries
    it may (``kept``) and what it may not (``refused``); its hashes' size."""

    def __init__(self, allowed: bool, kept: list[Entry], refused: str, hash_size: int) -> None:
        self.allowed, self.kept, self.refused, self.hash_size = allowed, kept, refused, hash_size


def judge(data: bytes | None) -> Verdict:
    """A config's bytes (None: not a regular file, or too large) judged."""
    if data is None:
        return Verdict(False, [], "what sandlock cannot read (not a regular file, or too large)", 20)
    parsed = parse(data.decode("utf-8", "surrogateescape"))
    formats = [value.lower() for value in parsed.values("extensions", "objectformat")]
    kept = [entry for entry in parsed.entries if allowed(entry)]
    refused = [entry.key.replace("*", entry.subsection or "") for entry in parsed.entries
               if not allowed(entry)]
    what = ", ".join([*dict.fromkeys(refused[:4]), *(() if parsed.complete else
                                                     ("a line git would not read",))])
    return Verdict(parsed.complete and not refused, kept, what,
                   32 if formats[-1:] == ["sha256"] else 20)


def allowed(entry: Entry) -> bool:
    key = entry.key
    if key not in ALLOWED:
        return False
    if key in _URLS:
        return entry.value is not None and safe_url(entry.value)
    return True


def safe_url(url: str) -> bool:
    """A URL git fetches from without running anything chosen by it: no remote helper
    (``ext::cmd``, ``fd::``, any ``transport::``), no option in disguise (a leading
    ``-``, as a host or a path), no control characters."""
    if not url or "::" in url or any(ord(c) < 0x20 or c == "\x7f" for c in url):
        return False
    return not (url.startswith("-") or "://-" in url or "@-" in url or ":-" in url)


def render(entries: Iterable[Entry]) -> str:
    """The entries as a config file (each value quoted: nothing is read as a comment;
    an entry of no section, which no key of git's is, left out)."""
    lines: list[str] = []
    current: tuple[str, str | None] | None = None
    for entry in entries:
        if not entry.section:
            continue
        if (entry.section, entry.subsection) != current:
            current = (entry.section, entry.subsection)
            sub = "" if entry.subsection is None else ' "%s"' % _escape(entry.subsection, False)
            lines.append(f"[{entry.section}{sub}]")
        value = "" if entry.value is None else ' = "%s"' % _escape(entry.value, True)
        lines.append(f"\t{entry.name}{value}")
    return "".join(line + "\n" for line in lines)


def _escape(text: str, value: bool) -> str:
    text = text.replace("\\", "\\\\").replace('"', '\\"')
    return text.replace("\n", "\\n").replace("\t", "\\t").replace("\b", "\\b") if value else text


class _Reader:
    def __init__(self, text: str) -> None:
        self.text, self.at = text, 0

    def next(self) -> str | None:
        if self.at >= len(self.text):
            return None
        c = self.text[self.at]
        self.at += 1
        if c == "\r" and self.text[self.at:self.at + 1] == "\n":  # (git reads CRLF as LF)
            c = self.text[self.at]
            self.at += 1
        return c

    def skip_line(self) -> None:
        while (c := self.next()) is not None and c != "\n":
            pass

    def header(self) -> tuple[str, str | None]:
        name = ""
        while (c := self.next()) is not None:
            if c == "]":
                return self._section(name, None)
            if c in " \t":
                return self._section(name, self._subsection())
            if not (c.isascii() and (c.isalnum() or c in "-.")):
                raise ValueError(c)
            name += c.lower()
        raise ValueError("end of file in a section header")

    @staticmethod
    def _section(name: str, subsection: str | None) -> tuple[str, str | None]:
        if not name:
            raise ValueError("empty section")
        if subsection is None and "." in name:  # [section.subsection], the old form
            name, _, subsection = name.partition(".")
        return name, subsection

    def _subsection(self) -> str:
        c = self.next()
        while c in (" ", "\t"):
            c = self.next()
        if c != '"':
            raise ValueError("subsection without quotes")
        subsection = ""
        while (c := self.next()) != '"':
            if c is None or c == "\n":
                raise ValueError("unterminated subsection")
            if c == "\\":
                c = self.next()
                if c is None or c == "\n":
                    raise ValueError("bad escape in subsection")
            subsection += c
        if self.next() != "]":
            raise ValueError("junk after subsection")
        return subsection

    def variable(self, first: str) -> tuple[str, str | None]:
        name = first.lower()
        while (c := self.next()) is not None and c.isascii() and (c.isalnum() or c == "-"):
            name += c.lower()
        while c in (" ", "\t"):
            c = self.next()
        if c is None or c == "\n":
            return name, None
        if c != "=":
            raise ValueError(f"junk after {name}")
        return name, self._value()

    def _value(self) -> str:
        value: list[str] = []
        spaces, quoted = 0, False
        while True:
            c = self.next()
            if c is None or c == "\n":
                if quoted:
                    raise ValueError("unterminated quote")
                return "".join(value)
            if not quoted and c in "#;":
                self.skip_line()
                return "".join(value)
            if not quoted and c in " \t\r\f\v":
                if value:  # (leading whitespace is dropped)
                    spaces += 1
                continue
            value.extend(" " * spaces)
            spaces = 0
            if c == "\\":
                c = self.next()
                if c == "\n":
                    continue  # a continuation line
                if c is None or c not in _ESCAPES:
                    raise ValueError("bad escape")
                value.append(_ESCAPES[c])
            elif c == '"':
                quoted = not quoted
            else:
                value.append(c)
