// Status view: counters, live service instances and every bus stream. Values are set as text only.
"use strict";
const $ = (id) => document.getElementById(id);
function el(tag, cls, text) { const e = document.createElement(tag); if (cls) e.className = cls; if (text !== undefined) e.textContent = String(text); return e; }
function row(cells, tag) { const tr = el("tr"); for (const c of cells) tr.append(el(tag || "td", null, c)); return tr; }

function render(s) {
  const c = $("counters");
  const items = [["orders / s (matchers)", s.orders_per_s], ["FIX sessions logged on", s.fix_sessions],
    ["pages open", s.web.pages], ["lab sessions live (this web)", s.web.labs_live], ["order entries / s (bus)", s.order_entries_per_s],
    ["pending entries", s.pending], ["largest group lag", s.max_lag],
    ["pages refused", s.web.pages_refused || 0], ["pages dropped (slow)", s.web.pages_dropped || 0], ["commands", s.web.commands || 0],
    ["rate limited", s.web.rate_limited || 0], ["bad commands", s.web.command_errors || 0], ["service instances", s.instances.length]];
  c.replaceChildren(...items.map(([k, v]) => { const d = el("div", "counter"); d.append(el("b", null, v), el("span", "muted small", k)); return d; }));
  const it = $("instances");
  it.replaceChildren(row(["service", "instance", "pid", "up", "counters"], "th"));
  for (const i of s.instances) {
    const extra = Object.entries(i).filter(([k]) => !["service", "instance", "pid", "started", "at"].includes(k)).map(([k, v]) => `${k}=${v}`).join("  ");
    it.append(row([i.service, i.instance, i.pid, `${Math.round(Date.now() / 1000 - Number(i.started))} s`, extra]));
  }
  const st = $("streams");
  st.replaceChildren(row(["stream", "length", "first id", "last id", "entries/s", "group", "consumers", "pending", "lag"], "th"));
  for (const x of s.streams) {
    const rate = s.entries_per_s[x.stream];
    const groups = x.groups.length ? x.groups : [null];
    groups.forEach((g, i) => st.append(row([i ? "" : x.stream, i ? "" : x.length, i ? "" : (x.first_id || "–"), i ? "" : (x.last_id || "–"),
      i ? "" : (rate === undefined ? "–" : rate), g ? g.name : "–", g ? g.consumers.map((k) => `${k.name} (${k.pending} pending, idle ${k.idle_ms} ms)`).join(", ") || "none" : "",
      g ? g.pending : "", g ? (g.lag === null ? "?" : g.lag) : ""])));
  }
}

async function poll() {
  try {
    const r = await fetch("/api/status");
    const s = await r.json();
    if (!r.ok) throw new Error(s.error || r.status);
    $("err").hidden = true;
    render(s);
  } catch (e) { $("err").textContent = `status unavailable: ${e.message}`; $("err").hidden = false; }
}
poll(); setInterval(poll, 2000);
