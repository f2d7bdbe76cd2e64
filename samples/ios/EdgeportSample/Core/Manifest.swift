import Foundation

/// manifest.json as `samples/manifest.schema.json` (edgeport.manifest/1) defines it, and the parity sample
/// index it points to. Foundation only; only the schema's fields this app reads (Codable ignores the rest,
/// as the schema asks of readers). No UIKit/SwiftUI/LiteRT here, so it builds with a plain Swift toolchain.
struct EdgeportManifest: Codable {
    static let schemaVersion = "edgeport.manifest/1"

    let schema: String
    let model: String
    let artifacts: [Artifact]

    static func parse(_ data: Data) throws -> EdgeportManifest {
        let manifest = try JSONDecoder().decode(EdgeportManifest.self, from: data)
        guard manifest.schema == schemaVersion else {
            throw SampleError("manifest is \(manifest.schema); this app reads \(schemaVersion)")
        }
        return manifest
    }

    func artifact(target: String, variant: String) throws -> Artifact {
        guard let found = artifacts.first(where: { $0.target == target && $0.variant == variant }) else {
            throw SampleError("no \(target) \(variant) artifact in manifest.json")
        }
        return found
    }
}

struct Artifact: Codable {
    let target: String
    let variant: String
    let path: String
    let status: String
    let inputs: [RuntimeTensor]?
    let outputs: [RuntimeTensor]?
    let paritySample: String?

    enum CodingKeys: String, CodingKey {
        case target, variant, path, status, inputs, outputs
        case paritySample = "parity_sample"
    }

    init(from decoder: Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        target = try c.decode(String.self, forKey: .target)
        variant = try c.decode(String.self, forKey: .variant)
        path = try c.decode(String.self, forKey: .path)
        status = try c.decode(String.self, forKey: .status)
        inputs = try c.decodeIfPresent([RuntimeTensor].self, forKey: .inputs)    // absent: the artifact did not load
        outputs = try c.decodeIfPresent([RuntimeTensor].self, forKey: .outputs)
        // edgeport always writes the key (null: no sample this artifact can take), so a missing key is an
        // error naming it rather than a silent "no parity sample" (e.g. after a rename on the Python side)
        paritySample = try c.decode(String?.self, forKey: .paritySample)
    }
}

struct RuntimeTensor: Codable {
    let name: String
    let shape: [Int]
    let dtype: String
    let quantization: Quantization?
}

/// real = (q - zeroPoint) * scale
struct Quantization: Codable, Equatable {
    let scale: Double
    let zeroPoint: Int

    enum CodingKeys: String, CodingKey {
        case scale
        case zeroPoint = "zero_point"
    }
}

struct ParitySampleIndex: Codable {
    static let schemaVersion = "edgeport.parity_sample/1"

    let schema: String
    let variant: String
    let inputs: [SampleTensor]
    let outputs: [SampleTensor]

    static func parse(_ data: Data) throws -> ParitySampleIndex {
        let index = try JSONDecoder().decode(ParitySampleIndex.self, from: data)
        guard index.schema == schemaVersion else {
            throw SampleError("parity sample is \(index.schema); this app reads \(schemaVersion)")
        }
        return index
    }
}

/// One raw little-endian file of the parity sample, relative to the index's folder.
struct SampleTensor: Codable {
    let name: String
    let file: String
    let shape: [Int]
    let dtype: String
}

struct SampleError: LocalizedError {
    let message: String
    init(_ message: String) { self.message = message }
    var errorDescription: String? { message }
}
