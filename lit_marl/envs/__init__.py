"""Tasks: benchmark environments as batched torchrl envs with grouped agents."""

from lit_marl.envs.base import Task, TaskSpecs
from lit_marl.envs.custom import CustomTask
from lit_marl.envs.gymnasium import GymnasiumTask
from lit_marl.envs.lbf import LbfTask
from lit_marl.envs.mamujoco import MaMuJoCoTask
from lit_marl.envs.meltingpot import MeltingPotTask
from lit_marl.envs.pettingzoo import PETTINGZOO_TASKS, PettingZooTask
from lit_marl.envs.rware import RwareTask
from lit_marl.envs.vmas import VMAS_SCENARIOS, VmasTask

__all__ = ["Task", "TaskSpecs", "VmasTask", "VMAS_SCENARIOS", "PettingZooTask", "PETTINGZOO_TASKS", "GymnasiumTask",
           "CustomTask", "MeltingPotTask", "LbfTask", "RwareTask", "MaMuJoCoTask"]
