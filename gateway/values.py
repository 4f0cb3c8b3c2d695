"""``@value``: the gateway's per-request value objects, immutable by contract, cheap to build.

A ``@dataclass(frozen=True)`` pays a ``object.__setattr__`` call per field in its ``__init__`` (the
frozen guard's way around itself): about three times the cost of plain slot stores, on objects
the request path builds several of per request. A ``@value`` class is a slots dataclass with the
frozen class's equality and hash, whose fields the type checker treats as read-only
(``dataclass_transform(frozen_default=True)``: ``mypy --strict`` rejects an assignment), while
at run time ``__init__`` stores plainly. ``dataclasses.replace`` derives changed copies as before.

For results made and read within one step of a request. What is shared between attempts and
upstreams (``ClientRequest``, ``PreparedRequest``) stays a frozen dataclass, immutable at run time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TypeVar, dataclass_transform

T = TypeVar("T")


@dataclass_transform(frozen_default=True, field_specifiers=(field,))
def value(cls: type[T]) -> type[T]:
    """A slots dataclass of ``cls``: read-only fields for the type checker, hashable like a
    frozen dataclass (the hash of its fields)."""
    return dataclass(slots=True, unsafe_hash=True)(cls)
