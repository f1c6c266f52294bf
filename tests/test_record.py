"""kvplan.record.NamedTuple behaves as typing.NamedTuple: the same class syntax gives the same
values, methods, errors, repr, equality, copies and pickles."""

from __future__ import annotations

import copy
import pickle
import typing

import pytest

from kvplan.record import NamedTuple


class Ours(NamedTuple):
    """A doc."""

    a: int
    b: str = "x"
    c: tuple = ()

    @property
    def twice(self) -> int:
        return 2 * self.a

    def plus(self, n: int) -> int:
        return self.a + n


class Theirs(typing.NamedTuple):
    """A doc."""

    a: int
    b: str = "x"
    c: tuple = ()

    @property
    def twice(self) -> int:
        return 2 * self.a

    def plus(self, n: int) -> int:
        return self.a + n


CALLS = [((1,), {}), ((1, "y"), {}), ((1, "y", (2,)), {}), ((), {"a": 3}), ((4,), {"c": (5,)})]


@pytest.mark.parametrize("args,kwargs", CALLS)
def test_values_match_typing_namedtuple(args, kwargs):
    ours, theirs = Ours(*args, **kwargs), Theirs(*args, **kwargs)
    assert tuple(ours) == tuple(theirs) and isinstance(ours, tuple)
    assert ours._asdict() == theirs._asdict()
    assert repr(ours) == repr(theirs).replace("Theirs", "Ours")
    assert (ours.twice, ours.plus(1)) == (theirs.twice, theirs.plus(1))
    assert ours._replace(b="z") == tuple(theirs._replace(b="z"))
    assert Ours._make(list(ours)) == ours and hash(ours) == hash(tuple(theirs))
    for clone in (copy.copy(ours), copy.deepcopy(ours), pickle.loads(pickle.dumps(ours))):
        assert clone == ours and type(clone) is Ours


def test_class_attributes_match():
    assert Ours._fields == Theirs._fields and Ours._field_defaults == Theirs._field_defaults
    assert Ours.__match_args__ == Theirs.__match_args__ == ("a", "b", "c")
    assert Ours.__doc__ == "A doc." and list(Ours.__annotations__) == ["a", "b", "c"]
    assert Ours.a.__doc__ == Theirs.a.__doc__


@pytest.mark.parametrize(
    "args,kwargs,error",
    [
        ((), {}, TypeError),  # a required field missing
        ((1, "y", (), 4), {}, TypeError),  # too many positions
        ((1,), {"a": 2}, TypeError),  # a field twice
        ((1,), {"d": 2}, TypeError),  # no such field
    ],
)
def test_the_same_errors(args, kwargs, error):
    with pytest.raises(error):
        Theirs(*args, **kwargs)
    with pytest.raises(error):
        Ours(*args, **kwargs)


def test_immutable_and_strict_replace():
    p = Ours(1)
    with pytest.raises(AttributeError):
        p.a = 2
    with pytest.raises(ValueError):
        p._replace(d=1)
    with pytest.raises(TypeError):
        Ours._make([1, 2])


def test_bad_class_definitions_are_refused():
    with pytest.raises(TypeError):

        class Bad(NamedTuple):
            a: int = 1
            b: int

    with pytest.raises(ValueError):

        class Underscore(NamedTuple):
            _a: int

    with pytest.raises(AttributeError):

        class Overwrite(NamedTuple):
            a: int

            def _replace(self):
                return self


def test_match_statement_and_subclass():
    match Ours(7, "q"):
        case Ours(a, b):
            assert (a, b) == (7, "q")

    class Sub(Ours):
        def three(self) -> int:
            return 3 * self.a

    s = Sub(2)
    assert s.three() == 6 and s.b == "x" and isinstance(s, Ours)
