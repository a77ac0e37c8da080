"""Fixtures shared across the test layers (engine, completion, server, bench, e2e).

Tokenizers load once per session: each is a large byte table, and most layers need
one. The MaskBench development set lies outside the repository (`../shared`), so the
fixture that hands it out skips when it is absent instead of failing.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
# Support modules (`toy`, `fake_engine`) live beside this file and are imported by name
# from test files in the layer folders below it.
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))

MASKBENCH_DEV = ROOT.parent / "shared" / "data" / "maskbench-dev"


def _tokenizer(name: str):
    from midword.engine import Tokenizer

    return Tokenizer.from_pretrained(name)


@pytest.fixture(scope="session")
def llama3():
    return _tokenizer("llama3")


@pytest.fixture(scope="session")
def gemma3():
    return _tokenizer("gemma3")


@pytest.fixture(scope="session")
def cl100k():
    return _tokenizer("cl100k")


@pytest.fixture(scope="session")
def maskbench_dev() -> Path:
    """The MaskBench development set beside the checkout; skips the test when absent."""
    if not MASKBENCH_DEV.is_dir():
        pytest.skip(f"needs the MaskBench development set at {MASKBENCH_DEV}")
    return MASKBENCH_DEV
