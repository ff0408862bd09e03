"""Fixtures for the report tests: the specs' project and its taxonomy (the small hand-made
captures they read are built with tests/support/otlp_json.py)."""

from __future__ import annotations

import pytest

from codegen.diagnostics import Diagnostics
from codegen.report.taxonomy import Taxonomy
from codegen.spec.load import load_project
from tests.support.paths import SPECS


@pytest.fixture(scope="session")
def project():
    return load_project(SPECS, Diagnostics())


@pytest.fixture(scope="session")
def taxonomy(project):
    return Taxonomy.from_project(project)
