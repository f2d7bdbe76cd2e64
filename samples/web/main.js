// edgeport web sample: load manifest.json + a .tflite from an edgeport output directory, feed it the parity
// sample with LiteRT.js (wasm CPU), show the outputs, their error against the PyTorch reference, and timing.
// Query: ?out=<url of the output directory, default /out/>&variant=<fp32 (default)|fp16|...>&runs=<timed runs>
// The result is also left in window.edgeportResult (and body[data-state]) for automated checks.
import {loadAndCompile, loadLiteRt, Tensor} from '@litertjs/core';

// max_rel_err = max|out - ref| / max|ref|, as edgeport's report computes it; budgets as edgeport's defaults.
const MAX_REL_ERR_BUDGET = {fp32: 1e-4, fp16: 2e-2, bf16: 5e-2};
const TYPED = {float32: Float32Array, int32: Int32Array, uint8: Uint8Array, int8: Int8Array};
const LITERTJS_DTYPES = new Set(['float32', 'int32', 'uint8']);  // what LiteRT.js tensors can hold

const params = new URLSearchParams(location.search);
const outDir = new URL(params.get('out') || '/out/', location.href);
const variant = params.get('variant') || 'fp32';
const runs = Number(params.get('runs') || 20);

const $ = (id) => document.getElementById(id);

async function fetchOk(url) {
  const response = await fetch(url);
  if (!response.ok) throw new Error(`${url}: HTTP ${response.status}`);
  return response;
}

async function readTensorFile(dir, entry) {
  const bytes = await (await fetchOk(new URL(entry.file, dir))).arrayBuffer();
  return new TYPED[entry.dtype](bytes);  // the files are little-endian, as every browser is
}

// Float sample values -> the artifact's quantized integers (real = (q - zero_point) * scale).
function toRuntime(values, tensor) {
  if (!tensor.quantization) return values;
  const {scale, zero_point: zero} = tensor.quantization;
  const q = new TYPED[tensor.dtype](values.length);
  const [lo, hi] = tensor.dtype === 'uint8' ? [0, 255] : [-128, 127];
  values.forEach((v, i) => { q[i] = Math.min(hi, Math.max(lo, Math.round(v / scale + zero))); });
  return q;
}

function toFloat(values, tensor) {
  if (!tensor.quantization) return Float64Array.from(values);
  const {scale, zero_point: zero} = tensor.quantization;
  return Float64Array.from(values, (q) => (q - zero) * scale);
}

function compare(out, ref) {
  let maxAbs = 0, maxRef = 0, dot = 0, nOut = 0, nRef = 0;
  for (let i = 0; i < ref.length; i++) {
    maxAbs = Math.max(maxAbs, Math.abs(out[i] - ref[i]));
    maxRef = Math.max(maxRef, Math.abs(ref[i]));
    dot += out[i] * ref[i]; nOut += out[i] * out[i]; nRef += ref[i] * ref[i];
  }
  const cosine = nOut && nRef ? dot / Math.sqrt(nOut * nRef) : (nOut === nRef ? 1 : 0);
  return {maxAbsErr: maxAbs, maxRelErr: maxRef ? maxAbs / maxRef : maxAbs, cosine};
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

async function main() {
  const manifest = await (await fetchOk(new URL('manifest.json', outDir))).json();
  const artifact = manifest.artifacts.find((a) => a.target === 'litert' && a.variant === variant);
  if (!artifact) throw new Error(`no litert ${variant} artifact in manifest.json`);
  if (!artifact.parity_sample) throw new Error(`the ${variant} artifact has no parity sample it can take`);
  for (const t of [...artifact.inputs, ...artifact.outputs]) {
    if (!LITERTJS_DTYPES.has(t.dtype)) throw new Error(`${t.name} is ${t.dtype}: LiteRT.js supports ${[...LITERTJS_DTYPES]}`);
  }
  $('artifact').textContent = `${manifest.model} · ${artifact.path} (${artifact.variant})`;

  const indexUrl = new URL(artifact.parity_sample, outDir);
  const index = await (await fetchOk(indexUrl)).json();
  const sampleInputs = await Promise.all(index.inputs.map((e) => readTensorFile(indexUrl, e)));
  const references = await Promise.all(index.outputs.map((e) => readTensorFile(indexUrl, e)));

  $('status').textContent = 'loading LiteRT.js…';
  await loadLiteRt(new URL('./node_modules/@litertjs/core/wasm/', location.href).href);
  const loadStart = performance.now();
  const model = await loadAndCompile(new URL(artifact.path, outDir).href, {accelerator: 'wasm'});
  const loadMs = performance.now() - loadStart;

  // Named inputs/outputs: the .tflite signature keys that manifest.json lists, in the model's order.
  const feed = {};
  artifact.inputs.forEach((t, i) => { feed[t.name] = new Tensor(toRuntime(sampleInputs[i], t), t.shape); });
  const runOnce = async () => {
    const result = await model.run(feed);
    const arrays = artifact.outputs.map((t) => result[t.name].toTypedArray().slice());
    Object.values(result).forEach((tensor) => tensor.delete());
    return arrays;
  };
  $('status').textContent = 'running…';
  const outputs = await runOnce();  // warm-up, and the outputs we check
  const times = [];
  for (let i = 0; i < runs; i++) {
    const start = performance.now();
    await runOnce();
    times.push(performance.now() - start);
  }
  Object.values(feed).forEach((tensor) => tensor.delete());
  model.delete();

  const rows = artifact.outputs.map((t, i) => ({
    name: t.name, shape: t.shape, values: Array.from(toFloat(outputs[i], t)),
    ...compare(toFloat(outputs[i], t), Float64Array.from(references[i])),
  }));
  const maxRelErr = Math.max(...rows.map((r) => r.maxRelErr));
  const budget = MAX_REL_ERR_BUDGET[variant];
  return {
    model: manifest.model, artifact: artifact.path, variant, outputs: rows, maxRelErr,
    maxAbsErr: Math.max(...rows.map((r) => r.maxAbsErr)), budget: budget ?? null,
    passed: budget === undefined ? null : maxRelErr <= budget,
    loadMs, medianMs: median(times), runs,
  };
}

function addRow(table, tag, texts) {
  const row = table.insertRow();
  for (const text of texts) {
    const cell = document.createElement(tag);
    cell.textContent = text;
    row.appendChild(cell);
  }
}

function show(result) {
  const verdict = $('verdict');
  verdict.textContent = result.passed === null ? `max rel err ${result.maxRelErr.toExponential(2)}`
    : `${result.passed ? 'PASS' : 'FAIL'}: max rel err ${result.maxRelErr.toExponential(2)} (budget ${result.budget})`;
  verdict.className = result.passed === false ? 'fail' : 'pass';
  // Output names come from the model (and manifest.json): text nodes only, never parsed as HTML.
  const table = $('outputs');
  table.replaceChildren();
  addRow(table, 'th', ['output', 'shape', 'first values', 'max abs err', 'max rel err', 'cosine']);
  for (const r of result.outputs) {
    addRow(table, 'td', [String(r.name), r.shape.join('×'),
      r.values.slice(0, 4).map((v) => v.toPrecision(5)).join(', ') + (r.values.length > 4 ? ', …' : ''),
      r.maxAbsErr.toExponential(2), r.maxRelErr.toExponential(2), r.cosine.toFixed(6)]);
  }
  $('status').textContent = `LiteRT.js wasm CPU · load+compile ${result.loadMs.toFixed(1)} ms · ` +
    `run median ${result.medianMs.toFixed(3)} ms over ${result.runs} runs`;
}

main().then((result) => {
  window.edgeportResult = result;
  show(result);
  document.body.dataset.state = 'done';
}).catch((error) => {
  window.edgeportResult = {error: String(error && error.stack || error)};
  $('status').textContent = 'failed';
  $('error').textContent = String(error && error.message || error);
  document.body.dataset.state = 'error';
});
