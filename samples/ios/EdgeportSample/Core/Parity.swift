import Foundation

/// Numbers for the parity check, as edgeport computes them (edgeport/validate/parity.py and
/// edgeport/runtimes/litert.py), the same as the Android sample's core (Parity.kt):
/// - (de)quantization in Float arithmetic, rounding half to even, clamped to int8;
/// - per output: max |out - ref| over the finite reference elements; max rel err = that / max |ref|;
///   cosine of the two vectors; NaN/Inf in the output where the reference is finite is never "close".
/// Foundation only (no UIKit/SwiftUI/LiteRT), so it builds with a plain Swift toolchain.
enum Parity {
    /// Below this max |reference| an output carries no signal: relative error and cosine are undefined.
    static let tiny = 1e-30

    struct Errors {
        let maxAbsErr: Double
        let maxRelErr: Double?   // nil where edgeport reports none (a reference without signal)
        let cosine: Double?
    }

    // The sample files and LiteRT's buffers are little-endian, as every iOS device is.
    static func floats(_ data: Data) -> [Float] {
        data.withUnsafeBytes { Array($0.bindMemory(to: Float.self)) }
    }

    static func quantize(_ values: [Float], _ q: Quantization) -> Data {
        let scale = Float(q.scale), zero = Float(q.zeroPoint)
        return Data(values.map { value -> UInt8 in
            let rounded = (value / scale + zero).rounded(.toNearestOrEven)
            return UInt8(bitPattern: Int8(max(-128, min(127, rounded))))
        })
    }

    static func dequantize(_ data: Data, _ q: Quantization) -> [Double] {
        let scale = Float(q.scale)
        return data.map { Double(Float(Int(Int8(bitPattern: $0)) - q.zeroPoint) * scale) }
    }

    /// A tensor's bytes as doubles: int8 with a quantization dequantized, float32 and int32 as they are.
    static func values(_ data: Data, _ dtype: String, _ q: Quantization?) throws -> [Double] {
        if let q, dtype == "int8" { return dequantize(data, q) }
        switch dtype {
        case "float32": return floats(data).map(Double.init)
        case "int32": return data.withUnsafeBytes { $0.bindMemory(to: Int32.self).map(Double.init) }
        default: throw SampleError("dtype \(dtype) is not handled by this sample")
        }
    }

    static func compare(_ output: [Double], _ reference: [Double]) throws -> Errors {
        guard output.count == reference.count else {
            throw SampleError("output has \(output.count) values, reference \(reference.count)")
        }
        var maxAbs = 0.0, maxRef = 0.0, dot = 0.0, nOut = 0.0, nRef = 0.0
        var elements = 0
        for (out, ref) in zip(output, reference) where ref.isFinite {
            if !out.isFinite { return Errors(maxAbsErr: .infinity, maxRelErr: .infinity, cosine: -1) }
            elements += 1
            maxAbs = max(maxAbs, abs(out - ref))
            maxRef = max(maxRef, abs(ref))
            dot += out * ref
            nOut += out * out
            nRef += ref * ref
        }
        if elements == 0 || maxRef < tiny { return Errors(maxAbsErr: maxAbs, maxRelErr: nil, cosine: nil) }
        let norms = nRef.squareRoot() * nOut.squareRoot()
        return Errors(maxAbsErr: maxAbs, maxRelErr: maxAbs / maxRef, cosine: norms > 0 ? dot / norms : 0)
    }
}
