"""Plugs: a method a lower layer offers and a higher layer supplies.

``Agent.save`` and ``Context.to_notebook`` are the public face, yet writing a notebook is
the work of ``transcripts``, a layer above the engine and the context, which they may not
import (imports point down: ``tests/test_layers.py``). So the lower layer declares a
``Plug`` and calls it; the layer above fills it in its package ``__init__``, and
``import ipyagent`` imports every such layer, so a plug is filled before it can be called.
"""

from __future__ import annotations

from typing import Callable, Generic, ParamSpec, TypeVar

__all__ = ["Plug", "PlugNotFilled"]

P = ParamSpec("P")
R = TypeVar("R")


class PlugNotFilled(RuntimeError):
    """A plug was called before the layer that supplies it was imported."""


class Plug(Generic[P, R]):
    """A named function slot: filled once from above, called from below."""

    def __init__(self, name: str, supplier: str) -> None:
        self.name = name
        self.supplier = supplier
        self._function: Callable[P, R] | None = None
        self._load: Callable[[], Callable[P, R]] | None = None

    def fill(self, function: Callable[P, R]) -> Callable[P, R]:
        """Supply the work now (usable as a decorator); returns ``function``."""
        self._function, self._load = function, None
        return function

    def fill_later(self, load: Callable[[], Callable[P, R]]) -> None:
        """Supply the work at the first call: ``load()`` imports and returns it, so the
        supplier's modules are imported only when needed (``import ipyagent`` stays light)."""
        self._function, self._load = None, load

    @property
    def filled(self) -> bool:
        """Whether a supplier has filled this plug (loaded or not yet)."""
        return self._function is not None or self._load is not None

    def resolve(self) -> Callable[P, R]:
        """The supplied function, loading it if it was filled for later."""
        if self._function is None:
            if self._load is None:
                raise PlugNotFilled(f"{self.name} is supplied by {self.supplier}, "
                                    "which has not been imported")
            self._function = self._load()
        return self._function

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.resolve()(*args, **kwargs)

    def __repr__(self) -> str:
        state = "loaded" if self._function is not None else "filled" if self._load else "empty"
        return f"<Plug {self.name}: {state}, supplied by {self.supplier}>"
