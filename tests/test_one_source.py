"""Each fact lives once (issue 16): tensor names and shapes come from engine.model.params.ParamTable
alone; a second hand-written copy anywhere in the tree fails here."""

import re
from pathlib import Path

import pytest

import tests.reference as ref
from opencl_llm_studio.engine.config import ModelConfig
from opencl_llm_studio.engine.files.gguf_export import tensor_shapes
from opencl_llm_studio.engine.model.params import ParamTable, tensors_per_layer
from opencl_llm_studio.engine.model.params import param_count
from tests.source_helpers import PRODUCT, ROOT, files_matching, subcommand_actions

# (what the rule is, a regex that spells it out, the files allowed to). engine/files/hf/train_ddp.py
# is self-contained on purpose (it runs without the engine); tests/test_hf.py compares it.
RULES = [
    ("simulator never the default device", r'(?i)"oclgrind"', ["opencl_llm_studio/engine/opencl/device.py"]),
    ("device environment variable", r'"LLM_STUDIO_DEVICE"', ["opencl_llm_studio/engine/opencl/device.py"]),
    ("total steps of a run", r"pretrain_steps\S*\)? \+ \(?\S*tune_steps",
     ["opencl_llm_studio/engine/config.py", "opencl_llm_studio/engine/files/hf/train_ddp.py"]),
    ("Q8_0 row rule", r"% 32 == 0|% QK8_0 == 0", ["opencl_llm_studio/engine/files/export_types.py", "opencl_llm_studio/engine/files/gguf_export.py"]),
    ("export size per type", r"34 / 32", []),
    ("model and training defaults", r"steps=600|tune_steps=200|seed=1337", []),
    ("the metrics.jsonl writer", r"json\.dumps\(m\.to_dict\(\)\)", ["opencl_llm_studio/studio/run_folder.py"]),
    ("bundled file path", r'files\(__name__\)|opencl_llm_studio\.resources"',
     ["opencl_llm_studio/resources/__init__.py"]),
    ("bundled corpus names", r'"pretrain\.txt"', ["opencl_llm_studio/engine/data/textio.py"]),
    ("tokenizer kinds", r'\["bpe", "char"\]|\("bpe", "char"\)', ["opencl_llm_studio/engine/config.py"]),
    # issue 23: limits and defaults in one table (engine/limits.py), not beside it
    ("minimum vocabulary", r"(?<![\w.])259(?![\w.])(?!.*STILL_ACTIVE)", ["opencl_llm_studio/engine/limits.py"]),
    ("sampling defaults", r"temperature: float = 0\.8|top_p: float = 0\.95|top_k: int = 40",
     ["opencl_llm_studio/engine/config.py"]),
    ("command-line ranges", r"type=(count|number)\(", []),
]


@pytest.mark.parametrize("rule,pattern,homes", RULES, ids=[r[0] for r in RULES])
def test_rule_is_written_once(rule, pattern, homes):
    assert files_matching(pattern, PRODUCT, exclude=__file__) == homes


def test_tensor_list_is_written_only_in_the_param_table():
    # a per-layer list of tensor names with shapes, or the parameter-count formula
    assert files_matching(r'attn_k\.weight", \(', exclude=__file__) == ["opencl_llm_studio/engine/model/params.py"]   # a name with its shape
    assert files_matching(r"4 \* d \* d \+ 3 \* d \* f", exclude=__file__) == []


@pytest.mark.parametrize("cfg", [ModelConfig(), ModelConfig(n_layer=1, d_model=20, n_head=5,
                                                           ffn_dim=7, tie_embeddings=False)])
def test_every_use_of_the_tensor_list_agrees(cfg):
    table = ParamTable(cfg)
    assert tensor_shapes(cfg) == table.shapes()
    assert {n: w.shape for n, w in ref.init_weights(cfg).items()} == table.shapes()
    assert param_count(cfg) == sum(e.size for e in table.entries.values())
    assert len(table.entries) == 2 + (not cfg.tie_embeddings) + cfg.n_layer * tensors_per_layer(cfg)


def test_export_types_are_the_engines(qapp):
    import gguf

    from opencl_llm_studio.engine.files import export_types, gguf_export
    from opencl_llm_studio.studio.ui.dialogs.export_dialog import ExportDialog
    assert tuple(gguf_export.DTYPES) == export_types.DTYPE_NAMES
    for name, (qtype, _) in gguf_export.DTYPES.items():
        assert export_types.BLOCKS[name] == gguf.GGML_QUANT_SIZES[qtype]
    dtype = subcommand_actions("export")["dtype"]
    assert tuple(dtype.choices) == export_types.DTYPE_NAMES
    assert dtype.default == export_types.DEFAULT_DTYPE
    for cfg in (ModelConfig(), ModelConfig(d_model=80, n_head=4)):
        dialog = ExportDialog(cfg, Path("m.gguf"))
        combo = dialog.dtype_combo
        assert tuple(combo.itemData(i) for i in range(combo.count())) == export_types.DTYPE_NAMES
        q8 = combo.model().item(export_types.DTYPE_NAMES.index("q8_0"))
        assert q8.isEnabled() == export_types.q8_0_fits(cfg)


def test_sampling_defaults_are_the_engines(qapp):
    """`llm-studio sample|chat` options, the chat panel's knobs and TrainingSession.generate /
    chat all start from engine.config.SamplingParams and MAX_NEW_TOKENS."""
    import inspect

    from opencl_llm_studio.engine.config import MAX_NEW_TOKENS, SamplingParams
    from opencl_llm_studio.engine.training.session import TrainingSession
    from opencl_llm_studio.studio.ui.panels.chat_panel import ChatPanel
    sp = SamplingParams()
    want = {"temperature": sp.temperature, "top_k": sp.top_k, "top_p": sp.top_p,
            "max_new_tokens": MAX_NEW_TOKENS}
    for command in ("sample", "chat"):
        acts = subcommand_actions(command)
        assert {"temperature": acts["temperature"].default, "top_k": acts["top_k"].default,
                "top_p": acts["top_p"].default, "max_new_tokens": acts["max_tokens"].default,
                } == want
        assert acts["repeat_penalty"].default == sp.repetition_penalty
    assert ChatPanel().knobs() == want
    for method in (TrainingSession.generate, TrainingSession.chat):
        params = inspect.signature(method).parameters
        assert {k: params[k].default for k in want} == want
        assert params["repetition_penalty"].default == sp.repetition_penalty


def test_model_and_training_defaults_are_the_engines(qapp, tmp_path):
    """`llm-studio train` without options, the studio's settings column and a preset over the
    defaults all start from engine.config.ModelConfig() and TrainConfig()."""
    from opencl_llm_studio.engine.config import DEFAULT_TOKENIZER, TrainConfig
    from opencl_llm_studio.engine.training.presets import PRESETS
    from opencl_llm_studio.studio.cli import build_parser
    from opencl_llm_studio.studio.cli.options import configs, tokenizer_kind
    from opencl_llm_studio.studio.ui.panels.settings_panel import SettingsPanel
    args = build_parser().parse_args(["train", "--out", str(tmp_path)])
    assert configs(args) == (ModelConfig(), TrainConfig())
    assert tokenizer_kind(args) == DEFAULT_TOKENIZER
    panel = SettingsPanel()
    assert panel.model_config() == ModelConfig()
    assert panel.train_config() == TrainConfig()
    assert panel.tokenizer_kind() == DEFAULT_TOKENIZER
    from opencl_llm_studio.engine.config import CHECKPOINT_EVERY
    from opencl_llm_studio.studio.ui.panels.autosave_box import AutosaveBox
    assert args.checkpoint_every == CHECKPOINT_EVERY == AutosaveBox().every_spin.value()
    for name, preset in PRESETS.items():
        args = build_parser().parse_args(["train", "--out", str(tmp_path), "--preset", name])
        assert configs(args) == preset.configs()


def test_bundled_corpus_is_one_path(qapp):
    """The CLI and the studio call engine.data.textio.bundled_corpus, with no wrapper of their own."""
    from opencl_llm_studio.engine.data.textio import BUNDLED, bundled_corpus
    for which, name in BUNDLED.items():
        path = bundled_corpus(which)
        assert path.is_file() and path.name == name
    for p in (*(str(f.relative_to(ROOT)) for f in sorted((ROOT / "opencl_llm_studio" / "studio" / "cli").glob("*.py"))),
              "opencl_llm_studio/studio/ui/window/window_settings.py", "opencl_llm_studio/studio/ui/panels/data_panel.py"):
        text = (ROOT / p).read_text()
        assert "def _bundled" not in text and "def bundled_path" not in text, p


def test_scale_out_data_names_are_one_table():
    """The scale-out folder's data files are named once (engine.files.hf.export.DATA); the
    standalone train_ddp.py reads each array and text by that same name."""
    from opencl_llm_studio.engine.files.hf.export import DATA
    script = (ROOT / "opencl_llm_studio" / "engine" / "files" / "hf" / "train_ddp.py").read_text()
    for key, rel in DATA.items():
        if key not in ("pretrain_text", "tune_text"):  # the texts are for people, not the script
            assert f'"{rel.split("/", 1)[1]}"' in script, f"train_ddp.py does not read {rel}"
    for path in ("opencl_llm_studio/engine/files/hf/scale_out.py", "opencl_llm_studio/engine/files/hf/load.py"):
        assert '"data/' not in (ROOT / path).read_text(), f"{path} spells a data file name"


def test_no_getattr_hedges():
    """Objects say what they have: no getattr(obj, "name", default) guessing at an attribute
    in the engine or the studio (a Qt sort key compared with a foreign item, and an OSError's
    optional strerror, are the two places where the other side really may lack it)."""
    allowed = {("opencl_llm_studio/studio/ui/panels/runs_panel.py", 'getattr(other, "key", None)'),
               ("opencl_llm_studio/studio/cli/runs.py", "getattr(e, 'strerror', None)")}
    hedge = re.compile(r"getattr\([^,()]+, *[\"'][A-Za-z_]+[\"'], [^)]*\)")
    found = [(str(p.relative_to(ROOT)), m.group(0))
             for d in ("engine", "studio") for p in sorted((ROOT / "opencl_llm_studio" / d).rglob("*.py"))
             for m in hedge.finditer(p.read_text())]
    assert [f for f in found if f not in allowed] == []
