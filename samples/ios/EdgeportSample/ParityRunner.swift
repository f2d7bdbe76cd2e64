import Foundation
import TensorFlowLite

/// Runs the bundled edgeport artifact (folder `edgeport/` in the app bundle, filled by
/// `edgeport bundle DIR --ios samples/ios`) on its parity sample with LiteRT's Swift API and compares the
/// outputs with the PyTorch reference outputs edgeport wrote.
struct ParityRunner {
    static let target = "litert"
    static let variant = "fp32"  // change to run another bundled variant (fp16, int8, ...)
    static let runs = 50

    struct OutputResult: Identifiable {
        let name: String
        let shape: [Int]
        let firstValues: [Double]
        let maxAbsErr: Double
        let maxRelErr: Double
        var id: String { name }
    }

    struct Result {
        let model: String
        let artifact: String
        let outputs: [OutputResult]
        let medianMs: Double
        var maxRelErr: Double { outputs.map(\.maxRelErr).max() ?? 0 }
    }

    let root: URL

    init(root: URL? = Bundle.main.url(forResource: "edgeport", withExtension: nil)) throws {
        guard let root else { throw SampleError("no edgeport/ folder in the app: run `edgeport bundle DIR --ios samples/ios`") }
        self.root = root
    }

    func run(useGPU: Bool) throws -> Result {
        let manifest = try EdgeportManifest.parse(Data(contentsOf: root.appendingPathComponent("manifest.json")))
        let artifact = try manifest.artifact(target: Self.target, variant: Self.variant)
        guard let indexPath = artifact.paritySample, let inputs = artifact.inputs, let outputs = artifact.outputs else {
            throw SampleError("the \(Self.variant) artifact has no parity sample it can take")
        }
        let indexURL = root.appendingPathComponent(indexPath)
        let index = try ParitySampleIndex.parse(Data(contentsOf: indexURL))
        let sampleDir = indexURL.deletingLastPathComponent()

        var options = Interpreter.Options()
        options.threadCount = 1
        let delegates: [Delegate] = useGPU ? [MetalDelegate()] : []
        let interpreter = try Interpreter(modelPath: root.appendingPathComponent(artifact.path).path,
                                          options: options, delegates: delegates)
        guard let key = interpreter.signatureKeys.first else { throw SampleError("the model has no signature") }
        let runner = try interpreter.signatureRunner(with: key)

        // Inputs by the .tflite signature names the manifest lists, in the model's order.
        var feed: [String: Data] = [:]
        for (tensor, sample) in zip(inputs, index.inputs) {
            let bytes = try Data(contentsOf: sampleDir.appendingPathComponent(sample.file))
            feed[tensor.name] = tensor.quantization.map { quantize(floats(bytes), $0) } ?? bytes
        }
        try runner.invoke(with: feed)  // warm-up; these are the outputs we check
        var results: [OutputResult] = []
        for (tensor, sample) in zip(outputs, index.outputs) {
            let produced = try values(runner.output(named: tensor.name).data, tensor.dtype, tensor.quantization)
            let reference = try values(Data(contentsOf: sampleDir.appendingPathComponent(sample.file)), sample.dtype, nil)
            let (maxAbs, maxRel) = errors(produced, reference)
            results.append(OutputResult(name: tensor.name, shape: tensor.shape, firstValues: Array(produced.prefix(4)),
                                        maxAbsErr: maxAbs, maxRelErr: maxRel))
        }
        var millis: [Double] = []
        for _ in 0..<Self.runs {
            let start = DispatchTime.now().uptimeNanoseconds
            try runner.invoke(with: feed)
            millis.append(Double(DispatchTime.now().uptimeNanoseconds - start) / 1e6)
        }
        return Result(model: manifest.model, artifact: artifact.path, outputs: results, medianMs: millis.sorted()[millis.count / 2])
    }
}

// The sample files and LiteRT's buffers are little-endian, as every iOS device is.
private func floats(_ data: Data) -> [Float] {
    data.withUnsafeBytes { Array($0.bindMemory(to: Float.self)) }
}

private func quantize(_ values: [Float], _ q: Quantization) -> Data {
    Data(values.map { UInt8(bitPattern: Int8(max(-128, min(127, (Double($0) / q.scale).rounded() + Double(q.zeroPoint))))) })
}

private func values(_ data: Data, _ dtype: String, _ q: Quantization?) -> [Double] {
    if let q, dtype == "int8" {
        return data.map { (Double(Int8(bitPattern: $0)) - Double(q.zeroPoint)) * q.scale }
    }
    switch dtype {
    case "int32": return data.withUnsafeBytes { $0.bindMemory(to: Int32.self).map(Double.init) }
    default: return floats(data).map(Double.init)
    }
}

/// Same metrics as edgeport's report: max_rel_err = max|out - ref| / max|ref|.
private func errors(_ output: [Double], _ reference: [Double]) -> (Double, Double) {
    let maxAbs = zip(output, reference).map { abs($0 - $1) }.max() ?? 0
    let maxRef = reference.map(abs).max() ?? 0
    return (maxAbs, maxRef > 0 ? maxAbs / maxRef : maxAbs)
}
