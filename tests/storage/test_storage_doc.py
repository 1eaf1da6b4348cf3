"""docs/storage.md: its example runs as written and prints what the text says."""
from __future__ import annotations

import re
import subprocess
import sys

from support import ROOT


def test_the_example_of_docs_storage_md_runs():
    text = (ROOT / "docs" / "storage.md").read_text(encoding="utf-8")
    [code] = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=120,
                          env={"PYTHONPATH": str(ROOT / "python"), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["1", "None", "True"]
