"""Words as bash hands them to a command: quotes and backslashes removed, ``$'...'``
decoded, braces expanded (``c{d,}`` is ``cd c``), and whether bash builds the word only
when the line runs (a parameter, a substitution, an unquoted glob): then its text is
kept as written and the word is not ``literal``."""

from __future__ import annotations

import re

_UNQUOTED_ESCAPE = re.compile(r"\\(.)", re.DOTALL)
_DOUBLE_QUOTED_ESCAPE = re.compile(r'\\([$`"\\\n])')
# Nodes whose value exists only at run time.
_RUNTIME = frozenset({"simple_expansion", "expansion", "command_substitution",
                      "process_substitution", "arithmetic_expansion", "extglob_pattern"})
_ANSI_C = re.compile(r"\\(?:([abeEfnrtv\\'\"?])|([0-7]{1,3})|x([0-9a-fA-F]{1,2})"
                     r"|u([0-9a-fA-F]{1,4})|U([0-9a-fA-F]{1,8})|c(.))", re.DOTALL)
_ANSI_C_LETTERS = {"a": "\a", "b": "\b", "e": "\x1b", "E": "\x1b", "f": "\f", "n": "\n",
                   "r": "\r", "t": "\t", "v": "\v"}
_SEQUENCE = re.compile(r"(-?\d+|[A-Za-z])\.\.(-?\d+|[A-Za-z])(?:\.\.(-?\d+))?")
_MAX_WORDS = 1024  # a brace expansion larger than this is not followed (the word is runtime)


class Word(str):
    """A word's text, and ``literal``: False when bash builds it at run time (the text
    is then as written, ``$x`` or ``*.py``); ``prefix``: how it begins for certain (all
    of it when literal; ``./`` of ``./*.py``)."""

    literal: bool
    prefix: str

    def __new__(cls, text: str, literal: bool = True, prefix: str | None = None) -> Word:
        word = super().__new__(cls, text)
        word.literal = literal
        word.prefix = text if literal else (prefix or "")
        return word


def literal(word: str) -> bool:
    """Whether bash passes ``word`` as it reads (a plain str is literal)."""
    return getattr(word, "literal", True)


def shown(text: str, limit: int = 60) -> str:
    """``text`` for a reason: on one line, and cut when long."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[:limit - 3] + "..."


def may_be_option(word: str) -> bool:
    """Whether ``word`` is, or could become at run time, an option (``-i``, ``$x``, ``*``)."""
    return word.startswith("-") if literal(word) else not word.prefix or word.prefix.startswith("-")


# A piece of a word: (text, special, runtime). ``special`` marks one unquoted character,
# which brace expansion and globbing read; quoted text and runtime values are opaque.
Piece = tuple[str, bool, bool]


def pieces(node: object, source: bytes) -> list[Piece]:
    """The pieces of the word at ``node``, in order."""
    text = source[node.start_byte:node.end_byte].decode(errors="replace")
    kind = node.type
    if kind in ("command_name", "concatenation"):
        return [piece for child in node.children if not locale_dollar(child)
                for piece in pieces(child, source)]
    if kind in ("word", "number", "variable_name"):
        return _unquoted(text)
    if kind == "raw_string":
        return [(text[1:-1], False, False)]
    if kind == "ansi_c_string":
        return [(decode_ansi_c(text[2:-1]), False, False)]
    if kind in ("string", "translated_string"):
        return _double_quoted(node, source)
    if kind in ("brace_expression", "regex"):  # {1..3} (\\{1..3} is no expansion), =~ x
        return _unquoted(text)
    if not node.is_named:  # a token the grammar cut out of a word (=~, \\$): its text
        return [(text, False, True)] if text == "$" else _unquoted(text)  # $ may expand
    return [(text, False, True)]  # an expansion, a substitution, or what is not known


def locale_dollar(node: object) -> bool:
    """The ``$`` of ``$"..."`` (bash's translated string: the text of the string), which
    the grammar reads as a token of its own inside a word."""
    if node.end_byte - node.start_byte != 1 or node.text != b"$":
        return False  # (first: a sibling is found by a walk through the parent's children)
    following = node.next_sibling
    while following is not None and following.type == "concatenation":
        following = following.children[0] if following.children else None
    return following is not None and following.type == "string" and \
        following.start_byte == node.end_byte


def expanded_words(parts: list[Piece]) -> list[Word]:
    """The words bash makes of a word's pieces: several after brace expansion."""
    expanded = brace_expand(parts)
    if expanded is None:
        return [Word("".join(text for text, _, _ in parts), False)]
    return [joined(each) for each in expanded]


def single_word(node: object, source: bytes) -> Word:
    """The word at ``node`` where bash does no brace expansion (redirection targets,
    here-strings, assignment values)."""
    return joined(pieces(node, source))


def joined(parts: list[Piece]) -> Word:
    text = "".join(part[0] for part in parts)
    fixed = ""
    for piece, special, runtime in parts:
        if runtime or (special and piece in "*?["):
            break
        fixed += piece
    return Word(text, not any(runtime for _, _, runtime in parts) and not _globs(parts), fixed)


def quoted_code(node: object, source: bytes) -> str | None:
    """The text of a quoted or escaped literal at ``node`` when it holds what bash would
    run as a substitution if it ever evaluated the text (``x='a[$(cmd)]'; $((x))``)."""
    value = "".join(text for text, _, runtime in pieces(node, source) if not runtime)
    return value if "$(" in value or "`" in value else None


def substitutions(text: str) -> list[str]:
    """The commands of the ``$(...)`` and backquotes in ``text``, as bash finds them if
    it evaluates the text as a word (an arithmetic subscript, a prompt); unclosed ones
    would not run."""
    found, position = [], 0
    while position < len(text):
        if text[position] == "\\":
            position += 2
        elif text.startswith("$((", position):
            position += 3  # arithmetic: the substitutions inside it are found in turn
        elif text.startswith("$(", position):
            end = _closing(text, position + 2)
            if end is None:
                return found
            found.append(text[position + 2:end])
            position = end + 1
        elif text[position] == "`":
            end = position + 1
            while end < len(text) and text[end] != "`":
                end += 2 if text[end] == "\\" else 1
            if end >= len(text):
                return found
            found.append(re.sub(r"\\([$`\\])", r"\1", text[position + 1:end]))
            position = end + 1
        else:
            position += 1
    return found


def _closing(text: str, position: int) -> int | None:
    """The ``)`` closing a ``$(`` (quotes and nested parentheses skipped)."""
    depth, quote = 1, ""
    while position < len(text):
        char = text[position]
        if char == "\\" and quote != "'":
            position += 2
            continue
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
            if not depth:
                return position
        position += 1
    return None


def _unquoted(text: str) -> list[Piece]:
    found: list[Piece] = []
    position = 0
    for match in _UNQUOTED_ESCAPE.finditer(text):
        found += [(char, True, False) for char in text[position:match.start()]]
        if match.group(1) != "\n":  # a line continuation joins, it is no character
            found.append((match.group(1), False, False))
        position = match.end()
    return found + [(char, True, False) for char in text[position:]]


def _double_quoted(node: object, source: bytes) -> list[Piece]:
    """"...": its literal text (escapes removed) and its expansions, in order; the
    text between the grammar's pieces counts too (a newline is no node)."""
    if node.type == "translated_string":  # $"..." holds a string
        inner = next((child for child in node.named_children if child.type == "string"), None)
        return _double_quoted(inner, source) if inner is not None else [("", False, False)]
    found: list[Piece] = []
    position = node.start_byte + 1
    for child in node.named_children:
        if child.type != "string_content":
            found.append(_literal_between(source, position, child.start_byte))
            found.append((source[child.start_byte:child.end_byte].decode(errors="replace"),
                          False, True))
            position = child.end_byte
    found.append(_literal_between(source, position, max(position, node.end_byte - 1)))
    return found


def _literal_between(source: bytes, start: int, end: int) -> Piece:
    content = source[start:end].decode(errors="replace")
    return (_DOUBLE_QUOTED_ESCAPE.sub(_kept, content), False, False)


def _kept(match: re.Match) -> str:
    return "" if match.group(1) == "\n" else match.group(1)


def _globs(parts: list[Piece]) -> bool:
    """Whether unquoted glob characters make bash match the word against files."""
    specials = [text for text, special, _ in parts if special]
    if "*" in specials or "?" in specials:
        return True
    return "[" in specials and "]" in specials[specials.index("[") + 1:]


def decode_ansi_c(text: str) -> str:
    """The value of ``$'TEXT'`` (bash's ANSI-C quoting)."""
    def replace(match: re.Match) -> str:
        letter, octal, hexa, short, long, control = match.groups()
        if letter is not None:
            return _ANSI_C_LETTERS.get(letter, letter)
        if control is not None:
            return chr(ord(control.upper()) ^ 0x40) if control != "?" else "\x7f"
        number = int(octal, 8) if octal else int(hexa or short or long, 16)
        return chr(number & 0xFF) if octal or hexa else chr(min(number, 0x10FFFF))

    return _ANSI_C.sub(replace, text)


def brace_expand(parts: list[Piece]) -> list[list[Piece]] | None:
    """bash's brace expansion over the unquoted characters of a word; None when it
    would make more than ``_MAX_WORDS`` words."""
    results = [parts]
    expanded: list[list[Piece]] = []
    while results:
        current = results.pop(0)
        found = _first_brace(current)
        if found is None:
            expanded.append(current)
        else:
            start, end, alternatives = found
            results += [current[:start] + alternative + current[end + 1:]
                        for alternative in alternatives]
        if len(expanded) + len(results) > _MAX_WORDS:
            return None
    return expanded


def _first_brace(parts: list[Piece]) -> tuple[int, int, list[list[Piece]]] | None:
    """The first ``{...}`` bash expands: its bounds and what it stands for."""
    for start, (text, special, _) in enumerate(parts):
        if not (special and text == "{"):
            continue
        depth, commas = 0, []
        for index in range(start + 1, len(parts)):
            char, special_char, _ = parts[index]
            if not special_char:
                continue
            if char == "{":
                depth += 1
            elif char == "}" and depth:
                depth -= 1
            elif char == "}":
                inner = parts[start + 1:index]
                if commas:
                    bounds = [start, *commas, index]
                    return start, index, [parts[a + 1:b] for a, b in zip(bounds, bounds[1:])]
                sequence = _sequence(inner)
                if sequence is not None:
                    return start, index, [[(item, False, False)] for item in sequence]
                break  # not an expansion: bash looks for the next brace
            elif char == "," and not depth:
                commas.append(index)
    return None


def _sequence(inner: list[Piece]) -> list[str] | None:
    """{1..5}, {05..10..2}, {a..e}: the words, or None when it is not a sequence."""
    if not all(special for _, special, _ in inner):
        return None
    match = _SEQUENCE.fullmatch("".join(text for text, _, _ in inner))
    if match is None:
        return None
    first, last = match.group(1), match.group(2)
    step = abs(int(match.group(3) or 1)) or 1
    numeric = first.lstrip("-").isdigit()
    if numeric != last.lstrip("-").isdigit():
        return None
    low, high = (int(first), int(last)) if numeric else (ord(first), ord(last))
    if abs(high - low) // step >= _MAX_WORDS:
        return None
    direction = 1 if high >= low else -1
    values = range(low, high + direction, step * direction)
    if not numeric:
        return [chr(value) for value in values]
    padded = any(bound.lstrip("-").startswith("0") and len(bound.lstrip("-")) > 1
                 for bound in (first, last))
    width = max(len(first), len(last)) if padded else 0
    return [str(value).zfill(width) for value in values]
