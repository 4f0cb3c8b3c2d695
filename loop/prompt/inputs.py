"""The runtime inputs a section's ``compute`` may read, and a record of which ones it read.

Sections never reach for runtime state on their own: what they depend on (the model, the working
directory, a user setting...) arrives as a :class:`PromptInputs`, a read-only mapping that also
allows attribute access (``inputs.model`` is ``inputs["model"]``). Every lookup is recorded, hit or
miss, so the 2^N guard (:mod:`loop.prompt.variants`) learns which runtime conditions a section
depends on by watching it run rather than trusting a declaration that can be forgotten.

A name that clashes with a ``Mapping`` method (``get``, ``keys``, ``items``, ``values``) must be
read with ``inputs["keys"]``; names starting with ``_`` are not reachable as attributes.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any


class PromptInputs(Mapping[str, Any]):
    """An immutable snapshot of named runtime inputs that records every name looked up."""

    __slots__ = ("_reads", "_values")

    def __init__(self, values: Mapping[str, Any] | None = None) -> None:
        self._values: dict[str, Any] = dict(values or {})
        self._reads: set[str] = set()

    @property
    def reads(self) -> frozenset[str]:
        """Every name looked up so far (by item, attribute, ``get`` or ``in``), present or not."""
        return frozenset(self._reads)

    def __getitem__(self, key: str) -> Any:
        self._reads.add(key)
        return self._values[key]

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        try:
            return self[name]
        except KeyError:
            raise AttributeError(f"prompt input {name!r} is not set") from None

    def __contains__(self, key: object) -> bool:
        if isinstance(key, str):
            self._reads.add(key)
        return key in self._values

    def __iter__(self) -> Iterator[str]:
        # The key set is fixed for a request; branching on a value goes through __getitem__.
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        return f"PromptInputs({sorted(self._values)!r})"
