package dev.edgeport.sample

import android.content.Intent
import android.graphics.Typeface
import android.os.Bundle
import android.widget.Button
import android.widget.LinearLayout
import android.widget.ScrollView
import android.widget.TextView
import androidx.activity.ComponentActivity
import com.google.ai.edge.litert.Accelerator
import dev.edgeport.sample.core.BundleFiles
import dev.edgeport.sample.core.EdgeportManifest
import dev.edgeport.sample.core.GenerationCheck
import dev.edgeport.sample.core.ParityCheck

/**
 * Runs the edgeport artifact bundled in assets/edgeport/ (`edgeport bundle DIR --android samples/android`)
 * with LiteRT's CompiledModel API and shows how it compares with PyTorch:
 * - a forward model: its outputs on the parity sample, their error against the reference, and latency;
 * - a text-generation model: the parity sample's prompts through the greedy loop, tokens vs the reference;
 *   its `.litertlm` bundle (`--litertlm`), run by LiteRT-LM, is the LLM screen's (LlmActivity.kt).
 *
 * Everything but the screen and LiteRT (LiteRtRunner.kt) is the plain-Kotlin `core` module, which the
 * project's CI compiles and runs against real edgeport output.
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
            addView(Button(context).apply {
                text = "LLM: model.litertlm (LiteRT-LM)"
                setOnClickListener { startActivity(Intent(context, LlmActivity::class.java)) }
            })
            addView(report)
        }
        setContentView(ScrollView(this).apply { addView(layout) })
        runInBackground(Accelerator.CPU)
    }

    private fun runInBackground(accelerator: Accelerator) {
        report.text = "running on $accelerator…"
        Thread {
            val text = try {
                run(accelerator)
            } catch (e: Exception) {
                "failed on $accelerator: ${e.message}"
            }
            runOnUiThread { report.text = text }
        }.start()
    }

    private val files = BundleFiles { path -> assets.open("$ASSETS/$path").use { it.readBytes() } }

    private fun run(accelerator: Accelerator): String {
        val manifest = EdgeportManifest.parse(files.read("manifest.json").decodeToString())
        val generation = manifest.generation
        if (generation != null) {
            val artifact = generation.artifact(TARGET, VARIANT)
            LiteRtRunner(assets, "$ASSETS/${artifact.path}", accelerator).use { runner ->
                val start = System.nanoTime()
                val result = GenerationCheck.run(manifest, artifact, runner)
                return GenerationCheck.describe(result, accelerator.toString(), (System.nanoTime() - start) / 1e9)
            }
        }
        val artifact = manifest.artifact(TARGET, VARIANT)
        LiteRtRunner(assets, "$ASSETS/${artifact.path}", accelerator).use { runner ->
            val result = ParityCheck.run(manifest, artifact, files, runner)  // also the warm-up run
            val median = ParityCheck.medianMillis(RUNS) { runner.run(null, result.feeds, artifact.outputs) }
            return ParityCheck.describe(result, accelerator.toString(), median, RUNS)
        }
    }

    companion object {
        const val ASSETS = "edgeport"   // edgeport bundle's folder inside assets/
        const val TARGET = "litert"
        const val VARIANT = "fp32"      // change to run another bundled variant (fp16, int8, ...)
        const val RUNS = 50
    }
}
