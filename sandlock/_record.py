"""Value classes without ``dataclasses``: ``@record`` gives a class with annotated
fields what ``@dataclass(frozen=True)`` gave it (construction by position or keyword
with defaults, ``__post_init__``, equality, hash, repr, immutability, pickling) plus a
``replace(**changes)`` method.

Why not dataclasses: importing it pulls inspect, ast, dis, enum and re (~7 ms), and
each class it makes costs 0.5-0.9 ms (it compiles generated code); sandlock makes
dozens at start-up, where a record class costs microseconds. Public records
(``Policy``, ``Result``) still answer ``dataclasses.fields``/``replace``/``asdict``:
``__dataclass_fields__`` is built, with the dataclasses import, the first time it is
asked for.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing costs ~5 ms to import: not on the start-up path
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, TypeVar

    T = TypeVar("T")

MISSING = object()


class Field:
    """One field: its annotation (a string), its default (or a ``factory`` making one
    per instance), whether it takes part in equality and repr, and free ``metadata``."""

    __slots__ = ("name", "type", "default", "factory", "compare", "repr", "metadata")

    def __init__(self, name: str, type: str, default: object,  # noqa: A002 - as dataclasses
                 factory: Callable[[], object] | None, compare: bool, repr: bool,  # noqa: A002
                 metadata: dict[str, object]) -> None:
        self.name, self.type, self.default, self.factory = name, type, default, factory
        self.compare, self.repr, self.metadata = compare, repr, metadata

    def named(self, name: str, annotation: str) -> Field:
        return Field(name, annotation, self.default, self.factory, self.compare, self.repr,
                     self.metadata)

    def initial(self) -> object:
        if self.factory is not None:
            return self.factory()
        return self.default


def field(*, default: object = MISSING, factory: Callable[[], object] | None = None,
          compare: bool = True, repr: bool = True, **metadata: object) -> Any:
    """A field's class-body value when a plain default does not say enough."""
    return Field("", "", default, factory, compare, repr, metadata)


def record(cls: type[T] | None = None, *, frozen: bool = True, order: bool = False) -> Any:
    """The class decorator (``@record`` or ``@record(frozen=False)``); ``order``: sorted
    by the compared fields, in order. Methods the class defines itself are kept."""

    def make(cls: type[T]) -> type[T]:
        fields = _fields_of(cls)
        cls.__record_fields__ = fields  # type: ignore[attr-defined]
        cls.__record_names__ = frozenset(f.name for f in fields)  # type: ignore[attr-defined]
        methods: dict[str, object] = {
            "__init__": _init, "__repr__": _repr, "__eq__": _eq, "replace": replace,
            "__replace__": replace, "__reduce__": _reduce,
            "__hash__": _hash if frozen else None,
        }
        if frozen:
            methods.update(__setattr__=_refuse_change, __delattr__=_refuse_change)
        if order:
            methods.update(__lt__=_lt, __le__=_le, __gt__=_gt, __ge__=_ge)
        for name, method in methods.items():
            if name not in cls.__dict__ or (name == "__hash__" and cls.__dict__[name] is None):
                setattr(cls, name, method)
        return cls

    return make if cls is None else make(cls)


def _fields_of(cls: type) -> tuple[Field, ...]:
    """The fields of the bases, then the class's own annotated names, in order."""
    inherited = {f.name: f for base in reversed(cls.__mro__[1:])
                 for f in base.__dict__.get("__record_fields__", ())}
    for name, annotation in cls.__dict__.get("__annotations__", {}).items():
        value = cls.__dict__.get(name, MISSING)
        if isinstance(value, Field):
            spec = value.named(name, annotation)
            if spec.default is MISSING:
                delattr(cls, name)  # no class attribute standing in for a missing value
            else:
                setattr(cls, name, spec.default)
        else:
            spec = Field(name, annotation, value, None, True, True, {})
        inherited[name] = spec
    return tuple(inherited.values())


def initialise(obj: object, args: tuple, kwargs: dict[str, object]) -> None:
    """Fill ``obj``'s fields from arguments and defaults, then run ``__post_init__``."""
    cls = type(obj)
    fields = cls.__record_fields__  # type: ignore[attr-defined]
    if len(args) > len(fields):
        raise TypeError(f"{cls.__name__}() takes {len(fields)} positional arguments "
                        f"but {len(args)} were given")
    values = obj.__dict__
    for spec, value in zip(fields, args):
        values[spec.name] = value
    for name, value in kwargs.items():
        if name not in cls.__record_names__:  # type: ignore[attr-defined]
            raise TypeError(f"{cls.__name__}() got an unexpected keyword argument {name!r}")
        if name in values:
            raise TypeError(f"{cls.__name__}() got multiple values for argument {name!r}")
        values[name] = value
    for spec in fields[len(args):]:
        if spec.name not in values:
            if spec.default is MISSING and spec.factory is None:
                raise TypeError(f"{cls.__name__}() missing required argument {spec.name!r}")
            values[spec.name] = spec.initial()
    post_init = getattr(obj, "__post_init__", None)
    if post_init is not None:
        post_init()


def _init(self: object, *args: object, **kwargs: object) -> None:
    initialise(self, args, kwargs)


def values_of(obj: object) -> dict[str, object]:
    """Field name -> value, in field order."""
    return {f.name: obj.__dict__[f.name] for f in type(obj).__record_fields__}  # type: ignore[attr-defined]


def replace(obj: T, **changes: object) -> T:
    """A copy of ``obj`` with ``changes``, checked as a new value would be."""
    return type(obj)(**{**values_of(obj), **changes})


def _compared(obj: object) -> tuple:
    return tuple(obj.__dict__[f.name] for f in type(obj).__record_fields__ if f.compare)  # type: ignore[attr-defined]


def _comparison(compare: Callable[[tuple, tuple], bool]) -> Callable[[object, object], bool]:
    """A rich comparison method: ``compare`` of the compared fields, same class only."""

    def method(self: object, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return compare(_compared(self), _compared(other))

    return method


_eq = _comparison(lambda a, b: a == b)
_lt = _comparison(lambda a, b: a < b)
_le = _comparison(lambda a, b: a <= b)
_gt = _comparison(lambda a, b: a > b)
_ge = _comparison(lambda a, b: a >= b)


def _hash(self: object) -> int:
    return hash(_compared(self))


def _repr(self: object) -> str:
    shown = ", ".join(f"{f.name}={self.__dict__[f.name]!r}"
                      for f in type(self).__record_fields__ if f.repr)  # type: ignore[attr-defined]
    return f"{type(self).__qualname__}({shown})"


def _refuse_change(self: object, name: str, *value: object) -> None:
    from dataclasses import FrozenInstanceError  # only when something tries

    raise FrozenInstanceError(f"cannot assign to field {name!r} ({type(self).__name__} "
                              "is immutable: use .replace())")


def _reduce(self: object) -> tuple[Callable[..., object], tuple]:
    return _restore, (type(self), tuple(values_of(self).values()))


def _restore(cls: type[T], values: tuple) -> T:
    """Unpickle without re-running the checks: the value was valid when it was made."""
    obj = cls.__new__(cls)
    obj.__dict__.update(zip((f.name for f in cls.__record_fields__), values))  # type: ignore[attr-defined]
    return obj


class DataclassView:
    """``__dataclass_fields__`` of a public record, made on first use, so that
    ``dataclasses.fields``, ``replace``, ``asdict`` and ``is_dataclass`` keep working
    for programs that used them when the class was a dataclass."""

    def __get__(self, obj: object, owner: type) -> dict[str, Any]:
        import dataclasses

        specs = [(f.name, object, _as_dataclass_field(dataclasses, f))
                 for f in owner.__record_fields__]  # type: ignore[attr-defined]
        view = dataclasses.make_dataclass(owner.__name__, specs, frozen=True, kw_only=True)
        owner.__dataclass_fields__ = view.__dataclass_fields__  # type: ignore[attr-defined]
        return view.__dataclass_fields__


def _as_dataclass_field(dataclasses: Any, spec: Field) -> Any:
    kwargs: dict[str, object] = {"compare": spec.compare, "repr": spec.repr,
                                 "metadata": spec.metadata}
    if spec.factory is not None:
        kwargs["default_factory"] = spec.factory
    elif spec.default is not MISSING:
        kwargs["default"] = spec.default
    return dataclasses.field(**kwargs)
