/* pa-bridge console, the worklist page: polls /v1/console/worklist, submits PAs,
 * acknowledges them. Shared pieces are in common.js (window.PaConsole). */
(function () {
  "use strict";

  var C = window.PaConsole;
  var $ = C.$, el = C.el, say = C.say, problem = C.problem;
  var POLL_MS = 2000;
  var WORKLIST = "/v1/console/worklist";

  var lastPayload = null;
  var lastData = null;
  var lastPaState = {}; // pa_id -> "status|outcome|deleted|fax" for announcements
  var firstLoad = true;
  var loaded = false; // a worklist has been shown at least once
  var pending = {}; // claim key -> true while its submit is in flight
  var submitted = {}; // claim key -> the PA a submit from this page answered
  var ownPas = {}; // PA ids submitted from this page (their first appearance is not news)
  var acking = {}; // pa_id -> true while its acknowledgement is in flight
  var rowErrors = {}; // claim key -> plain-words error shown in the row
  var pollTimer = null;
  var lostContact = false;
  var pollProblem = false; // the problem shown came from polling (cleared when polling works)
  var filter = "all";
  var findText = "";
  var focusWanted = null; // data-fkey to focus after the next render
  var polls = 0;
  // a chain's console: one store's worklist (?pharmacy=<provider id> in the address, or
  // the selector shown when the token may see more than one store)
  var pharmacy = new URLSearchParams(window.location.search).get("pharmacy") || "";
  var pharmacySig = null;

  function worklistUrl() {
    return WORKLIST + (pharmacy ? "?pharmacy=" + encodeURIComponent(pharmacy) : "");
  }

  function renderPharmacies(data) {
    var list = data.pharmacies || [];
    var sig = JSON.stringify(list) + "|" + pharmacy;
    if (sig === pharmacySig) { return; }
    pharmacySig = sig;
    var select = $("pharmacy-select");
    while (select.options.length > 1) { select.remove(1); }
    list.forEach(function (p) {
      var label = p.name ? p.name + " (" + p.provider_id + ")" : p.provider_id;
      select.appendChild(el("option", { value: p.provider_id, text: label }));
    });
    select.value = pharmacy;
    $("pharmacy-pick").hidden = list.length < 2;
  }

  function schedule(ms) {
    if (pollTimer !== null) { window.clearTimeout(pollTimer); }
    pollTimer = window.setTimeout(poll, ms);
  }

  // ---- focus kept across re-renders -------------------------------------------------
  function focusKey() {
    var a = document.activeElement;
    return a && a.getAttribute ? a.getAttribute("data-fkey") : null;
  }
  function refocus(key) {
    if (!key) { return; }
    var target = document.querySelector('[data-fkey="' + CSS.escape(key) + '"]');
    if (target && document.activeElement !== target) { target.focus(); }
  }

  // Rebuild one cell only when what it shows changed, so a focused button survives polls.
  function setCell(cell, sig, build) {
    if (cell.getAttribute("data-sig") === sig) { return false; }
    cell.setAttribute("data-sig", sig);
    var hadFocus = cell.contains(document.activeElement);
    C.clear(cell);
    build(cell);
    if (hadFocus) {
      var target = cell.querySelector("button, a");
      if (target) { target.focus(); }
    }
    return true;
  }

  function syncRows(tbody, items, keyOf, makeRow, fillRow) {
    var want = {};
    items.forEach(function (it) { want[keyOf(it)] = true; });
    Array.prototype.slice.call(tbody.children).forEach(function (tr) {
      if (!want[tr.getAttribute("data-key")]) { tbody.removeChild(tr); }
    });
    var byKey = {};
    Array.prototype.forEach.call(tbody.children, function (tr) { byKey[tr.getAttribute("data-key")] = tr; });
    items.forEach(function (it, i) {
      var key = keyOf(it);
      var tr = byKey[key];
      if (!tr) {
        tr = makeRow(key);
        if (!firstLoad) { tr.className = "changed"; }
      }
      if (tbody.children[i] !== tr) { tbody.insertBefore(tr, tbody.children[i] || null); }
      fillRow(tr, it);
    });
  }

  function rowWithCells(key, labels) {
    var tr = el("tr", { "data-key": key });
    labels.forEach(function (label, i) {
      tr.appendChild(i === 0 ? el("th", { scope: "row", "data-label": label }) : el("td", { "data-label": label }));
    });
    return tr;
  }

  // ---- pieces -------------------------------------------------------------------------------
  function drugText(x) {
    return x.drug_name ? x.drug_name + (x.product_id ? " (" + x.product_id + ")" : "") : (x.product_id || null);
  }

  // The drug's name with its NDC, the NDC never broken across lines (C.ident).
  function drugNodes(x, missing) {
    if (!x.drug_name && !x.product_id) { return [missing]; }
    if (!x.drug_name) { return [C.ident(x.product_id)]; }
    return x.product_id ? [x.drug_name + " (", C.ident(x.product_id), ")"] : [x.drug_name];
  }

  function describePa(pa) {
    var words = "PA " + pa.pa_id + (pa.rx_number ? " for Rx " + pa.rx_number : "") + ": " + (pa.workflow_status || "no status yet");
    if (pa.plan_outcome) { words += ", outcome " + pa.plan_outcome; }
    if (pa.deleted) { words += ", deleted"; }
    if (pa.fax_failed) { words += ", fax failed"; }
    return words + ".";
  }

  function claimPa(c) { return c.pa || submitted[c.key] || null; }

  function submitButton(c, where) {
    var busy = !!pending[c.key];
    var btn = el("button", {
      type: "button", className: "submit", "data-claim": c.claim_id, "data-index": String(c.transaction_index),
      "data-key": c.key, "data-rx": c.rx_number || "", "data-fkey": "submit:" + where + ":" + c.key,
      "aria-disabled": busy ? "true" : null
    }, [busy ? "Submitting…" : c.button_label,
        el("span", { className: "sr-only", text: c.rx_number ? " for Rx " + c.rx_number : "" })]);
    return btn;
  }

  function rowError(c, btn, where) {
    if (!rowErrors[c.key]) { return null; }
    var id = "err-" + where + "-" + c.key.replace(/[^A-Za-z0-9_-]/g, "-");
    btn.setAttribute("aria-describedby", id);
    return el("span", { id: id, className: "row-error", text: rowErrors[c.key] });
  }

  function messageBlock(c) {
    var out = [document.createTextNode(c.message || "(message not recorded yet)")];
    if (c.message_source === "fallback") {
      out.push(el("span", { className: "note fallback", text: C.fallbackNote(c.fallback_reason) }));
    }
    return out;
  }

  function paStatusNote(pa, via) {
    var text = ": " + (pa.label || pa.workflow_status || "submitted");
    if (via === "claim_key") { text += " (the PA for this prescription, from the same claim sent earlier)"; }
    return el("span", { className: "note" }, ["PA ", C.ident(pa.pa_id), text]);
  }

  function ackButton(pa) {
    var busy = !!acking[pa.pa_id];
    return el("button", {
      type: "button", className: "ack secondary", "data-ack": pa.pa_id, "data-fkey": "ack:" + pa.pa_id,
      "data-cursor": pa.cursor, "aria-disabled": busy ? "true" : null
    }, [busy ? "Acknowledging…" : "Acknowledge",
        el("span", { className: "sr-only", text: " PA " + pa.pa_id + (pa.rx_number ? " for Rx " + pa.rx_number : "") })]);
  }

  // ---- the worklist: what needs the pharmacist ------------------------------------------------
  function matches(item) {
    if (filter !== "all" && item.attention !== filter) { return false; }
    if (!findText) { return true; }
    var hay = [(item.pa && item.pa.pa_id) || "", (item.pa && item.pa.rx_number) || "", (item.claim && item.claim.rx_number) || ""].join(" ").toLowerCase();
    return hay.indexOf(findText) >= 0;
  }

  function renderCounts(data) {
    var box = $("counts");
    var keep = focusKey();
    C.clear(box);
    $("total-count").textContent = "(" + data.counts.total + ")";
    var all = [{ key: "all", title: "All", count: data.counts.total }].concat(data.groups);
    all.forEach(function (g) {
      var tone = g.key === "all" ? "" : " g-" + g.key + " tone-" + g.tone;
      box.appendChild(el("button", {
        type: "button", className: "count-btn" + tone + (g.count ? "" : " zero"), "data-filter": g.key,
        "data-fkey": "filter:" + g.key, "aria-pressed": filter === g.key ? "true" : "false"
      }, [el("span", { className: "n", text: String(g.count) }), " " + g.title]));
    });
    refocus(keep);
  }

  function itemCard(item) {
    var pa = item.pa, c = item.claim;
    var rx = (pa && pa.rx_number) || (c && c.rx_number);
    var li = el("li", { className: "item tone-" + (pa ? pa.tone : "warn"), "data-key": item.key });
    var main = el("div", { className: "item-main" });
    li.appendChild(main);
    var head = el("p", { className: "item-head" }, [
      el("strong", {}, rx ? ["Rx ", C.ident(rx)] : ["Rx unknown"]),
      " ",
      el("span", { className: "drug" }, drugNodes(pa || c, "drug not known")),
      " ",
      pa ? C.badge(pa.tone, pa.label) : C.badge("warn", "Not submitted"),
      pa ? el("span", { className: "pa-id mono" }, ["PA ", C.ident(pa.pa_id)]) : null,
      el("span", { className: "since" }, [C.timeOf(item.since)])
    ]);
    main.appendChild(head);
    if (pa) {
      var what = el("p", { className: "item-text" }, [pa.meaning + " ", el("strong", { text: "Next: " }), pa.next_step]);
      if (pa.expiration_date) {
        what.appendChild(el("span", { className: "expires" }, [" Approved until ", C.dateOf(pa.expiration_date), "."]));
      }
      if (item.attention === "expiring" && pa.days_left !== null && pa.days_left !== undefined) {
        var left = pa.days_left;
        what.appendChild(el("span", { className: "note", text: left > 1 ? "The approval ends in " + left + " days." : (left === 1 ? "The approval ends tomorrow." : (left === 0 ? "The approval ends today." : "The approval ended " + (-left) + " day(s) ago.")) }));
      }
      if (item.attention === "pending_too_long") {
        what.appendChild(el("span", { className: "note", text: "No decision " + Math.round(lastData.pending_alert_hours) + " hours or more after it was started." }));
      }
      (pa.notes || []).forEach(function (n) { what.appendChild(el("span", { className: "note", text: n })); });
      if (item.returned && pa.acknowledged) {
        // an approval about to lapse comes back by itself when its end comes close
        var ackd = pa.acknowledged;
        var why = item.attention === "expiring" && ackd.attention === "expiring" && Number(ackd.cursor) >= Number(pa.news_cursor) ?
          "Back on the list: the approval's end is close now; " + ackd.by + " acknowledged it at " :
          "Back on the list: it changed after " + ackd.by + " acknowledged it at ";
        what.appendChild(el("span", { className: "note returned" }, [why, C.timeOf(ackd.at), "."]));
      }
      main.appendChild(what);
      var actions = el("p", { className: "actions" }, [
        C.paLink(pa, rx),
        el("a", { href: pa.page_url, className: "details", "data-fkey": "details:" + pa.pa_id }, ["Details", el("span", { className: "sr-only", text: " of PA " + pa.pa_id })]),
        ackButton(pa)
      ]);
      li.appendChild(actions);
    } else {
      main.appendChild(el("p", { className: "item-text" }, [
        "Rejected " + ((c.reject_codes || []).join(", ") || "") + ": "
      ].concat(messageBlock(c))));
      var btn = submitButton(c, "w");
      var p = el("p", { className: "actions" }, [btn]);
      var err = rowError(c, btn, "w");
      if (err) { p.appendChild(err); }
      li.appendChild(p);
    }
    return li;
  }

  function renderWorklist(data) {
    var keep = focusWanted || focusKey();
    var groups = $("groups");
    C.clear(groups);
    var shown = 0;
    data.groups.forEach(function (g) {
      var items = data.items.filter(function (it) {
        // a claim submitted from this page a moment ago leaves with the next poll
        return it.attention === g.key && matches(it) && !(it.claim && submitted[it.claim.key]);
      });
      if (!items.length) { return; }
      shown += items.length;
      var sec = el("section", { className: "group g-" + g.key, "data-group": g.key, "aria-labelledby": "group-" + g.key });
      sec.appendChild(el("h3", { id: "group-" + g.key }, [g.title + " ", el("span", { className: "count", text: "(" + items.length + ")" })]));
      var ul = el("ul", { className: "items" });
      items.forEach(function (it) { ul.appendChild(itemCard(it)); });
      sec.appendChild(ul);
      groups.appendChild(sec);
    });
    $("worklist-loading").hidden = true;
    $("worklist-empty").hidden = data.items.length > 0;
    $("worklist-filtered").hidden = !(data.items.length > 0 && shown === 0);
    refocus(keep);
  }

  // ---- claims table ------------------------------------------------------------------------
  var CLAIM_LABELS = ["Rx number", "Drug", "Received", "Reject codes", "Message", "Prior authorization"];

  function fillClaim(tr, c) {
    var cells = tr.children;
    setCell(cells[0], c.rx_number || "", function (td) {
      td.appendChild(c.rx_number ? C.ident(c.rx_number) : document.createTextNode("(purged)"));
    });
    setCell(cells[1], c.product_id || "", function (td) {
      td.appendChild(c.product_id ? C.ident(c.product_id, "mono") : document.createTextNode("-"));
    });
    setCell(cells[2], c.received_at || "", function (td) { td.appendChild(C.timeOf(c.received_at)); });
    setCell(cells[3], (c.reject_codes || []).join(","), function (td) {
      td.textContent = (c.reject_codes || []).join(", ") || "-";
    });
    cells[4].className = "msg";
    setCell(cells[4], (c.message || "") + "|" + (c.message_source || "") + "|" + JSON.stringify(c.fallback_reason || null), function (td) {
      messageBlock(c).forEach(function (n) { td.appendChild(n); });
    });
    var pa = claimPa(c);
    var via = c.pa ? c.pa_via : (pa ? "claim_key" : null);
    var sig = pa
      ? "pa|" + pa.pa_id + "|" + (pa.label || "") + "|" + via + "|" + (C.paHref(pa) || "")
      : "btn|" + c.button_label + "|" + (pending[c.key] ? "busy" : "") + "|" + (rowErrors[c.key] || "");
    setCell(cells[5], sig, function (td) {
      if (pa) {
        td.appendChild(paStatusNote(pa, via));
        td.appendChild(C.paLink(pa, c.rx_number));
        return;
      }
      var btn = submitButton(c, "c");
      td.appendChild(btn);
      var err = rowError(c, btn, "c");
      if (err) { td.appendChild(err); }
    });
  }

  // ---- PAs table ------------------------------------------------------------------------------
  var PA_LABELS = ["PA", "Rx number", "Drug", "Status", "Outcome", "Notes", "Changed", "Open"];

  function fillPa(tr, pa) {
    var cells = tr.children;
    setCell(cells[0], pa.pa_id, function (td) {
      td.appendChild(el("a", { href: pa.page_url, className: "mono ident", text: pa.pa_id, "data-fkey": "page:" + pa.pa_id }));
    });
    setCell(cells[1], pa.rx_number || "", function (td) {
      td.appendChild(pa.rx_number ? C.ident(pa.rx_number) : document.createTextNode("-"));
    });
    setCell(cells[2], drugText(pa) || "", function (td) {
      drugNodes(pa, "-").forEach(function (n) { td.appendChild(typeof n === "string" ? document.createTextNode(n) : n); });
    });
    setCell(cells[3], pa.workflow_status || "", function (td) { td.textContent = pa.workflow_status || "-"; });
    setCell(cells[4], (pa.plan_outcome || "") + "|" + pa.tone, function (td) {
      if (pa.plan_outcome) { td.appendChild(C.badge(pa.tone, pa.plan_outcome)); }
      else { td.textContent = "-"; }
    });
    // The label once (it says "Deleted" or "Fax failed" when that is the latest news),
    // then only what it does not say already.
    setCell(cells[5], pa.label + "|" + (pa.notes || []).join("|") + "|" + (pa.expiration_date || ""), function (td) {
      td.appendChild(el("span", { text: pa.label }));
      (pa.notes || []).forEach(function (n) { td.appendChild(el("span", { className: "note", text: n })); });
      if (pa.expiration_date) { td.appendChild(el("span", { className: "note" }, ["Until ", C.dateOf(pa.expiration_date)])); }
    });
    setCell(cells[6], pa.updated_at || "", function (td) { td.appendChild(C.timeOf(pa.updated_at)); });
    setCell(cells[7], pa.pa_id + "|" + (C.paHref(pa) || ""), function (td) { td.appendChild(C.paLink(pa, pa.rx_number)); });
  }

  var guideDone = false;
  function renderGuide(rows) {
    if (guideDone || !rows) { return; }
    guideDone = true;
    var body = $("guide-body");
    rows.forEach(function (g) {
      body.appendChild(el("tr", {}, [
        el("th", { scope: "row", "data-label": "Status", text: g.workflow_status || (g.event === "DELETE" ? "(DELETE event)" : "(fax failure event)") }),
        el("td", { "data-label": "Outcome", text: g.plan_outcome || "-" }),
        el("td", { "data-label": "Shown as" }, [C.badge(g.tone, g.label)]),
        el("td", { "data-label": "What it means", text: g.meaning }),
        el("td", { "data-label": "What to do", text: g.next_step })
      ]));
    });
  }

  function render(data) {
    lastData = data;
    loaded = true;
    renderPharmacies(data);
    renderCounts(data);
    renderWorklist(data);
    focusWanted = null;

    $("claims-loading").hidden = true;
    syncRows($("claims-body"), data.claims, function (c) { return c.key; },
      function (key) { return rowWithCells(key, CLAIM_LABELS); }, fillClaim);
    $("claims-empty").hidden = data.claims.length > 0;
    $("claims").hidden = data.claims.length === 0;

    $("pas-loading").hidden = true;
    syncRows($("pas-body"), data.pas, function (p) { return p.pa_id; },
      function (key) { return rowWithCells(key, PA_LABELS); }, fillPa);
    $("pas-empty").hidden = data.pas.length > 0;
    $("pas").hidden = data.pas.length === 0;
    renderGuide(data.guide);

    var changes = [];
    data.pas.forEach(function (pa) {
      var state = [pa.workflow_status, pa.plan_outcome, pa.deleted, pa.fax_failed].join("|");
      var before = lastPaState[pa.pa_id];
      // A PA this page just submitted is not news when it first shows up: the submit's
      // own message said so, and must not be overwritten.
      var isNew = before === undefined && ownPas[pa.pa_id];
      if (!firstLoad && before !== state && !isNew) { changes.push(describePa(pa)); }
      lastPaState[pa.pa_id] = state;
    });
    if (changes.length) { say(changes.slice(0, 3).join(" ") + (changes.length > 3 ? " And " + (changes.length - 3) + " more." : "")); }
    firstLoad = false;
  }

  function rerender() { if (lastData) { render(lastData); } }

  // ---- polling ------------------------------------------------------------------------------
  function notLoaded(text) {
    if (loaded) { return; }
    // Nothing was loaded: say so where the lists go, never "no claims today".
    ["worklist-loading", "claims-loading", "pas-loading"].forEach(function (id) {
      $(id).textContent = text;
      $(id).hidden = false;
    });
    ["worklist-empty", "claims-empty", "pas-empty"].forEach(function (id) { $(id).hidden = true; });
  }

  function poll() {
    pollTimer = null;
    C.api("GET", worklistUrl(), undefined, { background: true }).then(function (r) {
      polls += 1;
      document.body.setAttribute("data-polls", String(polls));
      if (r.status === 401) {
        $("token-form").hidden = false;
        problem(C.token() ? "The intake token was not accepted. Enter the right one below." : C.PLAIN.unauthorized);
        pollProblem = true;
        lastPayload = null;
        notLoaded("Sign in to see the worklist.");
        return; // wait for the form
      }
      if (!r.ok || !r.data) {
        problem("The worklist could not be loaded. " + C.plainError(r));
        pollProblem = true;
        notLoaded("The worklist could not be loaded.");
        schedule(POLL_MS * 2);
        return;
      }
      var wasLost = lostContact;
      lostContact = false;
      if (pollProblem) { problem(""); pollProblem = false; }
      if (wasLost) { say("Connected to pa-bridge again."); }
      $("token-form").hidden = true;
      if (r.text !== lastPayload) {
        lastPayload = r.text;
        render(r.data);
      }
      $("updated").textContent = new Date().toLocaleTimeString();
      schedule(POLL_MS);
    }, function () {
      polls += 1;
      document.body.setAttribute("data-polls", String(polls));
      if (!lostContact) { problem("Lost contact with pa-bridge. Retrying every few seconds."); pollProblem = true; }
      lostContact = true;
      notLoaded("The worklist could not be loaded: pa-bridge could not be reached.");
      schedule(POLL_MS * 2);
    });
  }

  // ---- submit PA --------------------------------------------------------------------------
  function submit(btn) {
    var key = btn.getAttribute("data-key");
    if (pending[key] || submitted[key]) { return; }
    var claimId = btn.getAttribute("data-claim");
    var index = parseInt(btn.getAttribute("data-index"), 10) || 0;
    var rx = btn.getAttribute("data-rx");
    pending[key] = true;
    delete rowErrors[key];
    if (!pollProblem) { problem(""); }
    focusWanted = btn.getAttribute("data-fkey");
    rerender();
    say("Submitting the PA" + (rx ? " for Rx " + rx : "") + "…");
    C.api("POST", "/v1/claims/" + encodeURIComponent(claimId) + "/pa", { transaction: index }).then(function (r) {
      delete pending[key];
      if (r.ok && r.data && r.data.pa_id) {
        var pa = r.data;
        submitted[key] = pa;
        ownPas[pa.pa_id] = true;
        var href = C.paHref(pa);
        if (!pollProblem) { problem(""); }
        say((r.status === 201 ? "PA " + pa.pa_id + " created" : "This claim already has PA " + pa.pa_id) +
            (rx ? " for Rx " + rx : "") +
            (href ? ". Opening it in a new tab." : ". PA started, link on its way."), { hold: 6000, force: true });
        if (href) { window.open(href, "_blank", "noopener"); }
        focusWanted = "open:" + pa.pa_id;
        lastPayload = null;
        rerender();
        var link = document.querySelector('#claims-body tr[data-key="' + CSS.escape(key) + '"] a[data-pa]');
        if (link) { link.focus(); }
        schedule(0); // show it now
        return;
      }
      if (r.status === 401) { $("token-form").hidden = false; }
      rowErrors[key] = C.plainError(r);
      problem("The PA" + (rx ? " for Rx " + rx : "") + " was not submitted. " + rowErrors[key]);
      pollProblem = r.status === 401;
      lastPayload = null;
      rerender();
      schedule(0);
    }, function () {
      delete pending[key];
      rowErrors[key] = "pa-bridge could not be reached. Try again.";
      problem("The PA" + (rx ? " for Rx " + rx : "") + " was not submitted: pa-bridge could not be reached.");
      pollProblem = false;
      lastPayload = null;
      rerender();
      schedule(0);
    });
  }

  // ---- acknowledge ------------------------------------------------------------------------
  function acknowledge(btn) {
    var paId = btn.getAttribute("data-ack");
    if (acking[paId]) { return; }
    acking[paId] = true;
    focusWanted = btn.getAttribute("data-fkey");
    rerender();
    // what the pharmacist saw is what is acknowledged: news after it keeps it listed
    var seen = btn.getAttribute("data-cursor");
    C.api("POST", "/v1/pa/" + encodeURIComponent(paId) + "/acknowledge", seen ? { cursor: seen } : undefined).then(function (r) {
      delete acking[paId];
      if (r.ok && r.data) {
        if (!pollProblem) { problem(""); }
        say("PA " + paId + " acknowledged: it leaves the worklist.", { hold: 4000, force: true });
        focusWanted = null;
        lastPayload = null;
        schedule(0);
        window.setTimeout(function () {
          if (!document.activeElement || document.activeElement === document.body) { $("worklist-heading").focus(); }
        }, 0);
        return;
      }
      if (r.status === 401) { $("token-form").hidden = false; }
      problem("PA " + paId + " was not acknowledged. " + C.plainError(r));
      rerender();
    }, function () {
      delete acking[paId];
      problem("PA " + paId + " was not acknowledged: pa-bridge could not be reached.");
      rerender();
    });
  }

  function init() {
    C.takeTokenFromUrl();
    document.addEventListener("click", function (ev) {
      var t = ev.target;
      var btn = t.closest && t.closest("button[data-claim]");
      if (btn) { submit(btn); return; }
      var ack = t.closest && t.closest("button[data-ack]");
      if (ack) { acknowledge(ack); return; }
      var f = t.closest && t.closest("button[data-filter]");
      if (f) {
        filter = f.getAttribute("data-filter");
        focusWanted = f.getAttribute("data-fkey");
        rerender();
      }
    });
    $("pharmacy-select").addEventListener("change", function () {
      pharmacy = $("pharmacy-select").value;
      var params = new URLSearchParams(window.location.search);
      if (pharmacy) { params.set("pharmacy", pharmacy); } else { params.delete("pharmacy"); }
      var rest = params.toString();
      history.replaceState(null, "", window.location.pathname + (rest ? "?" + rest : "") + window.location.hash);
      say(pharmacy ? "Showing pharmacy " + pharmacy + "." : "Showing every pharmacy.");
      lastPayload = null;
      schedule(0);
    });
    $("find-input").addEventListener("input", function () {
      findText = $("find-input").value.trim().toLowerCase().replace(/^0+/, "");
      if (lastData) { renderWorklist(lastData); }
    });
    C.onTokenForm(function () {
      problem("");
      pollProblem = false;
      say("Token saved for this tab. Loading the worklist…");
      lastPayload = null;
      schedule(0);
    });
    document.addEventListener("visibilitychange", function () {
      if (!document.hidden) { schedule(0); }
    });
    poll();
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", init);
  } else {
    init();
  }
})();
