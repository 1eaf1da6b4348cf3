"""Seeing a store through its Protocol only, in the conformance suites."""
from __future__ import annotations

from typing import Any, Generic, Protocol

__all__ = ["through", "protocol_members"]


def protocol_members(protocol: type) -> set[str]:
    """The public attributes a Protocol declares (its methods and properties)."""
    skip = {object, Protocol, Generic}
    return {name for klass in protocol.__mro__ if klass not in skip
            for name in vars(klass) if not name.startswith("_")}


class _View:
    """``obj`` seen through ``protocol``: any other attribute is an AttributeError,
    so a conformance test cannot lean on an implementation's extras."""

    def __init__(self, obj: Any, protocol: type) -> None:
        object.__setattr__(self, "_obj", obj)
        object.__setattr__(self, "_protocol", protocol)
        object.__setattr__(self, "_allowed", protocol_members(protocol))

    def __getattr__(self, name: str) -> Any:
        if name not in self._allowed:
            raise AttributeError(f"{name} is not part of the {self._protocol.__name__} "
                                 "Protocol; a conformance test may use the Protocol only")
        return getattr(self._obj, name)


def through(protocol: type, obj: Any) -> Any:
    """``obj``, checked to implement ``protocol``, usable through it only."""
    assert isinstance(obj, protocol), f"{type(obj).__name__} does not implement {protocol.__name__}"
    missing = {n for n in protocol_members(protocol) if not hasattr(obj, n)}
    assert not missing, f"{type(obj).__name__} lacks {sorted(missing)} of {protocol.__name__}"
    return _View(obj, protocol)
