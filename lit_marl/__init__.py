"""lit-marl: multi-agent reinforcement learning on PyTorch Lightning."""

__version__ = "0.1.0"
