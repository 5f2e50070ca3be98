"""jaxtree: reinforcement learning of LLM agents with tree-structured rollouts, in JAX/Flax."""

from setuptools import find_packages, setup

setup(
    name="jaxtree",
    version="0.1.0",
    description=(
        "JAX/Flax reinforcement learning for LLM agents with tree-structured rollouts "
        "(LATR, PATR, TSR, RTMC, VPR)."
    ),
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    packages=find_packages(include=["jaxtree", "jaxtree.*", "launch", "launch.*",
                                    "environments", "environments.*"]),
    # mini-SWE's built-in task bank: data read by environments/mini_swe_tasks.py (its .py files
    # are task sources, not modules of the package), in the task_dir format the loader reads.
    package_data={"environments": ["mini-swe-tasks/README.md", "mini-swe-tasks/order.txt",
                                   "mini-swe-tasks/*/*.py", "mini-swe-tasks/*/task.json",
                                   "mini-swe-tasks/*/hidden.txt"]},
    install_requires=[
        "jax>=0.8",
        "flax>=0.10",
        "optax",
        "orbax-checkpoint",
        "transformers>=4.51",
        "tokenizers",
        "safetensors",
        "numpy",
        "ml_dtypes",
        "chex",
        "absl-py",
        "gymnasium",
        "ml_collections",
        "tqdm",
        "matplotlib",      # launch.plot
        "tensorboardX",    # TensorBoard event files without TensorFlow
        "gguf",            # llama.cpp checkpoints (jaxtree.models.gguf_io)
        "filelock",        # the compilation cache's size cap (launch.common)
    ],
    extras_require={
        # torch is pinned: an unpinned torch pulls a multi-GB CUDA build. It is only the
        # reference implementation in parity tests and the baseline in benchmarks.
        "test": ["pytest", "pytest-xdist", "hypothesis", "torch==2.13.0", "editdistance",
                 "accelerate",  # transformers' own GGUF loading, the parity reference
                 "peft"],  # loads the LoRA export's adapter (tests/test_lora.py)
        "tb": ["tensorboard"],  # the TensorBoard viewer
        "gpu": ["jax[cuda12]"],
        "tpu": ["jax[tpu]"],
    },
)
