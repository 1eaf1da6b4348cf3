"""What may cross into janus: text UTF-8 can hold, ints of 64 bits, bounded nesting.

The Python facade (:mod:`ctxrelay.runtime`) checks a goal's bindings here before
it calls Prolog, so a bad value is a :class:`~ctxrelay.errors.CtxRelayError` that
names the caller's argument instead of a janus failure that breaks the next call.
"""
from __future__ import annotations

import json
import re
from typing import Any

from ctxrelay.errors import InvalidArgumentError, InvalidContentError


def check_encodable(value: Any, names: dict[str, str] | None = None,
                    where: str = "argument") -> None:
    """Refuse text UTF-8 cannot hold before it reaches janus: a lone surrogate
    makes janus fail with a pending UnicodeEncodeError that breaks the next
    call too.  Iterative and depth-bounded: janus converts recursively, so a
    deeper value would raise RecursionError (or worse) on the way in or out.

    ``value`` is a goal's bindings; ``names`` gives the caller's name of each
    (``{"C": "content"}``) for the message, and ``OptPairs`` holds keyword options."""
    if where == "argument" and all_text_encodable(value):
        return                      # the common case, in C: no walk needed
    from ctxrelay.storage.validation import MAX_JSON_DEPTH, check_utf8
    stack = [(value, where, 0)]
    while stack:
        item, place, depth = stack.pop()
        if isinstance(item, str):
            check_utf8(item, place, InvalidContentError)
        elif isinstance(item, int) and not isinstance(item, bool) and item.bit_length() > 63:
            # Every int parameter fits 64 bits; a larger one fails deep in the
            # bridge (a 5,000-digit int cannot even be printed in a message).
            raise InvalidArgumentError(
                f"{place} is an int of {item.bit_length()} bits; pass a value in the "
                "signed 64-bit range")
        elif isinstance(item, (dict, list, tuple)):
            if depth > MAX_JSON_DEPTH + 4:      # + the argument's own wrappers
                raise InvalidArgumentError(
                    f"{place} is nested more than {MAX_JSON_DEPTH} levels deep; flatten it")
            if depth == 0 and where == "argument" and isinstance(item, dict):
                # The goal's bindings: name each value as the caller did (content,
                # not 'C'; a policy option by its keyword, not 'OptPairs').
                for k, v in item.items():
                    if k == "OptPairs" and isinstance(v, (list, tuple)):
                        stack.extend((pair[1], str(pair[0]), depth + 2) for pair in v
                                     if isinstance(pair, (list, tuple)) and len(pair) == 2)
                    else:
                        stack.append((v, (names or {}).get(k, f"argument {k!r}"), depth + 1))
            elif isinstance(item, dict):
                for k, v in item.items():
                    stack.append((k, place, depth + 1))
                    stack.append((v, f"{place} {k!r}" if isinstance(k, str) else place,
                                  depth + 1))
            else:
                stack.extend((v, place, depth + 1) for v in item)


_LONG_DIGITS = re.compile(r"\d{19}")


def _opaque(_: Any) -> None:
    return None                      # not data the walk checks either


def all_text_encodable(value: Any) -> bool:
    """Whether every string in ``value`` is valid UTF-8, checked in one C pass.

    The pass reaches what :func:`check_encodable` walks (str, dict, list, tuple)
    and, like the walk, passes over other objects (a store handle); False when
    a key is not JSON-able (the walk then finds what is wrong, if anything).  A
    prepared turn handed back to :meth:`Runtime.commit_turn` is thousands of
    strings: walking them in Python cost more than storing the turn."""
    try:
        text = json.dumps(value, ensure_ascii=False, default=_opaque)
        text.encode("utf-8")
    except (TypeError, ValueError, UnicodeEncodeError, RecursionError):
        return False
    # A run of 19 digits may be an int beyond 64 bits (or only text): the walk
    # tells which.  Depth needs no test here: what json.dumps nests, janus does.
    return _LONG_DIGITS.search(text) is None
