"""The bad-input sweep (tests/sweep.py): every case gives one clear error. In the
``full`` tier: its cases overlap the default suite's regression tests, which name each
defect; the sweep is the wide net run before a release (``python tests/sweep.py`` on
any backend prints its counts)."""

from __future__ import annotations

import pytest
import sweep

pytestmark = pytest.mark.full


def test_every_case_of_the_sweep_is_a_clear_error():
    results = sweep.sweep()
    assert len(results) >= 40
    unclear = {name: result for name, result in results.items() if result[0] != "clear"}
    assert not unclear, unclear
