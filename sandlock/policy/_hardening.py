"""The checks of the hardening fields: upstream Sandlock's (protections, syscall lists,
the ids inside the user namespace) and the seccomp rules a policy waives
(allow_syscalls), and upstream's constructor spellings (``strict``,
``extra_allow_syscalls``): loaded only by a policy that uses one (or misspells a field)."""

from __future__ import annotations

from .._errors import PolicyError
from ._values import strings

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable

    from ._policy import Policy

MAX_ID = 0xFFFFFFFE  # (uid_t)-1 means "no change" to the kernel: not an id
SYSV_IPC_GROUP = "sysv_ipc"  # upstream's name for the SysV IPC calls in extra_allow_syscalls
# Names that were Policy fields before the Sandlock documents' names were adopted.
_FORMER_NAMES = {"fs_read": "fs_readable", "fs_write": "fs_writable", "fs_deny": "fs_denied"}


def suggestion(name: str, fields: Iterable[str]) -> str:
    """What an unknown field ``name`` may have meant ("" if nothing close)."""
    if name in _FORMER_NAMES:
        return f": did you mean {_FORMER_NAMES[name]!r}?"
    import difflib

    close = difflib.get_close_matches(name, list(fields), n=1, cutoff=0.6)
    return f": did you mean {close[0]!r}?" if close else ""


def protections(name: str, value: object) -> tuple:
    """allow_degraded, disable: sandlock.Protection members (the enum made only now)."""
    from ._protection import protections as checked

    return checked(name, value)


def syscall_names(name: str, value: object) -> tuple[str, ...]:
    """Names of syscalls of this machine, each once, in order."""
    from ..kernel import every_syscall

    known = every_syscall()
    names = tuple(dict.fromkeys(s.strip() for s in strings(name, value)))
    for syscall in names:
        if syscall not in known:
            import difflib

            close = difflib.get_close_matches(syscall, known, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise PolicyError(name, f"{syscall!r} is not a syscall of this machine{hint}")
    return names


def waivers(name: str, value: object) -> tuple[str, ...]:
    """allow_syscalls: rules of sandlock's seccomp filter, each once, in order."""
    from ..kernel import WAIVABLE  # the seccomp module owns the list of rules

    syscalls = strings(name, value)
    for syscall in syscalls:
        if syscall not in WAIVABLE:
            raise PolicyError(
                name,
                f"{syscall!r} is not a syscall sandlock restricts "
                f"(one of: {', '.join(sorted(WAIVABLE))})",
            )
    return tuple(dict.fromkeys(syscalls))


def deny_list(name: str, value: object) -> tuple[str, ...] | None:
    """None (the default list) or the syscalls denied instead of it."""
    return None if value is None else syscall_names(name, value)


def user_ids(name: str, value: object) -> str:
    """"UID:GID" (or a pair of numbers): the ids the command has in its user namespace."""
    if isinstance(value, (tuple, list)) and len(value) == 2:
        parts = list(value)
    elif isinstance(value, str) and value.count(":") == 1:
        parts = value.split(":")
    else:
        raise PolicyError(name, f"expected UID:GID (e.g. 0:0 or 1000:1000), got {value!r}")
    ids = []
    for part in parts:
        text = str(part).strip()
        if isinstance(part, bool) or not text.isascii() or not text.isdigit() \
                or int(text) > MAX_ID:
            raise PolicyError(name, f"{part!r} is not a user or group id (0 to {MAX_ID})")
        ids.append(int(text))
    return f"{ids[0]}:{ids[1]}"


def check_user(policy: Policy) -> None:
    """``user`` and ``privileged`` need the sandbox's user namespace and agree."""
    if policy.privileged and policy.user not in (None, "0:0"):
        raise PolicyError("privileged", f"is uid 0 in the sandbox: --user {policy.user} "
                          "contradicts it (give one of them)")
    if policy.full_access:
        field = "privileged" if policy.privileged else "user"
        raise PolicyError(field, "needs the sandbox's user namespace, which full-access has not")


def upstream_spellings(values: dict[str, object]) -> dict[str, object]:
    """Policy's keywords with upstream's spellings turned into sandlock's:
    ``strict=False`` is ``best_effort=True``; ``extra_allow_syscalls`` names syscalls
    to waive (``allow_syscalls``), "sysv_ipc" the SysV IPC group (``allow_sysv_ipc``)."""
    values = dict(values)
    if "strict" in values:
        strict = values.pop("strict")
        if not isinstance(strict, bool):
            raise PolicyError("strict", f"expected true or false, got {strict!r}")
        values["best_effort"] = not strict  # (given, it decides: policy.replace(strict=...))
    if "extra_allow_syscalls" in values:
        extra = strings("extra_allow_syscalls", values.pop("extra_allow_syscalls"))
        if SYSV_IPC_GROUP in extra:
            values["allow_sysv_ipc"] = True
        others = tuple(name for name in extra if name != SYSV_IPC_GROUP)
        if others:
            given = values.get("allow_syscalls", ())
            values["allow_syscalls"] = (*strings("allow_syscalls", given), *others)
    return values
