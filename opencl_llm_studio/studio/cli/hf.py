"""`llm-studio import` and `scale-out`: the Hugging Face round trip (engine/files/hf; `export --format
hf` is studio.cli.models.cmd_export). Registered by studio.cli.parser.build_parser; no Qt."""

from __future__ import annotations

import sys
from pathlib import Path

from opencl_llm_studio.engine.errors import StudioError
from opencl_llm_studio.studio.cli.models import load_model
from opencl_llm_studio.studio.cli.options import shell_arg
from opencl_llm_studio.studio.run_folder import (HF_KINDS, IMPORT_HINT, ModelKind, holds_run, make_run_folder,
                               path_kind, write_metrics)


def cmd_import(args) -> int:
    from opencl_llm_studio.engine.data.dialogue import read_dialogues
    from opencl_llm_studio.engine.files.gguf_export import is_open
    from opencl_llm_studio.engine.files.hf.load import has_texts
    from opencl_llm_studio.engine.data.textio import bundled_corpus, read_text
    out, src = Path(args.out), Path(args.model)
    kind = path_kind(src, IMPORT_HINT)
    if kind not in HF_KINDS and kind is not ModelKind.GGUF:
        raise StudioError(f"{src} is a {kind.value}: it is a run already.",
                          f"Chat with it or export it as it is, or train it further into a new "
                          f"folder with `llm-studio train --out NEW --continue-from "
                          f"{shell_arg(src)}`.")
    if holds_run(out):
        raise StudioError(f"{out} already holds a training run.", "Give a new run folder as OUT.")
    pre = read_text(args.pretrain, "pretraining text") if args.pretrain else None
    tune = read_dialogues(args.tune)[0] if args.tune else None
    bundle = _read_model(src, kind)          # first: a model that cannot open gets no note
    if pre is None and (kind is ModelKind.GGUF or not has_texts(src)):
        own = "--pretrain" if args.tune else "--pretrain / --tune"
        print("note: the model carries no training text; the run keeps the bundled corpus as "
              f"its general text (give {own} for your own)", file=sys.stderr)
        pre = read_text(bundled_corpus("pretrain"))
    if bundle is not None and is_open(bundle):
        return _import_open(bundle, src, out, pre, args.tune)
    return _import_app_model(src, kind, out, pre, tune, args, bundle)


def _read_model(src: Path, kind: ModelKind):
    """The ModelBundle of a model file or folder (studio.open_import.read_model, read once), or
    None for a transformers folder this app wrote: that one is told from its metadata, without
    its tensors, and session_from_hf reads them once. Raises ModelImportError for a model the
    engine cannot run."""
    from opencl_llm_studio.engine.files.gguf_export import is_open
    from opencl_llm_studio.studio.open_import import read_model
    if kind is ModelKind.APP_HF_FOLDER and not is_open(read_model(src, False, kind)):
        return None
    return read_model(src, kind=kind)


def _import_open(bundle, src: Path, out: Path, pre: str, tune_path) -> int:
    from opencl_llm_studio.engine.files.model_card import format_card, model_card
    from opencl_llm_studio.engine.data.textio import read_text
    from opencl_llm_studio.studio.open_import import import_open_model
    tune = read_text(tune_path, "tune dialogues") if tune_path else None
    import_open_model(bundle, out, pre, tune)
    print(format_card(model_card(bundle)))
    q = shell_arg(out)
    tune_how = (f"Tune it with `llm-studio train --out {q} --continue --tune-steps N`" if tune
                else f"To tune it, `llm-studio train --out {q} --continue --tune FILE "
                     f"--tune-steps N`")
    print(f"Imported {src} into {out}. {tune_how}; chat with `llm-studio chat {q}`.",
          file=sys.stderr)
    return 0


def _import_app_model(src: Path, kind: ModelKind, out: Path, pre, tune, args,
                      bundle=None) -> int:
    """A transformers folder or a GGUF this app wrote (`bundle`: the GGUF as already read) -> a
    run folder at the step it was exported at (AdamW state fresh; a GGUF whose run folder is
    gone can be trained again). Without texts of its own (a GGUF never has them) it keeps the
    bundled corpora."""
    from opencl_llm_studio.engine.files.hf.load import has_texts
    from opencl_llm_studio.engine.training.open_hf import session_from_hf
    from opencl_llm_studio.engine.data.textio import bundled_corpus, read_text
    from opencl_llm_studio.engine.training.opening import session_from_bundle
    from opencl_llm_studio.studio.open_import import writing_run
    if not args.pretrain and (kind is ModelKind.GGUF or not has_texts(src)):
        tune = tune or read_text(bundled_corpus("tune"))
    if kind is ModelKind.GGUF:
        s = session_from_bundle(bundle, pre, tune, device=args.device)
    else:
        s = session_from_hf(src, pre, tune, device=args.device)
    with writing_run(out):
        make_run_folder(out)
        s.save(out)
        write_metrics(out, s.history)
    c = s.model_config
    print(f"Imported {src} into {out}: d_model {c.d_model}, n_layer {c.n_layer}, "
          f"vocab {c.vocab_size}, step {s.step}/{s.total_steps}. Chat with `llm-studio chat "
          f"{shell_arg(out)}`, continue with `llm-studio train --out {shell_arg(out)} "
          "--continue`.", file=sys.stderr)
    return 0


def cmd_scale_out(args) -> int:
    from opencl_llm_studio.engine.files.hf.scale_out import scale_out, torchrun_command
    s = load_model(args)
    folder = scale_out(s, args.output, force=args.force)
    print(f"Wrote {folder}. On a machine with N GPUs, in that folder:\n  "
          f"{torchrun_command()}\nthen `llm-studio import "
          f"{shell_arg(Path(folder) / 'continued')} RUN_FOLDER`.")
    return 0


def register(sub, S) -> None:
    """The `import` and `scale-out` subcommands (S = argparse.SUPPRESS, as in build_parser)."""
    i = sub.add_parser("import", help="a GGUF or transformers Llama model -> a run folder",
                       description="Turn a pretrained open model (a llama GGUF of any type, "
                       "or a transformers folder: SmolLM2, TinyLlama, Llama 3.x) or a folder "
                       "exported by this app into a run folder to chat with, tune or export; "
                       "prints the model card. Models the engine cannot run are refused with "
                       "the reason.")
    i.add_argument("model", help="a .gguf file, or a transformers folder (config.json, "
                   "*.safetensors, tokenizer.json or tokenizer.model)")
    i.add_argument("out", help="the new run folder")
    i.add_argument("--pretrain", default=None, help="pretraining text (default: the folder's)")
    i.add_argument("--tune", default=None, help="dialogue text (default: the folder's)")
    i.add_argument("--device", default=S, help="OpenCL device index or name part")
    i.set_defaults(func=cmd_import)
    o = sub.add_parser("scale-out", help="pack a run for multi-GPU training with torchrun",
                       description="Write a transformers folder, the training data and a "
                       "torchrun-ready train_ddp.py that continues the run on many GPUs.")
    o.add_argument("dir", help="run folder or checkpoint file")
    o.add_argument("output", help="folder to write")
    o.add_argument("--force", action="store_true", help="replace an existing folder")
    o.add_argument("--device", default=S, help="OpenCL device index or name part")
    o.set_defaults(func=cmd_scale_out)
