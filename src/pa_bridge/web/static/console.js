/* pa-bridge console: polls /v1/console/worklist, submits PAs. No framework, no network
 * access beyond this pa-bridge. The intake token (when one is configured) comes from
 * /?token=... once or from the sign-in form, and is kept in sessionStorage only. */
(function () {
  "use strict";

  var TOKEN_KEY = "pa-bridge.intake-token";
  var POLL_MS = 2000;
  var WORKLIST = "/v1/console/worklist";

  var lastPayload = null;
  var lastPaState = {}; // pa_id -> "status|outcome|deleted|fax" for announcements
  var firstLoad = true;
  var pending = {}; // claim key -> true while its submit is in flight
  var rowErrors = {}; // claim key -> plain-words error shown in the row
  var pollTimer = null;
  var lostContact = false;
  var pollProblem = false; // the problem shown came from polling (cleared when polling works)

  function $(id) { return document.getElementById(id); }

  // ---- token -------------------------------------------------------------------
  function takeTokenFromUrl() {
    var params = new URLSearchParams(window.location.search);
    var t = params.get("token");
    if (t !== null) {
      if (t) { sessionStorage.setItem(TOKEN_KEY, t); }
      params.delete("token");
      var rest = params.toString();
      // Drop the token from the address bar and the history.
      history.replaceState(null, "", window.location.pathname + (rest ? "?" + rest : "") + window.location.hash);
    }
  }
  function token() { return sessionStorage.getItem(TOKEN_KEY) || ""; }

  function api(method, path, body) {
    var headers = { "Accept": "application/json" };
    var t = token();
    if (t) { headers["Authorization"] = "Bearer " + t; }
    var init = { method: method, headers: headers, cache: "no-store", credentials: "omit" };
    if (body !== undefined) {
      headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    return fetch(path, init).then(function (resp) {
      return resp.text().then(function (text) {
        var data = null;
        try { data = text ? JSON.parse(text) : null; } catch (e) { data = null; }
        return { status: resp.status, ok: resp.ok, data: data, text: text };
      });
    });
  }

  // ---- errors in plain words ---------------------------------------------------------
  var PLAIN = {
    unauthorized: "pa-bridge needs the intake token. Enter it below.",
    unknown_claim: "pa-bridge does not know this claim any more.",
    not_pa_eligible: "This claim was not rejected for a reason that allows a PA.",
    claim_purged: "This claim is older than the retention period. Send the claim again from the dispensing system.",
    storage_unavailable: "pa-bridge could not save to its database. Try again in a moment; if it keeps happening, call IT.",
    service_unreachable: "The PA service could not be reached. Check the store's internet connection and try again.",
    service_timeout: "The PA service did not answer in time. Try again.",
    service_tls: "pa-bridge could not make a secure connection to the PA service. Call IT.",
    service_missing_claim_data: "The PA service says the claim is missing information.",
    service_unrecognized_ndc: "The PA service does not recognise this drug (NDC).",
    body_too_large: "The request was too large.",
    internal_error: "pa-bridge hit an unexpected problem. It was logged; try again or call IT."
  };

  function plainError(result) {
    var err = result && result.data && result.data.error;
    if (!err) {
      if (result && result.status === 0) { return "pa-bridge could not be reached."; }
      return "pa-bridge answered with an unexpected error (HTTP " + (result ? result.status : "?") + ").";
    }
    var msg = err.message ? String(err.message) : "";
    if (msg) { msg = msg.charAt(0).toUpperCase() + msg.slice(1) + (/[.!?]$/.test(msg) ? "" : "."); }
    // The service's messages are written for the pharmacist; ours get plain words here.
    var out = (String(err.code).indexOf("service_") === 0 && msg) ? msg : (PLAIN[err.code] || msg);
    if (typeof err.detail === "string" && err.detail && err.code !== "storage_unavailable") {
      out += " Details for IT: " + err.detail;
    }
    return out || "Something went wrong (" + err.code + ").";
  }

  function say(text) {
    var s = $("status");
    s.textContent = "";
    // A fresh text node so screen readers announce a repeat of the same words.
    window.setTimeout(function () { s.textContent = text; }, 50);
  }

  function problem(text) {
    var p = $("problem");
    if (text) {
      p.textContent = text;
      p.hidden = false;
    } else {
      p.textContent = "";
      p.hidden = true;
    }
  }

  function showTokenForm(show) {
    $("token-form").hidden = !show;
  }

  // ---- small DOM helpers -------------------------------------------------------------
  function el(tag, attrs, children) {
    var node = document.createElement(tag);
    if (attrs) {
      Object.keys(attrs).forEach(function (k) {
        if (k === "text") { node.textContent = attrs[k]; }
        else if (k === "className") { node.className = attrs[k]; }
        else { node.setAttribute(k, attrs[k]); }
      });
    }
    (children || []).forEach(function (c) {
      if (c !== null && c !== undefined) {
        node.appendChild(typeof c === "string" ? document.createTextNode(c) : c);
      }
    });
    return node;
  }

  function timeOf(iso) {
    if (!iso) { return el("span", { text: "-" }); }
    var d = new Date(iso);
    var text = isNaN(d.getTime()) ? iso : d.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });
    return el("time", { datetime: iso, text: text });
  }

  // Rebuild one cell only when what it shows changed, so a focused button survives polls.
  function setCell(cell, sig, build) {
    if (cell.getAttribute("data-sig") === sig) { return false; }
    cell.setAttribute("data-sig", sig);
    var hadFocus = cell.contains(document.activeElement);
    while (cell.firstChild) { cell.removeChild(cell.firstChild); }
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

  function rowWithCells(key, n, headerFirst) {
    var tr = el("tr", { "data-key": key });
    for (var i = 0; i < n; i++) {
      tr.appendChild(i === 0 && headerFirst ? el("th", { scope: "row" }) : el("td"));
    }
    return tr;
  }

  // ---- PA pieces -------------------------------------------------------------------------
  function paHref(pa) {
    if (!pa.url) { return null; }
    // The redirect endpoint needs the token in a header a link cannot send; with a token
    // configured, link the PA's own URL (the same one /v1/pa answers) instead.
    return token() ? pa.url : pa.open_url;
  }

  function paLink(pa, rx) {
    var href = paHref(pa);
    if (!href) { return el("span", { className: "note", text: "PA started, link on its way" }); }
    return el("a", {
      href: href, target: "_blank", rel: "noopener noreferrer", "data-pa": pa.pa_id
    }, ["Open PA " + pa.pa_id, el("span", { className: "sr-only", text: (rx ? " for Rx " + rx : "") + " (opens in a new tab)" })]);
  }

  function statusBadges(pa) {
    var out = [];
    if (pa.deleted) { out.push(el("span", { className: "badge bad", text: "Deleted" })); }
    if (pa.fax_failed) { out.push(el("span", { className: "badge warn", text: "Fax failed" })); }
    return out;
  }

  function outcomeClass(outcome) {
    var o = (outcome || "").toLowerCase();
    if (o.indexOf("unfav") >= 0 || o.indexOf("den") >= 0) { return "badge bad"; }
    if (o.indexOf("fav") >= 0 || o.indexOf("approv") >= 0) { return "badge ok"; }
    return "badge warn";
  }

  function describePa(pa) {
    var words = "PA " + pa.pa_id + (pa.rx_number ? " for Rx " + pa.rx_number : "") + ": " + (pa.workflow_status || "no status yet");
    if (pa.plan_outcome) { words += ", outcome " + pa.plan_outcome; }
    if (pa.deleted) { words += ", deleted"; }
    if (pa.fax_failed) { words += ", fax failed"; }
    return words + ".";
  }

  // ---- claims table ------------------------------------------------------------------------
  function fillClaim(tr, c) {
    var cells = tr.children;
    setCell(cells[0], c.rx_number || "", function (td) { td.textContent = c.rx_number || "(purged)"; });
    setCell(cells[1], c.product_id || "", function (td) {
      td.appendChild(el("span", { className: "mono", text: c.product_id || "-" }));
    });
    setCell(cells[2], c.received_at || "", function (td) { td.appendChild(timeOf(c.received_at)); });
    setCell(cells[3], (c.reject_codes || []).join(","), function (td) {
      td.textContent = (c.reject_codes || []).join(", ") || "-";
    });
    cells[4].className = "msg";
    setCell(cells[4], (c.message || "") + "|" + (c.message_source || ""), function (td) {
      td.appendChild(document.createTextNode(c.message || "(message not recorded yet)"));
      if (c.message_source === "fallback") {
        td.appendChild(el("span", { className: "note", text: "The payer's own message: the outcomes service did not answer in time." }));
      }
    });
    var pa = c.pa;
    var sig = pa
      ? "pa|" + pa.pa_id + "|" + (pa.workflow_status || "") + "|" + (pa.plan_outcome || "") + "|" + pa.deleted + "|" + pa.fax_failed + "|" + (paHref(pa) || "")
      : "btn|" + c.button_label + "|" + (pending[c.key] ? "busy" : "") + "|" + (rowErrors[c.key] || "");
    setCell(cells[5], sig, function (td) {
      if (pa) {
        td.appendChild(el("span", { className: "note", text: "PA " + pa.pa_id + ": " + (pa.workflow_status || "submitted") + (pa.plan_outcome ? ", " + pa.plan_outcome : "") }));
        statusBadges(pa).forEach(function (b) { td.appendChild(b); });
        td.appendChild(paLink(pa, c.rx_number));
        return;
      }
      var btn = el("button", {
        type: "button", "data-claim": c.claim_id, "data-index": String(c.transaction_index), "data-key": c.key,
        "data-rx": c.rx_number || ""
      }, [pending[c.key] ? "Submitting…" : c.button_label,
          el("span", { className: "sr-only", text: c.rx_number ? " for Rx " + c.rx_number : "" })]);
      if (pending[c.key]) { btn.setAttribute("aria-disabled", "true"); }
      td.appendChild(btn);
      if (rowErrors[c.key]) {
        var id = "err-" + c.key.replace(/[^A-Za-z0-9_-]/g, "-");
        td.appendChild(el("span", { id: id, className: "row-error", text: rowErrors[c.key] }));
        btn.setAttribute("aria-describedby", id);
      }
    });
  }

  // ---- PAs table ------------------------------------------------------------------------------
  function fillPa(tr, pa) {
    var cells = tr.children;
    setCell(cells[0], pa.pa_id, function (td) { td.appendChild(el("span", { className: "mono", text: pa.pa_id })); });
    setCell(cells[1], pa.rx_number || "", function (td) { td.textContent = pa.rx_number || "-"; });
    setCell(cells[2], pa.product_id || "", function (td) {
      td.appendChild(el("span", { className: "mono", text: pa.product_id || "-" }));
    });
    setCell(cells[3], pa.workflow_status || "", function (td) { td.textContent = pa.workflow_status || "-"; });
    setCell(cells[4], pa.plan_outcome || "", function (td) {
      if (pa.plan_outcome) { td.appendChild(el("span", { className: outcomeClass(pa.plan_outcome), text: pa.plan_outcome })); }
      else { td.textContent = "-"; }
    });
    setCell(cells[5], pa.deleted + "|" + pa.fax_failed, function (td) {
      var b = statusBadges(pa);
      if (!b.length) { td.textContent = "-"; }
      b.forEach(function (x) { td.appendChild(x); });
    });
    setCell(cells[6], pa.updated_at || "", function (td) { td.appendChild(timeOf(pa.updated_at)); });
    setCell(cells[7], pa.pa_id + "|" + (paHref(pa) || ""), function (td) { td.appendChild(paLink(pa, pa.rx_number)); });
  }

  function render(data) {
    syncRows($("claims-body"), data.claims, function (c) { return c.key; },
      function (key) { return rowWithCells(key, 6, true); }, fillClaim);
    $("claims-empty").hidden = data.claims.length > 0;
    $("claims").hidden = data.claims.length === 0;

    syncRows($("pas-body"), data.pas, function (p) { return p.pa_id; },
      function (key) { return rowWithCells(key, 8, true); }, fillPa);
    $("pas-empty").hidden = data.pas.length > 0;
    $("pas").hidden = data.pas.length === 0;

    var changes = [];
    data.pas.forEach(function (pa) {
      var state = [pa.workflow_status, pa.plan_outcome, pa.deleted, pa.fax_failed].join("|");
      if (!firstLoad && lastPaState[pa.pa_id] !== state) { changes.push(describePa(pa)); }
      lastPaState[pa.pa_id] = state;
    });
    if (changes.length) { say(changes.slice(0, 3).join(" ") + (changes.length > 3 ? " And " + (changes.length - 3) + " more." : "")); }
    $("updated").textContent = new Date().toLocaleTimeString();
    firstLoad = false;
  }

  // ---- polling ------------------------------------------------------------------------------
  function schedule(ms) {
    if (pollTimer !== null) { window.clearTimeout(pollTimer); }
    pollTimer = window.setTimeout(poll, ms);
  }

  function poll() {
    pollTimer = null;
    api("GET", WORKLIST).then(function (r) {
      if (r.status === 401) {
        showTokenForm(true);
        problem(token() ? "The intake token was not accepted. Enter the right one below." : PLAIN.unauthorized);
        pollProblem = true;
        lastPayload = null;
        return; // wait for the form
      }
      if (!r.ok || !r.data) {
        problem("The worklist could not be loaded. " + plainError(r));
        pollProblem = true;
        schedule(POLL_MS * 2);
        return;
      }
      if (pollProblem) { problem(""); pollProblem = false; }
      if (lostContact) { say("Connected to pa-bridge again."); lostContact = false; }
      showTokenForm(false);
      if (r.text !== lastPayload) {
        lastPayload = r.text;
        render(r.data);
      } else {
        $("updated").textContent = new Date().toLocaleTimeString();
      }
      schedule(POLL_MS);
    }, function () {
      if (!lostContact) { problem("Lost contact with pa-bridge. Retrying every few seconds."); pollProblem = true; }
      lostContact = true;
      schedule(POLL_MS * 2);
    });
  }

  // ---- submit PA --------------------------------------------------------------------------
  function submit(btn) {
    var key = btn.getAttribute("data-key");
    if (pending[key]) { return; }
    var claimId = btn.getAttribute("data-claim");
    var index = parseInt(btn.getAttribute("data-index"), 10) || 0;
    var rx = btn.getAttribute("data-rx");
    pending[key] = true;
    delete rowErrors[key];
    if (!pollProblem) { problem(""); }
    btn.setAttribute("aria-disabled", "true");
    btn.firstChild.textContent = "Submitting…";
    say("Submitting the PA" + (rx ? " for Rx " + rx : "") + "…");
    api("POST", "/v1/claims/" + encodeURIComponent(claimId) + "/pa", { transaction: index }).then(function (r) {
      delete pending[key];
      if (r.ok && r.data && r.data.pa_id) {
        var pa = r.data;
        var href = paHref(pa);
        say((r.status === 201 ? "PA " + pa.pa_id + " created" : "This claim already has PA " + pa.pa_id) +
            (rx ? " for Rx " + rx : "") +
            (href ? ". Opening it in a new tab." : ". PA started, link on its way."));
        if (href) { window.open(href, "_blank", "noopener"); }
        lastPayload = null;
        poll(); // show it now, and move focus to its link
        window.setTimeout(function () {
          var link = document.querySelector('#claims-body tr[data-key="' + CSS.escape(key) + '"] a');
          if (link) { link.focus(); }
        }, 400);
        return;
      }
      if (r.status === 401) { showTokenForm(true); }
      rowErrors[key] = plainError(r);
      problem("The PA" + (rx ? " for Rx " + rx : "") + " was not submitted. " + rowErrors[key]);
      pollProblem = r.status === 401;
      lastPayload = null;
      poll();
    }, function () {
      delete pending[key];
      rowErrors[key] = "pa-bridge could not be reached. Try again.";
      problem("The PA" + (rx ? " for Rx " + rx : "") + " was not submitted: pa-bridge could not be reached.");
      pollProblem = false;
      lastPayload = null;
      poll();
    });
  }

  function init() {
    takeTokenFromUrl();
    $("claims-body").addEventListener("click", function (ev) {
      var btn = ev.target.closest("button[data-claim]");
      if (btn) { submit(btn); }
    });
    $("token-form").addEventListener("submit", function (ev) {
      ev.preventDefault();
      var v = $("token-input").value.trim();
      if (!v) { return; }
      sessionStorage.setItem(TOKEN_KEY, v);
      $("token-input").value = "";
      problem("");
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
