"""A loaded GGUF model: weights, vocabulary, tokenizer, metadata and chat template.

The template's source and llama.cpp's built-in formats are read here; rendering messages through
the template (its Jinja, as llama-server does) is ``chat/template.py``'s, above this package.

Part of the FFI boundary (``library.py`` says which modules call llama.cpp).
"""

from __future__ import annotations

import ctypes
from pathlib import Path

from ...errors import SpecdecError, UsageError
from ...terminal import interrupts
from .library import LOAD_PROGRESS, LOG, FreedOnCollect, bindings, cpu_extra_buffers_safe, ext, init_backend


class Model(FreedOnCollect):
    """A loaded GGUF model: weights, vocabulary, tokenizer and chat template."""

    def __init__(self, path: str | Path, *, n_gpu_layers: int = 0, load_mtp: bool = False, verbose: bool = False):
        """``load_mtp``: also load the multi-token-prediction (nextn) layers, which llama.cpp
        skips otherwise; only an MTP drafter needs them."""
        ll = bindings()
        init_backend(verbose)
        self.path = Path(path)
        params = ll.llama_model_default_params()
        params.n_gpu_layers = int(n_gpu_layers)
        params.load_mtp = bool(load_mtp)
        params.use_extra_bufts = cpu_extra_buffers_safe()
        params.progress_callback = LOAD_PROGRESS  # lets a signal stop the load
        with interrupts.native():
            self._ptr = ll.llama_model_load_from_file(str(self.path).encode(), params)
        if not self._ptr:
            detail = "; ".join(LOG.tail(2)) or "llama.cpp could not load it"
            raise UsageError(
                f"cannot load {self.path}: {detail}",
                hint="check that the file is a complete GGUF for an architecture this llama.cpp supports",
            )
        self._vocab = ll.llama_model_get_vocab(self._ptr)
        self.n_vocab = int(ll.llama_vocab_n_tokens(self._vocab))
        self.bos = int(ll.llama_vocab_bos(self._vocab))
        self.eos = int(ll.llama_vocab_eos(self._vocab))
        self.n_embd = int(ll.llama_model_n_embd(self._ptr))
        self.n_layer = int(ll.llama_model_n_layer(self._ptr))
        self.arch = self.meta("general.architecture") or ""
        # what the context's memory is (memory_kinds.py says what follows for rollback)
        self.is_recurrent = bool(ll.llama_model_is_recurrent(self._ptr))
        self.is_hybrid = bool(ll.llama_model_is_hybrid(self._ptr))
        self.n_swa = int(ll.llama_model_n_swa(self._ptr))
        self.n_nextn = int(ll.llama_model_n_layer_nextn(self._ptr))  # MTP layers in the file
        self.mtp_loaded = bool(load_mtp) and self.n_nextn > 0
        self._eog: dict[int, bool] = {}
        self._pieces: dict[int, bytes] = {}
        self._controls: dict[str, int] | None = None

    # --- vocabulary -------------------------------------------------------------------------
    def is_eog(self, token: int) -> bool:
        """End of generation (EOS, EOT, ...), as the vocabulary defines it; cached per token."""
        hit = self._eog.get(token)
        if hit is None:
            hit = self._eog[token] = bool(bindings().llama_vocab_is_eog(self._vocab, token))
        return hit

    def tokenize(self, text: str, *, add_special: bool = True, parse_special: bool = True) -> list[int]:
        ll = bindings()
        data = text.encode("utf-8")
        cap = len(data) + 16
        buf = (ll.llama_token * cap)()
        n = ll.llama_tokenize(self._vocab, data, len(data), buf, cap, add_special, parse_special)
        if n < 0:
            cap = -n
            buf = (ll.llama_token * cap)()
            n = ll.llama_tokenize(self._vocab, data, len(data), buf, cap, add_special, parse_special)
        if n < 0:
            raise SpecdecError("tokenization failed")
        return list(buf[:n])

    def piece(self, token: int) -> bytes:
        """The bytes a token renders as (control tokens render empty), cached per token."""
        cached = self._pieces.get(token)
        if cached is None:
            cached = self._pieces[token] = self._to_piece(token, special=False)
        return cached

    def piece_showing(self, shown: frozenset[int]):
        """``piece``, except that the control tokens of ``shown`` render as their text (a tool-call
        family's markers, which its parser reads in the reply's text)."""
        if not shown:
            return self.piece
        texts = {t: self._to_piece(t, special=True) for t in shown}
        return lambda t: texts[t] if t in texts else self.piece(t)

    def _to_piece(self, token: int, *, special: bool) -> bytes:
        ll = bindings()
        buf = ctypes.create_string_buffer(64)
        n = ll.llama_token_to_piece(self._vocab, token, buf, 64, 0, special)
        if n < 0:
            buf = ctypes.create_string_buffer(-n)
            n = ll.llama_token_to_piece(self._vocab, token, buf, -n, 0, special)
        return buf.raw[: max(n, 0)]

    def control_tokens(self) -> dict[str, int]:
        """The vocabulary's control (and unknown) tokens by text: what ``tokenize`` with special
        tokens parsed turns text into; read once per model."""
        if self._controls is None:
            ll = bindings()
            kinds = ll.LLAMA_TOKEN_ATTR_CONTROL | ll.LLAMA_TOKEN_ATTR_UNKNOWN
            found: dict[str, int] = {}
            for t in range(self.n_vocab):
                if ll.llama_vocab_get_attr(self._vocab, t) & kinds:
                    text = self.token_text(t)
                    if text:
                        found.setdefault(text, t)
            self._controls = found
        return self._controls

    @property
    def adds_bos(self) -> bool:
        """Whether tokenizing with ``add_special`` puts the BOS token first."""
        return bool(bindings().llama_vocab_get_add_bos(self._vocab)) and self.bos >= 0

    def token_text(self, token: int) -> str:
        return bindings().llama_vocab_get_text(self._vocab, token).decode("utf-8", errors="replace")

    def mask_token(self) -> int:
        """The vocabulary's mask token (DFlash fills its draft block with it), -1 if none."""
        return int(bindings().llama_vocab_mask(self._vocab))

    # --- metadata and draft-head facts ------------------------------------------------------
    def meta(self, key: str) -> str | None:
        """A GGUF metadata value as llama.cpp renders it (``"true"``, ``"16"``), None if absent."""
        buf = ctypes.create_string_buffer(256)
        n = bindings().llama_model_meta_val_str(self._ptr, key.encode(), buf, len(buf))
        return buf.value.decode("utf-8", errors="replace") if n >= 0 else None

    def target_layer_ids(self) -> list[int]:
        """The target layers an EAGLE-3/DFlash head reads (empty for ordinary models)."""
        n = int(ext("llama_model_target_layer_ids_n")(self._ptr))
        if n <= 0:
            return []
        ptr = ext("llama_model_target_layer_ids")(self._ptr)
        return [int(ptr[i]) for i in range(n)]

    def dflash_selector_top_k(self) -> int:
        """> 0 only for DFlash2 drafts (a selector lattice instead of logits)."""
        return int(ext("llama_model_dflash_selector_top_k")(self._ptr))

    # --- chat -------------------------------------------------------------------------------
    def chat_template(self) -> str | None:
        """The chat template's Jinja source, None when the GGUF has none."""
        tmpl = bindings().llama_model_chat_template(self._ptr, None)
        return tmpl.decode("utf-8", errors="replace") if tmpl else None

    def builtin_chat(self, template: str, messages: list[dict], add_generation_prompt: bool) -> str:
        """``messages`` (role and content strings) in llama.cpp's built-in format for ``template``
        (``llama_chat_apply_template``): what ``chat/template.py`` falls back on where jinja2 cannot
        render the template."""
        ll = bindings()
        tmpl = template.encode()
        keep = [(m["role"].encode(), m["content"].encode()) for m in messages]
        arr = (ll.llama_chat_message * len(keep))()
        for i, (role, content) in enumerate(keep):
            arr[i].role = role
            arr[i].content = content
        cap = sum(len(r) + len(c) for r, c in keep) * 2 + 256
        buf = ctypes.create_string_buffer(cap)
        n = ll.llama_chat_apply_template(tmpl, arr, len(keep), add_generation_prompt, buf, cap)
        if n > cap:
            buf = ctypes.create_string_buffer(n)
            n = ll.llama_chat_apply_template(tmpl, arr, len(keep), add_generation_prompt, buf, n)
        if n < 0:
            raise UsageError(
                f"llama.cpp does not recognise the chat template of {self.path.name}",
                hint="apply the template yourself and pass the raw prompt without --chat",
            )
        return buf.raw[:n].decode("utf-8", errors="replace")

    def close(self) -> None:
        if getattr(self, "_ptr", None):
            bindings().llama_model_free(self._ptr)
            self._ptr = None
