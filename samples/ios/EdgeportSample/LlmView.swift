import SwiftUI

/// The LLM screen: loads the bundled `model.litertlm` (edgeport's `--litertlm`, path from manifest.json) with
/// LiteRT-LM, checks it against PyTorch on the manifest's `text_sample`, shows the quality edgeport measured for
/// the target's artifacts (the manifest's `quality`: KL divergence, same top-1, perplexity, task checks), then
/// streams a continuation of any prompt typed in (fed as-is, no chat template).
struct LlmView: View {
    @State private var engine: LiteRtLmEngine?
    @State private var check = "loading model.litertlm…"
    @State private var prompt = ""
    @State private var output = ""

    var body: some View {
        List {
            Section("vs PyTorch (text_sample)") { Text(check).font(.system(.footnote, design: .monospaced)) }
            Section("generate") {
                TextField("prompt", text: $prompt)
                Button("Generate") { generate() }.disabled(engine == nil)
                Text(output)
            }
        }
        .navigationTitle("LiteRT-LM")
        .task { await load() }
    }

    private func load() async {
        do {
            let folder = Bundle.main.url(forResource: "edgeport", withExtension: nil)!
            let manifest = try GenerationManifest.parse(Data(contentsOf: folder.appendingPathComponent("manifest.json")))
            let bundle = try manifest.bundle(target: "litert")
            let loaded = try await LiteRtLmEngine(modelPath: folder.appendingPathComponent(bundle.path).path, useGPU: false)
            let result = try await BundleCheck.run(manifest, bundle, engine: loaded)
            engine = loaded
            let quality = manifest.qualityLines(target: "litert")
            check = "\(result.model)\n\(bundle.path) on CPU\ntokens matching PyTorch: \(result.matched) of \(result.total)"
                + (result.exact ? "" : " (NOT exact)")
                + (quality.isEmpty ? "" : "\n\nquality on real text vs PyTorch fp32 (edgeport's judge):\n" + quality.joined(separator: "\n"))
        } catch {
            check = "failed: \(error.localizedDescription)"
        }
    }

    private func generate() {
        guard let engine else { return }
        let text = prompt
        output = text
        Task {
            do {
                try await engine.generate(text, maxTokens: 64) { piece in Task { @MainActor in output += piece } }
            } catch {
                output += "\nfailed: \(error.localizedDescription)"
            }
        }
    }
}
