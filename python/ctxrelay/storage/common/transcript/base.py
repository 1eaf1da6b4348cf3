"""The parts of a transcript that do not depend on where its turns live.

:class:`TranscriptBase` checks and counts a turn before any back end writes it
(:meth:`~TranscriptBase.check_size`, :meth:`~TranscriptBase._prepare`), names
the tokenizer, and moves sessions in and out as JSONL on top of the back end's
own reads and one write (:meth:`~TranscriptBase._import`).  It sits beside the
transcript's other back-end-neutral modules (``records``, ``jsonl``), which every
back end imports from here.
"""
from __future__ import annotations

import json
import os
from typing import Any, TextIO

from ctxrelay.errors import ImportFormatError, InvalidArgumentError, TurnTooLargeError
from ctxrelay.storage.common.transcript import jsonl
from ctxrelay.storage.common.transcript.records import (DEFAULT_TOKENIZER, ESTIMATE_TOKENIZER,
                                                      FORMAT, Pending, TokenCounter,
                                                      default_token_counter, load_encoding)
from ctxrelay.storage.validation import (check_content, check_optional_str, check_role,
                                         check_session_id, normalise_metadata,
                                         normalise_timestamp)

__all__ = ["TranscriptBase"]


class TranscriptBase:
    """What every :class:`~ctxrelay.storage.interfaces.transcript.Transcript` back end
    shares.  A back end sets ``_max_turn_bytes`` and ``_token_counter`` and supplies
    :meth:`session`, :meth:`iter_turns`, :meth:`repair_derived` and :meth:`_import`."""

    _max_turn_bytes: int
    _token_counter: TokenCounter | None

    @property
    def tokenizer_name(self) -> str:
        if self._token_counter is not None:
            return str(getattr(self._token_counter, "name", None)
                       or getattr(self._token_counter, "__name__", "custom"))
        return DEFAULT_TOKENIZER if load_encoding() is not None else ESTIMATE_TOKENIZER

    @property
    def max_turn_bytes(self) -> int:
        """The largest turn content this store accepts, in UTF-8 bytes."""
        return self._max_turn_bytes

    # -- one turn, before any write -------------------------------------------------

    def check_size(self, content: str) -> None:
        """Refuse content over ``max_turn_bytes`` (UTF-8) before any other work.

        @raises TurnTooLargeError naming the size and the limit."""
        # Characters bound the bytes from below and 4x above: most texts need no encoding.
        if len(content) * 4 <= self.max_turn_bytes:
            return
        size = len(content.encode("utf-8", "surrogatepass"))
        if size > self.max_turn_bytes:
            raise TurnTooLargeError(
                f"a turn of {size:,} bytes is over this store's limit of "
                f"{self.max_turn_bytes:,} bytes (max_turn_bytes); store large outputs "
                "with record_tool_output (a blob, summarised in context), split the text, "
                "or open the store with a larger max_turn_bytes")

    def _count_tokens(self, content: str) -> tuple[int, bool]:
        counter = self._token_counter or default_token_counter
        result = counter(content)
        if (not isinstance(result, tuple) or len(result) != 2
                or isinstance(result[0], bool) or not isinstance(result[0], int)
                or result[0] < 0):
            raise InvalidArgumentError(
                f"token_counter returned {result!r}; it must return "
                "(count: int >= 0, exact: bool)")
        return result[0], bool(result[1])

    def _prepare(self, role: Any, content: Any, *, name: Any = None, tool_call_id: Any = None,
                 metadata: Any = None, timestamp: Any = None, key: Any = None) -> Pending:
        """One turn checked and counted, ready for the back end's write."""
        if isinstance(content, str):
            self.check_size(content)
        fields = dict(
            role=check_role(role), content=check_content(content),
            name=check_optional_str(name, "name"),
            tool_call_id=check_optional_str(tool_call_id, "tool_call_id"),
            metadata=normalise_metadata(metadata),
            timestamp=normalise_timestamp(timestamp),
            key=check_optional_str(key, "key", empty_ok=False))
        # Count last: a turn that fails validation costs no tokenizer call.
        tokens, exact = self._count_tokens(fields["content"])
        return Pending(**fields, tokens=tokens, tokens_exact=exact)

    # -- what a back end supplies ---------------------------------------------------

    def _import(self, session_id: str, header: jsonl.Header, pending: list[Pending]) -> None:
        """Create ``session_id`` from an imported ``header`` (its creation time,
        metadata, archived flag) with the ``pending`` turns, in one write."""
        raise NotImplementedError

    def rebuild_search_index(self, session_id: str) -> Any:
        """:meth:`repair_derived` under the name the consistency command uses."""
        return self.repair_derived(session_id)

    # -- export / import --------------------------------------------------------------

    def export_jsonl(self, session_id: str,
                     dest: str | os.PathLike[str] | TextIO | None = None) -> str | None:
        """One JSON object per line: the session header, then every turn.

        Returns the text when ``dest`` is None; otherwise writes it to the path
        (atomically: temp file + rename) or file object and returns None.
        """
        info = self.session(session_id)
        header = {"type": "session", "format": FORMAT.decode(), **info.to_dict()}
        lines = [json.dumps(header, ensure_ascii=False)]
        for turn in self.iter_turns(session_id, 1, info.turn_count):
            lines.append(json.dumps({"type": "turn", **turn.to_dict()}, ensure_ascii=False))
        text = "".join(line + "\n" for line in lines)
        if dest is None:
            return text
        jsonl.write_text(dest, text)
        return None

    def import_jsonl(self, source: str | os.PathLike[str] | TextIO, *,
                     session_id: str | None = None) -> str:
        """Create a session from :meth:`export_jsonl` output; returns its id.

        ``source`` is a path, a file object, or the JSONL text itself (a str
        that :func:`~ctxrelay.storage.common.transcript.jsonl.is_jsonl_text` says is
        text: blank, starting with ``{``, or with a line break).  The whole
        file is checked first and written in one transaction: a bad file
        leaves the store unchanged.  Token counts are recomputed with this
        store's tokenizer.
        """
        if session_id is not None:
            session_id = check_session_id(session_id)
        header, lines = jsonl.parse_jsonl(jsonl.read_source(source))
        new_id = session_id if session_id is not None else header.session_id
        if new_id is None:
            raise ImportFormatError(
                "line 1: the header has no session_id; pass session_id= to "
                "import_jsonl")
        pending = [jsonl.guard(number, lambda f=fields: self._prepare(**f))
                   for number, fields in lines]
        self._import(new_id, header, pending)
        return new_id
