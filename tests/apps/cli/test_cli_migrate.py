"""``ctxrelay migrate``: a store copied to PostgreSQL and back loses nothing."""
from __future__ import annotations

import json

import pytest
from cli_support import run  # noqa: F401  (the fixture)

from ctxrelay.storage import close_all, open_stores
from ctxrelay.storage.migrate import session_checksum


def _fill(spec: str) -> None:
    with open_stores(spec) as stores:
        t = stores.transcript
        t.create_session("ops", metadata={"team": "sre", "tags": ["a", 1]})
        t.append("ops", "system", "you are terse")
        t.append("ops", "user", "our etcd quota is 8 GiB", key="m1",
                 metadata={"source": "cli"}, timestamp="2024-05-01T12:00:00+02:00")
        t.append("ops", "assistant", "noted\x00 with a NUL and \u2028 a separator", name="bot")
        t.append("ops", "tool", "pod-1 Running", name="kubectl", tool_call_id="call_1",
                 key="k-tool")
        t.create_session("archived one")
        t.append_many("archived one", [{"role": "user", "content": f"turn {i}"}
                                       for i in range(300)])
        t.archive_session("archived one")
        t.create_session("empty")


def _everything(spec: str) -> dict:
    """Every session and turn of a store, every field (timestamps included)."""
    with open_stores(spec) as stores:
        t = stores.transcript
        return {info.session_id: (info, t.history(info.session_id),
                                  {k: t.turn_for_key(info.session_id, k)
                                   for k in ("m1", "k-tool", "absent")},
                                  session_checksum(t, info.session_id))
                for info in t.sessions()}


@pytest.fixture
def pg(pg_schema):
    return pg_schema[0]


def test_a_store_goes_to_postgres_and_back_unchanged(run, tmp_path, pg):
    source, back = str(tmp_path / "source"), str(tmp_path / "back")
    _fill(source)
    close_all()
    rc, out, err = run("--json", "migrate", "--from", source, "--to", pg, store=None)
    assert rc == 0, err
    report = json.loads(out)
    assert (report["sessions"], report["turns"]) == (3, 304)
    rc, out, err = run("--json", "migrate", "--from", pg, "--to", back, store=None)
    assert rc == 0, err
    assert json.loads(out)["checksum"] == report["checksum"]
    want = _everything(source)
    assert _everything(pg) == want and _everything(back) == want
    assert want["archived one"][0].archived and want["ops"][1][2].content.startswith("noted\x00")


def test_a_target_holding_a_source_session_is_refused_before_any_copy(run, tmp_path, pg):
    source = str(tmp_path / "source")
    _fill(source)
    with open_stores(pg) as stores:
        stores.transcript.create_session("empty")
    close_all()
    rc, _, err = run("migrate", "--from", source, "--to", pg, store=None)
    assert rc == 2 and "already holds 1 of the source's sessions" in err
    with open_stores(pg) as stores:
        assert [s.session_id for s in stores.transcript.sessions()] == ["empty"]


def test_the_report_gives_counts_and_a_checksum_per_part(run, tmp_path, pg):
    """Warm artifacts and scratch entries travel too; the printed report has one line
    per part (counts, checksum) and the JSON report the same figures both ways."""
    source, back = str(tmp_path / "source"), str(tmp_path / "back")
    _fill(source)
    with open_stores(source) as stores:
        stores.warm.publish("ops", 1, 2, "Terse, then the quota.", key="w1")
        stores.warm.publish("ops", 1, 2, "The etcd quota is 8 GiB.")
        stores.scratch.put("ops", "kubectl", {"get": "pods"}, b"pod-1 Running\x00", pinned=True)
    close_all()
    rc, out, err = run("migrate", "--from", source, "--to", pg, store=None)
    assert rc == 0, err
    lines = {line.split()[0]: line for line in out.splitlines()[1:-1]}
    assert set(lines) == {"transcript", "facts", "warm", "scratch"}
    assert "sessions 3, turns 304, keys 2;" in lines["transcript"]
    assert "sessions 1, items 2, bytes 0;" in lines["warm"]
    assert "sessions 1, items 1, bytes 14;" in lines["scratch"]
    close_all()
    rc, out, err = run("--json", "migrate", "--from", pg, "--to", back, store=None)
    assert rc == 0, err
    parts = json.loads(out)["parts"]
    assert parts["scratch"]["items"] == 1 and parts["warm"]["items"] == 2
    assert parts["warm"]["checksum"][:16] in lines["warm"]
    assert parts["scratch"]["checksum"][:16] in lines["scratch"]
    with open_stores(back) as stores:
        entry, = stores.scratch.list("ops")
        assert stores.scratch.raw("ops", entry.scratch_id) == b"pod-1 Running\x00"
        assert [a.version for a in stores.warm.versions("ops", 1, 2)] == [1, 2]
