"""Round-trip cost of SiblingKernel.execute, side by side with its alternatives, in one run.

Three ways to run a snippet and get its output back:

* ``SiblingKernel.execute``            — ours (state kept between calls);
* raw jupyter_client ``execute_interactive`` on a warm kernel (the floor for a kernel),
  once on a default kernel and once on a kernel configured as ours (IPython history off),
  so the second ratio isolates our client-side overhead;
* ``subprocess.run([python, "-c", code])`` per call (no state kept at all).

Then the sandbox (bubblewrap) side by side with the plain sibling: the round trip with the
network on (IPC channels, and TCP for comparison) and off, and the cold start (start until
the kernel answers), each as a ratio to the unsandboxed sibling.

Targets: within 1.3x of raw jupyter_client, at least 2x faster than a subprocess per call;
sandboxed round trip within 1.3x and sandboxed cold start within 1.5x of unsandboxed.
Usage: ``python bench/kernel_roundtrip.py [--n 50] [--starts 5]``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

from jupyter_client import KernelManager

from ipyagent.kernel.process import _private_ipython_dir
from ipyagent.kernel.sandbox import probe
from ipyagent.kernel.sibling import SiblingKernel

SNIPPETS = {"1+1": "1+1", "1 MB print": "print('x' * 2**20)"}


def timings(run: Callable[[str], object], code: str, n: int, warmup: int = 5) -> list[float]:
    """Wall-clock seconds of ``n`` calls after ``warmup`` unmeasured ones."""
    for _ in range(warmup):
        run(code)
    out = []
    for _ in range(n):
        start = time.perf_counter()
        run(code)
        out.append(time.perf_counter() - start)
    return out


def p90(values: list[float]) -> float:
    return statistics.quantiles(values, n=10)[-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=50, help="measured calls per snippet and method")
    parser.add_argument("--starts", type=int, default=5, help="cold starts per sandbox setting")
    args = parser.parse_args()

    sibling = SiblingKernel(timeout=60, sandbox="none")
    sibling.start()
    tmp = tempfile.mkdtemp()
    same_config = {**os.environ, "IPYTHONDIR": _private_ipython_dir(tmp)}
    clients = []
    for env in (dict(os.environ), same_config):
        km = KernelManager(kernel_name="python3")
        km.start_kernel(stderr=subprocess.DEVNULL, env=env)
        kc = km.client()
        kc.start_channels()
        kc.wait_for_ready(timeout=60)
        clients.append((km, kc))

    def ours(code: str) -> None:
        r = sibling.execute(code)
        assert r.status == "ok", r.text

    def raw_on(kc: Any) -> Callable[[str], None]:
        def raw(code: str) -> None:
            reply = kc.execute_interactive(code, output_hook=lambda msg: None, stop_on_error=False, timeout=60)
            assert reply["content"]["status"] == "ok"

        return raw

    def subproc(code: str) -> None:
        # -c does not echo an expression's value; print it so every method returns the output.
        src = code if code.startswith("print") else f"print({code})"
        subprocess.run([sys.executable, "-c", src], capture_output=True, check=True)

    methods = {
        "SiblingKernel.execute": ours,
        "jupyter_client raw": raw_on(clients[0][1]),
        "raw, same kernel config": raw_on(clients[1][1]),
        "subprocess per call": subproc,
    }
    try:
        print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, n={args.n} per cell (ms)\n")
        print(f"{'snippet':<12} {'method':<24} {'median':>8} {'p90':>8}")
        for label, code in SNIPPETS.items():
            stats: dict[str, tuple[float, float]] = {}
            # Interleave methods round by round so drift (CPU frequency, other load) hits all alike.
            samples: dict[str, list[float]] = {name: [] for name in methods}
            rounds = 5
            for _ in range(rounds):
                for name, run in methods.items():
                    count = max(1, args.n // rounds) if name != "subprocess per call" else max(1, args.n // (rounds * 2))
                    samples[name] += timings(run, code, count, warmup=1)
            for name, values in samples.items():
                stats[name] = (statistics.median(values), p90(values))
                print(f"{label:<12} {name:<24} {stats[name][0] * 1000:8.2f} {stats[name][1] * 1000:8.2f}")
            ours_med, raw_med, same_med, sub_med = (stats[m][0] for m in methods)
            print(
                f"{label:<12} ratios: ours/raw = {ours_med / raw_med:.2f}x, "
                f"ours/raw same config = {ours_med / same_med:.2f}x (target <= 1.3x), "
                f"subprocess/ours = {sub_med / ours_med:.1f}x (target >= 2x)\n"
            )
        sibling.execute("kept = 41")
        print("state kept between calls:", sibling.execute("kept + 1").text == "42", "(subprocess: never)")
        sandboxed(args, ours)
    finally:
        for km, kc in clients:
            kc.stop_channels()
            km.shutdown_kernel(now=True)
        sibling.shutdown()
        shutil.rmtree(tmp, ignore_errors=True)


def sandboxed(args: argparse.Namespace, plain: Callable[[str], None]) -> None:
    """The sandbox's rows: round trip and cold start beside the unsandboxed sibling."""
    flags, why = probe()
    print()
    if flags is None:
        print(f"sandboxed rows skipped: {why}")
        return
    print(f"sandbox: bwrap {' '.join(flags)} (ms)\n")
    settings = {"bwrap, network on (ipc)": {"sandbox_network": True},
                "bwrap, network on (tcp)": {"sandbox_network": True, "transport": "tcp"},
                "bwrap, network off (ipc)": {"sandbox_network": False}}

    def make(sandbox: str, transport: str = "ipc", **kw: Any) -> SiblingKernel:
        k = SiblingKernel(timeout=60, sandbox=sandbox, **kw)
        k._sandbox_transport = transport  # the bench alone compares TCP with IPC
        return k

    kernels = {name: make("bwrap", **kw) for name, kw in settings.items()}
    for k in kernels.values():
        k.start()

    def run_on(k: SiblingKernel) -> Callable[[str], None]:
        def run(code: str) -> None:
            r = k.execute(code)
            assert r.status == "ok", r.text

        return run

    methods: dict[str, Callable[[str], None]] = {"unsandboxed": plain}
    methods.update({name: run_on(k) for name, k in kernels.items()})
    try:
        print(f"{'snippet':<12} {'round trip':<26} {'median':>8} {'p90':>8} {'ratio':>7}")
        for label, code in SNIPPETS.items():
            samples: dict[str, list[float]] = {name: [] for name in methods}
            for _ in range(5):
                for name, run in methods.items():
                    samples[name] += timings(run, code, max(1, args.n // 5), warmup=1)
            base = statistics.median(samples["unsandboxed"])
            for name, values in samples.items():
                med = statistics.median(values)
                print(f"{label:<12} {name:<26} {med * 1000:8.2f} {p90(values) * 1000:8.2f} {med / base:6.2f}x")
            print()
    finally:
        for k in kernels.values():
            k.shutdown()
    starts: dict[str, list[float]] = {"unsandboxed": [], "bwrap, network on": [], "bwrap, network off": []}
    kw_of = {"unsandboxed": {"sandbox": "none"}, "bwrap, network on": {"sandbox": "bwrap"},
             "bwrap, network off": {"sandbox": "bwrap", "sandbox_network": False}}
    for _ in range(args.starts):  # interleaved, as above
        for name, kw in kw_of.items():
            k = SiblingKernel(timeout=60, **kw)  # type: ignore[arg-type]
            start = time.perf_counter()
            k.start()
            assert k.execute("1").status == "ok"
            starts[name].append(time.perf_counter() - start)
            k.shutdown()
    base = statistics.median(starts["unsandboxed"])
    print(f"{'cold start (to first result)':<39} {'median':>8} {'max':>8} {'ratio':>7}")
    for name, values in starts.items():
        med = statistics.median(values)
        print(f"{name:<39} {med * 1000:8.0f} {max(values) * 1000:8.0f} {med / base:6.2f}x")
    print("targets: sandboxed round trip <= 1.3x, sandboxed cold start <= 1.5x")


if __name__ == "__main__":
    main()
