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

Then the remote kernel (``Agent.kernel_url``): ``RemoteKernel`` on a real Kernel Gateway and
a real Jupyter Server on loopback, beside the local sibling and beside a websocket opened
per call: with our client (the connection's own cost) and with a plain client, the way
smolagents' remote executor does it.

Targets: within 1.3x of raw jupyter_client, at least 2x faster than a subprocess per call;
sandboxed round trip within 1.3x and sandboxed cold start within 1.5x of unsandboxed;
remote ``1+1`` within 2x of the local sibling and at least 5x faster than a websocket per call.
Usage: ``python bench/kernel_roundtrip.py [--n 50] [--starts 5] [--only remote]``.
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
from pathlib import Path
from typing import Any

from jupyter_client import KernelManager

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

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
    parser.add_argument("--only", choices=["local", "remote"], help="run only these rows")
    args = parser.parse_args()
    if args.only == "remote":
        sibling = SiblingKernel(timeout=60, sandbox="none")
        sibling.start()
        try:
            remote(args, sibling)
        finally:
            sibling.shutdown()
        return

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
        if args.only != "local":
            remote(args, sibling)
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


def remote(args: argparse.Namespace, sibling: SiblingKernel) -> None:
    """The remote rows: RemoteKernel on a real gateway and server on loopback, the local
    sibling, and a websocket per call (connect, execute, wait for the reply, close)."""
    from ipyagent._util import eventloop as _eventloop
    from ipyagent.kernel._channels import V1, Channels
    from ipyagent.kernel.remote import RemoteKernel
    from tests.helpers.kernel_servers import KernelServer

    print()
    home = Path(tempfile.mkdtemp(prefix="ipyagent-bench-remote-"))
    servers = {kind: KernelServer(kind, home / kind).start() for kind in ("gateway", "server")}
    kernels: dict[str, RemoteKernel] = {}
    try:
        for kind, server in servers.items():
            os.environ[f"BENCH_{kind.upper()}_TOKEN"] = server.token
            kernels[kind] = RemoteKernel(server.url, timeout=60, token_env=f"BENCH_{kind.upper()}_TOKEN")
        # The legacy JSON message form, for comparison (Enterprise Gateway speaks only that).
        kernels["json"] = RemoteKernel(servers["gateway"].url, timeout=60, token_env="BENCH_GATEWAY_TOKEN")
        kernels["json"]._ws_protocols = ()  # the bench alone compares the two forms
        for k in kernels.values():
            k.start()
        gateway = kernels["gateway"]
        assert gateway.protocol == V1 and kernels["json"].protocol == "json"
        assert gateway.kernel_id is not None

        async def per_call(code: str) -> None:
            channels = await Channels.open(gateway.url, gateway.kernel_id or "", gateway.token_env,
                                           gateway.session, 30)
            try:
                msg_id = channels.send("shell", "execute_request", {
                    "code": code, "silent": False, "store_history": True, "user_expressions": {},
                    "allow_stdin": False, "stop_on_error": False})
                while True:
                    msg = await channels.recv(30)
                    if msg and msg.get("channel") == "shell" \
                            and (msg.get("parent_header") or {}).get("msg_id") == msg_id:
                        break
            finally:
                channels.close()

        async def plain_per_call(code: str) -> None:
            """A websocket per call the way most clients do it (e.g. smolagents' remote executor):
            the JSON form, default socket options, connect / execute / reply / close."""
            import json
            import uuid

            from tornado.httpclient import HTTPRequest
            from tornado.websocket import websocket_connect

            url = gateway.url.replace("http", "ws", 1)
            conn = await websocket_connect(HTTPRequest(
                f"{url}/api/kernels/{gateway.kernel_id}/channels",
                headers={"Authorization": f"token {servers['gateway'].token}"}))
            try:
                msg_id = uuid.uuid4().hex
                conn.write_message(json.dumps({
                    "header": {"msg_id": msg_id, "msg_type": "execute_request", "username": "bench",
                               "session": uuid.uuid4().hex, "version": "5.3"},
                    "parent_header": {}, "metadata": {}, "channel": "shell",
                    "content": {"code": code, "silent": False, "store_history": True,
                                "user_expressions": {}, "allow_stdin": False, "stop_on_error": False}}))
                while True:
                    raw = await conn.read_message()
                    assert raw is not None
                    msg = json.loads(raw)
                    if msg.get("channel") == "shell" and msg["parent_header"].get("msg_id") == msg_id:
                        break
            finally:
                conn.close()

        def run_on(k: SiblingKernel | RemoteKernel) -> Callable[[str], None]:
            def run(code: str) -> None:
                r = k.execute(code)
                assert r.status == "ok", r.text

            return run

        methods: dict[str, Callable[[str], None]] = {
            "local SiblingKernel": run_on(sibling),
            "RemoteKernel, gateway": run_on(gateway),
            "RemoteKernel, server": run_on(kernels["server"]),
            "RemoteKernel, gw, JSON": run_on(kernels["json"]),
            "websocket per call, gw": lambda code: _eventloop.run_sync(per_call(code)),
            "plain ws per call, gw": lambda code: _eventloop.run_sync(plain_per_call(code)),
        }
        print(f"remote kernels on loopback (kernel gateway {_version('kernel_gateway')}, "
              f"jupyter server {_version('jupyter_server')}) (ms)\n")
        print(f"{'snippet':<12} {'round trip':<26} {'median':>8} {'p90':>8} {'vs local':>9}")
        for label, code in SNIPPETS.items():
            samples: dict[str, list[float]] = {name: [] for name in methods}
            for _ in range(5):  # interleaved, as above
                for name, run in methods.items():
                    samples[name] += timings(run, code, max(1, args.n // 5), warmup=1)
            base = statistics.median(samples["local SiblingKernel"])
            meds = {name: statistics.median(values) for name, values in samples.items()}
            for name, values in samples.items():
                print(f"{label:<12} {name:<26} {meds[name] * 1000:8.2f} {p90(values) * 1000:8.2f} "
                      f"{meds[name] / base:8.2f}x")
            gw = meds["RemoteKernel, gateway"]
            print(f"{label:<12} ratios: gateway/local = {gw / base:.2f}x (target <= 2x), "
                  f"plain ws per call/gateway = {meds['plain ws per call, gw'] / gw:.1f}x (target >= 5x), "
                  f"our ws per call/gateway = {meds['websocket per call, gw'] / gw:.1f}x\n")
    finally:
        for k in kernels.values():
            k.shutdown()
        for server in servers.values():
            server.close()
        shutil.rmtree(home, ignore_errors=True)


def _version(module: str) -> str:
    try:
        return str(__import__(module).__version__)
    except (ImportError, AttributeError):
        return "?"


if __name__ == "__main__":
    main()
