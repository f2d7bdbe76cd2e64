package dev.edgeport.sample.core

/**
 * The only two things the app's logic needs from the platform, so that everything else is plain Kotlin
 * that compiles and runs on any JVM (the project's CI runs it against real edgeport output):
 * reading the bundled files, and running a loaded artifact.
 */

/** Reads a file of the bundled edgeport folder by its manifest-relative path (app assets on a device). */
fun interface BundleFiles {
    fun read(path: String): ByteArray
}

/**
 * One loaded artifact. `run` calls a signature (null: the model's only one) with tensors by input name
 * and returns the outputs it is asked for, by name, in the dtype and shape the manifest lists.
 * On Android this is LiteRT's CompiledModel (app/…/LiteRtRunner.kt).
 */
interface ModelRunner : AutoCloseable {
    fun run(signature: String?, inputs: Map<String, Tensor>, outputs: List<RuntimeTensor>): Map<String, Tensor>

    override fun close() {}
}

/**
 * An LLM runtime that takes text and streams each generated token's text (on Android LiteRT-LM's engine: app/…/LiteRtLmEngine.kt);
 * greedy, at most [maxTokens] tokens, the prompt fed as-is (no chat template), stopping at eos.
 */
fun interface TextEngine {
    fun generate(prompt: String, maxTokens: Int, onPiece: (String) -> Unit)
}

/** The parity sample an artifact points to: its index and every tensor file, checked against the index. */
class ParitySample(val index: ParitySampleIndex, val inputs: List<Tensor>, val outputs: List<Tensor>) {
    companion object {
        fun read(files: BundleFiles, indexPath: String): ParitySample {
            val index = ParitySampleIndex.parse(files.read(indexPath).decodeToString())
            val folder = indexPath.substringBeforeLast('/', "")
            fun load(entry: SampleTensor): Tensor {
                val bytes = files.read(if (folder.isEmpty()) entry.file else "$folder/${entry.file}")
                return try {
                    Tensor(entry.dtype, entry.shape, bytes)
                } catch (e: IllegalArgumentException) {
                    throw IllegalArgumentException("parity sample $indexPath, ${entry.name} (${entry.file}): ${e.message}")
                }
            }
            return ParitySample(index, index.inputs.map(::load), index.outputs.map(::load))
        }
    }
}
