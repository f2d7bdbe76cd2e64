package dev.edgeport.sample

import kotlinx.serialization.SerialName
import kotlinx.serialization.Serializable
import kotlinx.serialization.json.Json

/**
 * manifest.json as `samples/manifest.schema.json` (edgeport.manifest/1) defines it, and the parity sample
 * index it points to. Plain Kotlin, no Android dependency: only the schema's fields that this app reads;
 * unknown fields are ignored, as the schema asks of readers.
 */
@Serializable
data class EdgeportManifest(
    val schema: String,
    val model: String,
    val artifacts: List<Artifact>,
) {
    fun artifact(target: String, variant: String): Artifact =
        artifacts.firstOrNull { it.target == target && it.variant == variant }
            ?: throw IllegalArgumentException("no $target $variant artifact in manifest.json")

    companion object {
        const val SCHEMA = "edgeport.manifest/1"

        fun parse(text: String): EdgeportManifest {
            val manifest = json.decodeFromString<EdgeportManifest>(text)
            require(manifest.schema == SCHEMA) { "manifest is ${manifest.schema}; this app reads $SCHEMA" }
            return manifest
        }
    }
}

@Serializable
data class Artifact(
    val target: String,
    val variant: String,
    val path: String,
    val status: String,
    val inputs: List<RuntimeTensor> = emptyList(),
    val outputs: List<RuntimeTensor> = emptyList(),
    @SerialName("parity_sample") val paritySample: String? = null,
)

@Serializable
data class RuntimeTensor(
    val name: String,
    val shape: List<Int>,
    val dtype: String,
    val quantization: Quantization? = null,
)

/** real = (q - zeroPoint) * scale */
@Serializable
data class Quantization(val scale: Double, @SerialName("zero_point") val zeroPoint: Int)

@Serializable
data class ParitySampleIndex(
    val schema: String,
    val variant: String,
    val inputs: List<SampleTensor>,
    val outputs: List<SampleTensor>,
) {
    companion object {
        const val SCHEMA = "edgeport.parity_sample/1"

        fun parse(text: String): ParitySampleIndex {
            val index = json.decodeFromString<ParitySampleIndex>(text)
            require(index.schema == SCHEMA) { "parity sample is ${index.schema}; this app reads $SCHEMA" }
            return index
        }
    }
}

/** One raw little-endian file of the parity sample, relative to the index's folder. */
@Serializable
data class SampleTensor(val name: String, val file: String, val shape: List<Int>, val dtype: String)

private val json = Json { ignoreUnknownKeys = true }
