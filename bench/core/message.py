"""What crosses a process boundary as JSON, typed: a frozen dataclass whose `to_json` writes its
fields and whose `from_json` reads them back, refusing another version, an unknown field or a
missing one in one line. A field typed as another message (or an optional one, or a tuple of
them) is read as that message, so a whole spec is typed from the moment it is read. Adding a
field is one line in the dataclass: both sides read it from there. No torch at import (MXNet's
interpreter reads these too)."""
from __future__ import annotations

import dataclasses
import types
import typing
from typing import ClassVar


class SpecError(ValueError):
    """A message this process cannot read; the message says why."""


@dataclasses.dataclass(frozen=True)
class Message:
    """The base of every typed message. A subclass sets KIND (its name in errors) and VERSION,
    which it bumps whenever its layout changes: a reader of another version refuses it, as the
    parent and the child would then be running different code."""

    KIND: ClassVar[str] = "message"
    VERSION: ClassVar[int] = 1

    def to_json(self) -> dict:
        out = {"version": self.VERSION}
        for f in dataclasses.fields(self):
            out[f.name] = _plain(getattr(self, f.name))
        return out

    @classmethod
    def from_json(cls, data) -> "Message":
        if not isinstance(data, dict):
            raise SpecError(f"{cls.KIND}: expected an object, got {type(data).__name__}")
        version = data.get("version")
        if version != cls.VERSION:
            raise SpecError(f"{cls.KIND} version {version}: this process reads version {cls.VERSION} (the parent and "
                            "its worker run different parabench code: run both from one checkout)")
        hints = typing.get_type_hints(cls)
        declared = {f.name: f for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - set(declared) - {"version"})
        if unknown:
            raise SpecError(f"{cls.KIND} fields {', '.join(unknown)} are not in version {cls.VERSION}")
        missing = sorted(name for name, f in declared.items() if name not in data
                         and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING)
        if missing:
            raise SpecError(f"{cls.KIND} version {cls.VERSION} lacks fields {', '.join(missing)}")
        return cls(**{name: _typed(hints[name], value) for name, value in data.items() if name in declared})


def _plain(value):
    if isinstance(value, Message):
        return value.to_json()
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _typed(hint, value):
    """`value` as the field's type says: messages read as such, tuples as tuples."""
    if value is None:
        return None
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        for arg in args:
            if arg is not type(None):
                return _typed(arg, value)
    if isinstance(hint, type) and issubclass(hint, Message):
        return hint.from_json(value)
    if origin is tuple:
        item = args[0] if args else typing.Any
        return tuple(_typed(item, v) for v in value)
    if origin is dict and len(args) == 2:
        return {k: _typed(args[1], v) for k, v in value.items()}
    return value
