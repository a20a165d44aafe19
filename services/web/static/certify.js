// Certify your FIX client: start a run, show where to connect and what the run says, then its report.
// Everything the server sends is set as text only.
"use strict";
const $ = (id) => document.getElementById(id);
function el(tag, cls, text) { const e = document.createElement(tag); if (cls) e.className = cls; if (text !== undefined) e.textContent = String(text); return e; }
const LIVE = ["starting", "waiting"];
let timer = null;

function error(text) { const e = $("err"); e.textContent = text || ""; e.hidden = !text; }

async function overview() {
  const r = await fetch("/api/certify");
  const o = await r.json();
  const sel = $("comp"), keep = sel.value;
  sel.replaceChildren(...o.comps.map((c) => { const opt = el("option", null, c.busy ? `${c.comp_id} (busy)` : c.comp_id); opt.value = c.comp_id; opt.disabled = c.busy; return opt; }));
  const free = o.comps.filter((c) => !c.busy);
  if (keep && free.some((c) => c.comp_id === keep)) sel.value = keep; else if (free.length) sel.value = free[0].comp_id;
  $("busy").textContent = `${o.running} of ${o.runs} runs busy; a run waits ${o.logon_timeout_s} s for the Logon`;
  const ver = $("version");
  if (!ver.options.length) {  // once: the versions do not change while the page lives
    ver.replaceChildren(...o.fix_versions.map((v) => { const opt = el("option", null, `FIX ${v.name} (${v.wire})`); opt.value = v.name; return opt; }));
    ver.value = o.default_fix_version;
  }
}

async function start() {
  error("");
  const comp = $("comp").value;
  const version = $("version").value;
  const r = await fetch(`/api/certify/${encodeURIComponent(comp)}?fix_version=${encodeURIComponent(version)}`, { method: "POST" });
  const body = await r.json();
  if (!r.ok) { error(body.error); overview(); return; }
  location.hash = comp;
  // The one-time password comes with the start's answer only (the run's view never holds it).
  $("password").hidden = !body.password;
  $("password").textContent = body.password ? `One-time password (${body.password_field} in your Logon): ${body.password}` : "";
  show(body);
  overview();
  follow(comp);
}

function follow(comp) {
  if (timer) clearTimeout(timer);
  let last = null;
  const tick = async () => {
    let run;
    try {
      const r = await fetch(`/api/certify/${encodeURIComponent(comp)}`);
      run = await r.json();
      if (!r.ok) { error(run.error); return; }
    } catch (e) { error(`the web does not answer: ${e}`); timer = setTimeout(tick, 3000); return; }
    show(run);
    if (run.state !== last) { last = run.state; overview().catch(() => {}); }
    if (LIVE.includes(run.state)) timer = setTimeout(tick, 1000);
  };
  tick();
}

function show(run) {
  $("run").hidden = false;
  $("run").dataset.state = run.state;
  $("title").textContent = `${run.comp_id}: ${run.state.replace("_", " ")}`;
  $("message").textContent = run.message;
  const pre = $("lines"), atEnd = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
  pre.textContent = run.lines.join("\n");
  if (atEnd) pre.scrollTop = pre.scrollHeight;
  const rep = run.report;
  $("report").hidden = !rep || LIVE.includes(run.state);
  if (!rep) return;
  const s = rep.summary;
  $("summary").textContent = `FIX ${rep.fix_version || "4.4"}: ${s.pass} passed, ${s.fail} failed, ${s.skip} skipped (${rep.seconds} s after the Logon)`;
  const t = $("checks");
  const head = el("tr"); for (const h of ["result", "check", "what"]) head.append(el("th", null, h));
  t.replaceChildren(head);
  for (const c of rep.checks) {
    const tr = el("tr"); tr.id = `check-${c.name}`;
    tr.append(el("td", `st-${c.status}`, c.status === "skip" ? "skip" : c.status.toUpperCase()), el("td", null, c.name));
    const what = el("td", null, c.title);
    if (c.status === "skip" && c.lines.length) what.append(el("div", "muted small", c.lines[0]));
    if (c.status === "fail") {
      what.append(el("div", "small", `at ${c.where}: ${c.step}`), el("pre", null, c.lines.join("\n")),
        el("div", "muted small", "the check's wire (client -> what the client sent, exchange <- what the exchange sent):"),
        el("pre", "wire", (c.wire.length ? c.wire : ["(no message)"]).join("\n")));
    }
    tr.append(what); t.append(tr);
  }
  const a = $("html");
  a.hidden = !run.report_html;
  if (run.report_html) a.href = run.report_html;
}

$("start").addEventListener("click", () => { start().catch((e) => error(String(e))); });
overview().catch((e) => error(String(e)));
const hashed = location.hash.slice(1);
if (/^CERT0[1-8]$/.test(hashed)) follow(hashed);
