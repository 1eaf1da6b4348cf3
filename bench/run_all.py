"""make bench: run every benchmark; each writes its JSON under bench/results/."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
BENCHES = ["packer_bench.py", "primitives_bench.py", "storage_bench.py", "ckf_bench.py", "intent_bench.py",
           "assembly_bench.py", "e2e_bench.py", "turn_cost.py", "startup_bench.py", "locomo.py",
           "soak_bench.py"]


def main() -> int:
    failed = []
    for name in BENCHES:
        print(f"== {name}", flush=True)
        rc = subprocess.call([sys.executable, str(HERE / name)], cwd=HERE.parent)
        if rc:
            failed.append(name)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    print(f"results in {HERE / 'results'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
