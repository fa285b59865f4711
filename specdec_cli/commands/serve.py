"""``specdec serve`` as a library call: plan and load as ``run`` does, then serve until a signal.

The pair is chosen, budgeted and loaded once, with room for ``--parallel`` requests decoding
at once plus as many finished conversations kept in the cache (their cells are the prefix of
the next turn), each sequence in a KV stream of its own, as llama-server's slots are: in one
pool every pass would attend over every kept conversation's cells too (``ContextParams.kv_streams``).
The engine runs on the main thread (``serve/worker.py`` says why); uvicorn
serves the app of ``serve/app.py`` on a helper thread. Ctrl-C, SIGTERM or SIGHUP ends every
request still running, each with its finish reason sent, then the server, and exits 0: a
signal is how a server is asked to stop. A fault while serving one request ends that request
alone (``serve/worker.py``).
"""

from __future__ import annotations

import ipaddress
import os
import signal
import threading
import time
from dataclasses import dataclass, replace

from ..errors import EXIT_OK, UsageError
from ..terminal import console
from .loading import PairRequest, open_engine, plan_pair

# requests decoding at once unless --parallel says more (the curve picks at or below it; memory may lower it).
# 8 let the curve pick 4 on a 2-core CPU, where 16 clients then waited 14.0 s (p50) for a first token at
# 28.8 tok/s, against llama-server's 3.4 s at 39.8 tok/s with 16 slots: a CPU's pass of 16 rows costs about
# 7 steps, so 16 sequences outrun 4 (the measured curve says so too, once it may look that far)
SERVE_PARALLEL_MAX = 16
QUEUE_PER_SLOT = 16  # requests that may wait per decoding sequence before the server answers 503


@dataclass(frozen=True)
class ServeRequest(PairRequest):
    """Every option of ``specdec serve``, as data."""

    host: str = "127.0.0.1"
    port: int = 8080
    parallel: int | None = None
    api_key: str | None = None  # None: $SPECDEC_API_KEY, else no key
    model_alias: str | None = None
    max_tokens: int | None = None  # a request's default budget (None: until the context is full)
    quiet: bool = False
    profile: bool = False  # where the passes' time went, on stderr when the server stops


def serve(req: ServeRequest) -> int:
    from ..engine.decode.engine import DraftOptions, GenOptions
    from ..engine.decode.pass_profile import NO_PROFILE, PassProfile
    from ..engine.policy.decisions import choose_parallel
    from ..engine.verify.verifiers import SamplingParams
    from ..serve.app import create_app
    from ..serve.metrics import Metrics
    from ..serve.worker import Worker
    from ..toolcalls.turn import ChatPrompter
    from .batch import batch_blocker
    from .loading import fit_parallel

    api_key = req.api_key or os.environ.get("SPECDEC_API_KEY") or None
    _check_host(req.host, api_key)
    if not 0 < req.port < 65536:
        raise UsageError(f"--port {req.port} is not a port number", hint="use 1-65535, e.g. --port 8080")
    plan = plan_pair(req)
    why = batch_blocker(plan)
    if why is not None:
        raise UsageError(f"specdec serve decodes requests together, and {why}",
                         hint="serve an attention model (most GGUFs), or use `specdec export --to llama-server`")
    want = req.parallel or SERVE_PARALLEL_MAX
    n_seq = fit_parallel(plan, req.load, plan.draft_max.value, 2 * want)  # half of them keep idle conversations
    if n_seq < 2 * want:
        console.note(f"memory for {2 * want} sequences of --ctx {req.load.ctx} does not fit; {n_seq} it is")
    engine, _ = open_engine(plan, req.load, DraftOptions(draft_max=plan.draft_max.value, draft_min=plan.draft_min.value,
                                                        p_min=plan.p_min.value),
                            method=plan.method.value, quiet=req.quiet, n_seq=max(1, n_seq), kv_streams=True)
    if engine.prompt_cache is not None and not req.quiet:
        console.note(engine.prompt_cache.describe())
    worker = None
    http_alive: list[bool] = []  # the HTTP thread outlived the server's stop (``_run_server``)
    try:
        limit = max(1, min(want, n_seq))
        parallel = min(req.parallel, limit) if req.parallel else choose_parallel(engine.ensure_costs(), limit)
        default = GenOptions(max_tokens=req.max_tokens or engine.n_ctx_seq)
        scheduler = engine.scheduler(default, n_parallel=parallel, first_tokens_first=True,
                                     profile=PassProfile() if req.profile else NO_PROFILE)
        worker = Worker(engine, scheduler, queue_max=QUEUE_PER_SLOT * parallel)
        alias = req.model_alias or plan.target.value.name

        def make_gen(body) -> GenOptions:
            return replace(default, max_tokens=body.token_budget(default.max_tokens), stop=body.stops(),
                           sampling=SamplingParams(temp=body.temperature, top_k=body.top_k, top_p=body.top_p,
                                                   seed=body.seed))

        prompter = ChatPrompter(engine.target_model, engine.n_ctx_seq)
        app = create_app(worker, model=alias, api_key=api_key, make_gen=make_gen, metrics=Metrics(),
                         prompter=prompter, log=not req.quiet)
        console.note(f"serving {alias} at http://{_url_host(req.host)}:{req.port}/v1 "
                     f"({parallel} request{'' if parallel == 1 else 's'} at once; Ctrl-C stops)")
        got = _run_server(app, req.host, req.port, worker, http_alive)
    finally:
        if worker is not None:
            worker.stop()
            for line in worker.scheduler.profile.lines() if req.profile else ():
                console.note(line)
        if any(http_alive):  # a request still being read on the HTTP thread tokenizes with the model: keep it
            engine.save_costs()
            console.warn("the HTTP side did not stop in time; the models are left for the process exit to free")
        else:
            engine.close()
    if got:
        console.note(f"stopped ({signal.Signals(got).name})")
    # a signal is how a server is asked to stop (Ctrl-C, systemd, docker stop): a clean stop, exit 0
    return EXIT_OK


STOP_SIGNALS = tuple(getattr(signal, n) for n in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, n))


def _run_server(app, host: str, port: int, worker, http_alive: list[bool]) -> int | None:
    """uvicorn on a helper thread and the engine's loop on this one (the main thread, where
    signals arrive) until a signal; the signal first ends every request (the worker cancels
    them, each response is still sent), then the server. Returns the signal's number; appends
    to ``http_alive`` whether the HTTP thread is still running when it returns or raises (it
    renders and tokenizes requests with the model, which must not be freed under it)."""
    import uvicorn

    config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="off",
                            timeout_graceful_shutdown=30)
    server = uvicorn.Server(config)  # off the main thread, uvicorn leaves the signals to us
    http = threading.Thread(target=server.run, name="specdec-http", daemon=True)
    got: list[int] = []

    def on_signal(signum, _frame) -> None:  # runs between two of the loop's bytecodes: flags only
        got.append(signum)
        worker.stop()
        server.should_exit = True
        if len(got) > 1:
            server.force_exit = True  # a second signal: stop waiting for open connections

    previous = {s: signal.signal(s, on_signal) for s in STOP_SIGNALS}
    try:
        http.start()
        while not server.started and http.is_alive() and not got:
            time.sleep(0.02)
        if not server.started and not got:
            raise UsageError(f"cannot listen on {host}:{port}", hint="is another server on that port? pick --port")
        worker.run(serving=http.is_alive)
    finally:
        worker.stop()
        server.should_exit = True
        http.join(timeout=config.timeout_graceful_shutdown + 5)
        http_alive.append(http.is_alive())
        for s, handler in previous.items():
            signal.signal(s, handler)
    return got[0] if got else None


def _check_host(host: str, api_key: str | None) -> None:
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback and not api_key:
        console.warn(f"serving on {host} without --api-key: anyone who can reach this port can use the model")


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host
