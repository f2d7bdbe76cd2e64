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


def test_a_bf16_linear_of_one_row_is_a_row_times_the_transposed_weight():
    """bf16 decode (one row): XLA:CPU converts a whole bf16 weight to f32 before a dot contracting its dim 1
    (28 ms for 8192 x 2048), and runs a 2-D row times the transposed weight as one loop over the bf16 weight
    (0.8 ms; bench/tpu_bf16_linear.py). One row lowers to that form; several rows (prefill) keep the one dot;
    both compute what the model computes, within bf16."""
    prefer_cpu_backend()
    import jax

    from edgeport.targets.tpu.lowering import lower_program

    torch.manual_seed(0)
    model = TwoLinears().eval()
    for rows, transposes in ((1, 2), (3, 0)):
        x = torch.randn(1, rows, 16)
        lowered = lower_program(torch.export.export(model, (x,)), "bf16", ["x"])
        hlo = jax.jit(lowered.fn).lower(lowered.weights, x.numpy()).as_text()
        assert hlo.count("dot_general") == 2 and hlo.count("stablehlo.transpose") == transposes, hlo
        (got,) = jax.jit(lowered.fn)(lowered.weights, x.numpy())
        np.testing.assert_allclose(np.asarray(got, np.float32), model(x).detach().numpy(), rtol=0.05, atol=0.02)


def test_a_long_bf16_row_is_reduced_on_cpu_and_one_dot_on_tpu(monkeypatch):
    """A one-row bf16 linear whose row is longer than XLA:CPU fuses (an MLP's down projection) is, on CPU, each
    weight row times the row summed in f32 (one reduction over the bf16 weight, not a conversion of all of it);
    the exported program keeps the one dot for TPU (``platform_dependent``). Same product, within bf16."""
    prefer_cpu_backend()
    import jax

    from edgeport.targets.tpu import lowering

    monkeypatch.setattr(lowering, "CPU_FUSED_ROW", 32)   # `down`'s 64-wide row is "long", `up`'s 16 is not
    torch.manual_seed(0)
    model, x = TwoLinears().eval(), torch.randn(1, 1, 16)
    lowered = lowering.lower_program(torch.export.export(model, (x,)), "bf16", ["x"])
    cpu = jax.jit(lowered.fn).lower(lowered.weights, x.numpy()).as_text()
    assert "stablehlo.reduce" in cpu and cpu.count("dot_general") == 1, cpu   # up a dot, down reduced
    both = jax.jit(lowered.fn).trace(lowered.weights, x.numpy()).lower(lowering_platforms=("cpu", "tpu")).as_text()
    assert "stablehlo.case" in both and both.count("dot_general") > cpu.count("dot_general"), both   # TPU: down a dot
    (got,) = jax.jit(lowered.fn)(lowered.weights, x.numpy())
    np.testing.assert_allclose(np.asarray(got, np.float32), model(x).detach().numpy(), rtol=0.05, atol=0.02)
