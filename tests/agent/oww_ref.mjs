#!/usr/bin/env node
// Reference for the voice chain: openWakeWord and Silero VAD v5 streamed the way their authors
// stream them (see docs/voice.md and ../shared/MODELS.md), on ONNX Runtime (onnxruntime-node in
// .cache/ort). Used only to produce reference scores, never for timing.
//
// Usage: node tests/agent/oww_ref.mjs MODELS_DIR IN.wav OUT.txt [IN.wav OUT.txt ...]
//
// OUT.txt (text, one record per line, '#' lines are comments):
//   heads NAME...                      the heads, in column order
//   oww STEP SCORE...                  one per 80 ms step (1280 samples): one score per head
//                                      (multi-class heads: max over the non-background classes)
//   cls STEP HEAD P0 P1 ...            every class of a multi-class head at that step
//   vad STEP PROB                      one per 32 ms chunk (512 samples)
// Steps cover every whole chunk of the clip, from its first sample.
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import fs from 'node:fs';
import path from 'node:path';

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, '..', '..');
const ort = createRequire(path.join(root, '.cache', 'ort', 'noop.js'))('onnxruntime-node');

export const HEADS = ['hey_jarvis_v0.1', 'alexa_v0.1', 'hey_mycroft_v0.1', 'timer_v0.1', 'weather_v0.1'];
const opts = { executionProviders: ['cpu'], graphOptimizationLevel: 'all', logSeverityLevel: 3 };

const STEP = 1280;        // 80 ms
const MEL_CONTEXT = 480;  // 3 mel hops of the previous step
const MEL_WINDOW = 76;    // mel frames per embedding
const MEL_BINS = 32;
const EMB = 96;
const FORCED_ZERO = 5;    // first scores of a stream forced to 0
const VAD_CHUNK = 512;
const VAD_CONTEXT = 64;

// The priming noise (docs/voice.md): 4 s of int16 uniform in [-1000, 1000), drawn with
// mulberry32 seeded with 0x6f776b77; sample = (u32 % 2000) - 1000.
export function primeNoise() {
  let a = 0x6f776b77 >>> 0;
  const out = new Int16Array(4 * 16000);
  for (let i = 0; i < out.length; ++i) {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    const u = (t ^ (t >>> 14)) >>> 0;
    out[i] = (u % 2000) - 1000;
  }
  return out;
}

function readWav(file) {
  const b = fs.readFileSync(file);
  if (b.toString('ascii', 0, 4) !== 'RIFF' || b.toString('ascii', 8, 12) !== 'WAVE')
    throw new Error(`${file}: not a RIFF/WAVE file`);
  let fmt = null, data = null;
  for (let p = 12; p + 8 <= b.length;) {
    const id = b.toString('ascii', p, p + 4), n = b.readUInt32LE(p + 4);
    if (id === 'fmt ') fmt = { tag: b.readUInt16LE(p + 8), ch: b.readUInt16LE(p + 10),
      rate: b.readUInt32LE(p + 12), bits: b.readUInt16LE(p + 22) };
    if (id === 'data') data = b.subarray(p + 8, p + 8 + Math.min(n, b.length - p - 8));
    p += 8 + n + (n & 1);
  }
  if (!fmt || !data) throw new Error(`${file}: no fmt or data chunk`);
  if (fmt.tag !== 1 || fmt.ch !== 1 || fmt.rate !== 16000 || fmt.bits !== 16)
    throw new Error(`${file}: need 16 kHz mono int16 PCM`);
  const pcm = new Int16Array(data.length >> 1);
  for (let i = 0; i < pcm.length; ++i) pcm[i] = data.readInt16LE(2 * i);
  return pcm;
}

async function load(dir, name) {
  return ort.InferenceSession.create(path.join(dir, `${name}.onnx`), opts);
}

// The mel model on int16 samples (as unscaled float32); returns frames x 32 after v/10 + 2.
async function mel(sess, pcm) {
  const x = Float32Array.from(pcm);
  const r = await sess.run({ [sess.inputNames[0]]: new ort.Tensor('float32', x, [1, x.length]) });
  const y = r[sess.outputNames[0]].data;
  const out = new Float32Array(y.length);
  for (let i = 0; i < y.length; ++i) out[i] = y[i] / 10 + 2;
  return out;
}

async function embed(sess, frames76) {
  const r = await sess.run({ [sess.inputNames[0]]: new ort.Tensor('float32', frames76, [1, MEL_WINDOW, MEL_BINS, 1]) });
  return Float32Array.from(r[sess.outputNames[0]].data);
}

async function runClip(m, pcm) {
  const lines = [`heads ${HEADS.join(' ')}`];
  // Embedding buffer primed with the embeddings of the priming noise: mel over all of it, then
  // windows of 76 frames every 8 frames (only whole windows).
  const primeMel = await mel(m.mel, primeNoise());
  const primeFrames = primeMel.length / MEL_BINS;
  let emb = [];
  for (let i = 0; i + MEL_WINDOW <= primeFrames; i += 8)
    emb.push(await embed(m.emb, primeMel.slice(i * MEL_BINS, (i + MEL_WINDOW) * MEL_BINS)));
  // Mel buffer: 76 frames of 1.0.
  let melBuf = new Float32Array(MEL_WINDOW * MEL_BINS).fill(1);
  const nSteps = Math.floor(pcm.length / STEP);
  for (let s = 0; s < nSteps; ++s) {
    const from = Math.max(0, s * STEP - MEL_CONTEXT);
    const frames = await mel(m.mel, pcm.subarray(from, (s + 1) * STEP));
    const joined = new Float32Array(melBuf.length + frames.length);
    joined.set(melBuf); joined.set(frames, melBuf.length);
    melBuf = joined.slice(joined.length - MEL_WINDOW * MEL_BINS);
    emb.push(await embed(m.emb, melBuf));
    if (emb.length > 120) emb = emb.slice(emb.length - 120);
    const row = [];
    for (let h = 0; h < HEADS.length; ++h) {
      const sess = m.heads[h];
      const n = sess.inputMetadata[0].shape[1];
      const x = new Float32Array(n * EMB);
      emb.slice(emb.length - n).forEach((e, i) => x.set(e, i * EMB));
      const r = await sess.run({ [sess.inputNames[0]]: new ort.Tensor('float32', x, [1, n, EMB]) });
      const y = Float32Array.from(r[sess.outputNames[0]].data);
      if (s < FORCED_ZERO) y.fill(0);
      if (y.length === 1) {
        row.push(y[0]);
      } else {
        row.push(Math.max(...y.slice(1)));
        lines.push(`cls ${s} ${HEADS[h]} ${Array.from(y, (v) => v.toPrecision(9)).join(' ')}`);
      }
    }
    lines.push(`oww ${s} ${row.map((v) => v.toPrecision(9)).join(' ')}`);
  }
  // Silero VAD v5: [1, 64 + 512] floats in [-1, 1), state fed back, sr = 16000.
  let state = new Float32Array(2 * 128);
  const ctx = new Float32Array(VAD_CONTEXT);
  const sr = new ort.Tensor('int64', BigInt64Array.from([16000n]), []);
  for (let c = 0; c + VAD_CHUNK <= pcm.length; c += VAD_CHUNK) {
    const x = new Float32Array(VAD_CONTEXT + VAD_CHUNK);
    x.set(ctx);
    for (let i = 0; i < VAD_CHUNK; ++i) x[VAD_CONTEXT + i] = pcm[c + i] / 32768;
    ctx.set(x.subarray(x.length - VAD_CONTEXT));
    const r = await m.vad.run({ input: new ort.Tensor('float32', x, [1, x.length]),
      state: new ort.Tensor('float32', state, [2, 1, 128]), sr });
    state = Float32Array.from(r.stateN.data);
    lines.push(`vad ${c / VAD_CHUNK} ${r.output.data[0].toPrecision(9)}`);
  }
  return lines.join('\n') + '\n';
}

async function main() {
  const [dir, ...pairs] = process.argv.slice(2);
  if (!dir || pairs.length === 0 || pairs.length % 2) {
    console.error('usage: node oww_ref.mjs MODELS_DIR IN.wav OUT.txt [IN.wav OUT.txt ...]');
    process.exit(2);
  }
  const m = { mel: await load(dir, 'melspectrogram'), emb: await load(dir, 'embedding_model'),
    heads: await Promise.all(HEADS.map((h) => load(dir, h))), vad: await load(dir, 'silero_vad_v5') };
  for (let i = 0; i < pairs.length; i += 2) {
    const text = await runClip(m, readWav(pairs[i]));
    fs.writeFileSync(`${pairs[i + 1]}.tmp`, text);
    fs.renameSync(`${pairs[i + 1]}.tmp`, pairs[i + 1]);
    console.error(`oww_ref: ${path.basename(pairs[i + 1])}`);
  }
}

if (process.argv[1] === fileURLToPath(import.meta.url)) await main();
