"""The sibling kernel: the second ipykernel process where the model's Python runs, and what
crosses between it and the user's kernel.

``sibling`` owns the kernel's life (start, execute, interrupt, restart, shutdown),
``process`` its environment, limits and private files, ``sandbox`` the bubblewrap command
line around it, ``staging`` the copy-on-write workspace, ``outputs`` the collection of what
it prints and displays, ``transfer`` moving values in and out of it. ``remote`` is the same
kernel on a Jupyter Server or gateway (``Agent.kernel_url``: ``_rest`` its REST calls,
``_channels`` its one websocket); ``base`` the interface both offer, ``_sync`` its
blocking, async and ``with`` forms written once for both, ``notes`` the words both use for
a fault. ``namespace`` is what the model is told about the user's variables (a bounded,
secret-free picture), ``copies`` the explicit, recorded copies between the two kernels.

May import: ``context``, ``trust``, ``_util``.
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
