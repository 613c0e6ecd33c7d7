// chainlab-cellmagic: a code cell whose first line is `%%chain ...` is highlighted as YAML.
//
// JupyterLab 4 has no kernel-side hook for a cell magic's editor mode, so this plugin watches
// the notebooks in the main area and sets a cell's mime type from its first line: YAML for
// `%%chain`, the notebook's code mime type (Python) otherwise. It imports nothing: it finds
// notebooks by their shape (panel.content.model.cells), so it needs no JupyterLab package at
// build time beyond @jupyterlab/builder, and works in JupyterLab and Notebook 7 alike.

const MAGIC = /^%%chain(\s|$)/;
const YAML = 'text/x-yaml';
const WATCHED = new WeakSet();

function isNotebook(widget) {
  const notebook = widget && widget.content;
  return !!(notebook && notebook.model && notebook.model.cells && notebook.widgets);
}

function wantedMime(notebook, model) {
  return MAGIC.test(model.sharedModel.getSource()) ? YAML : notebook.codeMimetype;
}

function watchCell(notebook, cell) {
  const model = cell.model;
  if (!model || model.type !== 'code' || WATCHED.has(model)) {
    return;
  }
  WATCHED.add(model);
  const apply = () => {
    const want = wantedMime(notebook, model);
    if (model.mimeType !== want) {
      model.mimeType = want;
    }
  };
  model.contentChanged.connect(apply);
  // the notebook resets every code cell's mime type when the kernel's language arrives
  model.mimeTypeChanged.connect(apply);
  apply();
}

function watchNotebook(panel) {
  const notebook = panel.content;
  if (WATCHED.has(notebook)) {
    return;
  }
  WATCHED.add(notebook);
  const scan = () => notebook.widgets.forEach(cell => watchCell(notebook, cell));
  // cell widgets exist once the model change has been handled: look on the next frame
  const later = () => requestAnimationFrame(scan);
  notebook.modelContentChanged.connect(later);
  notebook.modelChanged.connect(later);
  scan();
}

function scanShell(app) {
  for (const widget of app.shell.widgets('main')) {
    if (isNotebook(widget)) {
      watchNotebook(widget);
    }
  }
}

const plugin = {
  id: 'chainlab-cellmagic:plugin',
  description: 'Highlights %%chain cells as YAML.',
  autoStart: true,
  activate: app => {
    const scan = () => scanShell(app);
    app.restored.then(() => {
      scan();
      if (app.shell.layoutModified) {
        app.shell.layoutModified.connect(scan);
      }
      if (app.shell.currentChanged) {
        app.shell.currentChanged.connect(scan);
      }
    });
  }
};

export default plugin;
