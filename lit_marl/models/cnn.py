"""Convolutional network for image observations, then an MLP head (BenchMARL's Cnn defaults)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from tensordict.nn import TensorDictModule, TensorDictModuleBase
from torch import nn
from torchrl.modules import MultiAgentConvNet, MultiAgentMLP
from typing_extensions import override

from lit_marl.errors import ConfigError, check_types
from lit_marl.models.base import ModelConfig, ModelInputs, agent_ids, as_features
from lit_marl.models.mlp import activation_module, positive_ints


class _ConvThenMlp(nn.Module):
    """Images through the conv net; its flattened features, with any flat inputs (and, with ``agent_ids`` = the
    group's number of agents, each agent's one-hot index), through the MLP head."""

    def __init__(self, conv: nn.Module, mlp: nn.Module, image_slots: list[int], channels_last: bool,
                 head: nn.Module | None, agent_ids: int = 0) -> None:
        super().__init__()
        self.conv, self.mlp, self.head = conv, mlp, head
        self.image_slots = image_slots
        self.channels_last = channels_last
        self.agent_ids = agent_ids

    @override
    def forward(self, *inputs: torch.Tensor):
        images = [inputs[i] for i in self.image_slots]
        image = images[0] if len(images) == 1 else torch.cat(images, dim=-1 if self.channels_last else -3)
        if self.channels_last:  # [*B, n_agents, H, W, C] -> [*B, n_agents, C, H, W]
            image = image.movedim(-1, -3)
        # flat entries are [*B, n_agents, features] already
        features = [self.conv(as_features(image)), *(x for i, x in enumerate(inputs) if i not in self.image_slots)]
        if self.agent_ids:
            features.append(agent_ids(features[0], self.agent_ids))
        out = self.mlp(features[0] if len(features) == 1 else torch.cat(features, dim=-1))
        return out if self.head is None else self.head(out)


class Cnn(ModelConfig):
    """Convolutions over each agent's image observation, then an MLP.

    The entries of ``[H, W, C]`` per agent (``channels_last``, as VMAS, MAgent2 and Gymnasium give them) or
    ``[C, H, W]`` go through the conv layers; other (flat) entries, such as a Q-function's action, join the
    flattened conv features before the MLP head. Defaults are BenchMARL's: three 32-channel layers of kernel 3,
    stride 1, no padding, Tanh, and a 32-unit head.

    Args:
        cnn_num_cells: channels of each conv layer.
        cnn_kernel_sizes: kernel size of each layer (one int for all).
        cnn_strides: stride of each layer (one int for all).
        cnn_paddings: padding of each layer (one int for all).
        cnn_activation_class: ``torch.nn`` activation after each conv layer.
        mlp_num_cells: hidden widths of the head.
        mlp_activation_class: activation of the head.
        channels_last: images are ``[H, W, C]`` (True) or ``[C, H, W]`` (False).
        agent_id: append each agent's one-hot index to the head's input (EPyMARL's ``obs_agent_id``, as
            :class:`~lit_marl.models.Mlp`'s).
    """

    def __init__(
        self,
        cnn_num_cells: Sequence[int] = (32, 32, 32),
        cnn_kernel_sizes: int | Sequence[int] = 3,
        cnn_strides: int | Sequence[int] = 1,
        cnn_paddings: int | Sequence[int] = 0,
        cnn_activation_class: str = "Tanh",
        mlp_num_cells: Sequence[int] = (32,),
        mlp_activation_class: str = "Tanh",
        channels_last: bool = True,
        agent_id: bool = False,
    ) -> None:
        check_types(Cnn.__init__, {k: v for k, v in locals().items() if k != "self"})
        self.cnn_num_cells = positive_ints("cnn_num_cells", cnn_num_cells)
        depth = len(self.cnn_num_cells)
        self.cnn_kernel_sizes = _per_layer("cnn_kernel_sizes", cnn_kernel_sizes, depth, minimum=1)
        self.cnn_strides = _per_layer("cnn_strides", cnn_strides, depth, minimum=1)
        self.cnn_paddings = _per_layer("cnn_paddings", cnn_paddings, depth, minimum=0)
        activation_module(cnn_activation_class, "cnn_activation_class")
        activation_module(mlp_activation_class, "mlp_activation_class")
        self.cnn_activation_class = cnn_activation_class
        self.mlp_num_cells = positive_ints("mlp_num_cells", mlp_num_cells, allow_empty=True)
        self.mlp_activation_class = mlp_activation_class
        self.channels_last = bool(channels_last)
        self.agent_id = bool(agent_id)

    @override
    def build_module(self, inputs: ModelInputs, out_keys, n_agent_outputs, centralised, share_params, head=None,
                     device=None) -> TensorDictModuleBase:
        image_slots = [i for i, shape in enumerate(inputs.shapes) if len(shape) == 3]
        if not image_slots:
            raise ConfigError(
                f"{inputs.field}: Cnn needs an image entry per agent ([H, W, C] with channels_last, else [C, H, W]); "
                f"group {inputs.group!r} reads {inputs.describe()}; allowed: Mlp for vector observations"
            )
        shapes = [inputs.shapes[i] for i in image_slots]
        spatial = [tuple(s[:2]) if self.channels_last else tuple(s[1:]) for s in shapes]
        if len(set(spatial)) > 1:
            raise ConfigError(f"{inputs.field}: Cnn's image entries must share height and width; got {inputs.describe()}")
        channels = sum(int(s[-1] if self.channels_last else s[0]) for s in shapes)
        flat = [i for i in range(len(inputs.shapes)) if i not in image_slots]
        if any(len(inputs.shapes[i]) != 1 for i in flat):
            raise ConfigError(f"{inputs.field}: Cnn reads images [H, W, C] and flat vectors only; got {inputs.describe()}")
        conv = MultiAgentConvNet(
            n_agents=inputs.n_agents, centralized=centralised, share_params=share_params, device=device,
            in_features=channels, num_cells=list(self.cnn_num_cells), kernel_sizes=list(self.cnn_kernel_sizes),
            strides=list(self.cnn_strides), paddings=list(self.cnn_paddings),
            activation_class=activation_module(self.cnn_activation_class),
        )
        height, width = spatial[0]
        with torch.no_grad():
            probe = torch.zeros(1, inputs.n_agents, channels, height, width, device=device)
            try:
                conv_features = conv(probe).shape[-1]
            except RuntimeError as error:
                raise ConfigError(
                    f"{inputs.field}: Cnn layers (kernels {self.cnn_kernel_sizes}, strides {self.cnn_strides}, "
                    f"paddings {self.cnn_paddings}) do not fit an image of {height}x{width}: {error}"
                ) from error
        mlp = MultiAgentMLP(
            n_agent_inputs=conv_features + sum(inputs.shapes[i].numel() for i in flat) + inputs.n_agents * self.agent_id,
            n_agent_outputs=n_agent_outputs,
            n_agents=inputs.n_agents, centralized=False, share_params=share_params, device=device,
            num_cells=list(self.mlp_num_cells), activation_class=activation_module(self.mlp_activation_class),
        )
        module = _ConvThenMlp(conv, mlp, image_slots, self.channels_last, head,
                              agent_ids=inputs.n_agents if self.agent_id else 0)
        return TensorDictModule(module, in_keys=list(inputs.keys), out_keys=list(out_keys))


def _per_layer(name: str, value: int | Sequence[int], depth: int, minimum: int) -> list[int]:
    values = [value] * depth if isinstance(value, int) and not isinstance(value, bool) else list(value)
    if len(values) != depth or any(not isinstance(v, int) or isinstance(v, bool) or v < minimum for v in values):
        raise ConfigError(
            f"{name}: must be an integer >= {minimum} or a list of {depth} of them (one per conv layer), got {value!r}"
        )
    return values
