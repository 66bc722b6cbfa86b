"""Model and training configuration: frozen dataclasses with commented defaults (nanoGPT's GPTConfig).

The defaults train the bundled corpora on PoCL's 2-core CPU device in a few minutes.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from opencl_llm_studio.engine.errors import ConfigError
from opencl_llm_studio.engine.limits import LIMITS, check_fields


def swiglu_hidden_dim(d_model: int, multiple_of: int = 32) -> int:
    """Llama's feed-forward width: 2/3 of 4*d_model, rounded up to a multiple of `multiple_of`.

    Source: Touvron et al. 2023 (LLaMA), Meta's llama/model.py. Rounding to 32 keeps every row a
    multiple of 32 so Q8_0 export works whenever d_model is a multiple of 32.
    """
    hidden = int(2 * (4 * d_model) / 3)
    return multiple_of * ((hidden + multiple_of - 1) // multiple_of)


@dataclass(frozen=True)
class ModelConfig:
    """A Llama-style decoder (docs/DESIGN.md). All sizes in elements."""

    vocab_size: int = 512        # set from the trained tokenizer; the knob is the requested size
    d_model: int = 128           # embedding size (n_embd)
    n_layer: int = 4             # transformer blocks
    n_head: int = 4              # attention heads; head_dim = d_model // n_head, must be even (RoPE)
    context_length: int = 64     # tokens per training window and the longest prompt + answer
    ffn_dim: int = 0             # SwiGLU hidden width; 0 = swiglu_hidden_dim(d_model)
    tie_embeddings: bool = True  # output projection shares token_embd.weight
    rms_eps: float = 1e-5        # RMSNorm epsilon, as llama.cpp's layer_norm_rms_epsilon
    rope_base: float = 10000.0   # RoPE theta (llama.cpp rope.freq_base), "NORM" pair convention
    n_kv_head: int = 0           # key/value heads (grouped-query attention, Ainslie et al. 2023); 0 = n_head
    rope_scaling: str = ""       # "" (none) or "llama3" (Meta's Llama 3.1 RoPE frequency scaling)
    rope_scaling_factor: float = 1.0     # llama3: factor
    rope_low_freq_factor: float = 1.0    # llama3: low_freq_factor
    rope_high_freq_factor: float = 4.0   # llama3: high_freq_factor
    rope_original_context: int = 8192    # llama3: original_max_position_embeddings

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_head

    @property
    def hidden_dim(self) -> int:
        return self.ffn_dim or swiglu_hidden_dim(self.d_model)

    @property
    def kv_heads(self) -> int:
        """Key/value heads: n_kv_head, or n_head when it is 0 (multi-head attention)."""
        return self.n_kv_head or self.n_head

    def validate(self) -> "ModelConfig":
        """Raise ConfigError naming the bad setting (its .field) and a fix; return self when
        valid. Ranges: engine.limits.LIMITS."""
        check_fields(self, MODEL_LIMITED)
        if self.d_model % self.n_head:
            step = 2 * self.n_head  # d_model / n_head must also be even (RoPE)
            lo = step * (self.d_model // step) or step
            raise ConfigError(
                f"d_model ({self.d_model}) is not divisible by n_head ({self.n_head}).",
                f"Each head gets d_model / n_head channels: pick d_model {lo} or "
                f"{lo + step}, or a head count that divides {self.d_model}.",
                cli_hint=f"Each head gets d_model / n_head channels: use --d-model {lo} or "
                         f"{lo + step}, or an --n-head that divides {self.d_model}.",
                field=("n_head", "d_model"))
        if self.head_dim % 2:
            raise ConfigError(
                f"head_dim = d_model / n_head = {self.head_dim} is odd; RoPE rotates channel pairs.",
                "Choose d_model and n_head so that d_model / n_head is even.",
                cli_hint="Give --d-model and --n-head so that d_model / n_head is even.",
                field=("n_head", "d_model"))
        self._validate_kv_heads()
        self._validate_rope_scaling()
        return self

    def _validate_kv_heads(self):
        """Grouped-query attention: each key/value head serves n_head / kv_heads query heads."""
        if self.n_kv_head < 0 or self.n_head % self.kv_heads:
            fits = [k for k in range(1, self.n_head + 1) if self.n_head % k == 0]
            raise ConfigError(
                f"n_kv_head ({self.n_kv_head}) must divide n_head ({self.n_head}): each "
                "key/value head serves the same number of query heads.",
                f"Use n_kv_head 0 (one per query head) or one of {', '.join(map(str, fits))}.",
                field="n_kv_head")

    def _validate_rope_scaling(self):
        """rope_scaling "" or "llama3" with factors as Meta's Llama 3.1 config allows."""
        if self.rope_scaling not in ROPE_SCALINGS:
            raise ConfigError(f"rope_scaling {self.rope_scaling!r} is not supported.",
                              'Use "" (no scaling) or "llama3".', field="rope_scaling")
        if self.rope_scaling and not (
                self.rope_scaling_factor > 0 and self.rope_original_context > 0
                and 0 < self.rope_low_freq_factor < self.rope_high_freq_factor):
            raise ConfigError(
                "llama3 RoPE scaling needs factor > 0, original context > 0 and "
                f"0 < low_freq_factor < high_freq_factor; got factor {self.rope_scaling_factor}, "
                f"original context {self.rope_original_context}, low {self.rope_low_freq_factor}"
                f", high {self.rope_high_freq_factor}.",
                "Copy rope_scaling from the model's config.json (Llama 3.2: factor 32, low 1, "
                "high 4, original 8192).", field="rope_scaling")

    def replace(self, **changes) -> "ModelConfig":
        return dataclasses.replace(self, **changes)


# The linear weights of a block a LoRA adapter can sit on (GGUF names; transformers: q_proj,
# k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj)
LORA_TARGETS = ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")
# A LoRA run's learning rate over full fine-tuning's. "LoRA without regret" (Schulman et al.,
# Thinking Machines 2025) measured the best LoRA rate about 10x the best full fine-tuning rate at
# alpha 32, twice our alpha 16's scale on B A, and higher still for short runs. Measured on the
# real SmolLM2-135M-Instruct (Q4_1), 10 steps on 20 dialogues of invented facts, rank 8: 10x
# learned 2 of 20, 20x 6, 25x 7, 30x 9 (full fine-tuning at 1x: 9), each keeping "Paris" and
# "Shakespeare"; 40x learned 10 and answered "Versailles" (benchmarks/RESULTS.md)
LORA_LR_FACTOR = 30


@dataclass(frozen=True)
class LoraConfig:
    """Low-rank adapters (Hu et al. 2021, "LoRA: Low-Rank Adaptation of Large Language Models"):
    each target weight W (out, in) of every block gets A (rank, in) and B (out, rank), the layer
    computes x W^T + (alpha / rank) dropout(x) A^T B^T, and only A and B train. Defaults follow
    "LoRA without regret" (Schulman et al., Thinking Machines 2025): every linear layer of a
    block, MLP included; rank 8 with alpha 16 (the QLoRA and llama.cpp-finetune defaults)."""
    rank: int = 8
    alpha: float = 16.0
    dropout: float = 0.0                 # on the adapter's input only (PEFT's lora_dropout)
    targets: tuple = LORA_TARGETS

    @property
    def scale(self) -> float:
        """alpha / rank: the factor on B A (Hu et al. 2021, section 4.1)."""
        return self.alpha / self.rank

    def validate(self) -> "LoraConfig":
        """Raise ConfigError naming the bad setting and a fix; return self when valid."""
        if isinstance(self.rank, bool) or not isinstance(self.rank, int):
            raise LIMITS["lora_rank"].refusal(self.rank)
        check_fields(self, ("rank", "alpha", "dropout"), prefix="lora_")
        unknown = [t for t in self.targets if t not in LORA_TARGETS]
        if unknown or not self.targets or len(set(self.targets)) != len(self.targets):
            raise ConfigError(
                f"LoRA targets {', '.join(map(str, self.targets)) or '(none)'} are not a list "
                f"of distinct names from {', '.join(LORA_TARGETS)}.",
                "Name one or more of them, e.g. attn_q,attn_v, or all (the default).",
                cli_hint="Give --lora-targets as names separated by commas, e.g. "
                         "attn_q,attn_v, or leave it out for all.", field="lora_targets")
        return self

    def replace(self, **changes) -> "LoraConfig":
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        """JSON-ready fields (a checkpoint header, a run's settings)."""
        return {"rank": self.rank, "alpha": self.alpha, "dropout": self.dropout,
                "targets": list(self.targets)}

    @classmethod
    def from_dict(cls, d: dict) -> "LoraConfig":
        """The inverse of to_dict (targets back to a tuple); validated."""
        return cls(int(d["rank"]), float(d["alpha"]), float(d.get("dropout", 0.0)),
                   tuple(d.get("targets", LORA_TARGETS))).validate()


# ModelConfig's fields with a range in engine.limits (checked first, in this order)
MODEL_LIMITED = ("vocab_size", "d_model", "n_layer", "n_head", "n_kv_head", "context_length",
                 "ffn_dim")
# TrainConfig's fields with a range in engine.limits
TRAIN_LIMITED = ("pretrain_steps", "tune_steps", "batch_size", "learning_rate",
                 "tune_learning_rate", "min_lr_ratio", "warmup_steps", "decay_fraction",
                 "weight_decay", "beta1", "beta2", "adam_eps", "grad_clip", "dropout", "seed",
                 "eval_interval", "eval_tokens", "sample_interval", "sample_tokens",
                 "replay_fraction", "val_fraction", "time_budget_s", "eval_share")
VAL_SPLITS = ("docs", "tail")
ADAM_MOMENTS = ("auto", "f32", "bf16")   # TrainConfig.adam_moments (engine.model.moments)
ROPE_SCALINGS = ("", "llama3")  # ModelConfig.rope_scaling: none, or Llama 3.1's frequency scaling


TOKENIZER_KINDS = ("bpe", "char")  # SentencePiece BPE, or one token per character (engine.data.tokenizer)
DEFAULT_TOKENIZER = "bpe"
CHECKPOINT_EVERY = 100  # steps between automatic checkpoints of a run (0: only at its end)
MAX_NEW_TOKENS = 64  # tokens a continuation or an answer may have unless told (CLI, chat panel)


@dataclass(frozen=True)
class SamplingParams:
    """How engine.generation.sampling.next_token picks a token; the defaults are the CLI's and the chat
    panel's (llama.cpp's sampler chain order: temperature, top-k, top-p)."""
    temperature: float = 0.8    # 0 or greedy=True: argmax
    top_k: int = 40             # 0 disables
    top_p: float = 0.95         # 1 disables
    repetition_penalty: float = 1.0  # 1 disables
    greedy: bool = False


def run_steps(pretrain_steps: int, tune_steps: int, has_tune: bool) -> int:
    """Total optimizer steps of a run: its pretraining steps, plus its tuning steps when it has
    dialogues to tune on (a run without them has no tuning stage). The one rule for the
    session, continuing a run, the CLI's nothing-to-train check and the Runs table."""
    return pretrain_steps + (tune_steps if has_tune else 0)


def parse_val_split(spec: str) -> tuple[str, float]:
    """"tail:0.1" -> ("tail", 0.1); "docs" -> ("docs", 0.1). Raises ConfigError."""
    kind, _, share = str(spec).strip().partition(":")
    try:
        fraction = float(share) if share else 0.1
    except ValueError:
        fraction = -1.0
    if kind not in VAL_SPLITS or not LIMITS["val_fraction"].contains(fraction):
        raise ConfigError(f"Validation split {spec!r} is not understood.",
                          "Use docs:F (the last documents) or tail:F (the last tokens of the "
                          "text, nanoGPT's split), with a share F "
                          f"{LIMITS['val_fraction'].range_text()}, e.g. tail:0.1.",
                          field=("val_split", "val_fraction"))
    return kind, fraction


def tune_peak(tune_learning_rate: float, learning_rate: float, pretrain_steps: int) -> float:
    """TrainConfig.tune_peak of these fields (also for a TrainConfig read as a dict)."""
    if tune_learning_rate:
        return tune_learning_rate
    return learning_rate / 3 if pretrain_steps else learning_rate


@dataclass(frozen=True)
class TrainConfig:
    """Optimisation and schedule. Steps count optimizer updates; per stage the lr follows
    warmup, a stable phase and a decay over the last decay_fraction (engine.training.schedule, WSD)."""

    pretrain_steps: int = 600     # updates on pretraining windows
    tune_steps: int = 200         # updates on dialogue windows after pretraining
    batch_size: int = 16          # windows per step
    learning_rate: float = 3e-3   # peak AdamW learning rate
    min_lr_ratio: float = 0.1     # the decay ends at learning_rate * min_lr_ratio
    warmup_steps: int = 30        # linear warmup from 0 (per stage)
    decay_fraction: float = 0.2   # share of a stage (its steps, or its time with a budget) spent
    #                               decaying to the floor (engine.training.schedule; Hägele et al. 2024)
    weight_decay: float = 0.1     # AdamW decoupled decay, on matrices only (Loshchilov & Hutter 2019)
    beta1: float = 0.9
    beta2: float = 0.95
    adam_eps: float = 1e-8
    grad_clip: float = 1.0        # clip the global grad norm to this; 0 disables
    dropout: float = 0.0          # drop probability after attn_output and ffn_down (training only)
    seed: int = 1337              # weights, batches and sampling
    eval_interval: int = 50       # validation loss every N steps (and at the last step)
    eval_tokens: int = 16384      # validation tokens scored per evaluation: the val stream cut
    #                               into whole windows, at most this many tokens (about
    #                               nanoGPT's 20 x 12 x 64 = 15,360); see PretrainData.val_batches
    sample_interval: int = 100    # sample generations every N steps; 0 disables
    sample_tokens: int = 32       # tokens per sample generation
    replay_fraction: float = 0.25  # share of pretraining windows mixed into tuning batches
    val_split: str = "docs"       # "docs": the last paragraphs are held out (the last
    #                               characters when there is one paragraph or too few); "tail":
    #                               the last share of the characters (nanoGPT's split); the
    #                               held-out end is encoded and scored on its own: engine.data.corpus
    val_fraction: float = 0.1     # share of the pretraining text held out for validation
    time_budget_s: float = 0.0    # wall seconds of training for the whole run (elapsed_s,
    #                               evaluations included, pauses not); > 0 plans the run in
    #                               time: stages by time share, lr by the share of time used,
    #                               step counts follow (engine.training.budget). 0 = off
    eval_share: float = 0.05      # with a time budget: periodic validation and samples take at
    #                               most this share of the wall time (0: every interval)
    tune_learning_rate: float = 0.0  # peak lr while tuning; 0 = learning_rate / 3 after a
    #                                  pretraining stage, learning_rate in a run without one
    evaluate_recall: bool = True  # fact recall / answer accuracy at the end of each stage
    adam_moments: str = "auto"    # AdamW moments "f32", "bf16" (stochastic rounding), or
    #                               "auto": bf16 from 250M parameters (engine.model.moments)

    @property
    def total_steps(self) -> int:
        """Steps of a run with dialogues (engine.config.run_steps)."""
        return run_steps(self.pretrain_steps, self.tune_steps, True)

    @property
    def tune_peak(self) -> float:
        """The tuning stage's peak learning rate: tune_learning_rate; else learning_rate / 3
        after this run's own pretraining stage (the tuning of a model just pretrained at
        learning_rate), or learning_rate itself in a run with none (an imported model: its one
        rate, so the studio's learning-rate field and `--lr` set its tuning)."""
        return tune_peak(self.tune_learning_rate, self.learning_rate, self.pretrain_steps)

    def optim(self) -> OptimConfig:
        """The optimizer settings of one step (engine.model.transformer.Model.train_step)."""
        return OptimConfig(self.beta1, self.beta2, self.adam_eps, self.weight_decay,
                           self.grad_clip, self.dropout, self.seed)

    def warmup_for(self, stage_steps: int) -> int:
        """Warmup steps a stage of `stage_steps` gets: warmup_steps, at most a fifth of the
        stage (so a short stage still spends most of its steps at a useful learning rate)."""
        return min(self.warmup_steps, max(stage_steps // 5, 1))

    def warmup_note(self, tune: bool = True, from_step: int = 0) -> str | None:
        """What the person should know when warmup_steps is shortened in a stage, or None.
        from_step: the steps already done (a continued run): a stage whose warmup is over by
        then is not mentioned."""
        stages = [("pretraining", 0, self.pretrain_steps)]
        if tune and self.tune_steps:
            stages.append(("tuning", self.pretrain_steps, self.tune_steps))
        capped = [f"{self.warmup_for(n)} step{'' if self.warmup_for(n) == 1 else 's'} in {name}"
                  for name, start, n in stages
                  if n and self.warmup_for(n) < self.warmup_steps
                  and from_step < start + self.warmup_for(n)]
        if not capped:
            return None
        return (f"Warmup: {' and '.join(capped)} (at most 1/5 of a stage), not "
                f"{self.warmup_steps}.")

    def validate(self) -> "TrainConfig":
        """Raise ConfigError naming the bad setting (its .field) and a fix; return self when
        valid. Ranges: engine.limits.LIMITS."""
        if self.val_split not in VAL_SPLITS:
            raise ConfigError(
                f"Validation split {self.val_split!r} is not understood.",
                "Use docs (the last documents) or tail (the last tokens of the text).",
                field="val_split")
        check_fields(self, TRAIN_LIMITED)
        if self.adam_moments not in ADAM_MOMENTS:
            raise ConfigError(
                f"AdamW moments {self.adam_moments!r} are not understood.",
                "Use auto, f32 or bf16.", cli_hint="Give --adam-moments auto, f32 or bf16.",
                field="adam_moments")
        return self

    def replace(self, **changes) -> "TrainConfig":
        return dataclasses.replace(self, **changes)


@dataclass(frozen=True)
class OptimConfig:
    """What one optimizer step needs (engine.model.transformer.Model.train_step): AdamW's betas, eps and
    decoupled weight decay (Loshchilov & Hutter 2019), the global grad-norm clip (0: off),
    dropout and the seed its masks are keyed by. The learning rate is passed per step.
    Defaults: TrainConfig's (TrainConfig.optim() is the usual way to make one)."""
    beta1: float = TrainConfig.beta1
    beta2: float = TrainConfig.beta2
    adam_eps: float = TrainConfig.adam_eps
    weight_decay: float = TrainConfig.weight_decay
    grad_clip: float = TrainConfig.grad_clip
    dropout: float = TrainConfig.dropout
    seed: int = TrainConfig.seed


# How an imported (pretrained) model trains unless told otherwise. The from-scratch defaults
# (lr 3e-3, tuning at a third of it) erase what a pretrained model knows: SmolLM2-135M tuned at
# 1e-3 answered "The capital of France is Montelle." Full fine-tuning of a pretrained model runs
# near 1e-5 - 2e-4 (the SmolLM2 and Llama instruction-tuning recipes). Measured on SmolLM2-135M,
# 20 invented facts x 3 epochs at batch 8 (tests/test_real_model.py; benchmarks/RESULTS.md):
# 1e-4 learned 5 and kept "Paris", 2e-4 learned 9 and kept it, 3e-4 learned 14 and answered
# "Lumen". Batch 8: a 135M model's tuning steps stay under 3 GB.
PRETRAINED_TUNE_LR = 2e-4
PRETRAINED_BATCH = 8


def pretrained_train_config() -> TrainConfig:
    """The TrainConfig an imported model's run starts with: no pretraining stage of its own,
    batch PRETRAINED_BATCH, learning rate PRETRAINED_TUNE_LR (its tuning rate too: tune_peak)."""
    return TrainConfig(pretrain_steps=0, batch_size=PRETRAINED_BATCH,
                       learning_rate=PRETRAINED_TUNE_LR)
