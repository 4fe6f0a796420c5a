"""What a sed script does besides filtering: the files it writes (``w FILE``, ``s///w
FILE``) and the shell commands it runs (``e COMMAND``; ``e`` alone and ``s///e`` run the
text being edited). Read the way GNU sed reads a script: addresses, then a command."""

from __future__ import annotations

from dataclasses import dataclass, field

_NOT_FILES = ("/dev/stdout", "/dev/stderr")
_PLAIN = set("=dDgGhHnNpPxzF{}")
_TAKES_NUMBER = set("lLqQ")
_TAKES_LABEL = set("btT:v")
_TAKES_LINE = set("aicrR")


@dataclass
class SedEffects:
    writes: list[str] = field(default_factory=list)  # files w writes
    commands: list[str] = field(default_factory=list)  # e COMMAND
    runs_text: bool = False  # e alone, s///e: the edited text runs as a command
    unreadable: str | None = None  # why the script could not be read (-f FILE, a runtime word)


def sed_effects(args: tuple[str, ...]) -> SedEffects:
    """The effects of ``sed ARGS``'s scripts (``--sandbox`` forbids them all)."""
    effects = SedEffects()
    if "--sandbox" in args:
        return effects
    scripts: list[str] = []
    rest = list(args)
    operands: list[str] = []
    while rest:
        word = rest.pop(0)
        if word == "--":
            operands += rest
            break
        spelled, equals, value = word.partition("=")
        if spelled in ("--expression", "--file"):
            text = value if equals else (rest.pop(0) if rest else "")
            (scripts if spelled == "--expression" else operands).append(text)
            if spelled == "--file":
                effects.unreadable = f"sed -f {text}: the script file is not read"
        elif word.startswith("-") and not word.startswith("--") and word != "-":
            for index, letter in enumerate(word[1:], start=1):
                if letter in "efl":
                    text = word[index + 1:] or (rest.pop(0) if rest else "")
                    if letter == "e":
                        scripts.append(text)
                    elif letter == "f":
                        effects.unreadable = f"sed -f {text}: the script file is not read"
                    break
                if letter == "i":
                    break  # -i[SUFFIX]: the rest is the suffix
        elif not word.startswith("--"):
            operands.append(word)
    if not scripts and operands:
        scripts.append(operands[0])
    for script in scripts:
        if not getattr(script, "literal", True):
            effects.unreadable = "the sed script is built when the line runs"
        else:
            _scan(script, effects)
    return effects


def _scan(script: str, effects: SedEffects) -> None:
    position, length = 0, len(script)
    while position < length:
        char = script[position]
        if char in " \t\n;":
            position += 1
            continue
        if char == "#":
            position = _line_end(script, position)
            continue
        position = _address(script, position)
        position = _skip(script, position, " \t")
        if position < length and script[position] == ",":
            position = _address(script, _skip(script, position + 1, " \t"))
        position = _skip(script, position, " \t!")
        if position >= length:
            return
        command = script[position]
        position += 1
        if command in _PLAIN:
            continue
        if command in _TAKES_NUMBER or command in _TAKES_LABEL:
            position = _until(script, position, ";\n}" if command in _TAKES_NUMBER else ";\n")
        elif command in _TAKES_LINE:
            position = _line_end(script, position, continued=command in "aic")
        elif command in "wWe":
            end = _line_end(script, position)
            argument = script[position:end].strip()
            position = end
            if command == "e":
                (effects.commands.append(argument) if argument else setattr(effects, "runs_text", True))
            elif argument not in _NOT_FILES:
                effects.writes.append(argument)
        elif command in "sy":
            position = _substitution(script, position, command, effects)
        else:
            effects.unreadable = f"the sed command {command!r} is not known"
            return


def _substitution(script: str, position: int, command: str, effects: SedEffects) -> int:
    if position >= len(script):
        return position
    delimiter = script[position]
    position = _delimited(script, _delimited(script, position + 1, delimiter), delimiter)
    if command == "y":
        return position
    while position < len(script) and script[position] not in ";\n}# \t":
        flag = script[position]
        position += 1
        if flag == "e":
            effects.runs_text = True
        elif flag == "w":
            end = _line_end(script, position)
            target = script[position:end].strip()
            if target not in _NOT_FILES:
                effects.writes.append(target)
            return end
    return position


def _address(script: str, position: int) -> int:
    length = len(script)
    if position < length and script[position] in "/\\":
        delimiter = script[position] if script[position] == "/" else script[position + 1:position + 2]
        start = position + 1 if script[position] == "/" else position + 2
        position = _delimited(script, start, delimiter)
        return _skip(script, position, "IM")
    return _skip(script, position, "0123456789$~+")


def _delimited(script: str, position: int, delimiter: str) -> int:
    """The position after the next unescaped ``delimiter``."""
    while position < len(script):
        if script[position] == "\\":
            position += 2
            continue
        if script[position] == delimiter:
            return position + 1
        position += 1
    return position


def _skip(script: str, position: int, chars: str) -> int:
    while position < len(script) and script[position] in chars:
        position += 1
    return position


def _until(script: str, position: int, stops: str) -> int:
    while position < len(script) and script[position] not in stops:
        position += 1
    return position


def _line_end(script: str, position: int, continued: bool = False) -> int:
    while position < len(script) and script[position] != "\n":
        if continued and script[position] == "\\":
            position += 1
        position += 1
    return position
