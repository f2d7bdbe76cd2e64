import Foundation

/// manifest.json's `generation.artifacts` as far as the LLM screen reads them: a `.litertlm` bundle (edgeport's
/// `--litertlm`) and its `text_sample` — the judged prompts as the text the engine was fed, and PyTorch's
/// greedy tokens as the pieces the engine streams (one token's text each, cut at eos). Foundation only.
struct GenerationManifest: Codable {
    let model: String
    let generation: Generation

    struct Generation: Codable {
        let artifacts: [GenerationArtifact]
    }

    static func parse(_ data: Data) throws -> GenerationManifest {
        do {
            return try JSONDecoder().decode(GenerationManifest.self, from: data)
        } catch {
            throw SampleError("manifest.json has no text-generation section this screen reads: \(error)")
        }
    }

    /// The target's app-ready bundle, when the conversion wrote one.
    func bundle(target: String) throws -> GenerationArtifact {
        guard let found = generation.artifacts.first(where: { $0.target == target && $0.path.hasSuffix(".litertlm") }) else {
            throw SampleError("no .litertlm in manifest.json: convert with --litertlm")
        }
        return found
    }

    /// One line per artifact of `target` whose quality edgeport judged (the LLM screen shows them).
    func qualityLines(target: String) -> [String] {
        generation.artifacts.filter { $0.target == target && $0.quality != nil }.map { "\($0.variant): \($0.quality!.describe())" }
    }
}

struct GenerationArtifact: Codable {
    let target: String
    let variant: String
    let path: String
    let status: String
    let textSample: TextSample?
    let quality: Quality?

    enum CodingKeys: String, CodingKey {
        case target, variant, path, status, quality
        case textSample = "text_sample"
    }
}

/// An artifact's quality as edgeport judged it: teacher-forced over real text through its own runtime against
/// PyTorch fp32 (llama.cpp's --kl-divergence numbers), and its task checks' pass counts beside PyTorch's.
struct Quality: Codable {
    let kldMean: Double?
    let kldP99: Double?
    let top1Agreement: Double?
    let pplReference: Double?
    let ppl: Double?
    let checks: ChecksSummary?

    enum CodingKeys: String, CodingKey {
        case kldMean = "kld_mean", kldP99 = "kld_p99", top1Agreement = "top1_agreement"
        case pplReference = "ppl_reference", ppl, checks
    }

    func describe() -> String {
        var parts: [String] = []
        if let kldMean, let top1Agreement {
            parts.append(String(format: "mean KLD %.4g, p99 %.4g, same top-1 %.1f%%", kldMean, kldP99 ?? .nan, 100 * top1Agreement))
        }
        if let ppl, let pplReference { parts.append(String(format: "ppl %.3f (PyTorch %.3f)", ppl, pplReference)) }
        if let checks { parts.append("checks \(checks.passed)/\(checks.total) (PyTorch \(checks.referencePassed)/\(checks.total))") }
        return parts.joined(separator: "; ")
    }
}

struct ChecksSummary: Codable {
    let total: Int
    let passed: Int
    let referencePassed: Int

    enum CodingKeys: String, CodingKey {
        case total, passed
        case referencePassed = "reference_passed"
    }
}

struct TextSample: Codable {
    let newTokens: Int
    let prompts: [TextPrompt]

    enum CodingKeys: String, CodingKey {
        case newTokens = "new_tokens"
        case prompts
    }
}

struct TextPrompt: Codable {
    let text: String
    let pieces: [String]
}

/// An LLM runtime that takes text and streams each generated token's text (LiteRT-LM here): greedy, at most
/// `maxTokens` tokens, the prompt fed as-is (no chat template), stopping at eos.
protocol TextEngine {
    func generate(_ prompt: String, maxTokens: Int, onPiece: @escaping (String) -> Void) async throws
}

/// The bundle on the manifest's `text_sample`, token by token (the Android core's BundleCheck.kt, same rule):
/// a prompt keeps the expected pieces whose concatenation the engine's output starts with, so chunks of
/// several tokens still count per token and a divergence is located at its first token.
enum BundleCheck {
    struct Prompt {
        let text: String
        let expected: [String]
        let got: String

        var matched: Int {
            var prefix = ""
            for (i, piece) in expected.enumerated() {
                prefix += piece
                if !got.hasPrefix(prefix) { return i }
            }
            return expected.count
        }
        /// Text past every expected token: the engine went on where PyTorch stopped at eos.
        var extra: Bool { matched == expected.count && got.count > expected.joined().count }
    }

    struct Result {
        let model: String
        let artifact: GenerationArtifact
        let prompts: [Prompt]
        var matched: Int { prompts.reduce(0) { $0 + $1.matched } }
        var total: Int { prompts.reduce(0) { $0 + $1.expected.count } }
        var exact: Bool { matched == total && !prompts.contains(where: { $0.extra }) }
    }

    static func run(_ manifest: GenerationManifest, _ artifact: GenerationArtifact, engine: TextEngine) async throws -> Result {
        guard let sample = artifact.textSample else {
            throw SampleError("\(artifact.path) has no text_sample in manifest.json (was it judged?)")
        }
        var prompts: [Prompt] = []
        for p in sample.prompts {
            let collector = PieceCollector()
            try await engine.generate(p.text, maxTokens: sample.newTokens) { collector.append($0) }
            prompts.append(Prompt(text: p.text, expected: p.pieces, got: collector.text))
        }
        return Result(model: manifest.model, artifact: artifact, prompts: prompts)
    }
}

/// Streamed pieces gathered from the engine's callback (which may run on another thread).
final class PieceCollector: @unchecked Sendable {
    private let lock = NSLock()
    private var pieces: [String] = []

    func append(_ piece: String) { lock.lock(); pieces.append(piece); lock.unlock() }
    var text: String { lock.lock(); defer { lock.unlock() }; return pieces.joined() }
}
