"""bench/hotpath_cold.py runs end to end: both builds measured in their own processes (the
compiled one really compiled), and its table written."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def test_hotpath_cold_compares_the_two_builds(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "bench.hotpath_cold", "--rounds", "1", "--timed", "20",
         "--out", str(tmp_path)],
        cwd=REPO, check=True, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    data = json.loads((tmp_path / "hotpath_cold.json").read_text())
    (round_,) = data["rounds"]
    assert round_["pure"]["describe"].startswith("pure-Python")
    assert round_["compiled"]["describe"].startswith("compiled hot path")
    for build in ("pure", "compiled"):
        assert all(round_[build][case] > 0 for case in ("metadata", "produce", "fetch_v17"))
    text = (tmp_path / "hotpath_cold.md").read_text()
    assert "| compiled minus pure, paired" in text
