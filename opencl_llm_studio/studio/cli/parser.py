"""The `llm-studio` command: its arguments, and main(), which runs the chosen command (the
studio window without one). Every error a person can cause ends with a message, a hint and
exit status 2, no traceback. Qt-free: the window is imported only when it is opened.
"""

from __future__ import annotations

import argparse
import sys

from opencl_llm_studio import __version__
from opencl_llm_studio.engine.config import (ADAM_MOMENTS, CHECKPOINT_EVERY, DEFAULT_TOKENIZER, MAX_NEW_TOKENS,
                                             PRETRAINED_TUNE_LR, TOKENIZER_KINDS, SamplingParams)
from opencl_llm_studio.engine.errors import StudioError
from opencl_llm_studio.engine.extras import missing_extra
from opencl_llm_studio.engine.files.export_types import DEFAULT_DTYPE, DTYPE_NAMES
from opencl_llm_studio.studio.cli import hf, models, run_names, runs, tune
from opencl_llm_studio.engine.files.model_card import tokenizer_name
from opencl_llm_studio.studio.cli.inputs import limited
from opencl_llm_studio.studio.cli.options import TRAIN_DEFAULTS
from opencl_llm_studio.studio.cli.train import cmd_train

EXIT_USER_ERROR = 2


def cmd_studio(args) -> int:
    """`llm-studio` without a command: the studio window. The only way into Qt, imported here
    and nowhere else in this package, so the commands never load it."""
    from opencl_llm_studio.studio.preflight import check_display
    check_display()  # missing xcb libraries or a wrong DISPLAY: a message and exit 2, not abort
    from opencl_llm_studio.studio.ui.app import run_app
    return run_app(pretrain_path=args.pretrain, tune_path=args.tune, device=args.device,
                   screenshot=args.screenshot)


def build_parser() -> argparse.ArgumentParser:
    S = argparse.SUPPRESS  # subcommand options fall back to the same top-level option
    p = argparse.ArgumentParser(prog="llm-studio", description=(
        "Train a small Llama-style language model from scratch on any OpenCL device. "
        "Without a command, opens the studio window."))
    p.add_argument("--version", action="version", version=f"llm-studio {__version__}")
    p.add_argument("--pretrain", help="pretraining text file (default: the bundled corpus)")
    p.add_argument("--tune", help="dialogue file, 'User: ... Assistant: ...' or JSONL")
    p.add_argument("--device", help="OpenCL device index or name part (see `llm-studio devices`)")
    p.add_argument("--screenshot", metavar="PNG", help="open the window, save a picture of it "
                   "to PNG once shown, and close (with QT_QPA_PLATFORM=offscreen: no display)")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.add_parser("devices", help="list the OpenCL devices").set_defaults(func=models.cmd_devices)

    from opencl_llm_studio.engine.training.auto_size import AUTO
    from opencl_llm_studio.engine.training.presets import PRESETS
    d = TRAIN_DEFAULTS
    t = sub.add_parser("train", help="train headless; writes a checkpoint and metrics.jsonl",
                       description="Train a model headless. Step counts are totals per stage; "
                       "with --continue, larger totals train a saved run further.")
    t.add_argument("--out", required=True, help="run folder for checkpoint and metrics.jsonl")
    t.add_argument("--continue", dest="continue_run", action="store_true",
                   help="train the run saved in --out further (to the step totals given)")
    t.add_argument("--continue-from", metavar="RUN",
                   help="train the run saved in RUN further as a new run in --out, which "
                   "starts with RUN's history; RUN stays as it is (the studio's Continue "
                   "\"as a new run\"; --continue is Continue in place)")
    t.add_argument("--resume", action="store_true", help=argparse.SUPPRESS)  # old --continue
    t.add_argument("--pretrain", default=S, help="pretraining text (default: bundled)")
    t.add_argument("--tune", default=S, help="dialogue text (default: bundled); with --continue, "
                   "new dialogues for the run's tuning stage (a run without any gains one)")
    t.add_argument("--no-tune", action="store_true", help="pretraining only")
    t.add_argument("--device", default=S, help="OpenCL device index or name part")
    t.add_argument("--d-model", type=limited("d_model"), help=f"embedding size ({d['d_model']})")
    t.add_argument("--n-layer", type=limited("n_layer"),
                   help=f"transformer blocks ({d['n_layer']})")
    t.add_argument("--n-head", type=limited("n_head"), help=f"attention heads ({d['n_head']})")
    t.add_argument("--n-kv-head", type=limited("n_kv_head"),
                   help="key/value heads, a divisor of n_head: grouped-query attention "
                        f"(0 = n_head, {d['n_kv_head']})")
    t.add_argument("--context-length", type=limited("context_length"),
                   help=f"tokens per window ({d['context_length']})")
    t.add_argument("--vocab-size", type=limited("vocab_size"),
                   help=f"requested vocabulary ({d['vocab_size']})")
    t.add_argument("--tokenizer", choices=TOKENIZER_KINDS,
                   help=" or ".join(f"{k}: {tokenizer_name(k)}" for k in TOKENIZER_KINDS)
                   + f" ({DEFAULT_TOKENIZER}; with --preset auto, Auto's choice)")
    t.add_argument("--lr", type=limited("learning_rate"),
                   help=f"peak learning rate ({d['lr']})")
    t.add_argument("--tune-lr", type=limited("tune_learning_rate"),
                   help="peak learning rate while tuning (default: --lr / 3 after a "
                   "pretraining stage, --lr in a run without one, such as an imported model, "
                   f"whose --lr is {PRETRAINED_TUNE_LR:g})")
    t.add_argument("--steps", type=limited("pretrain_steps"),
                   help=f"pretraining steps, total ({d['steps']})")
    t.add_argument("--tune-steps", type=limited("tune_steps"),
                   help=f"tuning steps, total ({d['tune_steps']})")
    t.add_argument("--batch-size", type=limited("batch_size"),
                   help=f"windows per step ({d['batch_size']})")
    t.add_argument("--replay", type=limited("replay_fraction"),
                   help=f"share of pretraining windows in tuning batches ({d['replay']})")
    t.add_argument("--seed", type=limited("seed"),
                   help=f"weights, batches and sampling ({d['seed']})")
    t.add_argument("--val-split", metavar="KIND:SHARE",
                   help="held-out text, the end of the text: docs:F = the last share F of "
                   "the paragraphs (the last characters when one paragraph), tail:F = the last "
                   f"share F of the characters, nanoGPT's split ({d['val_split']})")
    t.add_argument("--time-budget", type=limited("time_budget_s"), metavar="SECONDS",
                   help="train for this many seconds (evaluations included) and fit the step "
                   "count and lr schedule to it; --steps is then only the first plan. With "
                   "--continue: seconds more (off)")
    t.add_argument("--dropout", type=limited("dropout"), help="drop probability after the attention output "
                   f"and feed-forward projections, training only ({d['dropout']})")
    t.add_argument("--adam-moments", choices=ADAM_MOMENTS,
                   help="how a new run keeps its AdamW moments: f32, bf16 (half the memory, "
                   "stochastic rounding) or auto, bf16 from 250M parameters "
                   f"({d['adam_moments']})")
    t.add_argument("--preset", choices=list(PRESETS) + [AUTO],
                   help="small-text settings for a CPU, an integrated or a discrete GPU "
                   "(engine/training/presets.py), or auto: with --time-budget, the model, batch, "
                   "learning rate and tokenizer chosen from the text's size, the device's "
                   "measured speed and free memory, and the seconds (engine/training/"
                   "auto_size.py); explicit options win")
    t.add_argument("--lora-rank", type=limited("lora_rank"), metavar="R",
                   help="with --continue on a run imported from a GGUF: tune LoRA adapters of "
                   "rank R on the model kept quantized, not the whole model (8-16)")
    t.add_argument("--lora-alpha", type=limited("lora_alpha"), metavar="A",
                   help="LoRA scale alpha (the update is alpha/R B A; default twice the rank)")
    t.add_argument("--lora-targets", metavar="NAMES",
                   help="comma-separated weights to adapt: attn_q, attn_k, attn_v, attn_output, "
                   "ffn_gate, ffn_up, ffn_down (default: all)")
    t.add_argument("--lora-dropout", type=limited("lora_dropout"), metavar="P",
                   help="dropout on the adapters' input (0)")
    t.add_argument("--base", metavar="GGUF", help="with --lora-rank: the imported model's GGUF "
                   "file, where it is no longer where it was imported from")
    t.add_argument("--checkpoint-every", type=limited("checkpoint_every"), default=CHECKPOINT_EVERY,
                   help=f"steps between checkpoints; 0 = only at the end ({CHECKPOINT_EVERY})")
    t.add_argument("--autotune", action="store_true",
                   help="tune the kernels for this device and model shape first (up to 30 s, "
                   "Ctrl-C cancels) when `tune-kernels` has not; as LLM_STUDIO_AUTOTUNE=1")
    t.add_argument("--quiet", action="store_true", help="no progress bar")
    t.add_argument("--tensorboard", action="store_true",
                   help="also write TensorBoard event files into OUT/tensorboard (tensorboardX)")
    t.set_defaults(func=cmd_train)

    def gen_args(q):
        q.add_argument("dir", help="run folder, checkpoint file, or a GGUF this app exported")
        q.add_argument("--device", default=S, help="OpenCL device index or name part")
        sp = SamplingParams()  # the engine's defaults
        q.add_argument("--max-tokens", type=limited("max_new_tokens"), default=MAX_NEW_TOKENS,
                       help=f"tokens to generate ({MAX_NEW_TOKENS})")
        q.add_argument("--temperature", type=limited("temperature"), default=sp.temperature,
                       help=f"randomness; 0 = always the most likely token ({sp.temperature})")
        q.add_argument("--top-k", type=limited("top_k"), default=sp.top_k,
                       help=f"sample among the k likeliest ({sp.top_k})")
        q.add_argument("--top-p", type=limited("top_p"), default=sp.top_p,
                       help=f"nucleus sampling: smallest set with this probability ({sp.top_p})")
        q.add_argument("--repeat-penalty", type=limited("repetition_penalty"),
                       default=sp.repetition_penalty,
                       help="divide the logits of tokens already generated "
                            f"({sp.repetition_penalty} = off)")
        q.add_argument("--seed", type=limited("seed"), default=None,
                       help="sampling seed (random)")
        q.add_argument("--greedy", action="store_true", help="always the most likely token")

    s = sub.add_parser("sample", help="continue a prompt")
    gen_args(s)
    s.add_argument("--prompt", default="", help="text to continue (default: from scratch)")
    s.set_defaults(func=models.cmd_sample)
    c = sub.add_parser("chat", help="chat in the tune format (interactive, or -m for one answer)")
    gen_args(c)
    c.add_argument("-m", "--message", default=None, help="one question; prints the answer")
    c.set_defaults(func=models.cmd_chat)
    k = sub.add_parser("tokenize", help="show how a text is cut into tokens")
    k.add_argument("dir", help="run folder, checkpoint file, or exported GGUF")
    k.add_argument("text", help="the text to cut")
    k.set_defaults(func=models.cmd_tokenize)
    e = sub.add_parser("export", help="write a GGUF (and an Ollama Modelfile beside it), or a "
                       "Hugging Face transformers folder (--format hf)")
    e.add_argument("dir", help="run folder or checkpoint file")
    e.add_argument("output", nargs="?", help="the .gguf file to write (a folder with --format "
                   "hf); default: in the run folder, RUN/export/NAME-DTYPE.gguf (RUN/export/hf)")
    e.add_argument("--format", choices=["gguf", "hf", "peft"], default="gguf",
                   help="gguf (llama.cpp, Ollama, LM Studio), hf (transformers) or, for a LoRA "
                   "run, peft (its adapters as a PEFT folder) (gguf)")
    e.add_argument("--adapter", action="store_true",
                   help="a LoRA run's adapters alone, as a GGUF LoRA adapter for llama.cpp's "
                   "--lora and an Ollama Modelfile with FROM the base and ADAPTER it")
    e.add_argument("--dtype", choices=DTYPE_NAMES, default=DEFAULT_DTYPE,
                   help="weight type: f32 exact, f16 half size, q8_0 quarter size (f32)")
    e.add_argument("--force", action="store_true", help="overwrite existing files")
    e.add_argument("--device", default=S, help="OpenCL device index or name part")
    e.set_defaults(func=models.cmd_export)
    runs.register(sub, S)
    hf.register(sub, S)
    tune.register_tune(sub, S)
    for choice in sub._choices_actions:   # `llm-studio CMD --help` says what CMD does, too
        command = sub.choices[choice.dest]
        command.description = command.description or f"{choice.help[:1].upper()}{choice.help[1:]}."
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        args = build_parser().parse_args(argv)
        run_names.resolve(args)   # a plain name is a run in the runs folder
        return (args.func if args.command else cmd_studio)(args)
    except StudioError as e:
        return _report(e)
    except ModuleNotFoundError as e:   # an optional extra not installed: say which, not a traceback
        missing = missing_extra(e)
        if missing is None:
            raise
        return _report(missing)
    except KeyboardInterrupt:
        return 130


def _report(e: StudioError) -> int:
    print(f"\nerror: {e}", file=sys.stderr)
    if e.cli_hint:
        print(e.cli_hint, file=sys.stderr)
    return EXIT_USER_ERROR
