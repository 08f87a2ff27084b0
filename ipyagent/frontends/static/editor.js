// The Edit box of an approval card: a textarea that keeps its keys.
// Tab / Shift-Tab indent and dedent, Enter keeps the indent, Ctrl/Cmd-Enter runs the
// edited code, Escape cancels. No key reaches the notebook's shortcuts while it has focus.
// Python is highlighted by an overlay built with textContent only (never as HTML).
const KEYWORDS = new Set(("False None True and as assert async await break class continue " +
  "def del elif else except finally for from global if import in is lambda nonlocal not " +
  "or pass raise return try while with yield match case").split(" "));
const TOKEN = /(#[^\n]*)|("""[\s\S]*?(?:"""|$)|'''[\s\S]*?(?:'''|$)|"(?:\\.|[^"\\\n])*"?|'(?:\\.|[^'\\\n])*'?)|\b(\d[\d_]*(?:\.\d*)?(?:[eE][+-]?\d+)?j?)\b|([A-Za-z_][A-Za-z0-9_]*)/g;
const INDENT = "    ";

function paint(pre, text) {
  pre.replaceChildren();
  let last = 0;
  const add = (s, cls) => {
    if (!s) return;
    if (!cls) { pre.appendChild(document.createTextNode(s)); return; }
    const span = document.createElement("span");
    span.className = cls;
    span.textContent = s;
    pre.appendChild(span);
  };
  for (const m of text.matchAll(TOKEN)) {
    add(text.slice(last, m.index));
    const cls = m[1] ? "ipa-c" : m[2] ? "ipa-s" : m[3] ? "ipa-n"
      : KEYWORDS.has(m[4]) ? "ipa-k" : "";
    add(m[0], cls);
    last = m.index + m[0].length;
  }
  add(text.slice(last) + "\n");  // a trailing newline keeps the last line's height
}

function lineStart(text, pos) { return text.lastIndexOf("\n", pos - 1) + 1; }

function render({ model, el }) {
  const wrap = document.createElement("div");
  wrap.className = "ipyagent-editor";
  const pre = document.createElement("pre");
  pre.setAttribute("aria-hidden", "true");
  const ta = document.createElement("textarea");
  ta.spellcheck = false;
  ta.setAttribute("autocapitalize", "off");
  ta.setAttribute("autocomplete", "off");
  ta.setAttribute("data-lm-suppress-shortcuts", "true");  // Lumino: no shortcuts from here
  ta.setAttribute("aria-label", "the code to run (Ctrl-Enter runs, Escape cancels)");
  wrap.append(pre, ta);
  el.appendChild(wrap);

  const fit = () => { ta.rows = Math.max(3, ta.value.split("\n").length + 1); };
  const sync = () => { paint(pre, ta.value); fit(); };
  const save = () => { model.set("value", ta.value); model.save_changes(); };
  const replace = (start, end, text, selStart, selEnd) => {
    ta.setRangeText(text, start, end, "end");
    ta.setSelectionRange(selStart, selEnd);
    sync();
    save();
  };

  ta.value = model.get("value");
  ta.disabled = model.get("disabled");
  sync();
  model.on("change:value", () => {
    if (ta.value !== model.get("value")) { ta.value = model.get("value"); sync(); }
  });
  model.on("change:disabled", () => { ta.disabled = model.get("disabled"); });
  // What runs is what the box shows: the text travels in the run message itself. A state
  // update (save) may wait in ipywidgets' buffer behind earlier ones while a custom
  // message goes at once, so after fast typing the kernel could see "run" first and run
  // a prefix of the text.
  const run = () => { save(); model.send({ event: "run", value: ta.value }); };
  model.on("msg:custom", (msg) => {
    if (msg && msg.event === "focus") ta.focus();
    else if (msg && msg.event === "submit") run();  // the card's "Run edited" button
  });

  ta.addEventListener("input", () => { sync(); save(); });
  ta.addEventListener("scroll", () => { pre.scrollLeft = ta.scrollLeft; pre.scrollTop = ta.scrollTop; });
  for (const type of ["keypress", "keyup"]) {
    ta.addEventListener(type, (e) => e.stopPropagation());
  }
  ta.addEventListener("keydown", (e) => {
    e.stopPropagation();  // the notebook never sees a key typed here
    const v = ta.value, s = ta.selectionStart, end = ta.selectionEnd;
    if (e.key === "Tab") {
      e.preventDefault();
      const first = lineStart(v, s);
      if (!e.shiftKey && s === end) {
        replace(s, end, INDENT, s + INDENT.length, s + INDENT.length);
        return;
      }
      const block = v.slice(first, end);
      const lines = block.split("\n");
      const out = e.shiftKey ? lines.map((l) => l.replace(/^ {1,4}|^\t/, ""))
        : lines.map((l) => INDENT + l);
      const text = out.join("\n");
      const shift = out[0].length - lines[0].length;
      replace(first, end, text, Math.max(first, s + shift), first + text.length);
    } else if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) {
      e.preventDefault();
      run();
    } else if (e.key === "Escape") {
      e.preventDefault();
      model.send({ event: "cancel" });
    } else if (e.key === "Enter" && !e.shiftKey && !e.altKey && s === end) {
      e.preventDefault();
      const line = v.slice(lineStart(v, s), s);
      let indent = line.match(/^[ \t]*/)[0];
      if (/:\s*(#.*)?$/.test(line)) indent += INDENT;
      const text = "\n" + indent;
      replace(s, end, text, s + text.length, s + text.length);
    }
  });
}

export default { render };
