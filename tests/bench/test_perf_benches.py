"""The performance benches docs/latency.md gives run and write what the doc reads.

Tiny sizes, and no figure is asserted (speed is proven by the benches' JSON, never
by timing asserts): only that each bench runs end to end and records the fields
the doc quotes.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run_bench(args: list[str], timeout: int = 900) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "python"))
    out = subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=ROOT,
                         env=env, timeout=timeout)
    assert out.returncode == 0, out.stderr[-3000:]


@pytest.mark.slow
def test_e2e_bench_runs_both_sides_and_writes_ratios(tmp_path):
    # This checkout as its own baseline, so the test needs no other checkout.
    out = tmp_path / "e2e"
    run_bench(["bench/e2e_bench.py", "--sizes", "120", "--repeat", "4", "--warmup", "1",
               "--baseline", str(ROOT), "--out", str(out)])
    data = json.loads(out.with_suffix(".json").read_text())
    assert data["command"].startswith(".venv/bin/python bench/e2e_bench.py --sizes 120 ")
    row = data["results"]["120"]
    for side in ("baseline", "new"):
        assert row[side]["total"]["n"] == 4
        assert row[side]["without_message_embedding"]["p50_ms"] > 0
        assert row[side]["pack_units"] > 0
    assert set(row["ratio_new_over_baseline"]["total"]) == {"p50_ms", "p95_ms", "mean_ms"}
    # The baseline's real commit is recorded, and the target is judged only
    # against e858172 (this checkout as its own baseline is not it).
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short=7", "HEAD"],
                          capture_output=True, text=True).stdout.strip()
    assert data["baseline_commit"] == head
    assert data["target_met"] is None


@pytest.mark.slow
def test_e2e_bench_reopens_the_stores_it_kept(tmp_path):
    # --store-cache: the second run reopens each side's store instead of building it.
    args = ["bench/e2e_bench.py", "--sizes", "80", "--repeat", "2", "--warmup", "1",
            "--baseline", str(ROOT), "--store-cache", str(tmp_path / "stores")]
    rows = []
    for run in ("first", "second"):
        run_bench(args + ["--out", str(tmp_path / run)])
        rows.append(json.loads((tmp_path / f"{run}.json").read_text())["results"]["80"])
    for side in ("baseline", "new"):
        assert rows[0][side]["build_s"]["reused"] is False
        assert rows[1][side]["build_s"]["reused"] is True
        assert rows[1][side]["pack_units"] == rows[0][side]["pack_units"]
        assert (tmp_path / "stores" / side / "store-80" / ".built").exists()


@pytest.mark.slow
def test_turn_cost_bench_times_every_stage(tmp_path):
    out = tmp_path / "turn_cost"
    run_bench(["bench/turn_cost.py", "--turns", "60", "--rounds", "4", "--embedder", "hashing",
               "--relay", "--compare-whole", "--out", str(out)])
    data = json.loads(out.with_suffix(".json").read_text())
    # 4 warm-up rounds + 4, two turns each, in the Runtime; through the relay two relay
    # turns a round (the reply's vector bounded by the rule, and embedded whole)
    assert data["turns_after"] == 60 + 2 * 8 + 2 * 2 * 8
    assert data["relay"]["cpu"]["relay_turn"]["n"] == 4
    assert data["relay"]["cpu"]["relay_turn_reply_whole"]["n"] == 4
    assert data["relay"]["ratio_relay_turn_over_assemble"] > 0
    assert data["relay"]["ratio_relay_turn_reply_whole_over_assemble"] > 0
    assert data["assistant_words_embedded"] is None     # hashing embeds replies whole
    for stage in ("assemble", "managed_turn", "split_turn", "prepare", "provider", "commit"):
        assert data["cpu"][stage]["n"] == 2
    assert data["ratio_managed_turn_over_assemble"] > 0
    inside = data["stages_in_split_turn_mean_cpu_ms"]
    # The commit stores two turns and derives their entries: those parts took time.
    assert inside["commit"]["transcript"] > 0 and inside["commit"]["turnlog"] > 0
    assert set(inside["prepare"]) == {"embedding", "transcript", "turnlog", "references",
                                      "promotion", "rest"}


@pytest.mark.slow
def test_startup_bench_reports_commands_embedders_and_first_turn(tmp_path):
    out = tmp_path / "startup"
    run_bench(["bench/startup_bench.py", "--runs", "1", "--turn-runs", "1", "--out", str(out)],
              timeout=1200)
    data = json.loads(out.with_suffix(".json").read_text())
    assert set(data["commands"]) == {"ctxrelay --help", "ctxrelay sessions",
                                     "ctxrelay history ops --last 5",
                                     "ctxrelay search ops quota", "ctxrelay stats"}
    # A store command that imported an embedder's library would be listed here.
    assert all(c["heavy_modules_imported"] == [] for c in data["commands"].values())
    assert data["relay_start_s"]["readyz_s_median"] > 0
    assert "numpy" not in data["commands"]["ctxrelay sessions"]["also_imported"]
    assert data["embedder_cold_start_ms"]["minilm-onnx"]["first_embed_ms"] > 0
    assert data["first_semantic_turn_of_a_process_ms"]["first_turn_ms"] > 0


@pytest.mark.slow
def test_offload_bound_answers_recall_and_tier_p_from_the_fill(tmp_path):
    # The bound holds only if the free side really answered every recall and Tier P
    # plan from the fill's record: a key that drifted would compute and count a miss.
    out = tmp_path / "bound"
    run_bench(["bench/offload_bound.py", "--dir", str(tmp_path / "store"), "--size", "150",
               "--repeat", "4", "--warmup", "1", "--out", str(out)])
    data = json.loads(out.with_suffix(".json").read_text())
    assert data["recorded_answers"]["recall"] >= 5
    assert data["recorded_answers"]["tier_p"] >= 1
    assert data["free_misses"] == {"recall": 0, "tier_p": 0}
    assert {side: data["results"][side]["n"] for side in ("control", "free")} == \
        {"control": 4, "free": 4}
    assert set(data["ratio_free_over_control"]) == {"p50_ms", "p95_ms", "mean_ms"}
