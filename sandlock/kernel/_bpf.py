"""A tiny assembler for classic BPF programs run by seccomp, and the compilation of a
syscall policy (``Rule`` per syscall number) into one.

Only what a seccomp filter needs: 32-bit loads from ``struct seccomp_data``, an AND
with a constant, forward conditional jumps to symbolic labels, and returns.

Classic BPF jumps only forward, and a conditional jump reaches at most 255
instructions. ``assemble`` raises BpfError rather than emitting a jump it cannot
encode; callers lay their programs out so that targets stay near (see _seccomp).
"""

from __future__ import annotations

import errno
import struct
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

# Opcodes (linux/bpf_common.h), already combined with their operand mode.
_LD_W_ABS = 0x20  # BPF_LD | BPF_W | BPF_ABS: A = 32-bit word of seccomp_data at k
_ALU_AND_K = 0x54  # BPF_ALU | BPF_AND | BPF_K: A &= k
_JEQ_K = 0x15  # BPF_JMP | BPF_JEQ | BPF_K: A == k
_JGE_K = 0x35  # BPF_JMP | BPF_JGE | BPF_K: A >= k (unsigned)
_JA = 0x05  # BPF_JMP | BPF_JA: jump k instructions forward (k is 32 bits: any distance)
_RET_K = 0x06  # BPF_RET | BPF_K: return k

MAX_INSNS = 4096  # BPF_MAXINSNS: the kernel refuses longer programs
MAX_JUMP = 255  # jt/jf are 8-bit offsets
# struct sock_filter {u16 code; u8 jt; u8 jf; u32 k} in native byte order, no padding
# (that is '<HBBI' on x86_64).
_INSN = struct.Struct("=HBBI")
INSN_SIZE = _INSN.size

# struct seccomp_data: int nr; u32 arch; u64 instruction_pointer; u64 args[6].
NR_OFFSET = 0
ARCH_OFFSET = 4
_ARGS_OFFSET = 16
# args are native u64: the low 32-bit word comes first on little-endian machines.
_LOW_WORD = 0 if sys.byteorder == "little" else 4


class BpfError(ValueError):
    """A program that cannot be encoded (bad operand, unreachable label, jump too long)."""


class Label:
    """A jump target; ``Assembler.place`` fixes it to the next emitted instruction."""

    __slots__ = ()


def arg_offset(index: int, high: bool = False) -> int:
    """Offset in seccomp_data of the low (or high) 32-bit word of args[index]."""
    if not 0 <= index < 6:
        raise BpfError(f"syscall argument index {index} out of range 0..5")
    return _ARGS_OFFSET + 8 * index + (4 - _LOW_WORD if high else _LOW_WORD)


class Assembler:
    """Collects instructions with symbolic jump targets; ``assemble`` packs them.

    A jump target of None means "the next instruction" (offset 0).
    """

    def __init__(self) -> None:
        self._insns: list[tuple[int, Label | None, Label | None, int]] = []
        self._positions: dict[Label, int] = {}

    def place(self, label: Label) -> None:
        if label in self._positions:
            raise BpfError("label placed twice")
        self._positions[label] = len(self._insns)

    def load(self, offset: int) -> None:
        self._emit(_LD_W_ABS, offset)

    def load_nr(self) -> None:
        self.load(NR_OFFSET)

    def load_arch(self) -> None:
        self.load(ARCH_OFFSET)

    def load_arg(self, index: int, high: bool = False) -> None:
        self.load(arg_offset(index, high))

    def and_(self, mask: int) -> None:
        self._emit(_ALU_AND_K, mask)

    def jeq(self, k: int, jt: Label | None = None, jf: Label | None = None) -> None:
        self._emit(_JEQ_K, k, jt, jf)

    def jge(self, k: int, jt: Label | None = None, jf: Label | None = None) -> None:
        self._emit(_JGE_K, k, jt, jf)

    def ja(self, target: Label) -> None:
        """Jump to ``target``, however far (a conditional jump reaches 255 at most)."""
        self._insns.append((_JA, None, None, target))

    def ret(self, k: int) -> None:
        self._emit(_RET_K, k)

    def assemble(self) -> bytes:
        """The packed ``struct sock_filter`` array, ready for a ``sock_fprog``."""
        if not 0 < len(self._insns) <= MAX_INSNS:
            raise BpfError(f"program has {len(self._insns)} instructions (1..{MAX_INSNS} allowed)")
        out = bytearray()
        for index, (code, jt, jf, k) in enumerate(self._insns):
            if isinstance(k, Label):  # ja
                k = self._offset(index, k, MAX_INSNS)
            out += _INSN.pack(code, self._offset(index, jt), self._offset(index, jf), k)
        return bytes(out)

    def _emit(self, code: int, k: int, jt: Label | None = None, jf: Label | None = None) -> None:
        if not 0 <= k <= 0xFFFFFFFF:
            raise BpfError(f"operand {k:#x} does not fit in 32 bits")
        self._insns.append((code, jt, jf, k))

    def _offset(self, index: int, target: Label | None, reach: int = MAX_JUMP) -> int:
        if target is None:
            return 0
        position = self._positions.get(target)
        if position is None or position >= len(self._insns):
            raise BpfError(f"instruction {index} jumps to a label with no instruction after it")
        offset = position - index - 1
        if offset < 0:
            raise BpfError(f"instruction {index} jumps backwards (classic BPF jumps forward only)")
        if offset > reach:
            raise BpfError(f"instruction {index} jumps {offset} instructions (at most {reach})")
        return offset


def returns(program: bytes) -> frozenset[int]:
    """The values of ``program``'s return instructions: every action it can take."""
    return frozenset(k for code, _, _, k in _INSN.iter_unpack(program) if code == _RET_K)


# A syscall policy as data (the actions a filter returns; Rule, Clause and Match:
# conditions on register arguments), and its compilation (see _seccomp for the layout).

# Filter return actions (linux/seccomp.h); on several filters the most restrictive wins.
SECCOMP_RET_KILL_PROCESS = 0x80000000
SECCOMP_RET_ERRNO = 0x00050000  # low 16 bits: the errno
SECCOMP_RET_USER_NOTIF = 0x7FC00000
SECCOMP_RET_ALLOW = 0x7FFF0000


def ret_errno(err: int) -> int:
    return SECCOMP_RET_ERRNO | (err & 0xFFFF)


ALLOW = SECCOMP_RET_ALLOW
EPERM = ret_errno(errno.EPERM)
EACCES = ret_errno(errno.EACCES)
ENOSYS = ret_errno(errno.ENOSYS)
NOTIFY = SECCOMP_RET_USER_NOTIF

WORD_MASK = 0xFFFFFFFF  # a Match's mask by default: the whole word


class Match:
    """Holds when ``(32-bit word of args[arg]) & mask`` is one of ``values``.

    The low word unless ``high``. Arguments the kernel reads as int or unsigned int
    need only the low word: the kernel truncates them the same way.
    """

    __slots__ = ("arg", "values", "mask", "high")

    def __init__(self, arg: int, values: Iterable[int], mask: int = WORD_MASK, high: bool = False) -> None:
        self.arg = arg
        self.values = tuple(sorted(set(values)))
        self.mask = mask
        self.high = high
        if not self.values:
            raise ValueError("a Match needs at least one value")


class Clause:
    """``action`` when every Match holds."""

    __slots__ = ("action", "matches")

    def __init__(self, action: int, *matches: Match) -> None:
        self.action = action
        self.matches = matches


class Rule:
    """The first Clause that holds decides; ``default`` when none does (or there are none)."""

    __slots__ = ("clauses", "default")

    def __init__(self, *clauses: Clause, default: int) -> None:
        self.clauses = clauses
        self.default = default


def compile_filter(audit_arch: int, syscall_bit: int, rules: Mapping[int, Rule], *,
                   kill: int, unsupported: int, allow: int) -> bytes:
    """The program enforcing ``rules`` (syscall number -> Rule) for one ABI: another
    audit arch gets ``kill``, numbers from ``syscall_bit`` up ``unsupported``, a syscall
    without a rule ``allow``.

    The syscall number is looked up by binary search (a linear chain cost a call whose
    rule reads its arguments, such as openat, a comparison per rule before it; a call
    the filter allows whatever its arguments never runs it: the kernel's action cache);
    a rule's clauses, and each distinct action's return, follow the search.
    """
    asm = Assembler()
    _emit_abi_checks(asm, audit_arch, syscall_bit, kill, unsupported)
    targets: dict[int, Label] = {}  # action -> its return
    blocks: list[tuple[Label, Rule]] = []
    found: list[tuple[int, Label]] = []
    for number, rule in sorted(rules.items()):
        if rule.clauses:
            blocks.append((Label(), rule))
            found.append((number, blocks[-1][0]))
        else:
            found.append((number, targets.setdefault(rule.default, Label())))
    allowed = Label()
    _emit_search(asm, found, allowed)
    for label, rule in blocks:
        asm.place(label)
        _emit_clauses(asm, rule)
    asm.place(allowed)
    asm.ret(allow)
    for action, label in targets.items():
        asm.place(label)
        asm.ret(action)
    return asm.assemble()


_LEAF = 4  # numbers compared one by one at the bottom of the search


def _emit_search(asm: Assembler, found: list[tuple[int, Label]], missing: Label) -> None:
    """With A = nr: jump to the label of the number that matches, else to ``missing``.
    Far targets are reached through ``ja`` (a conditional jump reaches 255 at most)."""
    if len(found) > _LEAF:
        middle = len(found) // 2
        lower = Label()
        asm.jge(found[middle][0], jf=lower)
        upper = Label()
        asm.ja(upper)
        asm.place(lower)
        _emit_search(asm, found[:middle], missing)
        asm.place(upper)
        _emit_search(asm, found[middle:], missing)
        return
    near = [Label() for _ in found]
    for (number, _), label in zip(found, near):
        asm.jeq(number, jt=label)
    asm.ja(missing)
    for (_, target), label in zip(found, near):
        asm.place(label)
        asm.ja(target)


def _emit_abi_checks(asm: Assembler, audit_arch: int, syscall_bit: int, kill: int,
                     unsupported: int) -> None:
    # Syscall numbers only mean something for one ABI: another audit arch is an
    # attempt to reach different syscalls under known numbers, so kill, not refuse.
    native = Label()
    asm.load_arch()
    asm.jeq(audit_arch, jt=native)
    asm.ret(kill)
    asm.place(native)
    # x32 shares the native audit arch and marks its numbers with a high bit.
    supported = Label()
    asm.load_nr()
    asm.jge(syscall_bit, jf=supported)
    asm.ret(unsupported)
    asm.place(supported)


def _emit_clauses(asm: Assembler, rule: Rule) -> None:
    """The rule's clauses in order (each loads the arguments it needs), then its default."""
    for clause in rule.clauses:
        next_clause = Label()
        for match in clause.matches:
            _emit_match(asm, match, miss=next_clause)
        asm.ret(clause.action)
        asm.place(next_clause)
    asm.ret(rule.default)


def _emit_match(asm: Assembler, match: Match, miss: Label) -> None:
    """Fall through when the match holds, jump to ``miss`` otherwise."""
    asm.load_arg(match.arg, match.high)
    if match.mask != WORD_MASK:
        asm.and_(match.mask)
    hit = Label()
    *others, last = match.values
    for value in others:
        asm.jeq(value, jt=hit)
    asm.jeq(last, jf=miss)
    asm.place(hit)
