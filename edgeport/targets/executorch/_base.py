"""Every piece of the house this target builds on, imported here and nowhere else in the package.

The house is moving (``export/`` and ``runtimes/`` into ``targets/``, generative support into the one
pipeline): when it does, these lines are the only ones to re-point.
"""

from edgeport.diagnostics import first_line, histogram  # noqa: F401
from edgeport.export.registry import (  # noqa: F401
    ConvertJob, Converted, FallbackSupport, GenerativeJob, GenerativeSupport, ReportSection, Target, TargetOption,
)
from edgeport.quantize.layers import QuantLayer, fx_layers, owners  # noqa: F401
from edgeport.runtimes.base import BaseRunner  # noqa: F401
from edgeport.runtimes.signature import SignatureRunner, cast_to, tensor  # noqa: F401
from edgeport.export.program import capture_mode  # noqa: F401
from edgeport.runtimes.torch_eager import EagerRunner, to_torch  # noqa: F401
