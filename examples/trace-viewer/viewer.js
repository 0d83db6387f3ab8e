// sitsrt trace viewer: verifies a hash-chained JSONL audit log (docs/audit-log.md) in the browser
// and shows its requests token by token. No dependencies and no build step. Every string from the
// log reaches the page through textContent or attributes, never as markup, so a log cannot
// inject script or HTML.
'use strict';

const ZERO64 = '0'.repeat(64);
const $ = (sel) => document.querySelector(sel);
const SVG = 'http://www.w3.org/2000/svg';

// Element builder: h('span', {class: 'x', 'data-i': 3}, 'text', child, ...). Tags 'svg:rect' etc.
function h(tag, attrs, ...kids) {
  const e = tag.startsWith('svg:') ? document.createElementNS(SVG, tag.slice(4)) : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) if (v !== undefined && v !== null && v !== false) e.setAttribute(k, v);
  for (const k of kids.flat()) if (k !== null && k !== undefined && k !== false) e.append(k instanceof Node ? k : String(k));
  return e;
}

// ---------------------------------------------------------------------------------------------
// Canonical JSON. The writer emits each record in canonical form (lib/audit/canonical_json.cpp),
// so the hashed body is the line's own text minus its top-level "hash" member. A small parser
// (rather than JSON.parse) finds that member's exact span, keeps integers past 2^53 exact (seeds),
// and flags any deviation from canonical form, as the reference verifier does.

const NUM = /-?(?:0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?/y;

function cpLess(a, b) { // byte order of UTF-8 equals code point order (not UTF-16 unit order)
  const x = [...a], y = [...b];
  for (let k = 0; k < Math.min(x.length, y.length); k++) {
    const d = x[k].codePointAt(0) - y[k].codePointAt(0);
    if (d) return d < 0;
  }
  return x.length < y.length;
}

// The texts fmt's "{}" may give for float32 f (finite, non-zero): shortest round-trip digits, fixed
// notation for decimal exponents in [-4, 16) and d.ddde±XX otherwise. fmt 10+ switches to exponent
// notation for floats from 1e7 on, so both forms are accepted there. Searching from `from` digits
// is exact when some text of `from` + 1 digits round-trips: any shorter one would pad to `from`.
function float32Texts(f, from = 1) {
  const a = Math.abs(f), sign = f < 0 ? '-' : '';
  let digits = null, exp = 0;
  for (let p = Math.max(1, from); p <= 9 && digits === null; p++) {
    const [m, e] = a.toExponential(p - 1).split('e');
    const d = BigInt(m.replace('.', '')), e0 = +e, lo = 10n ** BigInt(p - 1);
    // The nearest p-digit decimal, then its neighbours: at a power of two the round-trip interval
    // is lopsided, so the shortest text need not be the nearest one.
    const ok = [[d, e0], d + 1n === lo * 10n ? [lo, e0 + 1] : [d + 1n, e0], d - 1n < lo ? [lo * 10n - 1n, e0 - 1] : [d - 1n, e0]]
      .map(([dd, ee]) => ({s: String(dd), ee})).filter((c) => Math.fround(Number(`${c.s[0]}.${c.s.slice(1)}e${c.ee}`)) === a);
    if (ok.length > 1) { // nearest to the exact value, ties to the even digit, as Dragonbox does
      const err = (c) => { const x = exactScaled(a) - BigInt(c.s) * 10n ** BigInt(c.ee - c.s.length + 1 + 70) * 2n ** 160n; return x < 0n ? -x : x; };
      ok.sort((x, y) => { const dx = err(x), dy = err(y); return dx < dy ? -1 : dx > dy ? 1 : (+x.s.slice(-1) % 2) - (+y.s.slice(-1) % 2); });
    }
    if (ok.length) { digits = ok[0].s.replace(/(.)0+$/, '$1'); exp = ok[0].ee; }
  }
  const n = digits.length;
  const expForm = `${sign}${digits[0]}${n > 1 ? '.' + digits.slice(1) : ''}e${exp < 0 ? '-' : '+'}${String(Math.abs(exp)).padStart(2, '0')}`;
  if (exp < -4 || exp >= 16) return [expForm];
  let fixed;
  if (exp >= n - 1) fixed = digits + '0'.repeat(exp - n + 1);
  else if (exp >= 0) fixed = digits.slice(0, exp + 1) + '.' + digits.slice(exp + 1);
  else fixed = '0.' + '0'.repeat(-exp - 1) + digits;
  return exp >= 7 ? [sign + fixed, expForm] : [sign + fixed];
}

// a (a positive float32) times 2^160 * 10^70, exactly: a common scale for every float32 and every
// decimal candidate of at most 9 digits.
function exactScaled(a) {
  const dv = new DataView(new ArrayBuffer(4));
  dv.setFloat32(0, a);
  const bits = dv.getUint32(0), be = (bits >>> 23) & 255, frac = BigInt(bits & 0x7fffff);
  const [m, q] = be ? [frac | 0x800000n, be - 150] : [frac, -149];
  return m * 2n ** BigInt(q + 160) * 10n ** 70n;
}

// Returns {rec, body, canon}: canon is null for a canonical line, else why not. Throws SyntaxError
// for text that is not JSON.
function parseLine(s) {
  let i = 0, canon = null, hashAt = null;
  const bad = (why) => { canon = canon || why; };
  const fail = (why) => { throw new SyntaxError(`${why} at column ${i + 1}`); };
  const ws = () => {
    const st = i;
    for (let c = s.charCodeAt(i); c === 32 || c === 9 || c === 10 || c === 13; c = s.charCodeAt(++i));
    if (i > st) bad('whitespace between tokens');
  };
  function str() {
    let out = '', st = ++i;
    for (;;) {
      const c = s.charCodeAt(i);
      if (Number.isNaN(c)) fail('unterminated string');
      if (c === 34) { out += s.slice(st, i++); return out; }
      if (c < 32) fail('control character in a string');
      if (c !== 92) { i++; continue; }
      out += s.slice(st, i);
      const e = s[i + 1];
      i += 2;
      const simple = {'"': '"', '\\': '\\', '/': '/', b: '\b', f: '\f', n: '\n', r: '\r', t: '\t'}[e];
      if (simple !== undefined) {
        if (e === '/') bad('an escaped "/"');
        out += simple;
      } else if (e === 'u') {
        const hex = s.substr(i, 4);
        if (!/^[0-9a-fA-F]{4}$/.test(hex)) fail('bad \\u escape');
        const u = parseInt(hex, 16);
        i += 4;
        // nlohmann writes \u00XX (lowercase) only for controls without a short escape.
        if (u >= 32 || /[A-F]/.test(hex) || [8, 9, 10, 12, 13].includes(u)) bad('a \\u escape the writer never makes');
        if (u >= 0xdc00 && u <= 0xdfff) fail('lone surrogate');
        if (u >= 0xd800 && u <= 0xdbff) {
          const lo = /^\\u(d[c-f][0-9a-f]{2})/i.exec(s.substr(i, 6));
          if (!lo) fail('lone surrogate');
          out += String.fromCharCode(u, parseInt(lo[1], 16));
          i += 6;
        } else out += String.fromCharCode(u);
      } else fail('bad escape');
      st = i;
    }
  }
  function num() {
    NUM.lastIndex = i;
    const m = NUM.exec(s);
    if (!m) fail('unexpected character');
    const t = m[0];
    i += t.length;
    if (!m[1] && !m[2]) {
      if (t === '-0') bad('"-0"');
      const v = Number(t);
      if (Number.isSafeInteger(v)) return v;
      const b = BigInt(t);
      if (b < -(2n ** 63n) || b >= 2n ** 64n) bad('an integer outside 64 bits');
      return b;
    }
    const v = Number(t), f = Math.fround(v);
    if (!Number.isFinite(f)) bad('a number outside float32 range');
    else if (f === 0) bad('zero written as ' + t);
    else if (!float32Texts(f, t.replace(/e.*|[-.]/g, '').replace(/^0+/, '').length - 1).includes(t)) bad(`${t} is not the shortest float32 text`);
    return v;
  }
  function value(depth) {
    if (depth > 1000) fail('nesting too deep');
    ws();
    const c = s[i];
    if (c === '"') return str();
    if (c === '{' || c === '[') {
      const obj = c === '{', out = obj ? Object.create(null) : [];
      i++;
      ws();
      if (s[i] === (obj ? '}' : ']')) { i++; return out; }
      let last = null;
      for (;;) {
        if (obj) {
          ws();
          const at = i;
          if (s[i] !== '"') fail('expected a key');
          const k = str();
          ws();
          if (s[i++] !== ':') fail("expected ':'");
          out[k] = value(depth + 1);
          if (last !== null && !cpLess(last, k)) bad(last === k ? `duplicate key "${k}"` : 'keys out of order');
          last = k;
          if (depth === 0 && k === 'hash') hashAt = [at, i];
        } else out.push(value(depth + 1));
        ws();
        const d = s[i++];
        if (d === ',') continue;
        if (d === (obj ? '}' : ']')) return out;
        i--;
        fail(`expected ',' or '${obj ? '}' : ']'}'`);
      }
    }
    for (const [w, v] of [['true', true], ['false', false], ['null', null]]) {
      if (s.startsWith(w, i)) { i += w.length; return v; }
    }
    return num();
  }
  const rec = value(0);
  ws();
  if (i < s.length) fail('text after the value');
  let body = s;
  if (hashAt) {
    let [a, b] = hashAt;
    if (s[a - 1] === ',') a--; else if (s[b] === ',') b++;
    body = s.slice(0, a) + s.slice(b);
  }
  return {rec, body, canon};
}

// ---------------------------------------------------------------------------------------------
// Loading: bytes of one or more files, split into lines as lib/audit/verify.cpp does.

function splitLines(files) {
  const dec = new TextDecoder('utf-8', {fatal: true, ignoreBOM: true}); // a BOM or bad UTF-8 is a change
  const lines = [];
  files.forEach((f, file) => {
    const b = f.bytes;
    for (let start = 0, number = 1; start < b.length; number++) {
      const nl = b.indexOf(10, start), end = nl < 0 ? b.length : nl;
      const L = {file, number, complete: nl >= 0, rec: null};
      try {
        L.text = dec.decode(b.subarray(start, end));
        Object.assign(L, parseLine(L.text));
        const seq = L.rec && L.rec.seq;
        if (typeof L.rec !== 'object' || Array.isArray(L.rec) || !(Number.isInteger(seq) || typeof seq === 'bigint')) {
          L.rec = null;
          L.error = 'not a JSON audit record';
        }
      } catch (e) {
        L.rec = null;
        L.error = e instanceof SyntaxError ? 'not a JSON audit record' : String(e);
      }
      lines.push(L);
      if (nl < 0) break;
      start = nl + 1;
    }
  });
  return lines;
}

// FILE, FILE.1, FILE.2, ... whatever order a file picker or a drop delivers them in.
function seriesOrder(files) {
  const key = (f) => { const m = /^(.*?)(?:\.(\d+))?$/.exec(f.name); return [m[1], m[2] ? +m[2] : 0]; };
  return [...files].sort((a, b) => {
    const [x, n] = key(a), [y, m] = key(b);
    return x < y ? -1 : x > y ? 1 : n - m;
  });
}

// Percent-decoded bytes of URL text: a key in "#key=..." may hold any bytes, not only UTF-8.
function pctBytes(text) {
  const out = [], enc = new TextEncoder();
  for (let k = 0; k < text.length; k++) {
    if (text[k] === '%' && /^[0-9a-fA-F]{2}$/.test(text.substr(k + 1, 2))) {
      out.push(parseInt(text.substr(k + 1, 2), 16));
      k += 2;
    } else {
      const cp = text.codePointAt(k);
      if (cp > 0xffff) k++;
      out.push(...enc.encode(String.fromCodePoint(cp)));
    }
  }
  return new Uint8Array(out);
}
const pctText = (text) => new TextDecoder().decode(pctBytes(text));
// A key is the key file's bytes less one trailing newline, as --audit-key-file reads it.
const lessNewline = (b) => (b[b.length - 1] === 10 ? b.subarray(0, b.length - 1) : b);

// ---------------------------------------------------------------------------------------------
// Verification, mirroring lib/audit/verify.cpp (same order of checks, same kinds of failure).

const hex = (buf) => [...new Uint8Array(buf)].map((b) => b.toString(16).padStart(2, '0')).join('');

async function verify(files, lines, key, excerpt) {
  const where = (L) => `${files[L.file].name} line ${L.number}`;
  const out = (state, text, L) => ({state, text, bad: L || null});
  const tampered = (L, kind, why) => out('tampered', `tampered: ${where(L)}: ${kind}: ${why}`, L);
  if (!globalThis.crypto || !crypto.subtle) {
    return out('unavailable', 'cannot verify: this page has no WebCrypto (crypto.subtle needs a secure context: ' +
      'https, http://localhost or file://); records are shown unchecked');
  }
  for (let f = 0; f < files.length; f++) {
    if (!lines.some((L) => L.file === f)) {
      return out('tampered', `tampered: ${files[f].name} line 1: file order: the file is empty (every log file starts with a header record)`);
    }
  }
  const first = lines[0].rec;
  const auth = !!first && first.type === 'file' && first.alg === 'hmac-sha256';
  let note = '';
  if (auth && !key.length) return out('key', 'key needed: the log is HMAC-authenticated (alg hmac-sha256): enter its key');
  if (!auth && key.length) note = ' (the key was not used: the log is not HMAC-authenticated)';
  const enc = new TextEncoder();
  const hk = auth ? await crypto.subtle.importKey('raw', key, {name: 'HMAC', hash: 'SHA-256'}, false, ['sign']) : null;
  // Each record's hash depends only on its own prev and body, so all can be computed at once.
  const hashes = await Promise.all(lines.map((L) => {
    if (!L.rec || typeof L.rec.prev !== 'string') return null;
    const data = enc.encode(L.rec.prev + L.body);
    return (hk ? crypto.subtle.sign('HMAC', hk, data) : crypto.subtle.digest('SHA-256', data)).then(hex);
  }));
  const remaining = new Map(); // seq -> count of lines not yet walked, to tell reordering from deletion
  for (const L of lines) if (L.rec) remaining.set(String(L.rec.seq), (remaining.get(String(L.rec.seq)) || 0) + 1);
  let prev = ZERO64, seq = 0n, fileIndex = 0, count = 0, gaps = 0;
  for (let k = 0; k < lines.length; k++) {
    const L = lines[k], firstInFile = L.number === 1, r = L.rec;
    if (!L.complete) {
      if (firstInFile) return tampered(L, 'file order', 'the file does not start with a file header record (its only line is incomplete)');
      if (L.file + 1 !== files.length) return tampered(L, 'file order', 'the last line of this file is incomplete, yet later files follow');
      return out('truncated', `truncated tail: ${where(L)} is incomplete (the writer stopped mid-record); ` +
        `the ${count} records before it verify${gaps ? ` (an excerpt with ${gaps} gap(s))` : ''}`, L);
    }
    if (!r) {
      return tampered(L, firstInFile ? 'file order' : 'modified', firstInFile
        ? 'the file does not start with a file header record: not an audit log file, or not part of this log'
        : L.error);
    }
    if (L.canon) return tampered(L, 'modified', `not in canonical form (${L.canon})`);
    if (typeof r.hash !== 'string' || typeof r.prev !== 'string' || typeof r.type !== 'string') {
      return tampered(L, 'modified', 'lacks type, prev or hash');
    }
    if (k === 0 && r.type !== 'file') return tampered(L, 'file order', 'the log does not start with a file header');
    const s = BigInt(r.seq);
    remaining.set(String(s), remaining.get(String(s)) - 1);
    if (hashes[k] !== r.hash) {
      if (auth && k === 0) return out('key', `wrong key: the HMAC of the header (${where(L)}) does not match this key (or the header was changed)`, L);
      return tampered(L, 'modified', auth ? 'HMAC does not match the record (modified, forged, or the wrong key)'
        : 'hash does not match the record (modified or forged)');
    }
    if (s > seq && excerpt) {
      gaps++; // an excerpt skips other requests' records: this link cannot be checked
    } else if (s > seq) {
      return remaining.get(String(seq))
        ? tampered(L, 'reordered', `record ${s} appears where record ${seq} belongs (records were reordered or moved)`)
        : tampered(L, 'deleted', `records ${seq}..${s - 1n} are missing (deleted before this line)` +
          '; for an excerpt of one request, tick "excerpt"');
    } else if (s < seq) {
      return tampered(L, 'inserted', `record number ${s} repeats or comes late (expected ${seq})`);
    } else if (r.prev !== prev) {
      return tampered(L, 'inserted', "prev does not match the previous record's hash (a record was inserted or replaced before this line)");
    }
    if (!excerpt || k === 0) {
      if (firstInFile !== (r.type === 'file')) {
        return tampered(L, 'file order', firstInFile ? 'the first line of this file is not its header' : 'a file header in the middle of a file');
      }
      if (r.type === 'file') {
        if (r.file_index !== fileIndex) return tampered(L, 'file order', `file header says index ${r.file_index}, expected ${fileIndex} (a rotated file is missing or out of order)`);
        fileIndex++;
      }
    }
    prev = r.hash;
    seq = s + 1n;
    count++;
  }
  const nf = `${files.length} file${files.length > 1 ? 's' : ''}`, alg = auth ? 'HMAC-SHA-256' : 'SHA-256';
  if (gaps) {
    return out('excerpt', `records verified: ${count} records of an excerpt (${alg}, seq ${lines[0].rec.seq}..${seq - 1n}, ` +
      `${gaps} gap(s)): each record's hash checked; links checked only between consecutive records`);
  }
  return out('verified', `chain verified: ${count} records in ${nf} (${alg}), seq 0..${seq - 1n}, every link checked; ` +
    `last hash ${prev.slice(0, 16)}…${note}`);
}

// ---------------------------------------------------------------------------------------------
// Model: records grouped by request.

function buildModel(lines) {
  const reqs = new Map(), texts = new Map();
  const get = (id) => {
    if (!reqs.has(id)) reqs.set(id, {id, request: null, end: null, shadow: null, tokens: [], anomalies: [], evidence: new Map()});
    return reqs.get(id);
  };
  for (const L of lines) {
    const r = L.rec;
    if (!r || typeof r.req !== 'string') continue; // file headers and anything without a request
    const q = get(r.req), item = {r, L};
    if (r.type === 'request') q.request = item;
    else if (r.type === 'end') q.end = item;
    else if (r.type === 'shadow') q.shadow = item;
    else if (r.type === 'token' && Number.isInteger(r.i)) {
      q.tokens.push(item);
      if (typeof r.text === 'string' && !texts.has(r.id)) texts.set(r.id, r.text);
    } else if (r.type === 'anomaly') q.anomalies.push(item);
    else if (r.type === 'evidence' && Number.isInteger(r.i) && Array.isArray(r.scores)) q.evidence.set(r.i, item);
  }
  for (const q of reqs.values()) q.tokens.sort((a, b) => a.r.i - b.r.i);
  return {reqs, texts};
}

// ---------------------------------------------------------------------------------------------
// Formatting helpers.

const num = (v) => (typeof v === 'number' ? v : typeof v === 'bigint' ? Number(v) : NaN);
const ms = (ns) => `${(num(ns) / 1e6).toFixed(num(ns) < 1e7 ? 2 : 1)} ms`;
const pct = (p) => (p >= 0.995 ? '100' : p >= 0.1 ? (p * 100).toFixed(1) : (p * 100).toPrecision(2)) + '%';
const jsonText = (v) => JSON.stringify(v, (k, x) => (typeof x === 'bigint' ? x.toString() : x));
const prob = (lp) => Math.exp(num(lp));

// Probability colour: red (unlikely) through amber to green (likely); same bands as `audit show`
// (0.1 and 0.5), interpolated so nearby probabilities look alike.
const STOPS = [[0, [240, 150, 150]], [0.1, [247, 196, 140]], [0.5, [250, 232, 150]], [1, [190, 230, 185]]];
function pColor(p) {
  p = Math.min(1, Math.max(0, p || 0));
  let k = 1;
  while (k < STOPS.length - 1 && p > STOPS[k][0]) k++;
  const [a, ca] = STOPS[k - 1], [b, cb] = STOPS[k], t = (p - a) / (b - a);
  return `rgb(${ca.map((c, j) => Math.round(c + (cb[j] - c) * t)).join(',')})`;
}
function heatColor(x) { // x in [-1, 1]: blue for negative, orange for positive attribution
  const c = x >= 0 ? [235, 120, 40] : [60, 110, 220], t = Math.min(1, Math.abs(x));
  return `rgba(${c.join(',')},${(0.08 + 0.8 * t).toFixed(3)})`;
}

// Token text as DOM: the characters themselves (so the page's text is the generated text and can
// be searched and copied), with line breaks, tabs and controls marked by CSS-only glyphs. Labels
// (compact) keep only the glyphs, so they stay on one line.
function textInto(parent, text, compact) {
  if (text === '') { parent.classList.add('empty'); return parent; }
  const wsOnly = /^ +$/.test(text);
  for (const part of text.split(compact ? /([\x00-\x1f\x7f]| +)/ : /([\x00-\x1f\x7f])/)) {
    if (!part) continue;
    if (part === '\n' || part === '\t') parent.append(h('span', {class: part === '\n' ? 'nl' : 'tab'}, compact ? '' : part));
    else if (part.length === 1 && /[\x00-\x1f\x7f]/.test(part)) {
      parent.append(h('span', {class: 'ctl', 'data-c': '\\x' + part.charCodeAt(0).toString(16).padStart(2, '0')}, part));
    } else parent.append(wsOnly || (compact && part[0] === ' ') ? h('span', {class: 'ws'}, part) : part);
  }
  return parent;
}
const tokenLabel = (texts, id) => (texts.has(id) ? textInto(h('span', {class: 'lbl'}), texts.get(id), true) : h('span', {class: 'lbl id'}, `#${id}`));

// ---------------------------------------------------------------------------------------------
// Rendering.

const view = {files: [], lines: [], pieces: new Map(), key: new Uint8Array(0), apiKey: '', excerpt: false, tipFor: null, bad: null, width: 0};

function chip(label, value, title) {
  return h('span', {class: 'chip', title}, h('b', null, label), ' ', value);
}

function samplingText(s) {
  if (!s) return '—';
  const parts = [num(s.temperature) === 0 ? 'greedy' : `temp ${s.temperature}`];
  if (num(s.temperature) !== 0) {
    if (s.top_k) parts.push(`top-k ${s.top_k}`);
    if (num(s.top_p) < 1) parts.push(`top-p ${s.top_p}`);
    if (num(s.min_p) > 0) parts.push(`min-p ${s.min_p}`);
  }
  if (s.repeat_penalty !== undefined && num(s.repeat_penalty) !== 1) parts.push(`repeat ${s.repeat_penalty}`);
  if (s.seed !== undefined) parts.push(`seed ${s.seed}`);
  if (s.max_new_tokens !== undefined) parts.push(`max ${s.max_new_tokens}`);
  return parts.join(' · ');
}

function chatBlock(chat) {
  const msgs = Array.isArray(chat && chat.messages) ? chat.messages : [];
  if (!msgs.length) return null;
  const content = (c) => (typeof c === 'string' ? c : Array.isArray(c)
    ? c.map((p) => (p && typeof p.text === 'string' ? p.text : jsonText(p))).join('') : jsonText(c));
  return h('details', {class: 'chat'}, h('summary', null, `chat: ${msgs.length} message${msgs.length > 1 ? 's' : ''}`),
    msgs.map((m) => h('div', {class: 'msg'}, h('span', {class: 'role'}, String(m && m.role)), h('div', {class: 'content'}, content(m && m.content)))));
}

function requestCard(q, model, bad) {
  const req = q.request && q.request.r, end = q.end && q.end.r, texts = model.texts;
  const meta = (req && req.meta) || {}, sha = req && req.model && req.model.sha256;
  const card = h('section', {class: 'card', 'data-req': q.id});
  const head = h('div', {class: 'card-head'}, h('h2', null, h('span', {class: 'mono'}, q.id)),
    meta.tenant || meta.user ? h('span', {class: 'who'}, `${meta.tenant || '—'} / ${meta.user || '—'}`) : null,
    Array.isArray(meta.tags) && meta.tags.length ? h('span', {class: 'tags'}, meta.tags.map((t) => h('span', {class: 'tag'}, String(t)))) : null);
  const chips = h('div', {class: 'chips'});
  if (req) {
    const path = req.model && typeof req.model.path === 'string' ? req.model.path.split('/').pop() : '';
    chips.append(chip('model', `${path} ${typeof sha === 'string' ? sha.slice(0, 12) : ''}`.trim(), typeof sha === 'string' ? `sha256 ${sha}` : null),
      chip('level', req.level ?? '—'), chip('sampling', samplingText(req.sampling)));
    if (req.engine) chips.append(chip('engine', [req.engine.isa, req.engine.weights, req.engine.kv && `kv ${req.engine.kv}`].filter(Boolean).join(' · '), jsonText(req.engine)));
  } else chips.append(chip('request', 'no request record'));
  if (end) {
    const gen = num(end.generated_tokens), decode = num(end.decode_ns), prefill = num(end.prefill_ns);
    chips.append(chip('finish', `${end.finish ?? '—'}${end.error ? `: ${end.error}` : ''}`),
      chip('tokens', `${end.prompt_tokens} prompt → ${end.generated_tokens} generated`),
      chip('prefill', `${ms(prefill)}${prefill > 0 ? ` · ${(num(end.prompt_tokens) / prefill * 1e9).toFixed(1)} tok/s` : ''}`),
      // As the CLI reports it: the first token comes out of prefill, decode makes the rest.
      chip('decode', `${ms(decode)}${decode > 0 && gen > 1 ? ` · ${((gen - 1) / decode * 1e9).toFixed(1)} tok/s` : ''}`),
      chip('total', ms(end.total_ns)));
  } else chips.append(chip('finish', 'no end record (still running, or cut off)'));
  const sh = q.shadow && q.shadow.r;
  if (sh) chips.append(chip('shadow', `max |Δlp| ${num(sh.max_abs_lp_diff).toFixed(3)} · mean KL ${num(sh.mean_topk_kl).toFixed(4)}${sh.tripped ? ' · tripped' : ''}`));
  card.append(head, chips);
  if (req && req.chat) card.append(chatBlock(req.chat) || '');
  const mine = [q.request, q.end, q.shadow, ...q.anomalies, ...q.evidence.values()].find((x) => x && x.L === bad);
  if (mine) card.append(h('div', {class: 'banner bad'}, `This request's ${mine.r.type} record (line ${bad.number}) failed verification.`));

  // Tokens, with anomalies and evidence attached by index.
  const anomaliesAt = new Map();
  for (const a of q.anomalies) anomaliesAt.set(a.r.i, [...(anomaliesAt.get(a.r.i) || []), a.r]);
  const toks = h('div', {class: 'tokens', role: 'list'});
  const spans = new Map();
  for (const t of q.tokens) {
    const cls = ['tok'];
    if (anomaliesAt.has(t.r.i)) cls.push('anomaly');
    if (q.evidence.has(t.r.i)) cls.push('has-ev');
    if (t.L === bad) cls.push('tampered');
    const s = textInto(h('span', {class: cls.join(' '), 'data-i': t.r.i, tabindex: 0, role: 'listitem'}), typeof t.r.text === 'string' ? t.r.text : '');
    s.style.backgroundColor = pColor(prob(t.r.lp));
    spans.set(t.r.i, s);
    toks.append(s);
  }
  if (!q.tokens.length) toks.append(h('span', {class: 'muted'}, 'no token records (audit level off, or none generated)'));
  card.append(toks);

  const tl = timeline(q.tokens);
  const bars = new Map();
  if (tl) {
    card.append(h('div', {class: 'timeline'}, h('div', {class: 'label'}, 'latency per token (bar 0: time to first token)'), tl));
    for (const b of tl.querySelectorAll('rect.bar')) bars.set(+b.dataset.i, b);
  }
  const byIndex = new Map(q.tokens.map((t, k) => [t.r.i, {t, prevT: k ? q.tokens[k - 1] : null}]));
  const heat = h('div', {class: 'heatmap', hidden: true});
  const focus = (i, on) => {
    if (!byIndex.has(i)) return;
    spans.get(i)?.classList.toggle('hl', on);
    bars.get(i)?.classList.toggle('hl', on);
    if (on) showTip(spans.get(i), tipContent(q, byIndex.get(i), anomaliesAt.get(i) || [], texts)); else hideTip();
  };
  const openEvidence = (i) => {
    const ev = q.evidence.get(i);
    if (!ev) return;
    for (const s of spans.values()) s.classList.remove('sel');
    spans.get(i)?.classList.add('sel');
    heatmap(heat, q, ev.r, byIndex.get(i), texts);
  };
  const target = (e) => e.target.closest && e.target.closest('.tok, rect.bar');
  for (const el of [toks, tl].filter(Boolean)) {
    el.addEventListener('mouseover', (e) => { const t = target(e); if (t) focus(+t.dataset.i, true); });
    el.addEventListener('mouseout', (e) => {
      const t = target(e);
      if (t && !(e.relatedTarget && t.contains(e.relatedTarget))) focus(+t.dataset.i, false);
    });
    el.addEventListener('click', (e) => { const t = target(e); if (t) openEvidence(+t.dataset.i); });
  }
  toks.addEventListener('focusin', (e) => { const t = target(e); if (t) focus(+t.dataset.i, true); });
  toks.addEventListener('focusout', (e) => { const t = target(e); if (t) focus(+t.dataset.i, false); });
  toks.addEventListener('keydown', (e) => {
    const t = target(e);
    if (t && (e.key === 'Enter' || e.key === ' ')) { e.preventDefault(); openEvidence(+t.dataset.i); }
    if (e.key === 'Escape') hideTip();
  });

  if (q.anomalies.length) {
    card.append(h('div', {class: 'anomalies'}, h('h3', null, `anomalies (${q.anomalies.length})`), h('ul', null, q.anomalies.map((a) => {
      const tok = byIndex.get(a.r.i);
      const li = h('li', {class: 'anomaly-item', tabindex: 0}, h('span', {class: 'rule'}, String(a.r.rule)), ' at token ',
        h('span', {class: 'mono'}, String(a.r.i)), tok ? [' ', textInto(h('q', {class: 'lbl'}), String(tok.t.r.text ?? ''), true)] : '',
        ' → ', h('b', null, String(a.r.action)), a.r.detail ? `: ${a.r.detail}` : '');
      li.addEventListener('click', () => spans.get(a.r.i)?.focus());
      return li;
    }))));
  }
  if (q.evidence.size) {
    card.append(heat);
    openEvidence(Math.min(...q.evidence.keys())); // the first attribution is shown without a click
  }
  view.tipFor = view.tipFor || ((i) => focus(i, true));
  return card;
}

function tipContent(q, entry, anomalies, texts) {
  const {t, prevT} = entry, r = t.r, p = prob(r.lp);
  const box = h('div');
  box.append(h('div', {class: 'tip-head'}, textInto(h('span', {class: 'tip-text'}), typeof r.text === 'string' ? r.text : '', true),
    h('span', {class: 'mono muted'}, ` #${r.id} · token ${r.i}`)));
  const row = (k, v) => [h('dt', null, k), h('dd', null, v)];
  const gap = prevT ? num(r.t_ns) - num(prevT.r.t_ns) : num(r.t_ns);
  box.append(h('dl', {class: 'tip-grid'}, row('p', pct(p)), row('lp', num(r.lp).toFixed(4)),
    row('t', ms(r.t_ns)), row(prevT ? 'Δt' : 'TTFT', ms(gap)),
    r.entropy !== undefined ? row('entropy', `${num(r.entropy).toFixed(3)} nats`) : null));
  if (Array.isArray(r.top) && r.top.length) {
    const tbl = h('table', {class: 'topk'});
    for (const alt of r.top) {
      if (!Array.isArray(alt)) continue;
      const ap = prob(alt[1]);
      tbl.append(h('tr', {class: alt[0] === r.id ? 'chosen' : null}, h('td', null, tokenLabel(texts, alt[0])),
        h('td', {class: 'mono muted'}, texts.has(alt[0]) ? `#${alt[0]}` : ''), h('td', {class: 'num'}, pct(ap)),
        h('td', {class: 'barcell'}, h('span', {class: 'pbar', style: `width:${(ap * 100).toFixed(1)}%`}))));
    }
    box.append(h('div', {class: 'tip-sub'}, `top ${r.top.length}`), tbl);
  }
  for (const a of anomalies) box.append(h('div', {class: 'tip-anomaly'}, `⚠ ${a.rule} → ${a.action}${a.detail ? `: ${a.detail}` : ''}`));
  const sh = q.shadow && q.shadow.r;
  if (sh && (Array.isArray(sh.lp_diff) || Array.isArray(sh.topk_kl))) {
    const d = sh.lp_diff && sh.lp_diff[r.i], kl = sh.topk_kl && sh.topk_kl[r.i];
    box.append(h('div', {class: 'tip-sub'}, `shadow: Δlp ${d === undefined ? '—' : num(d).toFixed(4)} · top-k KL ${kl === undefined ? '—' : num(kl).toFixed(5)}`));
  }
  if (q.evidence.has(r.i)) box.append(h('div', {class: 'tip-sub'}, 'click (or Enter) for its attribution over the input'));
  if (t.L === view.bad) box.append(h('div', {class: 'tip-anomaly'}, '✖ this record failed verification (see the banner above)'));
  box.append(h('div', {class: 'tip-foot mono'}, `${view.files[t.L.file].name}:${t.L.number} · seq ${r.seq}`));
  return box;
}

function heatmap(panel, q, ev, entry, texts) {
  const input = q.request && Array.isArray(q.request.r.input_tokens) ? q.request.r.input_tokens : [];
  const scores = ev.scores.map(num), max = Math.max(1e-30, ...scores.map(Math.abs));
  const tok = entry ? entry.t.r : null;
  panel.replaceChildren(h('h3', null, 'attribution of token ', h('span', {class: 'mono'}, String(ev.i)),
    tok ? [' ', textInto(h('q', {class: 'lbl'}), String(tok.text ?? ''), true)] : '', ev.method ? ` · ${ev.method}` : '',
    h('span', {class: 'muted'}, ` · ${scores.length} input tokens, max |score| ${max.toPrecision(3)} · `),
    h('span', {class: 'heat-key', style: `background:${heatColor(-1)}`}, '−'), h('span', {class: 'heat-key', style: `background:${heatColor(1)}`}, '+')));
  if (input.length && input.length !== scores.length) panel.append(h('div', {class: 'banner warn'}, `${scores.length} scores for ${input.length} input tokens`));
  const cells = h('div', {class: 'heat-cells'});
  scores.forEach((s, k) => {
    const id = input[k];
    const c = id === undefined ? h('span', {class: 'lbl id'}, `[${k}]`) : tokenLabel(texts, id);
    c.classList.add('heat');
    c.style.backgroundColor = heatColor(s / max);
    c.title = `input ${k}${id !== undefined ? ` · #${id}` : ''} · score ${s}`;
    cells.append(c);
  });
  panel.append(cells);
  panel.hidden = false;
}

// Latency per token as SVG bars. Time to first token includes prefill and can dwarf the decode
// steps, so when it does the scale follows the decode steps and bar 0 is clipped and labelled.
function timeline(tokens) {
  const n = tokens.length;
  if (!n || tokens.some((t) => !Number.isFinite(num(t.r.t_ns)))) return null;
  const gaps = tokens.map((t, k) => (num(t.r.t_ns) - (k ? num(tokens[k - 1].r.t_ns) : 0)) / 1e6);
  const rest = Math.max(0, ...gaps.slice(1));
  const clip = n > 2 && gaps[0] > 3 * rest;
  const top = (clip ? rest * 1.25 : Math.max(...gaps)) || 1;
  const step = [1, 2, 5, 10].map((m) => m * 10 ** Math.floor(Math.log10(top / 3))).find((s) => top / s <= 4) || top / 3;
  const ymax = Math.ceil(top / step - 1e-9) * step; // the axis ends on a labelled tick
  const L = 52, T = 8, H = 80, W0 = (view.width || 1100) - 36; // the card's inner width
  const bw = Math.max(2, Math.min(44, (W0 - L - 10) / n)), W = L + n * bw + 10;
  const svg = h('svg:svg', {width: W, height: T + H + 22, class: 'tl', role: 'img', 'aria-label': 'latency per token'});
  const y = (v) => T + H - Math.min(v, ymax) / ymax * H;
  for (let j = 0, v = 0; v <= ymax * 1.0001; v = ++j * step) {
    svg.append(h('svg:line', {x1: L - 4, x2: W - 6, y1: y(v), y2: y(v), class: v ? 'grid' : 'axis'}),
      h('svg:text', {x: L - 7, y: y(v) + 4, 'text-anchor': 'end'}, `${+v.toPrecision(3)} ms`));
  }
  gaps.forEach((g, k) => {
    const r = h('svg:rect', {class: `bar${k ? '' : ' ttft'}${clip && !k ? ' clipped' : ''}`, 'data-i': tokens[k].r.i,
      x: L + k * bw + (bw > 4 ? 1 : 0), y: y(g), width: Math.max(1, bw - (bw > 4 ? 2 : 0.5)), height: Math.max(0.5, T + H - y(g))},
    h('svg:title', null, `token ${tokens[k].r.i}: ${g.toFixed(2)} ms${k ? '' : ' (time to first token)'}`));
    svg.append(r);
  });
  if (clip) svg.append(h('svg:text', {x: L + 2, y: T + 10, class: 'cliplabel'}, `↑ ${gaps[0].toFixed(1)} ms`));
  svg.append(h('svg:text', {x: L, y: T + H + 16}, 'token 0'), h('svg:text', {x: W - 8, y: T + H + 16, 'text-anchor': 'end'}, `${tokens[n - 1].r.i}`));
  return svg;
}

// One tooltip for the page, placed below (or above) the token it describes.
function showTip(anchor, content) {
  const tip = $('#tip');
  if (!anchor) return;
  tip.replaceChildren(content);
  tip.hidden = false;
  const a = anchor.getBoundingClientRect(), w = tip.offsetWidth, ht = tip.offsetHeight;
  const below = a.bottom + 8 + ht < innerHeight || a.top < ht + 8;
  tip.style.left = `${Math.max(6, Math.min(innerWidth - w - 6, a.left))}px`;
  tip.style.top = `${below ? a.bottom + 6 : a.top - ht - 6}px`;
}
function hideTip() { $('#tip').hidden = true; }

function setStatus(state, text) {
  const s = $('#chain-status');
  s.dataset.state = state;
  s.textContent = text;
}

async function render() {
  const params = new URLSearchParams(location.search);
  hideTip();
  const main = $('#requests');
  main.replaceChildren();
  view.width = main.clientWidth;
  $('#files').textContent = view.files.map((f) => `${f.name} (${(f.bytes.length / 1024).toFixed(1)} KB)`).join(' · ');
  if (!view.files.length) return;
  setStatus('pending', 'verifying…');
  const report = await verify(view.files, view.lines, view.key, view.excerpt);
  setStatus(report.state, report.text);
  view.bad = report.bad;
  const model = buildModel(view.lines);
  for (const [id, t] of view.pieces) if (!model.texts.has(id)) model.texts.set(id, t);
  view.tipFor = null;
  for (const q of model.reqs.values()) {
    try { main.append(requestCard(q, model, report.bad)); } catch (e) { // a malformed record spoils one card, not the page
      main.append(h('div', {class: 'banner bad'}, `request ${q.id} cannot be shown: ${e.message}`));
    }
  }
  if (!model.reqs.size) main.append(h('p', {class: 'muted'}, 'no request records in this log'));
  // ?hover=I opens token I's tooltip in the first request (for screenshots and demos).
  if (params.has('hover') && view.tipFor) view.tipFor(+params.get('hover'));
}

// ---------------------------------------------------------------------------------------------
// Sources: files (picker, drop), ?log=URL (repeatable; &series=1 also fetches URL.1, URL.2, ...),
// ?audit=ID from the server that serves this page.

async function loadFiles(list) {
  const files = await Promise.all(seriesOrder(list).map(async (f) => ({name: f.name, bytes: new Uint8Array(await f.arrayBuffer())})));
  await show(files, $('#excerpt').checked);
}

async function show(files, excerpt, pieces = new Map()) {
  view.files = files;
  view.pieces = pieces;
  view.lines = splitLines(files);
  view.excerpt = excerpt;
  $('#excerpt').checked = excerpt;
  await render();
}

async function fetchBytes(url, headers) {
  const res = await fetch(url, {headers, cache: 'no-store'});
  if (!res.ok) {
    let why = `${res.status} ${res.statusText}${res.status === 401 ? ' (enter the API key)' : ''}`;
    try { const j = await res.json(); if (j && j.error && j.error.message) why += `: ${j.error.message}`; } catch { /* not JSON */ }
    throw new Error(`${url}: ${why}`);
  }
  return new Uint8Array(await res.arrayBuffer());
}

// Served by sitsrt serve: the texts of ids a log holds only as numbers (top-k alternatives, prompt
// tokens) come from its POST /detokenize; where that fails the page shows #id.
async function vocabPieces(lines, headers) {
  const model = buildModel(lines), ids = new Set();
  for (const q of model.reqs.values()) {
    for (const t of q.tokens) for (const alt of Array.isArray(t.r.top) ? t.r.top : []) ids.add(num(alt[0]));
    const input = q.request && q.request.r.input_tokens;
    for (const id of Array.isArray(input) ? input : []) ids.add(num(id));
  }
  const tokens = [...ids].filter((id) => Number.isInteger(id) && id >= 0 && !model.texts.has(id));
  if (!tokens.length) return new Map();
  try {
    const res = await fetch('/detokenize', {method: 'POST', headers: {...headers, 'Content-Type': 'application/json'},
      body: JSON.stringify({tokens, with_pieces: true})});
    return res.ok ? new Map((await res.json()).pieces.map((p) => [p.id, p.piece])) : new Map();
  } catch { return new Map(); } // an older server: ids only
}

// Keys may come in the fragment, which the browser never sends to a server.
function readFragment() {
  for (const part of location.hash.slice(1).split('&')) {
    const [k, v = ''] = part.split('=');
    if (k === 'key') view.key = lessNewline(pctBytes(v));
    if (k === 'apikey') view.apiKey = pctText(v);
  }
  if (view.key.length) $('#key').value = new TextDecoder().decode(view.key);
  $('#api-key').value = view.apiKey;
}

async function boot() {
  const params = new URLSearchParams(location.search);
  try {
    const logs = params.getAll('log');
    if (params.has('audit')) {
      const id = params.get('audit');
      const headers = view.apiKey ? {Authorization: `Bearer ${view.apiKey}`} : {};
      const bytes = await fetchBytes(`/v1/audit/${encodeURIComponent(id)}?format=jsonl`, headers);
      const files = [{name: `audit ${id}`, bytes}];
      await show(files, params.get('excerpt') !== '0', await vocabPieces(splitLines(files), headers));
    } else if (logs.length) {
      const files = [];
      for (const url of logs) {
        const name = url.split(/[/?#]/).filter(Boolean).pop() || url;
        files.push({name: pctText(name), bytes: await fetchBytes(url)});
      }
      if (params.get('series') === '1' && logs.length === 1) {
        for (let n = 1; ; n++) {
          try { files.push({name: `${files[0].name}.${n}`, bytes: await fetchBytes(`${logs[0]}.${n}`)}); } catch { break; }
        }
      }
      await show(files, params.get('excerpt') === '1');
    } else {
      $('#excerpt').checked = params.get('excerpt') === '1';
      setStatus('empty', 'no log loaded: choose files or drop them on the page');
    }
  } catch (e) {
    setStatus('unavailable', `cannot verify: ${e.message}${location.protocol === 'file:' ? ' (from file://, use the file picker)' : ''}`);
  }
}

function wire() {
  $('#controls').addEventListener('submit', (e) => e.preventDefault());
  $('#pick').addEventListener('change', (e) => { if (e.target.files.length) loadFiles(e.target.files); });
  const rekey = () => { view.key = lessNewline(new TextEncoder().encode($('#key').value)); if (view.files.length) render(); };
  $('#key').addEventListener('change', rekey);
  $('#keyfile').addEventListener('change', async (e) => {
    const f = e.target.files[0];
    if (!f) return;
    const b = new Uint8Array(await f.arrayBuffer());
    view.key = lessNewline(b);
    $('#key').value = '';
    $('#key').placeholder = `key from ${f.name}`;
    if (view.files.length) render();
  });
  $('#api-key').addEventListener('change', () => { view.apiKey = $('#api-key').value; if (/[?&]audit=/.test(location.search)) boot(); });
  $('#excerpt').addEventListener('change', () => { view.excerpt = $('#excerpt').checked; if (view.files.length) render(); });
  $('#reload').addEventListener('click', () => { // fetch ?log= / ?audit= again; picked files are re-read as they are
    view.apiKey = $('#api-key').value;
    if (/[?&](log|audit)=/.test(location.search)) boot(); else if (view.files.length) render();
  });
  // Drop anywhere on the page; the drop zone only shows where.
  document.addEventListener('dragover', (e) => { e.preventDefault(); document.body.classList.add('dragging'); });
  document.addEventListener('dragleave', (e) => { if (!e.relatedTarget) document.body.classList.remove('dragging'); });
  document.addEventListener('drop', (e) => {
    e.preventDefault();
    document.body.classList.remove('dragging');
    if (e.dataTransfer.files.length) loadFiles(e.dataTransfer.files);
  });
  document.addEventListener('scroll', hideTip, {passive: true});
}

if (typeof document !== 'undefined') {
  wire();
  readFragment();
  boot();
} else if (typeof module !== 'undefined') {
  module.exports = {parseLine, float32Texts, splitLines, verify, seriesOrder, pctBytes};
}
