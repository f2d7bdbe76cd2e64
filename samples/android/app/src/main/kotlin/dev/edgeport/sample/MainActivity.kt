package dev.edgeport.sample

import android.graphics.Typeface
import android.os.Bundle
import android.widget.Button
import android.widget.LinearLayout
import android.widget.ScrollView
import android.widget.TextView
import androidx.activity.ComponentActivity
import com.google.ai.edge.litert.Accelerator
import com.google.ai.edge.litert.CompiledModel
import com.google.ai.edge.litert.TensorBuffer
import kotlin.system.measureNanoTime

/**
 * Runs the edgeport artifact bundled in assets/edgeport/ (`edgeport bundle DIR --android samples/android`)
 * with LiteRT's CompiledModel API on the parity sample, and shows its outputs, the max error against the
 * PyTorch reference, and latency.
 */
class MainActivity : ComponentActivity() {
    private lateinit var report: TextView

    override fun onCreate(savedInstanceState: Bundle?) {
        super.onCreate(savedInstanceState)
        report = TextView(this).apply { typeface = Typeface.MONOSPACE; setTextIsSelectable(true) }
        val layout = LinearLayout(this).apply {
            orientation = LinearLayout.VERTICAL
            setPadding(32, 32, 32, 32)
            addView(Button(context).apply { text = "Run on CPU"; setOnClickListener { runInBackground(Accelerator.CPU) } })
            addView(Button(context).apply { text = "Run on GPU"; setOnClickListener { runInBackground(Accelerator.GPU) } })
            addView(report)
        }
        setContentView(ScrollView(this).apply { addView(layout) })
        runInBackground(Accelerator.CPU)
    }

    private fun runInBackground(accelerator: Accelerator) {
        report.text = "running on $accelerator…"
        Thread {
            val text = try {
                runParitySample(accelerator)
            } catch (e: Exception) {
                "failed on $accelerator: ${e.message}"
            }
            runOnUiThread { report.text = text }
        }.start()
    }

    private fun asset(path: String): ByteArray = assets.open("$ASSETS/$path").use { it.readBytes() }

    private fun runParitySample(accelerator: Accelerator): String {
        val manifest = EdgeportManifest.parse(asset("manifest.json").decodeToString())
        val artifact = manifest.artifact(TARGET, VARIANT)
        val indexPath = artifact.paritySample ?: error("the $VARIANT artifact has no parity sample it can take")
        val index = ParitySampleIndex.parse(asset(indexPath).decodeToString())
        val sampleDir = indexPath.substringBeforeLast('/')

        CompiledModel.create(assets, "$ASSETS/${artifact.path}", CompiledModel.Options(accelerator)).use { model ->
            // Buffers by the .tflite signature names the manifest lists, in the model's order.
            val inputs = artifact.inputs.zip(index.inputs).associate { (tensor, sample) ->
                tensor.name to model.createInputBuffer(tensor.name).also { write(it, tensor, asset("$sampleDir/${sample.file}")) }
            }
            val outputs = artifact.outputs.associate { it.name to model.createOutputBuffer(it.name) }
            model.run(inputs, outputs)  // warm-up; these are the outputs we check
            val results = artifact.outputs.zip(index.outputs).map { (tensor, sample) ->
                val out = read(outputs.getValue(tensor.name), tensor)
                Triple(tensor, out, Parity.compare(out, Parity.values(asset("$sampleDir/${sample.file}"), sample.dtype)))
            }
            val millis = (1..RUNS).map { measureNanoTime { model.run(inputs, outputs) } / 1e6 }.sorted()
            (inputs.values + outputs.values).forEach { it.close() }
            return buildString {
                appendLine("${manifest.model}\n${artifact.path} (${artifact.variant}) on $accelerator\n")
                for ((tensor, out, errors) in results) {
                    appendLine("${tensor.name} ${tensor.shape}: ${out.take(4).joinToString { "%.5g".format(it) }}${if (out.size > 4) ", …" else ""}")
                    appendLine("  max abs err %.3g  max rel err %.3g  cosine %.6f".format(errors.maxAbsErr, errors.maxRelErr, errors.cosine))
                }
                appendLine("\nmax rel err vs PyTorch: %.3g".format(results.maxOf { it.third.maxRelErr }))
                appendLine("latency: median %.3f ms over $RUNS runs".format(millis[millis.size / 2]))
            }
        }
    }

    /** Feed a sample file: float32/int32 as they are; float values of a quantized int8 input quantized. */
    private fun write(buffer: TensorBuffer, tensor: RuntimeTensor, bytes: ByteArray) {
        val q = tensor.quantization
        when {
            q != null && tensor.dtype == "int8" -> buffer.writeInt8(Parity.quantize(Parity.floats(bytes), q))
            tensor.dtype == "float32" -> buffer.writeFloat(Parity.floats(bytes))
            tensor.dtype == "int32" -> buffer.writeInt(Parity.ints(bytes))
            else -> error("input ${tensor.name}: dtype ${tensor.dtype} is not handled by this sample")
        }
    }

    private fun read(buffer: TensorBuffer, tensor: RuntimeTensor): DoubleArray {
        val q = tensor.quantization
        return when {
            q != null && tensor.dtype == "int8" -> Parity.dequantize(buffer.readInt8(), q)
            tensor.dtype == "float32" -> buffer.readFloat().map { it.toDouble() }.toDoubleArray()
            tensor.dtype == "int32" -> buffer.readInt().map { it.toDouble() }.toDoubleArray()
            else -> error("output ${tensor.name}: dtype ${tensor.dtype} is not handled by this sample")
        }
    }

    companion object {
        const val ASSETS = "edgeport"   // edgeport bundle's folder inside assets/
        const val TARGET = "litert"
        const val VARIANT = "fp32"      // change to run another bundled variant (fp16, int8, ...)
        const val RUNS = 50
    }
}
