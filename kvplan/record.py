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

from operator import itemgetter
from typing import TYPE_CHECKING

_tuple_new = tuple.__new__
_MISSING = object()
_RESERVED = frozenset(
    ("__new__", "__init__", "__slots__", "__getnewargs__", "_fields", "_field_defaults", "_make",
     "_replace", "_asdict", "_source")
)  # fmt: skip


def _new(cls, *args, **kwargs):
    fields = cls._fields
    if not kwargs and len(args) == len(fields):
        return _tuple_new(cls, args)
    if len(args) > len(fields):
        raise TypeError(
            f"{cls.__name__}() takes {len(fields)} positional arguments but {len(args)} were given"
        )
    values = list(args)
    defaults = cls._field_defaults
    for name in fields[len(args) :]:
        if name in kwargs:
            values.append(kwargs.pop(name))
        elif name in defaults:
            values.append(defaults[name])
        else:
            raise TypeError(f"{cls.__name__}() missing required argument: {name!r}")
    if kwargs:
        name = next(iter(kwargs))
        where = "multiple values for" if name in fields else "an unexpected keyword"
        raise TypeError(f"{cls.__name__}() got {where} argument {name!r}")
    return _tuple_new(cls, values)


def _make(cls, iterable):
    result = _tuple_new(cls, iterable)
    if len(result) != len(cls._fields):
        raise TypeError(f"Expected {len(cls._fields)} arguments, got {len(result)}")
    return result


_make_classmethod = classmethod(_make)


def _replace(self, /, **kwargs):
    result = self._make(
        [kwargs.pop(name, value) for name, value in zip(self._fields, self, strict=True)]
    )
    if kwargs:
        raise ValueError(f"Got unexpected field names: {list(kwargs)!r}")
    return result


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
            "_make": _make_classmethod,
            "_replace": _replace,
            "_asdict": _asdict,
        }
        for index, field in enumerate(fields):
            body[field] = property(itemgetter(index), doc=f"Alias for field number {index}")
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
