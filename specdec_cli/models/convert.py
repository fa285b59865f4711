"""The llama.cpp command that turns a Hugging Face checkpoint folder into the GGUF specdec needs.

DeepSeek publishes its DSpark, DFlash and Eagle3 drafts as safetensors checkpoints. A draft
head carries no tokenizer or target geometry of its own, so llama.cpp's
``convert_hf_to_gguf.py`` reads them from the target's checkpoint (``--target-model-dir``);
a DeepSeek V4 DSpark repository holds the full model with its draft attached, converted
twice: the target without the draft tensors (``--no-nextn``) and the draft alone (``--dspark``).
Flags as in the converter of llama.cpp vendored by llama-cpp-python 0.3.36.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

from .methods import Method

_HEAD_MARKERS = Method.heads()  # a head's architecture or file name says which it is


def _architectures(folder: Path) -> list[str]:
    try:
        return list(json.loads((folder / "config.json").read_text()).get("architectures") or [])
    except (OSError, ValueError, AttributeError):
        return []


def conversion_commands(folder: Path) -> list[str]:
    """Shell commands (run from a llama.cpp checkout) that convert ``folder`` to GGUF."""
    folder = Path(folder)
    archs = " ".join(_architectures(folder)).lower()
    name = folder.name.rstrip("/") or "model"
    q = shlex.quote
    base = f"python convert_hf_to_gguf.py {q(str(folder))}"
    if "deepseekv4" in archs and ("dspark" in name.lower() or "dspark" in archs):
        return [
            f"{base} --no-nextn --outfile {q(name + '-target.gguf')}",
            f"{base} --dspark --outfile {q(name + '-dspark.gguf')}",
        ]
    if any(m in archs or m in name.lower() for m in _HEAD_MARKERS):
        return [f"{base} --target-model-dir TARGET_CHECKPOINT_DIR --outfile {q(name + '.gguf')}"]
    return [f"{base} --outfile {q(name + '.gguf')}"]


def conversion_hint(folder: Path) -> str:
    cmds = conversion_commands(folder)
    text = "convert it with llama.cpp: " + " && ".join(cmds)
    if "TARGET_CHECKPOINT_DIR" in cmds[0]:
        text += " (TARGET_CHECKPOINT_DIR: the Hugging Face checkpoint of the target this draft was trained for)"
    return text + "; then pass the .gguf file"
