"""What a CLI start and a node process import: neither loads the data stack (numpy, pandas,
pyarrow, pyspark), which costs a second or more of CPU per process. A hundred node processes
start on two cores, and every `testbed` command starts the CLI."""

from __future__ import annotations

import subprocess
import sys

import pytest

HEAVY = ("numpy", "pandas", "pyarrow", "pyspark", "scipy")


@pytest.mark.parametrize("module", ["testbed.cli", "nodes.__main__"])
def test_starting_imports_no_data_stack(module: str) -> None:
    code = (f"import sys, {module}\n"
            f"print(' '.join(m for m in {HEAVY!r} if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "", f"{module} imports {proc.stdout.strip()}"
