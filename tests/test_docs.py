"""docs/ENGINE_API.md matches the code: every module, class, function, attribute and argument it
names exists, with the arguments in the code's order and the defaults it states (parser:
tests/doc_names.py). Fails when a name moves and the doc is not updated."""

from pathlib import Path

from tests.doc_names import check_signature, problems

DOC = Path(__file__).resolve().parents[1] / "docs" / "ENGINE_API.md"


def test_engine_api_doc_names_what_the_code_has():
    found = problems(DOC.read_text(encoding="utf-8"))
    assert not found, "docs/ENGINE_API.md disagrees with the code:\n" + "\n".join(found)


def test_the_checker_catches_a_moved_argument_a_wrong_default_and_a_missing_name():
    """The parser itself: each kind of drift is reported (else the test above could pass on
    a doc it never read)."""
    doc = ("`engine.files.gguf_export.export_gguf(bundle, path, force=False, dtype=\"f32\")`\n\n"
           "`engine.files.gguf_export.export_gguf(bundle, path, dtype=\"f16\", force=False)`\n\n"
           "`engine.files.gguf_export.export_gguf(path, dtype=\"f32\", force=False)`\n\n"
           "`engine.files.gguf_export.export_gguf(bundle, path, level=3)`\n\n"
           "`engine.training.session.TrainingSession.grow()` and `engine/nowhere.py`\n\n"
           "`ModelConfig(vocab_size, d_model, n_layer, n_head, context_length)`, `.no_such`")
    found = "\n".join(problems(doc))
    assert "another order" in found
    assert "defaults to 'f32', not 'f16'" in found
    assert "required argument 'bundle' not documented" in found
    assert "no argument 'level'" in found
    assert "grow" in found and "engine/nowhere.py" in found and "no_such" in found


def test_an_example_call_is_not_held_to_the_whole_signature():
    from opencl_llm_studio.engine.config import parse_val_split
    assert check_signature("parse_val_split", parse_val_split, '"tail:0.1"') == []
