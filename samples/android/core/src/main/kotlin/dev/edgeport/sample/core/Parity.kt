package dev.edgeport.sample.core

import kotlin.math.abs
import kotlin.math.max
import kotlin.math.min
import kotlin.math.sqrt

/**
 * Numbers for the parity check, as edgeport computes them (edgeport/validate/parity.py and
 * edgeport/runtimes/litert.py), so the app's verdict on the parity sample is edgeport's own:
 * - (de)quantization in float32 arithmetic, rounding half to even, clamped to int8;
 * - per output: max |out - ref| over the finite reference elements; max_rel_err = that / max |ref|;
 *   cosine of the two vectors; NaN/Inf in the output where the reference is finite is never "close".
 */
object Parity {
    /** Below this max |reference| an output carries no signal (denormals): relative error and cosine are undefined. */
    const val TINY = 1e-30

    fun quantize(values: FloatArray, q: Quantization): ByteArray {
        val scale = q.scale.toFloat()
        return ByteArray(values.size) { i -> Math.rint((values[i] / scale + q.zeroPoint).toDouble()).coerceIn(-128.0, 127.0).toInt().toByte() }
    }

    fun dequantize(values: ByteArray, q: Quantization): DoubleArray {
        val scale = q.scale.toFloat()
        return DoubleArray(values.size) { i -> ((values[i] - q.zeroPoint).toFloat() * scale).toDouble() }
    }

    /** maxRelErr and cosine are null where edgeport reports none (a reference without signal). */
    data class Errors(val maxAbsErr: Double, val maxRelErr: Double?, val cosine: Double?, val elements: Int)

    fun compare(output: DoubleArray, reference: DoubleArray): Errors {
        require(output.size == reference.size) { "output has ${output.size} values, reference ${reference.size}" }
        var maxAbs = 0.0; var maxRef = 0.0; var dot = 0.0; var nOut = 0.0; var nRef = 0.0; var elements = 0
        for (i in reference.indices) {
            val ref = reference[i]; val out = output[i]
            if (!ref.isFinite()) continue  // nothing to compare with (edgeport reports it separately)
            if (!out.isFinite()) return Errors(Double.POSITIVE_INFINITY, Double.POSITIVE_INFINITY, -1.0, reference.size)
            elements++
            maxAbs = max(maxAbs, abs(out - ref)); maxRef = max(maxRef, abs(ref))
            dot += out * ref; nOut += out * out; nRef += ref * ref
        }
        if (elements == 0 || maxRef < TINY) return Errors(maxAbs, null, null, elements)
        val norms = sqrt(nRef) * sqrt(nOut)
        return Errors(maxAbs, maxAbs / maxRef, if (norms > 0) dot / norms else 0.0, elements)
    }

    /** The worst of several outputs, as the report's row summary (max errors, min cosine). */
    fun worst(errors: List<Errors>): Errors = errors.reduce { a, b ->
        Errors(max(a.maxAbsErr, b.maxAbsErr), maxOf(a.maxRelErr, b.maxRelErr), minOf(a.cosine, b.cosine), a.elements + b.elements)
    }

    private fun maxOf(a: Double?, b: Double?): Double? = if (a == null) b else if (b == null) a else max(a, b)
    private fun minOf(a: Double?, b: Double?): Double? = if (a == null) b else if (b == null) a else min(a, b)
}
