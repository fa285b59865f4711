"""Guesses from a model's name: its base family and its size.

'Qwen2.5-Coder-1.5B-Instruct' -> family 'qwen2.5-coder', size '1.5b'.

Why apart from the GGUF reader: these are rules about how models are named and
marketed, not about the file format; they apply to any text (general.name,
general.basename, a file or repo name) and :mod:`specdec_cli.pairing.compat` matches
pairs by what they return.
"""

from __future__ import annotations

import re

__all__ = ["family_from_name", "size_from_name", "size_from_label", "size_from_params"]

_SIZE_TOKEN = re.compile(r"^(\d+(?:\.\d+)?)([kmbt])$")
_VERSION_TOKEN = re.compile(r"^\d+(?:\.\d+)*$")
_SPEC_WORDS = {"eagle", "eagle3", "dflash", "dspark", "mtp", "draft",
               "speculator", "nextn", "medusa"}
_SPEC_SUFFIX = re.compile(r"^(?:block|b|bs|ttt)\d+$")
_VARIANT_WORDS = {"instruct", "it", "chat", "base", "pt", "gguf", "hf", "meta"}
_QUANT_WORD = re.compile(r"^(?:i?q\d\w*|f16|f32|bf16|fp16|fp8|fp32|mxfp4)$")
_SCALE = {"k": 1e3, "m": 1e6, "b": 1e9, "t": 1e12}
# Named tiers some families use instead of a size (DeepSeek-V4-Flash / -Pro, V2-Lite).
_TIERS = {"flash", "pro", "lite"}

# Sizes models are marketed under, in billions; see size_from_params for the rule.
_CANONICAL_B = [
    0.135, 0.27, 0.36, 0.5, 0.6, 1, 1.5, 1.7, 2, 3, 4, 7, 8, 9, 12, 13, 14, 20, 22,
    24, 27, 30, 32, 70, 72, 110, 120, 235, 405, 671,
]


def _words(text: str) -> list[str]:
    text = text.strip().lower().rsplit("/", 1)[-1]
    if text.endswith(".gguf"):
        text = text[:-5]
    return [w for w in re.split(r"[\s_\-]+", text) if w]


def _name_parts(text: str) -> tuple[list[str], str | None]:
    """(family words, size word) of a name: speculative-method words dropped, the
    family being what precedes the first size word, or -- with no size word -- a
    trailing tier word ('flash', 'pro', 'lite') taken as the size."""
    words = [w for w in _words(text) if w not in _SPEC_WORDS and not _SPEC_SUFFIX.match(w)]
    size = None
    for i, w in enumerate(words):
        if _SIZE_TOKEN.match(w):
            words, size = words[:i], w
            break
    words = [w for w in words if w not in _VARIANT_WORDS and not _QUANT_WORD.match(w)]
    if size is None and len(words) > 1 and words[-1] in _TIERS:
        words, size = words[:-1], words[-1]
    return words, size


def family_from_name(text: str | None) -> str | None:
    """Normalised base family of a model name, lowercase.

    'Qwen2.5-Coder-1.5B-Instruct' -> 'qwen2.5-coder', 'Meta-Llama-3.1-8B-Instruct'
    -> 'llama3.1', 'gemma-3-270m-it' -> 'gemma3', 'dspark_qwen3_8b_block7' -> 'qwen3',
    'DeepSeek-V4-Flash' -> 'deepseek-v4'. The family is what precedes the size;
    speculative-method words ('eagle3', 'dflash', 'dspark', 'block7', ...) and
    variant words ('instruct', 'it', ...) are dropped; a word followed by a bare
    version number is joined ('llama 3.1' -> 'llama3.1').
    """
    if not text:
        return None
    words, _ = _name_parts(text)
    joined: list[str] = []
    for w in words:
        if joined and _VERSION_TOKEN.match(w) and joined[-1].isalpha():
            joined[-1] += w
        else:
            joined.append(w)
    return "-".join(joined) or None


def _fmt_count(n: float) -> str:
    """Plain rounded notation, lowercase: 7.6b, 15b, 494m, 682k."""
    if n >= 1e9:
        b = n / 1e9
        return (f"{b:.1f}".rstrip("0").rstrip(".") if b < 10 else str(round(b))) + "b"
    if n >= 1e6:
        return f"{round(n / 1e6)}m"
    if n >= 1e3:
        return f"{round(n / 1e3)}k"
    return str(int(n))


def size_from_params(n: float | None) -> str | None:
    """Canonical size label for a parameter count.

    Rule: for 100M and up, take the largest marketed size (135m, 270m, 360m,
    0.5b, 0.6b, 1b, 1.5b, 1.7b, 2b, 3b, 4b, 7b, 8b, ... 70b, 72b, ...) that is at
    most 4% above the count -- real counts sit at most a few percent below the
    marketed size and often well above it (Qwen2.5-7B has 7.6B, Qwen2.5-0.5B
    494M, gemma-3-4b 3.9B) -- provided
    the count is within 30% of it; otherwise (and below 100M) the rounded count
    itself ('6.7b', '682k').
    """
    if not n or n <= 0:
        return None
    b = n / 1e9
    if b >= 0.1:
        below = [c for c in _CANONICAL_B if c <= b * 1.04]
        if below and b / below[-1] <= 1.3:
            c = below[-1]
            return f"{round(c * 1000)}m" if c < 0.5 else f"{c:g}b"
    return _fmt_count(n)


def size_from_label(label: str | None) -> str | None:
    """Normalise a size label ('1.5B' -> '1.5b', '494M' -> '0.5b'); odd labels
    such as '8x7B' or '30B-A3B' are only lowercased."""
    if not label or not label.strip():
        return None
    m = _SIZE_TOKEN.match(label.strip().lower())
    if not m:
        return label.strip().lower()
    return size_from_params(float(m.group(1)) * _SCALE[m.group(2)])


def size_from_name(text: str | None) -> str | None:
    """The size word of a name, normalised: 'dspark_qwen3_8b_block7' -> '8b',
    'DeepSeek-V4-Flash' -> 'flash'."""
    if not text:
        return None
    _, size = _name_parts(text)
    return size if size in _TIERS else size_from_label(size)

