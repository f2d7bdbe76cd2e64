"""XLA:CPU and a bf16 linear of one row (a decode step): the TPU artifact's linear as edgeport lowers it
(``edgeport.targets.tpu.lowering._linear``) against the form before (one ``dot_general`` contracting the
weight's dim 1 whatever the dtype), on Llama-3.2-1B's linear shapes, in the same process.

    python bench/tpu_bf16_linear.py [--calls 30]

XLA:CPU runs the TPU artifact's parity, quality and latency on a machine without a TPU. For a bf16 weight it
converts the whole weight to f32 before the dot (``wrapped_convert``) unless the product is a 2-D row times the
transposed matrix, which it emits as one loop over the bf16 weight. Printed: ms per call for each form and
shape (bf16 one row, bf16 32 rows, f32 one row), and the ratio now / before; the outputs of both forms are
compared (max abs difference).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

# (out, in) of Llama-3.2-1B's linears: q/o, k/v, gate/up, down, the head
SHAPES = [(2048, 2048), (512, 2048), (8192, 2048), (2048, 8192), (128256, 2048)]


def before(x, weight):
    import jax

    return jax.lax.dot_general(x, weight, (((x.ndim - 1,), (1,)), ((), ())))


def timed(fn, calls: int, *args) -> float:
    fn(*args).block_until_ready()
    start = time.perf_counter()
    for _ in range(calls):
        fn(*args).block_until_ready()
    return (time.perf_counter() - start) / calls * 1000


def main() -> None:
    import jax
    import jax.numpy as jnp

    from edgeport.targets.tpu.lowering import _linear

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=30)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    print("| weight (out x in) | dtype | rows | before ms | now ms | now / before | max abs diff |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for out, inp in SHAPES:
        base = rng.standard_normal((out, inp), dtype=np.float32) * 0.02
        for dtype, rows in ((jnp.bfloat16, 1), (jnp.bfloat16, 32), (jnp.float32, 1)):
            weight = jnp.asarray(base).astype(dtype)
            x = jnp.asarray(rng.standard_normal((1, rows, inp), dtype=np.float32)).astype(dtype)
            old, new = jax.jit(before), jax.jit(_linear)
            diff = float(jnp.abs(old(x, weight).astype(jnp.float32) - new(x, weight).astype(jnp.float32)).max())
            t_old, t_new = timed(old, args.calls, x, weight), timed(new, args.calls, x, weight)
            print(f"| {out} x {inp} | {jnp.dtype(dtype).name} | {rows} | {t_old:.2f} | {t_new:.2f} | "
                  f"{t_new / t_old:.2f}x | {diff:.3g} |", flush=True)


if __name__ == "__main__":
    main()
