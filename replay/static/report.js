"use strict";
// The prompts of an audit report, rebuilt on demand from the data block: every message
// line and every distinct tail is stored once, so the page grows with what the session
// added, not with the sum of its requests. Log text only ever goes through textContent.
(() => {
  const data = JSON.parse(document.getElementById("prompt-data").textContent);

  function span(cls, text) {
    const el = document.createElement("span");
    el.className = cls;
    el.textContent = text;
    return el;
  }

  function diffClass(line) {
    if (line.startsWith("@@")) return "hunk";
    if (line.startsWith("+")) return "add";
    if (line.startsWith("-")) return "del";
    return "same";
  }

  function diff(p) {
    const pre = document.createElement("pre");
    pre.className = "diff";
    for (let i = p.count - p.new; i < p.count; i++) {
      pre.append(span("add", `+ message ${i + 1}: ${data.lines[p.start + i]}`));
    }
    if (p.diff) {
      for (const line of p.diff.split("\n")) pre.append(span(diffClass(line), line + "\n"));
    } else {
      pre.append(span("same", "  (tail unchanged)\n"));
    }
    return pre;
  }

  function bytes(p) {
    const pre = document.createElement("pre");
    pre.className = "bytes";
    pre.textContent = data.lines.slice(p.start, p.start + p.count).join("") + data.tails[p.tail];
    return pre;
  }

  function heading(text) {
    const h = document.createElement("h3");
    h.textContent = text;
    return h;
  }

  function fill(details) {
    const p = data.prompts[Number(details.dataset.index)];
    const body = details.querySelector(".prompt-body");
    body.replaceChildren(
      heading("Diff against the previous request"), diff(p),
      heading("Request bytes (canonical, as hashed)"), bytes(p),
    );
    details.dataset.filled = "1";
  }

  for (const details of document.querySelectorAll("details.prompt")) {
    details.addEventListener("toggle", () => {
      if (details.open && !details.dataset.filled) fill(details);
    });
  }
})();
