"""pytest setup for the lyco binding tests: python/ on sys.path, one fresh seed per run (printed;
LYCO_TEST_SEED replays one), and a `torch_or_skip` helper for tests that need torch."""

import os
import pathlib
import random
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

SEED = int(os.environ.get("LYCO_TEST_SEED", random.SystemRandom().randrange(1 << 31)))


def pytest_report_header(config):
    return f"lyco python tests: seed {SEED} (LYCO_TEST_SEED={SEED} replays it); " \
           f"library {os.environ.get('LYCO_LIBRARY', '<repo>/build/liblyco.so')}"


@pytest.fixture
def seed(request):
    """A per-test seed derived from the run's seed and the test's name."""
    s = (SEED * 1000003 + sum(map(ord, request.node.name))) % (1 << 31)
    try:
        import torch
        torch.manual_seed(s)
    except ImportError:
        pass
    return s
