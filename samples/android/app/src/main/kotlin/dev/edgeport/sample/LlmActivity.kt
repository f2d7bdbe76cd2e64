package dev.edgeport.sample

import android.graphics.Typeface
import android.os.Bundle
import android.widget.Button
import android.widget.EditText
import android.widget.LinearLayout
import android.widget.ScrollView
import android.widget.TextView
import androidx.activity.ComponentActivity
import com.google.ai.edge.litertlm.Backend
import dev.edgeport.sample.core.BundleCheck
import dev.edgeport.sample.core.EdgeportManifest
import dev.edgeport.sample.core.GenerationArtifact
import java.io.File

/**
 * The LLM screen: loads the bundled `model.litertlm` (edgeport's `--litertlm`) with the LiteRT-LM SDK, checks
 * it against PyTorch on the manifest's `text_sample` (BundleCheck: the same prompts, token by token), then
 * streams a continuation of any prompt typed in; below the check, the quality numbers edgeport measured for
 * the target's artifacts (manifest.json's `quality`: KL divergence, same top-1, perplexity, task checks). Which file to load comes from manifest.json, never a name
 * written here; the engine needs a real file, so the asset is copied once into the app's files folder.
 */
class LlmActivity : ComponentActivity() {
    private lateinit var report: TextView
    private lateinit var prompt: EditText
    private var engine: LiteRtLmEngine? = null

    override fun onCreate(savedInstanceState: Bundle?) {
        super.onCreate(savedInstanceState)
        report = TextView(this).apply { typeface = Typeface.MONOSPACE; setTextIsSelectable(true) }
        prompt = EditText(this).apply { hint = "prompt (fed as-is, no chat template)" }
        val layout = LinearLayout(this).apply {
            orientation = LinearLayout.VERTICAL
            setPadding(32, 32, 32, 32)
            addView(prompt)
            addView(Button(context).apply { text = "Generate"; setOnClickListener { generate(prompt.text.toString()) } })
            addView(report)
        }
        setContentView(ScrollView(this).apply { addView(layout) })
        inBackground { check() }
    }

    override fun onDestroy() {
        engine?.close()
        super.onDestroy()
    }

    private fun check(): String {
        val manifest = EdgeportManifest.parse(assets.open("${MainActivity.ASSETS}/manifest.json").use { it.readBytes() }.decodeToString())
        val bundle = manifest.generation?.bundle(MainActivity.TARGET)
            ?: return "no .litertlm in manifest.json: convert with --litertlm"
        val loaded = LiteRtLmEngine(localCopy(bundle).path, Backend.CPU(), cacheDir.path).also { engine = it }
        val quality = manifest.generation?.qualityLines(MainActivity.TARGET).orEmpty()
        return BundleCheck.describe(BundleCheck.run(manifest, bundle, loaded), "CPU (LiteRT-LM)") +
            (if (quality.isEmpty()) "" else "\n\nquality on real text vs PyTorch fp32 (edgeport's judge):\n" + quality.joinToString("\n"))
    }

    private fun generate(text: String) {
        val loaded = engine ?: return
        val out = StringBuilder(text)
        inBackground {
            loaded.generate(text, MAX_NEW_TOKENS) { piece -> out.append(piece); runOnUiThread { report.text = out } }
            out.toString()
        }
    }

    /** The bundle as a file (the engine memory-maps it), copied from assets once per size. */
    private fun localCopy(bundle: GenerationArtifact): File {
        val target = File(filesDir, bundle.path)
        val asset = "${MainActivity.ASSETS}/${bundle.path}"
        val size = assets.openFd(asset).use { it.length }
        if (target.length() != size) {
            target.parentFile?.mkdirs()
            assets.open(asset).use { input -> target.outputStream().use { input.copyTo(it) } }
        }
        return target
    }

    private fun inBackground(work: () -> String) {
        Thread {
            val text = try { work() } catch (e: Exception) { "failed: ${e.message}" }
            runOnUiThread { report.text = text }
        }.start()
    }

    companion object {
        const val MAX_NEW_TOKENS = 64
    }
}
