"""``compile: true``: each group's loss runs through torch.compile and computes what the eager loss does."""

from __future__ import annotations

import pytest
import torch

from lit_marl.algorithms import MADDPG, MAPPO
from lit_marl.errors import ConfigError
from tests.helpers.tiny import ddpg_kwargs, tiny_kwargs, tiny_task, tiny_trainer


def test_compile_is_off_by_default_and_must_be_a_bool():
    model = MAPPO(tiny_task(), **tiny_kwargs())
    assert model.compile_losses is False and model.learners["agents"].objective_fn() is model.losses["agents"]
    assert callable(model.compile)  # nn.Module's method is not shadowed by the flag
    with pytest.raises(ConfigError, match="compile"):
        MAPPO(tiny_task(), compile="yes", **tiny_kwargs())


@pytest.mark.slow
@pytest.mark.parametrize("algorithm, kwargs", [(MAPPO, tiny_kwargs()), (MADDPG, ddpg_kwargs())])
def test_a_compiled_loss_trains_like_the_eager_one(tmp_path, algorithm, kwargs):
    """Same seed, same run: eager and compiled training reach the same weights (to float rounding of fused kernels)."""
    weights, initial = {}, None
    for compiled in (False, True):
        torch.manual_seed(0)
        model = algorithm(tiny_task(), compile=compiled, **{**kwargs, "max_frames": 80})
        initial = initial or {k: v.clone() for k, v in model.state_dict().items()}
        tiny_trainer(tmp_path / str(compiled), max_epochs=2).fit(model)
        assert model.frames == 80
        weights[compiled] = {k: v.clone() for k, v in model.state_dict().items()}
        if compiled:
            assert type(model.learners["agents"].objective_fn()).__name__ == "OptimizedModule"
    assert any(not torch.equal(initial[k], weights[False][k]) for k in initial)  # training moved the weights
    assert weights[False].keys() == weights[True].keys()
    for key in weights[False]:
        torch.testing.assert_close(weights[True][key], weights[False][key], rtol=1e-4, atol=1e-5, msg=key)


def test_a_cuda_graph_loss_starts_a_graph_step_and_clones_its_terms(monkeypatch):
    """On CUDA a compiled loss replays CUDA graphs, which reuse their output memory: the wrapper must mark a new graph
    step before each call and hand back copies (the H200 run crashed without it: the iteration's kept loss terms were
    overwritten by the next replay). Checked on CPU with a stand-in for the compiled loss."""
    from tensordict import TensorDict

    from lit_marl.algorithms.learner import _CudaGraphOutputs

    static = TensorDict({"loss_objective": torch.tensor(1.0, requires_grad=True)}, [])
    marks = []
    monkeypatch.setattr(torch.compiler, "cudagraph_mark_step_begin", lambda: marks.append(len(marks)))
    loss = _CudaGraphOutputs(lambda batch: static)
    first = loss(None)
    static["loss_objective"].data.fill_(2.0)  # what the next replay does to the graph's output memory
    second = loss(None)
    assert marks == [0, 1]
    assert first["loss_objective"].item() == 1.0 and second["loss_objective"].item() == 2.0
    assert first["loss_objective"].requires_grad  # still differentiable: the clone is part of the graph
