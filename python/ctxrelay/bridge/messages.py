"""Errors that cross from Prolog, worded for the Python caller.

A Prolog user gets ISO error terms (``type_error(text, 123)``) and the
messages print_message/2 shows.  A Python user of the same predicate gets a
:mod:`ctxrelay.errors` exception whose message speaks Python: it names the
argument the caller passed (``session_id``, not the goal's ``S``), the type
in Python's words (``a str``, ``None``) and the fix.  The class follows the
argument too: a bad ``session_id`` is an :class:`InvalidSessionIdError`.
"""
from __future__ import annotations

import math
from typing import Any

from ctxrelay import errors

_PY_TYPES = {
    "text": "a str", "atom": "a str", "string": "a str", "positive_integer": "an int > 0",
    "nonneg": "an int >= 0", "integer": "an int", "boolean": "a bool (True or False)",
    "list": "a list", "dict": "a dict", "number": "a number", "float": "a float",
    "positive_number": "a number > 0", "callable": "a Prolog goal", "compound": "a term",
    "ctxrelay_message": "a str or a message dict with role and content",
    "ctxrelay_store": "a store", "acyclic_term": "plain data",
}

_ARGUMENT_CLASSES: dict[str, type[errors.CtxRelayError]] = {
    "session_id": errors.InvalidSessionIdError,
    "content": errors.InvalidContentError, "message": errors.InvalidContentError,
    "role": errors.InvalidRoleError,
}

_CONTEXT_OPERATIONS = ("peek(item(N)), peek(head(N)), peek(tail(N)), "
                       "peek(text(N, Start, Length)), slice(Start, Length) or search(\"query\")")


def _shown(value: Any) -> str:
    if value is None:
        return "None"
    if isinstance(value, str) and value.startswith("@(") and value.endswith(")"):
        return {"@(none)": "None", "@(true)": "True", "@(false)": "False"}.get(value, value)
    if isinstance(value, int) and value.bit_length() > 256:   # repr may refuse (4,300 digits)
        return f"an int of {value.bit_length()} bits"
    shown = repr(value)
    return shown if len(shown) <= 200 else f"{shown[:200]}... ({len(shown):,} characters)"


def _argument(culprit: Any,
              arguments: dict[str, tuple[str, Any]] | None) -> tuple[str | None, Any]:
    """The Python name and value of the argument whose value the error names, if one
    matches (else None and the culprit).  A bool crossed janus as the atom true or
    false and comes back as that text; a NaN is not equal to itself."""
    given = list((arguments or {}).values())
    for name, value in given:
        if value is culprit or (type(value) is type(culprit) and value == culprit):
            return name, value
    # Only one bool (or NaN) may match: with retrieval=True beside max_context_tokens=True
    # the error cannot tell which it is about, so it names neither.
    loose = [(name, value) for name, value in given
             if (isinstance(value, bool) and culprit == ("true" if value else "false"))
             or (isinstance(value, float) and isinstance(culprit, float)
                 and math.isnan(value) and math.isnan(culprit))]
    return loose[0] if len(loose) == 1 else (None, culprit)


def _domain_message(domain: str, culprit: Any, said: str) -> str | None:
    if domain == "positive_input_budget" and isinstance(culprit, dict):
        cap, reserve = culprit.get("effective_cap"), culprit.get("output_reserve")
        margin = culprit.get("safety_margin")
        left = cap - reserve - margin if None not in (cap, reserve, margin) else "no"
        return (f"the policy leaves no room for the input: the effective cap {cap} minus "
                f"output_reserve {reserve} and safety_margin {margin} is {left} tokens; raise "
                "max_context_tokens, or lower output_reserve or safety_margin")
    if domain == "context_operation":
        return f"unknown context operation {culprit}; use {_CONTEXT_OPERATIONS}"
    if domain == "user_message":
        return ("a managed turn answers a user message; store other roles with append(), or "
                "pass them before the user's message in a list to prepare_turn()")
    if domain == "idempotency_key":
        return "key is empty; pass a non-empty string or None"
    if domain == "message_field":
        return (f"a new message has the field {culprit}, which a stored turn does not "
                "keep; pass role, content, name, tool_call_id and metadata (tool calls as "
                "metadata={'tool_calls': [{'id': ..., 'name': ..., 'arguments': ...}]})")
    if domain == "policy_option":
        return f"unknown policy option {culprit}; see ctxrelay.runtime.policy_option_names()"
    return None


def exception(info: dict[str, Any],
              arguments: dict[str, tuple[str, Any]] | None = None) -> errors.CtxRelayError | None:
    """The Python exception for a type, domain or syntax error, or None (not one)."""
    kind, said = info["kind"], str(info.get("said") or "")
    if kind == "syntax_error":
        return errors.InvalidArgumentError(
            f"not valid Prolog syntax ({info.get('what')}); write terms as in "
            "'slice(1, 3)' or 'search(\"quota\")'")
    if kind not in ("type_error", "domain_error"):
        return None
    expected, culprit = str(info.get("expected", "")), info.get("culprit")
    name, culprit = _argument(culprit, arguments)     # as the caller passed it
    where = f"{name}: " if name else ""
    if kind == "type_error":
        wanted = _PY_TYPES.get(expected, expected.replace("_", " "))
        if expected.startswith("oneof([") and expected.endswith("])"):
            names = [n.strip().strip("'") for n in expected[7:-2].split(",")]
            wanted = "one of " + ", ".join(names)
        text = f"{where}expected {wanted}, got {_shown(culprit)}"
    else:
        text = _domain_message(expected, culprit, said) or \
            f"{where}{_shown(culprit)} is not a valid {expected.replace('_', ' ')}"
    if said and said not in text:
        text = f"{text} ({said})"
    cls = _ARGUMENT_CLASSES.get(name or "") or (
        errors.InvalidRoleError if expected == "role" else errors.InvalidArgumentError)
    return cls(text)
