// The live status page of a pytimely cluster: polls cluster.json (same origin) and draws
// the cluster, each dataflow's graph, bins per worker, epoch latency, Kafka and checkpoints.
// Every field of cluster.json may be missing or null; unknown keys are ignored.
"use strict";

(() => {
  const SVG_NS = "http://www.w3.org/2000/svg";
  const query = new URLSearchParams(location.search);
  const POLL_MS = Math.max(100, Number(query.get("interval")) || 1000);
  const LATENCY_EPOCHS_KEPT = 300;
  const PALETTE = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2",
    "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"];
  const KINDS = ["pipeline", "exchange", "direct", "broadcast"];

  const BOX = { minWidth: 170, maxWidth: 300, height: 68, pad: 12 };
  const FRAME = { pad: 18, header: 32 };
  const GAP = { x: 40, y: 66, dummy: 12, margin: 24 };
  // Virtual nodes standing for a nested scope's inputs (top) and outputs (bottom).
  const SCOPE_IN = "\u0000in";
  const SCOPE_OUT = "\u0000out";

  const state = {
    polls: 0,
    errors: 0,
    previous: null,             // {time, clock, workers: Map dataflowKey -> Map worker -> stats}
    graphs: new Map(),          // dataflowKey -> drawn graph (signature, DOM references)
    latency: new Map(),         // dataflowKey -> Map worker -> Map epoch -> seconds
  };

  // ---- values that may be anything ---------------------------------------------------
  const isObject = (x) => x !== null && typeof x === "object" && !Array.isArray(x);
  const asArray = (x) => (Array.isArray(x) ? x : []);
  const asObject = (x) => (isObject(x) ? x : {});
  const finite = (x) => (typeof x === "number" && Number.isFinite(x) ? x : null);
  const sum = (xs) => xs.reduce((a, b) => a + b, 0);

  function compareTimes(a, b) {
    if (typeof a === "number" && typeof b === "number") return a - b;
    if (Array.isArray(a) && Array.isArray(b)) {
      for (let i = 0; i < Math.min(a.length, b.length); i++) {
        const c = compareTimes(a[i], b[i]);
        if (c !== 0) return c;
      }
      return a.length - b.length;
    }
    return String(a) < String(b) ? -1 : String(a) > String(b) ? 1 : 0;
  }

  // The least of some times; null when every one is null (closed), undefined when none known.
  function leastTime(times) {
    const known = times.filter((t) => t !== undefined);
    if (!known.length) return undefined;
    const open = known.filter((t) => t !== null);
    if (!open.length) return null;
    return open.reduce((a, b) => (compareTimes(b, a) < 0 ? b : a));
  }

  // ---- formatting ---------------------------------------------------------------------
  function fmtCount(n) {
    if (n == null) return "—";
    const a = Math.abs(n);
    const scaled = (div, unit) => {
      const v = n / div;
      return (Math.abs(v) >= 100 ? v.toFixed(0) : v.toFixed(1)) + unit;
    };
    if (a >= 1e9) return scaled(1e9, "G");
    if (a >= 1e6) return scaled(1e6, "M");
    if (a >= 1e3) return scaled(1e3, "k");
    if (a > 0 && a < 10 && !Number.isInteger(n)) return n.toFixed(1);
    return String(Math.round(n));
  }
  const fmtRate = (r) => (r == null ? "" : `${fmtCount(r)}/s`);

  function fmtSeconds(s) {
    if (s == null) return "—";
    if (s === 0) return "0 s";
    if (s < 0.001) return `${(s * 1e6).toFixed(0)} µs`;
    if (s < 1) return `${(s * 1e3).toFixed(s < 0.01 ? 1 : 0)} ms`;
    if (s < 60) return `${s.toFixed(s < 10 ? 2 : 1)} s`;
    return `${Math.floor(s / 60)} m ${Math.round(s % 60)} s`;
  }

  function fmtTime(t) {
    if (t === undefined) return "?";
    if (t === null) return "closed";
    if (Array.isArray(t)) return `(${t.map(fmtTime).join(", ")})`;
    return typeof t === "number" ? String(t) : JSON.stringify(t);
  }

  const fmtClock = (unixSeconds) => new Date(unixSeconds * 1000).toLocaleTimeString([], { hour12: false });

  // ---- DOM ----------------------------------------------------------------------------
  function build(element, attrs, children) {
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value == null || value === false) continue;
      if (key === "text") element.textContent = value;
      else element.setAttribute(key, value);
    }
    for (const child of children || []) {
      if (child != null) element.append(child);
    }
    return element;
  }
  const h = (tag, attrs, ...children) => build(document.createElement(tag), attrs, children);
  const s = (tag, attrs, ...children) => build(document.createElementNS(SVG_NS, tag), attrs, children);
  const tooltip = (text) => s("title", { text });

  let measureContext = null;
  function textWidth(text, font) {
    if (!measureContext) measureContext = document.createElement("canvas").getContext("2d");
    const family = getComputedStyle(document.body).fontFamily;
    measureContext.font = `${font} ${family}`;
    return measureContext.measureText(text).width;
  }

  function fitText(text, font, width) {
    if (textWidth(text, font) <= width) return text;
    let cut = text.length;
    while (cut > 1 && textWidth(`${text.slice(0, cut)}…`, font) > width) cut--;
    return `${text.slice(0, cut)}…`;
  }

  // ---- reading cluster.json -----------------------------------------------------------
  function readProcesses(cluster) {
    return asArray(cluster.processes).filter(isObject).map((p, i) => {
      const status = isObject(p.status) ? p.status : null;
      const index = finite(p.process) ?? finite(status?.process) ?? i;
      return {
        index,
        url: typeof p.url === "string" ? p.url : "",
        up: p.up === true || (p.up == null && status !== null),
        error: p.error == null ? null : String(p.error),
        status,
        workers: asArray(status?.workers).filter((w) => finite(w) !== null),
      };
    }).sort((a, b) => a.index - b.index);
  }

  // Dataflows by index, with the graph of the first status that has it and every
  // process's workers merged (worker indices are unique across the cluster).
  function mergeDataflows(processes) {
    const byKey = new Map();
    for (const process of processes) {
      if (!process.status) continue;
      asArray(process.status.dataflows).forEach((df, position) => {
        if (!isObject(df)) return;
        const index = df.index ?? position;
        const key = String(index);
        let entry = byKey.get(key);
        if (!entry) {
          entry = {
            key, index, name: df.name == null ? `Dataflow ${key}` : String(df.name),
            operators: asArray(df.operators), channels: asArray(df.channels), workers: new Map(),
          };
          byKey.set(key, entry);
        }
        for (const [worker, stats] of Object.entries(asObject(df.workers))) {
          if (isObject(stats)) entry.workers.set(worker, stats);
        }
      });
    }
    return [...byKey.values()].sort((a, b) => compareTimes(a.index, b.index));
  }

  // ---- the graph: operators, scopes, channels -----------------------------------------
  function normalizeGraph(df) {
    const ops = new Map();
    for (const raw of df.operators) {
      if (!isObject(raw) || raw.id == null || ops.has(String(raw.id))) continue;
      const id = String(raw.id);
      ops.set(id, {
        id,
        name: raw.name == null ? id : String(raw.name),
        inputs: Math.max(0, finite(raw.inputs) ?? 0),
        outputs: Math.max(0, finite(raw.outputs) ?? 0),
        nested: raw.nested === true,
        scope: raw.scope == null ? null : String(raw.scope),
        parent: null,
        children: [],
      });
    }
    for (const op of ops.values()) {
      const candidate = op.scope ?? (op.id.includes(".") ? op.id.slice(0, op.id.lastIndexOf(".")) : null);
      op.parent = candidate !== op.id && ops.has(candidate) ? candidate : null;
    }
    for (const op of ops.values()) {   // a malformed scope chain must not loop
      const seen = new Set([op.id]);
      for (let p = op.parent; p != null; p = ops.get(p).parent) {
        if (seen.has(p)) { op.parent = null; break; }
        seen.add(p);
      }
    }
    const roots = [];
    for (const op of ops.values()) (op.parent == null ? roots : ops.get(op.parent).children).push(op.id);

    // An endpoint that is no operator (a scope's boundary, say "0.4.0") is its nearest listed ancestor.
    const resolve = (id) => {
      for (let cur = id == null ? "" : String(id); cur; cur = cur.includes(".") ? cur.slice(0, cur.lastIndexOf(".")) : "") {
        if (ops.has(cur)) return cur;
      }
      return null;
    };
    const graph = { ops, roots, channels: [] };
    const used = new Map();
    for (const raw of df.channels) {
      if (!isObject(raw)) continue;
      const src = resolve(raw.from);
      const dst = resolve(raw.to);
      if (src == null || dst == null) continue;
      const kind = raw.kind == null ? "pipeline" : String(raw.kind);
      const channel = {
        from: String(raw.from), to: String(raw.to), src, dst, kind,
        fromPort: Math.max(0, finite(raw.from_port) ?? 0),
        toPort: Math.max(0, finite(raw.to_port) ?? 0),
      };
      const base = `${channel.from}:${channel.fromPort}>${channel.to}:${channel.toPort}`;
      used.set(base, (used.get(base) || 0) + 1);
      channel.key = used.get(base) === 1 ? base : `${base}#${used.get(base)}`;
      Object.assign(channel, classifyChannel(graph, channel));
      graph.channels.push(channel);
    }
    return graph;
  }

  const ancestors = (graph, id) => {
    const chain = [];
    for (let p = graph.ops.get(id).parent; p != null; p = graph.ops.get(p).parent) chain.push(p);
    return chain;
  };

  // Where a channel is laid out (its home scope, null for the dataflow's root) and how.
  function classifyChannel(graph, channel) {
    const { src, dst } = channel;
    if (src === dst) return { type: "self", home: graph.ops.get(src).parent };
    if (ancestors(graph, dst).includes(src)) return { type: "enter", home: src };
    if (ancestors(graph, src).includes(dst)) return { type: "leave", home: dst };
    const srcScopes = new Set([...ancestors(graph, src), null]);
    const home = [...ancestors(graph, dst), null].find((scope) => srcScopes.has(scope));
    return { type: "normal", home };
  }

  // The child of `scope` that is `id` or holds it.
  function childOf(graph, id, scope) {
    let cur = id;
    while (cur != null && graph.ops.get(cur).parent !== scope) cur = graph.ops.get(cur).parent;
    return cur;
  }

  // ---- layered layout -----------------------------------------------------------------
  // Top to bottom: cycles broken by reversing DFS back edges (a loop's feedback), longest-path
  // layers, dummy vertices on long edges, a few barycenter sweeps against crossings.
  function layered(ids, sizes, edges, pinLast) {
    const n = ids.length;
    const at = new Map(ids.map((id, i) => [id, i]));
    const E = edges.map(([a, b]) => [at.get(a), at.get(b)]);
    const succ = ids.map(() => []);
    const hasPred = new Array(n).fill(false);
    E.forEach(([a, b], k) => { succ[a].push(k); hasPred[b] = true; });

    const reversed = new Array(E.length).fill(false);
    const mark = new Array(n).fill(0);      // 0 unseen, 1 on the DFS stack, 2 finished
    const roots = [...ids.keys()].sort((a, b) => hasPred[a] - hasPred[b]);
    for (const root of roots) {
      if (mark[root]) continue;
      mark[root] = 1;
      const stack = [[root, 0]];
      while (stack.length) {
        const top = stack[stack.length - 1];
        if (top[1] < succ[top[0]].length) {
          const k = succ[top[0]][top[1]++];
          const w = E[k][1];
          if (mark[w] === 1) reversed[k] = true;
          else if (mark[w] === 0) { mark[w] = 1; stack.push([w, 0]); }
        } else {
          mark[top[0]] = 2;
          stack.pop();
        }
      }
    }
    const dag = E.map(([a, b], k) => (reversed[k] ? [b, a] : [a, b]));

    const layer = new Array(n).fill(0);
    const dagSucc = ids.map(() => []);
    const indegree = new Array(n).fill(0);
    dag.forEach(([a, b]) => { dagSucc[a].push(b); indegree[b]++; });
    const topo = [];
    const queue = [...ids.keys()].filter((v) => indegree[v] === 0);
    while (queue.length) {
      const v = queue.shift();
      topo.push(v);
      for (const w of dagSucc[v]) {
        layer[w] = Math.max(layer[w], layer[v] + 1);
        if (--indegree[w] === 0) queue.push(w);
      }
    }
    // A source sits just above its first consumer rather than at the very top.
    for (const v of topo.slice().reverse()) {
      if (dag.some(([, b]) => b === v) || !dagSucc[v].length || ids[v] === SCOPE_IN) continue;
      layer[v] = Math.min(...dagSucc[v].map((w) => layer[w])) - 1;
    }
    if (pinLast != null && at.has(pinLast)) {
      const last = at.get(pinLast);
      layer[last] = Math.max(0, ...layer.filter((_, v) => v !== last)) + 1;
    }
    const lowest = Math.min(0, ...layer);
    for (let v = 0; v < n; v++) layer[v] -= lowest;

    // Vertices: the nodes, then the dummies of each edge spanning more than one layer.
    const verts = ids.map((id, v) => ({ id, layer: layer[v], w: sizes.get(id).w, h: sizes.get(id).h, dummy: false }));
    const chains = dag.map(([a, b]) => {
      const chain = [a];
      for (let l = layer[a] + 1; l < layer[b]; l++) {
        verts.push({ id: null, layer: l, w: GAP.dummy, h: 0, dummy: true });
        chain.push(verts.length - 1);
      }
      chain.push(b);
      return chain;
    });
    const up = verts.map(() => []);
    const down = verts.map(() => []);
    for (const chain of chains) {
      for (let i = 0; i + 1 < chain.length; i++) {
        down[chain[i]].push(chain[i + 1]);
        up[chain[i + 1]].push(chain[i]);
      }
    }
    const layers = Math.max(0, ...verts.map((v) => v.layer)) + 1;
    let rows = Array.from({ length: layers }, () => []);
    const order = [...topo, ...[...ids.keys()].filter((v) => !topo.includes(v))];
    for (const v of order) rows[verts[v].layer].push(v);
    for (let v = n; v < verts.length; v++) rows[verts[v].layer].push(v);

    const pos = new Array(verts.length).fill(0);
    const setPositions = () => rows.forEach((row) => row.forEach((v, i) => { pos[v] = i; }));
    setPositions();
    const crossings = () => {
      let count = 0;
      for (const row of rows) {
        const segments = [];
        for (const v of row) for (const w of down[v]) segments.push([pos[v], pos[w]]);
        for (let i = 0; i < segments.length; i++) {
          for (let j = i + 1; j < segments.length; j++) {
            if ((segments[i][0] - segments[j][0]) * (segments[i][1] - segments[j][1]) < 0) count++;
          }
        }
      }
      return count;
    };
    const sortByBarycenter = (row, neighbours) => {
      const centre = new Map(row.map((v) => {
        const ns = neighbours[v];
        return [v, ns.length ? sum(ns.map((u) => pos[u])) / ns.length : pos[v]];
      }));
      row.sort((a, b) => centre.get(a) - centre.get(b) || pos[a] - pos[b]);
      row.forEach((v, i) => { pos[v] = i; });
    };
    let best = rows.map((row) => row.slice());
    let bestCrossings = crossings();
    for (let sweep = 0; sweep < 8 && bestCrossings > 0; sweep++) {
      if (sweep % 2 === 0) for (let r = 1; r < layers; r++) sortByBarycenter(rows[r], up);
      else for (let r = layers - 2; r >= 0; r--) sortByBarycenter(rows[r], down);
      const count = crossings();
      if (count < bestCrossings) { best = rows.map((row) => row.slice()); bestCrossings = count; }
    }
    rows = best;
    setPositions();

    // Coordinates: rows stacked; in a row, each vertex pulled toward the centre of its
    // neighbours, the order kept and boxes GAP.x apart (the mean of a left- and a
    // right-packed placement, both feasible).
    const rowTop = [];
    const rowHeight = rows.map((row) => Math.max(0, ...row.map((v) => verts[v].h)));
    let y = 0;
    for (let r = 0; r < layers; r++) { rowTop.push(y); y += rowHeight[r] + GAP.y; }
    const gapBetween = (a, b) => (verts[a].dummy || verts[b].dummy ? GAP.dummy : GAP.x);
    const left = new Array(verts.length).fill(0);
    for (const row of rows) {
      let x = 0;
      for (let i = 0; i < row.length; i++) {
        if (i) x += gapBetween(row[i - 1], row[i]);
        left[row[i]] = x;
        x += verts[row[i]].w;
      }
    }
    const centre = (v) => left[v] + verts[v].w / 2;
    const widest = Math.max(0, ...rows.map((row) => (row.length ? left[row[row.length - 1]] + verts[row[row.length - 1]].w : 0)));
    for (const row of rows) {   // start centred
      if (!row.length) continue;
      const shift = (widest - (left[row[row.length - 1]] + verts[row[row.length - 1]].w)) / 2;
      for (const v of row) left[v] += shift;
    }
    for (let pass = 0; pass < 6; pass++) {
      const neighbours = pass % 2 === 0 ? up : down;
      const sequence = pass % 2 === 0 ? rows : rows.slice().reverse();
      for (const row of sequence) {
        const desired = row.map((v) => (neighbours[v].length
          ? sum(neighbours[v].map(centre)) / neighbours[v].length - verts[v].w / 2 : left[v]));
        const fromLeft = desired.slice();
        for (let i = 1; i < row.length; i++) {
          fromLeft[i] = Math.max(desired[i], fromLeft[i - 1] + verts[row[i - 1]].w + gapBetween(row[i - 1], row[i]));
        }
        const fromRight = desired.slice();
        for (let i = row.length - 2; i >= 0; i--) {
          fromRight[i] = Math.min(desired[i], fromRight[i + 1] - verts[row[i]].w - gapBetween(row[i], row[i + 1]));
        }
        row.forEach((v, i) => { left[v] = (fromLeft[i] + fromRight[i]) / 2; });
      }
    }
    const minX = Math.min(0, ...verts.map((_, v) => left[v]));
    const width = Math.max(0, ...verts.map((vert, v) => left[v] - minX + vert.w));
    const nodes = new Map();
    ids.forEach((id, v) => {
      const r = verts[v].layer;
      nodes.set(id, { x: left[v] - minX, y: rowTop[r] + (rowHeight[r] - verts[v].h) / 2, w: verts[v].w, h: verts[v].h });
    });
    const routes = chains.map((chain, k) => {
      const dummies = chain.slice(1, -1).map((v) => ({
        x: centre(v) - minX, top: rowTop[verts[v].layer], bottom: rowTop[verts[v].layer] + rowHeight[verts[v].layer],
      }));
      return { reversed: reversed[k], dummies: reversed[k] ? dummies.reverse() : dummies };
    });
    return { width, height: layers ? y - GAP.y : 0, nodes, routes };
  }

  // Lays out every scope, innermost first (a nested scope is one big node of its parent),
  // then places them: absolute boxes of operators and routes of channels.
  function layoutGraph(graph) {
    const scopes = new Map();       // scope id (null: root) -> {layout, edgeIndex: Map}
    const sizes = new Map();

    const edgeEnds = (channel, scope) => {
      if (channel.type === "enter") return [SCOPE_IN, childOf(graph, channel.dst, scope)];
      if (channel.type === "leave") return [childOf(graph, channel.src, scope), SCOPE_OUT];
      if (channel.type === "normal") return [childOf(graph, channel.src, scope), childOf(graph, channel.dst, scope)];
      return null;
    };

    const layoutScope = (scope) => {
      const children = scope == null ? graph.roots : graph.ops.get(scope).children;
      for (const id of children) {
        const op = graph.ops.get(id);
        if (op.children.length) {
          const inner = layoutScope(id);
          sizes.set(id, {
            w: Math.max(inner.width + 2 * FRAME.pad, frameMinWidth(op)),
            h: inner.height + FRAME.header + FRAME.pad,
          });
        } else {
          sizes.set(id, { w: boxWidth(op), h: BOX.height });
        }
      }
      const edgeIndex = new Map();
      const edges = [];
      const ids = [...children];
      for (const channel of graph.channels) {
        if (channel.home !== scope) continue;
        const ends = edgeEnds(channel, scope);
        if (!ends) continue;
        const key = ends.join("\u0001");
        if (!edgeIndex.has(key)) { edgeIndex.set(key, edges.length); edges.push(ends); }
      }
      if (edges.some(([a]) => a === SCOPE_IN)) { ids.unshift(SCOPE_IN); sizes.set(SCOPE_IN, { w: 2, h: 0 }); }
      if (edges.some(([, b]) => b === SCOPE_OUT)) { ids.push(SCOPE_OUT); sizes.set(SCOPE_OUT, { w: 2, h: 0 }); }
      const layout = layered(ids, sizes, edges, SCOPE_OUT);
      scopes.set(scope, { layout, edgeIndex, origin: null });
      return layout;
    };
    const root = layoutScope(null);

    const boxes = new Map();
    const place = (scope, ox, oy) => {
      const entry = scopes.get(scope);
      entry.origin = { x: ox, y: oy };
      for (const [id, p] of entry.layout.nodes) {
        if (id === SCOPE_IN || id === SCOPE_OUT) continue;
        const box = { x: ox + p.x, y: oy + p.y, w: p.w, h: p.h };
        boxes.set(id, box);
        const op = graph.ops.get(id);
        if (op.children.length) {
          const inner = scopes.get(id).layout;
          place(id, box.x + (box.w - inner.width) / 2, box.y + FRAME.header);
        }
      }
    };
    place(null, GAP.margin, GAP.margin);

    // Where a nested scope's inputs (SCOPE_IN) or outputs (SCOPE_OUT) are drawn, if it has any.
    const boundary = (scope, virtual) => {
      const entry = scopes.get(scope);
      const p = entry?.layout.nodes.get(virtual);
      return p ? { x: p.x + entry.origin.x, y: p.y + entry.origin.y } : null;
    };
    const routes = new Map();
    for (const channel of graph.channels) {
      const entry = scopes.get(channel.home);
      const ends = edgeEnds(channel, channel.home);
      if (!entry || !ends) continue;
      const route = entry.layout.routes[entry.edgeIndex.get(ends.join("\u0001"))];
      const shift = (p) => ({ x: p.x + entry.origin.x, top: p.top + entry.origin.y, bottom: p.bottom + entry.origin.y });
      routes.set(channel.key, {
        reversed: route.reversed,
        dummies: route.dummies.map(shift),
        scopeIn: channel.type === "enter" ? boundary(channel.home, SCOPE_IN) : null,
        scopeOut: channel.type === "leave" ? boundary(channel.home, SCOPE_OUT) : null,
        // Outside a nested scope, its channels meet the frame where the inner ones start/end.
        frameOut: channel.type === "normal" ? boundary(channel.src, SCOPE_OUT) : null,
        frameIn: channel.type === "normal" ? boundary(channel.dst, SCOPE_IN) : null,
      });
    }
    return { width: root.width + 2 * GAP.margin, height: root.height + 2 * GAP.margin, boxes, routes };
  }

  const NAME_FONT = "650 13px";
  const ID_FONT = "11px";
  function boxWidth(op) {
    const wanted = textWidth(op.name, NAME_FONT) + textWidth(op.id, ID_FONT) + 3 * BOX.pad + 8;
    return Math.ceil(Math.min(BOX.maxWidth, Math.max(BOX.minWidth, wanted)));
  }
  function frameMinWidth(op) {
    return Math.round(textWidth(op.name, NAME_FONT) + textWidth(op.id, ID_FONT) + 200);
  }

  // ---- drawing a graph ---------------------------------------------------------------
  const portX = (box, port, count) => box.x + (box.w * (port + 1)) / (Math.max(count, port + 1, 1) + 1);

  // Cubic segments [p0, c1, c2, p3] through a channel's points.
  function channelSegments(channel, box, route, graph) {
    const src = box.get(channel.src);
    const dst = box.get(channel.dst);
    const srcOp = graph.ops.get(channel.src);
    const dstOp = graph.ops.get(channel.dst);
    if (channel.type === "self") {
      const x = src.x + src.w;
      const y = src.y + src.h / 2;
      return [[{ x, y: y - 12 }, { x: x + 46, y: y - 40 }, { x: x + 46, y: y + 40 }, { x, y: y + 12 }]];
    }
    const spread = (p, port, count) => ({ x: p.x + (port - (Math.max(count, port + 1) - 1) / 2) * 14, y: p.y });
    const vertical = (p, q) => {
      const dy = (q.y - p.y) / 2;
      return [p, { x: p.x, y: p.y + dy }, { x: q.x, y: q.y - dy }, q];
    };
    const segments = [];
    if (route.reversed) {
      // A feedback edge: out of the source's right side, up its dummies, into the target's right side.
      const start = { x: src.x + src.w, y: src.y + src.h / 2 };
      const end = { x: dst.x + dst.w, y: dst.y + dst.h / 2 };
      if (!route.dummies.length) {
        const bulge = Math.max(start.x, end.x) + 56;
        return [[start, { x: bulge, y: start.y }, { x: bulge, y: end.y }, end]];
      }
      let p = start;
      route.dummies.forEach((d, i) => {
        const bottom = { x: d.x, y: d.bottom };
        segments.push(i === 0 ? [p, { x: p.x + 44, y: p.y }, { x: d.x, y: d.bottom + 44 }, bottom] : vertical(p, bottom));
        p = { x: d.x, y: d.top };
        segments.push([bottom, bottom, p, p]);
      });
      segments.push([p, { x: p.x, y: p.y - 44 }, { x: end.x + 44, y: end.y }, end]);
      return segments;
    }
    let start = { x: portX(src, channel.fromPort, srcOp.outputs), y: src.y + src.h };
    if (route.scopeIn) start = spread(route.scopeIn, channel.fromPort, srcOp.inputs);
    else if (route.frameOut) start = { x: spread(route.frameOut, channel.fromPort, srcOp.outputs).x, y: start.y };
    let end = { x: portX(dst, channel.toPort, dstOp.inputs), y: dst.y };
    if (route.scopeOut) end = spread(route.scopeOut, channel.toPort, dstOp.outputs);
    else if (route.frameIn) end = { x: spread(route.frameIn, channel.toPort, dstOp.inputs).x, y: end.y };
    let p = start;
    for (const d of route.dummies) {
      const top = { x: d.x, y: d.top };
      const bottom = { x: d.x, y: d.bottom };
      segments.push(vertical(p, top), [top, top, bottom, bottom]);
      p = bottom;
    }
    segments.push(vertical(p, end));
    return segments;
  }

  const pathData = (segments) => segments.map(([p0, c1, c2, p3], i) =>
    `${i ? "" : `M${p0.x.toFixed(1)},${p0.y.toFixed(1)} `}C${c1.x.toFixed(1)},${c1.y.toFixed(1)} ${c2.x.toFixed(1)},${c2.y.toFixed(1)} ${p3.x.toFixed(1)},${p3.y.toFixed(1)}`).join(" ");

  const midpoint = ([p0, c1, c2, p3]) => ({
    x: (p0.x + 3 * c1.x + 3 * c2.x + p3.x) / 8,
    y: (p0.y + 3 * c1.y + 3 * c2.y + p3.y) / 8,
  });

  const kindClass = (kind) => (KINDS.includes(kind) ? kind : "other");

  function arrowMarkers(prefix) {
    const colors = { pipeline: "#8593a6", exchange: "#e8590c", direct: "#c2255c", broadcast: "#7b4fd6", other: "#4a5666", feedback: "#2b8a9e" };
    return s("defs", {}, ...Object.entries(colors).map(([kind, color]) =>
      s("marker", {
        id: `${prefix}-arrow-${kind}`, viewBox: "0 0 10 10", refX: "9", refY: "5", markerUnits: "userSpaceOnUse",
        markerWidth: "10", markerHeight: "10", orient: "auto-start-reverse",
      }, s("path", { d: "M0,0 L10,5 L0,10 z", fill: color }))));
  }

  function drawGraph(df, graph) {
    const layout = layoutGraph(graph);
    const prefix = `df${df.key.replace(/[^A-Za-z0-9_-]/g, "_")}`;
    const svg = s("svg", {
      class: "graph", width: Math.ceil(layout.width), height: Math.ceil(layout.height),
      viewBox: `0 0 ${Math.ceil(layout.width)} ${Math.ceil(layout.height)}`, role: "img",
      "aria-label": `Graph of dataflow ${df.name}`,
    }, arrowMarkers(prefix));
    const refs = { operators: new Map(), channels: new Map() };

    const depth = (id) => ancestors(graph, id).length;
    const frames = [...graph.ops.values()].filter((op) => op.children.length)
      .sort((a, b) => depth(a.id) - depth(b.id));
    for (const op of frames) {
      const box = layout.boxes.get(op.id);
      const name = s("text", { class: "op-name", x: 14, y: 21, text: op.name });
      const stats = s("text", { class: "op-stats", x: box.w - 14, y: 21, "text-anchor": "end" });
      const title = tooltip(op.name);
      svg.append(s("g", { class: "operator scope", "data-operator": op.id, transform: `translate(${box.x},${box.y})` },
        title,
        s("rect", { class: "frame box", width: box.w, height: box.h, rx: 12 }),
        name,
        s("text", { class: "op-id", x: 22 + textWidth(op.name, NAME_FONT), y: 21, text: op.id }),
        stats));
      refs.operators.set(op.id, { stats, title, records: null, load: null, width: box.w });
    }

    const edgeLayer = s("g", { class: "channels" });
    svg.append(edgeLayer);
    for (const channel of graph.channels) {
      const route = layout.routes.get(channel.key) || { reversed: false, dummies: [] };
      const segments = channelSegments(channel, layout.boxes, route, graph);
      const kind = kindClass(channel.kind);
      const feedback = route.reversed || channel.type === "self";
      const labelAt = midpoint(segments[feedback ? Math.floor(segments.length / 2) : segments.length - 1]);
      const label = s("text", { class: "rate", x: labelAt.x.toFixed(1), y: (labelAt.y + 4).toFixed(1) });
      const title = tooltip(`${channel.kind} ${channel.from}:${channel.fromPort} → ${channel.to}:${channel.toPort}`);
      edgeLayer.append(s("g", {
        class: `channel kind-${kind}${feedback ? " feedback" : ""}`, "data-channel": channel.key,
        "data-from": channel.from, "data-to": channel.to, "data-kind": channel.kind,
      }, title,
      s("path", { d: pathData(segments), "marker-end": `url(#${prefix}-arrow-${feedback && kind === "pipeline" ? "feedback" : kind})` }),
      label));
      refs.channels.set(channel.key, { label, title, channel });
    }

    for (const op of graph.ops.values()) {
      if (op.children.length) continue;
      const box = layout.boxes.get(op.id);
      const idWidth = textWidth(op.id, ID_FONT);
      const name = fitText(op.name, NAME_FONT, box.w - idWidth - 3 * BOX.pad - 4);
      const stats = s("text", { class: "op-stats", x: BOX.pad, y: 41 });
      const records = s("text", { class: "op-records", x: BOX.pad, y: 58 });
      const load = s("rect", { class: "load", x: 1, y: box.h - 4, width: 0, height: 3, rx: 1.5 });
      const title = tooltip(op.name);
      svg.append(s("g", {
        class: `operator${op.nested ? " nested-leaf" : ""}`, "data-operator": op.id,
        transform: `translate(${box.x},${box.y})`,
      }, title,
      s("rect", { class: "box", width: box.w, height: box.h, rx: 8 }),
      s("text", { class: "op-name", x: BOX.pad, y: 21, text: name }),
      s("text", { class: "op-id", x: box.w - BOX.pad, y: 21, "text-anchor": "end", text: op.id }),
      stats, records, load));
      refs.operators.set(op.id, { stats, title, records, load, width: box.w });
    }
    return { svg, refs };
  }

  // ---- per-operator numbers over all workers ------------------------------------------
  function recordsAt(stats, field, port) {
    const value = asObject(stats)[field];
    if (Array.isArray(value)) return port == null ? sum(value.map((v) => finite(v) ?? 0)) : finite(value[port]);
    return finite(value);
  }

  function operatorTotals(df, op) {
    const frontier = [];
    let scheduled = 0;
    let schedules = 0;
    let recordsIn = 0;
    let recordsOut = 0;
    let reporting = 0;
    for (const stats of df.workers.values()) {
      const o = asObject(asObject(stats.operators)[op.id]);
      if (!Object.keys(o).length) continue;
      reporting++;
      scheduled += finite(o.scheduled_seconds) ?? 0;
      schedules += finite(o.schedules) ?? 0;
      recordsIn += recordsAt(o, "records_in", null) ?? 0;
      recordsOut += recordsAt(o, "records_out", null) ?? 0;
      asArray(o.frontier).forEach((t, i) => { (frontier[i] = frontier[i] || []).push(t); });
    }
    return { frontier: frontier.map(leastTime), scheduled, schedules, recordsIn, recordsOut, reporting };
  }

  // Records per second into (or out of) an operator port: each worker's growth between the
  // previous poll and this one, summed over the workers seen in both polls.
  function portRate(df, opId, field, port, dt) {
    const before = state.previous?.workers.get(df.key);
    if (!before || !(dt > 0)) return null;
    let total = 0;
    let seen = false;
    for (const [worker, stats] of df.workers) {
      const old = before.get(worker);
      if (!old) continue;
      const a = recordsAt(asObject(asObject(old.operators)[opId]), field, port);
      const b = recordsAt(asObject(asObject(stats.operators)[opId]), field, port);
      if (a == null || b == null) continue;
      total += Math.max(0, b - a);
      seen = true;
    }
    return seen ? total / dt : null;
  }

  // A channel's rate: its target port's records_in where that number is the channel's alone;
  // else its source port's records_out (an output port sends every record to each consumer);
  // else, marked as such, the target's records_in over all its inputs. Into a scope's output
  // boundary the "target port" is the scope's records_out; out of its input boundary, the
  // "source port" is the scope's records_in.
  function channelRate(df, graph, channel, dt) {
    const perPort = (opId, field) => Array.isArray(asObject(firstStats(df, opId))[field]);
    const sole = (opId, field, count) => perPort(opId, field) || count <= 1;
    const intoSamePort = graph.channels.filter((c) => c.dst === channel.dst && c.toPort === channel.toPort
      && (c.type === "leave") === (channel.type === "leave")).length;
    const dst = graph.ops.get(channel.dst);
    const src = graph.ops.get(channel.src);
    const [inField, inCount] = channel.type === "leave" ? ["records_out", dst.outputs] : ["records_in", dst.inputs];
    const [outField, outCount] = channel.type === "enter" ? ["records_in", src.inputs] : ["records_out", src.outputs];
    const candidates = [];
    if (intoSamePort === 1 && sole(channel.dst, inField, inCount)) {
      candidates.push([channel.dst, inField, perPort(channel.dst, inField) ? channel.toPort : null]);
    }
    if (sole(channel.src, outField, outCount)) {
      candidates.push([channel.src, outField, perPort(channel.src, outField) ? channel.fromPort : null]);
    }
    for (const [opId, field, port] of candidates) {
      const rate = portRate(df, opId, field, port, dt);
      if (rate != null) return { rate, whole: false };
    }
    return { rate: portRate(df, channel.dst, inField, null, dt), whole: true };
  }

  function firstStats(df, opId) {
    for (const stats of df.workers.values()) {
      const o = asObject(stats.operators)[opId];
      if (isObject(o)) return o;
    }
    return null;
  }

  function updateGraph(df, graph, view, dt) {
    const totals = new Map([...graph.ops.values()].map((op) => [op.id, operatorTotals(df, op)]));
    const busiest = Math.max(1e-9, ...[...totals.values()].map((t) => t.scheduled));
    for (const [id, ref] of view.refs.operators) {
      const op = graph.ops.get(id);
      const t = totals.get(id);
      const frontier = t.frontier.length ? t.frontier.map(fmtTime).join(" | ") : (op.inputs ? "?" : "—");
      ref.stats.textContent = `⇥ ${frontier}   ◷ ${fmtSeconds(t.reporting ? t.scheduled : null)}`;
      if (ref.records) ref.records.textContent = t.reporting ? `${fmtCount(t.recordsIn)} in · ${fmtCount(t.recordsOut)} out` : "no worker reports";
      if (ref.load) ref.load.setAttribute("width", Math.max(0, (ref.width - 2) * (t.scheduled / busiest)).toFixed(1));
      const closed = t.frontier.length > 0 && t.frontier.every((f) => f === null);
      ref.stats.closest(".operator").classList.toggle("closed", closed);
      ref.title.textContent = [
        `${op.name} (${id})`,
        `input frontier (least over workers): ${frontier}`,
        `scheduled ${fmtSeconds(t.scheduled)} in ${fmtCount(t.schedules)} schedules`,
        `records in ${fmtCount(t.recordsIn)}, out ${fmtCount(t.recordsOut)}`,
        `${t.reporting} worker(s) reporting`,
      ].join("\n");
    }
    for (const ref of view.refs.channels.values()) {
      const { rate, whole } = channelRate(df, graph, ref.channel, dt);
      ref.label.textContent = rate == null ? "" : `${whole ? "Σ " : ""}${fmtRate(rate)}`;
      if (rate == null) ref.label.removeAttribute("data-rate");
      else ref.label.setAttribute("data-rate", rate.toFixed(3));
      const c = ref.channel;
      ref.title.textContent = `${c.kind} ${c.from}:${c.fromPort} → ${c.to}:${c.toPort}` +
        (rate == null ? "" : `\n${fmtRate(rate)}${whole ? " (all inputs of the target)" : ""}`);
    }
  }

  // ---- charts ----------------------------------------------------------------------------
  function niceCeiling(value) {
    if (!(value > 0)) return 1;
    const magnitude = 10 ** Math.floor(Math.log10(value));
    return [1, 2, 2.5, 5, 10].map((m) => m * magnitude).find((c) => c >= value);
  }

  // Charts are drawn at their container's width, so their text is at its CSS size.
  const chartWidth = (container, least) => Math.max(least, Math.floor(container.clientWidth) || 0);

  function binsChart(group, workerProcess, available) {
    const bars = [...group.workers.entries()].sort((a, b) => a[0] - b[0]);
    const height = 170;
    const margin = { top: 22, bottom: 26, left: 38, right: 12 };
    const width = Math.max(available, margin.left + margin.right + bars.length * 30);
    const slot = (width - margin.left - margin.right) / Math.max(1, bars.length);
    const barWidth = Math.min(56, slot * 0.62);
    const top = niceCeiling(Math.max(1, ...bars.map(([, e]) => finite(e.bins) ?? 0)));
    const plot = height - margin.top - margin.bottom;
    const yOf = (v) => margin.top + plot * (1 - v / top);
    const svg = s("svg", { class: "chart", viewBox: `0 0 ${width} ${height}`, width, "aria-label": `bins of ${group.operator}` });
    for (const tick of [0, top / 2, top]) {
      svg.append(s("line", { class: tick ? "grid" : "axis", x1: margin.left, x2: width - margin.right, y1: yOf(tick), y2: yOf(tick) }),
        s("text", { class: "tick", x: margin.left - 6, y: yOf(tick) + 4, "text-anchor": "end", text: fmtCount(tick) }));
    }
    bars.forEach(([worker, entry], i) => {
      const bins = finite(entry.bins) ?? 0;
      const x = margin.left + slot * i + (slot - barWidth) / 2;
      const process = workerProcess.get(worker);
      const color = PALETTE[(process ?? worker) % PALETTE.length];
      svg.append(s("g", { class: "bar", "data-worker": worker, "data-bins": bins },
        tooltip(`worker ${worker}${process == null ? "" : ` (process ${process})`}: ${bins} bins, ${fmtCount(finite(entry.keys))} keys`),
        s("rect", { x, y: yOf(bins), width: barWidth, height: Math.max(1, yOf(0) - yOf(bins)), rx: 3, fill: color }),
        s("text", { class: "bar-value", x: x + barWidth / 2, y: yOf(bins) - 5, text: fmtCount(bins) }),
        s("text", { class: "bar-label", x: x + barWidth / 2, y: height - 8, text: `w${worker}` })));
    });
    if (group.binCount != null && bars.length) {
      const ideal = group.binCount / bars.length;
      svg.append(s("line", { class: "ideal", x1: margin.left, x2: width - margin.right, y1: yOf(ideal), y2: yOf(ideal) },
        tooltip(`even share: ${ideal.toFixed(1)} bins per worker`)));
    }
    return svg;
  }

  // Stateful entries without a dataflow are shown under every dataflow.
  function renderBins(container, processes, dataflowKey) {
    const workerProcess = new Map();
    for (const p of processes) for (const w of p.workers) workerProcess.set(w, p.index);
    const groups = new Map();
    for (const p of processes) {
      for (const entry of asArray(p.status?.stateful)) {
        const worker = finite(entry?.worker);
        if (!isObject(entry) || worker === null) continue;
        if (entry.dataflow != null && String(entry.dataflow) !== dataflowKey) continue;
        if (!workerProcess.has(worker)) workerProcess.set(worker, p.index);
        const operator = entry.operator == null ? "?" : String(entry.operator);
        const key = `${entry.dataflow ?? ""}|${operator}`;
        if (!groups.has(key)) groups.set(key, { operator, dataflow: entry.dataflow, binCount: null, workers: new Map() });
        const group = groups.get(key);
        group.workers.set(worker, entry);
        group.binCount = finite(entry.bin_count) ?? group.binCount;
      }
    }
    const charts = [...groups.values()].map((group) => {
      const total = sum([...group.workers.values()].map((e) => finite(e.bins) ?? 0));
      const keys = sum([...group.workers.values()].map((e) => finite(e.keys) ?? 0));
      return h("div", { class: "bins-chart", "data-stateful": group.operator },
        h("h3", { text: `${group.operator}${group.dataflow == null ? "" : ` · dataflow ${group.dataflow}`}` }),
        h("div", { class: "figures" },
          h("span", {}, "bins ", h("b", { text: `${total}${group.binCount == null ? "" : ` / ${group.binCount}`}` })),
          h("span", {}, "keys ", h("b", { text: fmtCount(keys) })),
          h("span", {}, "workers ", h("b", { text: String(group.workers.size) }))),
        binsChart(group, workerProcess, chartWidth(container, 320)));
    });
    container.replaceChildren(...(charts.length ? charts : [h("div", { class: "empty", text: "No stateful operators reported." })]));
  }

  function collectLatency(df) {
    if (!state.latency.has(df.key)) state.latency.set(df.key, new Map());
    const perWorker = state.latency.get(df.key);
    for (const [worker, stats] of df.workers) {
      for (const point of asArray(stats.latency)) {
        const epoch = finite(asArray(point)[0]);
        const seconds = finite(asArray(point)[1]);
        if (epoch === null || seconds === null) continue;
        if (!perWorker.has(worker)) perWorker.set(worker, new Map());
        perWorker.get(worker).set(epoch, seconds);
      }
    }
    const epochs = [...new Set([...perWorker.values()].flatMap((m) => [...m.keys()]))].sort((a, b) => a - b);
    const oldestKept = epochs.length > LATENCY_EPOCHS_KEPT ? epochs[epochs.length - LATENCY_EPOCHS_KEPT] : -Infinity;
    for (const points of perWorker.values()) {
      for (const epoch of points.keys()) if (epoch < oldestKept) points.delete(epoch);
    }
    return perWorker;
  }

  function quantile(sorted, q) {
    if (!sorted.length) return null;
    const i = (sorted.length - 1) * q;
    const lo = Math.floor(i);
    return sorted[lo] + (sorted[Math.ceil(i)] - sorted[lo]) * (i - lo);
  }

  function renderLatency(container, figures, perWorker) {
    const series = [...perWorker.entries()]
      .map(([worker, points]) => [worker, [...points.entries()].sort((a, b) => a[0] - b[0])])
      .filter(([, points]) => points.length)
      .sort((a, b) => Number(a[0]) - Number(b[0]));
    const all = series.flatMap(([, points]) => points.map(([, v]) => v)).sort((a, b) => a - b);
    const latest = series.flatMap(([, points]) => points).reduce((best, p) => (!best || p[0] > best[0] ? p : best), null);
    figures.replaceChildren(
      h("span", {}, "p50 ", h("b", { text: fmtSeconds(quantile(all, 0.5)) })),
      h("span", {}, "p95 ", h("b", { text: fmtSeconds(quantile(all, 0.95)) })),
      h("span", {}, "max ", h("b", { text: fmtSeconds(all.length ? all[all.length - 1] : null) })),
      h("span", {}, "latest epoch ", h("b", { text: latest ? `${latest[0]}` : "—" })));
    if (!all.length) {
      container.replaceChildren(h("div", { class: "empty", text: "No epoch has completed yet." }));
      return;
    }
    const width = chartWidth(container, 360);
    const height = 220;
    const margin = { top: 12, right: 14, bottom: 30, left: 56 };
    const epochs = series.flatMap(([, points]) => points.map(([e]) => e));
    let x0 = Math.min(...epochs);
    let x1 = Math.max(...epochs);
    if (x0 === x1) { x0 -= 1; x1 += 1; }
    const top = niceCeiling(all[all.length - 1] * 1.05);
    const xOf = (e) => margin.left + ((e - x0) / (x1 - x0)) * (width - margin.left - margin.right);
    const yOf = (v) => margin.top + (1 - v / top) * (height - margin.top - margin.bottom);
    const svg = s("svg", { class: "chart", viewBox: `0 0 ${width} ${height}`, "aria-label": "epoch latency" });
    for (let i = 0; i <= 4; i++) {
      const v = (top * i) / 4;
      svg.append(s("line", { class: i ? "grid" : "axis", x1: margin.left, x2: width - margin.right, y1: yOf(v), y2: yOf(v) }),
        s("text", { class: "tick", x: margin.left - 6, y: yOf(v) + 4, "text-anchor": "end", text: fmtSeconds(v) }));
    }
    const anchors = { [x0]: "start", [x1]: "end" };
    for (const e of [...new Set([x0, Math.round((x0 + x1) / 2), x1])]) {
      svg.append(s("text", { class: "tick", x: xOf(e), y: height - 10, "text-anchor": anchors[e] || "middle", text: `epoch ${e}` }));
    }
    for (const [worker, points] of series) {
      const color = PALETTE[Number(worker) % PALETTE.length];
      svg.append(s("polyline", {
        class: "series", stroke: color, "data-latency-worker": worker,
        points: points.map(([e, v]) => `${xOf(e).toFixed(1)},${yOf(v).toFixed(1)}`).join(" "),
      }, tooltip(`worker ${worker}`)));
      if (points.length < 60) {
        for (const [e, v] of points) svg.append(s("circle", { cx: xOf(e), cy: yOf(v), r: 2.5, fill: color }));
      }
    }
    const legend = h("div", { class: "legend" }, ...series.map(([worker]) => h("span", {},
      s("svg", { width: 14, height: 4 }, s("rect", { width: 14, height: 4, rx: 2, fill: PALETTE[Number(worker) % PALETTE.length] })),
      `worker ${worker}`)));
    container.replaceChildren(svg, legend);
  }

  // ---- sections ---------------------------------------------------------------------------
  function dataflowSection(df) {
    const legendItem = (label, kind, dash) => h("span", {},
      s("svg", { width: 30, height: 8 }, s("line", { x1: 0, x2: 30, y1: 4, y2: 4, stroke: `var(--${kind})`, "stroke-width": 2.2, "stroke-dasharray": dash })),
      label);
    const section = h("section", { class: "dataflow", "data-dataflow": df.key },
      h("div", { class: "panel graph-panel" },
        h("div", { class: "panel-head" }, h("h2", { class: "df-title" }), h("div", { class: "figures df-figures" })),
        h("div", { class: "graph-wrap" }),
        h("div", { class: "legend" },
          legendItem("pipeline", "pipeline", null), legendItem("exchange", "exchange", "7 4"),
          legendItem("Megaphone routing", "direct", "7 2 2 2"), legendItem("broadcast", "broadcast", "2 3"), legendItem("feedback (loop)", "feedback", null),
          h("span", { text: "⇥ input frontier, least over workers · ◷ time scheduled · bar: share of the busiest" }))),
      h("div", { class: "df-side" },
        h("div", { class: "panel" },
          h("div", { class: "panel-head" }, h("h2", { text: "Epoch latency" }), h("div", { class: "figures latency-figures" })),
          h("div", { class: "latency" })),
        h("div", { class: "panel" },
          h("div", { class: "panel-head" }, h("h2", { text: "Bins per worker" })),
          h("div", { class: "bins" }))));
    return section;
  }

  function renderDataflows(dataflows, processes, dt) {
    const container = document.getElementById("dataflows");
    const wanted = new Set(dataflows.map((df) => df.key));
    for (const section of [...container.children]) {
      if (!wanted.has(section.dataset.dataflow)) { section.remove(); state.graphs.delete(section.dataset.dataflow); }
    }
    dataflows.forEach((df, i) => {
      let section = container.querySelector(`:scope > [data-dataflow="${CSS.escape(df.key)}"]`);
      if (!section) section = dataflowSection(df);
      if (container.children[i] !== section) container.insertBefore(section, container.children[i] || null);

      const graph = normalizeGraph(df);
      const signature = JSON.stringify([[...graph.ops.values()].map((o) => [o.id, o.name, o.inputs, o.outputs, o.parent, o.nested]),
        graph.channels.map((c) => [c.key, c.kind])]);
      let view = state.graphs.get(df.key);
      if (!view || view.signature !== signature) {
        view = { signature, ...drawGraph(df, graph) };
        state.graphs.set(df.key, view);
        const wrap = section.querySelector(".graph-wrap");
        wrap.replaceChildren(graph.ops.size ? view.svg : h("div", { class: "empty", text: "No operators reported." }));
      }
      updateGraph(df, graph, view, dt);

      const perWorker = [...df.workers.values()];
      const epochs = leastEpochsCompleted(perWorker);
      const frontier = leastTime(perWorker.map((w) => (w.frontier === undefined ? undefined : w.frontier)));
      section.querySelector(".df-title").replaceChildren(df.name, h("span", { class: "subtle", text: `  dataflow ${df.key}` }));
      section.querySelector(".df-figures").replaceChildren(
        h("span", {}, "operators ", h("b", { text: String(graph.ops.size) })),
        h("span", {}, "workers ", h("b", { text: String(df.workers.size) })),
        h("span", {}, "epochs completed ", h("b", { text: epochs === null ? "—" : String(epochs) })),
        h("span", {}, "frontier ", h("b", { text: frontier === null ? "done" : fmtTime(frontier) })));
      renderLatency(section.querySelector(".latency"), section.querySelector(".latency-figures"), collectLatency(df));
      renderBins(section.querySelector(".bins"), processes, df.key);
    });
  }

  const leastEpochsCompleted = (workerStats) => {
    const done = workerStats.map((w) => finite(asObject(w).epochs_completed)).filter((v) => v !== null);
    return done.length ? Math.min(...done) : null;
  };

  // Kafka, migrations and checkpoints over the processes that answered; null when none says.
  function clusterTotals(statuses) {
    const reported = (key) => statuses.map((st) => st[key]).filter(isObject);
    const total = (items, key) => sum(items.map((x) => finite(x[key]) ?? 0));
    const kafkas = reported("kafka");
    const lags = kafkas.flatMap((k) => asArray(k.lag)).filter(isObject);
    const migrations = reported("migrations");
    const checkpoints = reported("checkpoint");
    const labels = checkpoints.map((c) => c.last_label).filter((l) => l != null);
    return {
      kafka: kafkas.length ? { lags, lag: total(lags, "lag"), sinkErrors: total(kafkas, "sink_errors") } : null,
      migrations: migrations.length ? { inFlight: total(migrations, "in_flight"), binsMoved: total(migrations, "bins_moved") } : null,
      checkpoint: checkpoints.length ? {
        // the label every process has reached
        label: labels.length ? fmtTime(leastTime(labels)) : "—",
        rollbacks: Math.max(0, ...checkpoints.map((c) => finite(c.rollbacks) ?? 0)),
        incarnations: [...new Set(checkpoints.map((c) => c.incarnation).filter((i) => i != null).map(String))],
      } : null,
    };
  }

  function card(key, label, value, note, bad) {
    return h("div", { class: "card", "data-card": key },
      h("div", { class: "label", text: label }),
      h("div", { class: `value${bad ? " bad" : ""}`, text: value }),
      note ? h("div", { class: "note", text: note }) : null);
  }

  function renderCluster(processes, members) {
    const tbody = document.querySelector("#processes tbody");
    tbody.replaceChildren(...processes.map((p) => {
      const epochs = leastEpochsCompleted(asArray(p.status?.dataflows).flatMap((df) => Object.values(asObject(asObject(df).workers))));
      const checkpoint = asObject(p.status?.checkpoint);
      const url = p.url ? h("a", { href: p.url, text: p.url }) : h("span", { class: "subtle", text: "—" });
      return h("tr", { "data-process": p.index, "data-up": String(p.up), class: p.up ? "up" : "down" },
        h("td", { text: `#${p.index}` }),
        h("td", {}, h("span", { class: `pill ${p.up ? "up" : "down"}`, text: p.up ? "up" : "down" })),
        h("td", {}, url),
        h("td", {}, ...(p.workers.length ? p.workers.map((w) => h("span", { class: "chip", text: `w${w}` })) : [h("span", { class: "subtle", text: "—" })])),
        h("td", { class: "num", text: epochs === null ? "—" : String(epochs) }),
        h("td", { class: "num", text: checkpoint.last_label == null ? "—" : fmtTime(checkpoint.last_label) }),
        h("td", { class: "num", text: finite(checkpoint.rollbacks) == null ? "—" : String(checkpoint.rollbacks) }),
        h("td", { class: p.error ? "error" : "subtle", text: p.error || (p.up && !p.status ? "no status" : "") }));
    }));
    const memberChips = members.length ? members.map((w) => h("span", { class: "chip", "data-member": w, text: `w${w}` })) : [h("span", { text: "—" })];
    document.getElementById("members").replaceChildren(h("span", { text: "members" }), ...memberChips);
  }

  function renderSummary(processes, members, dataflows, totals) {
    const up = processes.filter((p) => p.up).length;
    const cards = [
      card("processes", "Processes up", `${up} / ${processes.length}`, processes.length - up ? `${processes.length - up} down` : "all up", up < processes.length),
      card("workers", "Workers", String(members.length || sum(processes.map((p) => p.workers.length))), "cluster members"),
    ];
    if (dataflows.length) {
      const epochs = leastEpochsCompleted([...dataflows[0].workers.values()]);
      cards.push(card("epochs", "Epochs completed", epochs === null ? "—" : String(epochs), dataflows[0].name));
    }
    const { kafka, migrations, checkpoint } = totals;
    if (kafka) {
      cards.push(card("kafka-lag", "Kafka lag", fmtCount(kafka.lag), `${kafka.lags.length} partition(s)`),
        card("sink-errors", "Sink errors", String(kafka.sinkErrors), "Kafka sinks", kafka.sinkErrors > 0));
    }
    if (migrations) {
      cards.push(card("migrations", "Migrations in flight", String(migrations.inFlight), `${fmtCount(migrations.binsMoved)} bins moved`));
    }
    if (checkpoint) cards.push(card("checkpoint", "Checkpoint", checkpoint.label, `${checkpoint.rollbacks} rollback(s)`));
    document.getElementById("summary").replaceChildren(...cards);
  }

  function renderKafka(kafka) {
    document.getElementById("kafka-panel").hidden = !kafka;
    if (!kafka) return;
    const rows = kafka.lags.slice()
      .sort((a, b) => String(a.topic).localeCompare(String(b.topic)) || (finite(a.partition) ?? 0) - (finite(b.partition) ?? 0));
    const most = Math.max(1, ...rows.map((r) => finite(r.lag) ?? 0));
    const numberCell = (v) => h("td", { class: "num", text: finite(v) == null ? "—" : String(v) });
    document.querySelector("#kafka-lag tbody").replaceChildren(...rows.map((r) => h("tr", {
      "data-topic": r.topic == null ? "" : String(r.topic), "data-partition": r.partition ?? "",
    },
    h("td", { text: r.topic == null ? "?" : String(r.topic) }),
    numberCell(r.partition), numberCell(r.worker), numberCell(r.position), numberCell(r.end), numberCell(r.lag),
    h("td", { class: "lagcell" }, h("div", { class: "lagbar", style: `width:${(100 * (finite(r.lag) ?? 0)) / most}%` })))));
    document.getElementById("kafka-figures").replaceChildren(
      h("span", {}, "total lag ", h("b", { text: fmtCount(kafka.lag) })),
      h("span", { class: kafka.sinkErrors ? "bad" : "" }, "sink errors ", h("b", { text: String(kafka.sinkErrors), "data-sink-errors": kafka.sinkErrors })));
  }

  function renderState({ migrations, checkpoint }) {
    document.getElementById("state-panel").hidden = !migrations && !checkpoint;
    const figure = (label, value, key) => h("span", { "data-figure": key }, h("b", { text: value }), label);
    const figures = [];
    if (migrations) {
      figures.push(figure("migrations in flight", String(migrations.inFlight), "in-flight"),
        figure("bins moved", fmtCount(migrations.binsMoved), "bins-moved"));
    }
    if (checkpoint) {
      figures.push(figure("last checkpoint label", checkpoint.label, "label"),
        figure("rollbacks", String(checkpoint.rollbacks), "rollbacks"),
        figure("incarnation", checkpoint.incarnations.join(", ") || "—", "incarnation"));
    }
    document.getElementById("state-figures").replaceChildren(...figures);
  }

  // ---- one poll ---------------------------------------------------------------------------
  function render(cluster) {
    const processes = readProcesses(asObject(cluster));
    const statuses = processes.map((p) => p.status).filter(Boolean);
    const members = asArray(statuses.find((st) => Array.isArray(st.members))?.members).filter((w) => finite(w) !== null);
    const dataflows = mergeDataflows(processes);

    const generated = finite(asObject(cluster).generated);
    const clock = Date.now() / 1000;
    const previous = state.previous;
    let dt = null;
    if (previous) {
      dt = generated !== null && previous.time !== null && generated > previous.time ? generated - previous.time : clock - previous.clock;
    }

    const names = dataflows.map((df) => df.name);
    document.getElementById("title").textContent = names.length ? names.join(" · ") : "No dataflow yet";
    document.title = `${names.length ? names.join(", ") : "pytimely"} · status`;
    const totals = clusterTotals(statuses);
    renderSummary(processes, members, dataflows, totals);
    renderCluster(processes, members);
    renderDataflows(dataflows, processes, dt);
    renderKafka(totals.kafka);
    renderState(totals);
    renderStalls(statuses);
    renderBrokers(statuses);

    state.previous = { time: generated, clock, workers: new Map(dataflows.map((df) => [df.key, df.workers])) };
    document.getElementById("updated").textContent = `updated ${fmtClock(generated ?? clock)}`;
  }

  // Dataflows whose frontier has not moved for --stall-warn seconds, and what holds them.
  function renderStalls(statuses) {
    const banner = document.getElementById("stall");
    const stalls = statuses.flatMap((st) => asArray(st.stalls)).map(asObject);
    banner.hidden = stalls.length === 0;
    banner.textContent = stalls.map((s) =>
      `Stalled: dataflow ${s.dataflow} on worker ${s.worker} has made no progress for ` +
      `${Math.round(finite(s.seconds) ?? 0)} s. ${s.summary ?? ""}`).join("\n");
  }

  // Kafka brokers a process cannot reach now (broker.health), and for how long.
  function renderBrokers(statuses) {
    const banner = document.getElementById("broker");
    const lost = new Map();
    for (const st of statuses) {
      for (const b of asArray(asObject(st.kafka).brokers).map(asObject)) {
        if (b.up !== false) continue;
        const seconds = finite(b.down_seconds) ?? 0;
        const seen = lost.get(b.address);
        lost.set(b.address, { seconds: Math.max(seconds, seen ? seen.seconds : 0),
                              processes: [...(seen ? seen.processes : []), st.process] });
      }
    }
    banner.hidden = lost.size === 0;
    banner.textContent = [...lost].map(([address, b]) =>
      `Kafka broker lost: ${address} has not answered for ${Math.round(b.seconds)} s ` +
      `(processes ${b.processes.join(", ")} wait for it, up to --broker-timeout).`).join("\n");
  }

  function showError(error) {
    const banner = document.getElementById("error");
    const dot = document.getElementById("live-dot");
    if (error) {
      banner.textContent = `Cannot read cluster.json: ${error.message || error}. Showing the last good data; retrying every ${POLL_MS / 1000} s.`;
      banner.hidden = false;
      dot.className = "dot bad";
    } else {
      banner.hidden = true;
      banner.textContent = "";
      dot.className = "dot ok";
    }
  }

  async function fetchCluster() {
    const response = await fetch("cluster.json", { cache: "no-store", signal: AbortSignal.timeout(POLL_MS + 9000) });
    if (!response.ok) throw new Error(`HTTP ${response.status} ${response.statusText}`.trim());
    return response.json();
  }

  async function poll() {
    const started = performance.now();
    let problem = null;
    try {
      const cluster = await fetchCluster();
      try {
        render(cluster);
      } catch (error) {
        console.error(error);
        problem = new Error(`the page could not show it (${error.message})`);
      }
    } catch (error) {
      problem = error;
    }
    if (problem) {
      state.errors += 1;
      document.body.dataset.errors = String(state.errors);
    } else {
      state.polls += 1;
      document.body.dataset.polls = String(state.polls);
    }
    showError(problem);
    setTimeout(poll, Math.max(0, POLL_MS - (performance.now() - started)));
  }

  poll();
})();
