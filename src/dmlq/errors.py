"""The one exception dmlq raises for anything DirectML would refuse."""

__all__ = ["DmlError"]


class DmlError(ValueError):
    """A description, buffer or argument that DirectML (or dmlq's NumPy layer) refuses.

    The message names the operator, the field, the rule and the feature level where they apply,
    e.g. ``ElementWiseQuantizeLinear.output: data type INT8 needs feature level 2_1 (device is 1_0)``.
    """
