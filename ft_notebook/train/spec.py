"""What ``ft.fit`` hands to every rank (the spec) and to the coordinator (the run
options): factories and settings, checked in the kernel.

The spec is cloudpickled once in the kernel (so a dataset that cannot be pickled
fails there, at once) and travels as bytes through the scheduler, which never
unpickles it, to the user's own workers, which do: they run the user's factories.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from ft_notebook.config import DEVICE_EXPECTED, ON_VIOLATION, is_device, train_setting
from ft_notebook.exceptions import TrainingError


@dataclass
class RunOptions:
    """How the coordinator drives a run. Left out, a setting is read from
    ``ft-notebook.train`` when the options are built: by ``fit``, in the kernel. They
    travel to the coordinator as a plain dict (:meth:`to_wire`), never pickled."""

    min_workers: int = field(default_factory=train_setting("min_workers"))
    max_workers: int | None = None
    fast_recovery: bool = field(default_factory=train_setting("fast_recovery"))
    warmup_timeout_s: float = field(default_factory=train_setting("warmup_timeout_s"))
    #: A step that has not advanced for max(stall_min_s, stall_factor x the median
    #: step time) is a hang; the first steps get first_steps_floor_s.
    stall_factor: float = field(default_factory=train_setting("stall_factor"))
    stall_min_s: float = field(default_factory=train_setting("stall_min_s"))
    first_steps_floor_s: float = field(default_factory=train_setting("first_steps_floor_s"))
    total_steps: int = 0

    def validate(self) -> None:
        if type(self.min_workers) is not int or self.min_workers < 1:
            raise TrainingError(f"min_workers must be a positive int, got {self.min_workers!r}.")
        if type(self.fast_recovery) is not bool:
            raise TrainingError(f"fast_recovery must be True or False, got {self.fast_recovery!r}.")
        if self.max_workers is not None and (
            type(self.max_workers) is not int or self.max_workers < 1
        ):
            raise TrainingError(
                f"max_workers= must be a positive int (or None: every worker), got "
                f"{self.max_workers!r:.80}."
            )

    def to_wire(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> RunOptions:
        options = cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})
        options.validate()
        return options


@dataclass
class FitSpec:
    """One run's factories and settings, concrete values only.

    A setting left out is read from ``ft-notebook.train`` (:func:`train_setting`)
    when the spec is built, in the kernel; the workers unpickle the spec and never
    consult their own configuration.
    """

    model: Callable[[], Any]
    optimizer: Callable[[Any], Any]
    loss: Callable[..., Any] | None
    data: Any  # a map-style dataset, or a factory of one
    epochs: int
    batch_size: int  # the global batch: split among the ranks at every step
    seed: int = 0
    lr_scheduler: Callable[[Any], Any] | None = None
    train_step: Callable[..., Any] | None = None
    eval_fn: Callable[[Any], dict[str, float]] | None = None
    eval_every: int = 0
    clip_grad_norm: float | None = None
    deterministic: bool = False
    chunk_size: int | None = None  # deterministic: the micro-chunk size (see chunk)
    deterministic_chunks: int = field(default_factory=train_setting("deterministic_chunks"))
    #: Add each step's parts in part order, so the result does not depend on the world
    #: size (see :mod:`.rank._trainer`).
    ordered_sums: bool = field(default_factory=train_setting("ordered_sums"))
    checkpoint_every: int = field(default_factory=train_setting("checkpoint_every"))
    #: checkpoint_every="auto": Daly's interval, planned by rank 0 (see ._schedule),
    #: with this MTBF; checkpoint_every is then only the first save's step
    checkpoint_auto: bool = False
    mtbf_s: float = field(default_factory=train_setting("mtbf_s"))
    mtbf_from_journal: bool = field(default_factory=train_setting("mtbf_from_journal"))
    #: Where mtbf_s came from, as the plan says it (fit sets it; see ._mtbf)
    mtbf_source: str = "ft-notebook.train.mtbf"
    store_url: str = ""
    store_keep: int | None = field(default_factory=train_setting("store_keep"))  # None: all
    resume: bool = False
    #: Skipped non-finite steps in a row before a rollback.
    nonfinite_limit: int = field(default_factory=train_setting("nonfinite_limit"))
    device: str = field(default_factory=train_setting("device"))  # "auto": GPU if any
    amp: bool = field(default_factory=train_setting("amp"))  # bf16 autocast on GPU
    #: None: the plain mean (all-reduce); else an ft_notebook.robust.Aggregator
    aggregator: Any = None
    #: "stall" | "mean": the aggregator's condition fails for the world left
    on_violation: str = field(default_factory=train_setting("on_violation"))
    #: How long a rendezvous (a group's setup, a store client) waits for its peers, and
    #: how long one collective may wait: hangs are the stall watch's, so that is long.
    rendezvous_timeout_s: float = field(default_factory=train_setting("rendezvous_timeout_s"))
    collective_timeout_s: float = field(default_factory=train_setting("collective_timeout_s"))
    #: The fast path (survivor groups) up to this world size.
    survivor_groups_max_world: int = field(
        default_factory=train_setting("survivor_groups_max_world")
    )
    extra: dict[str, Any] = field(default_factory=dict)

    def validate(self) -> None:
        if hasattr(self.model, "state_dict") and hasattr(self.model, "parameters"):
            raise TrainingError(
                "model= must be a factory that builds the module on each worker, not a "
                "module: pass model=lambda: MyNet(...) (or the class itself)."
            )
        if hasattr(self.optimizer, "param_groups"):
            raise TrainingError(
                "optimizer= must be a factory of the parameters, not an optimizer: pass "
                "optimizer=lambda params: torch.optim.AdamW(params, lr=1e-3)."
            )
        for what, value in (("model", self.model), ("optimizer", self.optimizer)):
            if not callable(value):
                raise TrainingError(
                    f"{what}= must be a factory (a callable), so every worker builds its "
                    f"own; got {type(value).__name__}."
                )
        if self.loss is None and self.train_step is None:
            raise TrainingError("Give loss= (e.g. torch.nn.functional.mse_loss) or train_step=.")
        _check_data(self.data)
        for what, function, example in (
            ("loss", self.loss, "loss=torch.nn.functional.mse_loss"),
            ("train_step", self.train_step, "train_step=lambda model, batch, loss: ..."),
            ("lr_scheduler", self.lr_scheduler, "lr_scheduler=lambda opt: StepLR(opt, 10)"),
            ("eval_fn", self.eval_fn, "eval_fn=lambda model: {'acc': ...}"),
        ):
            if function is not None and not callable(function):
                raise TrainingError(
                    f"{what}= must be a function (or None), got {type(function).__name__} "
                    f"{function!r:.80}; for example {example}."
                )
        if type(self.seed) is not int or not 0 <= self.seed < 2**63:
            raise TrainingError(
                f"seed= must be an int from 0 to 2**63-1 (it fixes the initial weights and "
                f"the data order), got {type(self.seed).__name__} {self.seed!r:.80}."
            )
        if type(self.eval_every) is not int or self.eval_every < 0:
            raise TrainingError(
                f"eval_every= must be an int >= 0 (steps between evaluations; 0: never), "
                f"got {self.eval_every!r:.80}."
            )
        if self.eval_every and self.eval_fn is None:
            raise TrainingError(f"eval_every={self.eval_every} needs eval_fn= to evaluate with.")
        if self.clip_grad_norm is not None and not (
            isinstance(self.clip_grad_norm, (int, float))
            and not isinstance(self.clip_grad_norm, bool)
            and math.isfinite(self.clip_grad_norm)
            and self.clip_grad_norm > 0
        ):
            raise TrainingError(
                f"clip_grad_norm= must be a positive finite number (or None), got "
                f"{self.clip_grad_norm!r:.80}."
            )
        for what, flag in (("deterministic", self.deterministic), ("resume", self.resume)):
            if type(flag) is not bool:
                raise TrainingError(f"{what}= must be True or False, got {flag!r:.80}.")
        if self.on_violation not in ON_VIOLATION:
            raise TrainingError(
                f"on_violation must be one of {', '.join(ON_VIOLATION)}, got {self.on_violation!r}."
            )
        if type(self.epochs) is not int or self.epochs < 1:
            raise TrainingError(f"epochs must be a positive int, got {self.epochs!r}.")
        if type(self.batch_size) is not int or self.batch_size < 1:
            raise TrainingError(f"batch_size must be a positive int, got {self.batch_size!r}.")
        if type(self.checkpoint_every) is not int or self.checkpoint_every < 1:
            raise TrainingError(
                f"checkpoint_every must be a positive int (steps), got {self.checkpoint_every!r}."
            )
        if self.chunk_size is not None and (
            type(self.chunk_size) is not int or self.chunk_size < 1
        ):
            raise TrainingError(f"chunk_size must be a positive int, got {self.chunk_size!r}.")
        if type(self.nonfinite_limit) is not int or self.nonfinite_limit < 1:
            raise TrainingError(
                f"nonfinite_limit must be a positive int (non-finite steps in a row before "
                f"a rollback), got {self.nonfinite_limit!r}."
            )
        if not is_device(self.device):
            raise TrainingError(f"device must be {DEVICE_EXPECTED}, got {self.device!r}.")
        if type(self.amp) is not bool:
            raise TrainingError(f"amp must be True or False, got {self.amp!r}.")

    @property
    def chunk(self) -> int:
        """The deterministic micro-chunk: the same whatever the world size."""
        return self.chunk_size or max(1, self.batch_size // self.deterministic_chunks)


def _check_data(data: Any) -> None:
    """``data=`` as the ranks will use it: a map-style dataset (``len`` and indexing)
    or a function that builds one on each worker. A dataset is checked for being
    empty here too; what a factory builds only the workers see."""
    if callable(data) and not hasattr(data, "__getitem__"):
        return  # a factory: the workers call it
    if not (hasattr(data, "__len__") and hasattr(data, "__getitem__")):
        raise TrainingError(
            f"data= must be a map-style dataset (with len() and [index], such as a "
            f"torch TensorDataset or a list of (input, target) pairs) or a function that "
            f"builds one on each worker; got {type(data).__name__} {data!r:.80}."
        )
    try:
        size = len(data)
    except TypeError as e:
        raise TrainingError(
            f"data= must have a length, but len(data) raised: {e}. Pass a map-style "
            f"dataset, or a function that builds one on each worker."
        ) from e
    if size < 1:
        raise TrainingError(
            f"data= is empty ({type(data).__name__} of length 0): there is nothing to "
            f"train on. Check how the dataset was built."
        )


def steps_per_epoch(size: int, batch: int) -> int:
    return math.ceil(size / batch)


def dumps_spec(spec: FitSpec) -> bytes:
    """The spec as bytes for the workers; a clear error for what cannot travel."""
    import cloudpickle

    try:
        return bytes(cloudpickle.dumps(spec))
    except Exception as e:
        raise TrainingError(
            f"The training spec cannot be sent to the workers: {type(e).__name__}: {e}. "
            f"Datasets and factories must be picklable; pass data=<a function that "
            f"builds the dataset> to build it on each worker instead."
        ) from e
