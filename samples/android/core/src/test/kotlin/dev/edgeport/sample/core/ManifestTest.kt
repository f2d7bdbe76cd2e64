package dev.edgeport.sample.core

import org.junit.Assert.assertEquals
import org.junit.Assert.assertNull
import org.junit.Assert.assertTrue
import org.junit.Test

/**
 * JVM unit tests (no device): `./gradlew :core:test`. The contract against real edgeport output (every
 * parity sample, report.json's numbers, generated tokens) is tests/test_android_contract.py in the edgeport
 * repository, which compiles this module with kotlinc.
 */
class ManifestTest {
    private val manifest = """
        {"schema": "edgeport.manifest/1", "edgeport_version": "0.1.0", "model": "m.py:build",
         "inputs": [{"name": "x", "shape": [1, 8], "dtype": "float32"}],
         "outputs": [{"name": "output_0", "shape": [1, 2], "dtype": "float32"}],
         "artifacts": [
           {"target": "litert", "variant": "fp32", "path": "litert/model_fp32.tflite", "status": "ok",
            "inputs": [{"name": "args_0", "shape": [1, 8], "dtype": "float32", "quantization": null}],
            "outputs": [{"name": "output_0", "shape": [1, 2], "dtype": "float32", "quantization": null}],
            "parity_sample": "litert/parity_sample/index.json", "some_future_field": 1},
           {"target": "litert", "variant": "int8", "path": "litert/model_int8.tflite", "status": "ok",
            "inputs": [{"name": "args_0", "shape": [1, 8], "dtype": "int8", "quantization": {"scale": 0.5, "zero_point": -3}}],
            "outputs": [{"name": "output_0", "shape": [1, 2], "dtype": "float32", "quantization": null}],
            "parity_sample": "litert/parity_sample/index.json"}]}
    """.trimIndent()

    @Test
    fun readsArtifactsAndQuantization() {
        val parsed = EdgeportManifest.parse(manifest)
        assertEquals("litert/parity_sample/index.json", parsed.artifact("litert", "fp32").paritySample)
        assertNull(parsed.artifact("litert", "fp32").inputs[0].quantization)
        assertEquals(Quantization(0.5, -3), parsed.artifact("litert", "int8").inputs[0].quantization)
        assertNull(parsed.generation)
    }

    @Test(expected = IllegalArgumentException::class)
    fun rejectsAnotherSchemaVersion() {
        EdgeportManifest.parse(manifest.replace("edgeport.manifest/1", "edgeport.manifest/2"))
    }

    @Test
    fun aRenamedFieldIsAnErrorNamingIt() {
        val error = runCatching { EdgeportManifest.parse(manifest.replace("\"parity_sample\"", "\"paritySample\"")) }
        assertTrue(error.exceptionOrNull()?.message.orEmpty().contains("parity_sample"))
    }

    @Test
    fun quantizesLikeEdgeport() {
        val q = Quantization(0.5, -3)
        val bytes = Parity.quantize(floatArrayOf(1.0f, 100.0f, -1.25f), q)
        assertEquals(listOf(-1, 127, -6), bytes.map { it.toInt() })  // -2.5 - 3 = -5.5 rounds half to even
        assertEquals(1.0, Parity.dequantize(bytes, q)[0], 1e-9)
    }

    @Test
    fun comparesLikeTheReport() {
        val errors = Parity.compare(doubleArrayOf(1.0, 2.5), doubleArrayOf(1.0, 2.0))
        assertEquals(0.5, errors.maxAbsErr, 1e-12)
        assertEquals(0.25, errors.maxRelErr!!, 1e-12)
        assertNull(Parity.compare(doubleArrayOf(0.0), doubleArrayOf(0.0)).cosine)  // no signal: no cosine
    }
}
