"""Where things lie: this checkout, its specs, the tests' fixture trees and data."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SPECS = REPO / "specs"
TESTS = REPO / "tests"
FIXTURES = TESTS / "fixtures"
CASES = TESTS / "transform_cases"
REPORT_DATA = TESTS / "data" / "report"
