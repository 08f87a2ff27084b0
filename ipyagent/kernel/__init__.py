"""The sibling kernel: the second ipykernel process where the model's Python runs.

``sibling`` owns the kernel's life (start, execute, interrupt, restart, shutdown),
``process`` its environment, limits and private files, ``outputs`` the collection of
what it prints and displays, ``transfer`` moving values in and out of it.
"""

from .outputs import Execution
from .sibling import SiblingKernel

__all__ = ["Execution", "SiblingKernel"]
