package dev.edgeport.sample

import java.nio.ByteBuffer
import java.nio.ByteOrder
import kotlin.math.abs
import kotlin.math.max
import kotlin.math.roundToInt
import kotlin.math.sqrt

/** Numbers for the parity check, in plain Kotlin: decode the sample files, (de)quantize, compare. */
object Parity {
    fun floats(bytes: ByteArray): FloatArray {
        val buffer = ByteBuffer.wrap(bytes).order(ByteOrder.LITTLE_ENDIAN).asFloatBuffer()
        return FloatArray(buffer.remaining()).also { buffer.get(it) }
    }

    fun ints(bytes: ByteArray): IntArray {
        val buffer = ByteBuffer.wrap(bytes).order(ByteOrder.LITTLE_ENDIAN).asIntBuffer()
        return IntArray(buffer.remaining()).also { buffer.get(it) }
    }

    /** A sample file as doubles, whatever its dtype (float32 or int32). */
    fun values(bytes: ByteArray, dtype: String): DoubleArray = when (dtype) {
        "float32" -> floats(bytes).map { it.toDouble() }.toDoubleArray()
        "int32" -> ints(bytes).map { it.toDouble() }.toDoubleArray()
        else -> throw IllegalArgumentException("parity sample dtype $dtype is not handled by this sample")
    }

    fun quantize(values: FloatArray, q: Quantization): ByteArray =
        ByteArray(values.size) { i -> (values[i] / q.scale + q.zeroPoint).roundToInt().coerceIn(-128, 127).toByte() }

    fun dequantize(values: ByteArray, q: Quantization): DoubleArray =
        DoubleArray(values.size) { i -> (values[i] - q.zeroPoint) * q.scale }

    /** Same metrics as edgeport's report: max_rel_err = max|out - ref| / max|ref|. */
    data class Errors(val maxAbsErr: Double, val maxRelErr: Double, val cosine: Double)

    fun compare(output: DoubleArray, reference: DoubleArray): Errors {
        require(output.size == reference.size) { "output has ${output.size} values, reference ${reference.size}" }
        var maxAbs = 0.0; var maxRef = 0.0; var dot = 0.0; var nOut = 0.0; var nRef = 0.0
        for (i in reference.indices) {
            maxAbs = max(maxAbs, abs(output[i] - reference[i]))
            maxRef = max(maxRef, abs(reference[i]))
            dot += output[i] * reference[i]; nOut += output[i] * output[i]; nRef += reference[i] * reference[i]
        }
        val cosine = if (nOut > 0 && nRef > 0) dot / sqrt(nOut * nRef) else if (nOut == nRef) 1.0 else 0.0
        return Errors(maxAbs, if (maxRef > 0) maxAbs / maxRef else maxAbs, cosine)
    }
}
