"""What ``%load_ext ipyagent`` costs the user's kernel: time to return, and memory added.

Measured in fresh kernels (one per repetition), side by side with ``%load_ext autoreload``
(IPython's own extension, the floor for "loading an extension"):

* time: wall-clock of the ``%load_ext`` call inside the kernel (the sibling kernel starts in
  the background, so this is what the user waits for);
* memory: the kernel's RSS growth, read once ``%load_ext`` returns and again after the
  background start has finished (sibling kernel up, widgets imported) — the honest number.

Budget: <= 0.3 s and <= 30 MB. Usage: ``python bench/load_ext.py [--n 5]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile

from jupyter_client import KernelManager

PROBE = """
import json, os, time
def _rss():
    with open('/proc/self/status') as f:
        return next(int(l.split()[1]) * 1024 for l in f if l.startswith('VmRSS'))
_before = _rss()
_t = time.perf_counter()
get_ipython().run_line_magic('load_ext', {ext!r})
_took = time.perf_counter() - _t
_after = _rss()
if {ext!r} == 'ipyagent':
    import ipyagent
    _m = ipyagent.frontends.magics._MAGICS
    _m.settle_warmup()
    ipyagent.current().kernel.start()  # wait for the background start to finish
_settled = _rss()
print('RESULT' + json.dumps([_took, _after - _before, _settled - _before]))
"""


def measure(ext: str) -> tuple[float, int, int]:
    """(seconds, bytes added at return, bytes added once settled) in a fresh kernel."""
    with tempfile.TemporaryDirectory() as cwd:
        km = KernelManager(kernel_name="python3")
        km.start_kernel(cwd=cwd)
        kc = km.client()
        kc.start_channels()
        try:
            kc.wait_for_ready(timeout=60)
            kc.execute_interactive("pass", timeout=60)  # let the kernel finish starting
            lines: list[str] = []

            def keep(msg: dict) -> None:
                if msg["msg_type"] == "stream":
                    lines.append(msg["content"]["text"])

            reply = kc.execute_interactive(PROBE.format(ext=ext), timeout=120, output_hook=keep)
            if reply["content"]["status"] != "ok":
                raise RuntimeError(f"probe failed: {reply['content']}")
            text = "".join(lines)
            took, added, settled = json.loads(text[text.index("RESULT") + 6:].splitlines()[0])
            if ext == "ipyagent":
                kc.execute_interactive("%unload_ext ipyagent", timeout=60)
            return took, added, settled
        finally:
            kc.stop_channels()
            km.shutdown_kernel(now=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=5, help="fresh kernels per extension")
    args = parser.parse_args()
    rows = {ext: [measure(ext) for _ in range(args.n)] for ext in ("autoreload", "ipyagent")}
    mb = 1024 * 1024
    print(f"%load_ext in a fresh kernel, median of {args.n}:")
    print(f"{'extension':<12} {'time':>9} {'RSS added':>11} {'after settling':>15}")
    med = {}
    for ext, values in rows.items():
        t, a, s = (statistics.median(v[i] for v in values) for i in range(3))
        med[ext] = (t, a, s)
        print(f"{ext:<12} {t * 1000:7.1f}ms {a / mb:9.1f}MB {s / mb:13.1f}MB")
    t, a, s = med["ipyagent"]
    print(f"ipyagent / autoreload time: {t / max(med['autoreload'][0], 1e-6):.0f}x")
    print(f"budget: time {t:.3f}s of 0.3s ({t / 0.3:.0%}), "
          f"memory {s / mb:.1f}MB of 30MB ({s / mb / 30:.0%}) -> "
          + ("OK" if t <= 0.3 and s <= 30 * mb else "OVER BUDGET"))


if __name__ == "__main__":
    main()
