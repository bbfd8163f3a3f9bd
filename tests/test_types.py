"""Enumerations against SPEC-NOTES §0: DataType, FeatureLevel, TensorFlags, operator and activation ids."""

from __future__ import annotations

import pytest

from dmlq import DataType, Device, DmlError, FeatureLevel, TensorFlags, activations, ops

DATA_TYPE_VALUES = {
    "UNKNOWN": 0,
    "FLOAT32": 1,
    "FLOAT16": 2,
    "UINT32": 3,
    "UINT16": 4,
    "UINT8": 5,
    "INT32": 6,
    "INT16": 7,
    "INT8": 8,
    "FLOAT64": 9,
    "UINT64": 10,
    "INT64": 11,
    "UINT4": 12,
    "INT4": 13,
}
DATA_TYPE_BITS = {
    "UNKNOWN": 0,
    "FLOAT32": 32,
    "FLOAT16": 16,
    "UINT32": 32,
    "UINT16": 16,
    "UINT8": 8,
    "INT32": 32,
    "INT16": 16,
    "INT8": 8,
    "FLOAT64": 64,
    "UINT64": 64,
    "INT64": 64,
    "UINT4": 4,
    "INT4": 4,
}
FEATURE_LEVEL_VALUES = {
    "1_0": 0x1000,
    "2_0": 0x2000,
    "2_1": 0x2100,
    "3_0": 0x3000,
    "3_1": 0x3100,
    "4_0": 0x4000,
    "4_1": 0x4100,
    "5_0": 0x5000,
    "5_1": 0x5100,
    "5_2": 0x5200,
    "6_0": 0x6000,
    "6_1": 0x6100,
    "6_2": 0x6200,
    "6_3": 0x6300,
    "6_4": 0x6400,
}
OPERATOR_IDS = {
    "ElementWiseAdd": ("ELEMENT_WISE_ADD", 4, "1_0", True),
    "ElementWiseQuantizeLinear": ("ELEMENT_WISE_QUANTIZE_LINEAR", 33, "1_0", False),
    "ElementWiseDequantizeLinear": ("ELEMENT_WISE_DEQUANTIZE_LINEAR", 34, "1_0", False),
    "ElementWiseAdd1": ("ELEMENT_WISE_ADD1", 89, "2_0", True),
    "QuantizedLinearMatrixMultiply": ("QUANTIZED_LINEAR_MATRIX_MULTIPLY", 118, "2_1", False),
    "ElementWiseQuantizedLinearAdd": ("ELEMENT_WISE_QUANTIZED_LINEAR_ADD", 147, "4_0", False),
    "Quantize": ("QUANTIZE", 173, "6_3", False),
    "Dequantize": ("DEQUANTIZE", 174, "6_3", False),
    # spec/QUANTIZED-FAMILY.md §9
    "Gemm": ("GEMM", 54, "1_0", False),
    "MatrixMultiplyInteger": ("MATRIX_MULTIPLY_INTEGER", 117, "2_1", False),
    "ConvolutionInteger": ("CONVOLUTION_INTEGER", 119, "2_1", False),
    "QuantizedLinearConvolution": ("QUANTIZED_LINEAR_CONVOLUTION", 120, "2_1", False),
    "DynamicQuantizeLinear": ("DYNAMIC_QUANTIZE_LINEAR", 148, "4_0", False),
    "QuantizedLinearAveragePooling": ("QUANTIZED_LINEAR_AVERAGE_POOLING", 169, "6_2", False),
    "MatrixMultiplyIntegerToFloat": ("MATRIX_MULTIPLY_INTEGER_TO_FLOAT", 170, "6_2", False),
}
# class: (DML type, value, level, DirectMLX defaults or None when the parameters have none)
ACTIVATION_IDS = {
    "Elu": ("ACTIVATION_ELU", 35, "1_0", {"alpha": 1.0}),
    "HardSigmoid": ("ACTIVATION_HARD_SIGMOID", 37, "1_0", {"alpha": 0.2, "beta": 0.5}),
    "Identity": ("ACTIVATION_IDENTITY", 38, "1_0", {}),
    "LeakyRelu": ("ACTIVATION_LEAKY_RELU", 39, "1_0", {"alpha": 0.01}),
    "Linear": ("ACTIVATION_LINEAR", 40, "1_0", None),
    "ParametricSoftplus": ("ACTIVATION_PARAMETRIC_SOFTPLUS", 43, "1_0", None),
    "Relu": ("ACTIVATION_RELU", 44, "1_0", {}),
    "ScaledElu": (
        "ACTIVATION_SCALED_ELU",
        45,
        "1_0",
        {"alpha": 1.67326319217681884765625, "gamma": 1.05070102214813232421875},
    ),
    "ScaledTanh": ("ACTIVATION_SCALED_TANH", 46, "1_0", {"alpha": 1.0, "beta": 0.5}),
    "Sigmoid": ("ACTIVATION_SIGMOID", 47, "1_0", {}),
    "Softplus": ("ACTIVATION_SOFTPLUS", 49, "1_0", {"steepness": 1.0}),
    "Softsign": ("ACTIVATION_SOFTSIGN", 50, "1_0", {}),
    "Tanh": ("ACTIVATION_TANH", 51, "1_0", {}),
    "ThresholdedRelu": ("ACTIVATION_THRESHOLDED_RELU", 52, "1_0", {"alpha": 1.0}),
    "Shrink": ("ACTIVATION_SHRINK", 90, "2_0", {"bias": 0.0, "threshold": 0.5}),
    "Celu": ("ACTIVATION_CELU", 128, "3_0", {"alpha": 1.0}),
    "Gelu": ("ACTIVATION_GELU", 157, "5_1", {}),
}


@pytest.mark.parametrize("name, value", DATA_TYPE_VALUES.items())
def test_data_type_value_and_bits(name: str, value: int) -> None:
    member = DataType[name]
    assert int(member) == value
    assert member.bits == DATA_TYPE_BITS[name]
    assert DataType.parse(name) is member
    assert DataType.parse(f"DML_TENSOR_DATA_TYPE_{name}") is member
    assert DataType.parse(value) is member


def test_data_type_has_exactly_the_directml_members() -> None:
    assert {m.name: int(m) for m in DataType} == DATA_TYPE_VALUES


@pytest.mark.parametrize("bad", ["FLOAT8", 14, -1, "float"])
def test_data_type_parse_refuses_unknown(bad: object) -> None:
    with pytest.raises(DmlError, match="unknown data type"):
        DataType.parse(bad)


@pytest.mark.parametrize("label, value", FEATURE_LEVEL_VALUES.items())
def test_feature_level_values_and_spellings(label: str, value: int) -> None:
    member = FeatureLevel[f"FL_{label}"]
    assert int(member) == value
    assert member.label == label
    for text in (label, label.replace("_", "."), f"FL_{label}", f"DML_FEATURE_LEVEL_{label}"):
        assert FeatureLevel.parse(text) is member
    assert FeatureLevel.parse(value) is member
    assert Device(label.replace("_", ".")).feature_level is member


def test_feature_levels_are_ordered_and_complete() -> None:
    assert [level.label for level in sorted(FeatureLevel)] == list(FEATURE_LEVEL_VALUES)
    assert FeatureLevel.FL_1_0 < FeatureLevel.FL_2_1 < FeatureLevel.FL_6_4
    assert FeatureLevel.newest() is FeatureLevel.FL_6_4
    assert Device().feature_level is FeatureLevel.FL_6_4
    assert Device(None).feature_level is FeatureLevel.FL_6_4


@pytest.mark.parametrize("bad", ["4_5", "7.0", "4", "", 0x4001, True, 4.0, None])
def test_feature_level_parse_refuses_unknown(bad: object) -> None:
    with pytest.raises(DmlError, match="unknown feature level"):
        FeatureLevel.parse(bad)


def test_device_refuses_unknown_level() -> None:
    with pytest.raises(DmlError, match="unknown feature level"):
        Device("6_5")


def test_tensor_flags() -> None:
    assert int(TensorFlags.NONE) == 0 and int(TensorFlags.OWNED_BY_DML) == 1


@pytest.mark.parametrize("class_name", OPERATOR_IDS)
def test_operator_ids(class_name: str) -> None:
    type_name, value, level, in_place = OPERATOR_IDS[class_name]
    cls = getattr(ops, class_name)
    assert (cls.TYPE_NAME, cls.TYPE_VALUE, cls.INTRODUCED.label, cls.IN_PLACE) == (
        type_name,
        value,
        level,
        in_place,
    )
    assert ops.by_type_name(type_name) is cls
    assert ops.by_type_name(f"DML_OPERATOR_{type_name}") is cls


def test_operator_list_is_complete() -> None:
    assert {cls.__name__ for cls in ops.OPERATORS} == set(OPERATOR_IDS)
    with pytest.raises(KeyError):
        ops.by_type_name("ELEMENT_WISE_SUBTRACT")


@pytest.mark.parametrize("class_name", ACTIVATION_IDS)
def test_activation_ids_and_defaults(class_name: str) -> None:
    type_name, value, level, defaults = ACTIVATION_IDS[class_name]
    cls = getattr(activations, class_name)
    assert (cls.TYPE_NAME, cls.TYPE_VALUE, cls.INTRODUCED.label) == (type_name, value, level)
    if defaults is None:
        with pytest.raises(TypeError):
            cls()
        with pytest.raises(DmlError, match="no default parameters"):
            activations.from_spec(cls.NAME)
    else:
        instance = activations.from_spec(cls.NAME)
        assert type(instance) is cls
        assert {name: getattr(instance, name) for name in defaults} == defaults
        assert len(instance.parameters()) == len(defaults)


def test_activation_list_is_complete() -> None:
    assert {cls.__name__ for cls in activations.ACTIVATIONS.values()} == set(ACTIVATION_IDS)
    names = {
        "identity",
        "relu",
        "leaky_relu",
        "thresholded_relu",
        "elu",
        "celu",
        "scaled_elu",
        "sigmoid",
        "hard_sigmoid",
        "tanh",
        "scaled_tanh",
        "linear",
        "softplus",
        "parametric_softplus",
        "softsign",
        "shrink",
        "gelu",
    }
    assert set(activations.ACTIVATIONS) == names
