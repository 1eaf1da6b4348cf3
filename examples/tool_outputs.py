"""A large tool output goes to the scratch buffer; the pack carries only its summary.

    .venv/bin/python examples/tool_outputs.py --store DIR

Records the result of a SQL tool (a CSV of 400 rows) with
``Runtime.record_tool_output``: the raw output is stored as a blob on disk,
the transcript gets the tool call and a structure-aware summary.  A managed
turn "summarise the query result" then packs the summary, not the rows: the
example prints the scratch id, the summary, and whether any raw row appears
in the provider-visible request, and finally reads the blob back on demand
with ``Runtime.scratch(..., raw=True)``.
"""
from __future__ import annotations

import argparse
import random
import sys
import tempfile
from pathlib import Path

from ctxrelay import Runtime

SESSION = "analytics"
ROWS = 400


def query_result(rows: int = ROWS) -> str:
    rng = random.Random(7)                         # fixed seed: the same CSV every run
    regions = ["eu-west-1", "eu-central-1", "us-east-1", "ap-south-1"]
    lines = ["order_id,region,amount_eur,status"]
    for i in range(1, rows + 1):
        status = "refunded" if rng.random() < 0.05 else "paid"
        lines.append(f"ORD-{100000 + i},{rng.choice(regions)},{rng.randint(5, 900)}.{rng.randint(0, 99):02d},{status}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--store", help="store directory (default: a fresh temporary one)")
    args = parser.parse_args(argv)
    store = Path(args.store) if args.store else Path(tempfile.mkdtemp(prefix="ctxrelay-tools-"))
    print(f"store: {store}")

    raw_csv = query_result()
    data_rows = raw_csv.splitlines()[1:]
    with Runtime(store) as rt:
        if SESSION not in {s.session_id for s in rt.sessions()}:
            rt.create_session(SESSION)
        rt.append(SESSION, "user", "How did orders go last month? Query the orders table.")
        sid = rt.record_tool_output(SESSION, "sql",
                                    {"query": "select order_id, region, amount_eur, status "
                                              "from orders where month = '2024-05'"},
                                    raw_csv)
        entry = rt.scratch(SESSION, sid)
        print(f"scratch id: {sid}")
        print(f"raw output: {len(data_rows)} rows, {len(raw_csv)} characters (kept as a blob)")
        print("summary:")
        for line in str(entry["summary"]).splitlines():
            print(f"  {line}")

        r = rt.managed_turn(SESSION, "summarise the query result",
                            max_context_tokens=2048, output_reserve=256, min_recent_turns=4)
        request = "\n".join(str(m.get("content") or "") for m in r.messages)
        rows_in_request = sum(1 for row in data_rows if row in request)
        print(f"request: {len(r.messages)} messages, ledger total {r.ledger.total} of "
              f"{r.ledger.input_budget}; pack units: "
              + ", ".join(sorted({u.kind for u in r.pack})))
        # The summary quotes a few sample rows (reformatted); count order ids too,
        # so "absent" means: no verbatim CSV line, and only the summary's samples.
        ids_in_request = sum(1 for row in data_rows if row.split(",")[0] in request)
        ids_in_summary = sum(1 for row in data_rows if row.split(",")[0] in str(entry["summary"]))
        print(f"verbatim raw rows in the request: {rows_in_request} of {len(data_rows)}; "
              f"order ids in the request: {ids_in_request} (the summary's samples: {ids_in_summary})")
        print(f"raw rows absent from the request: {rows_in_request == 0 and ids_in_request <= ids_in_summary}")

        raw = rt.scratch(SESSION, sid, raw=True)
        print(f"raw read on demand: {len(raw.splitlines()) - 1} rows, "
              f"identical to the tool output: {raw == raw_csv}")
        if rows_in_request or ids_in_request > ids_in_summary or raw != raw_csv:
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
