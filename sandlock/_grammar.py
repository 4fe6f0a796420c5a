"""The grammar of values written as text, one for every option, policy file string and
API string (docs/usage.md, "Numbers and rules"): numbers, and the words of a rule.

A number is ASCII digits, with a ``.`` and digits where a fraction means something
(``2.5``, ``.5``): no sign, no exponent, no ``_``, no other script's digits. Python's
int() and float() read ``٣``, ``２``, ``1_0``, ``1e10``, ``inf``, which is not what
a reader of the option sees, and each parser took a different subset of them. Spaces
and tabs around a value are ignored; any other character that does not show (a line
or paragraph separator, a no-break space, a control character) is an error, never
dropped: ``"\\u2028*"`` is not ``*``.

Pure and import-free: loaded only when such text is read (never by a default run).
"""

from __future__ import annotations

# The largest value a 64-bit kernel or C argument holds (a size, a count): every
# number is bounded by it before anything converts it (or builds a range of it).
MAX_INT = (1 << 63) - 1
BLANKS = " \t"  # ignored around a value; separate the words of a rule
_SHOWN = 80  # characters of a value quoted in a message
_DECIMAL = "(ASCII digits 0-9 and one '.' at most: no sign, exponent or '_')"


def is_digits(text: str) -> bool:
    """ASCII digits only, at least one (``"٣".isdigit()`` is true: not here)."""
    return text.isascii() and text.isdigit()


def whole(text: str, most: int = MAX_INT) -> int:
    """``text`` as a whole number from 0 to ``most``; ValueError saying what is wrong."""
    number = text.strip(BLANKS)
    if not is_digits(number):
        raise ValueError(f"expected a whole number, got {shown(text)}"
                         f"{_hint(number, '(ASCII digits 0-9 only)')}")
    return _at_most(number, most)


def decimal(text: str, most: int = MAX_INT) -> float:
    """``text`` as a number from 0 to ``most``, with a fraction if given (``2.5``)."""
    number = text.strip(BLANKS)
    whole_part, fraction = split_decimal(number, text)
    _at_most(whole_part or "0", most)
    return float(number)


def split_decimal(number: str, text: str) -> tuple[str, str]:
    """``"12.5"`` -> ``("12", "5")``; ValueError (quoting ``text``) if ``number`` is not
    digits with at most one ``.`` among them."""
    whole_part, _, fraction = number.partition(".")
    parts = [part for part in (whole_part, fraction) if part]
    if not parts or not all(map(is_digits, parts)):
        raise ValueError(f"expected a number, got {shown(text)}{_hint(number, _DECIMAL)}")
    return whole_part, fraction


def _hint(text: str, grammar: str) -> str:
    """``grammar`` for text that another grammar (Python's, a shell's) reads as a number."""
    if any(char.isdigit() or char in "_+-" for char in text) or text.lower() in ("inf", "nan"):
        return f" {grammar}"
    return ""


def _at_most(digits: str, most: int) -> int:
    """The value of ``digits``, if at most ``most``. Its length first, and without its
    leading zeros: int() of a long text costs time quadratic in it, and refuses past
    4300 digits (even zeros) with Python's own words."""
    significant = digits.lstrip("0")
    if len(significant) > len(str(most)) or int(significant or "0") > most:
        raise ValueError(f"{shown(digits)} is too large (at most {most})")
    return int(significant or "0")


def check_printable(text: str) -> None:
    """A rule is printable text, its words separated by spaces or tabs: ValueError
    naming the first other character (which the next reader of the rule, a shell, a
    terminal, ``str.split``, would drop or act on)."""
    if text.isprintable():
        return
    for char in text:
        if char != "\t" and not char.isprintable():
            raise ValueError(f"invisible character U+{ord(char):04X} (write rules in "
                             "printable text, words separated by spaces)")


def words(text: str) -> list[str]:
    """The words of a rule (``check_printable``), split at spaces and tabs only."""
    check_printable(text)
    return text.replace("\t", " ").split()  # (nothing else that split() cuts at is left)


def spaced(text: str) -> str:
    """A rule as it is kept: its words one space apart; any other character, invisible
    ones included, left for the parser to refuse (never dropped here)."""
    return " ".join(word for word in text.replace("\t", " ").split(" ") if word)


def shown(value: object) -> str:
    """``value`` for a message: repr (quoted, escaped), cut if long; an int too long
    to write (repr refuses past 4300 digits) by its size."""
    if isinstance(value, str):
        return repr(value) if len(value) <= _SHOWN else repr(value[:_SHOWN]) + "..."
    if isinstance(value, int) and value.bit_length() > 4 * _SHOWN:
        return f"an integer of {value.bit_length() * 30103 // 100000 + 1} digits"
    try:
        text = repr(value)
    except ValueError:  # a list holding such an int
        return f"a {type(value).__name__} too large to show"
    return text if len(text) <= _SHOWN else text[:_SHOWN] + "..."
