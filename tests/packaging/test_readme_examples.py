"""The README's Python examples run as written against the testbed's NFS-Ganesha (only its address
differs from the README's 127.0.0.1:2049)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

from pynfsrdma._testbed import Ganesha

README = Path(__file__).resolve().parents[2] / "README.md"


def python_examples() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), re.S)


def test_the_readme_python_examples_run_as_written(ganesha: Ganesha, tmp_path: Path) -> None:
    examples = python_examples()
    assert len(examples) >= 3
    root = Path(ganesha.export_dir)
    try:
        outputs = []
        for i, code in enumerate(examples):
            assert "127.0.0.1:2049" in code
            script = code.replace("127.0.0.1:2049", f"{ganesha.host}:{ganesha.port}")
            script = script.replace('port=2049', f"port={ganesha.port}")
            p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                               cwd=tmp_path)
            assert p.returncode == 0, f"example {i + 1}:\n{code}\n{p.stderr}"
            outputs.append(p.stdout)
        assert "{'name': 'a', 'n': '1'}" in outputs[0] and "/data [] ['rows.csv']" in outputs[0]
        assert outputs[1].startswith("b'hello'")
        assert outputs[2].splitlines()[0] == str(sum(i * i for i in range(1000)))
        assert (root / "data/squares.csv").read_text().startswith("x,y\n0,0\n")
    finally:
        for name in ("data", "hello.txt"):
            target = root / name
            if target.is_dir():
                shutil.rmtree(target)
            elif target.exists():
                target.unlink()
