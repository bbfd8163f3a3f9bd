"""Every tensor constraint of each page and field presence, at the newest level unless stated.

Constraints: same DimensionCount / Sizes / DataType groups, QuantizeLinear's scale type following
the input type, one element per QuantizedLinearAdd scale and zero point, the matrix multiply's
shapes and its per-tensor / per-row / per-column quantization shapes.
"""

from __future__ import annotations

import pytest

from dmlq import DataType, Device, DmlError, TensorDesc, activations, ops

F32, F16, I32, I16, U16, U8, I8 = (
    DataType.FLOAT32,
    DataType.FLOAT16,
    DataType.INT32,
    DataType.INT16,
    DataType.UINT16,
    DataType.UINT8,
    DataType.INT8,
)
DEVICE = Device()


def t(data_type: DataType, sizes: list[int], strides: list[int] | None = None) -> TensorDesc:
    return TensorDesc(data_type, sizes, strides)


def refused(desc: ops.OperatorDesc, message: str, level: str = "6_4") -> None:
    with pytest.raises(DmlError) as error:
        Device(level).compile_operator(desc)
    assert str(error.value) == f"{type(desc).__name__}.{message} (device is {level})"


SIZES = [1, 2, 3]
BROADCAST = [0, 0, 0]


def quantize(**changes) -> ops.ElementWiseQuantizeLinear:
    fields = dict(
        input=t(F32, SIZES),
        scale=t(F32, SIZES, BROADCAST),
        zero_point=t(U8, SIZES, BROADCAST),
        output=t(U8, SIZES),
    )
    return ops.ElementWiseQuantizeLinear(**(fields | changes))


def dequantize(**changes) -> ops.ElementWiseDequantizeLinear:
    fields = dict(
        input=t(U8, SIZES),
        scale=t(F32, SIZES, BROADCAST),
        zero_point=t(U8, SIZES, BROADCAST),
        output=t(F32, SIZES),
    )
    return ops.ElementWiseDequantizeLinear(**(fields | changes))


class TestQuantizeLinear:
    def test_valid(self) -> None:
        DEVICE.compile_operator(quantize())
        DEVICE.compile_operator(quantize(input=t(F16, SIZES), scale=t(F16, SIZES, BROADCAST)))
        DEVICE.compile_operator(quantize(input=t(I32, SIZES)))
        DEVICE.compile_operator(quantize(zero_point=t(I8, SIZES, [0, 1, 0]), output=t(I8, SIZES)))

    def test_scalar_shaped_scale_is_refused(self) -> None:
        # DirectML issue #303: broadcasting is equal sizes with zero strides, never {1, 1, 1}
        refused(quantize(scale=t(F32, [1, 1, 1])), "scale: sizes [1, 1, 1] differs from input's [1, 2, 3]")

    def test_same_dimension_count(self) -> None:
        refused(
            quantize(zero_point=t(U8, [1, 1, 2, 3], [0, 0, 0, 0])),
            "zero_point: dimension count 4 differs from input's 3",
        )

    def test_same_sizes_output(self) -> None:
        refused(quantize(output=t(U8, [1, 3, 2])), "output: sizes [1, 3, 2] differs from input's [1, 2, 3]")

    def test_zero_point_type_is_output_type(self) -> None:
        refused(
            quantize(zero_point=t(I8, SIZES, BROADCAST)),
            "zero_point: data type INT8 differs from output's UINT8",
        )

    @pytest.mark.parametrize(
        "x, scale, wanted", [(F32, F16, "FLOAT32"), (F16, F32, "FLOAT16"), (I32, F16, "FLOAT32")]
    )
    def test_scale_type_follows_input(self, x: DataType, scale: DataType, wanted: str) -> None:
        refused(
            quantize(input=t(x, SIZES), scale=t(scale, SIZES, BROADCAST)),
            f"scale: data type {scale.name} must be {wanted} for {x.name} input",
        )

    @pytest.mark.parametrize("field", ["input", "scale", "output"])
    def test_required_fields(self, field: str) -> None:
        refused(quantize(**{field: None}), f"{field}: tensor is required")

    def test_not_a_tensor(self) -> None:
        refused(quantize(scale=[1.0]), "scale: must be a TensorDesc or None, not list")


class TestDequantizeLinear:
    def test_valid(self) -> None:
        DEVICE.compile_operator(dequantize())
        DEVICE.compile_operator(dequantize(input=t(I16, SIZES), zero_point=None))
        DEVICE.compile_operator(dequantize(scale=t(F16, SIZES, BROADCAST), output=t(F16, SIZES)))

    def test_zero_point_type_is_input_type(self) -> None:
        refused(
            dequantize(zero_point=t(I8, SIZES, BROADCAST)),
            "zero_point: data type INT8 differs from input's UINT8",
        )

    def test_output_type_is_scale_type(self) -> None:
        refused(dequantize(output=t(F16, SIZES)), "scale: data type FLOAT32 differs from output's FLOAT16")

    def test_same_sizes_and_dimension_count(self) -> None:
        refused(dequantize(scale=t(F32, [1, 1, 1])), "scale: sizes [1, 1, 1] differs from input's [1, 2, 3]")
        refused(dequantize(output=t(F32, [2, 3])), "output: dimension count 2 differs from input's 3")

    @pytest.mark.parametrize("field", ["input", "scale", "output"])
    def test_required_fields(self, field: str) -> None:
        refused(dequantize(**{field: None}), f"{field}: tensor is required")


class TestAdd:
    @pytest.mark.parametrize("cls", [ops.ElementWiseAdd, ops.ElementWiseAdd1])
    def test_same_type_dims_sizes(self, cls) -> None:
        a = t(F32, [2, 3])
        DEVICE.compile_operator(cls(a=a, b=t(F32, [2, 3], [0, 1]), output=a))
        refused(cls(a=a, b=t(F16, [2, 3]), output=a), "b: data type FLOAT16 differs from a's FLOAT32")
        refused(cls(a=a, b=a, output=t(F32, [1, 2, 3])), "output: dimension count 3 differs from a's 2")
        refused(cls(a=a, b=t(F32, [1, 3]), output=a), "b: sizes [1, 3] differs from a's [2, 3]")
        for field in ("a", "b", "output"):
            refused(cls(**{"a": a, "b": a, "output": a} | {field: None}), f"{field}: tensor is required")

    def test_add1_fused_activation_must_be_an_activation(self) -> None:
        a = t(F32, [4])
        refused(
            ops.ElementWiseAdd1(a=a, b=a, output=a, fused_activation="relu"),
            "fused_activation: str is not a fusable activation (use one of dmlq.activations)",
        )
        refused(
            ops.ElementWiseAdd1(a=a, b=a, output=a, fused_activation=activations.Relu),
            "fused_activation: ABCMeta is not a fusable activation (use one of dmlq.activations)",
        )

    def test_add1_fused_activation_needs_float_output(self) -> None:
        # ADD1 has no integer types at any level, so the table refuses first
        a = t(I32, [4])
        desc = ops.ElementWiseAdd1(a=a, b=a, output=a, fused_activation=activations.Relu())
        assert desc.minimum_feature_level() is None
        refused(desc, "a: data type INT32 is not supported (supported: FLOAT32, FLOAT16)")

    @pytest.mark.parametrize(
        "activation, rule",
        [
            (
                activations.LeakyRelu(alpha="x"),
                "ACTIVATION_LEAKY_RELU parameter alpha must be a number, not 'x'",
            ),
            (activations.Elu(alpha=True), "ACTIVATION_ELU parameter alpha must be a number, not True"),
            (activations.Softplus(steepness=0.0), "ACTIVATION_SOFTPLUS steepness 0.0 must be positive"),
            (activations.Softplus(steepness=-1.0), "ACTIVATION_SOFTPLUS steepness -1.0 must be positive"),
        ],
    )
    def test_add1_activation_parameters(self, activation, rule: str) -> None:
        a = t(F32, [4])
        refused(
            ops.ElementWiseAdd1(a=a, b=a, output=a, fused_activation=activation), f"fused_activation: {rule}"
        )

    def test_add1_activation_refusal_does_not_depend_on_what_was_compiled_before(self) -> None:
        """Elu(alpha=True) == Elu(alpha=1.0) in Python; the compile cache must still refuse the bool."""
        a, device = t(F32, [4]), Device()
        device.compile_operator(
            ops.ElementWiseAdd1(a=a, b=a, output=a, fused_activation=activations.Elu(alpha=1.0))
        )
        with pytest.raises(DmlError, match="parameter alpha must be a number, not True"):
            device.compile_operator(
                ops.ElementWiseAdd1(a=a, b=a, output=a, fused_activation=activations.Elu(alpha=True))
            )
        assert activations.Elu(alpha=1) == activations.Elu(alpha=1.0) != activations.Celu(alpha=1.0)

    def test_add1_activation_with_every_parameter_given(self) -> None:
        a = t(F16, [4])
        for activation in (
            activations.Linear(alpha=2.0, beta=-1.0),
            activations.ParametricSoftplus(alpha=1, beta=2),
            activations.ScaledElu(alpha=1.0, gamma=2.0),
            activations.HardSigmoid(alpha=0.1, beta=0.2),
        ):
            DEVICE.compile_operator(ops.ElementWiseAdd1(a=a, b=a, output=a, fused_activation=activation))


def quantized_add(**changes) -> ops.ElementWiseQuantizedLinearAdd:
    one, data = [1, 1], [2, 3]
    fields = dict(
        a=t(U8, data),
        a_scale=t(F32, one),
        a_zero_point=t(U8, one),
        b=t(I8, data),
        b_scale=t(F32, one),
        b_zero_point=t(I8, one),
        output_scale=t(F32, one),
        output_zero_point=t(I8, one),
        output=t(I8, data),
    )
    return ops.ElementWiseQuantizedLinearAdd(**(fields | changes))


class TestQuantizedLinearAdd:
    def test_valid_with_mixed_byte_types(self) -> None:
        DEVICE.compile_operator(quantized_add())
        DEVICE.compile_operator(quantized_add(a_zero_point=None, b_zero_point=None, output_zero_point=None))
        DEVICE.compile_operator(quantized_add(a_scale=t(F32, [1, 1], [0, 0])))
        DEVICE.compile_operator(quantized_add(b=t(I8, [2, 3], [0, 1])))

    @pytest.mark.parametrize(
        "field", ["a_scale", "a_zero_point", "b_scale", "b_zero_point", "output_scale", "output_zero_point"]
    )
    def test_one_element_each(self, field: str) -> None:
        data_type = F32 if field.endswith("scale") else {"a": U8, "b": I8, "output": I8}[field.split("_")[0]]
        refused(
            quantized_add(**{field: t(data_type, [1, 3], [0, 0])}),
            f"{field}: holds 3 elements; exactly 1 is expected",
        )

    @pytest.mark.parametrize(
        "field, sizes, message",
        [
            ("a_scale", [1], "a: dimension count 2 differs from a_scale's 1"),
            ("b_zero_point", [1, 1, 1], "b_zero_point: dimension count 3 differs from a_scale's 2"),
            ("output", [6], "output: dimension count 1 differs from a_scale's 2"),
            ("output_scale", [1], "output_scale: dimension count 1 differs from a_scale's 2"),
        ],
    )
    def test_same_dimension_count(self, field: str, sizes: list[int], message: str) -> None:
        desc = quantized_add()
        refused(desc.replace(**{field: t(getattr(desc, field).data_type, sizes)}), message)

    @pytest.mark.parametrize(
        "field, data_type, other",
        [
            ("a_zero_point", I8, "a's UINT8"),
            ("b_zero_point", U8, "b's INT8"),
            ("output_zero_point", U8, "output's INT8"),
        ],
    )
    def test_zero_point_types(self, field: str, data_type: DataType, other: str) -> None:
        refused(
            quantized_add(**{field: t(data_type, [1, 1])}),
            f"{field}: data type {data_type.name} differs from {other}",
        )

    def test_data_sizes_are_equal(self) -> None:
        refused(quantized_add(b=t(I8, [1, 3])), "b: sizes [1, 3] differs from a's [2, 3]")

    def test_scales_are_float32(self) -> None:
        with pytest.raises(
            DmlError, match=r"a_scale: data type FLOAT16 is not supported \(supported: FLOAT32\)"
        ):
            DEVICE.compile_operator(quantized_add(a_scale=t(F16, [1, 1])))

    @pytest.mark.parametrize("field", ["a", "a_scale", "b", "b_scale", "output_scale", "output"])
    def test_required_fields(self, field: str) -> None:
        refused(quantized_add(**{field: None}), f"{field}: tensor is required")


def matmul(m=2, k=3, n=4, batch=(), quant=(1, 1), **changes) -> ops.QuantizedLinearMatrixMultiply:
    batch = list(batch)
    q = t(F32, list(quant))
    fields = dict(
        a=t(U8, batch + [m, k]),
        a_scale=q,
        a_zero_point=None,
        b=t(I8, batch + [k, n]),
        b_scale=q,
        b_zero_point=None,
        output_scale=q,
        output_zero_point=None,
        output=t(U8, batch + [m, n]),
    )
    return ops.QuantizedLinearMatrixMultiply(**(fields | changes))


class TestQuantizedLinearMatrixMultiply:
    def test_valid_shapes(self) -> None:
        DEVICE.compile_operator(matmul())
        DEVICE.compile_operator(matmul(batch=(2, 3), quant=(1, 1, 1, 1)))
        DEVICE.compile_operator(matmul(batch=(5,), quant=(1,)))
        # per-row A and output, per-column B, in every rank from 1 to 4
        for rank in (2, 3, 4):
            ones = [1] * (rank - 2)
            DEVICE.compile_operator(
                matmul(
                    a_scale=t(F32, ones + [2, 1]),
                    a_zero_point=t(U8, ones + [2, 1]),
                    b_scale=t(F32, ones + [1, 4]),
                    b_zero_point=t(I8, ones + [1, 4]),
                    output_scale=t(F32, ones + [2, 1]),
                    output_zero_point=t(U8, ones + [2, 1]),
                    quant=[1] * rank,
                )
            )
        DEVICE.compile_operator(matmul(b_scale=t(F32, [4]), a_scale=t(F32, [1]), output_scale=t(F32, [1])))

    def test_at_2_1_everything_is_4d(self) -> None:
        quant = t(F32, [1, 1, 2, 1])
        Device("2_1").compile_operator(
            matmul(batch=(1, 1), a_scale=quant, b_scale=t(F32, [1, 1, 1, 1]), output_scale=quant)
        )

    def test_k_must_match(self) -> None:
        refused(matmul(b=t(I8, [5, 4])), "b: sizes [5, 4] do not continue a's K = 3 (b is [..., K, N])")

    def test_output_must_be_m_by_n(self) -> None:
        refused(matmul(output=t(U8, [4, 2])), "output: sizes [4, 2] must end in [M, N] = [2, 4]")

    def test_batches_equal_the_output(self) -> None:
        refused(
            matmul(batch=(3,), a=t(U8, [1, 2, 3])),
            "a: batch sizes [1] differ from output's [3] (broadcast batches through zero strides)",
        )
        DEVICE.compile_operator(matmul(batch=(3,), a=t(U8, [3, 2, 3], [0, 3, 1])))

    def test_data_dimension_counts(self) -> None:
        refused(matmul(b=t(I8, [1, 3, 4])), "b: dimension count 3 differs from a's 2")

    def test_quantization_dimension_counts(self) -> None:
        refused(matmul(b_scale=t(F32, [1])), "b_scale: dimension count 1 differs from a_scale's 2")
        refused(
            matmul(output_zero_point=t(U8, [1, 1, 1])),
            "output_zero_point: dimension count 3 differs from a_scale's 2",
        )

    @pytest.mark.parametrize(
        "field, sizes",
        [
            ("a_scale", [1, 4]),  # per-column on A
            ("a_scale", [2, 3]),  # varies along K
            ("output_scale", [1, 4]),  # per-column on the output
            ("b_scale", [2, 1]),  # per-row on B
            ("b_scale", [3, 4]),
            ("a_scale", [3, 1]),  # wrong M
        ],
    )
    def test_quantization_shapes(self, field: str, sizes: list[int]) -> None:
        kind = "per-column {1, 1, 1, N}" if field.startswith("b") else "per-row {1, 1, M, 1}"
        refused(
            matmul(**{field: t(F32, sizes)}),
            f"{field}: sizes {sizes} must be per-tensor {{1, 1, 1, 1}} or {kind} with M = 2, N = 4",
        )

    def test_zero_point_quantization_shapes(self) -> None:
        refused(
            matmul(a_zero_point=t(U8, [1, 4])),
            "a_zero_point: sizes [1, 4] must be per-tensor {1, 1, 1, 1} or per-row {1, 1, M, 1} "
            "with M = 2, N = 4",
        )
        refused(
            matmul(b_zero_point=t(I8, [2, 1])),
            "b_zero_point: sizes [2, 1] must be per-tensor {1, 1, 1, 1} or per-column {1, 1, 1, N} "
            "with M = 2, N = 4",
        )

    @pytest.mark.parametrize(
        "field, data_type, other",
        [
            ("a_zero_point", I8, "a's UINT8"),
            ("b_zero_point", U8, "b's INT8"),
            ("output_zero_point", I8, "output's UINT8"),
        ],
    )
    def test_zero_point_types(self, field: str, data_type: DataType, other: str) -> None:
        refused(
            matmul(**{field: t(data_type, [1, 1])}),
            f"{field}: data type {data_type.name} differs from {other}",
        )

    @pytest.mark.parametrize("field", ["a", "a_scale", "b", "b_scale", "output_scale", "output"])
    def test_required_fields(self, field: str) -> None:
        refused(matmul(**{field: None}), f"{field}: tensor is required")


def test_compile_refuses_non_descriptions() -> None:
    with pytest.raises(DmlError) as error:
        Device("3_1").compile_operator({"input": None})
    assert str(error.value) == "compile_operator needs a dmlq.ops description, not dict (device is 3_1)"


def test_validate_and_minimum_level_agree_with_compile() -> None:
    desc = quantize(input=t(F16, SIZES), scale=t(F16, SIZES, BROADCAST), zero_point=None)
    assert desc.minimum_feature_level().label == "6_2"
    desc.validate("6.2")
    with pytest.raises(DmlError):
        desc.validate("6_1")
    assert quantize(output=None).minimum_feature_level() is None
