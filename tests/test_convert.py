"""The conversion command specdec prints for a Hugging Face checkpoint folder."""

from __future__ import annotations

import json

import pytest

from specdec_cli.errors import UsageError
from specdec_cli.models.convert import conversion_commands
from specdec_cli.models.meta import read_gguf


def checkpoint(tmp_path, name, arch):
    d = tmp_path / name
    d.mkdir()
    (d / "model.safetensors").write_bytes(b"\0" * 16)
    (d / "config.json").write_text(json.dumps({"architectures": [arch]}))
    return d


def test_draft_head_needs_the_target_checkpoint(tmp_path):
    d = checkpoint(tmp_path, "eagle3_qwen3_8b_ttt7", "Eagle3DraftModel")
    (cmd,) = conversion_commands(d)
    assert cmd == f"python convert_hf_to_gguf.py {d} --target-model-dir TARGET_CHECKPOINT_DIR --outfile eagle3_qwen3_8b_ttt7.gguf"


def test_deepseek_v4_dspark_converts_target_and_draft_separately(tmp_path):
    d = checkpoint(tmp_path, "DeepSeek-V4-Flash-DSpark", "DeepseekV4ForCausalLM")
    target, draft = conversion_commands(d)
    assert "--no-nextn" in target and "--dspark" in draft


def test_plain_model(tmp_path):
    d = checkpoint(tmp_path, "Qwen3-8B", "Qwen3ForCausalLM")
    assert conversion_commands(d) == [f"python convert_hf_to_gguf.py {d} --outfile Qwen3-8B.gguf"]


def test_read_gguf_on_a_checkpoint_prints_the_command(tmp_path):
    d = checkpoint(tmp_path, "dflash_qwen3_4b_block7", "DFlashDraftModel")
    with pytest.raises(UsageError) as err:
        read_gguf(d)
    assert "convert_hf_to_gguf.py" in err.value.one_line() and "--target-model-dir" in err.value.one_line()
