"""``/metrics``: what the server has done, in Prometheus' text format.

Counters of requests and tokens are kept here as requests finish; what the scheduler counts
itself (passes, sequences per pass, drafted and accepted tokens by drafter) is read from its
run statistics; queue length and running requests from the engine thread, at each scrape.
Written by hand: a dozen lines of the exposition format need no client library.
"""

from __future__ import annotations

import time


class Metrics:
    def __init__(self):
        self.started = int(time.time())
        self.requests = 0  # accepted for running
        self.finished_requests = 0
        self.prompt_tokens = 0
        self.cached_tokens = 0
        self.generated_tokens = 0

    def finished(self, result) -> None:
        st = result.stats
        self.finished_requests += 1
        self.prompt_tokens += st.n_prompt
        self.cached_tokens += st.n_prompt_reused
        self.generated_tokens += st.n_generated

    def render(self, worker) -> str:
        run = worker.scheduler.stats
        lines: list[str] = []

        def metric(name: str, kind: str, help_: str, samples: list[tuple[str, float]]) -> None:
            lines.append(f"# HELP specdec_{name} {help_}")
            lines.append(f"# TYPE specdec_{name} {kind}")
            for labels, value in samples:
                lines.append(f"specdec_{name}{labels} {value:g}")

        metric("requests_total", "counter", "Requests accepted for running.", [("", self.requests)])
        metric("requests_finished_total", "counter", "Requests that ended.", [("", self.finished_requests)])
        metric("prompt_tokens_total", "counter", "Prompt tokens of finished requests.", [("", self.prompt_tokens)])
        metric("prompt_tokens_cached_total", "counter", "Prompt tokens whose cells were reused.",
               [("", self.cached_tokens)])
        metric("tokens_generated_total", "counter", "Tokens generated.", [("", self.generated_tokens)])
        metric("draft_tokens_total", "counter", "Draft tokens sent to the target, by drafter.",
               [(f'{{drafter="{k}"}}', v) for k, v in sorted(run.drafted.items())])
        metric("draft_tokens_accepted_total", "counter", "Draft tokens the target kept, by drafter.",
               [(f'{{drafter="{k}"}}', v) for k, v in sorted(run.accepted.items())])
        metric("passes_total", "counter", "Target passes.", [("", run.n_passes)])
        metric("sequences_per_pass", "gauge", "Mean sequences decoding per target pass.",
               [("", run.mean_sequences or 0.0)])
        metric("requests_running", "gauge", "Requests decoding now.", [("", worker.running)])
        metric("queue_length", "gauge", "Requests waiting for a sequence.", [("", worker.queued)])
        return "\n".join(lines) + "\n"
