// chainlab: the DAG viewport shared by the run widget's DAG (rundag.js) and the chain
// designer's canvas (designer.js). Not a module of its own: Python puts this file in front
// of each of them (chainlab.jupyter._assets), so both define nothing twice.
//
// The SVG (laid out once by Graphviz) sits in a scroll box. It opens fitted to the box's
// width (never enlarged past its natural size), so a wide fan-out shows whole, from its first
// step to its last; a graph taller than the box scrolls, with scrollbars that stay visible.
// "−" / "+" (or Ctrl + wheel at the pointer, or the keys - + on the focused box) zoom,
// "fit" and "1:1" come back; dragging the picture pans it. The line beside the buttons says
// the zoom and, when part of the graph is out of view, which part.

const CL_ZOOM_STEP = 1.25;
const CL_MIN_SCALE = 0.02;
const CL_MAX_SCALE = 4;

function clNaturalSize(svg) {
  // Graphviz sizes the SVG in points (1pt = 4/3 px)
  const w = parseFloat(svg.getAttribute("width")) * (4 / 3);
  const h = parseFloat(svg.getAttribute("height")) * (4 / 3);
  return w > 0 && h > 0 ? { w, h } : null;
}

function clButton(label, title) {
  const b = document.createElement("button");
  b.type = "button";
  b.className = "cl-zoom-btn";
  b.textContent = label;
  b.title = title;
  b.setAttribute("aria-label", title);
  return b;
}

// createDagView(el, options) -> { canvas, box, shown(), fit(), zoomBy(k), setScale(s),
//   state(), dispose() }
// options.onNode(stepId, event): a click (or Enter/Space) on a step's node;
// options.nodeLabel: the aria label's verb ("inspect step", "edit step").
function createDagView(el, options) {
  const opts = options || {};
  el.classList.add("cl-dagview-root");
  const bar = document.createElement("div");
  bar.className = "cl-zoombar";
  const out = clButton("\u2212", "zoom out (Ctrl + wheel, or -)");
  const fitB = clButton("fit", "fit the graph to the width (0)");
  const inB = clButton("+", "zoom in (Ctrl + wheel, or +)");
  const oneB = clButton("1:1", "natural size (1)");
  const info = document.createElement("span");
  info.className = "cl-zoominfo";
  info.setAttribute("aria-live", "polite");
  bar.append(out, fitB, inB, oneB, info);
  const box = document.createElement("div");
  box.className = "cl-dagbox";
  box.tabIndex = 0;
  box.setAttribute("role", "region");
  box.setAttribute("aria-label", "the chain's DAG: drag to pan, Ctrl + wheel to zoom");
  const canvas = document.createElement("div");
  canvas.className = "cl-dagcanvas";
  box.append(canvas);
  el.append(bar, box);

  let scale = 1;
  let fitted = true; // follows the box's width until the person zooms
  let natural = null;

  const svgOf = () => canvas.querySelector("svg");
  const nodeCount = () => canvas.querySelectorAll("g.cl-step").length;

  let tiles = [];

  function apply() {
    const svg = svgOf();
    if (!svg || !natural) return;
    svg.style.width = `${natural.w * scale}px`;
    svg.style.height = `${natural.h * scale}px`;
    clPlaceTiles(svg, tiles, scale);
    describe();
  }

  function describe() {
    if (!natural) {
      info.textContent = "";
      return;
    }
    const n = nodeCount();
    const parts = [`${Math.round(scale * 100)}%${fitted ? " (fit)" : ""}`];
    if (n) parts.push(`${n.toLocaleString("en-US")} step${n === 1 ? "" : "s"}`);
    const wide = natural.w * scale > box.clientWidth + 1;
    const tall = natural.h * scale > box.clientHeight + 1;
    if (wide || tall) {
      const x0 = box.scrollLeft / (natural.w * scale);
      const x1 = (box.scrollLeft + box.clientWidth) / (natural.w * scale);
      const y0 = box.scrollTop / (natural.h * scale);
      const y1 = (box.scrollTop + box.clientHeight) / (natural.h * scale);
      const num = (v, fine) => (fine ? (v * 100).toFixed(1) : String(Math.round(v * 100)));
      const pct = (a, b) => { // a tenth of a percent when the view is a sliver of the graph
        const fine = b - a < 0.02;
        return `${num(a, fine)}-${num(Math.min(1, b), fine)}%`;
      };
      const where = [];
      if (wide) where.push(`${pct(x0, x1)} across`);
      if (tall) where.push(`${pct(y0, y1)} down`);
      parts.push(`showing ${where.join(", ")}: drag or scroll for the rest`);
    }
    info.textContent = parts.join(" · ");
  }

  function fit() {
    fitted = true;
    const room = box.clientWidth;
    if (!natural || !room) return;
    scale = Math.max(CL_MIN_SCALE, Math.min(1, (room - 2) / natural.w));
    apply();
  }

  function setScale(next, px, py) {
    if (!natural) return;
    const s = Math.max(CL_MIN_SCALE, Math.min(CL_MAX_SCALE, next));
    // keep the point under (px, py) (box coordinates; default: the box's centre) in place
    const x = px === undefined ? box.clientWidth / 2 : px;
    const y = py === undefined ? box.clientHeight / 2 : py;
    const cx = (box.scrollLeft + x) / scale;
    const cy = (box.scrollTop + y) / scale;
    scale = s;
    fitted = false;
    apply();
    box.scrollLeft = cx * scale - x;
    box.scrollTop = cy * scale - y;
    describe();
  }

  const zoomBy = (k, px, py) => setScale(scale * k, px, py);

  // a new picture (first draw, or the designer's new layout): cut it into tiles when it is
  // large (``tiled``), fit it
  function shown(tiled) {
    tiles = tiled ? clTile(canvas) : [];
    const svg = svgOf();
    natural = svg ? clNaturalSize(svg) : null;
    if (svg) {
      svg.style.maxWidth = "none";
      svg.style.display = "block";
    }
    if (fitted || !natural) fit();
    else apply();
  }

  out.addEventListener("click", () => zoomBy(1 / CL_ZOOM_STEP));
  inB.addEventListener("click", () => zoomBy(CL_ZOOM_STEP));
  fitB.addEventListener("click", () => fit());
  oneB.addEventListener("click", () => setScale(1));
  box.addEventListener("wheel", (event) => {
    if (!(event.ctrlKey || event.metaKey)) return; // a plain wheel scrolls
    event.preventDefault();
    const r = box.getBoundingClientRect();
    zoomBy(event.deltaY < 0 ? CL_ZOOM_STEP : 1 / CL_ZOOM_STEP,
      event.clientX - r.left, event.clientY - r.top);
  }, { passive: false });
  box.addEventListener("scroll", describe);

  // drag to pan; a click that did not move selects a node
  let drag = null;
  let dragged = false;
  box.addEventListener("pointerdown", (event) => {
    if (event.button !== 0) return;
    drag = { x: event.clientX, y: event.clientY, left: box.scrollLeft, top: box.scrollTop,
             id: event.pointerId };
    dragged = false;
  });
  box.addEventListener("pointermove", (event) => {
    if (!drag || event.pointerId !== drag.id) return;
    const dx = event.clientX - drag.x;
    const dy = event.clientY - drag.y;
    if (!dragged && Math.abs(dx) + Math.abs(dy) < 4) return;
    if (!dragged) {
      dragged = true;
      box.classList.add("cl-panning");
      if (box.setPointerCapture) box.setPointerCapture(drag.id);
    }
    box.scrollLeft = drag.left - dx;
    box.scrollTop = drag.top - dy;
  });
  const endDrag = () => {
    if (drag && dragged && box.releasePointerCapture) {
      try { box.releasePointerCapture(drag.id); } catch (err) { /* already released */ }
    }
    drag = null;
    box.classList.remove("cl-panning");
  };
  box.addEventListener("pointerup", endDrag);
  box.addEventListener("pointercancel", endDrag);

  const nodeOf = (target) => target && target.closest && target.closest("[data-step-id]");
  box.addEventListener("click", (event) => {
    if (dragged) { dragged = false; return; } // the end of a pan, not a click
    const node = nodeOf(event.target);
    if (node && opts.onNode) opts.onNode(node.dataset.stepId, event);
  });
  box.addEventListener("keydown", (event) => {
    const node = nodeOf(event.target);
    if (node && (event.key === "Enter" || event.key === " ")) {
      event.preventDefault();
      if (opts.onNode) opts.onNode(node.dataset.stepId, event);
      return;
    }
    if (event.target !== box || event.ctrlKey || event.metaKey || event.altKey) return;
    const keys = { "+": () => zoomBy(CL_ZOOM_STEP), "=": () => zoomBy(CL_ZOOM_STEP),
                   "-": () => zoomBy(1 / CL_ZOOM_STEP), "0": fit, "1": () => setScale(1) };
    if (keys[event.key]) {
      event.preventDefault();
      keys[event.key]();
    }
  });

  const resized = typeof ResizeObserver === "function"
    ? new ResizeObserver(() => { if (fitted) fit(); else apply(); }) : null;
  if (resized) resized.observe(box);

  return {
    canvas, box, shown, fit, zoomBy, setScale,
    state: () => ({ scale, fitted, natural }),
    dispose: () => { if (resized) resized.disconnect(); },
  };
}

// mark every step's node: focusable, a button for assistive technology, its step id known.
// The elements are found in ONE pass over the picture (a querySelector per step scanned the
// whole picture each time: 11 s for a 3,332-step run, issue 49)
function clWireNodes(canvas, steps, verb) {
  const nodes = new Map();
  const byId = new Map();
  for (const element of canvas.querySelectorAll("[id]")) {
    if (!byId.has(element.id)) byId.set(element.id, element);
  }
  for (const [elementId, stepId] of Object.entries(steps || {})) {
    const node = byId.get(elementId);
    if (!node) continue;
    node.setAttribute("tabindex", "0");
    node.setAttribute("role", "button");
    node.setAttribute("aria-label", `${verb} ${stepId}`);
    node.dataset.stepId = stepId;
    node.classList.add("cl-clickable");
    nodes.set(elementId, node);
  }
  return nodes;
}

function clSelect(model, stepId) {
  model.set("selected", ""); // a click on the selected node shows it again
  model.set("selected", stepId);
  model.save_changes();
}

// A large DAG is cut into tiles: its nodes and edges, in Graphviz's order, spread over several
// <svg> elements, each cropped to the band its part of the graph covers and laid exactly where
// that band is in the whole picture. A node's change then restyles and repaints its tile only
// (Chrome records an SVG's paint as one piece: a 3,332-step DAG took ~50 ms to repaint for one
// node, a tile of ~500 elements takes a few), and a tile out of view is skipped altogether
// (content-visibility), so a scrubber jump that changes thousands of nodes restyles the ones
// in view. The order is kept, so what lies on top still does; only the elements receive the
// pointer, never a tile's empty area.
const CL_TILE = 500;

function clTile(canvas) {
  const svg = canvas.querySelector(":scope > svg");
  const graph = svg && svg.querySelector("g.graph");
  if (!graph) return [];
  const parts = [...graph.children].filter((c) => c.matches("g.node, g.edge, g.cluster"));
  if (parts.length <= CL_TILE * 1.5) return [];
  canvas.classList.add("cl-tiled");
  const tiles = [];
  for (let k = 1; k < Math.ceil(parts.length / CL_TILE); k++) {
    const tile = svg.cloneNode(false);
    tile.removeAttribute("id");
    tile.classList.add("cl-tile");
    const g = graph.cloneNode(false);
    g.removeAttribute("id");
    tile.append(g);
    for (const part of parts.slice(k * CL_TILE, (k + 1) * CL_TILE)) g.append(part);
    canvas.append(tile);
    tiles.push({ tile, g, box: null });
  }
  return tiles;
}

// place each tile over its band: its bounding box (in the picture's own units, measured once
// the picture is in the page) at the picture's current scale
function clPlaceTiles(svg, tiles, scale) {
  if (!tiles.length) return;
  const view = (svg.getAttribute("viewBox") || "0 0 0 0").split(/[\s,]+/).map(Number);
  const unit = (parseFloat(svg.getAttribute("width")) * (4 / 3)) / (view[2] || 1);
  for (const t of tiles) {
    if (!t.box) {
      const b = t.g.getBBox();
      if (!b.width && !b.height) continue; // not laid out yet: the next call places it
      const m = t.g.transform.baseVal.consolidate();
      const dx = m ? m.matrix.e : 0, dy = m ? m.matrix.f : 0;
      const pad = 2;
      t.box = { x: b.x + dx - pad, y: b.y + dy - pad, w: b.width + 2 * pad,
                h: b.height + 2 * pad };
      t.tile.setAttribute("viewBox", `${t.box.x} ${t.box.y} ${t.box.w} ${t.box.h}`);
    }
    const k = unit * scale;
    Object.assign(t.tile.style, {
      left: `${(t.box.x - view[0]) * k}px`, top: `${(t.box.y - view[1]) * k}px`,
      width: `${t.box.w * k}px`, height: `${t.box.h * k}px`,
    });
  }
}
