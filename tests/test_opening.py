"""engine.training.opening.open_session: one opener for every kind of model path (issue 35: "open a
model by its path kind" was written four times, in the CLI twice, the studio's worker and the
import command). Each kind opens to the same weights and step as the run it came from."""

import numpy as np
import pytest

from opencl_llm_studio.engine.config import ModelConfig, TrainConfig
from opencl_llm_studio.engine.errors import CheckpointError, ModelImportError
from opencl_llm_studio.engine.files import checkpoint
from opencl_llm_studio.engine.training.opening import (ModelPathKind, create_session,
                                                      model_path_kind, open_session)
from tests.helpers import bundled_texts

MC = ModelConfig(d_model=32, n_layer=1, n_head=2, context_length=32, vocab_size=320)
TC = TrainConfig(pretrain_steps=3, tune_steps=2, batch_size=2, eval_interval=100,
                 sample_interval=0, evaluate_recall=False)


@pytest.fixture(scope="module")
def trained(rt, tmp_path_factory):
    """A run trained 3 steps, saved as a run folder and exported as a GGUF and a transformers
    folder: (session, {kind: path})."""
    pytest.importorskip("safetensors")
    from opencl_llm_studio.engine.files.hf.export import export_session
    root = tmp_path_factory.mktemp("opening")
    s = create_session(MC, TC, *bundled_texts(), runtime=rt)
    for _ in zip(range(3), s.train()):
        pass
    s.save(root / "run")
    s.export_gguf(root / "m.gguf")
    export_session(s, root / "hf")
    return s, {ModelPathKind.RUN_FOLDER: root / "run",
               ModelPathKind.CHECKPOINT: root / "run" / checkpoint.FILENAME,
               ModelPathKind.GGUF: root / "m.gguf",
               ModelPathKind.APP_HF_FOLDER: root / "hf"}


@pytest.mark.parametrize("kind", [ModelPathKind.RUN_FOLDER, ModelPathKind.CHECKPOINT,
                                  ModelPathKind.GGUF, ModelPathKind.APP_HF_FOLDER])
def test_every_path_kind_opens_to_the_same_model(rt, trained, kind):
    s, paths = trained
    assert model_path_kind(paths[kind]) is kind
    opened = open_session(paths[kind], runtime=rt)
    assert opened.step == s.step == 3
    assert opened.model_config.d_model == MC.d_model
    np.testing.assert_allclose(opened.model.read_flat("params"), s.model.read_flat("params"),
                               rtol=0, atol=1e-6)
    prompt = "The capital"
    assert opened.generate(prompt, greedy=True, max_new_tokens=6) == \
        s.generate(prompt, greedy=True, max_new_tokens=6)


def test_texts_come_from_the_run_or_else_from_the_caller(rt, trained):
    """A run keeps its own texts; a GGUF and an exported transformers folder (which hold none)
    train on the texts given, by default the bundled pretraining text."""
    s, paths = trained
    mine = "A text of my own. " * 200
    assert open_session(paths[ModelPathKind.RUN_FOLDER], mine, runtime=rt).pretrain_text == \
        s.pretrain_text
    for kind in (ModelPathKind.GGUF, ModelPathKind.APP_HF_FOLDER):
        assert open_session(paths[kind], mine, runtime=rt).pretrain_text == mine
        assert open_session(paths[kind], runtime=rt).pretrain_text == bundled_texts()[0]


def test_a_path_without_a_model_is_refused_by_name(rt, tmp_path):
    (tmp_path / "notes.txt").write_text("hello")
    for path in (tmp_path / "missing", tmp_path / "notes.txt"):
        assert model_path_kind(path) is None
        with pytest.raises(ModelImportError, match=str(path.name)):
            open_session(path, runtime=rt)
    (tmp_path / "empty").mkdir()   # a folder: the checkpoint reader says what it lacks
    with pytest.raises(CheckpointError):
        open_session(tmp_path / "empty", runtime=rt)
