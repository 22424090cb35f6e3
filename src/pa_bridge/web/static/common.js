/* pa-bridge console, shared by the worklist page and a PA's page: the token, API
 * calls, errors in plain words, the status and problem lines, small DOM helpers.
 * No framework, no network access beyond this pa-bridge. */
(function () {
  "use strict";

  var TOKEN_KEY = "pa-bridge.intake-token";

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
  function setToken(v) { sessionStorage.setItem(TOKEN_KEY, v); }

  // opts.background: the page asks on its own (polling), not the person: it does not
  // keep a signed-in session alive (the idle time-out counts what people do).
  function api(method, path, body, opts) {
    var headers = { "Accept": "application/json" };
    var t = token();
    if (t && !person) { headers["Authorization"] = "Bearer " + t; }
    if (opts && opts.background) { headers["X-PA-Bridge-Background"] = "1"; }
    var init = { method: method, headers: headers, cache: "no-store", credentials: "same-origin" };
    if (body !== undefined) {
      headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    return fetch(path, init).then(function (resp) {
      return resp.text().then(function (text) {
        var data = null;
        try { data = text ? JSON.parse(text) : null; } catch (e) { data = null; }
        var code = resp.status === 401 && data && data.error && data.error.code;
        if (code === "sign_in_required" || code === "session_ended") { toSignIn(data.error.detail); }
        return { status: resp.status, ok: resp.ok, data: data, text: text };
      });
    });
  }

  // ---- a person signed in (a session cookie; issue 29) ----------------------------------
  var person = null; // {name, display_name} once /console/session answers
  var lastActivity = 0;

  function toSignIn(detail) {
    var why = detail && detail.why === "idle" ? "&ended=idle" : "";
    window.location.assign("/console/sign-in?next=" + encodeURIComponent(window.location.pathname + window.location.search) + why);
  }

  function signOut() {
    fetch("/console/sign-out", { method: "POST", credentials: "same-origin", cache: "no-store",
      headers: { "Content-Type": "application/json" }, body: "{}" })
      .then(function () { window.location.assign("/console/sign-in"); });
  }

  // Who is signed in, shown in the page's header with a sign-out button; the person's
  // keys and clicks keep the session alive (at most one request a minute).
  function showPerson() {
    var quiet = { credentials: "same-origin", cache: "no-store", headers: { "X-PA-Bridge-Background": "1" } };
    fetch("/console/sign-in/options", quiet)
      .then(function (r) { return r.status === 200 ? r.json() : null; })
      .then(function (opts) {
        // nobody signs in here (loopback, no one added): nothing to show
        return opts && opts.required ? fetch("/console/session", quiet) : null;
      })
      .then(function (r) { return r && r.status === 200 ? r.json() : null; })
      .then(function (s) {
        if (!s || !s.signed_in) { return; }
        person = s;
        var top = document.querySelector("header.top");
        if (!top || $("who")) { return; }
        var btn = el("button", { type: "button", id: "sign-out", className: "secondary" }, ["Sign out"]);
        btn.addEventListener("click", signOut);
        top.appendChild(el("p", { id: "who", className: "who" }, ["Signed in as ", el("strong", { text: s.display_name }), " ", btn]));
        ["keydown", "pointerdown"].forEach(function (name) {
          document.addEventListener(name, function () {
            var now = Date.now();
            if (now - lastActivity < 60000) { return; }
            lastActivity = now;
            fetch("/console/session", { credentials: "same-origin", cache: "no-store" }).then(function (r) {
              if (r.status === 401) { r.json().then(function (d) { toSignIn(d && d.error && d.error.detail); }, function () { toSignIn(); }); }
            });
          }, true);
        });
      }, function () { /* the pages say when pa-bridge cannot be reached */ });
  }
  if (document.readyState === "loading") { document.addEventListener("DOMContentLoaded", showPerson); } else { showPerson(); }

  // ---- errors in plain words ---------------------------------------------------------
  var PLAIN = {
    unauthorized: "pa-bridge needs the intake token. Enter it below.",
    unknown_claim: "pa-bridge does not know this claim any more.",
    unknown_pa: "pa-bridge does not know this PA.",
    not_pa_eligible: "This claim was not rejected for a reason that allows a PA.",
    claim_purged: "This claim is older than the retention period. Send the claim again from the dispensing system.",
    storage_unavailable: "pa-bridge could not save to its database. Try again in a moment; if it keeps happening, call IT.",
    database_unavailable: "pa-bridge could not use its database. Try again in a moment; if it keeps happening, call IT.",
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

  // Why the outcomes service's message is missing, from what the stored answer says
  // (`fallback_reason`: "timeout", "refused", "unreadable", "http_500", {kind, status}).
  // Without a reason (older answers, or a backend that does not record it yet) the
  // words stay neutral.
  function fallbackNote(reason) {
    var base = "The payer's own message: ";
    var kind = reason, status = null;
    if (reason && typeof reason === "object") { kind = reason.kind || reason.reason; status = reason.status || reason.http_status; }
    kind = kind === undefined || kind === null ? "" : String(kind).toLowerCase();
    var m = /^(?:http[_ ]?)?(\d{3})$/.exec(kind);
    if (m) { status = m[1]; kind = "http"; }
    if (kind === "timeout") { return base + "the outcomes service did not answer in time."; }
    if (kind === "refused" || kind === "unreachable" || kind === "connection") { return base + "the outcomes service could not be reached."; }
    if (kind === "unreadable" || kind === "invalid") { return base + "the outcomes service's answer could not be read."; }
    if (kind === "http" || kind === "http_status" || status) {
      return base + "the outcomes service answered with an error" + (status ? " (HTTP " + status + ")" : "") + ".";
    }
    return base + "the outcomes service's replacement message was not available.";
  }

  // ---- status line and problem box: never both at once -------------------------------
  // The green line says what just happened; the red box what is wrong now. While the
  // box shows, the green line is empty, so they never contradict each other. A message
  // given `hold` ms stays at least that long: announcements arriving meanwhile wait.
  var sayTimer = null, holdUntil = 0, deferred = null, deferTimer = null;

  function problemShown() { return !$("problem").hidden; }

  function say(text, opts) {
    opts = opts || {};
    var s = $("status");
    if (problemShown()) { s.textContent = ""; return; }
    var now = Date.now();
    if (!opts.force && now < holdUntil) {
      deferred = text;
      if (deferTimer === null) {
        deferTimer = window.setTimeout(function () {
          deferTimer = null;
          var t = deferred; deferred = null;
          if (t) { say(t); }
        }, holdUntil - now + 10);
      }
      return;
    }
    holdUntil = opts.hold ? now + opts.hold : 0;
    if (sayTimer !== null) { window.clearTimeout(sayTimer); }
    s.textContent = "";
    // A fresh text node so screen readers announce a repeat of the same words.
    sayTimer = window.setTimeout(function () {
      sayTimer = null;
      if (!problemShown()) { s.textContent = text; }
    }, 50);
  }

  function problem(text) {
    var p = $("problem");
    if (text) {
      if (sayTimer !== null) { window.clearTimeout(sayTimer); sayTimer = null; }
      if (deferTimer !== null) { window.clearTimeout(deferTimer); deferTimer = null; }
      deferred = null; holdUntil = 0;
      $("status").textContent = "";
      p.textContent = text;
      p.hidden = false;
    } else {
      p.textContent = "";
      p.hidden = true;
    }
  }

  // ---- small DOM helpers -------------------------------------------------------------
  function el(tag, attrs, children) {
    var node = document.createElement(tag);
    if (attrs) {
      Object.keys(attrs).forEach(function (k) {
        if (attrs[k] === null || attrs[k] === undefined) { return; }
        if (k === "text") { node.textContent = attrs[k]; }
        else if (k === "className") { node.className = attrs[k]; }
        else { node.setAttribute(k, attrs[k]); }
      });
    }
    (children || []).forEach(function (c) {
      if (c !== null && c !== undefined && c !== false) {
        node.appendChild(typeof c === "string" ? document.createTextNode(c) : c);
      }
    });
    return node;
  }

  function clear(node) { while (node.firstChild) { node.removeChild(node.firstChild); } }

  function timeOf(iso) {
    if (!iso) { return el("span", { text: "-" }); }
    var d = new Date(iso);
    if (isNaN(d.getTime())) { return el("span", { text: iso }); }
    var today = new Date();
    var sameDay = d.toDateString() === today.toDateString();
    var text = sameDay
      ? d.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" })
      : d.toLocaleDateString([], { month: "short", day: "numeric" }) + " " + d.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });
    return el("time", { datetime: iso, text: text });
  }

  function dateOf(iso) {
    if (!iso) { return null; }
    var d = new Date(iso);
    if (isNaN(d.getTime())) { return el("span", { text: iso }); }
    return el("time", { datetime: iso, text: d.toLocaleDateString([], { year: "numeric", month: "short", day: "numeric" }) });
  }

  function paHref(pa) {
    if (!pa.url) { return null; }
    // The redirect endpoint needs the token in a header a link cannot send; with a token
    // configured, link the PA's own URL (the same one /v1/pa answers) instead.
    // A signed-in person opens it through pa-bridge, which tells the service who it is.
    return token() && !person ? pa.url : pa.open_url;
  }

  function paLink(pa, rx) {
    var href = paHref(pa);
    if (!href) { return el("span", { className: "note", text: "PA started, link on its way" }); }
    return el("a", {
      href: href, target: "_blank", rel: "noopener noreferrer", "data-pa": pa.pa_id, "data-fkey": "open:" + pa.pa_id
    }, ["Open PA ", ident(pa.pa_id), el("span", { className: "sr-only", text: (rx ? " for Rx " + rx : "") + " at the service (opens in a new tab)" })]);
  }

  // An identifier (Rx number, NDC, PA id): never broken across lines (console.css).
  function ident(text, extra) { return el("span", { className: "ident" + (extra ? " " + extra : ""), text: text }); }

  function badge(tone, text) { return el("span", { className: "badge " + (tone || "info"), text: text }); }

  // The "Intake token" form: keep the typed token for this tab, empty the field, then.
  function onTokenForm(then) {
    $("token-form").addEventListener("submit", function (ev) {
      ev.preventDefault();
      var v = $("token-input").value.trim();
      if (!v) { return; }
      setToken(v);
      $("token-input").value = "";
      then();
    });
  }

  window.PaConsole = {
    $: $, takeTokenFromUrl: takeTokenFromUrl, token: token, setToken: setToken, api: api,
    PLAIN: PLAIN, plainError: plainError, fallbackNote: fallbackNote, say: say, problem: problem,
    el: el, clear: clear, timeOf: timeOf, dateOf: dateOf, paHref: paHref, paLink: paLink, badge: badge, ident: ident,
    onTokenForm: onTokenForm, person: function () { return person; }, signOut: signOut
  };
})();
