"""Compile tests/fake_nvml/fake_nvml.c into a libnvidia-ml.so.1 with the system compiler."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

SOURCE = Path(__file__).with_name("fake_nvml.c")
SONAME = "libnvidia-ml.so.1"


class BuildError(RuntimeError):
    """The fake library could not be compiled (no compiler, or a compile error)."""


def compiler() -> str | None:
    """The C compiler to use ($CC, cc or gcc), or None when the host has none."""
    for name in (os.environ.get("CC"), "cc", "gcc"):
        if name and shutil.which(name):
            return name
    return None


def build(out_dir: Path) -> Path:
    """Build the fake into out_dir/<hash>/libnvidia-ml.so.1 (reused if the source is unchanged)."""
    cc = compiler()
    if cc is None:
        raise BuildError("no C compiler found (set $CC or install cc/gcc)")
    digest = hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:16]
    lib = out_dir / digest / SONAME
    if lib.exists():
        return lib
    lib.parent.mkdir(parents=True, exist_ok=True)
    tmp = lib.with_suffix(".tmp")
    cmd = [
        cc,
        "-shared",
        "-fPIC",
        "-O2",
        "-Wall",
        "-Wextra",
        "-Werror",
        "-fvisibility=hidden",
        f"-Wl,-soname,{SONAME}",
        "-o",
        str(tmp),
        str(SOURCE),
        "-lm",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise BuildError(f"{' '.join(cmd)} failed:\n{proc.stderr}")
    tmp.replace(lib)
    return lib


if __name__ == "__main__":
    import sys

    print(build(Path(sys.argv[1] if len(sys.argv) > 1 else "build/fake_nvml")))
