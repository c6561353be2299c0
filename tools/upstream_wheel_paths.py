"""Write the file paths of electronmicroscopy's ``quantem`` wheel, one a line.

The list is the fixture of ``tests/test_wheel_namespace.py``, which checks that this
project's wheel ships none of them (so installing both never overwrites a file).

    python tools/upstream_wheel_paths.py 0.1.10 > tests/data/quantem-0.1.10-wheel-paths.txt
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("version", help="the quantem release, e.g. 0.1.10")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
             f"quantem=={args.version}", "-d", tmp],
            check=True,
        )
        (wheel,) = Path(tmp).glob("quantem-*.whl")
        names = sorted(zipfile.ZipFile(wheel).namelist())
    print("\n".join(names))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
