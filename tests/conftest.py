"""Shared fixtures: real parts wherever the test claims to check them."""

from __future__ import annotations

import sys
from pathlib import Path

# Test helpers (scripted server, scripted model) live beside the tests.
sys.path.insert(0, str(Path(__file__).parent))
