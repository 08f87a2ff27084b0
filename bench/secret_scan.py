"""The secret scan on a 1 MB tool output: every encoded form vs the old exact-value scan.

Side by side in one process, over a realistic secret set (five key-like variables):
the old scan (``value in text`` per secret), the new ``find`` on clean text (the common
case: nothing found) and ``redact`` on text holding a base64 copy of one key. Prints the
times and the ratios new/old. Run: ``python bench/secret_scan.py``.
"""

from __future__ import annotations

import base64
import random
import string
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ipyagent.trust.secrets import SecretScanner


def best_of(fn, repeat: int = 7) -> float:  # type: ignore[no-untyped-def]
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main() -> None:
    rng = random.Random(0)
    alphabet = string.ascii_letters + string.digits
    secrets = {f"SERVICE{i}_API_KEY": "sk-" + "".join(rng.choices(alphabet, k=40)) for i in range(5)}
    lines = ("".join(rng.choices(alphabet + "     ", k=rng.randint(20, 120))) for _ in range(20_000))
    clean = "\n".join(lines)[:1_000_000]
    leaky = clean[:500_000] + base64.b64encode(secrets["SERVICE3_API_KEY"].encode()).decode() + clean[500_000:]

    def old() -> None:
        for value in secrets.values():
            _ = value in clean

    built = time.perf_counter()
    scan = SecretScanner(secrets)
    built = time.perf_counter() - built
    t_old = best_of(old)
    t_find = best_of(lambda: scan.find(clean))
    t_redact = best_of(lambda: scan.redact(leaky))
    assert scan.find(clean) is None and "SERVICE3" in scan.redact(leaky)[0]
    print(f"1 MB of output, {len(secrets)} secrets; forms precomputed once in {built * 1e3:.2f} ms")
    print(f"  old exact scan      {t_old * 1e3:8.2f} ms")
    print(f"  new find (clean)    {t_find * 1e3:8.2f} ms   ×{t_find / t_old:.1f} the old")
    print(f"  new redact (leak)   {t_redact * 1e3:8.2f} ms   ×{t_redact / t_old:.1f} the old")


if __name__ == "__main__":
    main()
