"""SmolLM2-135M-Instruct on Sudoku 4x4 with 8 blanks (the tiny model's VPR puzzle) with VPR's chat
prompt (Listing 2: instructions, a fenced GAME STATE board with row and column labels, answers as
`<answer>fill(r,c,d)</answer>`): a short warm start on oracle demonstrations, then GRPO with the
outcome reward, sized for a 2-core CPU.

    python -m launch.train --config=configs/sudoku4_smollm2.py --workdir=/tmp/sudoku4_smollm2
    python -m launch.sft --config=configs/sudoku4_smollm2.py --workdir=/tmp/sudoku4_smollm2_sft
    python -m launch.evaluate --config=configs/sudoku4_smollm2.py --checkpoint=/tmp/sudoku4_smollm2

VPR's variant (verifier turn rewards, turn-level normalisation) is
configs/grids/vpr_sudoku4_smollm2.py. With SmolLM2's tokenizer the first turn is 457 tokens and
each further turn ~84, so an oracle episode (8 fills) is 1,130 tokens and the step limit (16
moves) fits 2,048 positions. An answer is ~12 tokens; 32 leave room for a malformed one. The
warm start has more steps than FrozenLake's (16 of 4 episodes, 10% random moves as the tiny
model's sudoku4_sft.py): the policy must learn the board's coordinates, not only the format.
"""

from jaxtree.experiment import SMOLLM2, base_config, rl_config, variant_overrides


def get_config(variant: str = ""):
    config = base_config("sudoku", dict(size=4, style="chat"),
                         context_length=2048, max_action_tokens=32, epsilon=0.1)
    return rl_config(config, "grpo", {
        **SMOLLM2,
        "sft.num_episodes": 128, "sft.steps": 16, "sft.batch_size": 4,
        "sft.learning_rate": 2e-5, "sft.warmup_steps": 2, "sft.log_every": 1,
        "sft.checkpoint_every": 4,
        "rollout.num_slots": 16, "rollout.groups_per_step": 2, "rollout.group_size": 8,
        "train.steps": 3, "train.micro_batch_size": 2, "optim.learning_rate": 1e-6,
        "eval.num_tasks": 8, "eval.samples_per_task": 1, "eval.every": 3,
        "checkpoint.every": 1,
        **variant_overrides(variant),
    })
