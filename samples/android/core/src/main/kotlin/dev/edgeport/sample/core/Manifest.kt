package dev.edgeport.sample.core

import kotlinx.serialization.SerialName
import kotlinx.serialization.Serializable
import kotlinx.serialization.SerializationException
import kotlinx.serialization.json.Json

/**
 * manifest.json as `samples/manifest.schema.json` (edgeport.manifest/1) defines it, plus the `generation`
 * section edgeport writes for a text-generation model. Plain Kotlin (kotlinx.serialization), no Android
 * dependency: only the fields this app reads; unknown fields are ignored, as the schema asks of readers.
 *
 * A field the app needs has no default, so a manifest without it (renamed or dropped on the Python side)
 * fails to parse with an error naming the field, instead of reading as empty.
 */
@Serializable
data class EdgeportManifest(
    val schema: String,
    val model: String,
    val artifacts: List<Artifact>,
    val generation: Generation? = null,   // present only for `--task text-generation`
) {
    fun artifact(target: String, variant: String): Artifact =
        artifacts.firstOrNull { it.target == target && it.variant == variant }
            ?: throw IllegalArgumentException("no $target $variant artifact in manifest.json")

    companion object {
        const val SCHEMA = "edgeport.manifest/1"

        fun parse(text: String): EdgeportManifest {
            val manifest = decode<EdgeportManifest>(text, "manifest.json")
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
    val inputs: List<RuntimeTensor> = emptyList(),    // absent when the artifact did not load
    val outputs: List<RuntimeTensor> = emptyList(),
    @SerialName("parity_sample") val paritySample: String?,  // null: no sample this artifact can take
)

/** A tensor as the artifact's runtime sees it; `role` (generation signatures): an output's names the input it
 * feeds next, an input's the role it is fed as (when not its name). */
@Serializable
data class RuntimeTensor(
    val name: String,
    val shape: List<Int>,
    val dtype: String,
    val quantization: Quantization? = null,
    val role: String? = null,
)

/** real = (q - zeroPoint) * scale */
@Serializable
data class Quantization(val scale: Double, @SerialName("zero_point") val zeroPoint: Int)

/** The parity sample's index.json: one input set and PyTorch's outputs on it, one raw file per tensor. */
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
            val index = decode<ParitySampleIndex>(text, "parity sample index")
            require(index.schema == SCHEMA) { "parity sample is ${index.schema}; this app reads $SCHEMA" }
            return index
        }
    }
}

/** One raw little-endian file of the parity sample, relative to the index's folder. */
@Serializable
data class SampleTensor(val name: String, val file: String, val shape: List<Int>, val dtype: String)

/**
 * manifest.json's `generation` section: how to drive a text-generation artifact. Each artifact has
 * signatures `prefill_<L>` (one per prefill length) and `decode`; each input plays a role (`input_ids`,
 * `position_ids`, `attention_mask…`, `cache_k_<l>`, `cache_v_<l>`, `cache_len_<l>`): its `role` when its
 * name differs (export_hf's `tokens`, `input_pos`, `mask`, `kv_cache_k_<i>`), else its name; each output's
 * `role` names the input it feeds on the next call. A prefill without a `logits` output is export_hf's
 * (GenerationLoop then runs the prompt's last token through decode).
 */
@Serializable
data class Generation(
    val task: String,
    @SerialName("vocab_size") val vocabSize: Int,
    @SerialName("cache_len") val cacheLen: Int,
    @SerialName("prefill_lens") val prefillLens: List<Int>,
    @SerialName("bos_token_id") val bosTokenId: Int?,
    @SerialName("eos_token_ids") val eosTokenIds: List<Int>,
    val cache: List<CacheTensor>,
    val artifacts: List<GenerationArtifact>,
    @SerialName("parity_sample") val paritySample: GenerationSample,
    val tokenizer: String? = null,
) {
    fun artifact(target: String, variant: String): GenerationArtifact =
        artifacts.firstOrNull { it.target == target && it.variant == variant }
            ?: throw IllegalArgumentException("no $target $variant text-generation artifact in manifest.json")

    /** The target's app-ready bundle (`--litertlm`), when the conversion wrote one. */
    fun bundle(target: String): GenerationArtifact? = artifacts.firstOrNull { it.target == target && it.isBundle }

    /** One line per artifact of [target] whose quality was judged (what the LLM screen shows). */
    fun qualityLines(target: String): List<String> =
        artifacts.filter { it.target == target && it.quality != null }.map { "${it.variant}: ${it.quality!!.describe()}" }
}

/** One cache tensor of the layout: `kind` is key, value or length (the layer's next write slot). */
@Serializable
data class CacheTensor(val name: String, val layer: Int, val kind: String, val shape: List<Int>, val dtype: String)

@Serializable
data class GenerationArtifact(
    val target: String,
    val variant: String,
    val path: String,
    val status: String,
    val signatures: Map<String, SignatureIO>?,   // null when the artifact did not load (and for a bundle)
    @SerialName("text_sample") val textSample: TextSample? = null,  // a bundle an engine drives by text
    val quality: Quality? = null,   // judged on real text vs PyTorch fp32 (null: not measured)
) {
    /** A `.litertlm` bundle: LiteRT-LM runs it from text (BundleCheck), not signature by signature. */
    val isBundle: Boolean get() = path.endsWith(".litertlm")
}

/**
 * What an app driving a bundle by text checks itself against: each judged prompt as the text the engine
 * was fed, and PyTorch's greedy tokens as the pieces the engine streams (one token's text each, cut at eos).
 */
/**
 * An artifact's quality as edgeport judged it: teacher-forced over real text through its own runtime against
 * PyTorch fp32 (llama.cpp's --kl-divergence numbers: mean and p99 KL divergence, same top-1 token, perplexity
 * of both), and its task checks' pass counts beside PyTorch's.
 */
@Serializable
data class Quality(
    val text: String? = null,
    val tokens: Int? = null,
    @SerialName("kld_mean") val kldMean: Double? = null,
    @SerialName("kld_p99") val kldP99: Double? = null,
    @SerialName("top1_agreement") val top1Agreement: Double? = null,
    @SerialName("ppl_reference") val pplReference: Double? = null,
    val ppl: Double? = null,
    @SerialName("delta_ppl") val deltaPpl: Double? = null,
    val checks: ChecksSummary? = null,
) {
    fun describe(): String {
        val parts = mutableListOf<String>()
        if (kldMean != null && top1Agreement != null) {
            parts += "mean KLD %.4g, p99 %.4g, same top-1 %.1f%%".format(kldMean, kldP99 ?: Double.NaN, 100 * top1Agreement)
        }
        if (ppl != null && pplReference != null) parts += "ppl %.3f (PyTorch %.3f)".format(ppl, pplReference)
        checks?.let { parts += "checks ${it.passed}/${it.total} (PyTorch ${it.referencePassed}/${it.total})" }
        return parts.joinToString("; ")
    }
}

@Serializable
data class ChecksSummary(val total: Int, val passed: Int, @SerialName("reference_passed") val referencePassed: Int)

@Serializable
data class TextSample(@SerialName("new_tokens") val newTokens: Int, val prompts: List<TextPrompt>)

@Serializable
data class TextPrompt(val text: String, val pieces: List<String>)

@Serializable
data class SignatureIO(val inputs: List<RuntimeTensor>, val outputs: List<RuntimeTensor>)

/** The judged prompts and the reference's greedy tokens (eos not applied), so an app can check itself. */
@Serializable
data class GenerationSample(
    @SerialName("new_tokens") val newTokens: Int,
    val prompts: List<SamplePrompt>,
)

@Serializable
data class SamplePrompt(@SerialName("prompt_ids") val promptIds: List<Int>, val tokens: List<Int>)

private val json = Json { ignoreUnknownKeys = true }

/** One-line errors that name what is wrong (kotlinx.serialization's own messages name field and path). */
private inline fun <reified T> decode(text: String, what: String): T = try {
    json.decodeFromString<T>(text)
} catch (e: SerializationException) {
    throw IllegalArgumentException("$what: ${e.message?.lineSequence()?.first()}", e)
}
