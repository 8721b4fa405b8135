// aotc report: draws each graph with dagre's layout as SVG, grouped by module.
// Everything shown comes from the JSON block and is set as text, never as markup.
(function () {
  "use strict";
  const data = JSON.parse(document.getElementById("aotc-data").textContent);
  const NS = "http://www.w3.org/2000/svg";
  // dagre lays out graphs a few thousand ranks deep only until its recursion overflows the
  // browser's stack (about 2,000 nodes in a chain), and takes seconds on a few hundred nodes
  // with many edges across module boxes: a graph of more than COLLAPSE_ABOVE nodes opens
  // with its modules folded, showing at most FIRST_VIEW boxes, and a view draws at most MAX_DRAW
  const COLLAPSE_ABOVE = 400;
  const FOLD_BLOCKS_ABOVE = 150;  // a graph this big with repeated blocks opens with them folded
  const FIRST_VIEW = 600;
  const BLOCK_NODES = 4;
  const READABLE = 0.85;  // 11px labels at 0.85 are 9.4px on screen
  const MAX_DRAW = 1200;
  const svg = document.getElementById("graph");
  const status = document.getElementById("status");
  const detail = document.getElementById("detail");
  const search = document.getElementById("search");
  const matchesEl = document.getElementById("matches");
  let state = null; // {index, graph, collapsed: Set, zoom: {x, y, k}}

  function depth(path) { return path ? path.split(".").length : 0; }
  function ancestors(path) {
    if (!path) return [];
    const parts = path.split("."), out = [];
    for (let i = 1; i <= parts.length; i++) out.push(parts.slice(0, i).join("."));
    return out;
  }
  // the outermost collapsed module that hides `path`, or null
  function hiddenBy(path, collapsed) {
    for (const a of ancestors(path)) if (collapsed.has(a)) return a;
    return null;
  }

  // how many boxes a view with these modules collapsed draws: nodes and collapsed modules
  function visibleCount(graph, collapsed) {
    let n = 0;
    for (const node of graph.nodes) if (hiddenBy(node.module, collapsed) === null) n++;
    for (const m of collapsed) if (hiddenBy(m, collapsed) === m) n++;
    return n;
  }

  // The first view of a big graph. A model's repeated blocks (the items of a ModuleList or
  // Sequential: layer.0 ... layer.11) each fold into one box and everything around them is
  // drawn: the model reads as its architecture. Without such blocks, the deepest level of
  // modules whose collapse leaves at most FIRST_VIEW boxes.
  function initialCollapse(graph) {
    const modules = Object.keys(graph.modules);
    if (graph.nodes.length <= FOLD_BLOCKS_ABOVE || !modules.length) return new Set();
    const blocks = repeatedBlocks(graph, modules);
    if (blocks.size && visibleCount(graph, blocks) <= FIRST_VIEW) return blocks;
    if (graph.nodes.length <= COLLAPSE_ABOVE) return new Set();
    const maxDepth = Math.max(...modules.map(depth));
    let best = new Set(modules.filter((m) => depth(m) === 1));
    for (let d = 2; d <= maxDepth; d++) {
      const level = new Set(modules.filter((m) => depth(m) === d || (depth(m) < d && !modules.some((c) => c.startsWith(m + ".")))));
      if (visibleCount(graph, level) > FIRST_VIEW) break;
      best = level;
    }
    return best;
  }

  // the outermost modules named by an index (`layer.3`) with at least one sibling so named,
  // each made of modules of its own: a Linear of a Sequential is no block
  function repeatedBlocks(graph, modules) {
    const sizes = {};
    graph.nodes.forEach((n) => ancestors(n.module).forEach((a) => { sizes[a] = (sizes[a] || 0) + 1; }));
    const parentOf = (m) => m.slice(0, Math.max(0, m.lastIndexOf(".")));
    const inner = new Set(modules.map(parentOf));
    const indexed = modules.filter((m) => /(^|\.)\d+$/.test(m) && inner.has(m));
    const siblings = {};
    indexed.forEach((m) => { siblings[parentOf(m)] = (siblings[parentOf(m)] || 0) + 1; });
    const all = indexed.filter((m) => siblings[parentOf(m)] >= 2);
    const blocks = all.filter((m) => !all.some((b) => m.startsWith(b + ".")));
    if (!blocks.length) return new Set();
    // beside the blocks, the other parts of the modules that hold them fold too (a BERT's
    // embeddings and pooler): the first view is the model's outline
    const spine = new Set([""]);
    blocks.forEach((b) => ancestors(b).forEach((a) => { if (a !== b) spine.add(a); }));
    const parts = modules.filter((m) => !spine.has(m) && spine.has(parentOf(m)) && (sizes[m] || 0) >= BLOCK_NODES);
    return new Set([...blocks, ...parts]);
  }

  // expand `path` (and what encloses it); if the view would pass MAX_DRAW, collapse the
  // largest other expanded modules first. Returns false when it cannot fit.
  function expand(paths) {
    const {graph} = state;
    const next = new Set(state.collapsed);
    const keep = new Set();
    for (const p of paths) for (const a of ancestors(p)) { next.delete(a); keep.add(a); }
    const sizes = {};
    graph.nodes.forEach((n) => ancestors(n.module).forEach((a) => { sizes[a] = (sizes[a] || 0) + 1; }));
    const open = Object.keys(graph.modules).filter((m) => !keep.has(m) && !next.has(m)).sort((a, b) => (sizes[b] || 0) - (sizes[a] || 0));
    while (visibleCount(graph, next) > MAX_DRAW && open.length) next.add(open.shift());
    if (visibleCount(graph, next) > MAX_DRAW) {
      status.textContent = `expanding that would draw ${visibleCount(graph, next)} boxes; this page draws at most ${MAX_DRAW} at once: expand a smaller module or search for a node`;
      return false;
    }
    state.collapsed = next;
    render();
    return true;
  }

  function el(name, attrs, parent) {
    const e = document.createElementNS(NS, name);
    for (const k in attrs) e.setAttribute(k, attrs[k]);
    if (parent) parent.appendChild(e);
    return e;
  }

  function textWidth(s) { return Math.max(40, 7 * s.length + 16); }

  function show(index) {
    const graph = data.graphs[index];
    state = {index, graph, collapsed: initialCollapse(graph), zoom: null};
    document.querySelectorAll(".tab").forEach((t) => t.classList.toggle("active", +t.dataset.graph === index));
    render();
  }

  function render() {
    const t0 = performance.now();
    const {graph, collapsed} = state;
    const G = new dagre.graphlib.Graph({compound: true});
    G.setGraph({rankdir: "TB", nodesep: 14, ranksep: 26, marginx: 20, marginy: 20});
    G.setDefaultEdgeLabel(() => ({}));
    const counts = {}; // module -> ops inside, for collapsed boxes
    graph.nodes.forEach((n) => ancestors(n.module).forEach((a) => { counts[a] = (counts[a] || 0) + 1; }));
    const modules = Object.keys(graph.modules).filter((m) => {
      const h = hiddenBy(m, collapsed);
      return h === null || h === m;
    });
    for (const m of modules) {
      if (collapsed.has(m)) {
        const parent = modules.filter((p) => m.startsWith(p + ".") && !collapsed.has(p)).sort((a, b) => b.length - a.length)[0];
        const name = parent ? m.slice(parent.length + 1) : m;  // the enclosing box's title has the rest
        const label = `${name}${graph.modules[m] ? " · " + graph.modules[m] : ""} ▸ ${counts[m] || 0}`;
        G.setNode("c:" + m, {kind: "group", path: m, label, width: textWidth(label), height: 30});
      } else {
        G.setNode("m:" + m, {kind: "cluster", path: m, label: `${m} ${graph.modules[m] ? "(" + graph.modules[m] + ")" : ""}`});
      }
    }
    for (const m of modules) {
      const parent = m.includes(".") ? m.slice(0, m.lastIndexOf(".")) : "";
      if (parent && !collapsed.has(parent) && modules.includes(parent)) G.setParent((collapsed.has(m) ? "c:" : "m:") + m, "m:" + parent);
    }
    const where = graph.nodes.map((n, i) => {
      const h = hiddenBy(n.module, collapsed);
      if (h !== null) return "c:" + h;
      const id = "n" + i;
      const label = n.label;
      G.setNode(id, {kind: "node", i, label, width: textWidth(label), height: 26});
      if (n.module && G.hasNode("m:" + n.module)) G.setParent(id, "m:" + n.module);
      return id;
    });
    const seen = new Set();
    for (const [a, b] of graph.edges) {
      const u = where[a], v = where[b], key = u + "\u0000" + v;
      if (u === v || seen.has(key)) continue;
      seen.add(key);
      G.setEdge(u, v);
    }
    try {
      dagre.layout(G);
    } catch (e) {
      status.textContent = `this view is too deep for the layout engine (${e.message}); collapse a module or search for a node`;
      return;
    }
    draw(G);
    const ms = performance.now() - t0;
    const drawn = svg.querySelectorAll("g.node").length;
    status.textContent = `${drawn} of ${graph.nodes.length} nodes drawn, ${collapsed.size} modules collapsed, laid out in ${ms.toFixed(0)} ms`;
    document.body.dataset.rendered = String(state.index);
    document.body.dataset.layoutMs = ms.toFixed(0);
    highlight();
  }

  function draw(G) {
    svg.textContent = "";
    const view = el("g", {id: "viewport"}, svg);
    const clusters = el("g", {class: "clusters"}, view);
    const edges = el("g", {class: "edges"}, view);
    const nodes = el("g", {class: "nodes"}, view);
    G.nodes().forEach((id) => {
      const d = G.node(id);
      if (!d || d.kind !== "cluster") return;
      const g = el("g", {class: "cluster", "data-path": d.path}, clusters);
      el("rect", {x: d.x - d.width / 2, y: d.y - d.height / 2, width: d.width, height: d.height, rx: 6}, g);
      const title = el("text", {x: d.x - d.width / 2 + 6, y: d.y - d.height / 2 + 13, class: "title"}, g);
      title.textContent = "▾ " + d.label;
      title.addEventListener("click", () => { state.collapsed.add(d.path); render(); });
    });
    G.edges().forEach((e) => {
      const pts = G.edge(e).points;
      const dpath = pts.map((p, k) => (k ? "L" : "M") + p.x.toFixed(1) + "," + p.y.toFixed(1)).join("");
      el("path", {d: dpath, "marker-end": "url(#arrow)"}, edges);
    });
    G.nodes().forEach((id) => {
      const d = G.node(id);
      if (!d || d.kind === "cluster") return;
      if (d.kind === "group") {
        const g = el("g", {class: "group-node", "data-path": d.path}, nodes);
        el("rect", {x: d.x - d.width / 2, y: d.y - d.height / 2, width: d.width, height: d.height, rx: 6}, g);
        const t = el("text", {x: d.x, y: d.y + 4, "text-anchor": "middle"}, g);
        t.textContent = d.label;
        g.addEventListener("click", () => expand([d.path]));
        return;
      }
      const n = state.graph.nodes[d.i];
      const g = el("g", {class: ["node", n.kind, ...n.marks].join(" "), "data-i": d.i}, nodes);
      el("rect", {x: d.x - d.width / 2, y: d.y - d.height / 2, width: d.width, height: d.height, rx: n.kind === "op" ? 4 : 12}, g);
      const t = el("text", {x: d.x, y: d.y + 4, "text-anchor": "middle"}, g);
      t.textContent = d.label;
      const tip = el("title", {}, g);
      tip.textContent = `${n.name}: ${n.note || n.label} ${n.shape} ${n.dtype}`;
      g.addEventListener("click", () => describe(n));
    });
    const defs = el("defs", {}, svg);
    const marker = el("marker", {id: "arrow", viewBox: "0 0 10 10", refX: 9, refY: 5, markerWidth: 6, markerHeight: 6, orient: "auto"}, defs);
    el("path", {d: "M0,0L10,5L0,10z"}, marker);
    const size = G.graph();
    state.size = {w: size.width || 100, h: size.height || 100};
    if (!state.zoom) fit(false); else applyZoom();
  }

  // whole: the whole graph in view, however small. Else the first view: the whole graph
  // when it fits at a zoom where labels stay legible (READABLE), otherwise that zoom from
  // the top, centred: the reader pans down a graph taller than the page.
  function fit(whole) {
    const box = svg.getBoundingClientRect();
    const across = box.width / state.size.w, all = Math.min(across, box.height / state.size.h);
    const k = Math.min(1.2, whole ? Math.max(0.02, all) : Math.max(READABLE, all));
    state.zoom = {k, x: (box.width - state.size.w * k) / 2, y: 10};
    applyZoom();
  }

  function applyZoom() {
    const z = state.zoom, view = document.getElementById("viewport");
    if (view) view.setAttribute("transform", `translate(${z.x},${z.y}) scale(${z.k})`);
  }

  function describe(n) {
    detail.textContent = "";
    const rows = [["name", n.name], ["what", n.kind === "op" ? n.note : n.role], ["label", n.label],
      ["module", n.module ? `${n.module} (${n.module_type || state.graph.modules[n.module] || "?"})` : "(the model)"],
      ["shape", n.shape], ["dtype", n.dtype], ["marks", n.marks.join(", ")], ["note", n.kind === "op" ? "" : n.note]];
    const table = document.createElement("table");
    for (const [k, v] of rows) {
      if (!v) continue;
      const tr = table.insertRow();
      tr.insertCell().textContent = k;
      tr.insertCell().textContent = v;
    }
    detail.appendChild(table);
  }

  function matches() {
    const q = search.value.trim().toLowerCase();
    if (!q) return [];
    const out = [];
    state.graph.nodes.forEach((n, i) => {
      const hay = `${n.label} ${n.name} ${n.module} ${n.slot} ${n.note} ${n.role}`.toLowerCase();
      if (hay.includes(q)) out.push(i);
    });
    return out;
  }

  function highlight() {
    const found = matches();
    const set = new Set(found);
    svg.querySelectorAll("g.node").forEach((g) => g.classList.toggle("match", set.has(+g.dataset.i)));
    const groups = new Set(found.map((i) => hiddenBy(state.graph.nodes[i].module, state.collapsed)).filter((x) => x));
    svg.querySelectorAll("g.group-node").forEach((g) => g.classList.toggle("match", groups.has(g.dataset.path)));
    matchesEl.textContent = search.value.trim() ? `${found.length} match${found.length === 1 ? "" : "es"}` : "";
    return found;
  }

  function goToFirst() {
    const found = highlight();
    if (!found.length) return;
    const hidden = found.slice(0, 50).map((i) => state.graph.nodes[i].module).filter((m) => hiddenBy(m, state.collapsed) !== null);
    if (hidden.length && !expand(hidden)) expand([hidden[0]]);
    const g = svg.querySelector(`g.node[data-i="${found[0]}"]`);
    if (!g) return;
    const r = g.getBBox(), box = svg.getBoundingClientRect();
    state.zoom = {k: 1, x: box.width / 2 - (r.x + r.width / 2), y: box.height / 2 - (r.y + r.height / 2)};
    applyZoom();
    describe(state.graph.nodes[found[0]]);
  }

  // pan and zoom
  let drag = null;
  svg.addEventListener("mousedown", (e) => { drag = {x: e.clientX - state.zoom.x, y: e.clientY - state.zoom.y}; });
  window.addEventListener("mouseup", () => { drag = null; });
  svg.addEventListener("mousemove", (e) => {
    if (!drag) return;
    state.zoom.x = e.clientX - drag.x;
    state.zoom.y = e.clientY - drag.y;
    applyZoom();
  });
  svg.addEventListener("wheel", (e) => {
    e.preventDefault();
    const box = svg.getBoundingClientRect(), z = state.zoom;
    const f = e.deltaY < 0 ? 1.15 : 1 / 1.15, px = e.clientX - box.left, py = e.clientY - box.top;
    z.x = px - (px - z.x) * f;
    z.y = py - (py - z.y) * f;
    z.k *= f;
    applyZoom();
  }, {passive: false});

  search.addEventListener("input", highlight);
  search.addEventListener("keydown", (e) => { if (e.key === "Enter") goToFirst(); });
  document.getElementById("expand-all").addEventListener("click", () => {
    state.zoom = null;
    if (visibleCount(state.graph, new Set()) <= MAX_DRAW) { state.collapsed.clear(); render(); return; }
    // too big to draw whole: one more level of modules open, as far as MAX_DRAW allows
    const level = Math.min(...[...state.collapsed].map(depth));
    if (!expand([...state.collapsed].filter((m) => depth(m) === level))) {
      status.textContent = `${state.graph.nodes.length} nodes are more than this page draws at once (${MAX_DRAW}): expand modules one by one, or search`;
    }
  });
  document.getElementById("collapse-all").addEventListener("click", () => {
    state.collapsed = new Set(Object.keys(state.graph.modules));  // nested ones show as boxes once opened
    state.zoom = null;
    render();
  });
  document.getElementById("fit").addEventListener("click", () => fit(true));
  document.querySelectorAll(".tab").forEach((t) => t.addEventListener("click", () => show(+t.dataset.graph)));
  document.querySelectorAll("details.collapsed").forEach((d) => { d.open = false; });
  if (data.graphs.length) show(0);
})();
