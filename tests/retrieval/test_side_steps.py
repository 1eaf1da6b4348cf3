"""The steps an assembly runs on the side pool give the recorded packs whenever they run.

While Prolog analyses the message, the side pool ranks the older turns, builds
their units and runs Tier P's ANN search ahead (ctxrelay.retrieval.candidates).
On a busy machine the side thread may not have started them when gather() comes:
gather() then cancels what has not started and does it itself.  Either way the
packs are the ones ``pack_identity.json`` records, and so they are with the steps
in the caller's thread (the module's switches) and with Tier P beside the history.
"""
from __future__ import annotations

import json
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest
from ctxrelay import Runtime
from ctxrelay.retrieval import candidates

from test_pack_identity import RECORD, _corpus, _fixed_fact_ids, _packs, _same  # noqa: F401


class _LatePool:
    """A side pool whose first-stage tasks run only when the next gather() has begun
    (the side thread had no core while Prolog analysed the message); what gather()
    itself submits (Tier P's fetch, with ``TIER_P_BESIDE_RECALL``) runs at once."""

    def __init__(self) -> None:
        self.queued: list[Any] = []
        self.ran = 0
        self.in_gather = False

    def submit(self, fn: Any, *args: Any, **kwargs: Any) -> Future:
        future: Future = Future()
        if not self.in_gather:
            self.queued.append((fn, args, kwargs))
            return future
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as exc:        # noqa: BLE001 - as a pool would hand it over
            future.set_exception(exc)
        return future

    def run_queued(self) -> None:
        queued, self.queued = self.queued, []
        for fn, args, kwargs in queued:
            fn(*args, **kwargs)
            self.ran += 1


@pytest.mark.parametrize("switches", [
    dict(RECALL_BESIDE_ANALYSIS=False, RETRIEVE_BESIDE_ANALYSIS=False,
         TIER_P_BESIDE_RECALL=False),
    dict(RECALL_BESIDE_ANALYSIS=True, RETRIEVE_BESIDE_ANALYSIS=False,
         TIER_P_BESIDE_RECALL=True),
    dict(RECALL_BESIDE_ANALYSIS=True, RETRIEVE_BESIDE_ANALYSIS=True,
         TIER_P_BESIDE_RECALL=False),
], ids=["caller-thread", "tier-p-beside", "units-beside"])
def test_the_switches_give_the_recorded_packs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              switches: dict[str, bool]) -> None:
    for name, value in switches.items():
        monkeypatch.setattr(candidates, name, value)
    want = json.loads(RECORD.read_text())
    with Runtime(tmp_path / "store") as rt:
        _corpus(rt)
        _same(_packs(rt), want, f"with {switches}")


@pytest.mark.parametrize("units_beside", [False, True])
def test_side_steps_not_started_by_gather_are_done_there(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch,
                                                         units_beside: bool) -> None:
    monkeypatch.setattr(candidates, "RETRIEVE_BESIDE_ANALYSIS", units_beside)
    pool = _LatePool()
    monkeypatch.setattr(candidates, "_side_pool", lambda: pool)
    gather = candidates.gather

    def gather_then_let_the_side_run(cands: Any, stores: Any, options: Any) -> Any:
        pool.in_gather = True
        try:
            return gather(cands, stores, options)
        finally:
            pool.in_gather = False
            pool.run_queued()          # too late: each step finds itself cancelled
    monkeypatch.setattr(candidates, "gather", gather_then_let_the_side_run)
    want = json.loads(RECORD.read_text())
    with Runtime(tmp_path / "store") as rt:
        _corpus(rt)
        _same(_packs(rt), want, "side steps late")
    assert pool.ran > 0
