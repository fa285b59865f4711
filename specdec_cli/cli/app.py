"""The Typer app every ``specdec`` command registers on, and what the commands share: the
``command`` decorator (a signal ends a command as one line and 128+signal), ``--version``,
and the load options' reading. The commands themselves are one thin function each, in
``model_commands.py`` (the registry, files, memory, export) and ``run_commands.py`` (what
loads models and generates); each builds its request explicitly from its options (shared
ones are declared once in ``commands/options.py``) and hands it to ``commands/``.
"""

from __future__ import annotations

import functools
from typing import Annotated

import typer

from ..commands.options import (
    plain,
)
from ..terminal import console

app = typer.Typer(
    name="specdec",
    help="Speculative decoding with llama.cpp: pair a target GGUF with a draft, check it fits, run it, measure it.",
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


def _version(value: bool) -> None:
    """``--version``: this package's version and the llama.cpp binding it runs on (from the
    installed metadata: loading the library itself would take a second)."""
    if not value:
        return
    from importlib.metadata import PackageNotFoundError, version

    from .. import __version__

    try:
        binding = f"llama-cpp-python {version('llama_cpp_python')}"
    except PackageNotFoundError:
        binding = "llama-cpp-python not installed"
    console.write_text(f"specdec {__version__} ({binding})\n")
    raise typer.Exit(0)


@app.callback()
def _main(
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                          help="Print the version and exit.")] = False,
) -> None:
    """Speculative decoding with llama.cpp: pair a target GGUF with a draft, check it fits, run it, measure it."""


class _Escaped(Exception):
    """A signal that ended a command: carried past typer, which would turn it into a silent 130."""

    def __init__(self, interrupt: KeyboardInterrupt):
        super().__init__()
        self.interrupt = interrupt


def command(*args, **kwargs):
    """``app.command``, with a signal that ends the command reported as one line and 128+signal."""

    def register(fn):
        @functools.wraps(fn)
        def wrapper(*a, **k):
            try:
                return fn(*a, **k)
            except KeyboardInterrupt as exc:
                raise _Escaped(exc) from None

        return app.command(*args, **kwargs)(wrapper)

    return register


def _load_options(ctx, threads, gpu_layers, gpu_layers_draft, margin, flash_attn, cache_type_k, cache_type_v, verbose,
                  prompt_cache=None, prompt_cache_size=None, no_prompt_cache=False):
    from ..commands.loading import LoadOptions, byte_size

    return LoadOptions(ctx=ctx, threads=threads, gpu_layers=gpu_layers, gpu_layers_draft=gpu_layers_draft,
                       margin=margin, flash_attn=plain(flash_attn), cache_type_k=plain(cache_type_k),
                       cache_type_v=plain(cache_type_v), verbose=verbose, prompt_cache=prompt_cache,
                       prompt_cache_size=byte_size(prompt_cache_size, "--prompt-cache-size") if prompt_cache_size else None,
                       no_prompt_cache=no_prompt_cache)
