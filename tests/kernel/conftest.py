"""Real kernel servers for tests/kernel/test_remote*.py, started once per session."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.helpers.kernel_servers import KernelServer


def _server(kind: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[KernelServer]:
    pytest.importorskip("psutil")
    pytest.importorskip("jupyter_server" if kind == "server" else "kernel_gateway")
    server = KernelServer(kind, tmp_path_factory.mktemp(f"jupyter-{kind}"))
    server.start()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(scope="session")
def jupyter_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KernelServer]:
    """A real ``jupyter server`` on 127.0.0.1 with a random token."""
    yield from _server("server", tmp_path_factory)


@pytest.fixture(scope="session")
def kernel_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KernelServer]:
    """A real ``jupyter kernelgateway`` on 127.0.0.1 with a random token."""
    yield from _server("gateway", tmp_path_factory)
