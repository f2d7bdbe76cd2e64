package dev.edgeport.sample.core

import org.junit.Assert.assertEquals
import org.junit.Assert.assertFalse
import org.junit.Assert.assertTrue
import org.junit.Test

/** The `.litertlm` screen's check, with a scripted engine in place of LiteRT-LM (no device). */
class BundleCheckTest {
    private val manifest = EdgeportManifest.parse("""
        {"schema": "edgeport.manifest/1", "model": "hf:tiny", "artifacts": [],
         "generation": {"task": "text-generation", "vocab_size": 64, "cache_len": 32, "prefill_lens": [8],
           "bos_token_id": 1, "eos_token_ids": [2], "cache": [],
           "artifacts": [{"target": "litert", "variant": "fp32-litertlm", "path": "litert/model.litertlm",
             "status": "ok", "signatures": null,
             "text_sample": {"new_tokens": 4, "prompts": [{"text": "the cat", "pieces": [" sat", " on", " a", " mat"]},
                                                          {"text": "a dog", "pieces": [" ran"]}]}}],
           "parity_sample": {"new_tokens": 4, "prompts": []}}}
    """.trimIndent())
    private val artifact = manifest.generation!!.artifact("litert", "fp32-litertlm")

    private fun engine(replies: Map<String, List<String>>) = TextEngine { prompt, maxTokens, onPiece ->
        replies.getValue(prompt).take(maxTokens).forEach(onPiece)
    }

    @Test
    fun readsTheBundlesTextSample() {
        assertTrue(artifact.isBundle)
        assertEquals(listOf(" sat", " on", " a", " mat"), artifact.textSample!!.prompts[0].pieces)
    }

    @Test
    fun exactWhenTheEngineStreamsPyTorchsTokensInAnyChunking() {
        val result = BundleCheck.run(manifest, artifact, engine(mapOf("the cat" to listOf(" sat on", " a", " mat"), "a dog" to listOf(" ran"))))
        assertEquals(5, result.matched)
        assertEquals(5, result.total)
        assertTrue(result.exact)
    }

    @Test
    fun locatesTheFirstDivergentToken() {
        val result = BundleCheck.run(manifest, artifact, engine(mapOf("the cat" to listOf(" sat", " in", " a"), "a dog" to listOf(" ran"))))
        assertEquals(1, result.prompts[0].matched)
        assertFalse(result.exact)
        assertTrue(BundleCheck.describe(result, "CPU").contains("tokens matching PyTorch: 2 of 5 (NOT exact)"))
    }

    @Test
    fun textPastPyTorchsEosIsNotExact() {
        val result = BundleCheck.run(manifest, artifact, engine(mapOf("the cat" to listOf(" sat", " on", " a", " mat"), "a dog" to listOf(" ran", " off"))))
        assertEquals(result.total, result.matched)
        assertFalse(result.exact)
    }
}
