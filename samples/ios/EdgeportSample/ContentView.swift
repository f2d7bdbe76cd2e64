import SwiftUI

/// Shows the bundled artifact's outputs on the parity sample, the max error against PyTorch, and latency.
struct ContentView: View {
    @State private var result: ParityRunner.Result?
    @State private var message = "running…"

    var body: some View {
        NavigationStack {
            List {
                if let result {
                    Section("\(result.model)\n\(result.artifact)") {
                        ForEach(result.outputs) { output in
                            VStack(alignment: .leading) {
                                Text("\(output.name) \(output.shape.map(String.init).joined(separator: "×"))").bold()
                                Text(output.firstValues.map { String(format: "%.5g", $0) }.joined(separator: ", "))
                                Text(String(format: "max abs err %.3g · max rel err %.3g", output.maxAbsErr, output.maxRelErr))
                            }
                            .font(.system(.footnote, design: .monospaced))
                        }
                    }
                    Section("vs PyTorch") {
                        Text(String(format: "max rel err %.3g", result.maxRelErr))
                        Text(String(format: "median latency %.3f ms over %d runs", result.medianMs, ParityRunner.runs))
                    }
                }
                Section { Text(message) }
                Section { NavigationLink("LLM: model.litertlm (LiteRT-LM)") { LlmView() } }
            }
            .navigationTitle("edgeport · LiteRT")
            .toolbar {
                Button("CPU") { run(useGPU: false) }
                Button("GPU") { run(useGPU: true) }
            }
        }
        .task { run(useGPU: false) }
    }

    private func run(useGPU: Bool) {
        message = "running on \(useGPU ? "GPU (Metal)" : "CPU")…"
        Task.detached {
            do {
                let outcome = try ParityRunner().run(useGPU: useGPU)
                await MainActor.run { result = outcome; message = "ran on \(useGPU ? "GPU (Metal)" : "CPU")" }
            } catch {
                await MainActor.run { result = nil; message = "failed: \(error.localizedDescription)" }
            }
        }
    }
}
