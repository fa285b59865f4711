"""``/metrics``: what the server has done, in Prometheus' text format (``prometheus_client``).

Counters of requests and tokens, and the latency histograms (time to first token, time per
output token, from each request's arrival), are kept here as requests finish; what the
scheduler counts itself (passes, sequences per pass, drafted and accepted tokens by drafter)
is read from its run statistics, and queue length and running requests from the engine
thread, at each scrape. Each server has its own registry, so two in one process (the tests)
never share a count.
"""

from __future__ import annotations

import time

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

# seconds: from a cached follow-up read beside a neighbour (~0.1 s) to a long prompt queued behind others
TTFT_BUCKETS = (0.05, 0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0)
# seconds per token: a GPU's few milliseconds to a CPU's passes shared by several sequences
TPOT_BUCKETS = (0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0, 2.0)


class Metrics:
    def __init__(self):
        self.started = int(time.time())
        self.registry = CollectorRegistry()
        self._worker = None
        r = self.registry
        self._requests = Counter("specdec_requests", "Requests accepted for running.", registry=r)
        self._finished = Counter("specdec_requests_finished", "Requests answered in full.", registry=r)
        self._prompt = Counter("specdec_prompt_tokens", "Prompt tokens of finished requests.", registry=r)
        self._cached = Counter("specdec_prompt_tokens_cached", "Prompt tokens whose cells were reused.", registry=r)
        self._generated = Counter("specdec_tokens_generated", "Tokens generated.", registry=r)
        self._ttft = Histogram("specdec_time_to_first_token_seconds",
                               "From a request's arrival to its first token: rendering, queueing, prompt passes.",
                               buckets=TTFT_BUCKETS, registry=r)
        self._tpot = Histogram("specdec_time_per_output_token_seconds",
                               "A request's seconds per generated token after its first.",
                               buckets=TPOT_BUCKETS, registry=r)
        r.register(_EngineCollector(self))

    def accepted(self) -> None:
        self._requests.inc()

    def finished(self, result) -> None:
        st = result.stats
        if st.stop_reason == "cancelled":  # its client went away: counted by the worker, not answered
            return
        self._finished.inc()
        self._prompt.inc(st.n_prompt)
        self._cached.inc(st.n_prompt_reused)
        self._generated.inc(st.n_generated)
        if st.ttft_seconds is not None:
            self._ttft.observe(st.ttft_seconds)
        if st.time_per_output_token is not None:
            self._tpot.observe(st.time_per_output_token)

    def render(self, worker) -> str:
        self._worker = worker
        return generate_latest(self.registry).decode()


class _EngineCollector:
    """What the engine thread counts, read at each scrape."""

    def __init__(self, metrics: Metrics):
        self.metrics = metrics

    def collect(self):
        worker = self.metrics._worker
        if worker is None:
            return
        run = worker.scheduler.stats
        drafted = CounterMetricFamily("specdec_draft_tokens", "Draft tokens sent to the target, by drafter.",
                                      labels=["drafter"])
        accepted = CounterMetricFamily("specdec_draft_tokens_accepted", "Draft tokens the target kept, by drafter.",
                                       labels=["drafter"])
        for k, v in sorted(run.drafted.items()):
            drafted.add_metric([k], v)
        for k, v in sorted(run.accepted.items()):
            accepted.add_metric([k], v)
        yield drafted
        yield accepted
        yield CounterMetricFamily("specdec_passes", "Target passes.", value=run.n_passes)
        yield GaugeMetricFamily("specdec_sequences_per_pass", "Mean sequences decoding per target pass.",
                                value=run.mean_sequences or 0.0)
        yield CounterMetricFamily("specdec_requests_cancelled", "Requests ended because their client went away.",
                                  value=worker.cancelled)
        yield CounterMetricFamily("specdec_requests_faulted", "Requests ended alone by a fault in the engine.",
                                  value=worker.faulted)
        yield GaugeMetricFamily("specdec_requests_running", "Requests decoding now.", value=worker.running)
        yield GaugeMetricFamily("specdec_queue_length", "Requests waiting for a sequence.", value=worker.queued)
        cache = worker.engine.prompt_cache
        if cache is not None:
            yield from _prompt_cache_metrics(cache)


def _prompt_cache_metrics(cache):
    """The prompt cache's hits, tokens and bytes per tier (``engine/promptcache``), and what it holds."""
    served = cache.served
    for name, doc, values in (
            ("specdec_prompt_cache_hits", "Prompts whose head was restored from the prompt cache, by tier.",
             served.hits),
            ("specdec_prompt_cache_tokens", "Prompt tokens restored from the prompt cache, by tier.", served.tokens),
            ("specdec_prompt_cache_read_bytes", "Bytes of cells restored from the prompt cache, by tier.",
             served.bytes_read)):
        family = CounterMetricFamily(name, doc, labels=["tier"])
        for tier, v in sorted(values.items()):
            family.add_metric([tier], v)
        yield family
    yield CounterMetricFamily("specdec_prompt_cache_saves", "Sequences' cells kept by the prompt cache.",
                              value=served.saved)
    yield CounterMetricFamily("specdec_prompt_cache_saved_bytes", "Bytes of cells kept by the prompt cache.",
                              value=served.bytes_saved)
    held = GaugeMetricFamily("specdec_prompt_cache_bytes", "Bytes the prompt cache holds, by tier.", labels=["tier"])
    held.add_metric(["host"], cache.host.n_bytes)
    if cache.disk is not None:
        held.add_metric(["disk"], cache.disk.n_bytes)
    yield held
