package dev.edgeport.sample.core

import org.junit.Assert.assertEquals
import org.junit.Assert.assertNull
import org.junit.Assert.assertTrue
import org.junit.Test

/** The LLM screen's quality lines, read from manifest.json's per-artifact `quality` (no device). */
class QualityTest {
    private val manifest = EdgeportManifest.parse("""
        {"schema": "edgeport.manifest/1", "model": "SmolLM2-135M-Instruct.Q4_1.gguf", "artifacts": [],
         "generation": {"task": "text-generation", "vocab_size": 64, "cache_len": 32, "prefill_lens": [8],
           "bos_token_id": 1, "eos_token_ids": [2], "cache": [],
           "artifacts": [
             {"target": "litert", "variant": "fp32", "path": "litert/model.tflite", "status": "ok", "signatures": null,
              "quality": {"text": "help topics", "tokens": 128, "kld_mean": 1e-7, "kld_p99": 5e-7, "top1_agreement": 1.0,
                          "ppl_reference": 12.5, "ppl": 12.5, "delta_ppl": 0.0,
                          "checks": {"total": 3, "passed": 3, "reference_passed": 3}}},
             {"target": "litert", "variant": "dynamic-int8", "path": "litert/model_int8.tflite", "status": "ok",
              "signatures": null, "quality": {"kld_mean": 0.0123, "kld_p99": 0.15, "top1_agreement": 0.93,
                                              "ppl_reference": 12.5, "ppl": 13.1}},
             {"target": "litert", "variant": "fp32-litertlm", "path": "litert/model.litertlm", "status": "ok",
              "signatures": null, "quality": null}],
           "parity_sample": {"new_tokens": 4, "prompts": []}}}
    """.trimIndent())

    @Test
    fun oneLinePerJudgedArtifact() {
        val generation = manifest.generation!!
        val lines = generation.qualityLines("litert")
        assertEquals(2, lines.size)
        assertTrue(lines[0], lines[0].startsWith("fp32: mean KLD 1.000e-07") && lines[0].contains("checks 3/3 (PyTorch 3/3)"))
        assertTrue(lines[1], lines[1].contains("mean KLD 0.01230, p99 0.1500, same top-1 93.0%; ppl 13.100 (PyTorch 12.500)"))
        assertNull(generation.artifact("litert", "fp32-litertlm").quality)
        assertEquals(emptyList<String>(), generation.qualityLines("onnx"))
    }
}
