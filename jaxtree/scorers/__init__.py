"""Process scorers: how promising a partial trajectory is, in [0, 1] (PATR §4.2), behind one
protocol and registry (`base`), with the scorers that need a model in their own modules:

- `base`: the registry `SCORERS`, the protocol and the registered scorers `heuristic`, `judge`
  and `prm` with their settings (`rollout.patr.<scorer>`).
- `judge`: PATR's LLM judge run in process by a jaxtree policy (App. B prompts, Eq. 8 blend).
- `judge_http`: the same judge asked on an OpenAI-compatible server.
- `prm`: PATR-PRM, a process reward model's step scores aggregated by Eq. 7.
- `prm_io`: PRM checkpoints (token-classification and value-head layouts).
- `prm_training`: fitting a PRM on an environment's labelled partial trajectories.
- `probe`: does a scorer separate oracle prefixes from random ones (AUC), before a run.

    from jaxtree.scorers import SCORERS
    scorer = build_scorer("heuristic", None)
    scores = scorer(episodes)       # float64[len(episodes)], each in [0, 1]
"""

from jaxtree.scorers.base import (SCORERS, JudgeConfig, PrmConfig, Scorer, build_scorer,
                                  checked_scores)

__all__ = ["SCORERS", "JudgeConfig", "PrmConfig", "Scorer", "build_scorer", "checked_scores"]
