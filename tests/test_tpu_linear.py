"""The TPU lowering writes a linear as one ``dot_general`` over the weight as stored: torchax's
``x @ transpose(w)`` made XLA:CPU (which runs every TPU artifact's parity and latency here) copy each weight
transposed on every call, ~3x a 1B-class decode step (bench/LARGE_GENERATION.md)."""

import numpy as np
import torch

from edgeport.targets._jax import prefer_cpu_backend


class TwoLinears(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.up, self.down = torch.nn.Linear(16, 64), torch.nn.Linear(64, 16, bias=False)

    def forward(self, x):
        return self.down(torch.relu(self.up(x)))


def test_linears_lower_without_a_transposed_weight_and_compute_the_same():
    prefer_cpu_backend()
    import jax

    from edgeport.targets.tpu.lowering import lower_program

    torch.manual_seed(0)
    model, x = TwoLinears().eval(), torch.randn(1, 3, 16)
    lowered = lower_program(torch.export.export(model, (x,)), "fp32", ["x"])
    hlo = jax.jit(lowered.fn).lower(lowered.weights, x.numpy()).as_text()
    assert hlo.count("dot_general") == 2 and "transpose" not in hlo, hlo
    (got,) = jax.jit(lowered.fn)(lowered.weights, x.numpy())
    np.testing.assert_allclose(np.asarray(got), model(x).detach().numpy(), rtol=1e-5, atol=1e-6)
