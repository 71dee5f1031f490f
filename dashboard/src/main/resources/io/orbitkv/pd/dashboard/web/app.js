// OrbitKV P/D dashboard page: polls /api/overview and draws everything with plain DOM and SVG (no libraries, no CDN).
// Every number shown carries data-metric (a JSON pointer into the API answer), data-value (the raw value) and
// data-scale (what the shown number was divided by), so a test can check the page against the API.
"use strict";
(function () {
  const params = new URLSearchParams(location.search);
  const windowLabel = params.get("window") || "1s";
  const span = params.get("span") || (windowLabel === "1s" ? "120" : "60");
  const KINDS = ["COMPLETED", "CANCELLED", "TIMED_OUT", "FAILED"];
  const COLORS = { COMPLETED: "#2e9d5b", CANCELLED: "#9a7bd1", TIMED_OUT: "#e0a526", FAILED: "#d64545",
                   p50: "#3273dc", p90: "#8a63d2", p99: "#d64545", gbps: "#1f9aa8" };
  const PHASES = [["prefill", "prefill (admitted → prefill done)"], ["decode_ready", "decode ready (admitted → pages held)"],
                  ["decision", "decision (last input → worker report)"], ["handoff", "handoff (order → transfer done)"],
                  ["transfer", "transfer (worker-measured)"], ["decode", "decode (KV ready → finished)"],
                  ["end_to_end", "end to end (admitted → finished)"]];
  let pollMs = 1000;
  let updates = 0;

  // ---------------------------------------------------------------- DOM helpers
  function h(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "class") e.className = v; else if (k === "text") e.textContent = v; else e.setAttribute(k, v);
    }
    for (const c of children.flat()) if (c != null) e.append(c instanceof Node ? c : document.createTextNode(String(c)));
    return e;
  }
  const pointer = (path) => path.map((s) => String(s).replace(/~/g, "~0").replace(/\//g, "~1")).join("/");
  function m(path, value, fmt, tag) {
    const [text, scale] = value == null ? ["–", 1] : fmt(value);
    return h(tag || "span", { "data-metric": pointer(path), "data-value": value == null ? "null" : String(value),
                              "data-scale": String(scale), text: text });
  }

  // ---------------------------------------------------------------- formats: [text, scale]
  const group = (n) => String(n).replace(/\B(?=(\d{3})+(?!\d))/g, ",");
  const count = (v) => [group(Math.round(v)), 1];
  const fixed = (v, d) => (Math.abs(v) < 1e15 ? v.toFixed(d) : String(v));
  const ms = (v) => [fixed(v, v < 1 ? 3 : v < 10 ? 2 : v < 100 ? 1 : 0) + " ms", 1];
  const rate = (v) => [fixed(v, v < 10 ? 2 : 1) + "/s", 1];
  const gbps = (v) => [fixed(v, 3) + " GB/s", 1];
  const text = (v) => [String(v), 1];
  function bytes(v) {
    const units = [[1e12, "TB"], [1e9, "GB"], [1e6, "MB"], [1e3, "kB"]];
    for (const [s, u] of units) if (v >= s) return [fixed(v / s, 2) + " " + u, s];
    return [group(v) + " B", 1];
  }
  const clock = (t) => new Date(t).toLocaleTimeString([], { hour12: false });

  // ---------------------------------------------------------------- tiles
  function tile(label, valueNode, ...sub) {
    return h("div", { class: "tile" }, h("div", { class: "label", text: label }), h("div", { class: "value" }, valueNode),
             sub.length ? h("div", { class: "sub" }, ...sub) : null);
  }
  function pct(path, s) {
    return [h("span", { text: "p50 " }), m([...path, "p50"], s.p50, ms), h("span", { text: " · p90 " }), m([...path, "p90"], s.p90, ms),
            h("span", { text: " · p99 " }), m([...path, "p99"], s.p99, ms)];
  }
  function renderTiles(d) {
    const t = d.totals, lat = t.latency_ms;
    const el = document.getElementById("tiles");
    el.replaceChildren(
      tile("Handoffs / s", m(["totals", "handoffs_per_s"], t.handoffs_per_s, rate), m(["totals", "handoffs"], t.handoffs, count), " outcomes"),
      ...KINDS.map((k) => tile(k.replace("_", " ").toLowerCase(), m(["totals", "outcomes", k], t.outcomes[k], count))),
      tile("Handoff p99", m(["totals", "latency_ms", "handoff", "p99"], lat.handoff.p99, ms),
           "p50 ", m(["totals", "latency_ms", "handoff", "p50"], lat.handoff.p50, ms), " · p90 ", m(["totals", "latency_ms", "handoff", "p90"], lat.handoff.p90, ms)),
      tile("Decision latency p99", m(["totals", "latency_ms", "decision", "p99"], lat.decision.p99, ms),
           "p50 ", m(["totals", "latency_ms", "decision", "p50"], lat.decision.p50, ms), " · p90 ", m(["totals", "latency_ms", "decision", "p90"], lat.decision.p90, ms)),
      tile("Transfer p99", m(["totals", "latency_ms", "transfer", "p99"], lat.transfer.p99, ms),
           "p50 ", m(["totals", "latency_ms", "transfer", "p50"], lat.transfer.p50, ms), " · p90 ", m(["totals", "latency_ms", "transfer", "p90"], lat.transfer.p90, ms)),
      tile("KV throughput", m(["totals", "transfer", "gbps"], t.transfer.gbps, gbps), m(["totals", "transfer", "bytes"], t.transfer.bytes, bytes), " moved"),
      tile("KV handed off", m(["totals", "kv_bytes"], t.kv_bytes, bytes), "in ", m(["totals", "outcomes", "COMPLETED"], t.outcomes.COMPLETED, count), " completed"),
      tile("Transfer failures", m(["totals", "transfer", "failed"], t.transfer.failed, count),
           m(["totals", "transfer", "failed_retriable"], t.transfer.failed_retriable, count), " retriable · ", m(["totals", "retries"], t.retries, count), " retries"),
      tile("Admitted", m(["totals", "admitted"], t.admitted, count), m(["totals", "orders"], t.orders, count), " transfer orders"));
  }

  // ---------------------------------------------------------------- charts (SVG)
  const SVG = "http://www.w3.org/2000/svg";
  function s(tag, attrs) {
    const e = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
    return e;
  }
  function niceMax(v) {
    if (!(v > 0)) return 1;
    const p = Math.pow(10, Math.floor(Math.log10(v)));
    for (const f of [1, 2, 2.5, 5, 10]) if (f * p >= v) return f * p;
    return 10 * p;
  }
  function chart(id, xs, series, opts) {
    const box = document.getElementById(id);
    const W = Math.max(320, box.clientWidth || 600), H = 190, L = 46, R = 8, T = 8, B = 22;
    const pw = W - L - R, ph = H - T - B, n = xs.length;
    let max = 0;
    if (opts.stacked) xs.forEach((_, i) => { max = Math.max(max, series.reduce((a, se) => a + (se.values[i] || 0), 0)); });
    else series.forEach((se) => se.values.forEach((v) => { if (v != null) max = Math.max(max, v); }));
    max = niceMax(max);
    const svg = s("svg", { viewBox: `0 0 ${W} ${H}`, role: "img" });
    for (let g = 0; g <= 4; g++) {
      const y = T + ph - (ph * g) / 4;
      svg.append(s("line", { x1: L, x2: W - R, y1: y, y2: y, class: "axis" }));
      const label = s("text", { x: L - 4, y: y + 3, "text-anchor": "end" });
      const v = (max * g) / 4;
      label.textContent = v >= 100 ? v.toFixed(0) : v >= 1 ? v.toFixed(1) : v.toFixed(3);
      svg.append(label);
    }
    [0, Math.floor(n / 2), n - 1].forEach((i, j) => {
      if (i < 0 || i >= n) return;
      const t = s("text", { x: L + (pw * (i + 0.5)) / n, y: H - 6, "text-anchor": ["start", "middle", "end"][j] });
      t.textContent = clock(xs[i]);
      svg.append(t);
    });
    const y = (v) => T + ph - (ph * v) / max;
    if (opts.stacked) {
      const bw = Math.max(1, pw / n - 1);
      xs.forEach((_, i) => {
        let acc = 0;
        series.forEach((se) => {
          const v = se.values[i] || 0;
          if (v > 0) svg.append(s("rect", { x: L + (pw * i) / n, y: y(acc + v), width: bw, height: y(acc) - y(acc + v), fill: se.color }));
          acc += v;
        });
      });
    } else {
      series.forEach((se) => {
        let d = "", pen = false;
        se.values.forEach((v, i) => {
          if (v == null) { pen = false; return; }
          d += (pen ? "L" : "M") + (L + (pw * (i + 0.5)) / n).toFixed(1) + "," + y(v).toFixed(1);
          pen = true;
        });
        if (d) svg.append(s("path", { d: d, fill: "none", stroke: se.color, "stroke-width": 1.6, "stroke-linejoin": "round" }));
      });
    }
    const legend = h("div", { class: "legend" }, series.map((se) => h("span", {}, h("i", { style: "background:" + se.color }), se.name)));
    box.replaceChildren(svg, legend);
  }
  function renderCharts(d) {
    const xs = d.series.map((p) => p.start), secs = d.window_ms / 1000;
    chart("chart-throughput", xs, KINDS.map((k) => ({ name: k.toLowerCase(), color: COLORS[k], values: d.series.map((p) => p.outcomes[k] / secs) })),
          { stacked: true });
    for (const [id, key] of [["chart-handoff", "handoff"], ["chart-decision", "decision"]]) {
      chart(id, xs, ["p50", "p90", "p99"].map((q) => ({ name: q, color: COLORS[q], values: d.series.map((p) => p[key][q]) })), {});
    }
    chart("chart-gbps", xs, [{ name: "GB/s (bytes completed in the window)", color: COLORS.gbps, values: d.series.map((p) => p.gbps) }], {});
  }

  // ---------------------------------------------------------------- tables
  function table(id, head, rows, empty) {
    const t = document.getElementById(id);
    const thead = h("tr", {}, head.map(([label, num]) => h("th", { class: num ? "num" : "" , text: label })));
    const body = rows.length ? rows : [h("tr", {}, h("td", { class: "empty", colspan: head.length, text: empty }))];
    t.replaceChildren(h("thead", {}, thead), h("tbody", {}, body));
  }
  const td = (node, num) => h("td", { class: num ? "num" : "" }, node);
  function renderMix(d) {
    const o = d.totals.outcomes, total = d.totals.handoffs;
    const bar = h("div", { class: "mixbar" }, KINDS.filter((k) => o[k] > 0)
      .map((k) => h("div", { class: "k-" + k, style: `width:${(100 * o[k]) / total}%`, title: k })));
    const legend = h("div", { class: "legend" }, KINDS.map((k) => h("span", {}, h("i", { class: "k-" + k }), k.toLowerCase() + " ",
      m(["totals", "outcomes", k], o[k], count), total ? ` (${((100 * o[k]) / total).toFixed(1)} %)` : "")));
    document.getElementById("mix").replaceChildren(total ? bar : h("div", { class: "empty", text: "no outcomes in this range" }), legend);
  }
  function renderPhases(d) {
    const lat = d.totals.latency_ms;
    table("phases", [["phase"], ["count", 1], ["p50", 1], ["p90", 1], ["p99", 1], ["max", 1]], PHASES.map(([k, label]) => {
      const p = ["totals", "latency_ms", k];
      return h("tr", {}, td(label), td(m([...p, "count"], lat[k].count, count), 1), td(m([...p, "p50"], lat[k].p50, ms), 1),
               td(m([...p, "p90"], lat[k].p90, ms), 1), td(m([...p, "p99"], lat[k].p99, ms), 1), td(m([...p, "max"], lat[k].max, ms), 1));
    }), "");
  }
  function renderHops(d) {
    const hops = d.totals.hops_ms || {};
    table("hops", [["hop"], ["count", 1], ["p50", 1], ["p99", 1]], Object.entries(hops).map(([k, v]) => {
      const p = ["totals", "hops_ms", k];
      return h("tr", {}, td(h("code", { text: k })), td(m([...p, "count"], v.count, count), 1), td(m([...p, "p50"], v.p50, ms), 1),
               td(m([...p, "p99"], v.p99, ms), 1));
    }), "no timing marks in this range");
  }
  function renderEngines(d) {
    const rows = Object.entries(d.engines).map(([id, e]) => {
      const p = ["engines", id];
      return h("tr", {}, td(h("code", { text: id })), td(m([...p, "roles"], e.roles, text)), td(m([...p, "in_flight"], e.in_flight, count), 1),
               td(m([...p, "per_s"], e.per_s, rate), 1), td(m([...p, "completed"], e.completed, count), 1),
               td(m([...p, "not_completed"], e.not_completed, count), 1), td(m([...p, "transfer_failed"], e.transfer_failed, count), 1),
               td(m([...p, "kv_bytes"], e.kv_bytes, bytes), 1), td(m([...p, "handoff_p50"], e.handoff_p50, ms), 1),
               td(m([...p, "handoff_p99"], e.handoff_p99, ms), 1), td(m([...p, "top_failure"], e.top_failure, text)));
    });
    table("engines", [["engine"], ["roles"], ["in flight", 1], ["handoffs/s", 1], ["completed", 1], ["not completed", 1],
                      ["transfer failures", 1], ["KV bytes", 1], ["handoff p50", 1], ["handoff p99", 1], ["top failure"]], rows,
          "no engine seen in this range");
  }
  function renderReasons(d) {
    table("reasons", [["source"], ["kind"], ["reason"], ["count", 1]], d.totals.failures_by_reason.map((r, i) => {
      const p = ["totals", "failures_by_reason", i];
      return h("tr", {}, td(m([...p, "source"], r.source, text)), td(m([...p, "kind"], r.kind, text)),
               td(m([...p, "reason"], r.reason, text)), td(m([...p, "count"], r.count, count), 1));
    }), "no failures in this range");
  }
  function copyButton(cmd) {
    const b = h("button", { class: "copy", title: "copy the command", text: "copy" });
    b.addEventListener("click", () => navigator.clipboard && navigator.clipboard.writeText(cmd));
    return b;
  }
  function renderFailures(d) {
    table("failures", [["time"], ["request"], ["kind"], ["reason"], ["trace"]], d.failures.slice(0, 12).map((f, i) => {
      const p = ["failures", i];
      return h("tr", {}, td(clock(f.time)), td(m([...p, "request_id"], f.request_id, text, "code")),
               td(h("span", { class: "pill k-" + f.kind }, m([...p, "kind"], f.kind, text))),
               td(h("div", { class: "reason", title: f.reason }, m([...p, "reason"], f.reason, text))),
               td([m([...p, "trace_command"], f.trace_command, text, "code"), copyButton(f.trace_command),
                   f.trace_id ? h("div", {}, "trace id ", m([...p, "trace_id"], f.trace_id, text, "code")) : null]));
    }), "no failures in this range");
  }

  // ---------------------------------------------------------------- loop
  function render(d) {
    renderTiles(d); renderCharts(d); renderMix(d); renderPhases(d); renderHops(d); renderEngines(d); renderReasons(d); renderFailures(d);
    const st = document.getElementById("status");
    const bad = d.instances.filter((i) => !i.ok).map((i) => i.server);
    st.className = "status" + (d.partial ? " err" : "");
    st.textContent = `${d.instances.length} instance(s)${bad.length ? ", not answering: " + bad.join(", ") : ""} · ${d.state}` +
      ` · log up to ${d.stream_time ? clock(d.stream_time) : "–"} · updated ${clock(d.generated_at)}`;
    document.getElementById("footer").textContent = `window ${d.window} · range ${clock(d.from)} – ${clock(d.to)} · polling every ${d.poll_ms} ms · ` +
      "statistics merged from every dashboard instance (GET /api/overview); Prometheus metrics at /metrics";
    Object.assign(document.body.dataset, { window: d.window, from: String(d.from), to: String(d.to), updates: String(++updates) });
  }
  async function poll() {
    try {
      const r = await fetch(`api/overview?window=${encodeURIComponent(windowLabel)}&span=${encodeURIComponent(span)}`, { cache: "no-store" });
      const d = await r.json();
      if (!r.ok) throw new Error(d.error || "HTTP " + r.status);
      pollMs = d.poll_ms || pollMs;
      render(d);
    } catch (e) {
      const st = document.getElementById("status");
      st.className = "status err";
      st.textContent = "dashboard API: " + e.message + " (retrying)";
    }
    setTimeout(poll, pollMs);
  }
  for (const a of document.querySelectorAll("#ranges a")) if (a.dataset.range === `${windowLabel}:${span}`) a.classList.add("active");
  poll();
})();
