"""Every piece of the house this target builds on, imported here and nowhere else in the package (one place
to read what an ExecuTorch target needs from edgeport: the target contract, the layer model for --fallback,
the signature-runner helpers and the core's program/eager pieces)."""

from edgeport.core.eager import EagerRunner, to_torch  # noqa: F401
from edgeport.core.program import capture_mode  # noqa: F401
from edgeport.diagnostics import first_line, histogram  # noqa: F401
from edgeport.quantize.layers import QuantLayer, block_layers, fx_layers, in_graph_order, owners  # noqa: F401
from edgeport.targets._pt2e import calibrated, float_filter  # noqa: F401
from edgeport.targets.base import (  # noqa: F401
    ConvertJob, Converted, FallbackSupport, GenerativeJob, GenerativeSupport, Target, TargetOption,
)
from edgeport.targets.runner import BaseRunner  # noqa: F401
from edgeport.targets.signature import PerSignature, SignatureRunner, cast_to, one_at_a_time, tensor  # noqa: F401
from edgeport.validate.sections import ReportSection  # noqa: F401
