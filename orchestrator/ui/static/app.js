// The web board's client: live cards over server-sent events, forms posted as JSON with
// the session token. No library, no build step.
"use strict";
(function () {
  const token = document.querySelector('meta[name="orch-token"]').content;
  const page = document.body.dataset.page;
  const baseTitle = document.title.replace(/^\(\d+\) /, "");

  function toast(text, bad) {
    const el = document.getElementById("toast");
    el.textContent = text;
    el.className = "toast" + (bad ? " bad" : "");
    el.hidden = false;
    clearTimeout(toast.timer);
    toast.timer = setTimeout(() => { el.hidden = true; }, bad ? 12000 : 4000);
  }

  async function post(url, body) {
    const res = await fetch(url, {
      method: "POST", credentials: "same-origin",
      headers: { "Content-Type": "application/json", "X-Orch-Token": token },
      body: JSON.stringify(body || {}),
    });
    let data = {};
    try { data = await res.json(); } catch (e) { data = { error: res.status + " " + res.statusText }; }
    if (!res.ok) throw new Error(data.error || ("refused (" + res.status + ")"));
    return data;
  }

  function setNeeds(n) {
    const el = document.getElementById("needs-count");
    if (el) el.textContent = n;
    document.title = (n ? "(" + n + ") " : "") + baseTitle;
    if (n > setNeeds.last && window.Notification && Notification.permission === "granted") {
      new Notification("orchestrator: " + n + " thing(s) need you");
    }
    setNeeds.last = n;
  }
  setNeeds.last = Number(document.querySelector('meta[name="orch-needs"]').content || 0);

  // --- the board -------------------------------------------------------------------
  const params = new URLSearchParams(location.search);
  const filt = {
    owner: params.get("owner") || "", label: params.get("label") || "",
    q: (params.get("q") || "").toLowerCase(),
  };
  function passes(m) {
    if (filt.owner && m.owner !== filt.owner) return false;
    if (filt.label && !(m.labels || []).includes(filt.label)) return false;
    if (filt.q && !m.text.includes(filt.q)) return false;
    return true;
  }
  function num(id) { return Number(id.split("_")[1]); }

  function placeCard(m) {
    const old = document.getElementById("card-" + m.id);
    const cards = document.getElementById("cards-" + m.column);
    if (old) old.remove();
    if (!cards || !passes(m)) return;
    const tmp = document.createElement("div");
    tmp.innerHTML = m.html;
    const el = tmp.firstElementChild;
    const col = cards.parentElement;
    const more = col.querySelector("button.more");
    const siblings = Array.from(cards.children);
    const after = siblings.find((c) => num(c.dataset.id) > num(m.id));
    if (after) cards.insertBefore(el, after);
    else if (!more) cards.appendChild(el);   // beyond the loaded page: "show more" has it
    if (el.isConnected) { el.classList.add("moved"); setTimeout(() => el.classList.remove("moved"), 1500); }
  }

  function setCounts(counts) {
    const filtered = filt.owner || filt.label || filt.q;
    for (const [name, n] of Object.entries(counts)) {
      const el = document.getElementById("count-" + name);
      if (el && !filtered) el.textContent = n;
    }
  }

  function connect() {
    const live = document.getElementById("live");
    const src = new EventSource("/stream");
    src.addEventListener("hello", () => { live.textContent = "● live"; live.classList.add("on"); });
    src.addEventListener("card", (ev) => {
      const m = JSON.parse(ev.data);
      if (page === "board") placeCard(m);
      if ((page === "task" || page === "review") && document.querySelector("[data-id]") &&
          document.querySelector("section[data-id]").dataset.id === m.id) {
        const st = document.getElementById("task-status");
        if (st) { const t = document.createElement("div"); t.innerHTML = m.html; st.textContent = t.firstElementChild.dataset.status; }
      }
    });
    src.addEventListener("counts", (ev) => {
      const m = JSON.parse(ev.data);
      if (page === "board") setCounts(m.counts);
      setNeeds(m.needs);
    });
    src.addEventListener("team", () => { if (page === "team") location.reload(); });
    src.addEventListener("reload", () => location.reload());
    src.onerror = () => { live.textContent = "○ live: reconnecting"; live.classList.remove("on"); };
  }
  connect();

  document.addEventListener("click", async (ev) => {
    const more = ev.target.closest("button.more");
    if (more) {
      const q = new URLSearchParams(location.search);
      q.set("offset", more.dataset.offset);
      const res = await fetch("/column/" + more.dataset.column + "?" + q.toString());
      const html = await res.text();
      const cards = document.getElementById("cards-" + more.dataset.column);
      cards.insertAdjacentHTML("beforeend", html);
      const shown = cards.children.length;
      const total = Number(more.parentElement.dataset.total);
      more.dataset.offset = shown;
      if (shown >= total || !html.trim()) more.remove();
      else more.textContent = "Show more (" + (total - shown) + " left)";
      return;
    }
    const copy = ev.target.closest("button.copy");
    if (copy) {
      try { await navigator.clipboard.writeText(copy.dataset.copy); toast("copied"); }
      catch (e) { toast("copy it by hand: " + copy.dataset.copy); }
      return;
    }
    const act = ev.target.closest("button.act");
    if (act) {
      if (act.dataset.confirm && !confirm(act.dataset.confirm)) return;
      const id = document.querySelector("section[data-id]").dataset.id;
      try { await post("/api/task/" + id + "/" + act.dataset.action); location.reload(); }
      catch (e) { toast(e.message, true); }
      return;
    }
    const team = ev.target.closest("button.team-act");
    if (team) {
      const n = document.getElementById("team-n");
      try {
        await post("/api/team/" + team.dataset.action, n ? { teammates: Number(n.value) } : {});
        location.reload();
      } catch (e) { toast(e.message, true); }
      return;
    }
    if (ev.target.id === "notify" && window.Notification) {
      Notification.requestPermission().then((p) => toast("notifications: " + p));
    }
  });

  function result(text, bad) {
    const el = document.getElementById("action-result");
    if (el) { el.textContent = text; el.className = "result" + (bad ? " bad" : ""); }
    toast(text, bad);
  }

  document.addEventListener("submit", async (ev) => {
    const form = ev.target;
    if (form.id === "filters") return;  // a plain GET
    ev.preventDefault();
    const data = Object.fromEntries(new FormData(form).entries());
    try {
      if (form.id === "add-form") {
        data.plan_first = !!data.plan_first;
        const t = await post("/api/tasks", data);
        form.reset();
        toast("added " + t.id + ": " + t.subject);
      } else if (form.id === "merge-form") {
        const id = form.closest("section[data-id]").dataset.id;
        const r = await post("/api/task/" + id + "/merge", data);
        result("merged " + (r.blockers && r.blockers.length ? r.blockers.join(", ") + " then " : "") +
               id + " into " + r.into + " (" + r.commit.slice(0, 12) + ")" +
               (r.snapshot ? "; original commits kept under " + r.snapshot : ""));
        setTimeout(() => { location.href = "/task/" + id; }, 1200);
      } else if (form.id === "discard-form") {
        const id = form.closest("section[data-id]").dataset.id;
        data.force = !!data.force;
        if (data.force && !confirm("Discard " + id + " even though work would be lost? A snapshot is kept.")) return;
        const r = await post("/api/task/" + id + "/discard", data);
        result("discarded " + id + (r.snapshot ? "; its work is kept under " + r.snapshot : ""));
      } else if (form.classList.contains("wait-form")) {
        const btn = form.querySelector("button[data-confirm]");
        if (btn && !confirm(btn.dataset.confirm)) return;
        const r = await post("/api/task/" + form.dataset.id + "/" + form.dataset.action, data);
        result(form.dataset.id + " is " + r.status + " now");
        setTimeout(() => { location.reload(); }, 800);
      } else if (form.classList.contains("retry-form")) {
        const id = form.dataset.id;
        await post("/api/task/" + id + "/retry", { feedback: data.feedback || "" });
        result(id + " is pending again" + (data.feedback ? " with your feedback" : ""));
      } else if (form.classList.contains("answer-form")) {
        const verdict = ev.submitter ? ev.submitter.value : "approve";
        const r = await post("/api/requests/" + encodeURIComponent(form.dataset.request) + "/" + verdict,
                             { message: data.message || "" });
        result((verdict === "approve" ? "approved" : "denied") + " the request of " + r.task);
        const item = form.closest(".request");
        if (item) item.remove();
      }
    } catch (e) { result(e.message, true); }
  });

  // --- drag and drop: onto Pending = retry, onto Cancelled = cancel ------------------
  const DROPS = { pending: ["review", "failed"], closed: ["pending", "in_progress", "review", "failed"] };
  let dragged = null;
  document.addEventListener("dragstart", (ev) => {
    const card = ev.target.closest && ev.target.closest(".card");
    if (card) { dragged = card; ev.dataTransfer.setData("text/plain", card.dataset.id); }
  });
  for (const [col, from] of Object.entries(DROPS)) {
    const zone = document.getElementById("col-" + col);
    if (!zone) continue;
    zone.addEventListener("dragover", (ev) => {
      if (dragged && from.includes(dragged.dataset.status)) { ev.preventDefault(); zone.classList.add("drop"); }
    });
    zone.addEventListener("dragleave", () => zone.classList.remove("drop"));
    zone.addEventListener("drop", async (ev) => {
      ev.preventDefault();
      zone.classList.remove("drop");
      if (!dragged) return;
      const id = dragged.dataset.id;
      const action = col === "pending" ? "retry" : "cancel";
      try { await post("/api/task/" + id + "/" + action); toast(action === "retry" ? id + " is pending again" : "cancelled " + id); }
      catch (e) { toast(e.message, true); }
      dragged = null;
    });
  }

  // --- the task page's transcript ----------------------------------------------------
  if (page === "task") {
    const sec = document.querySelector("section.task");
    const box = document.getElementById("transcript");
    const src = new EventSource("/task/" + sec.dataset.id + "/stream?offset=" + sec.dataset.logOffset);
    src.addEventListener("entry", (ev) => {
      const stick = box.scrollTop + box.clientHeight >= box.scrollHeight - 20;
      box.insertAdjacentHTML("beforeend", JSON.parse(ev.data).html);
      if (stick) box.scrollTop = box.scrollHeight;
    });
  }
})();
