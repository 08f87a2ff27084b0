"""The sibling kernel: the second ipykernel process where the model's Python runs.

``sibling`` owns the kernel's life (start, execute, interrupt, restart, shutdown),
``process`` its environment, limits and private files, ``sandbox`` the bubblewrap
command line around it, ``outputs`` the collection of what it prints and displays,
``transfer`` moving values in and out of it. ``remote`` is the same kernel on a Jupyter
Server or gateway (``Agent.kernel_url``: ``_rest`` its REST calls, ``_channels`` its one
websocket); ``base`` the interface both offer, ``_sync`` its blocking, async and ``with``
forms written once for both, ``notes`` the words both use for a fault.
"""

from typing import Any

__all__ = ["Execution", "RemoteKernel", "SiblingKernel"]


def __getattr__(name: str) -> Any:
    # Lazy: ``kernel.sandbox`` (asked at %load_ext) must not wait for jupyter_client/zmq.
    if name == "SiblingKernel":
        from .sibling import SiblingKernel

        return SiblingKernel
    if name == "RemoteKernel":
        from .remote import RemoteKernel

        return RemoteKernel
    if name == "Execution":
        from .outputs import Execution

        return Execution
    raise AttributeError(f"module 'ipyagent.kernel' has no attribute {name!r}")
