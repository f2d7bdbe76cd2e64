"""A demo backend that doubles as a test: it "converts" by saving the ExportedProgram and "runs" it through an
FX interpreter whose tanh kernel is wrong, like a converter with one bad op lowering."""

from pathlib import Path

import numpy as np

from edgeport.targets.base import Converted, Target
from edgeport.targets.runner import BaseRunner
from edgeport.validate.parity import FP32


def convert(job):
    import torch

    path = job.out_dir / f"model_{job.variant}.pt2"
    torch.export.save(job.program, path)
    return Converted(path)


class BuggyRunner(BaseRunner):
    name = "fx_interpreter"

    def __init__(self, path: Path, threads: int):
        import torch

        super().__init__(path, threads)
        self.module = torch.export.load(path).module()

    def run(self, inputs):
        import torch
        from torch.fx import Interpreter

        class WrongTanh(Interpreter):
            def call_function(self, target, args, kwargs):
                out = super().call_function(target, args, kwargs)
                return out * 1.5 if target is torch.ops.aten.tanh.default else out

        with torch.no_grad():
            out = WrongTanh(self.module).run(*[torch.from_numpy(np.asarray(x)) for x in inputs])
        return [t.numpy() for t in (out if isinstance(out, (tuple, list)) else [out])]



TARGET = Target(name="buggy", description="test backend with a wrong tanh", variants=("fp32",), requires=("torch",), budgets={"fp32": FP32},
                extra="dev", convert=convert, runners=(BuggyRunner,))
