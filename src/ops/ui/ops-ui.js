// lockd's operator page. Plain browser JavaScript, no build step, no library.
// Lock names and owner labels are whatever clients sent: every piece of data
// goes into the page as text (textContent, text nodes, attribute values),
// never as markup. The admin token lives in this script's memory only and
// goes out as an Authorization header on each action.
"use strict";

(() => {
  const INTERVAL_MS = 1000;
  const ROWS = 200;
  const QUEUE = 100;
  /** Holders listed in the detail panel (a semaphore's or shared lock's may be many; the count says how many in all). */
  const HOLDERS = 100;
  /** Owner labels up to this many characters are never wrapped in the queue table (longer ones wrap anywhere). */
  const SHORT_OWNER = 32;
  const $ = (id) => document.getElementById(id);

  const state = {
    sort: "name",
    dir: "asc",
    prefix: "",
    /** The lock whose queue is shown, or null. */
    selected: null,
    /** The admin token typed in the page: memory only. */
    token: "",
    /** The action awaiting confirmation. */
    pending: null,
    /** False while the board says this instance is not its service's active (it serves no locks). */
    serving: true,
    /** The board's last `lockDelay` (null: none runs) and when it came (performance.now()), counted down between polls. */
    delay: null,
    delayAt: 0,
  };

  /** An element with text children (strings become text nodes) and plain properties. */
  function el(tag, props, ...children) {
    const node = document.createElement(tag);
    if (props) for (const [key, value] of Object.entries(props)) node[key] = value;
    for (const child of children) if (child !== null && child !== undefined) node.append(child);
    return node;
  }

  function duration(ms) {
    if (ms === null || ms === undefined || ms < 0) return "—";
    if (ms < 1000) return `${ms} ms`;
    const s = ms / 1000;
    if (s < 60) return `${s.toFixed(1)} s`;
    const m = Math.floor(s / 60);
    if (m < 60) return `${m} m ${Math.floor(s % 60)} s`;
    const h = Math.floor(m / 60);
    return `${h} h ${m % 60} m`;
  }

  /**
   * Labels as shown (owners, service and shard names): bidirectional
   * controls and invisible (default-ignorable) characters, which could make
   * one label look like another ("rtl\u202Eevil" shows as "rtllive"), become
   * visible ⟨U+202E⟩ markers. Everything else is as sent.
   */
  const INVISIBLE = /[\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f\u200b-\u200f\u202a-\u202e\u2060-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff0-\ufff8\u{1bca0}-\u{1bca3}\u{1d173}-\u{1d17a}\u{e0000}-\u{e0fff}]/gu;
  const shown = (text) => text.replace(INVISIBLE, (c) => `⟨U+${c.codePointAt(0).toString(16).toUpperCase().padStart(4, "0")}⟩`);
  const quoted = (text) => shown(JSON.stringify(text));

  /**
   * Lock names are shown so that two different names never look alike:
   * printable ASCII other than the space and the backslash is as sent; a space
   * is a visible ␣ (so two never collapse into one, and a trailing one
   * shows); a backslash is \\; every other code point (a Cyrillic і, U+180E,
   * a variation selector, a tag character, any letter outside ASCII) is its
   * escape \u{XXXX}. That is one-to-one: no name's text can spell another's.
   * The pieces other than plain ASCII are marked (class "esc") so that an
   * escape stands out from the name's own characters.
   */
  function namePieces(name) {
    const pieces = [];
    let plain = "";
    for (const ch of name) {
      const code = ch.codePointAt(0);
      if (code > 0x20 && code < 0x7f && code !== 0x5c) {
        plain += ch;
        continue;
      }
      if (plain !== "") pieces.push({ text: plain, esc: false });
      plain = "";
      pieces.push({ text: code === 0x20 ? "␣" : code === 0x5c ? "\\\\" : `\\u{${code.toString(16).toUpperCase().padStart(4, "0")}}`, esc: true });
    }
    if (plain !== "") pieces.push({ text: plain, esc: false });
    return pieces;
  }

  /** A lock name as text (the title of the page, a message). */
  const nameText = (name) => namePieces(name).map((piece) => piece.text).join("");

  /** A lock name as a node: <span class="lockname"> with its escapes marked. */
  function nameNode(name) {
    const node = el("span", { className: "lockname" });
    for (const piece of namePieces(name)) node.append(piece.esc ? el("span", { className: "esc", textContent: piece.text }) : piece.text);
    return node;
  }

  /** A lock name in quotes, for sentences. */
  const quotedName = (name) => [`"`, nameNode(name), `"`];

  const number = (n) => (n === null || n === undefined ? "—" : n.toLocaleString("en-US"));
  const micros = (us) => (us === null || us === undefined ? "—" : us >= 1000 ? `${(us / 1000).toFixed(1)} ms` : `${us} µs`);

  async function getJson(url) {
    const response = await fetch(url, { cache: "no-store", credentials: "omit", referrerPolicy: "no-referrer" });
    let body = null;
    try {
      body = await response.json();
    } catch {
      body = null;
    }
    return { status: response.status, body };
  }

  function setStatus(text, down) {
    const status = $("status");
    status.textContent = text;
    status.classList.toggle("down", down);
  }

  /** A message line: `text` is a string or pieces (strings and nodes). */
  function showMessage(text, isError) {
    const message = $("message");
    message.replaceChildren(...(typeof text === "string" ? [text] : text));
    message.classList.toggle("error", isError);
    message.hidden = false;
  }

  // ---- the table -------------------------------------------------------

  function boardUrl() {
    const params = new URLSearchParams({ sort: state.sort, dir: state.dir, limit: String(ROWS) });
    if (state.prefix !== "") params.set("prefix", state.prefix);
    return `/ui/v1/board?${params}`;
  }

  function renderTotals(board) {
    const t = board.totals;
    $("version").textContent = `v${board.version}`;
    $("t-owner").textContent = number(t.sessions.owner);
    $("t-waiting").textContent = number(t.sessions.waiting);
    $("t-connected").textContent = number(t.sessions.connected);
    $("t-locks").textContent = number(t.locks);
    const grants = board.series.grantsPerSecond;
    $("t-grants").textContent = grants.length === 0 ? "—" : number(grants[grants.length - 1]);
    const h = t.handoverSinceStart;
    $("t-handover").textContent = `${micros(h.p50Us)} / ${micros(h.p99Us)} (since start, ${number(h.count)} handover${h.count === 1 ? "" : "s"})`;
    const e = t.ends;
    $("t-ends").textContent = `lease expired ${number(e.leaseExpired)} · I/O timeout ${number(e.ioTimeout)} · force-released ${number(e.forceReleased)} · kicked ${number(e.kicked)}`;
  }

  /**
   * The instance's place: with --coordinator its service, role and epoch in
   * the header, and while it is not the active a banner instead of its
   * (empty, or last term's) totals and table, which are not the service's;
   * with shards, the shard and the map's generation.
   */
  function renderRole(board) {
    const shard = board.shard;
    const shardLabel = $("shard");
    shardLabel.hidden = !shard || shard.name === null;
    shardLabel.textContent = shardLabel.hidden ? "" : `shard ${shown(shard.name)} · generation ${shard.generation}`;
    const role = board.role || null;
    const roleLabel = $("role");
    roleLabel.hidden = role === null;
    roleLabel.textContent = role === null ? "" : `service ${shown(role.service)} · ${role.role} · epoch ${role.epoch}`;
    const serving = role === null || role.role === "active";
    state.serving = serving;
    document.body.dataset.role = role === null ? "" : role.role;
    $("standby").hidden = serving;
    if (!serving) {
      const what = role.role === "standby" ? `This instance is a standby of service ${shown(role.service)}` : `This instance of service ${shown(role.service)} is stopped`;
      $("standby-text").textContent = `${what}: it serves no locks. Open the active instance's page.`;
      renderActive(role);
      const refusal = $("standby-refusal");
      refusal.hidden = role.refusal === undefined;
      refusal.textContent = role.refusal === undefined ? "" : `It will not take over: ${shown(role.refusal)}`;
    }
    // The admin token does nothing on an instance that serves no locks: its field goes with the table.
    $("token-label").hidden = !serving;
    $("totals").hidden = !serving;
    $("locks-section").hidden = !serving;
    $("detail").hidden = !serving || state.selected === null;
  }

  /**
   * Where the service's active is, as the coordinator row names it: its
   * instance id, and a link to its page when it advertises its ops address
   * (same scheme as this page: the instances of a service share --ops-tls).
   * All text nodes; the link's address is built by URL, never as markup.
   */
  function renderActive(role) {
    const line = $("standby-active");
    line.replaceChildren();
    line.hidden = role.active === null || role.active === undefined;
    if (line.hidden) return;
    line.append(`The active is ${shown(role.active)}`);
    let href = null;
    if (typeof role.activeOps === "string" && role.activeOps !== "") {
      try {
        const url = new URL("/ui", `${location.protocol}//${role.activeOps}`);
        if (url.host !== "") href = url.href;
      } catch {
        href = null;
      }
    }
    if (href !== null) {
      line.append(", ops at ", el("a", { id: "standby-active-link", href, textContent: role.activeOps }), ".");
    } else {
      line.append(role.activeOps ? `, ops at ${shown(role.activeOps)}.` : "; it advertises no ops address (see --advertise-ops).");
    }
  }

  // ---- the lock-delay banner ----------------------------------------------

  /** How often the banner's countdown is redrawn between polls. */
  const DELAY_TICK_MS = 100;
  let delayTimer = null;

  /** A lock-delay's time left: tenths of a second, rounded up (never "0.0 s" while some is left). */
  function delayLeft(ms) {
    if (ms <= 0) return "0.0 s";
    if (ms < 60_000) return `${(Math.ceil(ms / 100) / 10).toFixed(1)} s`;
    const s = Math.ceil(ms / 1000);
    if (s < 3600) return `${Math.floor(s / 60)} min ${s % 60} s`;
    return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
  }

  /** Whose holders a delay of every name waits for, and after what (by `why`; anything else: neither). */
  const DELAY_WHY = {
    takeover: { whose: "an earlier active's holders", after: " (after a takeover)" },
    released: { whose: "an earlier active's holders", after: " (after a takeover from a clean stop)" },
    restart: { whose: "holders from before this server's restart", after: " (its last stop was not clean)" },
    "clean-restart": { whose: "holders from before this server's restart", after: " (after a clean stop)" },
  };

  /** Where the names a delay holds back one by one were published. */
  const DELAY_STOP = {
    released: "the earlier active's clean stop",
    "clean-restart": "the last clean stop",
  };

  /**
   * The banner's sentence for a DelayView with `left` ms to go. Every name:
   * none is granted before the delay ends ("up to" after a clean stop: the
   * names it published may wait longer than the others). Names only: those
   * the clean stop published, the others are granted.
   */
  function delayText(view, left) {
    const time = delayLeft(left);
    const why = Object.hasOwn(DELAY_WHY, view.why) ? DELAY_WHY[view.why] : { whose: "an earlier server's holders", after: "" };
    if (view.everyName === true || !(view.names > 0)) {
      const upTo = view.why === "takeover" || view.why === "restart" ? "" : "up to ";
      return `Lock-delay: no grant of any name for ${upTo}${time} more: ${why.whose} may still believe they hold their locks${why.after}`;
    }
    const stop = Object.hasOwn(DELAY_STOP, view.why) ? DELAY_STOP[view.why] : "the last clean stop";
    const count = number(view.names);
    return view.names === 1
      ? `Lock-delay: 1 name held at ${stop} is not granted for ${time} more: its holder may still believe it holds it (every other name is granted)`
      : `Lock-delay: ${count} names held at ${stop} are not granted for up to ${time} more: their holders may still believe they hold them (every other name is granted)`;
  }

  /**
   * The banner's second sentence while a reclaim grace runs (the delay's
   * `reclaim`, with `left` ms to go), else "": holders of the last clean
   * stop take their locks back, with their tokens, before anyone else.
   */
  function reclaimText(grace, left) {
    if (grace === null || typeof grace !== "object" || !Number.isFinite(grace.remainingMs) || !(grace.published > 0)) return "";
    const done = Number.isFinite(grace.reclaimed) ? grace.reclaimed : 0;
    return ` Reclaims: ${number(done)} of ${number(grace.published)} grants the last clean stop published are back with their holders; the rest may come back for ${delayLeft(left)} more, ahead of any other claim of their names.`;
  }

  /** The board's `lockDelay`, as it came with an answer: shown and counted down from now, or the banner gone. */
  function setDelay(value) {
    const valid = value !== null && typeof value === "object" && Number.isFinite(value.remainingMs);
    state.delay = valid ? value : null;
    state.delayAt = performance.now();
    if (state.delay !== null && delayTimer === null) delayTimer = setInterval(renderDelay, DELAY_TICK_MS);
    if (state.delay === null && delayTimer !== null) {
      clearInterval(delayTimer);
      delayTimer = null;
    }
    renderDelay();
  }

  function renderDelay() {
    const banner = $("lock-delay");
    const view = state.delay;
    banner.hidden = view === null;
    if (view === null) {
      $("lock-delay-text").textContent = "";
      delete banner.dataset.why;
      return;
    }
    banner.dataset.why = String(view.why);
    const elapsed = performance.now() - state.delayAt;
    const grace = view.reclaim ?? null;
    $("lock-delay-text").textContent = delayText(view, view.remainingMs - elapsed) + (grace === null ? "" : reclaimText(grace, grace.remainingMs - elapsed));
  }

  /**
   * The table's Holders cell: the count and the mode in one ("1 exclusive",
   * "3 shared", "semaphore 2/3"), the whole in words on hover.
   */
  function holdersCell(row, held) {
    const count = typeof row.holders === "number" ? row.holders : held ? 1 : 0;
    const mode = row.mode === "semaphore" || row.mode === "shared" ? row.mode : "exclusive";
    const text = mode === "semaphore" ? `semaphore ${number(count)}/${number(row.limit)}` : `${number(count)} ${mode}`;
    const title = mode === "semaphore" ? `a semaphore of ${number(row.limit)}: ${number(count)} holding` : `${mode === "shared" ? "a shared lock" : "an exclusive lock"}: ${number(count)} holding`;
    const cell = el("td", { textContent: text, title, className: "mode" });
    cell.dataset.mode = mode;
    cell.dataset.holders = String(count);
    return cell;
  }

  function renderRows(board) {
    const locks = board.locks;
    const rows = [];
    for (const row of locks.rows) {
      const name = el("button", { type: "button", className: "name" }, nameNode(row.name));
      name.addEventListener("click", () => select(row.name));
      const held = row.session !== 0;
      const tr = el(
        "tr",
        null,
        el("td", null, name),
        el("td", { textContent: held ? shown(row.owner) : "", className: held ? (row.owner.length <= SHORT_OWNER ? "label short" : "label") : "none" }),
        el("td", { textContent: held ? row.remote : "free", className: held ? "addr" : "addr none" }),
        el("td", { textContent: duration(row.heldForMs) }),
        el("td", { textContent: row.token }),
        el("td", { textContent: number(row.waiting) }),
        el("td", { textContent: duration(row.oldestWaitMs) }),
        holdersCell(row, held),
      );
      tr.dataset.lock = row.name;
      if (row.name === state.selected) tr.classList.add("selected");
      rows.push(tr);
    }
    $("rows").replaceChildren(...rows);
    const counts = $("counts");
    counts.replaceChildren(`showing ${number(locks.rows.length)} of ${number(locks.matched)} locks`);
    if (locks.prefix !== "") counts.append(" with names starting ", ...quotedName(locks.prefix));
    counts.append(`; ${number(locks.total)} locks held or awaited in all`);
    for (const button of document.querySelectorAll("th button[data-sort]")) {
      const on = button.dataset.sort === state.sort;
      button.classList.toggle("sorted", on);
      button.classList.toggle("asc", on && state.dir === "asc");
      button.classList.toggle("desc", on && state.dir === "desc");
    }
  }

  // ---- plots: inline SVG drawn by hand ----------------------------------

  const SVG = "http://www.w3.org/2000/svg";

  function svg(tag, attributes) {
    const node = document.createElementNS(SVG, tag);
    for (const [key, value] of Object.entries(attributes)) node.setAttribute(key, String(value));
    return node;
  }

  /** Lines of `series` (arrays of numbers or null, oldest first) over the last 300 samples. */
  function plot(id, lines) {
    const W = 300, H = 80, TOP = 10, BOTTOM = 76, SLOTS = 300;
    let max = 0;
    for (const { values } of lines) for (const v of values) if (v !== null && v > max) max = v;
    const scale = max > 0 ? max : 1;
    const nodes = [svg("line", { x1: 0, y1: BOTTOM, x2: W, y2: BOTTOM, class: "axis" })];
    for (const { values, className } of lines) {
      const offset = SLOTS - values.length;
      let points = [];
      const flush = () => {
        if (points.length === 1) points.push(points[0].replace(/^[\d.]+/, (x) => String(Number(x) + 1)));
        if (points.length > 0) nodes.push(svg("polyline", { points: points.join(" "), class: className }));
        points = [];
      };
      values.forEach((v, i) => {
        if (v === null) return flush();
        const x = ((offset + i) / (SLOTS - 1)) * W;
        const y = BOTTOM - (v / scale) * (BOTTOM - TOP);
        points.push(`${x.toFixed(1)},${y.toFixed(1)}`);
      });
      flush();
    }
    const label = svg("text", { x: 2, y: 9 });
    label.textContent = `max ${max.toLocaleString("en-US")}`;
    const left = svg("text", { x: 2, y: H - 1 });
    left.textContent = "−5 min";
    const right = svg("text", { x: W - 2, y: H - 1, "text-anchor": "end" });
    right.textContent = "now";
    nodes.push(label, left, right);
    $(id).replaceChildren(...nodes);
  }

  function renderPlots(series) {
    plot("p-sessions", [
      { values: series.owner, className: "owner" },
      { values: series.waiting, className: "waiting" },
      { values: series.connected, className: "connected" },
    ]);
    plot("p-grants", [{ values: series.grantsPerSecond, className: "grants" }]);
    plot("p-handover", [
      { values: series.handoverP50Us, className: "p50" },
      { values: series.handoverP99Us, className: "p99" },
    ]);
    plot("p-ends", [
      { values: series.leaseExpired, className: "lease" },
      { values: series.ioTimeout, className: "io" },
    ]);
  }

  // ---- a lock's queue ----------------------------------------------------

  /** The page's address for the lock shown (#lock=NAME), or for none: a link to a lock opens it. */
  const LOCK_HASH = "#lock=";

  function lockOfHash(hash) {
    if (!hash.startsWith(LOCK_HASH)) return null;
    try {
      const name = decodeURIComponent(hash.slice(LOCK_HASH.length));
      return name === "" ? null : name;
    } catch {
      return null;
    }
  }

  function setAddress(name) {
    const hash = name === null ? "" : LOCK_HASH + encodeURIComponent(name);
    if (location.hash !== hash) history.replaceState(null, "", hash === "" ? location.pathname + location.search : hash);
    document.title = name === null ? "lockd" : `${nameText(name)} · lockd`;
  }

  function select(name) {
    if (name !== state.selected) {
      // Nothing of the last lock's stays while this one's view is on its way.
      $("d-holder").replaceChildren();
      $("d-count").textContent = "";
      $("d-queue").replaceChildren();
    }
    state.selected = name;
    $("detail").hidden = !state.serving;
    $("d-name").replaceChildren(nameNode(name));
    $("detail").dataset.lock = name;
    for (const tr of $("rows").children) tr.classList.toggle("selected", tr.dataset.lock === name);
    setAddress(name);
    void refreshDetail();
  }

  function closeDetail() {
    state.selected = null;
    $("detail").hidden = true;
    delete $("detail").dataset.lock;
    for (const tr of $("rows").children) tr.classList.remove("selected");
    setAddress(null);
  }

  async function refreshDetail() {
    const name = state.selected;
    if (name === null || !state.serving) return;
    const { status, body } = await getJson(`/v1/locks?name=${encodeURIComponent(name)}&limit=${QUEUE}&holders=${HOLDERS}`);
    if (name !== state.selected) return;
    const holder = $("d-holder");
    if (status === 404) {
      holder.replaceChildren(el("p", { className: "none", textContent: "Nobody holds or waits for this lock now." }));
      $("d-count").textContent = "";
      $("d-queue").replaceChildren();
      return;
    }
    if (status !== 200 || body === null) {
      holder.replaceChildren(el("p", { className: "none", textContent: `Could not read the lock (HTTP ${status}).` }));
      return;
    }
    renderHolders(body);
    const listed = body.waiters.length;
    $("d-count").textContent = listed < body.waiting ? `(first ${number(listed)} of ${number(body.waiting)} waiters)` : `(${number(body.waiting)} waiting)`;
    const rows = body.waiters.map((w) => {
      const kick = el("button", { type: "button", className: "action", textContent: "Kick" });
      // The action names the lock the dialog shows: a session of that id waiting elsewhere is not kicked (409).
      kick.addEventListener("click", () =>
        ask([`Kick session ${w.session} (${quoted(w.owner)}, ${w.remote}), number ${w.position} in the queue of `, ...quotedName(body.name), "? It gets ERROR KICKED."], {
          kind: "kick",
          url: `/v1/sessions/${w.session}/kick?lock=${encodeURIComponent(body.name)}`,
        }),
      );
      const tr = el(
        "tr",
        null,
        el("td", { textContent: String(w.position) }),
        el("td", { textContent: String(w.session) }),
        el("td", { textContent: shown(w.owner), className: w.owner.length <= SHORT_OWNER ? "label short" : "label" }),
        el("td", { textContent: w.remote, className: "addr" }),
        el("td", { textContent: duration(w.waitingForMs) }),
        el("td", { textContent: duration(w.leaseMs) }),
        el("td", { textContent: claimText(w) }),
        el("td", null, kick),
      );
      tr.dataset.session = String(w.session);
      tr.dataset.mode = claimText(w);
      return tr;
    });
    $("d-queue").replaceChildren(...rows);
  }

  /** A lock's mode as the page words it: "exclusive", "shared", "semaphore of N". */
  function modeText(mode, limit) {
    if (mode === "semaphore") return `semaphore of ${number(limit)}`;
    return mode === "shared" ? "shared" : "exclusive";
  }

  /** A waiter's claim: shared, exclusive, or a semaphore's limit. */
  const claimText = (w) => (w.shared === true ? "shared" : w.limit > 1 ? `limit ${number(w.limit)}` : "exclusive");

  /** A holder's place: its slot (a semaphore's), "shared", or "—" (the exclusive holder). */
  const placeText = (h) => (typeof h.slot === "number" ? String(h.slot) : h.shared === true ? "shared" : "—");

  /**
   * The detail panel's holders: the lock's mode and count, then a row per
   * holder (oldest first, the first HOLDERS of them), each with its own
   * force-release naming that holder's session and token.
   */
  function renderHolders(body) {
    const holder = $("d-holder");
    const holders = Array.isArray(body.holders) ? body.holders : body.holder === null ? [] : [body.holder];
    const holding = typeof body.holding === "number" ? body.holding : holders.length;
    const mode = el("p", { id: "d-mode", className: "mode" }, modeText(body.mode, body.limit));
    if (holding === 0) {
      holder.replaceChildren(mode, el("p", { className: "none", textContent: "Free: nobody holds it (its next waiter is being granted)." }));
      return;
    }
    mode.append(holders.length < holding ? ` · first ${number(holders.length)} of ${number(holding)} holders` : ` · ${number(holding)} holding`);
    const several = holding > 1;
    const rows = holders.map((h) => {
      const release = el("button", { type: "button", className: "danger", textContent: "Force-release" });
      const place = typeof h.slot === "number" ? `, slot ${h.slot}` : h.shared === true ? ", shared" : "";
      const after = several
        ? "The holder gets ERROR FORCE_RELEASED; the other holders keep the lock, and the waiters that fit then are granted."
        : "The holder gets ERROR FORCE_RELEASED and the next waiter is granted.";
      // The action names the holder the dialog shows: if it has gone meanwhile, the server releases nobody (409).
      release.addEventListener("click", () =>
        ask(["Force-release ", ...quotedName(body.name), `, held by session ${h.session}${place} with token ${h.token} (${quoted(h.owner)}, ${h.remote})? ${after}`], {
          kind: "force-release",
          url: `/v1/locks/force-release?name=${encodeURIComponent(body.name)}&session=${h.session}&token=${encodeURIComponent(h.token)}`,
        }),
      );
      const tr = el(
        "tr",
        null,
        el("td", { textContent: placeText(h) }),
        el("td", { textContent: String(h.session) }),
        el("td", { textContent: shown(h.owner), className: h.owner.length <= SHORT_OWNER ? "label short" : "label" }),
        el("td", { textContent: h.remote, className: "addr" }),
        el("td", { textContent: h.token }),
        el("td", { textContent: duration(h.heldForMs) }),
        el("td", null, release),
      );
      // Its lease and silence, on hover: the row stays narrow enough for the panel.
      tr.title = `lease ${duration(h.leaseMs)} · silent for ${duration(h.silentForMs)}`;
      tr.dataset.session = String(h.session);
      tr.dataset.token = h.token;
      return tr;
    });
    const head = el("tr", null, ...["Slot", "Session", "Owner", "Address", "Token", "Held for", ""].map((t) => el("th", { textContent: t })));
    const table = el("table", { id: "d-holders", className: "holders" }, el("thead", null, head), el("tbody", null, ...rows));
    holder.replaceChildren(mode, el("div", { className: "holders-wrap" }, table));
  }

  // ---- actions -----------------------------------------------------------

  /** Ask to confirm `action`; `question` is its text, in pieces (strings and nodes). */
  function ask(question, action) {
    state.pending = action;
    $("confirm-text").replaceChildren(...question);
    $("confirm").hidden = false;
    $("confirm-yes").focus();
  }

  function cancel() {
    state.pending = null;
    $("confirm").hidden = true;
  }

  async function confirmAction() {
    const action = state.pending;
    cancel();
    if (action === null) return;
    const headers = {};
    if (state.token !== "") headers.authorization = `Bearer ${state.token}`;
    let response;
    try {
      response = await fetch(action.url, { method: "POST", headers, cache: "no-store", credentials: "omit", referrerPolicy: "no-referrer" });
    } catch (error) {
      showMessage(`${action.kind} failed: the server did not answer (${error.message})`, true);
      return;
    }
    let body = null;
    try {
      body = await response.json();
    } catch {
      body = null;
    }
    if (response.ok && body !== null) {
      if (action.kind === "force-release") {
        const more = body.promotedCount > 1 ? ` (and ${number(body.promotedCount - 1)} more granted with it)` : "";
        const next =
          body.promoted !== null
            ? `session ${body.promoted.session} (${quoted(body.promoted.owner)}) now holds it${more}`
            : body.holding > 0
              ? `${number(body.holding)} other holder${body.holding === 1 ? "" : "s"} still hold${body.holding === 1 ? "s" : ""} it`
              : body.waiting > 0
                ? "no waiter was granted yet"
                : "nobody was waiting";
        showMessage(["Force-released ", ...quotedName(body.lock), ` from session ${body.released.session}: ${next}.`], false);
      } else {
        showMessage([`Kicked session ${body.kicked.session} from the queue of `, ...quotedName(body.lock), "."], false);
      }
    } else {
      const error = body && body.error ? `${body.error.code}: ${body.error.message}` : `HTTP ${response.status}`;
      const hint = response.status === 401 && state.token === "" ? " Enter the admin token at the top of the page." : "";
      showMessage(`Refused ${action.kind} (HTTP ${response.status}) — ${error}.${hint}`, true);
    }
    void refreshBoard();
    void refreshDetail();
  }

  // ---- polling -------------------------------------------------------------

  let timer = null;

  async function refreshBoard() {
    try {
      const { status, body } = await getJson(boardUrl());
      if (status !== 200 || body === null) {
        const why = body && body.error ? body.error.message : `HTTP ${status}`;
        setStatus(`not updated: ${why}`, true);
        return;
      }
      renderRole(body);
      setDelay(body.lockDelay === undefined ? null : body.lockDelay);
      renderTotals(body);
      renderRows(body);
      renderPlots(body.series);
      setStatus(`live · ${new Date(body.at).toLocaleTimeString()}`, false);
    } catch (error) {
      setStatus(`disconnected: ${error.message}`, true);
    }
  }

  async function tick() {
    timer = null;
    await Promise.all([refreshBoard(), refreshDetail().catch(() => {})]);
    timer = setTimeout(tick, INTERVAL_MS);
  }

  function refreshSoon() {
    if (timer !== null) {
      clearTimeout(timer);
      void tick();
    }
  }

  document.addEventListener("DOMContentLoaded", () => {
    $("token").addEventListener("input", (event) => (state.token = event.target.value));
    let typing = null;
    $("prefix").addEventListener("input", (event) => {
      state.prefix = event.target.value;
      clearTimeout(typing);
      typing = setTimeout(refreshSoon, 200);
    });
    for (const button of document.querySelectorAll("th button[data-sort]")) {
      button.addEventListener("click", () => {
        const sort = button.dataset.sort;
        if (state.sort === sort) state.dir = state.dir === "asc" ? "desc" : "asc";
        else [state.sort, state.dir] = [sort, sort === "name" ? "asc" : "desc"];
        refreshSoon();
      });
    }
    $("confirm-yes").addEventListener("click", () => void confirmAction());
    $("confirm-no").addEventListener("click", cancel);
    $("d-close").addEventListener("click", closeDetail);
    // A link to a lock (#lock=NAME) opens it, on load and when the address changes.
    const follow = () => {
      const name = lockOfHash(location.hash);
      if (name === null) {
        if (state.selected !== null) closeDetail();
      } else if (name !== state.selected) {
        select(name);
      }
    };
    window.addEventListener("hashchange", follow);
    follow();
    void tick();
  });
})();
