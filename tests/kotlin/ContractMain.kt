package dev.edgeport.sample.contract

import dev.edgeport.sample.core.BundleFiles
import dev.edgeport.sample.core.EdgeportManifest
import dev.edgeport.sample.core.GenerationCheck
import dev.edgeport.sample.core.GenerationLoop
import dev.edgeport.sample.core.ModelRunner
import dev.edgeport.sample.core.ParityCheck
import dev.edgeport.sample.core.ParitySample
import dev.edgeport.sample.core.RuntimeTensor
import dev.edgeport.sample.core.SampleTensor
import dev.edgeport.sample.core.Tensor
import kotlinx.serialization.Serializable
import kotlinx.serialization.json.Json
import kotlinx.serialization.json.JsonElement
import kotlinx.serialization.json.JsonNull
import kotlinx.serialization.json.JsonPrimitive
import kotlinx.serialization.json.buildJsonArray
import kotlinx.serialization.json.buildJsonObject
import kotlinx.serialization.json.put
import kotlinx.serialization.json.putJsonArray
import java.io.File

/**
 * Test-only driver of the Android sample's core (tests/test_android_contract.py): runs the app's own code
 * paths on real edgeport output, with a [ReplayRunner] standing in for LiteRT. The runtime's side was
 * recorded in Python (ai-edge-litert on the same .tflite): what it was fed and what it answered, per call.
 * The replay insists that the core feeds exactly those bytes, then answers with the recorded outputs.
 *
 *     java -cp core.jar:… dev.edgeport.sample.contract.ContractMainKt JOBS.json
 *
 * JOBS.json lists jobs `{"name", "mode": "forward"|"generate", "dir", "replay"}`; stdout is one JSON object
 * `{name: {"ok": true, …} | {"ok": false, "error": "…"}}`, so one JVM serves the whole test module.
 */
@Serializable
data class Job(val name: String, val mode: String, val dir: String, val replay: String? = null, val stop: Int? = null)

@Serializable
data class Call(val signature: String?, val inputs: List<SampleTensor>, val outputs: List<SampleTensor>)

@Serializable
data class Recording(val calls: List<Call>)

@Serializable
data class ExtraPrompt(val prompt_ids: List<Int>, val tokens: List<Int>)

private val json = Json { ignoreUnknownKeys = true }

fun main(args: Array<String>) {
    val jobs = json.decodeFromString<List<Job>>(File(args.single()).readText())
    val results = buildJsonObject {
        for (job in jobs) {
            put(job.name, try {
                val body = when (job.mode) {
                    "forward" -> forward(job)
                    "generate" -> generate(job)
                    else -> error("unknown mode ${job.mode}")
                }
                buildJsonObject { put("ok", true); body.forEach { (k, v) -> put(k, v) } }
            } catch (e: Exception) {
                buildJsonObject { put("ok", false); put("error", "${e::class.simpleName}: ${e.message}") }
            })
        }
    }
    println(results)
}

private fun files(dir: String) = BundleFiles { path -> File(dir, path).readBytes() }

private fun manifestOf(dir: String) = EdgeportManifest.parse(File(dir, "manifest.json").readText())

/** Every parity sample read; every artifact with a recording checked on its sample, numbers as the report's. */
private fun forward(job: Job): Map<String, JsonElement> {
    val manifest = manifestOf(job.dir)
    val files = files(job.dir)
    val samples = manifest.artifacts.mapNotNull { it.paritySample }.distinct().associateWith { ParitySample.read(files, it) }
    val artifacts = buildJsonArray {
        for (artifact in manifest.artifacts) {
            val recording = File(job.replay!!, "${artifact.target}-${artifact.variant}")
            add(buildJsonObject {
                put("target", artifact.target); put("variant", artifact.variant); put("path", artifact.path)
                put("status", artifact.status); put("parity_sample", artifact.paritySample)
                putJsonArray("inputs") { artifact.inputs.forEach { add(tensorJson(it)) } }
                putJsonArray("outputs") { artifact.outputs.forEach { add(tensorJson(it)) } }
                if (recording.isDirectory) {
                    val replay = ReplayRunner(recording)
                    val result = ParityCheck.run(manifest, artifact, files, replay)
                    replay.finish()
                    putJsonArray("parity") {
                        for (o in result.outputs) add(buildJsonObject {
                            put("name", o.tensor.name); put("max_abs_err", o.errors.maxAbsErr)
                            put("max_rel_err", o.errors.maxRelErr); put("cosine", o.errors.cosine)
                        })
                    }
                    System.err.println(ParityCheck.describe(result, "replayed LiteRT", null, 0).prependIndent("# "))
                }
            })
        }
    }
    val read = buildJsonObject {
        for ((path, s) in samples) put(path, buildJsonObject {
            put("inputs", s.inputs.size); put("outputs", s.outputs.size)
            put("bytes", s.inputs.sumOf { it.data.size } + s.outputs.sumOf { it.data.size })
        })
    }
    return mapOf("model" to JsonPrimitive(manifest.model), "artifacts" to artifacts, "samples" to read)
}

/** The parity sample's prompts (and any extra ones recorded) through the core's greedy loop on the replay. */
private fun generate(job: Job): Map<String, JsonElement> {
    val manifest = manifestOf(job.dir)
    val generation = manifest.generation ?: error("manifest.json has no generation section")
    val artifact = generation.artifact("litert", "fp32")
    val replayDir = File(job.replay!!)
    val out = mutableMapOf<String, JsonElement>()
    if (job.stop == null) {
        val check = ReplayRunner(File(replayDir, "sample")).use { GenerationCheck.run(manifest, artifact, it).also { _ -> it.finish() } }
        out["tokens"] = buildJsonArray { check.prompts.forEach { p -> add(ints(p.got)) } }
        out["matched"] = JsonPrimitive(check.matched)
        out["total"] = JsonPrimitive(check.total)
        System.err.println(GenerationCheck.describe(check, "replayed LiteRT", 1.0).prependIndent("# "))
        val extra = json.decodeFromString<List<ExtraPrompt>>(File(replayDir, "extra.json").readText())
        out["extra"] = buildJsonArray {
            ReplayRunner(File(replayDir, "extra")).use { replay ->
                val loop = GenerationLoop(generation, artifact, replay)
                extra.forEach { add(ints(loop.generate(it.prompt_ids, it.tokens.size, stopIds = emptySet()))) }
                replay.finish()
            }
        }
    } else {
        // the loop's eos handling: the first prompt again, with the token generated at step `stop` as eos
        val replay = ReplayRunner(File(replayDir, "sample"))
        val prompt = generation.paritySample.prompts.first()
        val loop = GenerationLoop(generation.copy(eosTokenIds = listOf(prompt.tokens[job.stop])), artifact, replay)
        out["tokens"] = ints(loop.generate(prompt.promptIds, generation.paritySample.newTokens))
        out["calls"] = JsonPrimitive(replay.used)
    }
    return out
}

private fun ints(values: List<Int>) = buildJsonArray { values.forEach { add(JsonPrimitive(it)) } }

private fun tensorJson(t: RuntimeTensor) = buildJsonObject {
    put("name", t.name); put("dtype", t.dtype); putJsonArray("shape") { t.shape.forEach { add(JsonPrimitive(it)) } }
    put("quantization", t.quantization?.let { q -> buildJsonObject { put("scale", q.scale); put("zero_point", q.zeroPoint) } } ?: JsonNull)
}

/**
 * A runtime that replays recorded calls in order: each call must be the recorded signature with exactly the
 * recorded input tensors (names, dtypes, shapes, bytes); it answers with the recorded outputs.
 */
class ReplayRunner(private val folder: File) : ModelRunner {
    private val calls = json.decodeFromString<Recording>(File(folder, "calls.json").readText()).calls
    var used = 0
        private set

    private fun load(entry: SampleTensor) = Tensor(entry.dtype, entry.shape, File(folder, entry.file).readBytes())

    override fun run(signature: String?, inputs: Map<String, Tensor>, outputs: List<RuntimeTensor>): Map<String, Tensor> {
        check(used < calls.size) { "call ${used + 1} ($signature): edgeport's run made only ${calls.size} calls" }
        val call = calls[used]
        val where = "call ${used + 1} (${call.signature})"
        check(signature == call.signature) { "$where: the core called $signature" }
        check(inputs.keys == call.inputs.map { it.name }.toSet()) { "$where: the core fed ${inputs.keys}, edgeport ${call.inputs.map { it.name }}" }
        for (entry in call.inputs) {
            val want = load(entry)
            val got = inputs.getValue(entry.name)
            check(got.sameAs(want)) { "$where: input ${entry.name} is $got ${got.values().take(8)}…, edgeport fed $want ${want.values().take(8)}…" }
        }
        used++
        val recorded = call.outputs.associateBy { it.name }
        return outputs.associate { out ->
            val entry = recorded[out.name] ?: error("$where: the core asked for output ${out.name}, the runtime has ${recorded.keys}")
            val tensor = load(entry)
            check(tensor.dtype == out.dtype && tensor.shape == out.shape) { "$where: output ${out.name} is ${tensor.dtype} ${tensor.shape}, manifest.json says ${out.dtype} ${out.shape}" }
            out.name to tensor
        }
    }

    fun finish() = check(used == calls.size) { "the core made $used calls, edgeport's run ${calls.size}" }
}
