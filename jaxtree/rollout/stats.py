"""Where a slot-engine rollout session's time goes and how much work it did (`RolloutStats`),
and which of its metrics are wall-clock measurements (`TIMING_METRICS`)."""

from __future__ import annotations

import dataclasses


# The rollout metrics that are wall-clock measurements (RolloutStats.metrics): they differ between
# two runs that are otherwise identical.
TIMING_METRICS = ("rollout/host_share", "rollout/env_share", "rollout/subprocess_share")


@dataclasses.dataclass
class RolloutStats:
    """Where a rollout session's time goes (seconds) and how much work was done (reset by
    `SlotEngine.begin`)."""

    device_seconds: float = 0.0
    start_seconds: float = 0.0        # environment resets and first prompts
    env_seconds: float = 0.0          # per turn: detokenize, step and label, next observation
    subprocess_seconds: float = 0.0   # of env_seconds: the environments' own subprocesses
                                      # (their steps' info["subprocess_seconds"], e.g. mini-SWE's
                                      # sandboxed test runs)
    other_host_seconds: float = 0.0
    turns: int = 0                    # engine turns (device calls)
    env_steps: int = 0                # environment steps over all episodes
    generated_tokens: int = 0
    observation_tokens: int = 0       # prompt and observation tokens appended to caches
    slot_turns: int = 0               # sum over turns of the rows each device call covered
    rows_per_turn: list[int] = dataclasses.field(default_factory=list)

    @property
    def host_seconds(self) -> float:
        return self.start_seconds + self.env_seconds + self.other_host_seconds

    @property
    def host_share(self) -> float:
        total = self.host_seconds + self.device_seconds
        return self.host_seconds / total if total else 0.0

    def metrics(self) -> dict[str, float]:
        """The shares of the engine's time in this rollout session (host + device since `begin`)
        spent on the host, in environment steps, and in the environments' subprocesses: a
        rollout strategy's `rollout/*` timing metrics."""
        total = self.host_seconds + self.device_seconds

        def share(seconds: float) -> float:
            return seconds / total if total else 0.0

        return {"rollout/host_share": share(self.host_seconds),
                "rollout/env_share": share(self.env_seconds),
                "rollout/subprocess_share": share(self.subprocess_seconds)}
