"""The accepted forms of --otel-export-ranks are stated once: the flag's help is the description of
MEGATRON_OTEL_EXPORT_RANKS (the `{env}` placeholder), so --help, the configuration page's flag
and variable rows and the runtime's taxonomy say the same; the manual's pages point to it."""

from __future__ import annotations

from codegen.spec.load import load_project
from tests.support.doc_blocks import GUIDE, README, REPO

FORMS = "a list of ranks (0,4,8-11), every:N"


def test_flag_help_is_the_variables_description() -> None:
    project = load_project(REPO / "specs")
    (flag,) = [f for f in project.flags if f.option == "--otel-export-ranks"]
    (env,) = [e for e in project.env if e.name == "MEGATRON_OTEL_EXPORT_RANKS"]
    assert flag.help == " ".join(env.description.split()) and FORMS in flag.help
    patch = (REPO / "generated" / "patches").glob("*arguments.py.patch")
    assert any("a list of ranks (0,4,8-11), every:N " in p.read_text() for p in patch)


def test_the_forms_are_listed_in_no_hand_written_page() -> None:
    """The list form's example (0,4,8-11) marks a restatement of the forms."""
    docs = REPO / "docs"
    pages = [README, *docs.glob("*.md"), *GUIDE.glob("*.md"), *(docs / "reference").glob("*.md")]
    assert len(pages) > 10
    assert [p.name for p in pages if "0,4,8-11" in p.read_text(encoding="utf-8")] == []
