#!/usr/bin/env node
// ONNX Runtime reference outputs for every model in scripts/models.tsv.
// Called by scripts/make_refs.sh (which installs onnxruntime-node into .cache/ort).
//
// For model NAME it writes .cache/refs/NAME/:
//   input_<k>.npy   one per model input, k in the model's input order
//   inputs.txt      lines INPUTNAME=input_<k>.npy
//   <san>.npy       one per model output; san = name with [^A-Za-z0-9._-] -> '_'
//   outputs.txt     lines OUTPUTNAME=<san>.npy (names may hold '=': split at the LAST '=')
//   preact.onnx     only when an output comes from a final Sigmoid/Softmax: the model with
//   preact.txt      that node's input as an extra output; lines TENSORNAME=<san>.npy
//   stamp           hash of model, input spec, ORT version and these scripts
// .npy files are format 1.0, little-endian, C order; 0-d arrays have shape ().
//
// Inputs are deterministic: PRNG mulberry32 seeded with FNV-1a-32 of "NAME/INPUTNAME";
// each float is ((u32 >>> 8) / 2^24 * 2 - 1) * A, i.e. uniform in [-A, A) (A from the spec).
//
// Usage: node scripts/make_refs.mjs [--force] [NAME...]
import { createRequire } from 'node:module';
import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, '..');
const cache = path.join(root, '.cache');
const ort = createRequire(path.join(cache, 'ort', 'noop.js'))('onnxruntime-node');
const python = process.env.PYTHON || 'python3';
const preactPy = path.join(here, 'add_preact_outputs.py');

if (os.endianness() !== 'LE') throw new Error('make_refs: big-endian host unsupported');

const args = process.argv.slice(2);
const force = args.includes('--force');
const only = args.filter((a) => a !== '--force');

const sha256 = (buf) => crypto.createHash('sha256').update(buf).digest('hex');
const sanitize = (name) => name.replace(/[^A-Za-z0-9._-]/g, '_');

// ---- model table -------------------------------------------------------------------
const table = ['models.tsv', 'generated_models.tsv']
  .flatMap((f) => fs.readFileSync(path.join(here, f), 'utf8').split('\n'))
  .filter((l) => l.trim() && !l.startsWith('#'))
  .map((l) => { const [name, pkg, file, sha, spec] = l.split('\t'); return { name, pkg, file, sha, spec }; });
for (const n of only) {
  if (!table.some((m) => m.name === n)) { console.error(`ERROR: make_refs: unknown model ${n}`); process.exit(1); }
}

// "a=f32[1,2];s=f32[2,1,8]~0.5;sr=i64[]:16000" -> [{name, dtype, dims, amp, value}]
function parseSpec(spec) {
  return spec.split(';').map((item) => {
    const eq = item.indexOf('=');
    const m = /^(f32|i64)\[([0-9,]*)\](?:~([0-9.]+)|:(-?[0-9]+))?$/.exec(item.slice(eq + 1));
    if (eq < 1 || !m) throw new Error(`make_refs: bad input spec item '${item}'`);
    const dims = m[2] ? m[2].split(',').map(Number) : [];
    return { name: item.slice(0, eq), dtype: m[1] === 'f32' ? 'float32' : 'int64', dims,
      amp: m[3] ? Number(m[3]) : 1, value: m[4] };
  });
}

// ---- deterministic inputs ----------------------------------------------------------
function fnv1a(str) {
  let h = 0x811c9dc5;
  for (const b of Buffer.from(str, 'utf8')) h = Math.imul(h ^ b, 0x01000193) >>> 0;
  return h;
}
function mulberry32(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return (t ^ (t >>> 14)) >>> 0;
  };
}
function makeInput(model, s) {
  const count = s.dims.reduce((a, b) => a * b, 1);
  if (s.dtype === 'int64') {
    if (s.value === undefined) throw new Error(`make_refs: ${model}/${s.name}: i64 needs :VALUE`);
    return new ort.Tensor('int64', new BigInt64Array(count).fill(BigInt(s.value)), s.dims);
  }
  const next = mulberry32(fnv1a(`${model}/${s.name}`));
  const data = new Float32Array(count);
  for (let i = 0; i < count; i++) data[i] = ((next() >>> 8) / 16777216 * 2 - 1) * s.amp;
  return new ort.Tensor('float32', data, s.dims);
}

// ---- .npy writer -------------------------------------------------------------------
const DESCR = { float32: '<f4', float64: '<f8', float16: '<f2', int64: '<i8', uint64: '<u8',
  int32: '<i4', uint32: '<u4', int16: '<i2', uint16: '<u2', int8: '|i1', uint8: '|u1', bool: '|b1' };
function writeNpy(file, tensor) {
  const descr = DESCR[tensor.type];
  if (!descr) throw new Error(`make_refs: cannot write ${tensor.type} tensor to ${file}`);
  const d = tensor.dims;
  const shape = d.length === 0 ? '()' : d.length === 1 ? `(${d[0]},)` : `(${d.join(', ')})`;
  let header = `{'descr': '${descr}', 'fortran_order': False, 'shape': ${shape}, }`;
  header += ' '.repeat((64 - ((10 + header.length + 1) % 64)) % 64) + '\n'; // align data to 64
  const pre = Buffer.from([0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59, 1, 0, 0, 0]); // \x93NUMPY v1.0
  pre.writeUInt16LE(header.length, 8);
  const { buffer, byteOffset, byteLength } = tensor.data;
  fs.writeFileSync(file, Buffer.concat([pre, Buffer.from(header, 'latin1'),
    Buffer.from(buffer, byteOffset, byteLength)]));
}

// ---- one model ---------------------------------------------------------------------
const opts = { executionProviders: ['cpu'], graphOptimizationLevel: 'all', logSeverityLevel: 3 };
const dimStr = (dims) => `[${dims.map((x) => (x === '' || x === undefined ? '?' : x)).join(',')}]`;
const scriptHash = sha256(fs.readFileSync(fileURLToPath(import.meta.url)) + fs.readFileSync(preactPy));

async function makeRefs(m) {
  const modelPath = path.join(cache, 'models', `${m.name}.onnx`);
  if (!fs.existsSync(modelPath)) throw new Error(`make_refs: ${modelPath} missing: run scripts/fetch_models.sh`);
  const bytes = fs.readFileSync(modelPath);
  if (m.pkg !== 'generated' && sha256(bytes) !== m.sha) throw new Error(`make_refs: ${modelPath} has the wrong sha256: run scripts/fetch_models.sh`);
  const outDir = path.join(cache, 'refs', m.name);
  const stamp = sha256([m.pkg === 'generated' ? sha256(bytes) : m.sha, m.spec, ort.env.versions.node, scriptHash].join('\n'));
  if (!force && fs.existsSync(path.join(outDir, 'stamp')) &&
      fs.readFileSync(path.join(outDir, 'stamp'), 'utf8').trim() === stamp) return false;

  const tmp = `${outDir}.tmp`;
  fs.rmSync(tmp, { recursive: true, force: true });
  fs.mkdirSync(tmp, { recursive: true });
  const session = await ort.InferenceSession.create(modelPath, opts);

  // inputs: the spec must name every model input, with matching dtype and fixed dims
  const spec = parseSpec(m.spec);
  const feeds = {};
  const inLines = [];
  session.inputNames.forEach((name, k) => {
    const s = spec.find((x) => x.name === name);
    const meta = session.inputMetadata.find((x) => x.name === name) ?? session.inputMetadata[k];
    if (!s) throw new Error(`make_refs: ${m.name}: no spec for input '${name}'`);
    const ok = meta.type === s.dtype && meta.shape.length === s.dims.length &&
      meta.shape.every((d, i) => typeof d !== 'number' || d === s.dims[i]);
    if (!ok) throw new Error(`make_refs: ${m.name}: spec ${s.dtype}${dimStr(s.dims)} for '${name}' ` +
      `does not fit the model's ${meta.type}${dimStr(meta.shape)}`);
    feeds[name] = makeInput(m.name, s);
    writeNpy(path.join(tmp, `input_${k}.npy`), feeds[name]);
    inLines.push(`${name}=input_${k}.npy`);
    console.log(`  in  ${name}: ${meta.type}${dimStr(meta.shape)} fed ${dimStr(s.dims)}`);
  });
  for (const s of spec) if (!session.inputNames.includes(s.name)) throw new Error(`make_refs: ${m.name}: model has no input '${s.name}'`);
  fs.writeFileSync(path.join(tmp, 'inputs.txt'), inLines.join('\n') + '\n');

  // outputs: one .npy each, names sanitized; refuse clashing file names
  const used = new Set(inLines.map((l) => l.slice(l.lastIndexOf('=') + 1)));
  const fileFor = (name) => {
    const file = `${sanitize(name)}.npy`;
    if (used.has(file)) throw new Error(`make_refs: ${m.name}: file name clash for '${name}' (${file})`);
    used.add(file);
    return file;
  };
  const results = await session.run(feeds);
  const outLines = session.outputNames.map((name, k) => {
    const t = results[name];
    const meta = session.outputMetadata.find((x) => x.name === name) ?? session.outputMetadata[k];
    const file = fileFor(name);
    writeNpy(path.join(tmp, file), t);
    console.log(`  out ${name}: ${meta.type}${dimStr(meta.shape)} got ${t.type}${dimStr(t.dims)}`);
    return `${name}=${file}`;
  });
  fs.writeFileSync(path.join(tmp, 'outputs.txt'), outLines.join('\n') + '\n');
  await session.release();

  // pre-activations of final Sigmoid/Softmax outputs, from a patched copy of the model
  const preOnnx = path.join(tmp, 'preact.onnx');
  const extra = execFileSync(python, [preactPy, modelPath, preOnnx], { encoding: 'utf8' })
    .split('\n').filter(Boolean);
  if (extra.length) {
    const pre = await ort.InferenceSession.create(preOnnx, opts);
    const r = await pre.run(feeds);
    const preLines = extra.map((name) => {
      const file = fileFor(name);
      writeNpy(path.join(tmp, file), r[name]);
      console.log(`  pre ${name}: ${r[name].type}${dimStr(r[name].dims)}`);
      return `${name}=${file}`;
    });
    // the patched model must still give the same outputs
    for (const name of session.outputNames) {
      const a = results[name].data, b = r[name].data;
      let diff = 0;
      for (let i = 0; i < a.length; i++) diff = Math.max(diff, Math.abs(Number(a[i]) - Number(b[i])));
      if (a.length !== b.length || diff > 1e-5) throw new Error(`make_refs: ${m.name}: preact model output '${name}' differs (${diff})`);
    }
    await pre.release();
    fs.writeFileSync(path.join(tmp, 'preact.txt'), preLines.join('\n') + '\n');
  }

  fs.writeFileSync(path.join(tmp, 'stamp'), stamp + '\n');
  fs.rmSync(outDir, { recursive: true, force: true });
  fs.renameSync(tmp, outDir);
  return true;
}

let made = 0;
for (const m of table) {
  if (only.length && !only.includes(m.name)) continue;
  const t0 = Date.now();
  console.log(`make_refs: ${m.name}`);
  try {
    if (!(await makeRefs(m))) { console.log('  up to date'); continue; }
  } catch (e) {  // our own errors read best without a stack trace
    console.error(String(e.message).startsWith('make_refs:') ? `ERROR: ${e.message}` : e);
    process.exit(1);
  }
  made++;
  console.log(`  written in ${Date.now() - t0} ms`);
}
console.log(`make_refs: ${made} model(s) written, ORT ${ort.env.versions.node}, in ${path.join(cache, 'refs')}`);
