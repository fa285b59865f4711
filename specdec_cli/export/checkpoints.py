"""Which file or checkpoint each engine loads for the target and the draft, or why none fits.

Why apart from the engines: llama-server loads GGUF files and vLLM/SGLang load Hugging
Face checkpoints, and telling the two apart (a path, a repo id, ``...-GGUF`` repos) is the
same work for every engine.

* **llama-server** loads GGUF files: ``spec.target`` and ``spec.draft`` must be ``.gguf``
  paths. EAGLE-3, DFlash and DSpark drafts are published as Hugging Face checkpoints and
  must be converted first (llama.cpp's ``convert_hf_to_gguf.py --target-model-dir``); a
  draft known only by its repo id is refused with that hint.
  For MTP the target GGUF must keep its nextn (MTP) layers: one known (or, on this machine,
  read) to lack them is refused.
* **vLLM** and **SGLang** load Hugging Face checkpoints (safetensors folders or repo ids).
  vLLM's GGUF support is experimental and does not cover EAGLE-3/DFlash/DSpark heads, and
  SGLang's speculative paths expect checkpoints too, so a GGUF is never emitted for them.
  The target is ``spec.target_repo`` when given, else ``spec.target`` when that is not a
  GGUF (a repo id or a checkpoint folder); the draft likewise from ``spec.draft_repo`` /
  ``spec.draft``. For EAGLE-3/DFlash/DSpark the registry's ``draft_repo`` *is* the
  checkpoint these engines load. The registry's ``target_repos`` and the classic drafts'
  ``draft_repo`` are GGUF repos (``...-GGUF``): with nothing else the export is refused,
  asking for the checkpoint the GGUF was converted from. When a GGUF path was given and a
  checkpoint is emitted instead, a note says so (the engine serves the checkpoint's own
  weights, e.g. BF16, not the GGUF's quantization, so memory needs differ).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from ..errors import SpecdecError
from .spec import _ENGINE_NAMES

_GGUF_WORD = re.compile(r"(?:^|[-_.])gguf(?:$|[-_.:])", re.IGNORECASE)


def _is_gguf(ref: str) -> bool:
    """A GGUF file or a GGUF repo id (``org/Model-GGUF``, ``org/Model-GGUF:Q4_K_M``).

    An existing regular file counts too: vLLM and SGLang load checkpoint folders or repo
    ids, never a single file."""
    last = ref.rstrip("/\\").replace("\\", "/").split("/")[-1]
    return bool(_GGUF_WORD.search(last)) or last.lower().endswith(".gguf") or _is_file(ref)


def _is_file(ref: str) -> bool:
    try:
        return Path(ref).expanduser().is_file()
    except (OSError, ValueError):
        return False


def _looks_like_gguf_file(ref: str) -> bool:
    """A path llama-server can load: named *.gguf, or an existing file starting with the GGUF magic."""
    if ref.lower().endswith(".gguf"):
        return True
    if not _is_file(ref):
        return False
    try:
        with open(Path(ref).expanduser(), "rb") as f:
            return f.read(4) == b"GGUF"
    except OSError:
        return False


def _hf_checkpoint(side: str, engine: str, given: str | os.PathLike | None, repo: str | None,
                   notes: list[str]) -> str:
    """The Hugging Face checkpoint vLLM/SGLang should load for ``side``, or a refusal."""
    name = _ENGINE_NAMES[engine]
    given_s = os.fspath(given) if given is not None else None
    for candidate in (repo, given_s):
        if candidate and candidate.strip() and not _is_gguf(candidate):
            if given_s and candidate != given_s and _is_gguf(given_s):
                notes.append(f"{side}: {name} loads the Hugging Face checkpoint {candidate}, not the GGUF "
                             f"{given_s} (its own weights, e.g. BF16, not the GGUF's quantization)")
            return candidate
    known = ", ".join(x for x in (given_s, repo) if x) or "nothing"
    raise SpecdecError(
        f"{name} loads Hugging Face checkpoints, and the {side} is only known as a GGUF ({known})",
        hint=f"name the checkpoint it was converted from with --{side}-repo ORG/NAME, "
             "or export to llama-server, which loads GGUF",
    )


def _gguf_for_llama(side: str, given: str | os.PathLike | None, repo: str | None) -> str:
    """The GGUF path llama-server should load for ``side``, or a refusal."""
    given_s = os.fspath(given) if given is not None else None
    if given_s and _looks_like_gguf_file(given_s):
        return given_s
    what = given_s or repo or "nothing"
    if side == "draft" and repo and not _is_gguf(repo):
        hint = (f"convert {repo} with llama.cpp's convert_hf_to_gguf.py --target-model-dir TARGET_CHECKPOINT "
                "and pass the .gguf as the draft; vllm and sglang load it as it is")
    else:
        hint = f"pass the {side}'s .gguf file, or export to vllm or sglang, which load Hugging Face checkpoints"
    raise SpecdecError(f"llama-server loads GGUF files, and the {side} is not one ({what})", hint=hint)


def _target_has_mtp(known: bool | None, target: str) -> bool | None:
    """Whether the target GGUF keeps its nextn (MTP) layers: as the caller read it, else read
    from the file when it is on this machine (metadata only), else None (unknown)."""
    if known is not None or not _is_file(target):
        return known
    from ..models.meta import read_gguf

    try:
        return read_gguf(Path(target).expanduser()).has_mtp
    except (SpecdecError, OSError, ValueError):  # unreadable here: leave it to llama-server
        return None


def _mtp_target_for_llama(target: str, known: bool | None, notes: list[str]) -> None:
    """Refuse a target GGUF without nextn (MTP) layers for llama-server's draft-mtp; note it when unknown."""
    has = _target_has_mtp(known, target)
    if has is False:
        raise SpecdecError(
            f"llama-server's draft-mtp drafts with the target's own nextn (MTP) layers, and {target} has none",
            hint="use a GGUF that keeps them (llama.cpp's convert_hf_to_gguf.py does unless --no-mtp; "
                 "unsloth's -MTP-GGUF repos do), or export another method",
        )
    if has is None:
        notes.append("the target GGUF must keep its nextn (MTP) layers (converted without --no-mtp); "
                     "specdec inspect shows whether it does")
