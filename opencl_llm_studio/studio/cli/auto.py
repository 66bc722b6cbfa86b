"""`llm-studio train --preset auto`: the device's training speed measured, Auto's choice made for
the text and the seconds (engine.training.auto_size) and said before training. Qt-free."""

from __future__ import annotations

from opencl_llm_studio.engine.errors import ConfigError
from opencl_llm_studio.studio.cli.options import given_options


def auto_choice(args, text: str, rt, line):
    """The AutoChoice for `text` (the pretraining text, its held-out share left out) and
    --time-budget on `rt`'s device, its reasons and the explicit options that override it said
    on `line`. ConfigError without --time-budget (and as auto_size.choose raises)."""
    from opencl_llm_studio.engine.config import TrainConfig, parse_val_split
    from opencl_llm_studio.engine.training.auto_size import choose, measure_speed
    if not args.time_budget:
        raise ConfigError("--preset auto sizes the model for a time budget, and none was given.",
                          "Add --time-budget SECONDS (60 for a minute, 300 for five).")
    held_out = (parse_val_split(args.val_split)[1] if args.val_split is not None
                else TrainConfig().val_fraction)
    line.say(f"Auto: measuring the training speed of {rt.info.name} ...")
    choice = choose(int(len(text) * (1.0 - held_out)), args.time_budget, measure_speed(rt),
                    rt.info)
    for reason in choice.lines:
        line.say(f"  {reason}")
    line.say(f"Auto chose: {choice.summary()}")
    given = [o for o in given_options(args) if o != "--time-budget"]
    given += ["--tokenizer"] if args.tokenizer is not None else []
    if given:
        line.say(f"  given, so kept over Auto's: {', '.join(given)}")
    return choice
