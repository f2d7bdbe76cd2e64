"""The two kinds of failure the CLI maps to exit codes (DESIGN.md: 2 = bad input, 1 = conversion/parity)."""


class UsageError(Exception):
    """Bad usage or bad input: the CLI prints the message as one line and exits 2."""


class ExportFailed(Exception):
    """torch.export refused the model: every target fails with this message (exit 1)."""
