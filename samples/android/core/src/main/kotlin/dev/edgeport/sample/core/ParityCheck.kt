package dev.edgeport.sample.core

import kotlin.system.measureNanoTime

/**
 * An artifact on its parity sample: feed the sample's inputs in the artifact's runtime form (float values
 * quantized where the artifact takes int8), run once, dequantize the outputs and compare them with
 * PyTorch's reference outputs. What the app shows and what the CI contract test checks against report.json.
 */
object ParityCheck {
    class Output(val tensor: RuntimeTensor, val values: DoubleArray, val errors: Parity.Errors)

    class Result(val model: String, val artifact: Artifact, val outputs: List<Output>, val feeds: Map<String, Tensor>) {
        val worst: Parity.Errors get() = Parity.worst(outputs.map { it.errors })
    }

    fun run(manifest: EdgeportManifest, artifact: Artifact, files: BundleFiles, runner: ModelRunner): Result {
        val indexPath = artifact.paritySample
            ?: throw IllegalArgumentException("the ${artifact.target} ${artifact.variant} artifact has no parity sample it can take")
        require(artifact.inputs.isNotEmpty() && artifact.outputs.isNotEmpty()) {
            "the ${artifact.target} ${artifact.variant} artifact lists no inputs/outputs (it did not load when converted)"
        }
        val sample = ParitySample.read(files, indexPath)
        require(sample.inputs.size == artifact.inputs.size && sample.outputs.size == artifact.outputs.size) {
            "parity sample $indexPath has ${sample.inputs.size} inputs / ${sample.outputs.size} outputs, " +
                "the artifact ${artifact.inputs.size} / ${artifact.outputs.size}"
        }
        val feeds = artifact.inputs.zip(sample.inputs).associate { (tensor, value) -> tensor.name to feed(tensor, value) }
        val produced = runner.run(null, feeds, artifact.outputs)
        val outputs = artifact.outputs.zip(sample.outputs).map { (tensor, reference) ->
            val got = produced[tensor.name] ?: throw IllegalStateException("the runtime returned no output ${tensor.name}")
            val values = got.values(tensor.quantization)
            Output(tensor, values, Parity.compare(values, reference.values()))
        }
        return Result(manifest.model, artifact, outputs, feeds)
    }

    /** A sample tensor in the form the artifact takes: float values quantized for an int8 input, else as is. */
    fun feed(tensor: RuntimeTensor, sample: Tensor): Tensor {
        val q = tensor.quantization
        val value = if (q != null && tensor.dtype == "int8" && sample.dtype == "float32") {
            Tensor.ofInt8(sample.shape, Parity.quantize(sample.floats(), q))
        } else sample
        require(value.dtype == tensor.dtype && value.shape == tensor.shape) {
            "input ${tensor.name}: the sample is ${value.dtype} ${value.shape}, the artifact takes ${tensor.dtype} ${tensor.shape}"
        }
        return value
    }

    /** Median wall time of `runs` calls of the same feeds, in milliseconds. */
    fun medianMillis(runs: Int, call: () -> Unit): Double {
        val millis = (1..runs).map { measureNanoTime(call) / 1e6 }.sorted()
        return millis[millis.size / 2]
    }

    fun describe(result: Result, where: String, medianMs: Double?, runs: Int): String = buildString {
        appendLine("${result.model}\n${result.artifact.path} (${result.artifact.variant}) on $where\n")
        for (output in result.outputs) {
            val first = output.values.take(4).joinToString { "%.5g".format(it) } + if (output.values.size > 4) ", …" else ""
            appendLine("${output.tensor.name} ${output.tensor.shape}: $first")
            appendLine("  max abs err %.3g  max rel err %s  cosine %s".format(
                output.errors.maxAbsErr, output.errors.maxRelErr?.let { "%.3g".format(it) } ?: "n/a",
                output.errors.cosine?.let { "%.6f".format(it) } ?: "n/a"))
        }
        appendLine("\nmax rel err vs PyTorch: %s".format(result.worst.maxRelErr?.let { "%.3g".format(it) } ?: "n/a"))
        if (medianMs != null) appendLine("latency: median %.3f ms over $runs runs".format(medianMs))
    }
}
