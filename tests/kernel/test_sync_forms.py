"""The blocking, async and context-manager forms both kernels share (``kernel._sync``): one
implementation, and the same behaviour on a real sibling process and a real Jupyter Server."""

from __future__ import annotations

import asyncio
import urllib.error
from pathlib import Path

import pytest

from ipyagent.errors import KernelError
from ipyagent.kernel._sync import SyncForms
from ipyagent.kernel.remote import RemoteKernel
from ipyagent.kernel.sibling import SiblingKernel
from tests.helpers.kernel_servers import KernelServer

TOKEN_ENV = "IPYAGENT_TEST_JUPYTER_TOKEN"

FORMS = ("start", "start_background", "start_async", "shutdown", "shutdown_async", "__enter__", "__exit__",
         "__aenter__", "__aexit__", "interrupt", "interrupt_async", "restart", "restart_async", "execute",
         "execute_async", "state", "push", "pull")


@pytest.mark.parametrize("cls", [SiblingKernel, RemoteKernel])
def test_both_kernels_take_their_forms_from_one_base(cls: type) -> None:
    assert issubclass(cls, SyncForms)
    for name in FORMS:
        assert name not in vars(cls), f"{cls.__name__} defines {name} again"
        assert getattr(cls, name) is getattr(SyncForms, name)


async def _round(k: SyncForms) -> tuple[str, str, str, str]:
    """What one kernel does through the shared async forms: run, interrupt idle, restart, run."""
    async with k:
        first = (await k.execute_async("x = 41; x + 1")).text
        await k.interrupt_async()  # idle: nothing to interrupt, the kernel keeps its state
        kept = (await k.execute_async("x")).text
        await k.restart_async()
        lost = (await k.execute_async("x")).status
        state = k.state
    return first, kept, lost, state + "/" + k.state


def test_the_sibling_kernel_through_the_shared_forms(tmp_path: Path) -> None:
    k = SiblingKernel(cwd=tmp_path, timeout=30, sandbox="none")
    assert asyncio.run(_round(k)) == ("42", "41", "error", "idle/shut down")
    with pytest.raises(KernelError, match="shut down"):
        k.execute("1")
    k.shutdown()  # idempotent


def test_the_remote_kernel_through_the_shared_forms(jupyter_server: KernelServer,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(TOKEN_ENV, jupyter_server.token)
    k = RemoteKernel(jupyter_server.url, timeout=30, token_env=TOKEN_ENV)
    with k:  # the blocking forms
        kernel_id = k.kernel_id
        assert kernel_id is not None and k.execute("2 * 21").text == "42"
    assert k.state == "shut down"
    with pytest.raises(urllib.error.HTTPError):
        jupyter_server.api("GET", f"/api/kernels/{kernel_id}")  # the DELETE went out
    again = RemoteKernel(jupyter_server.url, timeout=30, token_env=TOKEN_ENV)
    assert asyncio.run(_round(again)) == ("42", "41", "error", "idle/shut down")
