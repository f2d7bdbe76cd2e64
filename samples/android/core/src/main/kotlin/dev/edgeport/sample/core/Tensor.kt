package dev.edgeport.sample.core

import java.nio.ByteBuffer
import java.nio.ByteOrder

/**
 * A tensor as it crosses the runtime boundary: its dtype as manifest.json spells it, its shape, and its
 * elements as raw little-endian bytes in C order. That is exactly a parity sample file, so a sample file
 * is a Tensor as it is, and a runtime adapter converts to and from its own buffers in one place.
 */
class Tensor(val dtype: String, val shape: List<Int>, val data: ByteArray) {
    val count: Int get() = shape.fold(1) { n, d -> n * d }

    init {
        require(data.size == count * itemSize(dtype)) {
            "a $dtype tensor of shape $shape holds ${count * itemSize(dtype)} bytes, not ${data.size}"
        }
    }

    private fun buffer(): ByteBuffer = ByteBuffer.wrap(data).order(ByteOrder.LITTLE_ENDIAN)

    fun floats(): FloatArray = expect("float32").let { FloatArray(count).also { buffer().asFloatBuffer().get(it) } }
    fun ints(): IntArray = expect("int32").let { IntArray(count).also { buffer().asIntBuffer().get(it) } }
    fun longs(): LongArray = expect("int64").let { LongArray(count).also { buffer().asLongBuffer().get(it) } }
    fun bytes(): ByteArray = data.copyOf()
    fun booleans(): BooleanArray = expect("bool").let { BooleanArray(count) { data[it] != 0.toByte() } }

    /** Every element as a double; an integer tensor with a quantization is dequantized as edgeport does it. */
    fun values(quantization: Quantization? = null): DoubleArray = when {
        quantization != null && dtype == "int8" -> Parity.dequantize(data, quantization)
        dtype == "float32" -> floats().let { f -> DoubleArray(count) { f[it].toDouble() } }
        dtype == "int32" -> ints().let { v -> DoubleArray(count) { v[it].toDouble() } }
        dtype == "int64" -> longs().let { v -> DoubleArray(count) { v[it].toDouble() } }
        dtype == "int8" -> DoubleArray(count) { data[it].toDouble() }
        dtype == "bool" -> DoubleArray(count) { if (data[it] != 0.toByte()) 1.0 else 0.0 }
        else -> throw IllegalArgumentException("dtype $dtype is not handled by this sample")
    }

    fun sameAs(other: Tensor): Boolean = dtype == other.dtype && shape == other.shape && data.contentEquals(other.data)

    override fun toString(): String = "Tensor($dtype $shape)"

    private fun expect(wanted: String) = require(dtype == wanted) { "a $dtype tensor read as $wanted" }

    companion object {
        fun itemSize(dtype: String): Int = when (dtype) {
            "float32", "int32" -> 4
            "int64", "float64" -> 8
            "int8", "uint8", "bool" -> 1
            "float16", "bfloat16", "int16" -> 2
            else -> throw IllegalArgumentException("dtype $dtype is not handled by this sample")
        }

        private fun allocate(count: Int, size: Int) = ByteBuffer.allocate(count * size).order(ByteOrder.LITTLE_ENDIAN)

        fun ofFloats(shape: List<Int>, values: FloatArray) =
            Tensor("float32", shape, allocate(values.size, 4).apply { asFloatBuffer().put(values) }.array())

        /** Integers in the integer dtype the runtime declares (ids and positions: int32 on LiteRT, int64 elsewhere). */
        fun ofInts(dtype: String, shape: List<Int>, values: IntArray): Tensor = when (dtype) {
            "int32" -> Tensor(dtype, shape, allocate(values.size, 4).apply { asIntBuffer().put(values) }.array())
            "int64" -> Tensor(dtype, shape, allocate(values.size, 8).apply {
                asLongBuffer().put(LongArray(values.size) { values[it].toLong() })
            }.array())
            else -> throw IllegalArgumentException("integer input of dtype $dtype is not handled by this sample")
        }

        fun ofInt8(shape: List<Int>, values: ByteArray) = Tensor("int8", shape, values.copyOf())

        fun ofBooleans(shape: List<Int>, values: BooleanArray) =
            Tensor("bool", shape, ByteArray(values.size) { if (values[it]) 1 else 0 })
    }
}

