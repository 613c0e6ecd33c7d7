// chainlab run widget: the live DAG (an anywidget ES module; Python puts dagview.js in front
// of it). The SVG is laid out once and sent once (`svg`); every status change after that is
// a small message naming only the steps whose look changed (issue 40: a scrubber position
// of a 10,000-event run restyles the nodes that differ, not the whole picture):
//   {type: "states", reset, by: {status: [step index, ...]}, captions: {index: css string},
//    plain: [index, ...]}
// A node shows its status through `data-st` (the SVG's own rules turn it into fill, border
// and caption) and a caption with badges through the `--cl-c` property. A view that is drawn
// asks for the whole state once ({type: "ready"}). A click (or Enter) on a node sets
// `selected`.

function clApplyStates(nodes, msg) {
  if (msg.reset) {
    for (const node of nodes) {
      if (!node) continue;
      node.removeAttribute("data-st");
      node.style.removeProperty("--cl-c");
    }
  }
  for (const [status, indices] of Object.entries(msg.by || {})) {
    for (const i of indices) {
      const node = nodes[i];
      if (node) node.setAttribute("data-st", status);
    }
  }
  for (const [i, caption] of Object.entries(msg.captions || {})) {
    const node = nodes[Number(i)];
    if (node) node.style.setProperty("--cl-c", caption);
  }
  for (const i of msg.plain || []) {
    const node = nodes[i];
    if (node) node.style.removeProperty("--cl-c");
  }
}

// The run's static picture (an output of its own right after the widget's: what an export
// shows, chainlab/jupyter/run_widget/static.py) is hidden while this live widget shows, and
// shown again once the widget's kernel has gone. (A CSS :has() rule did this before; in a
// 3,000-step DAG it made every change restyle and repaint the whole output: issue 40.)
function clHidePicture(el) {
  let stop = () => {};
  let tries = 0;
  const attach = () => {
    const run = el.closest(".cl-run");
    const child = el.closest(".jp-OutputArea-child");
    if (!run || !child || !child.parentElement) {
      if (!el.isConnected && tries++ < 600) setTimeout(attach, 50);
      return;
    }
    const update = () => {
      const next = child.nextElementSibling;
      if (next && next.querySelector(".cl-static-run")) {
        next.classList.toggle("cl-picture-hidden",
          !run.classList.contains("jupyter-widgets-disconnected"));
      }
    };
    const outputs = new MutationObserver(update);
    outputs.observe(child.parentElement, { childList: true });
    const kernel = new MutationObserver(update);
    kernel.observe(run, { attributes: true, attributeFilter: ["class"] });
    update();
    stop = () => { outputs.disconnect(); kernel.disconnect(); };
  };
  attach();
  return () => { tries = 1e9; stop(); };
}

function render({ model, el }) {
  const view = createDagView(el, {
    onNode: (stepId) => clSelect(model, stepId),
  });
  let nodes = [];
  let applied = 0;
  const draw = () => {
    view.canvas.innerHTML = model.get("svg");
    view.shown(true); // (cut into tiles when large: before the nodes are looked up)
    const steps = model.get("steps") || {};
    const wired = clWireNodes(view.canvas, steps, "inspect step"); // element id -> node
    nodes = (model.get("order") || []).map((id) => wired.get(id) || null);
    model.send({ type: "ready" }); // the whole state, please
  };
  const onMessage = (msg) => {
    if (!msg || msg.type !== "states") return;
    clApplyStates(nodes, msg);
    applied += 1;
    el.dataset.patches = String(applied); // (a benchmark reads how many were applied)
  };
  model.on("change:svg", draw);
  model.on("msg:custom", onMessage);
  draw();
  const unhide = clHidePicture(el);
  return () => {
    unhide();
    view.dispose();
    model.off("change:svg", draw);
    model.off("msg:custom", onMessage);
  };
}

export default { render };
