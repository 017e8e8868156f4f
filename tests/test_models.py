"""Mlp model config: shapes, centralisation, parameter sharing, layer norm, bad input."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from lit_marl.errors import ConfigError
from lit_marl.models import Mlp


def test_multi_agent_mlp_shapes_and_sharing():
    config = Mlp(num_cells=[16, 16], activation_class="ReLU")
    shared = config.build_multi_agent(5, 3, n_agents=4, centralised=False, share_params=True)
    separate = config.build_multi_agent(5, 3, n_agents=4, centralised=False, share_params=False)
    assert shared(torch.randn(7, 4, 5)).shape == (7, 4, 3)
    assert sum(p.numel() for p in separate.parameters()) == 4 * sum(p.numel() for p in shared.parameters())
    assert any(isinstance(m, nn.ReLU) for m in shared.modules())


def test_layer_norm_and_single_network():
    net = Mlp(num_cells=[8, 4], layer_norm=True).build_single(3, 2)
    norms = [m for m in net.modules() if isinstance(m, nn.LayerNorm)]
    assert [n.normalized_shape for n in norms] == [(8,), (4,)]
    assert net(torch.randn(6, 3)).shape == (6, 2)


def test_bad_model_config_names_field():
    with pytest.raises(ConfigError, match="activation_class: 'Tanhh'"):
        Mlp(activation_class="Tanhh")
    with pytest.raises(ConfigError, match=r"num_cells: .*\[64, 0\]"):
        Mlp(num_cells=[64, 0])
