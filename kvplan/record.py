"""`NamedTuple`: typing.NamedTuple's class syntax and behaviour, built without compiling code.

typing.NamedTuple builds each class through collections.namedtuple, which compiles a `__new__`
for its field names (and type-checks every annotation): about 0.12 ms a class, and the CLI
defines thirty of them before printing anything, a fifth of its own start-up. A class made here is the
same immutable tuple subclass — fields by position and by name, defaults, `_fields`,
`_field_defaults`, `_make`, `_replace`, `_asdict`, a NamedTuple-like repr, pickling, `__match_args__`
— with one generic `__new__` instead of a compiled one. tests/test_record.py holds it to
typing.NamedTuple's behaviour.

    class Point(NamedTuple):
        x: int
        y: int = 0
"""

import collections
from operator import itemgetter
from typing import TYPE_CHECKING

# the C descriptor collections.namedtuple reads its fields with (twice a property's speed), where
# this Python has it
_TUPLEGETTER = getattr(collections, "_tuplegetter", None)


def _field(index: int):
    doc = f"Alias for field number {index}"
    if _TUPLEGETTER is not None:
        return _TUPLEGETTER(index, doc)
    return property(itemgetter(index), doc=doc)


_tuple_new = tuple.__new__
_MISSING = object()
_RESERVED = frozenset(
    ("__new__", "__init__", "__slots__", "__getnewargs__", "_fields", "_field_defaults", "_make",
     "_replace", "_asdict", "_source", "_positions", "_template", "_required")
)  # fmt: skip


def _new(cls, *args, **kwargs):
    given = len(args)
    if not kwargs and given == len(cls._fields):
        return _tuple_new(cls, args)
    if not given and len(kwargs) == len(cls._fields):  # every field by name
        try:
            return _tuple_new(cls, [kwargs[name] for name in cls._fields])
        except KeyError:
            pass  # a name that is no field: the general path below says which
    template = cls._template  # each field's default, _MISSING for the required ones
    if given > len(template):
        raise TypeError(
            f"{cls.__name__}() takes {len(template)} positional arguments but {given} were given"
        )
    values = [*args, *template[given:]]
    if kwargs:
        positions = cls._positions
        for name, value in kwargs.items():
            index = positions.get(name, -1)
            if index < given:  # -1: no such field
                where = "multiple values for" if index >= 0 else "an unexpected keyword"
                raise TypeError(f"{cls.__name__}() got {where} argument {name!r}")
            values[index] = value
    for index in range(given, cls._required):  # the required fields come first
        if values[index] is _MISSING:
            raise TypeError(f"{cls.__name__}() missing required argument: {cls._fields[index]!r}")
    return _tuple_new(cls, values)


def _make(cls, iterable):
    result = _tuple_new(cls, iterable)
    if len(result) != len(cls._fields):
        raise TypeError(f"Expected {len(cls._fields)} arguments, got {len(result)}")
    return result


_make_classmethod = classmethod(_make)


def _replace(self, /, **kwargs):
    values = list(self)
    positions = self._positions
    for name, value in kwargs.items():
        index = positions.get(name)
        if index is None:
            unexpected = [name for name in kwargs if name not in positions]
            raise ValueError(f"Got unexpected field names: {unexpected!r}")
        values[index] = value
    return _tuple_new(type(self), values)


def _asdict(self):
    return dict(zip(self._fields, self, strict=True))


def __repr__(self):
    body = ", ".join(f"{name}={value!r}" for name, value in zip(self._fields, self, strict=True))
    return f"{self.__class__.__name__}({body})"


def __getnewargs__(self):
    return tuple(self)


class _RecordMeta(type):
    def __new__(mcls, name, bases, namespace):
        if namespace.get("_root", False) or not any(b.__dict__.get("_root") for b in bases):
            # the root itself, or a plain subclass of a record class (its fields are inherited)
            return type.__new__(mcls, name, bases, namespace)
        annotations = namespace.get("__annotations__", {})
        fields = tuple(annotations)
        defaults = {}
        for field in fields:
            if field.startswith("_"):
                raise ValueError(f"{name}: field names cannot start with an underscore: {field!r}")
            if field in namespace:
                defaults[field] = namespace[field]
            elif defaults:
                raise TypeError(
                    f"{name}: non-default field {field!r} cannot follow default field(s) "
                    f"{', '.join(defaults)}"
                )
        body = {
            "__slots__": (),
            "__module__": namespace.get("__module__", __name__),
            "__qualname__": namespace.get("__qualname__", name),
            "__doc__": namespace.get("__doc__") or f"{name}({', '.join(fields)})",
            "__annotations__": dict(annotations),
            "__new__": _new,
            "__repr__": __repr__,
            "__getnewargs__": __getnewargs__,
            "__match_args__": fields,
            "_fields": fields,
            "_field_defaults": defaults,
            # for _new and _replace: a field's position, the defaults by position, and how many
            # fields (the first ones) have none
            "_positions": {field: index for index, field in enumerate(fields)},
            "_template": tuple(defaults.get(field, _MISSING) for field in fields),
            "_required": len(fields) - len(defaults),
            "_make": _make_classmethod,
            "_replace": _replace,
            "_asdict": _asdict,
        }
        for index, field in enumerate(fields):
            body[field] = _field(index)
        for key, value in namespace.items():
            if key in _RESERVED:
                raise AttributeError(f"{name}: cannot overwrite NamedTuple attribute {key}")
            if key not in body and key not in defaults and key != "__annotations__":
                body[key] = value
        return type.__new__(mcls, name, (tuple,), body)


if TYPE_CHECKING:  # a type checker sees typing.NamedTuple, whose behaviour this class copies
    from typing import NamedTuple as NamedTuple
else:

    class NamedTuple(metaclass=_RecordMeta):
        """Subclass with annotated fields, as typing.NamedTuple (see the module's docstring)."""

        _root = True
