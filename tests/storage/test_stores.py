"""open_stores and Stores: one object per store, opened by a spec, shared and counted."""
from __future__ import annotations

from pathlib import Path

import pytest

from ctxrelay import Runtime
from ctxrelay.bridge import engine
from ctxrelay.errors import InvalidArgumentError, StoreError
from ctxrelay.storage import Stores, find_stores, open_stores
from ctxrelay.storage.spec import parse_store_spec


# -- specs ------------------------------------------------------------------------------

def test_a_directory_and_its_lmdb_url_are_one_store(tmp_path):
    with open_stores(tmp_path / "s") as by_dir, \
            open_stores(f"lmdb://{tmp_path / 's'}") as by_url:
        assert by_url is by_dir
        (tmp_path / "link").symlink_to(tmp_path / "s")
        with open_stores(str(tmp_path / "link")) as by_link:
            assert by_link is by_dir
    assert (tmp_path / "s" / "transcript.lmdb").is_dir()


@pytest.mark.parametrize("spec, match", [
    ("mysql://db/ctx", r"no store back end for mysql://.*supported: lmdb://, postgres://"),
    ("redis://localhost", r"no store back end for redis://"),
    ("lmdb://relative/dir", r"absolute path .* lmdb:///abs/dir"),
    ("", "the store spec is empty"),
    ("  ", "the store spec is empty"),
    ("\ud800dir", "lone surrogate U\\+D800"),
    (b"/tmp/x", "not bytes"),
    (42, "not int"),
])
def test_bad_specs_raise_before_anything_is_created(tmp_path, monkeypatch, spec, match):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InvalidArgumentError, match=match):
        open_stores(spec)
    assert list(tmp_path.iterdir()) == []


def test_cache_specs(tmp_path):
    with open_stores(tmp_path / "s", cache="memory://") as stores:
        assert stores.cache_spec.scheme == "memory"
        with pytest.raises(InvalidArgumentError,
                           match=r"no cache back end for memcached://.*memory://, redis://"):
            open_stores(tmp_path / "t", cache="memcached://localhost")
        with open_stores(tmp_path / "s") as again:          # None: whatever it is open with
            assert again is stores


def test_a_back_end_registered_for_a_scheme_opens_its_specs(tmp_path, monkeypatch):
    from ctxrelay.storage import spec as spec_mod
    from ctxrelay.storage.lmdb.backend import LmdbBackend
    opened = []

    def opener(spec, *, map_size=None, max_turn_bytes=None):
        opened.append(spec.scheme)
        return LmdbBackend(spec_mod.StoreSpec("lmdb", str(tmp_path / "x"), spec.text,
                                              spec.key), map_size=map_size)
    monkeypatch.setitem(spec_mod._backends, "testdb", opener)
    with open_stores("testdb://anything") as stores:
        assert opened == ["testdb"] and stores.spec.key == "testdb://anything"
        assert stores.transcript.path == str(tmp_path / "x")
    assert parse_store_spec("testdb://anything").location == "anything"


# -- one object per store, counted ---------------------------------------------------------

def test_references_are_counted_and_the_last_close_closes_the_parts(tmp_path):
    first = open_stores(tmp_path / "s")
    second = open_stores(tmp_path / "s")
    assert second is first and find_stores(tmp_path / "s") is first
    transcript = first.transcript
    assert first.close() is False                  # another holder is left
    transcript.create_session("a")                 # still usable
    assert second.close() is True
    assert first.closed and transcript.closed and find_stores(tmp_path / "s") is None
    with pytest.raises(StoreError, match="closed"):
        first.scratch
    with open_stores(tmp_path / "s") as reopened:   # a new object, the same data
        assert reopened is not first
        assert reopened.transcript.has_session("a")


def test_two_runtimes_on_one_directory_share_it_and_closing_one_never_breaks_the_other(tmp_path):
    # Issue 15, point 5: the second Runtime used to close the store under the first.
    first = Runtime(tmp_path / "s")
    first.create_session("a")
    second = Runtime(tmp_path / "s")
    second.append("a", "user", "from the second")
    second.close()
    assert first.append("a", "user", "from the first") == 2
    assert [t.content for t in first.history("a")] == ["from the second", "from the first"]
    assert first.recent("a", 2) == first.last("a", 2)
    # The default store of the embedded Prolog is still the first Runtime's.
    assert engine.once("ctxrelay:turn_count(default, a, N)", {})["N"] == 2
    first.close()
    assert find_stores(tmp_path / "s") is None


def test_a_second_open_may_repeat_the_limits_but_not_change_them(tmp_path):
    # A relay's --max-turn-bytes on a store a Runtime had open was taken without a
    # word and never applied: the store kept the first limit.
    first = Runtime(tmp_path / "s", max_turn_bytes=4096)
    first.create_session("a")
    with pytest.raises(InvalidArgumentError,
                       match=r"already open in this process with max_turn_bytes 4096"):
        Runtime(tmp_path / "s", max_turn_bytes=8192)
    with pytest.raises(InvalidArgumentError, match=r"ring_entries \d+"):
        open_stores(tmp_path / "s", ring_entries=3)
    same = Runtime(tmp_path / "s", max_turn_bytes=4096)     # the same limit, or none
    unsaid = Runtime(tmp_path / "s")
    assert unsaid._store.limits()["max_turn_bytes"] == 4096
    same.close()
    unsaid.close()
    # The refusals took no reference: the first close closes the store.
    first.append("a", "user", "x" * 4000)
    first.close()
    assert find_stores(tmp_path / "s") is None
    with Runtime(tmp_path / "s", max_turn_bytes=8192) as reopened:  # closed: a new limit
        reopened.append("a", "user", "y" * 8000)
        assert [len(t.content) for t in reopened.history("a")] == [4000, 8000]


def test_the_dir_alias_names_the_open_store_without_holding_it(tmp_path):
    with Runtime(tmp_path / "s") as rt:
        rt.create_session("a")
        engine.once("ctxrelay:turn_append(dir(D), a, message(user, \"hi\"), _)",
                    {"D": str(tmp_path / "s")})
        assert rt.turn_count("a") == 1
    assert find_stores(tmp_path / "s") is None      # the alias took no reference


# -- parts opened on first use, never created by a read ---------------------------------------

def test_read_paths_create_no_part(tmp_path):
    store = tmp_path / "s"
    with Runtime(store) as rt:
        rt.create_session("a")
        rt.append("a", "user", "hello about etcd")
        assert rt.recent("a", 1)[0].content == "hello about etcd"
        assert rt.artifacts("a") == [] and rt.scratch_entries("a") == []
        rt.assemble("a", "and etcd?", embedder="hashing", warm=True, knowledge=True)
    assert sorted(p.name for p in store.iterdir()) == ["rolling", "transcript.lmdb", "turnlog"]
    with open_stores(store) as stores:
        assert stores.warm_if_present() is None and stores.scratch_if_present() is None
        assert stores.facts_if_present() is None
        assert not stores.has("warm") and stores.has("turnlog")
        with pytest.raises(InvalidArgumentError, match="no store part 'blobs'"):
            stores.has("blobs")
    assert sorted(p.name for p in store.iterdir()) == ["rolling", "transcript.lmdb", "turnlog"]


def test_each_part_is_an_attribute_of_the_one_object(tmp_path):
    with open_stores(tmp_path / "s") as stores:
        assert isinstance(stores, Stores)
        parts = [stores.transcript, stores.turnlog, stores.warm, stores.scratch,
                 stores.rolling, stores.cache]
        assert all(p is not None for p in parts)
        assert stores.warm is parts[2] and stores.scratch_if_present() is parts[3]
        assert {p.name for p in Path(tmp_path / "s").iterdir()} >= {"warm", "scratch",
                                                                     "turnlog", "rolling"}
    assert all(p.closed for p in parts[:4])


def test_state_of_a_layer_above_is_made_once_and_closed_with_the_store(tmp_path):
    closed = []

    class Thing:
        def __init__(self, stores):
            self.stores = stores

        def close(self):
            closed.append(self)

    with open_stores(tmp_path / "s") as stores:
        thing = stores.state("thing", Thing)
        assert stores.state("thing", Thing) is thing and thing.stores is stores
    assert closed == [thing]
