"""The commands on a device or a saved model: `devices`, `sample`, `chat`, `tokenize`, `export`.
A model path is told by studio.run_folder.path_kind. Qt-free."""

from __future__ import annotations

import sys
from pathlib import Path

from opencl_llm_studio.engine.errors import StudioError
from opencl_llm_studio.studio.cli.options import shell_arg
from opencl_llm_studio.studio.run_folder import HF_KINDS, RUN_OR_GGUF_HINT, ModelKind, path_kind


def cmd_devices(args) -> int:
    from opencl_llm_studio.engine.opencl.device import NO_DEVICE_HINT, list_devices, select_device
    devices = list_devices()
    if not devices:
        print("No OpenCL device found.\n" + NO_DEVICE_HINT)
        return 1
    default = select_device(None).index
    for d in devices:
        mark = "*" if d.index == default else " "
        print(f"{mark} {d.index}: {d.name} | {d.type} | {d.platform} | {d.compute_units} CUs | "
              f"{d.global_mem_bytes / 2**30:.1f} GiB | {d.opencl_version}")
    print("* = default (first GPU, else first CPU); another one: --device INDEX or NAME")
    return 0


def load_model(args):
    """The session of args.dir: a run folder or checkpoint (engine.files.checkpoint.load's choice of
    file), or a GGUF (with the bundled pretraining text): engine.training.opening. Raises
    StudioError for a path of another kind (studio.run_folder.path_kind)."""
    from opencl_llm_studio.engine.training.opening import open_session
    kind = path_kind(args.dir, RUN_OR_GGUF_HINT)
    if kind in HF_KINDS:
        raise StudioError(f"{args.dir} is a {kind.value}; this command takes a run folder or a "
                          "GGUF.", f"Turn it into a run folder first: `llm-studio import "
                          f"{shell_arg(args.dir)} RUN_FOLDER`, then give RUN_FOLDER.")
    s = open_session(args.dir, device=args.device)
    note_fallback(s)
    return s


def note_fallback(session) -> None:
    """Say on stderr when the newest checkpoint was damaged and the one before it was read."""
    if session.loaded_from_previous:
        print("note: the newest checkpoint was damaged; continuing from the one before it "
              f"(step {session.step}).", file=sys.stderr)


def sampling_kwargs(args):
    return dict(max_new_tokens=args.max_tokens, temperature=args.temperature, top_k=args.top_k,
                top_p=args.top_p, repetition_penalty=args.repeat_penalty, seed=args.seed,
                greedy=args.greedy)


def cmd_sample(args) -> int:
    s = load_model(args)
    print(args.prompt, end="", flush=True)
    s.generate(args.prompt, on_token=lambda t: print(t, end="", flush=True),
               **sampling_kwargs(args))
    print()
    return 0


def cmd_tokenize(args) -> int:
    from opencl_llm_studio.engine.files import checkpoint
    from opencl_llm_studio.engine.data.open_tokenizer import tokenizer_from_bytes   # the app's or an imported model's
    kind = path_kind(args.dir)
    if kind is ModelKind.GGUF:
        from opencl_llm_studio.engine.files.gguf_import import import_gguf
        tok = import_gguf(args.dir, weights=False).tokenizer   # no tensor dequantized
    elif kind in HF_KINDS:
        from opencl_llm_studio.engine.files.hf.load import read_tokenizer
        tok = read_tokenizer(Path(args.dir))
    else:
        tok = tokenizer_from_bytes(checkpoint.load(args.dir)["tokenizer"])
    ids = tok.encode(args.text)
    print(" ".join(str(i) for i in ids))
    print(" ".join(repr(tok.id_to_piece(i)) for i in ids))
    print(f"{len(ids)} tokens for {len(args.text)} characters")
    return 0


EXPORT_FOLDER = "export"   # inside a run folder: where `export RUN` writes without an OUTPUT


def default_export_path(model: str, fmt: str, dtype: str) -> Path:
    """Where `export MODEL` writes without an OUTPUT: the run's own folder, RUN/export/
    NAME-DTYPE.gguf (or RUN/export/hf), so an export never lands in the current folder by
    surprise. StudioError for a model that is not a run (a GGUF, a transformers folder)."""
    path = Path(model)
    kind = path_kind(path, RUN_OR_GGUF_HINT)
    if kind not in (ModelKind.RUN_FOLDER, ModelKind.CHECKPOINT):
        raise StudioError(f"{model} is a {kind.value}, not a run: name the file to write.",
                          f"Give the output: `llm-studio export {shell_arg(model)} OUT.gguf`.")
    run = path if kind is ModelKind.RUN_FOLDER else path.parent
    folder = run.resolve() / EXPORT_FOLDER
    if fmt in ("hf", "peft"):
        return folder / fmt
    return folder / f"{run.resolve().name}-{dtype}.gguf"


def cmd_export(args) -> int:
    if args.output is None:
        args.output = str(default_export_path(args.dir, args.format,
                                              "lora" if args.adapter else args.dtype))
    s = load_model(args)
    if args.adapter or args.format == "peft":
        from opencl_llm_studio.studio.cli.adapter_export import export_adapter
        return export_adapter(s, args)
    if args.format == "hf":
        return _export_hf(s, args)
    r = s.export_gguf(args.output, dtype=args.dtype, force=args.force)
    print(f"Wrote {r.path} ({r.size_bytes / 1024:.0f} KiB, {r.dtype})"
          + (f" and {r.modelfile_path}" if r.modelfile_path else ""))
    note = r.no_modelfile_note()
    if note:   # a pretrained model's export: say why there is none
        print(note)
    return 0


def cmd_chat(args) -> int:
    from opencl_llm_studio.engine.data.dialogue import Message
    s = load_model(args)
    kw = sampling_kwargs(args)
    if args.message is not None:
        reply = s.chat([Message("user", args.message)],
                       on_token=lambda t: print(t, end="", flush=True), **kw)
        print()
        for note in reply.notes():
            print(f"({note})")
        return 0
    history: list = []
    from opencl_llm_studio.engine.files.open_run import MODEL_TEMPLATE
    if s.tune is None and s.chat_format != MODEL_TEMPLATE:   # an open model in its own
        print("note: this model was not tuned on dialogues; answers may just continue text.")
    print("Chat with the model. /reset starts over, /help lists commands; an empty line or "
          "Ctrl-D ends.")
    while True:
        try:
            line = input("User: ").strip()
        except EOFError:
            break
        if not line:
            break
        if line in ("/reset", "/clear"):
            history.clear()
            print("(conversation cleared)")
            continue
        if line in ("/help", "/?"):
            print("/reset  forget the conversation\n/help   this list\nempty line  quit")
            continue
        history.append(Message("user", line))
        print("Assistant: ", end="", flush=True)
        reply = s.chat(history, on_token=lambda t: print(t, end="", flush=True), **kw)
        print()
        for note in reply.notes():   # turns left out of the prompt, an answer cut by the window
            print(f"({note})")
        history.append(Message("assistant", reply.strip()))   # as tune turns are: stripped
    return 0


def _export_hf(session, args) -> int:
    """`export --format hf`: a transformers LlamaForCausalLM folder (engine.files.hf.export)."""
    from opencl_llm_studio.engine.files.hf.export import export_session
    folder = export_session(session, args.output, force=args.force)
    print(f"Wrote {folder} (transformers LlamaForCausalLM folder: "
          "from_pretrained loads it as is)")
    return 0
