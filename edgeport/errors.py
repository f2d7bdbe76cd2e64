"""The two kinds of failure the CLI maps to exit codes (DESIGN.md: 2 = bad input, 1 = conversion/parity)."""


class UsageError(Exception):
    """Bad usage or bad input: the CLI prints the message as one line and exits 2."""


class ExportFailed(Exception):
    """torch.export refused the model: every target fails with this message (exit 1)."""


def json_object(raw, what: str) -> dict:
    """``raw`` (text or bytes) parsed as a JSON object; anything else is bad input naming ``what``."""
    import json

    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise UsageError(f"{what} is not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise UsageError(f"{what} is not a JSON object")
    return data
