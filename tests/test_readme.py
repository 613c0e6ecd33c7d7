"""The README's Python example runs and prints what the README says it prints."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_readme_python_example_prints_what_it_claims(tmp_path: Path) -> None:
    text = (ROOT / "README.md").read_text()
    code = re.search(r"## A first chain from Python\n\n```python\n(.*?)```", text, re.S)
    assert code, "README lost its Python example"
    script = tmp_path / "example.py"
    script.write_text(code.group(1))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         cwd=tmp_path, timeout=60)
    assert out.returncode == 0, out.stderr
    claimed = re.findall(r"# (suspended .*|\{'ids'.*)$", code.group(1), re.M)
    assert out.stdout.splitlines() == claimed
