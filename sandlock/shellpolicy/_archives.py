"""Archivers and compressors in verify mode: extracting, creating or replacing a file
writes; listing, testing and writing to standard output do not."""

from __future__ import annotations

from ._options import operands, option_values
from ._words import shown

DISCARDED = (None, "-", "/dev/null", "/dev/stdout")  # an output option's value that is no file
_COMPRESSORS = frozenset({"gzip", "gunzip", "bzip2", "bunzip2", "xz", "unxz", "lzma",
                          "unlzma", "zstd", "unzstd", "lz4", "compress", "uncompress", "lzip",
                          "pigz", "unpigz", "pbzip2", "brotli"})
_TAR_VALUES = "fCTXbgHKLNV"
_TAR_WRITES = ("--extract", "--get", "--append", "--update", "--catenate", "--concatenate",
               "--delete")
# 7z's commands (its first operand): these only read.
_SEVEN_ZIP_READS = frozenset({"l", "t", "h", "i", "b"})


def writes(what: str, targets: list[str | None]) -> str:
    """The reason for a command that writes, naming its first target."""
    named = [target for target in targets if target and getattr(target, "literal", True)]
    return f"{what} changes files" + (f" ({shown(named[0])})" if named else "")


def compressor(command: str, args: tuple[str, ...]) -> str | None:
    """gzip FILE replaces FILE with FILE.gz; to stdout (-c), listing or testing it writes none."""
    for letter, long in (("c", "--stdout"), ("c", "--to-stdout"), ("l", "--list"), ("t", "--test")):
        if option_values(args, letter, "SbLo", (long,)):
            return None
    files = operands(args, "SbLo")
    return writes(command, files[:1]) if files else None


def tar(command: str, args: tuple[str, ...]) -> str | None:
    """tar x/r/u/A writes into the tree or the archive; tar c writes its archive (-f)."""
    modes = args[0] if args and not args[0].startswith("-") else ""  # tar xzf a.tar
    writing = set("xruA") & set(modes) or any(
        option_values(args, letter, _TAR_VALUES) for letter in "xruA") or any(
        arg in _TAR_WRITES for arg in args)
    if writing:
        return f"{command} changes files"
    archives = option_values(args, "f", _TAR_VALUES, ("--file",))
    if "f" in modes:
        archives.append(args[1] if len(args) > 1 else None)
    creating = "c" in modes or option_values(args, "c", _TAR_VALUES, ("--create",))
    if creating and archives and archives[0] not in DISCARDED:
        return writes(f"{command} -c", archives)
    return None


def unzip(command: str, args: tuple[str, ...]) -> str | None:
    listing = {"-l", "-t", "-p", "-c", "-v", "-Z", "-z"}
    return None if listing & set(args) else f"{command} changes files"


def seven_zip(command: str, args: tuple[str, ...]) -> str | None:
    """7z x / e / a / u / d / rn write; 7z l / t only read."""
    found = operands(args)
    action = found[0] if found else ""
    return None if action in _SEVEN_ZIP_READS or not action else f"{command} {action} changes files"


def cpio(command: str, args: tuple[str, ...]) -> str | None:
    """cpio -i extracts and -p copies (not with -t, listing); -o writes its archive to
    standard output unless -O/-F name a file."""
    values = "FOIEMRHCc"
    listing = option_values(args, "t", values, ("--list",))
    if not listing and (option_values(args, "i", values, ("--extract",))
                        or option_values(args, "p", values, ("--pass-through",))):
        return f"{command} -i/-p changes files"
    outputs = [value for letter in "OF" for value in option_values(args, letter, values, ("--file",))
               if value not in DISCARDED]
    return writes(f"{command} -O/-F", outputs) if outputs and not listing else None


def ar(command: str, args: tuple[str, ...]) -> str | None:
    """ar's operation is its first argument's letters (dash optional): t and p only read."""
    operation = args[0].lstrip("-") if args else ""
    letters = set(operation) & set("dmpqrstx")
    return None if letters <= {"t", "p"} else f"{command} {operation} changes files"


def unrar(command: str, args: tuple[str, ...]) -> str | None:
    action = args[0] if args else ""
    return None if action in ("l", "lt", "lb", "v", "vt", "vb", "t", "p") else f"{command} changes files"


def pax(command: str, args: tuple[str, ...]) -> str | None:
    """pax -r extracts (-rw copies), -w -f FILE writes an archive; alone it lists."""
    values = "fsxbopTUGcn"
    writing = option_values(args, "w", values)
    if option_values(args, "r", values):
        return f"{command} -r changes files"
    archives = [value for value in option_values(args, "f", values) if value not in DISCARDED]
    return writes(f"{command} -w", archives) if writing and archives else None


def jar(command: str, args: tuple[str, ...]) -> str | None:
    modes = args[0].lstrip("-") if args else ""
    return f"{command} {modes} changes files" if set(modes) & set("cuxi") else None


CHECKS = {"tar": tar, "bsdtar": tar, "gtar": tar, "unzip": unzip, "7z": seven_zip,
          "7za": seven_zip, "7zr": seven_zip, "cpio": cpio, "ar": ar, "unrar": unrar,
          "pax": pax, "jar": jar, **{tool: compressor for tool in _COMPRESSORS}}
