"""engine.files.gguf_export / engine.files.gguf_import: GGUF round trips, errors, and llama.cpp as the judge.

Without llama-cpp-python only the first half runs. With it (pip install llama-cpp-python), the
exported file is loaded by llama.cpp and must tokenize exactly like the engine, give the same
logits as tests/reference.py (normalized MSE mean((a-b)^2)/mean(b^2): F32 < 1e-6, F16 < 1e-4,
Q8_0 printed), the same greedy continuation, and chat through the GGUF's own template.
"""

import os
import re
import sys
from pathlib import Path

import gguf
import numpy as np
import pytest

import reference
from opencl_llm_studio.engine.data.dialogue import (CHAT_TEMPLATE, Message, encode_dialogue, encode_prompt, render_prompt)
from opencl_llm_studio.engine.errors import ExportError, ModelImportError
from opencl_llm_studio.engine.files.export_types import DTYPE_NAMES, estimated_bytes, q8_0_fits
from opencl_llm_studio.engine.files.gguf_export import export_gguf, modelfile_text, tensor_shapes
from opencl_llm_studio.engine.files.gguf_import import import_gguf
from opencl_llm_studio.engine.data.textio import read_text
from opencl_llm_studio.engine.data.tokenizer import Tokenizer

from tests.gguf_helpers import META, load, make_bundle
from tests.helpers import RESOURCES as RES  # noqa: E402
CHATS = [
    [Message("user", "What is the capital of France?"), Message("assistant", "Paris.")],
    [Message("system", "Be brief."), Message("user", "Hi there!"), Message("assistant", "Hello."),
     Message("user", "Say  two\nlines"), Message("assistant", "One.\nTwo.")],
    [Message("user", "Ünïcödé 日本 🎉?"), Message("assistant", "Oui: café, naïve.")],
]
STRINGS = [
    "", " ", "  ", "hello", " hello", "hello ", "  leading", "trailing  ", "a  b   c    d",
    "\n", "\n\n", "line1\nline2\n", " \n \n", "\t", "tab\tseparated\t\tvalues", "\r\n",
    "The capital of France is Paris.", "User: hi\nAssistant: hello", "Assistant:", "123 4567.89",
    "café naïve façade Ürün Ærø ñandú", "Ωμέγα Кириллица", "日本語のテキスト", "中文，标点。",
    "emoji 🎉👍🏽 and 👨‍👩‍👧", "zzqxjvkw", "\u00a0nbsp\u00a0", "a\u200bzero width", "\u2581word",
    "x</s>y", "</s>", "<s>hi</s>", "<unk>", "<0x0A>", "{{ bos_token }}",
    "~!@#$%^&*()_+`-=[]\\;',./",
]


# ---------------------------------------------------------------- fixtures

@pytest.fixture(scope="module")
def bundle(tok):
    return make_bundle(tok)


@pytest.fixture(scope="module")
def exported(bundle, tmp_path_factory):
    """dtype -> path of the bundle exported as f32, f16 and q8_0 (each in its own folder)."""
    out = {}
    for dtype in ("f32", "f16", "q8_0"):
        d = tmp_path_factory.mktemp(dtype)
        out[dtype] = export_gguf(bundle, d / f"tiny-{dtype}.gguf", dtype).path
    return out


def special_encode(tok, text):
    """Ids of `text` with "<s>", "</s>", "<unk>" as their ids: llama.cpp's special=True parsing
    (it matches the text of control and unknown tokens; byte tokens like "<0x0A>" stay text)."""
    ids, special = [], {"<s>": tok.bos_id, "</s>": tok.eos_id, "<unk>": tok.unk_id}
    for part in re.split(r"(</?s>|<unk>)", text):
        ids += [special[part]] if part in special else tok.encode(part)
    return ids


def as_llama_reads(text):
    """llama.cpp's SPM tokenizer reads a literal "▁" as a space; the engine writes it as bytes
    so that it round-trips (engine.data.tokenizer). Every other character tokenizes identically."""
    return text.replace("\u2581", " ")


def jinja_render(messages, bos="<s>", eos="</s>"):
    """CHAT_TEMPLATE rendered as llama-cpp-python and LM Studio do (jinja2 comes with
    llama-cpp-python)."""
    env = pytest.importorskip("jinja2").Environment()
    return env.from_string(CHAT_TEMPLATE).render(
        messages=[{"role": m.role, "content": m.content} for m in messages],
        bos_token=bos, eos_token=eos, add_generation_prompt=True)


# ---------------------------------------------------------------- export and import

@pytest.mark.parametrize("dtype", ["f32", "f16", "q8_0"])
def test_round_trip(bundle, exported, dtype):
    back = import_gguf(exported[dtype])
    assert back.config == bundle.config
    assert back.metadata == META
    assert back.tokenizer.to_bytes() == bundle.tokenizer.to_bytes()
    for s in STRINGS:
        assert back.tokenizer.encode(s) == bundle.tokenizer.encode(s)
    assert set(back.weights) == set(tensor_shapes(bundle.config))
    for name, w in bundle.weights.items():
        got = back.weights[name]
        assert got.dtype == np.float32 and got.shape == w.shape
        if dtype == "f32" or w.ndim == 1:                 # norm weights are always F32
            want = w
        elif dtype == "f16":
            want = w.astype(np.float16).astype(np.float32)
        else:
            want = gguf.quants.dequantize(gguf.quants.quantize(w, gguf.GGMLQuantizationType.Q8_0),
                                          gguf.GGMLQuantizationType.Q8_0)
        np.testing.assert_array_equal(got, want, err_msg=name)


def test_file_layout(bundle, exported):
    """Keys llama.cpp reads, tensor types, ggml shapes (numpy shape reversed), tied output."""
    r = gguf.GGUFReader(exported["q8_0"])
    f = {k: v.contents() for k, v in r.fields.items()}
    c = bundle.config
    want = {"general.architecture": "llama", "llama.context_length": 64,
            "llama.embedding_length": 64, "llama.block_count": 2,
            "llama.feed_forward_length": c.hidden_dim, "llama.attention.head_count": 4,
            "llama.attention.head_count_kv": 4, "llama.rope.dimension_count": 16,
            "llama.vocab_size": bundle.tokenizer.vocab_size, "general.file_type": 7,
            "tokenizer.ggml.model": "llama", "tokenizer.ggml.bos_token_id": 1,
            "tokenizer.ggml.eos_token_id": 2, "tokenizer.ggml.unknown_token_id": 0,
            "tokenizer.ggml.add_bos_token": True, "tokenizer.ggml.add_eos_token": False,
            "tokenizer.ggml.add_space_prefix": False, "tokenizer.chat_template": CHAT_TEMPLATE,
            "opencl_llm_studio.learning_rate": 3e-3, "opencl_llm_studio.data.pretrain.bytes": 2713}
    assert {k: f.get(k) for k in want} == want
    assert f["llama.attention.layer_norm_rms_epsilon"] == pytest.approx(1e-5)
    assert f["llama.rope.freq_base"] == 10000.0
    assert f["tokenizer.ggml.tokens"] == bundle.tokenizer.pieces()
    assert f["tokenizer.ggml.token_type"] == bundle.tokenizer.token_types()
    assert np.allclose(f["tokenizer.ggml.scores"], bundle.tokenizer.scores())
    tensors = {t.name: t for t in r.tensors}
    assert "output.weight" not in tensors                  # tied: llama.cpp uses token_embd
    for name, shape in tensor_shapes(bundle.config).items():
        t = tensors[name]
        assert tuple(t.shape.tolist()) == shape[::-1]
        assert t.tensor_type == (gguf.GGMLQuantizationType.F32 if len(shape) == 1
                                 else gguf.GGMLQuantizationType.Q8_0)


def test_untied_output_round_trip(tok, tmp_path):
    b = make_bundle(tok, seed=3, tie_embeddings=False)
    back = import_gguf(export_gguf(b, tmp_path / "untied.gguf").path)
    assert back.config == b.config and not back.config.tie_embeddings
    np.testing.assert_array_equal(back.weights["output.weight"], b.weights["output.weight"])


def test_grouped_query_round_trip(tok, tmp_path):
    """A model trained with n_kv_head < n_head (llm-studio train --n-kv-head 2) opens again from
    its own export (was: refused as "uses grouped-query attention, which this app does not train")."""
    b = make_bundle(tok, seed=4, n_kv_head=2)
    back = import_gguf(export_gguf(b, tmp_path / "gqa.gguf").path)
    assert back.config == b.config and back.config.kv_heads == 2
    for name, w in b.weights.items():
        np.testing.assert_array_equal(back.weights[name], w, err_msg=name)


def test_q8_0_row_length_error_names_tensor(tok, tmp_path):
    b = make_bundle(tok, d_model=80, n_head=4)             # 80 is not a multiple of 32
    with pytest.raises(ExportError) as e:
        export_gguf(b, tmp_path / "m.gguf", "q8_0")
    assert "token_embd.weight" in str(e.value) and "d_model 80" in str(e.value)
    assert "64 or 96" in e.value.hint and "f16" in e.value.hint
    b = make_bundle(tok, ffn_dim=100)
    with pytest.raises(ExportError, match=r"blk\.0\.ffn_down\.weight.*ffn_dim 100"):
        export_gguf(b, tmp_path / "m.gguf", "q8_0")
    assert not list(tmp_path.iterdir())                     # nothing written, no temp files
    export_gguf(b, tmp_path / "m.gguf", "f16")              # f16 has no such limit


@pytest.mark.parametrize("cfg", [dict(), dict(d_model=80, n_head=4), dict(ffn_dim=100),
                                 dict(d_model=96, n_head=3, tie_embeddings=False)])
def test_q8_0_rule_and_size_estimate_are_the_writers(tok, tmp_path, cfg):
    """engine.files.export_types (what the CLI and the export dialog offer and show) says Q8_0 fits
    exactly when the writer accepts it, and its size is the file's within the keys' slack."""
    b = make_bundle(tok, **cfg)
    for dtype in DTYPE_NAMES:
        if dtype == "q8_0" and not q8_0_fits(b.config):
            with pytest.raises(ExportError, match="cannot be stored as Q8_0"):
                export_gguf(b, tmp_path / f"{dtype}.gguf", dtype)
            continue
        size = export_gguf(b, tmp_path / f"{dtype}.gguf", dtype, modelfile=None).size_bytes
        assert abs(estimated_bytes(b.config, dtype) - size) < 0.01 * size + 2048, dtype
    assert q8_0_fits(b.config) == (b.config.d_model % 32 == 0 and b.config.hidden_dim % 32 == 0)


def test_existing_file_needs_force(bundle, tmp_path):
    path = tmp_path / "m.gguf"
    path.write_bytes(b"previous model")
    with pytest.raises(ExportError, match="already exists"):
        export_gguf(bundle, path)
    assert path.read_bytes() == b"previous model"
    r = export_gguf(bundle, path, force=True)
    assert r.size_bytes == path.stat().st_size and import_gguf(path).config == bundle.config
    (tmp_path / "other.Modelfile").write_text("someone's Modelfile")
    with pytest.raises(ExportError, match="other.Modelfile already exists"):
        export_gguf(bundle, tmp_path / "other.gguf")        # its Modelfile would be replaced
    assert not (tmp_path / "other.gguf").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.Modelfile", "m.gguf",
                                                          "other.Modelfile"]
    export_gguf(bundle, tmp_path / "q.gguf", "q8_0" if bundle.config.d_model % 32 == 0 else "f16")
    assert "FROM ./q.gguf\n" in (tmp_path / "q.Modelfile").read_text()  # side by side


def test_bad_dtype_and_missing_folder(bundle, tmp_path, monkeypatch):
    """Missing folders are made (as other tools do); a refused or failed export leaves the disk
    as it was: no folder made for it, no new Modelfile."""
    with pytest.raises(ExportError, match="Unknown export type"):
        export_gguf(bundle, tmp_path / "m.gguf", "q4_k")
    with pytest.raises(ExportError, match="is a folder"):
        export_gguf(bundle, tmp_path)
    (tmp_path / "file").write_text("x")
    with pytest.raises(ExportError, match="is a file"):
        export_gguf(bundle, tmp_path / "file" / "m.gguf")
    r = export_gguf(bundle, tmp_path / "new" / "sub" / "m.gguf")
    assert r.path.is_file() and r.modelfile_path.is_file()
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    import opencl_llm_studio.engine.files.gguf_export as ge

    real = ge.atomic_write

    def disk_full(target, write):   # the Modelfile is written, then the GGUF fails
        if target.suffix == ".gguf":
            raise ExportError("Writing failed: No space left on device.")
        real(target, write)
    monkeypatch.setattr(ge, "atomic_write", disk_full)
    for path in (tmp_path / "other" / "deeper" / "m.gguf", tmp_path / "new" / "sub" / "k.gguf"):
        with pytest.raises(ExportError, match="No space"):
            export_gguf(bundle, path)
        assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before


@pytest.mark.skipif(sys.platform != "linux", reason="uses /sys, which even root cannot write")
def test_unwritable_folder(bundle):
    with pytest.raises(ExportError, match="Cannot write to the folder"):
        export_gguf(bundle, Path("/sys/model.gguf"))


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root ignores permissions")
def test_read_only_folder_keeps_previous_file(bundle, tmp_path):
    path = tmp_path / "m.gguf"
    path.write_bytes(b"previous")
    tmp_path.chmod(0o555)
    try:
        with pytest.raises(ExportError, match="Cannot write"):
            export_gguf(bundle, path, force=True)
    finally:
        tmp_path.chmod(0o755)
    assert path.read_bytes() == b"previous"


def test_failed_write_keeps_previous_file(bundle, tmp_path, monkeypatch):
    """A write that fails midway (disk full) leaves the old file and no temporary file."""
    path = tmp_path / "m.gguf"
    path.write_bytes(b"previous")

    def disk_full(self, *a, **k):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(gguf.GGUFWriter, "write_tensors_to_file", disk_full)
    with pytest.raises(ExportError, match="No space left"):
        export_gguf(bundle, path, force=True)
    assert path.read_bytes() == b"previous"
    assert [p.name for p in tmp_path.iterdir()] == ["m.gguf"]


def test_nan_weights_refused(tok, tmp_path):
    b = make_bundle(tok)
    b.weights["blk.1.ffn_up.weight"][3, 4] = np.nan
    with pytest.raises(ExportError, match=r"blk\.1\.ffn_up\.weight contains NaN"):
        export_gguf(b, tmp_path / "m.gguf")


# ---------------------------------------------------------------- bad files given to import

def test_import_rejects_bad_files(exported, tmp_path):
    data = exported["f32"].read_bytes()
    cases = {"empty.gguf": b"", "garbage.gguf": os.urandom(5000), "text.gguf": b"hello\n" * 100,
             "magic_only.gguf": b"GGUF", "header.gguf": data[:24], "kv.gguf": data[:3000],
             "tensors.gguf": data[:len(data) // 2], "last_byte.gguf": data[:-1],
             "magic_garbage.gguf": b"GGUF" + os.urandom(5000)}
    for name, blob in cases.items():
        (tmp_path / name).write_bytes(blob)
        with pytest.raises(ModelImportError) as e:
            import_gguf(tmp_path / name)
        assert name in str(e.value) and e.value.hint, name
        assert not isinstance(e.value, ExportError), "reading is not exporting"
    with pytest.raises(ModelImportError, match="does not exist"):
        import_gguf(tmp_path / "missing.gguf")
    with pytest.raises(ModelImportError, match="not a file"):
        import_gguf(tmp_path)


def test_import_huge_counts_do_not_hang(exported, tmp_path):
    """A bogus array length or key count is caught by the bounds check, not looped over."""
    data = bytearray(exported["f32"].read_bytes())
    data[16:24] = (2**62).to_bytes(8, "little")              # kv count
    (tmp_path / "kv.gguf").write_bytes(data)
    with pytest.raises(ModelImportError, match="truncated"):
        import_gguf(tmp_path / "kv.gguf")
    data = bytearray(exported["f32"].read_bytes())
    at = data.find(b"tokenizer.ggml.tokens") + len("tokenizer.ggml.tokens") + 8  # after type, itype
    data[at:at + 8] = (2**60).to_bytes(8, "little")
    (tmp_path / "arr.gguf").write_bytes(data)
    with pytest.raises(ModelImportError, match="truncated"):
        import_gguf(tmp_path / "arr.gguf")


def test_import_corrupted_bytes_fuzz(exported, tmp_path):
    """Random byte flips in the header give a bundle or an ModelImportError, never another exception."""
    data = exported["f32"].read_bytes()
    rng = np.random.default_rng(0)
    header_end = data.find(b"token_embd.weight") + 200
    for i in range(60):
        blob = bytearray(data)
        for at in rng.integers(4, header_end, size=3):
            blob[at] = int(rng.integers(0, 256))
        (tmp_path / "f.gguf").write_bytes(blob)
        try:
            import_gguf(tmp_path / "f.gguf")
        except ModelImportError:
            pass


def test_import_refuses_foreign_gguf(tmp_path):
    w = gguf.GGUFWriter(tmp_path / "gpt2.gguf", "gpt2")
    w.add_tensor("x", np.zeros(4, np.float32))
    w.write_header_to_file(), w.write_kv_data_to_file(), w.write_tensors_to_file(), w.close()
    with pytest.raises(ModelImportError, match="'gpt2' model"):
        import_gguf(tmp_path / "gpt2.gguf")


def test_not_a_gguf_hint_names_what_opens(tmp_path):
    """The hint for a file that is no GGUF names what does open: open models too, not only the
    app's own exports (was: "Only GGUF files exported by OpenCL LLM Studio can be opened here.",
    untrue since File > Open model... and `llm-studio import` read pretrained llama GGUFs)."""
    (tmp_path / "x.gguf").write_bytes(b"\x00" * 64)
    with pytest.raises(ModelImportError) as e:
        import_gguf(tmp_path / "x.gguf")
    assert "Only GGUF files exported" not in e.value.hint and "open models" in e.value.hint


# ---------------------------------------------------------------- Modelfile

def go_render(template, messages):
    """Tiny Go text/template subset: range .Messages, if/else if eq .Role "x", .Content, {{- -}}."""
    parts = re.split(r"({{.*?}})", template)
    for i in range(1, len(parts), 2):                     # "{{-" / "-}}" trim adjacent whitespace
        if parts[i].startswith("{{-"):
            parts[i - 1] = parts[i - 1].rstrip()
        if parts[i].endswith("-}}"):
            parts[i + 1] = parts[i + 1].lstrip()
    toks = [(i % 2, p if i % 2 == 0 else p.strip("{}-").strip()) for i, p in enumerate(parts)]
    pos = 0
    role = lambda act: re.search(r'eq \.Role "(\w+)"', act).group(1)  # noqa: E731

    def block():                                           # nodes up to an else/end (kept)
        nonlocal pos
        nodes = []
        while pos < len(toks):
            is_action, v = toks[pos]
            if is_action and (v == "end" or v.startswith("else")):
                return nodes
            pos += 1
            if not is_action:
                nodes.append(("text", v))
            elif v == ".Content":
                nodes.append(("content", None))
            elif v == "range .Messages":
                nodes.append(("range", block()))
                assert toks[pos][1] == "end"
                pos += 1
            elif v.startswith("if "):
                branches = [(role(v), block())]
                while toks[pos][1].startswith("else"):
                    cond = toks[pos][1]
                    pos += 1
                    branches.append((role(cond) if cond.startswith("else if") else None, block()))
                assert toks[pos][1] == "end"
                pos += 1
                nodes.append(("if", branches))
            else:
                raise AssertionError(f"unsupported action {v!r}")
        return nodes

    def run(nodes, msg):
        out = ""
        for kind, arg in nodes:
            if kind == "text":
                out += arg
            elif kind == "content":
                out += msg.content
            elif kind == "range":
                out += "".join(run(arg, m) for m in messages)
            else:
                out += next((run(body, msg) for r, body in arg if r in (None, msg.role)), "")
        return out
    return run(block(), None)


def test_modelfile(bundle, exported):
    text = (exported["f32"].parent / "tiny-f32.Modelfile").read_text()
    assert "FROM ./tiny-f32.gguf\n" in text
    assert 'PARAMETER stop "</s>"\n' in text and 'PARAMETER stop "User:"\n' in text
    assert "PARAMETER num_ctx 64\n" in text
    tmpl = re.search(r'TEMPLATE """(.*?)"""', text, re.S).group(1)
    for chat in CHATS + [CHATS[1][:-1]]:
        assert go_render(tmpl, chat) == jinja_render(chat, bos="")   # Ollama adds BOS itself
    assert "FROM ./my model.gguf\n" in modelfile_text("my model.gguf", bundle.config)  # Ollama
    # reads a value to the line's end; quotes would be taken as they are (tests/test_modelfile.py)


# ---------------------------------------------------------------- llama.cpp (llama-cpp-python)

@pytest.fixture(scope="module")
def llama_cpp():
    return pytest.importorskip("llama_cpp")


def nmse(a, b):
    return float(np.mean((a - b) ** 2) / np.mean(b ** 2))


@pytest.mark.parametrize("kind", ["bpe", "char"])
def test_llama_cpp_token_ids(llama_cpp, texts, tmp_path, kind):
    """llama.cpp's tokenizer, given our pieces/scores/types, yields the engine's ids."""
    t = Tokenizer.train(texts, 512, kind)
    llm = load(llama_cpp, export_gguf(make_bundle(t), tmp_path / "m.gguf").path)
    lines = [ln for text in texts for ln in text.split("\n")][:60]
    for s in STRINGS + lines + ["\n".join(lines[:8])]:
        b = s.encode("utf-8")
        s = as_llama_reads(s)
        assert llm.tokenize(b, add_bos=False, special=False) == t.encode(s), repr(s)
        assert llm.tokenize(b, add_bos=False, special=True) == special_encode(t, s), repr(s)
        assert llm.tokenize(b, add_bos=True, special=False) == [t.bos_id] + t.encode(s), repr(s)
    for chat in CHATS:                                     # the chat template as rendered text
        assert llm.tokenize(jinja_render(chat).encode(), add_bos=False, special=True) == \
            encode_dialogue(t, chat)[0]
        prompt = "<s>" + render_prompt(chat[:-1])
        assert llm.tokenize(prompt.encode(), add_bos=False, special=True) == \
            encode_prompt(t, chat[:-1])


def test_llama_cpp_token_ids_random_text(llama_cpp, tok, exported):
    """Random mixes of corpus words, whitespace runs and arbitrary Unicode (seeded)."""
    llm = load(llama_cpp, exported["f32"])
    rng = np.random.default_rng(7)
    words = read_text(RES / "pretrain.txt").split()[:200]
    pool = words + [" ", "  ", "\n", "\t", " \n", "é", "ß", "日本", "🎉", "\u0301", "</s>", "<s>"]
    for _ in range(300):
        pieces = [pool[i] for i in rng.integers(0, len(pool), size=rng.integers(1, 12))]
        pieces += [chr(int(c)) for c in rng.integers(32, 0x2FFFF, size=rng.integers(0, 3))
                   if not 0xD800 <= c < 0xE000]
        rng.shuffle(pieces)
        s = "".join(pieces)
        b, s = s.encode(), as_llama_reads(s)
        assert llm.tokenize(b, add_bos=False, special=False) == tok.encode(s), repr(s)
        assert llm.tokenize(b, add_bos=False, special=True) == special_encode(tok, s), repr(s)


NMSE_LIMIT = {"f32": 1e-6, "f16": 1e-4, "q8_0": 1e-2}     # Q8_0: reported, loose sanity bound


@pytest.mark.parametrize("dtype", ["f32", "f16", "q8_0"])
def test_llama_cpp_logits_match_reference(llama_cpp, bundle, exported, dtype):
    """All 64 positions (the whole context) of one sequence: llama.cpp vs the float64 reference."""
    text = " ".join(read_text(RES / "pretrain.txt").split("\n"))
    ids = np.array([[bundle.tokenizer.bos_id] + bundle.tokenizer.encode(text)[:63]])
    want = reference.forward(bundle.weights, bundle.config, ids)[0]       # (T, V) float64
    assert want.std() > 0.3                                               # non-trivial logits
    llm = load(llama_cpp, exported[dtype], repack=dtype != "q8_0")
    llm.eval(ids[0].tolist())
    got = np.array(llm.scores[: ids.shape[1]], dtype=np.float64)
    err = nmse(got, want)
    print(f"\nGGUF {dtype}: normalized MSE of logits vs reference = {err:.3e} "
          f"(argmax agreement {np.mean(got.argmax(-1) == want.argmax(-1)):.3f})")
    assert err < NMSE_LIMIT[dtype]


@pytest.mark.parametrize("tied", [True, False])
def test_llama_cpp_greedy_matches_reference(llama_cpp, tok, tmp_path, tied):
    b = make_bundle(tok, seed=6, std=0.3, tie_embeddings=tied)    # std 0.3: no early loop
    path = export_gguf(b, tmp_path / "m.gguf").path
    prompt = [tok.bos_id] + tok.encode("The capital of France is")
    ids = list(prompt)
    for _ in range(32):                                    # reference argmax loop
        ids.append(int(reference.forward(b.weights, b.config, np.array([ids]))[0, -1].argmax()))
    llm = load(llama_cpp, path)
    got = []
    for t in llm.generate(prompt, temp=0.0, repeat_penalty=1.0, reset=True):
        got.append(int(t))
        if len(got) == 32:
            break
    assert got == ids[len(prompt):]
    assert len(set(got)) >= 10                             # a varied continuation, not one token


def bigram_bundle(tok, chain):
    """A model whose greedy next token is chain[i+1] after chain[i]: blocks add nothing (zero
    attn_output and ffn_down), so the final state is the token's own embedding, and row dst of
    the untied output.weight is the unit embedding of src (logit ~10*sqrt(d_model) vs ~0)."""
    b = make_bundle(tok, seed=11, tie_embeddings=False)
    w = b.weights
    for name in w:
        if name.endswith(("attn_output.weight", "ffn_down.weight")):
            w[name][:] = 0
        if name.endswith("norm.weight"):
            w[name][:] = 1
    w["output.weight"][:] = 0
    emb = w["token_embd.weight"]
    for src, dst in zip(chain, chain[1:]):
        w["output.weight"][dst] = 10 * emb[src] / np.linalg.norm(emb[src])
    return b


def test_llama_cpp_chat_uses_gguf_template(llama_cpp, tok, tmp_path):
    """create_chat_completion renders tokenizer.chat_template with bos_token "<s>" and tokenizes
    it with add_bos=False, special=True: exactly one BOS, and ids equal encode_prompt. Generation
    stops at </s> (EOS id) with finish_reason "stop"."""
    msgs = [Message("system", "Be brief."), Message("user", "What is the capital of France?")]
    prompt = encode_prompt(tok, msgs)
    answer = tok.encode(" Paris.")
    chain = [prompt[-1]] + answer + [tok.eos_id]
    assert len(set(chain)) == len(chain)
    llm = load(llama_cpp, export_gguf(bigram_bundle(tok, chain), tmp_path / "m.gguf").path)
    assert llm.chat_format == "chat_template.default"
    out = llm.create_chat_completion(
        messages=[{"role": m.role, "content": m.content} for m in msgs],
        temperature=0.0, max_tokens=16)
    choice = out["choices"][0]
    assert choice["message"]["content"].strip() == "Paris."
    assert choice["finish_reason"] == "stop"
    assert out["usage"]["prompt_tokens"] == len(prompt)
    assert llm.input_ids[: len(prompt)].tolist() == prompt      # one BOS, same ids as training
    assert prompt[0] == tok.bos_id and prompt[1] != tok.bos_id


GQA_MODELS = {
    "gqa-4-2": dict(n_head=4, n_kv_head=2),
    "mqa-8-1": dict(n_head=8, n_kv_head=1, tie_embeddings=False),
    # Llama 3.1 RoPE scaling: original context 16 (< our 64), so all three frequency bands occur
    "llama3-rope": dict(n_head=4, n_kv_head=1, rope_base=500000.0, rope_scaling="llama3",
                        rope_scaling_factor=4.0, rope_original_context=16),
}


@pytest.mark.parametrize("name", list(GQA_MODELS))
def test_llama_cpp_runs_grouped_query_models(llama_cpp, tok, tmp_path, name):
    """A model trained with n_kv_head (and llama3 RoPE scaling) exports head_count_kv, k and v
    of kv_heads rows (and llama.cpp's rope_freqs factors), and llama.cpp gives the reference's
    logits on all 64 positions."""
    b = make_bundle(tok, seed=4, **GQA_MODELS[name])
    cfg = b.config
    path = export_gguf(b, tmp_path / "m.gguf").path
    reader = gguf.GGUFReader(path)
    assert reader.fields["llama.attention.head_count_kv"].contents() == cfg.kv_heads
    shapes = {t.name: tuple(int(n) for n in reversed(t.shape)) for t in reader.tensors}
    assert shapes["blk.0.attn_k.weight"] == (cfg.kv_heads * cfg.head_dim, cfg.d_model)
    assert ("rope_freqs.weight" in shapes) == bool(cfg.rope_scaling)
    text = " ".join(read_text(RES / "pretrain.txt").split("\n"))
    ids = np.array([[tok.bos_id] + tok.encode(text)[:63]])
    want = reference.forward(b.weights, cfg, ids)[0]
    llm = load(llama_cpp, path)
    llm.eval(ids[0].tolist())
    got = np.array(llm.scores[: ids.shape[1]], dtype=np.float64)
    assert nmse(got, want) < NMSE_LIMIT["f32"]
    if cfg.rope_scaling:   # the scaling matters: unscaled RoPE gives other logits
        plain = reference.forward(b.weights, cfg.replace(rope_scaling=""), ids)[0]
        assert nmse(plain, want) > 100 * nmse(got, want)
