package dev.edgeport.sample.core

/**
 * A text-generation artifact on manifest.json's parity sample: every judged prompt through the greedy loop,
 * its tokens against the reference's. The reference ran without eos (edgeport judges a fixed number of
 * tokens), so the check does too; an app generating for a user stops at eos (GenerationLoop's default).
 */
object GenerationCheck {
    class Prompt(val promptIds: List<Int>, val expected: List<Int>, val got: List<Int>) {
        /** Tokens reproduced before the first divergence (edgeport's `tokens_matched` for this prompt). */
        val matched: Int get() = expected.zip(got).takeWhile { (a, b) -> a == b }.size
    }

    class Result(val model: String, val artifact: GenerationArtifact, val prompts: List<Prompt>, val decodeCalls: Int) {
        val matched: Int get() = prompts.sumOf { it.matched }
        val total: Int get() = prompts.sumOf { it.expected.size }
    }

    fun run(manifest: EdgeportManifest, artifact: GenerationArtifact, runner: ModelRunner): Result {
        val generation = manifest.generation ?: throw IllegalArgumentException("manifest.json has no generation section")
        val loop = GenerationLoop(generation, artifact, runner)
        val sample = generation.paritySample
        val prompts = sample.prompts.map { p -> Prompt(p.promptIds, p.tokens, loop.generate(p.promptIds, sample.newTokens, stopIds = emptySet())) }
        return Result(manifest.model, artifact, prompts, loop.calls[GenerationLoop.DECODE] ?: 0)
    }

    fun describe(result: Result, where: String, seconds: Double): String = buildString {
        appendLine("${result.model}\n${result.artifact.path} (${result.artifact.variant}) on $where\n")
        for ((i, p) in result.prompts.withIndex()) {
            appendLine("prompt $i ${p.promptIds}")
            appendLine("  got      ${p.got}")
            if (p.matched < p.expected.size) appendLine("  expected ${p.expected}")
        }
        appendLine("\ntokens matching PyTorch: ${result.matched} of ${result.total}")
        appendLine("%d decode steps in %.3f s (%.1f tokens/s, prefill included)".format(
            result.decodeCalls, seconds, result.prompts.sumOf { it.got.size } / seconds))
    }
}
