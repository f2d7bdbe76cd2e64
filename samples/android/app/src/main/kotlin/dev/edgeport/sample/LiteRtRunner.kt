package dev.edgeport.sample

import android.content.res.AssetManager
import com.google.ai.edge.litert.Accelerator
import com.google.ai.edge.litert.CompiledModel
import com.google.ai.edge.litert.TensorBuffer
import dev.edgeport.sample.core.ModelRunner
import dev.edgeport.sample.core.RuntimeTensor
import dev.edgeport.sample.core.Tensor

/**
 * The core's [ModelRunner] on LiteRT's CompiledModel API: the only place the app touches LiteRT.
 * Buffers are created once per signature and tensor name (the manifest lists them as the .tflite's
 * signature keys) and reused across calls, as a generation loop calls the same signatures many times.
 * edgeport's .tflite files take int32 for int64 ids, so float32, int32, int8 and bool cover them.
 */
class LiteRtRunner(assets: AssetManager, assetPath: String, accelerator: Accelerator) : ModelRunner {
    private val model = CompiledModel.create(assets, assetPath, CompiledModel.Options(accelerator))
    private val inputBuffers = mutableMapOf<Pair<String?, String>, TensorBuffer>()
    private val outputBuffers = mutableMapOf<Pair<String?, String>, TensorBuffer>()

    override fun run(signature: String?, inputs: Map<String, Tensor>, outputs: List<RuntimeTensor>): Map<String, Tensor> {
        val ins = inputs.mapValues { (name, tensor) ->
            inputBuffers.getOrPut(signature to name) {
                if (signature == null) model.createInputBuffer(name) else model.createInputBuffer(name, signature = signature)
            }.also { write(it, tensor) }
        }
        val outs = outputs.associate { out ->
            out.name to outputBuffers.getOrPut(signature to out.name) {
                if (signature == null) model.createOutputBuffer(out.name) else model.createOutputBuffer(out.name, signature = signature)
            }
        }
        if (signature == null) model.run(ins, outs) else model.run(ins, outs, signature = signature)
        return outputs.associate { it.name to read(outs.getValue(it.name), it) }
    }

    override fun close() {
        (inputBuffers.values + outputBuffers.values).forEach { it.close() }
        model.close()
    }

    private fun write(buffer: TensorBuffer, tensor: Tensor) = when (tensor.dtype) {
        "float32" -> buffer.writeFloat(tensor.floats())
        "int32" -> buffer.writeInt(tensor.ints())
        "int8" -> buffer.writeInt8(tensor.bytes())
        "bool" -> buffer.writeBoolean(tensor.booleans())
        else -> error("input dtype ${tensor.dtype} is not handled by this sample")
    }

    private fun read(buffer: TensorBuffer, tensor: RuntimeTensor): Tensor = when (tensor.dtype) {
        "float32" -> Tensor.ofFloats(tensor.shape, buffer.readFloat())
        "int32" -> Tensor.ofInts("int32", tensor.shape, buffer.readInt())
        "int8" -> Tensor.ofInt8(tensor.shape, buffer.readInt8())
        "bool" -> Tensor.ofBooleans(tensor.shape, buffer.readBoolean())
        else -> error("output ${tensor.name}: dtype ${tensor.dtype} is not handled by this sample")
    }
}
