"""When parity fails, find the first layer whose output already diverges.

A bad max error on the final output says *that* a conversion is wrong, not *where*. This cuts the exported
program after a layer (the last node of each leaf module, in graph order), converts that prefix with the
same target and variant, and compares it with PyTorch on the same sample; a binary search over layers finds
the first divergent one in log2(layers) conversions. It works for every target because it only uses the
target's own ``convert`` and ``load_runner``. Binary search assumes that once a prefix diverges, longer
prefixes do too — true for the usual converter bug (a wrong kernel); the report calls the answer
"first diverging layer found by bisection".
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from edgeport.core.scratch import scratch
from edgeport.diagnostics import user_source


@dataclass(frozen=True)
class Layer:
    node: str          # FX node name of the layer's last op
    module: str        # module path, e.g. "encoder.layers.0.linear1"
    kind: str          # module class, e.g. "Linear"
    source: str | None  # the user's source line that called it


def layers(program) -> list[Layer]:
    """Layer boundaries in graph order: the last tensor-producing node of each run of one leaf module."""
    result: list[Layer] = []
    for node in program.graph.nodes:
        stack = node.meta.get("nn_module_stack")
        if node.op != "call_function" or not stack or not _is_tensor(node.meta.get("val")):
            continue
        path, kind = list(stack.values())[-1]
        layer = Layer(node.name, path, str(kind).rsplit(".", 1)[-1], user_source(node.meta.get("stack_trace")))
        if result and result[-1].module == path:
            result[-1] = layer
        else:
            result.append(layer)
    return result


def _is_tensor(val) -> bool:
    return val is not None and hasattr(val, "shape") and hasattr(val, "dtype")


def truncated_program(program, node_name: str, example_inputs: tuple):
    """The exported program cut after ``node_name`` (its value becomes the only output), exported again.
    The module's pytree output spec is replaced too: it still described the model's own outputs, and a
    multi-output model would otherwise fail to unflatten one value into several."""
    import torch
    from torch.utils._pytree import tree_flatten

    from edgeport.core.program import capture_mode

    module = program.module()
    graph = module.graph
    target = next(n for n in graph.nodes if n.name == node_name)
    output = next(n for n in graph.nodes if n.op == "output")
    graph.erase_node(output)
    graph.output((target,))
    codegen = graph._codegen
    if getattr(codegen, "pytree_info", None) is not None:
        codegen.pytree_info = codegen.pytree_info._replace(out_spec=tree_flatten((0,))[1])
    graph.eliminate_dead_code()
    module.recompile()
    with capture_mode():  # the same kernels as the program it is cut from
        return torch.export.export(module, tuple(example_inputs), strict=False)


def feeding(program, output: int) -> set[str]:
    """Names of the nodes user output ``output`` depends on (itself included)."""
    from torch.export.graph_signature import OutputKind

    specs = [s for s in program.graph_signature.output_specs if s.kind == OutputKind.USER_OUTPUT]
    name = getattr(specs[output].arg, "name", None) if output < len(specs) else None
    nodes = {n.name: n for n in program.graph.nodes}
    seen, todo = set(), [nodes[name]] if name in nodes else []
    while todo:
        node = todo.pop()
        if node.name not in seen:
            seen.add(node.name)
            todo.extend(node.all_input_nodes)
    return seen


def first_divergent_layer(target, job, sample: list, budget: dict, threads: int, output: int = 0,
                          max_steps: int = 12) -> dict | None:
    """Bisect over the layers that feed the failing output; returns the report's ``diverged_at`` entry,
    or None if no layer could be blamed."""
    from edgeport.core.eager import EagerRunner
    from edgeport.validate.parity import compare

    upstream = feeding(job.program, output)
    candidates = [layer for layer in layers(job.program) if layer.node in upstream]
    if not candidates:
        return None

    def diverges(index: int) -> bool:
        sub = truncated_program(job.program, candidates[index].node, job.example_inputs)
        reference = EagerRunner(sub.module(), [i.dtype for i in job.signature.inputs], threads).run(sample)
        with scratch("edgeport-localize-") as tmp:  # a cut program's artifact: up to the model's size
            sub_job = replace(job, program=sub, out_dir=tmp, notes=[], module=None,  # the cut program only
                              artifact_only=True)
            runner = target.load_runner(target.convert(sub_job).artifact, threads)
            return not compare([reference], [runner.run(sample)], {**budget, "allow_empty": True}, ["layer"])["passed"]

    low, high, steps = 0, len(candidates) - 1, 0
    if not diverges(high):
        return None  # the failure is not reproduced by any single layer output (e.g. only a later output differs)
    while low < high and steps < max_steps:
        middle = (low + high) // 2
        steps += 1
        if diverges(middle):
            high = middle
        else:
            low = middle + 1
    layer = candidates[high]
    return {"layer": layer.module, "kind": layer.kind, "node": layer.node, "source": layer.source,
            "index": high, "layers": len(candidates), "conversions": steps + 1, "method": "bisection"}
