// "Code → new cell" on a python card: the call's code as a new cell below the agent's cell.
// It inserts a cell through the notebook model the widget manager holds (JupyterLab,
// Notebook 7); nothing is executed. Where that model is out of reach (another frontend),
// it says which magic does the same. Every text is set with textContent: the code is data.
function notebookOf(model) {
  const manager = model.widget_manager;
  const context = manager && manager.context;
  const shared = context && context.model && context.model.sharedModel;
  return shared && typeof shared.insertCell === "function" ? shared : null;
}

function cellIndex(shared, cellId, el) {
  const cells = shared.cells || [];
  if (cellId) {
    const at = cells.findIndex((c) => c && (c.id === cellId || (c.getId && c.getId() === cellId)));
    if (at >= 0) return at;
  }
  // No cell id in the request (an older frontend): the cell around this output, by position.
  const cell = el.closest(".jp-Cell");
  const notebook = cell && cell.closest(".jp-Notebook");
  if (!notebook) return -1;
  const all = Array.from(notebook.querySelectorAll(":scope .jp-Cell"))
    .filter((c) => c.closest(".jp-Notebook") === notebook);
  return all.indexOf(cell);
}

function render({ model, el }) {
  el.classList.add("ipyagent-cellcode");
  const button = document.createElement("button");
  button.className = "jupyter-widgets jupyter-button widget-button ipyagent-cellcode-button";
  button.textContent = model.get("label");
  button.title = model.get("hint");
  const status = document.createElement("span");
  status.className = "ipyagent-cellcode-status";
  el.append(button, status);
  button.addEventListener("click", () => {
    const shared = notebookOf(model);
    const index = shared ? cellIndex(shared, model.get("cell_id"), el) : -1;
    if (shared && index >= 0) {
      shared.insertCell(index + 1, { cell_type: "code", source: model.get("code"), metadata: {} });
      status.textContent = model.get("inserted");
      model.send({ event: "inserted", index: index + 1 });
    } else {
      status.textContent = model.get("fallback");
      model.send({ event: "unreachable" });
    }
  });
}

export default { render };
