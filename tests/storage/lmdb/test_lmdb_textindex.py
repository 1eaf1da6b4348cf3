"""The LMDB inverted index: tokenisation, BM25 scores, isolation, cost."""
from __future__ import annotations

import math
import random

import lmdb
import pytest

from ctxrelay.errors import InvalidArgumentError
from ctxrelay.storage.lmdb.textindex import TextIndex
from ctxrelay.text.bm25 import STOPWORDS, tokenize


@pytest.fixture
def env(tmp_path):
    environment = lmdb.open(str(tmp_path / "ix.lmdb"), map_size=64 << 20, max_dbs=4)
    yield environment
    environment.close()


@pytest.fixture
def index(env):
    with env.begin(write=True) as txn:
        return TextIndex(env, txn=txn)


def add_all(env, index, namespace, docs):
    with env.begin(write=True) as txn:
        for doc_id, text in docs.items():
            index.add(txn, namespace, doc_id, text)


def search(env, index, namespace, query, **kw):
    with env.begin() as txn:
        return index.search(txn, namespace, query, **kw)


def expected_bm25(docs: dict[int, str], query: str, k1=1.2, b=0.75):
    """BM25 written out from the formula, on whitespace-split lowercase docs."""
    words = {doc_id: text.split() for doc_id, text in docs.items()}
    n = len(docs)
    avgdl = sum(len(w) for w in words.values()) / n
    scores = {}
    for term in dict.fromkeys(query.split()):
        df = sum(1 for w in words.values() if term in w)
        if not df:
            continue
        idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
        for doc_id, w in words.items():
            tf = w.count(term)
            if tf:
                denom = tf + k1 * (1 - b + b * len(w) / avgdl)
                scores[doc_id] = scores.get(doc_id, 0.0) + idf * tf * (k1 + 1) / denom
    return scores


# -- tokenisation -----------------------------------------------------------

def test_tokenize_casefolds_normalises_and_drops_stopwords():
    assert tokenize("The QUICK brown Fox is in the box") == ["quick", "brown", "fox", "box"]
    assert tokenize("Straße STRASSE") == ["strasse", "strasse"]          # casefold
    assert tokenize("ｆｕｌｌ width") == ["full", "width"]                  # NFKC
    assert tokenize("snake_case v2.0 naïve") == ["snake_case", "v2", "0", "naïve"]
    assert tokenize("日本語 テキスト") == ["日本語", "テキスト"]
    assert tokenize("the of and") == []
    assert "the" in STOPWORDS and "quick" not in STOPWORDS


# -- BM25 ---------------------------------------------------------------------

CORPUS = {
    1: "apple banana apple",
    2: "banana cherry",
    3: "cherry cherry cherry date",
    4: "apple date elderberry fig grape",
    5: "fig",
}


@pytest.mark.parametrize("query", ["apple", "cherry", "apple cherry", "banana date fig",
                                   "grape apple apple"])
def test_bm25_scores_match_the_formula(env, index, query):
    add_all(env, index, 7, CORPUS)
    expected = expected_bm25(CORPUS, query)
    got = search(env, index, 7, query, k=10)
    assert [doc for doc, _ in got] == sorted(expected, key=lambda d: (-expected[d], -d))
    for doc_id, score in got:
        assert isinstance(score, float)
        assert score == pytest.approx(expected[doc_id], rel=1e-12)


def test_k_limits_and_ties_prefer_the_higher_doc_id(env, index):
    add_all(env, index, 1, {1: "same words", 2: "same words", 3: "same words", 4: "other"})
    got = search(env, index, 1, "same", k=2)
    assert [doc for doc, _ in got] == [3, 2]
    assert got[0][1] == got[1][1]


def test_empty_and_stopword_queries_return_nothing(env, index):
    add_all(env, index, 1, CORPUS)
    assert search(env, index, 1, "") == []
    assert search(env, index, 1, "the and of") == []
    assert search(env, index, 1, "absentword") == []
    assert search(env, index, 2, "apple") == []           # empty namespace


def test_namespaces_are_isolated(env, index):
    add_all(env, index, 1, {1: "shared text here"})
    add_all(env, index, 2, {1: "shared text here", 2: "only two"})
    assert search(env, index, 1, "shared two") == search(env, index, 1, "shared")
    assert [d for d, _ in search(env, index, 2, "two")] == [2]
    with env.begin() as txn:
        assert index.stats(txn, 1).doc_count == 1
        assert index.stats(txn, 2).doc_count == 2


def test_stats_and_document_lengths(env, index):
    add_all(env, index, 3, {1: "a b c the", 2: "", 3: "word word"})
    with env.begin() as txn:
        stats = index.stats(txn, 3)
        assert (stats.doc_count, stats.total_length) == (3, 4)   # "a", "the" are stopwords
        assert stats.avgdl == pytest.approx(4 / 3)
        assert index.document_length(txn, 3, 1) == 2
        assert index.document_length(txn, 3, 2) == 0
        assert index.document_length(txn, 3, 9) is None


def test_adding_a_document_twice_is_refused(env, index):
    add_all(env, index, 1, {1: "first"})
    with pytest.raises(InvalidArgumentError, match="remove"):
        add_all(env, index, 1, {1: "second"})
    assert [d for d, _ in search(env, index, 1, "first")] == [1]
    assert search(env, index, 1, "second") == []


def test_remove_restores_the_index(env, index):
    add_all(env, index, 1, CORPUS)
    before = search(env, index, 1, "apple cherry")
    with env.begin(write=True) as txn:
        index.add(txn, 1, 99, "apple apple cherry extra")
    assert search(env, index, 1, "apple cherry")[0][0] == 99
    with env.begin(write=True) as txn:
        with pytest.raises(InvalidArgumentError, match="exact text"):
            index.remove(txn, 1, 99, "different words entirely and more")
        assert index.remove(txn, 1, 99, "apple apple cherry extra") is True
        assert index.remove(txn, 1, 99, "apple apple cherry extra") is False
    assert search(env, index, 1, "apple cherry") == before
    assert search(env, index, 1, "extra") == []


def test_terms_longer_than_an_lmdb_key_are_indexed(env, index):
    long_word = "x" * 600
    add_all(env, index, 1, {1: f"{long_word} tail", 2: "x" * 599})
    assert [d for d, _ in search(env, index, 1, long_word)] == [1]
    assert [d for d, _ in search(env, index, 1, "x" * 599)] == [2]


def test_ids_out_of_range_are_refused(env, index):
    with pytest.raises(InvalidArgumentError, match="unsigned 64-bit"):
        add_all(env, index, 1, {-1: "negative"})


def test_accept_is_called_in_rank_order_until_k_accepted(env, index):
    docs = {i: "term " * (1 + i % 4) + "pad " * i for i in range(1, 30)}
    add_all(env, index, 1, docs)
    ranking = [d for d, _ in search(env, index, 1, "term", k=100)]
    calls = []

    def odd_only(doc_id):
        calls.append(doc_id)
        return doc_id % 2 == 1

    got = [d for d, _ in search(env, index, 1, "term", k=3, accept=odd_only)]
    assert got == [d for d in ranking if d % 2 == 1][:3]
    assert calls == ranking[:ranking.index(got[-1]) + 1]


# -- cost: a query reads the postings of its own terms only -----------------

class CountingCursor:
    def __init__(self, cursor, counts):
        self._cursor, self._counts = cursor, counts

    def set_key(self, key):
        self._counts["seeks"] += 1
        return self._cursor.set_key(key)

    def count(self):
        return self._cursor.count()

    def iternext_dup(self, **kw):
        for value in self._cursor.iternext_dup(**kw):
            self._counts["values"] += 1
            yield value

    def __getattr__(self, name):   # any other access would be an unaccounted read
        raise AssertionError(f"search used cursor.{name}, which this test does not count")


class CountingTxn:
    def __init__(self, txn, counts):
        self._txn, self._counts = txn, counts

    def cursor(self, db=None):
        return CountingCursor(self._txn.cursor(db=db), self._counts)

    def get(self, key, default=None, db=None):
        self._counts["gets"] += 1
        return self._txn.get(key, default, db=db)

    def __getattr__(self, name):
        raise AssertionError(f"search used txn.{name}, which this test does not count")


def test_search_reads_only_the_query_terms_postings(env, index):
    rng = random.Random(1234)
    vocabulary = [f"w{i}" for i in range(200)]
    docs = {i: " ".join(rng.choices(vocabulary, k=20)) for i in range(1, 1001)}
    docs[17] += " needle"
    docs[900] += " needle needle haystack"
    add_all(env, index, 5, docs)
    counts = {"seeks": 0, "values": 0, "gets": 0}
    with env.begin() as txn:
        got = index.search(CountingTxn(txn, counts), 5, "needle haystack", k=10)
    assert [d for d, _ in got] == [900, 17]
    # two seeks (one per term), 3 postings read, one get for the namespace stats
    assert counts == {"seeks": 2, "values": 3, "gets": 1}
