package dev.edgeport.sample.core

/**
 * A `.litertlm` bundle on manifest.json's `text_sample`: every judged prompt through the engine, its streamed
 * text against PyTorch's greedy tokens. Matching is by text, token by token: a prompt keeps the expected
 * pieces whose concatenation the engine's output starts with, so a runtime that streams two tokens in one
 * chunk is still counted per token, and a divergence is located at the first token that differs.
 */
object BundleCheck {
    class Prompt(val text: String, val expected: List<String>, val got: String, val seconds: Double) {
        /** Expected tokens reproduced before the first divergence (edgeport's `tokens_matched` for this prompt). */
        val matched: Int get() {
            var prefix = ""
            for ((i, piece) in expected.withIndex()) {
                prefix += piece
                if (!got.startsWith(prefix)) return i
            }
            return expected.size
        }
        /** Text past every expected token: the engine went on where PyTorch stopped at eos. */
        val extra: Boolean get() = matched == expected.size && got.length > expected.joinToString("").length
    }

    class Result(val model: String, val artifact: GenerationArtifact, val prompts: List<Prompt>) {
        val matched: Int get() = prompts.sumOf { it.matched }
        val total: Int get() = prompts.sumOf { it.expected.size }
        val exact: Boolean get() = matched == total && prompts.none { it.extra }
    }

    fun run(manifest: EdgeportManifest, artifact: GenerationArtifact, engine: TextEngine): Result {
        val sample = artifact.textSample
            ?: throw IllegalArgumentException("${artifact.path} has no text_sample in manifest.json (was it judged?)")
        val prompts = sample.prompts.map { p ->
            val out = StringBuilder()
            val start = System.nanoTime()
            engine.generate(p.text, sample.newTokens) { out.append(it) }
            Prompt(p.text, p.pieces, out.toString(), (System.nanoTime() - start) / 1e9)
        }
        return Result(manifest.model, artifact, prompts)
    }

    fun describe(result: Result, where: String): String = buildString {
        appendLine("${result.model}\n${result.artifact.path} (${result.artifact.variant}) on $where\n")
        for ((i, p) in result.prompts.withIndex()) {
            appendLine("prompt $i \"${p.text}\"")
            appendLine("  got      \"${p.got}\"")
            if (p.matched < p.expected.size || p.extra) appendLine("  expected \"${p.expected.joinToString("")}\"")
        }
        appendLine("\ntokens matching PyTorch: ${result.matched} of ${result.total}${if (result.exact) "" else " (NOT exact)"}")
        val seconds = result.prompts.sumOf { it.seconds }
        appendLine("%d prompts in %.3f s (prefill included)".format(result.prompts.size, seconds))
    }
}
