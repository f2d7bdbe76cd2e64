package dev.edgeport.sample.core

/**
 * The greedy text-generation loop over an edgeport text-generation artifact: the same bookkeeping as
 * edgeport's own loop (edgeport/pipeline/tasks/text_generation/loop.py and layout.py), with the tensors named and
 * typed as the artifact's runtime declares them in manifest.json, and each input fed by its role (the
 * manifest's `role`, else its name: `input_ids`, `position_ids`, `attention_mask…`, `cache_…`), so the one loop
 * drives edgeport's own lowering and litert-torch's export_hf (`tokens`, `input_pos`, `mask`, `kv_cache_…`):
 *
 * - the prompt goes into the smallest `prefill_<L>` that holds it, right-padded with 0, positions 0..L-1,
 *   every cache length 0; a prompt longer than every L fills the longest and its remaining tokens go
 *   through `decode` one by one (their predictions discarded);
 * - after prefill every cache-length tensor is set back to the real prompt length (the padded slots are
 *   masked out and overwritten before they are read);
 * - a prefill whose `logits` hold one row (export_hf's as edgeport exports it) answers its highest position:
 *   its padding rows repeat the last real position n - 1 (positions 0, 1, .., n - 1, n - 1, ..), its cache
 *   inputs start as zeros, and its one row gives the first token (edgeport/targets/litert/hf_runner.py);
 * - a prefill with no `logits` output (export_hf's stock one) takes the prompt's first n - 1 tokens only
 *   (none when n = 1: the caches start as zeros), still in that `prefill_<L>`, and the last token goes
 *   through one `decode` step at position n - 1 whose logits give the first token;
 * - `decode` takes the last token, its slot position, a mask allowing slots 0..pos, and the cache: every
 *   output whose `role` names an input feeds that input on the next call;
 * - a float mask is additive: 0 where allowed, float32's lowest number elsewhere (a bool mask: true/false);
 * - next token = argmax of the logits (prefill: the prompt's last row); stop at a stop id or `maxNewTokens`.
 */
class GenerationLoop(private val generation: Generation, artifact: GenerationArtifact, private val runner: ModelRunner) {
    private val signatures: Map<String, SignatureIO> = artifact.signatures
        ?: throw IllegalArgumentException("the ${artifact.target} ${artifact.variant} artifact lists no signatures (it did not load when converted)")
    private val lengthInputs = generation.cache.filter { it.kind == "length" }.map { it.name }.toSet()

    /** How many times each signature was called, for tokens/s and for the tests. */
    val calls = mutableMapOf<String, Int>()

    /** False for export_hf's prefill, which returns only the caches: the prompt's last token then goes through decode. */
    val prefillHasLogits: Boolean

    /** True when every prefill's logits hold one row: its highest position's (padding rows repeat the last real one). */
    val prefillLastRowOnly: Boolean

    init {
        require(generation.prefillLens.isNotEmpty()) { "manifest.json lists no prefill lengths" }
        for (name in generation.prefillLens.map(::prefillName) + DECODE) {
            signature(name).outputs.firstOrNull { it.role == null }?.let { throw IllegalArgumentException("signature $name: output ${it.name} has no role") }
        }
        require(signature(DECODE).outputs.any { it.role == LOGITS }) { "signature $DECODE has no output with role $LOGITS" }
        val withLogits = generation.prefillLens.map { signature(prefillName(it)).outputs.any { o -> o.role == LOGITS } }
        require(withLogits.distinct().size == 1) { "some prefill signatures have a $LOGITS output and some do not" }
        prefillHasLogits = withLogits.first()
        prefillLastRowOnly = prefillHasLogits && generation.prefillLens.all { length ->
            signature(prefillName(length)).outputs.first { it.role == LOGITS }.shape.let { it.size >= 2 && it[it.size - 2] == 1 }
        }
    }

    fun prefillLengthFor(promptLen: Int): Int = generation.prefillLens.firstOrNull { it >= promptLen } ?: generation.prefillLens.last()

    /** `maxNewTokens` greedy tokens after `prompt`; fewer when a stop id (by default the model's eos) comes out. */
    fun generate(prompt: List<Int>, maxNewTokens: Int, stopIds: Set<Int> = generation.eosTokenIds.toSet()): List<Int> {
        require(prompt.isNotEmpty()) { "the prompt is empty" }
        require(prompt.size + maxNewTokens <= generation.cacheLen) {
            "a ${prompt.size}-token prompt plus $maxNewTokens new tokens needs ${prompt.size + maxNewTokens} cache slots; " +
                "the artifact's cache holds ${generation.cacheLen}"
        }
        val length = prefillLengthFor(prompt.size)
        val head = prompt.take(length)
        var (logits, cache) = prefill(length, head)
        var pos = head.size
        for (token in prompt.drop(length)) {
            val out = call(DECODE, decodeFeeds(token, pos, cache))
            logits = row(logitsOf(out), 0); cache = cacheOf(out); pos++
        }
        val tokens = mutableListOf(argmax(logits))
        while (tokens.size < maxNewTokens && tokens.last() !in stopIds) {
            val out = call(DECODE, decodeFeeds(tokens.last(), pos, cache))
            tokens.add(argmax(row(logitsOf(out), 0))); cache = cacheOf(out); pos++
        }
        return tokens
    }

    /** The logits of the prompt's last real position and the cache after `head` (at most `length` tokens). */
    private fun prefill(length: Int, head: List<Int>): Pair<FloatArray, Map<String, Tensor>> {
        if (prefillHasLogits) {
            val out = call(prefillName(length), prefillFeeds(length, head, if (prefillLastRowOnly) zeroCache() else emptyMap()))
            return row(logitsOf(out), if (prefillLastRowOnly) 0 else head.size - 1) to cacheOf(out).mapValues { (role, t) -> if (role in lengthInputs) filled(t, head.size) else t }
        }
        var cache = zeroCache()
        if (head.size > 1) cache = cacheOf(call(prefillName(length), prefillFeeds(length, head.dropLast(1), cache)))
        val out = call(DECODE, decodeFeeds(head.last(), head.size - 1, cache))
        return row(logitsOf(out), 0) to cacheOf(out)
    }

    /** Every cache input of decode as zeros, by role: the state before export_hf's first call. */
    private fun zeroCache(): Map<String, Tensor> = signature(DECODE).inputs.filter { roleOf(it).startsWith(CACHE) }
        .associate { roleOf(it) to Tensor(it.dtype, it.shape, ByteArray(it.count() * Tensor.itemSize(it.dtype))) }

    private fun signature(name: String): SignatureIO =
        signatures[name] ?: throw IllegalArgumentException("the artifact has no signature $name (it has ${signatures.keys})")

    private fun call(name: String, feeds: Map<String, Tensor>): Map<String, Tensor> {
        calls[name] = (calls[name] ?: 0) + 1
        val outputs = signature(name).outputs
        val got = runner.run(name, feeds, outputs)
        // keyed by role from here on: the role the next call's input is fed as
        return outputs.associate { out -> out.role!! to (got[out.name] ?: throw IllegalStateException("$name returned no ${out.name}")) }
    }

    private fun prefillFeeds(length: Int, ids: List<Int>, cache: Map<String, Tensor> = emptyMap()): Map<String, Tensor> =
        signature(prefillName(length)).inputs.associate { input ->
            val role = roleOf(input)
            input.name to when {
                role == INPUT_IDS -> ints(input, IntArray(length) { if (it < ids.size) ids[it] else 0 })
                role == POSITION_IDS -> ints(input, IntArray(length) { if (prefillLastRowOnly) minOf(it, ids.size - 1) else it })
                role in lengthInputs -> ints(input, IntArray(input.count()))
                isMask(role) -> mask(input, prefillAllowed(input, length))
                else -> cache[role] ?: throw IllegalArgumentException("prefill input ${input.name} has no known role")
            }
        }

    /** A prefill that takes a mask: a 2-D padding mask of ones, or a causal mask over the slots (row i sees 0..i). */
    private fun prefillAllowed(input: RuntimeTensor, length: Int): BooleanArray =
        if (input.shape.size == 2) BooleanArray(input.count()) { true }
        else BooleanArray(length * generation.cacheLen) { i -> i % generation.cacheLen <= i / generation.cacheLen }

    private fun decodeFeeds(token: Int, pos: Int, cache: Map<String, Tensor>): Map<String, Tensor> = signature(DECODE).inputs.associate { input ->
        val role = roleOf(input)
        input.name to when {
            role == INPUT_IDS -> ints(input, intArrayOf(token))
            role == POSITION_IDS -> ints(input, intArrayOf(pos))
            isMask(role) -> mask(input, BooleanArray(generation.cacheLen) { it <= pos })
            else -> cache[role] ?: throw IllegalArgumentException("decode input ${input.name} has no known role")
        }
    }

    private fun cacheOf(outputs: Map<String, Tensor>): Map<String, Tensor> = outputs.filterKeys { it != LOGITS }

    private fun logitsOf(outputs: Map<String, Tensor>): Tensor = outputs.getValue(LOGITS)

    /** Row `index` of logits (…, rows, vocab) as floats. */
    private fun row(logits: Tensor, index: Int): FloatArray {
        val vocab = logits.shape.last()
        return logits.values().let { v -> FloatArray(vocab) { v[index * vocab + it].toFloat() } }
    }

    /** A cache-length tensor of the same dtype and shape holding `value` everywhere. */
    private fun filled(like: Tensor, value: Int): Tensor = Tensor.ofInts(like.dtype, like.shape, IntArray(like.count) { value })

    private fun ints(input: RuntimeTensor, values: IntArray): Tensor = Tensor.ofInts(input.dtype, input.shape, values)

    /** A "may attend" pattern in the mask's own form: bool as is, float as additive (0 where allowed, float32's lowest elsewhere). */
    private fun mask(input: RuntimeTensor, allowed: BooleanArray): Tensor {
        require(allowed.size == input.count()) { "mask ${input.name} ${input.shape} does not hold ${allowed.size} slots" }
        return when (input.dtype) {
            "bool" -> Tensor.ofBooleans(input.shape, allowed)
            "float32" -> Tensor.ofFloats(input.shape, FloatArray(allowed.size) { if (allowed[it]) 0f else -Float.MAX_VALUE })
            else -> throw IllegalArgumentException("mask ${input.name} of dtype ${input.dtype} is not handled by this sample")
        }
    }

    companion object {
        const val DECODE = "decode"
        const val LOGITS = "logits"
        const val INPUT_IDS = "input_ids"
        const val POSITION_IDS = "position_ids"
        const val CACHE = "cache_"

        /** What an input is fed: its role when the manifest names one (export_hf's tensors), else its name. */
        fun roleOf(input: RuntimeTensor): String = input.role ?: input.name

        fun prefillName(length: Int) = "prefill_$length"

        fun isMask(name: String) = name.startsWith("attention_mask")

        /** The first index of the largest value (numpy's argmax). */
        fun argmax(values: FloatArray): Int {
            var best = 0
            for (i in 1 until values.size) if (values[i] > values[best]) best = i
            return best
        }
    }
}

private fun RuntimeTensor.count(): Int = shape.fold(1) { n, d -> n * d }
