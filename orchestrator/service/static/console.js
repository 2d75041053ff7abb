// skillog console: no framework, no build step. Every value from the server is put
// on the page with textContent (never innerHTML), except the approvals panel, which
// the server renders escaped. The token travels only in the HttpOnly cookie set by
// /api/login: this script never sees it after the login form.
"use strict";

async function call(method, url, body) {
  const response = await fetch(url, {
    method,
    credentials: "same-origin",
    headers: body === undefined ? {} : { "content-type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  let data = null;
  try { data = await response.json(); } catch (e) { data = null; }
  return { ok: response.ok, status: response.status, data };
}

function say(element, text, ok) {
  if (!element) return;
  element.textContent = text;
  element.className = "message " + (ok ? "ok" : "error");
}

function failure(result) {
  const data = result.data || {};
  return result.status + ": " + (data.error || "request failed") + (data.field ? " (" + data.field + ")" : "");
}

function setupLogin() {
  const form = document.getElementById("login");
  if (!form) return;
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const token = document.getElementById("token").value.trim();
    const result = await call("POST", "/api/login", { token });
    if (result.ok) { window.location.assign("/console"); return; }
    say(document.getElementById("message"), failure(result), false);
  });
}

function setupLogout() {
  const button = document.getElementById("logout");
  if (!button) return;
  button.addEventListener("click", async () => {
    await call("POST", "/api/logout", {});
    window.location.assign("/console/login");
  });
}

function setupSubmit() {
  const form = document.getElementById("submit");
  if (!form) return;
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const task = document.getElementById("task").value;
    const model = document.getElementById("model").value;
    const policy = document.getElementById("policy").value;
    const result = await call("POST", "/api/sessions", { task, model, policy });
    if (result.ok) { window.location.assign("/console/sessions/" + encodeURIComponent(result.data.session_id)); return; }
    say(document.getElementById("message"), failure(result), false);
  });
}

// Approve/deny buttons, wherever the panel is (delegated: the panel is reloaded).
function setupDecisions() {
  document.addEventListener("click", async (event) => {
    const button = event.target.closest("button.decide");
    if (!button) return;
    const article = button.closest("article.approval");
    const session = article.dataset.session;
    const callId = article.dataset.call;
    const reason = article.querySelector("input.reason").value || null;
    const verdict = button.dataset.verdict;
    const url = "/api/sessions/" + encodeURIComponent(session) + "/approvals/" +
      encodeURIComponent(callId) + "/" + verdict;
    const body = { reason };
    const remember = article.querySelector("select.remember").value;
    if (verdict === "approve" && remember) body.remember = remember;  // only grants are remembered
    const result = await call("POST", url, body);
    const message = article.querySelector(".message");
    if (result.ok) {
      say(message, (result.data.approved ? "approved" : "denied") + " by " + result.data.decided_by, true);
      article.querySelectorAll("button.decide").forEach((b) => { b.disabled = true; });
    } else {
      say(message, failure(result), false);
    }
  });
}

// Submit/Decline on an MCP form in the inbox: the values read from its fields by kind
// (the API checks them against the form and names a field that does not fit).
function setupForms() {
  document.addEventListener("click", async (event) => {
    const button = event.target.closest("button.answer");
    if (!button) return;
    const article = button.closest("article.form");
    const action = button.dataset.action;
    const body = { action, index: Number(article.dataset.index) };
    if (action === "accept") {
      const values = {};
      for (const field of article.querySelectorAll("div.field")) {
        const kind = field.dataset.kind;
        if (kind === "array") {
          values[field.dataset.field] = Array.from(field.querySelectorAll("input.choice:checked")).map((b) => b.value);
          continue;
        }
        const input = field.querySelector(".value");
        if (kind === "boolean") { values[field.dataset.field] = input.checked; continue; }
        if (input.value === "") continue;  // left empty: not given
        values[field.dataset.field] = (kind === "integer" || kind === "number") ? Number(input.value) : input.value;
      }
      body.values = values;
    }
    const url = "/api/sessions/" + encodeURIComponent(article.dataset.session) + "/forms/" +
      encodeURIComponent(article.dataset.call) + "/answer";
    const result = await call("POST", url, body);
    const message = article.querySelector(".message");
    if (result.ok) {
      say(message, (action === "accept" ? "answered" : "declined") + " by " + result.data.decided_by, true);
      article.querySelectorAll("button.answer").forEach((b) => { b.disabled = true; });
    } else {
      say(message, failure(result), false);
    }
  });
}

// A result that stays on the page until its "Dismiss" button is pressed.
function notice(text, ok) {
  const box = document.getElementById("notices");
  if (!box) return;
  const item = document.createElement("div");
  item.className = "notice " + (ok ? "ok" : "error");
  const words = document.createElement("span");
  words.textContent = text;
  const dismiss = document.createElement("button");
  dismiss.type = "button";
  dismiss.className = "dismiss";
  dismiss.textContent = "Dismiss";
  dismiss.addEventListener("click", () => item.remove());
  item.append(words, dismiss);
  box.append(item);
}

// While the server does not answer (/api/live, every 2 s), every action button is
// disabled; those it disabled are enabled again when it answers (a button disabled
// for want of a role stays so).
const ACTIONS = "button.action, button.decide, button.bulk, button.fork-here, #submit button";
function setOffline(offline) {
  const banner = document.getElementById("offline");
  if (banner) banner.hidden = !offline;
  document.body.classList.toggle("offline", offline);
  document.querySelectorAll(ACTIONS).forEach((b) => {
    if (offline && !b.disabled) { b.disabled = true; b.dataset.offline = "1"; }
    if (!offline && b.dataset.offline) { b.disabled = false; delete b.dataset.offline; }
  });
}
function setupReachability() {
  if (!document.querySelector("nav")) return;  // the login page
  async function probe() {
    let up = false;
    try { up = (await fetch("/api/live", { cache: "no-store" })).ok; } catch (e) { up = false; }
    setOffline(!up);
  }
  setInterval(probe, 2000);
}

// Cancel (after an in-page confirmation), resume, fork: the session page's actions.
function setupActions() {
  const actions = document.getElementById("actions");
  const section = document.getElementById("session");
  if (!actions || !section) return;
  const base = "/api/sessions/" + encodeURIComponent(section.dataset.session);
  const confirmBox = document.getElementById("confirm");
  async function fork(seq) {
    const result = await call("POST", base + "/fork", { at_seq: seq });
    if (!result.ok) { notice("fork: " + failure(result), false); return; }
    const made = result.data.session_id;
    notice("forked at seq " + seq + " into " + made + " (the workers continue it)", true);
    linkLastNotice(made, "forked");
  }
  // A link to the new session in the notice just shown.
  function linkLastNotice(made, className) {
    const link = document.createElement("a");
    link.className = className;
    link.href = "/console/sessions/" + encodeURIComponent(made);
    link.textContent = "open " + made;
    document.querySelector("#notices .notice:last-child span").append(" ", link);
  }
  document.getElementById("confirm-no").addEventListener("click", () => { confirmBox.hidden = true; });
  document.addEventListener("click", async (event) => {
    const forkHere = event.target.closest("button.fork-here");
    if (forkHere) { await fork(Number(forkHere.dataset.seq)); return; }
    const button = event.target.closest("button.action");
    if (!button) return;
    const reason = document.getElementById("action-reason").value;
    const action = button.dataset.action;
    if (action === "cancel") { confirmBox.hidden = false; return; }
    if (action === "cancel-yes") {
      confirmBox.hidden = true;
      const result = await call("POST", base + "/cancel", { reason });
      if (result.ok) {
        notice("cancelled: " + result.data.reason, true);
        actions.querySelectorAll('button[data-action="cancel"], button[data-action="resume"]')
          .forEach((b) => { b.disabled = true; });
      } else {
        notice("cancel: " + failure(result), false);
      }
    } else if (action === "resume") {
      const result = await call("POST", base + "/resume", {});
      if (!result.ok) { notice("resume: " + failure(result), false); return; }
      const made = result.data.continued_in;
      if (!made) { notice("handed back to the workers (" + result.data.status + ")", true); return; }
      notice("goes on in " + made + ", forked before the failing turn (the workers continue it)", true);
      linkLastNotice(made, "continued");
    } else if (action === "fork") {
      await fork(Number(document.getElementById("fork-at").value));
    }
  });
}

// The inbox's bulk decision: one verdict and reason for every selected request.
function setupBulk() {
  const bar = document.getElementById("bulk");
  if (!bar) return;
  const inbox = document.getElementById("inbox");
  document.getElementById("pick-all").addEventListener("change", (event) => {
    inbox.querySelectorAll("input.pick").forEach((box) => { box.checked = event.target.checked; });
  });
  bar.addEventListener("click", async (event) => {
    const button = event.target.closest("button.bulk");
    if (!button) return;
    const picked = Array.from(inbox.querySelectorAll("article.approval"))
      .filter((a) => a.querySelector("input.pick:checked"));
    if (!picked.length) { notice("select the requests to decide first", false); return; }
    const approve = button.dataset.verdict === "approve";
    const requests = picked.map((a) => ({ session: a.dataset.session, call: a.dataset.call }));
    const reason = document.getElementById("bulk-reason").value || null;
    const result = await call("POST", "/api/approvals/decide", { approve, reason, requests });
    if (!result.ok) { notice(failure(result), false); return; }
    result.data.outcomes.forEach((outcome, i) => {
      const article = picked[i];
      const message = article.querySelector(".message");
      if (outcome.decision) {
        say(message, (outcome.decision.approved ? "approved" : "denied") + " by " + outcome.decision.decided_by, true);
        article.querySelectorAll("button.decide, input.pick").forEach((b) => { b.disabled = true; });
      } else {
        say(message, outcome.error, false);
      }
    });
    const failed = result.data.outcomes.length - result.data.decided;
    notice((approve ? "approved " : "denied ") + result.data.decided + " request(s)" +
      (failed ? "; " + failed + " not decided (see each)" : ""), !failed);
    document.getElementById("pick-all").checked = false;
  });
}

function summary(event) {
  const body = JSON.stringify(event.body);
  return body.length > 400 ? body.slice(0, 400) + "…" : body;
}

// The session as a trace: turns, each with its model call (duration, tokens, stop
// reason) and tool calls (effect class, duration, outcome), approvals and script runs
// inside the call they belong to; every payload collapsed under its node. Built from
// the same live events as the raw list, with textContent only.
function makeTrace(root) {
  const turns = new Map();
  const calls = new Map();
  let current = null;

  let seq = null;  // the event being added: each node it makes carries its seq
  function node(parent, kind, title, payload) {
    const box = document.createElement("details");
    box.className = "node " + kind;
    if (seq !== null) box.dataset.seq = String(seq);
    const summary = document.createElement("summary");
    const name = document.createElement("b");
    name.textContent = title;
    const meta = document.createElement("span");
    meta.className = "meta";
    summary.append(name, " ", meta);
    const children = document.createElement("div");
    children.className = "children";
    box.append(summary);
    if (payload !== undefined) {
      const more = document.createElement("details");
      more.className = "payload";
      const label = document.createElement("summary");
      label.textContent = "payload";
      const pre = document.createElement("pre");
      pre.textContent = JSON.stringify(payload, null, 2);
      more.append(label, pre);
      box.append(more);
    }
    box.append(children);
    (parent ? parent.querySelector(":scope > .children") : root).append(box);
    return { box, meta, children };
  }

  function turn(number) {
    if (!turns.has(number)) {
      const made = node(null, "turn", "turn " + number);
      made.box.open = true;
      made.box.dataset.turn = String(number);
      turns.set(number, made);
    }
    current = turns.get(number);
    return current;
  }

  function text(parts) {
    return (parts || []).filter((p) => typeof p.text === "string").map((p) => p.text).join(" ");
  }

  function cut(value, size) {
    return value.length > size ? value.slice(0, size) + "…" : value;
  }

  return function add(event) {
    seq = event.seq;
    const body = event.body || {};
    const tag = event.type.split("@")[0];
    const parentOf = () => (body.call_id && calls.has(body.call_id) ? calls.get(body.call_id).box : current && current.box);
    if (tag === "prompt.rendered") {
      const t = turn(body.turn);
      node(t.box, "prompt", "prompt", body).meta.textContent = body.message_count + " messages";
    } else if (tag === "model.responded") {
      const t = turn(body.turn);
      const usage = (body.response && body.response.usage) || {};
      const made = node(t.box, "model", "model call", body);
      made.meta.textContent = body.duration_ms + " ms · " + (usage.input_tokens || 0) + " in / " +
        (usage.output_tokens || 0) + " out tokens · " + (body.response ? body.response.stop_reason : "");
      const said = text(body.response && body.response.parts);
      if (said) {
        const quote = document.createElement("p");
        quote.className = "said";
        quote.textContent = cut(said, 600);
        made.children.append(quote);
      }
    } else if (tag === "model.failed") {
      node(turn(body.turn).box, "model failed", "model failed", body).meta.textContent =
        body.kind + ": " + cut(body.message || "", 200) + (body.will_retry ? " (retrying)" : "");
    } else if (tag === "tool.called") {
      const made = node(turn(body.turn).box, "tool", body.tool, body);
      made.box.dataset.call = body.call_id;
      made.meta.textContent = body.effect + " · running";
      made.effect = body.effect;
      calls.set(body.call_id, made);
    } else if (tag === "tool.completed" && calls.has(body.call_id)) {
      const made = calls.get(body.call_id);
      made.box.dataset.outcome = body.is_error ? "error" : "ok";
      made.meta.textContent = made.effect + " · " + body.duration_ms + " ms · " + (body.is_error ? "error" : "ok");
      node(made.box, "result", "result", body).meta.textContent = cut(body.content || "", 200);
    } else {
      const root = ["session.started", "session.forked", "message.user", "session.suspended", "session.ended"].includes(tag);
      const made = node(root ? null : parentOf(), "event " + tag.replace(/\./g, "-"), tag, body);
      if (tag === "message.user") made.meta.textContent = cut(body.text || "", 200);
      if (tag === "session.ended") made.meta.textContent = body.reason + (body.error ? ": " + body.error : "");
      if (tag === "approval.requested") made.meta.textContent = "waiting for a decision";
      if (tag === "approval.resolved") made.meta.textContent = (body.approved ? "approved" : "denied") + " by " + body.decided_by + (body.reason ? ": " + body.reason : "");
      if (tag.startsWith("approval.")) { made.box.open = true; if (parentOf()) parentOf().open = true; }
    }
  };
}

// The facts the server computes for the trace (GET .../trace: the audit timeline's
// rows, each prompt's diff against the previous request, script output), hung on the
// nodes of the live tree by seq; text only (textContent).
function decorate(root, facts) {
  const at = (kind, seq) => root.querySelector(".node." + kind + '[data-seq="' + seq + '"]');
  function extra(box, cls, text) {
    if (!box) return;
    const meta = box.querySelector(":scope > summary .meta");
    let span = meta.querySelector("." + cls);
    if (!span) { span = document.createElement("span"); span.className = cls; meta.append(span); }
    span.textContent = text;
  }
  function block(box, cls, title, text) {
    if (!box || box.querySelector(":scope > ." + cls)) return;
    const more = document.createElement("details");
    more.className = cls;
    const label = document.createElement("summary");
    label.textContent = title;
    const pre = document.createElement("pre");
    pre.textContent = text;
    more.append(label, pre);
    box.insertBefore(more, box.querySelector(":scope > .children"));
  }
  for (const row of facts.rows) {
    if (row.kind !== "model") continue;
    const d = row.details;
    const cost = d.cost_micro_usd === null ? "no price" : (d.cost_micro_usd / 1e6).toFixed(6) + " USD";
    extra(at("model", row.seq), "cost", " · cached " + d.cache_read_tokens + " read / " +
      d.cache_write_tokens + " written · cost " + cost);
  }
  for (const prompt of facts.prompts) {
    const box = at("prompt", prompt.seq);
    extra(box, "new", " · " + prompt.new_messages + " new · " + prompt.size + " bytes");
    block(box, "diff", "diff against the previous request", prompt.diff || "(the same as the previous request's)");
  }
  for (const output of facts.outputs) {
    const box = at("event", output.seq);
    block(box, "output", "script output" + (output.truncated ? " (cut)" : ""),
      output.stdout + (output.stderr ? "\n--- stderr ---\n" + output.stderr : ""));
  }
}

function setupLive() {
  const section = document.getElementById("session");
  if (!section) return;
  const session = section.dataset.session;
  const list = document.getElementById("events");
  const live = document.getElementById("live");
  const addToTrace = makeTrace(document.getElementById("trace"));
  const base = "/api/sessions/" + encodeURIComponent(session);
  let refreshing = null;
  let facts = null;
  let factsFrom = 0;
  let lastSeen = -1;
  async function refreshFacts() {
    const seen = lastSeen;  // facts past what the tree holds are asked for again later
    const got = await call("GET", base + "/trace?from_seq=" + factsFrom);
    if (!got.ok) return;
    decorate(document.getElementById("trace"), got.data);
    factsFrom = Math.max(factsFrom, seen + 1);
  }
  async function refresh() {
    const state = await call("GET", base);
    if (state.ok) document.getElementById("status").textContent = state.data.status_text;
    const panel = await fetch("/console/sessions/" + encodeURIComponent(session) + "/approvals",
      { credentials: "same-origin" });
    if (panel.ok) mergeApprovals(document.getElementById("approvals"), await panel.text());
  }
  // EventSource reconnects by itself, sending Last-Event-ID: the server resumes after it.
  const source = new EventSource(base + "/stream?previews=1");
  const preview = makePreview(document.getElementById("trace"));
  source.addEventListener("delta", (message) => preview.add(JSON.parse(message.data)));
  source.addEventListener("progress", (message) => preview.progress(JSON.parse(message.data)));
  source.onopen = () => { live.textContent = "live"; live.className = "live on"; };
  source.onerror = () => {
    // Closed for good: the session ended (the server answers 204 past session.ended).
    const ended = source.readyState === EventSource.CLOSED;
    live.textContent = ended ? "ended" : "reconnecting";
    live.className = "live off";
  };
  source.onmessage = (message) => {
    const event = JSON.parse(message.data);
    if (list.querySelector('li[data-seq="' + event.seq + '"]')) return;
    const item = document.createElement("li");
    item.dataset.seq = String(event.seq);
    item.dataset.type = event.type;
    const type = document.createElement("b");
    type.textContent = event.type;
    const body = document.createElement("code");
    body.textContent = summary(event);
    item.append(type, " ", body);
    if (document.getElementById("actions").dataset.can) {
      const here = document.createElement("button");
      here.type = "button";
      here.className = "fork-here";
      here.dataset.seq = String(event.seq);
      here.textContent = "fork here";
      item.append(here);
    }
    list.append(item);
    const forkAt = document.getElementById("fork-at");
    forkAt.max = String(event.seq);
    if (Number(forkAt.value) === event.seq - 1) forkAt.value = String(event.seq);
    addToTrace(event);
    lastSeen = Math.max(lastSeen, event.seq);
    preview.recorded(event);
    if (event.type.split("@")[0] === "session.ended") {
      // A session ended by a model error can still be resumed (into a new session).
      const over = (event.body || {}).reason === "error" ? '[data-action="cancel"]' : '[data-action="cancel"], #actions button[data-action="resume"]';
      document.querySelectorAll("#actions button" + over)
        .forEach((b) => { b.disabled = true; delete b.dataset.offline; });
      source.close();  // nothing follows it
      live.textContent = "ended";
      live.className = "live off";
    }
    clearTimeout(refreshing);
    refreshing = setTimeout(refresh, 100);
    clearTimeout(facts);
    facts = setTimeout(refreshFacts, 300);
  };
}

// A streamed answer as it arrives (event: delta, never recorded), below the trace; the
// recorded model.responded of its turn replaces it (the trace shows what was said).
// An MCP call's progress (event: progress, never recorded) is a line under the running
// call, the latest notification; gone when the call's outcome is recorded.
function makePreview(trace) {
  const box = document.createElement("p");
  box.id = "preview";
  box.className = "said preview";
  box.hidden = true;
  trace.after(box);
  let turn = 0;
  let answered = 0;
  return {
    add(delta) {
      if (delta.turn <= answered) return;  // its response is recorded already
      if (delta.turn !== turn) { turn = delta.turn; box.textContent = ""; }
      if (delta.kind === "text") box.textContent += delta.text;
      else if (delta.name) box.textContent += (box.textContent ? "\n" : "") + "→ " + delta.name;
      box.hidden = !box.textContent;
    },
    progress(tick) {
      const call = Array.from(trace.querySelectorAll(".node[data-call]")).find((b) => b.dataset.call === tick.call_id);
      if (!call || call.dataset.outcome) return;  // not shown yet, or over: lossy
      const summary = call.querySelector(":scope > summary");  // shown even when closed
      let line = summary.querySelector(".progress");
      if (!line) {
        line = document.createElement("span");
        line.className = "progress";
        summary.append(line);
      }
      line.textContent = tick.name + ": " + tick.progress + (tick.total == null ? "" : "/" + tick.total) +
        (tick.text ? " " + tick.text : "");
    },
    recorded(event) {
      const tag = event.type.split("@")[0];
      if ((tag === "tool.completed" || tag === "tool.interrupted") && event.body) {
        const call = Array.from(trace.querySelectorAll(".node[data-call]")).find((b) => b.dataset.call === event.body.call_id);
        const line = call && call.querySelector(":scope > summary > .progress");
        if (line) line.remove();
      }
      if (tag === "model.responded") answered = Math.max(answered, event.body.turn);
      if (tag === "model.responded" || tag === "model.failed") { box.textContent = ""; box.hidden = true; }
    },
  };
}

// A pending-approvals panel brought up to date with a fresh copy (server-escaped HTML):
// a new request is added, one decided elsewhere removed; one being worked on here (a
// reason typed, a message shown) is left alone, so a live update never wipes it.
function mergeApprovals(panel, html) {
  const key = (a) => a.dataset.session + "/" + a.dataset.call + "/" + (a.dataset.index || "");
  const fresh = document.createElement("template");
  fresh.innerHTML = html;  // server-escaped
  const incoming = new Map(Array.from(fresh.content.querySelectorAll("article.approval")).map((a) => [key(a), a]));
  for (const article of Array.from(panel.querySelectorAll("article.approval"))) {
    const picked = article.querySelector("input.pick");
    const reason = article.querySelector("input.reason");
    const typed = Array.from(article.querySelectorAll("div.field .value")).some((i) => i.value || i.checked);
    const busy = (reason && reason.value) || typed || article.querySelector(".message").textContent ||
      (picked && picked.checked);
    if (!incoming.has(key(article)) && !busy) article.remove();
    incoming.delete(key(article));
  }
  if (incoming.size) panel.querySelectorAll("p.none").forEach((p) => p.remove());
  for (const article of incoming.values()) panel.append(article);
  if (!panel.querySelector("article.approval") && !panel.querySelector("p.none")) {
    const none = document.createElement("p");
    none.className = "none";
    none.textContent = "none";
    panel.append(none);
  }
}

// The approvals inbox, live: fetched again every 2 s and merged (mergeApprovals).
function setupInbox() {
  const inbox = document.getElementById("inbox");
  if (!inbox) return;
  async function refresh() {
    let response;
    try {
      response = await fetch("/console/approvals/inbox", { credentials: "same-origin" });
    } catch (e) { return; }
    if (response.ok) mergeApprovals(inbox, await response.text());
  }
  setInterval(refresh, 2000);
}

// The sessions list, live on its first page: its rows fetched again every 2 s with the
// same filters (server-escaped HTML, like the approvals panel).
function setupSessionList() {
  const table = document.getElementById("sessions");
  if (!table || !table.dataset.live) return;
  async function refresh() {
    let response;
    try {
      response = await fetch("/console/rows" + window.location.search, { credentials: "same-origin" });
    } catch (e) { return; }
    if (!response.ok) return;
    const html = await response.text();
    const body = table.querySelector("tbody");
    if (body.innerHTML === html) return;
    body.innerHTML = html;  // server-escaped
    document.getElementById("count").textContent = body.querySelectorAll("tr").length + " shown";
  }
  setInterval(refresh, 2000);
}

// Tokens (admins): create one (shown once, here), revoke a name's.
function setupTokens() {
  const form = document.getElementById("new-token");
  if (!form) return;
  const message = document.getElementById("message");
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const name = document.getElementById("token-name").value.trim();
    const roles = Array.from(form.querySelectorAll("input.role:checked")).map((b) => b.value);
    const result = await call("POST", "/api/tokens", { name, roles });
    if (!result.ok) { say(message, failure(result), false); return; }
    document.getElementById("new-token-value").textContent = result.data.token;
    const row = document.createElement("tr");
    row.dataset.name = result.data.name;
    const cells = [result.data.name, result.data.roles.join(", ")].map((text) => {
      const cell = document.createElement("td");
      cell.textContent = text;
      return cell;
    });
    const button = document.createElement("button");
    button.className = "revoke";
    button.type = "button";
    button.textContent = "Revoke";
    const last = document.createElement("td");
    last.append(button);
    row.append(...cells, last);
    document.querySelector("#tokens tbody").append(row);
    say(message, "created " + result.data.name + ": copy the token now, it is not shown again", true);
  });
  document.addEventListener("click", async (event) => {
    const button = event.target.closest("button.revoke");
    if (!button) return;
    const row = button.closest("tr");
    const result = await call("POST", "/api/tokens/" + encodeURIComponent(row.dataset.name) + "/revoke", {});
    if (!result.ok) { say(message, failure(result), false); return; }
    row.remove();
    say(message, "revoked " + result.data.name, true);
  });
}

document.addEventListener("DOMContentLoaded", () => {
  setupReachability();
  setupActions();
  setupBulk();
  setupSessionList();
  setupTokens();
  setupInbox();
  setupLogin();
  setupLogout();
  setupSubmit();
  setupDecisions();
  setupForms();
  setupLive();
});
