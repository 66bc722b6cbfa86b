"""Seconds of training that move only when told, for tests of time rules (a time budget, a
pause that must not count, Continue for N more seconds): deterministic and fast on any machine,
however loaded. The engine reads training time from engine.progress.Clock, whose time_fn is
injectable; engine.training.trainer.Trainer(session, clock) takes one."""

from opencl_llm_studio.engine.progress import Clock


class FakeTime:
    """A wall clock (seconds) that moves only when told: `t += seconds`. Pass it as a Clock's
    time_fn."""

    def __init__(self, t: float = 1000.0):
        self.t = t

    def __call__(self) -> float:
        return self.t


def fake_training_time(monkeypatch, step_s: float = 0.05, eval_s: float = 0.0,
                       token_s: float = 0.0) -> FakeTime:
    """From now on (the test's monkeypatch scope) every Trainer that is given no clock, the CLI's
    and the studio worker's included, times training on the returned FakeTime, which each
    training step moves by step_s, each pretraining validation pass by eval_s and each
    generated token (samples, recall, the plan's measure of them) by token_s seconds.
    Move it yourself (`fake.t += s`) for time that passes outside training, such as a pause."""
    import inspect

    from opencl_llm_studio.engine.training import trainer as trainer_module
    from opencl_llm_studio.engine.generation.generator import Generator
    from opencl_llm_studio.engine.model.transformer import Model
    from opencl_llm_studio.engine.training.session import TrainingSession
    fake = FakeTime()
    monkeypatch.setattr(trainer_module, "Clock", lambda start_s=0.0: Clock(start_s, time_fn=fake))
    real_step, real_val = Model.train_step, TrainingSession.pretrain_val
    real_gen = Generator.generate_ids

    def step(self, *args, **kwargs):
        fake.t += step_s
        return real_step(self, *args, **kwargs)

    def val(self, *args, **kwargs):
        fake.t += eval_s
        return real_val(self, *args, **kwargs)

    def generate_ids(*args, **kwargs):
        call = inspect.signature(real_gen).bind(*args, **kwargs)
        call.apply_defaults()
        on_token = call.arguments["on_token"]

        def tick(token):
            fake.t += token_s
            if on_token is not None:
                on_token(token)
        call.arguments["on_token"] = tick
        return real_gen(*call.args, **call.kwargs)
    monkeypatch.setattr(Model, "train_step", step)
    monkeypatch.setattr(TrainingSession, "pretrain_val", val)
    monkeypatch.setattr(Generator, "generate_ids", generate_ids)
    return fake
