"""Reading a command's options the way getopt does, enough to tell what it will write:
short options cluster (``sed -ni``, ``curl -sSLo out``) and some take a value, either
the rest of their cluster (``-o/tmp/x``) or the next word (``-o out``)."""

from __future__ import annotations


def option_values(args: tuple[str, ...], wanted: str, takes_value: str = "",
                  long: tuple[str, ...] = ()) -> list[str | None]:
    """Each use of the short option ``wanted`` (or of a ``long`` spelling), with its
    value if ``wanted`` is in ``takes_value`` (None otherwise). ``takes_value`` names
    the command's short options that take a value: scanning a cluster stops there."""
    found: list[str | None] = []
    words = list(args)
    while words:
        word = words.pop(0)
        if word == "--":
            break
        if word.startswith("--"):
            spelled, equals, value = word.partition("=")
            if spelled in long:
                has_value = wanted in takes_value
                found.append((value if equals else _next(words)) if has_value else None)
            continue
        if not word.startswith("-") or word == "-":
            continue
        for index, letter in enumerate(word[1:], start=1):
            if letter == wanted:
                found.append(_value(word, index, words) if letter in takes_value else None)
                break
            if letter in takes_value:
                _value(word, index, words)  # consumes the next word if the cluster ends
                break
    return found


def operands(args: tuple[str, ...], takes_value: str = "",
             long_values: tuple[str, ...] = ()) -> list[str]:
    """The words that are not options or option values."""
    found: list[str] = []
    words = list(args)
    while words:
        word = words.pop(0)
        if word == "--":
            return found + words
        if word.startswith("--"):
            if word in long_values:
                _next(words)
        elif word.startswith("-") and word != "-":
            letters = word[1:]
            for index, letter in enumerate(letters, start=1):
                if letter in takes_value:
                    _value(word, index, words)
                    break
        else:
            found.append(word)
    return found


def _value(word: str, index: int, words: list[str]) -> str | None:
    """The value of the option at ``word[index]``: the rest of the cluster, or the next word."""
    rest = word[index + 1:]
    return rest if rest else _next(words)


def _next(words: list[str]) -> str | None:
    return words.pop(0) if words else None
