// chainlab chain designer: the clickable DAG (an anywidget ES module, shipped in the package;
// nothing is fetched; Python puts dagview.js, the viewport it shares with the run widget's
// DAG, in front of it). Python sends the SVG (laid out by Graphviz, only when the chain's
// structure changes) and a small scoped <style> (problems, selection). A click on a step's
// node, or Enter/Space on it (every node is focusable), sets `selected`; the picture fits
// the column's width, zooms and pans as the run widget's does.
// "Write cell": insert a `%%chain` cell below the cell whose output shows the designer (a
// second click replaces the cell the first one wrote, while it is still there),
// through the notebook model the widget manager knows (JupyterLab, Notebook 7); elsewhere
// copy the text to the clipboard. The outcome goes back to Python as a message.

function hasOutput(cell, host) {
  const outputs = typeof cell.getOutputs === "function" ? cell.getOutputs() : [];
  return outputs.some((o) => {
    const view = o && o.data && o.data["application/vnd.jupyter.widget-view+json"];
    return view && view.model_id === host;
  });
}

// the cell each designer (by its output's model id) wrote: a second "Write cell" replaces it
const WRITTEN = new Map();

async function writeCell(model, text, host) {
  const manager = model.widget_manager;
  const context = manager && manager.context;
  const notebook = context && context.model && context.model.sharedModel;
  if (notebook && Array.isArray(notebook.cells) && typeof notebook.insertCell === "function") {
    const mine = WRITTEN.get(host);
    const old = mine && notebook.cells.findIndex((cell) => cell.id === mine);
    if (old !== undefined && old >= 0 && typeof notebook.cells[old].setSource === "function") {
      notebook.cells[old].setSource(text);
      return { how: "replaced", index: old };
    }
    let index = -1;
    notebook.cells.forEach((cell, i) => { if (hasOutput(cell, host)) index = i; });
    if (index < 0) index = notebook.cells.length - 1;
    const cell = notebook.insertCell(index + 1, { cell_type: "code", source: text, metadata: {} });
    const written = cell || notebook.cells[index + 1];
    if (written && written.id) WRITTEN.set(host, written.id);
    return { how: "inserted", index: index + 1 };
  }
  if (navigator.clipboard && navigator.clipboard.writeText) {
    await navigator.clipboard.writeText(text);
    return { how: "clipboard" };
  }
  return { how: "failed", detail: "this front end can neither insert cells nor copy" };
}

function render({ model, el }) {
  el.classList.add("cl-dsg-canvasroot");
  const style = document.createElement("div");
  style.className = "cl-dsg-style";
  el.append(style);
  const view = createDagView(el, { onNode: (stepId) => clSelect(model, stepId) });
  view.canvas.classList.add("cl-dsg-svg");

  const mark = () => {
    const selected = model.get("selected");
    for (const node of view.canvas.querySelectorAll("[data-step-id]")) {
      node.setAttribute("aria-pressed", String(node.dataset.stepId === selected));
    }
  };
  const draw = () => {
    view.canvas.innerHTML = model.get("svg");
    clWireNodes(view.canvas, model.get("steps"), "edit step");
    mark();
    view.shown();
  };
  const restyle = () => { style.innerHTML = model.get("css"); };
  const onMessage = (msg) => {
    if (!msg || msg.type !== "write_cell") return;
    writeCell(model, msg.text, msg.host)
      .then((result) => model.send({ type: "write_cell_done", ...result }))
      .catch((err) => model.send({ type: "write_cell_done", how: "failed", detail: String(err) }));
  };
  model.on("change:svg", draw);
  model.on("change:steps", draw);
  model.on("change:css", restyle);
  model.on("change:selected", mark);
  model.on("msg:custom", onMessage);
  restyle();
  draw();
  return () => {
    view.dispose();
    model.off("change:svg", draw);
    model.off("change:steps", draw);
    model.off("change:css", restyle);
    model.off("change:selected", mark);
    model.off("msg:custom", onMessage);
  };
}

export default { render };
