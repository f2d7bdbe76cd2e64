package dev.edgeport.sample

import com.google.ai.edge.litertlm.Backend
import com.google.ai.edge.litertlm.Contents
import com.google.ai.edge.litertlm.ConversationConfig
import com.google.ai.edge.litertlm.Engine
import com.google.ai.edge.litertlm.EngineConfig
import com.google.ai.edge.litertlm.Message
import com.google.ai.edge.litertlm.MessageCallback
import com.google.ai.edge.litertlm.SamplerConfig
import dev.edgeport.sample.core.TextEngine
import java.util.concurrent.CountDownLatch

/**
 * The core's [TextEngine] on LiteRT-LM: the only place the app touches LiteRT-LM. It runs the `.litertlm`
 * the way edgeport's judge did (litert_lm.Engine in Python), so the manifest's `text_sample` applies:
 * greedy (top-k 1), and the prompt fed as-is — the conversation's chat template is replaced by one that
 * renders the user's text alone, as the judge's session ran with its prompt template off.
 * `initialize()` loads the weights (seconds for a 1B model): construct it off the UI thread.
 */
class LiteRtLmEngine(modelPath: String, backend: Backend, cacheDir: String) : TextEngine, AutoCloseable {
    private val engine = Engine(EngineConfig(modelPath = modelPath, backend = backend, cacheDir = cacheDir))
        .apply { initialize() }

    override fun generate(prompt: String, maxTokens: Int, onPiece: (String) -> Unit) {
        val config = ConversationConfig(samplerConfig = SamplerConfig(topK = 1, topP = 1.0, temperature = 0.0),
                                        chatTemplate = PROMPT_AS_IS)
        engine.createConversation(config).use { conversation ->
            val done = CountDownLatch(1)
            var failure: Throwable? = null
            val callback = object : MessageCallback {
                override fun onMessage(message: Message) = onPiece(message.toString())
                override fun onDone() = done.countDown()
                override fun onError(throwable: Throwable) {
                    failure = throwable
                    done.countDown()
                }
            }
            conversation.sendMessageAsync(Message.user(Contents.of(prompt)), callback, maxOutputToken = maxTokens)
            done.await()
            failure?.let { throw it }
        }
    }

    override fun close() = engine.close()

    companion object {
        /** Jinja: the last message's text and nothing around it (its content is a string or a list of parts). */
        const val PROMPT_AS_IS = "{%- set c = messages[-1]['content'] -%}{%- if c is string -%}{{ c }}" +
            "{%- else -%}{%- for p in c -%}{{ p['text'] }}{%- endfor -%}{%- endif -%}"
    }
}
