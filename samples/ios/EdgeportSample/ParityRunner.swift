import Foundation
import TensorFlowLite

/// Runs the bundled edgeport artifact (folder `edgeport/` in the app bundle, filled by
/// `edgeport bundle DIR --ios samples/ios`) on its parity sample with LiteRT's Swift API and compares the
/// outputs with the PyTorch reference outputs edgeport wrote. The only file that touches LiteRT; the
/// manifest and the numbers are `Core/` (Foundation only).
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
            feed[tensor.name] = tensor.quantization.map { Parity.quantize(Parity.floats(bytes), $0) } ?? bytes
        }
        try runner.invoke(with: feed)  // warm-up; these are the outputs we check
        var results: [OutputResult] = []
        for (tensor, sample) in zip(outputs, index.outputs) {
            let produced = try Parity.values(runner.output(named: tensor.name).data, tensor.dtype, tensor.quantization)
            let reference = try Parity.values(Data(contentsOf: sampleDir.appendingPathComponent(sample.file)), sample.dtype, nil)
            let errors = try Parity.compare(produced, reference)
            results.append(OutputResult(name: tensor.name, shape: tensor.shape, firstValues: Array(produced.prefix(4)),
                                        maxAbsErr: errors.maxAbsErr, maxRelErr: errors.maxRelErr ?? errors.maxAbsErr))
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
