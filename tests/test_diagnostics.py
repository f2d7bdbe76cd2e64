"""Error text in reports: the summary says what broke (the root cause, not an exporter's "next steps"), names
the model line, and carries no terminal colour codes."""

from edgeport.diagnostics import first_line, summary, user_frame

# the shape of torch.onnx's step-2 failure: its own text (coloured, with "Next steps"), then a copy of the cause
WRAPPER = ("Failed to decompose the FX graph for ONNX compatibility. \x1b[96mThis is step 2/3\x1b[0m of exporting "
           "the model to ONNX. Next steps:\n- Create an issue in the PyTorch GitHub repository against the "
           "\x1b[96m*torch.export*\x1b[0m component.\n- Create an error report with `torch.onnx.export(..., "
           "report=True)`.\n\n## Exception summary\n\n<class 'ValueError'>: copy of the cause\n")
CAUSE = ('Cannot view a tensor with shape torch.Size([2, 32, 4, 16]) and strides (2048, 16, 512, 1)!\n\n'
         'While executing %view_4 : call_function[target=torch.ops.aten.view.default]\nOriginal traceback:\n'
         'File "/venv/lib/python3.11/site-packages/torch/nn/modules/module.py", line 1, in _call_impl\n'
         '    return forward_call(*args)\n'
         'File "/home/me/.cache/edgeport/venv/lib/python3.11/site-packages/transformers/models/t5/modeling_t5.py", line 368, in forward\n'
         '    attn_output = attn_output.reshape(*input_shape, -1).contiguous()\n'
         'Use tlparse to see full graph.')


class ConversionError(RuntimeError):
    pass


def _raised():
    try:
        try:
            raise ValueError(CAUSE)
        except ValueError as cause:
            raise ConversionError(WRAPPER) from cause
    except ConversionError as exc:
        return exc


def test_summary_keeps_the_root_cause_without_boilerplate_or_colour():
    text = summary(_raised())
    assert text.startswith("ConversionError: Failed to decompose the FX graph for ONNX compatibility. This is step 2/3")
    assert "caused by ValueError: Cannot view a tensor with shape torch.Size([2, 32, 4, 16])" in text
    assert "While executing %view_4" in text
    for noise in ("\x1b", "Next steps", "Create an issue", "copy of the cause", "Original traceback", "tlparse"):
        assert noise not in text
    assert first_line(_raised()).endswith("of exporting the model to ONNX.")


def test_user_frame_names_the_model_line_even_in_a_library():
    """(The library path holds "edgeport", as a venv under ~/.cache/edgeport does: not edgeport's own file.)"""
    # the test file itself raised, so it is "user code" in the traceback: drop the tracebacks to read the message
    exc = _raised()
    exc.__traceback__ = exc.__cause__.__traceback__ = None
    assert user_frame(exc) == ("transformers/models/t5/modeling_t5.py:368: "
                               "attn_output = attn_output.reshape(*input_shape, -1).contiguous()")
    quoted_user_file = ValueError('boom\nOriginal traceback:\nFile "/home/me/model.py", line 7, in forward\n'
                                  '    return x.view(3)\n' + CAUSE)
    assert user_frame(quoted_user_file) == "/home/me/model.py:7: return x.view(3)"
