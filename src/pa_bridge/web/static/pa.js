/* pa-bridge console, a PA's page (/console/pa/{id}): reads /v1/console/pa/{id} and
 * refreshes every 5 s; the pharmacist can acknowledge the PA here. */
(function () {
  "use strict";

  var C = window.PaConsole;
  var $ = C.$, el = C.el;
  var POLL_MS = 5000;
  var paId = decodeURIComponent(window.location.pathname.replace(/^\/console\/pa\//, "").replace(/\/$/, ""));
  var lastPayload = null;
  var timer = null;
  var acking = false;
  var pollProblem = false;

  var groupWords = {}; // group key -> its words ("denied"), from the answer
  var lastPa = null;

  function schedule(ms) {
    if (timer !== null) { window.clearTimeout(timer); }
    timer = window.setTimeout(load, ms);
  }

  var HISTORY_SOURCES = {
    callback: "the service", submit: "submit", reversal: "reversal",
    reconcile: "the service (read back: its callback was missed)", expiring: "approval ending"
  };

  function fact(dl, term, value) {
    if (value === null || value === undefined || value === "") { return; }
    dl.appendChild(el("dt", { text: term }));
    dl.appendChild(el("dd", {}, [typeof value === "string" ? value : value]));
  }

  function render(d) {
    var pa = d.pa;
    lastPa = pa;
    groupWords = pa.groups || {};
    if (pa.pa_id !== paId) {
      // opened by an id it had before (the provisional id a submit answered): the
      // address says the id it has now, so a bookmark made now is the lasting one
      paId = pa.pa_id;
      history.replaceState(null, "", "/console/pa/" + encodeURIComponent(paId) + window.location.search + window.location.hash);
    }
    document.title = "PA " + pa.pa_id + " - pa-bridge";
    var title = $("pa-title");
    C.clear(title);
    title.appendChild(document.createTextNode("PA "));
    title.appendChild(C.ident(pa.pa_id));
    if (pa.rx_number) { title.appendChild(document.createTextNode(" for Rx ")); title.appendChild(C.ident(pa.rx_number)); }
    C.clear($("pa-badge"));
    $("pa-badge").appendChild(C.badge(pa.tone, pa.label));
    $("pa-meaning").textContent = pa.meaning + (pa.workflow_status ? " (service status: " + pa.workflow_status + (pa.plan_outcome ? ", " + pa.plan_outcome : "") + ")" : "");
    $("pa-next").textContent = pa.next_step;
    var notes = $("pa-notes");
    C.clear(notes);
    (pa.notes || []).forEach(function (n) { notes.appendChild(el("span", { className: "note", text: n })); });
    notes.hidden = !(pa.notes || []).length;
    var exp = $("pa-expires");
    C.clear(exp);
    exp.hidden = !pa.expiration_date;
    if (pa.expiration_date) {
      exp.appendChild(el("strong", { text: "Approved until " }));
      exp.appendChild(C.dateOf(pa.expiration_date));
      if (pa.effective_date) { exp.appendChild(document.createTextNode(" (from ")); exp.appendChild(C.dateOf(pa.effective_date)); exp.appendChild(document.createTextNode(")")); }
    }

    // a renewal PA and the PA it renews, each linked to the other's page
    var ren = $("pa-renewal");
    C.clear(ren);
    ren.hidden = !pa.renewal_of && !pa.renewed_by;
    if (pa.renewal_of) {
      ren.appendChild(el("strong", { text: "Renews PA " }));
      ren.appendChild(el("a", { href: "/console/pa/" + encodeURIComponent(pa.renewal_of), className: "mono", id: "renewal-of", text: pa.renewal_of }));
      ren.appendChild(document.createTextNode(". "));
    }
    if (pa.renewed_by) {
      ren.appendChild(el("strong", { text: "Renewed by PA " }));
      ren.appendChild(el("a", { href: "/console/pa/" + encodeURIComponent(pa.renewed_by), className: "mono", id: "renewed-by", text: pa.renewed_by }));
      ren.appendChild(document.createTextNode("."));
    }
    if (pa.gone) {
      $("pa-meaning").textContent += " The service no longer returns this PA (no access left): it is effectively deleted.";
    }

    var ack = $("pa-ack");
    C.clear(ack);
    var a = pa.acknowledged;
    var onList = pa.attention && !(a && a.attention === pa.attention);
    if (onList) {
      ack.appendChild(document.createTextNode("On the worklist (" + (groupWords[pa.attention] || pa.attention) + "). "));
      ack.appendChild(el("button", { type: "button", id: "ack-button", "aria-disabled": acking ? "true" : null },
        [acking ? "Acknowledging…" : "Acknowledge", el("span", { className: "sr-only", text: " PA " + pa.pa_id })]));
    } else if (a) {
      ack.appendChild(document.createTextNode("Acknowledged by " + a.by + " at "));
      ack.appendChild(C.timeOf(a.at));
      ack.appendChild(document.createTextNode(": not on the worklist."));
    } else {
      ack.textContent = "Nothing to do on the worklist for this PA now.";
    }

    var links = $("pa-links");
    C.clear(links);
    links.appendChild(C.paLink(pa, pa.rx_number));
    // every other link, named for what it opens (which PA, its page or PDF, token or not)
    (pa.other_links || []).forEach(function (l) {
      links.appendChild(el("a", { href: l.href, target: "_blank", rel: "noopener noreferrer", text: l.label }));
    });

    var dl = $("claim");
    C.clear(dl);
    var c = d.claim;
    $("no-claim").hidden = !!c;
    if (c) {
      fact(dl, "Rx number", c.rx_number ? C.ident(c.rx_number) : (c.purged ? "(purged after the retention period)" : "-"));
      fact(dl, "Drug", pa.drug_name || "name not known yet (the service sends it with its callbacks)");
      fact(dl, "Product id (NDC)", c.product_id ? C.ident(c.product_id, "mono") : "-");
      fact(dl, "Received", C.timeOf(c.received_at));
      fact(dl, "Reject codes", (c.reject_codes || []).join(", ") || "-");
      if (c.message) {
        var msg = el("span", {}, [c.message]);
        if (c.message_source === "fallback") { msg.appendChild(el("span", { className: "note fallback", text: C.fallbackNote(c.fallback_reason) })); }
        fact(dl, "Message shown", msg);
      }
      fact(dl, "Plan (BIN / PCN / group)", [c.bin, c.pcn, c.group_id].map(function (x) { return x || "-"; }).join(" / "));
      fact(dl, "Claim id", el("span", { className: "mono", text: c.claim_id + (c.transaction_index ? " (transaction " + (c.transaction_index + 1) + ")" : "") }));
    }

    var ev = $("events");
    C.clear(ev);
    $("no-events").hidden = d.events.length > 0;
    d.events.forEach(function (e) {
      var word = e.type === "DELETE" ? "Deleted" : (/FAX/.test(e.type || "") ? "Fax to the plan failed" : e.type);
      ev.appendChild(el("li", {}, [C.badge(e.type === "DELETE" || /FAX/.test(e.type || "") ? "bad" : "info", word), " ", C.timeOf(e.time)]));
    });

    var hist = $("history");
    C.clear(hist);
    d.history.forEach(function (h) {
      hist.appendChild(el("tr", {}, [
        el("th", { scope: "row", "data-label": "Received" }, [C.timeOf(h.received_at)]),
        el("td", { "data-label": "From", text: HISTORY_SOURCES[h.source] || h.source }),
        el("td", { "data-label": "Status", text: h.workflow_status || "-" }),
        el("td", { "data-label": "Outcome", text: h.plan_outcome || "-" }),
        el("td", { "data-label": "Events", text: (h.events || []).map(function (e) { return e.type; }).join(", ") || "-" }),
        el("td", { "data-label": "Note", text: h.note || "-" })
      ]));
    });

    var acks = $("acks");
    C.clear(acks);
    $("no-acks").hidden = d.acknowledgements.length > 0;
    d.acknowledgements.forEach(function (x) {
      acks.appendChild(el("li", {}, ["By " + x.by + " at ", C.timeOf(x.at), x.attention ? " (" + (groupWords[x.attention] || x.attention) + ")" : ""]));
    });
    $("loading").hidden = true;
    $("pa").hidden = false;
  }

  function load() {
    timer = null;
    C.api("GET", "/v1/console/pa/" + encodeURIComponent(paId), undefined, { background: true }).then(function (r) {
      if (r.status === 401) {
        $("token-form").hidden = false;
        problem(C.token() ? "The intake token was not accepted. Enter the right one below." : C.PLAIN.unauthorized);
        $("loading").textContent = "Sign in to see this PA.";
        return;
      }
      if (!r.ok || !r.data) {
        C.problem((r.status === 404 ? "" : "This PA could not be loaded. ") + C.plainError(r));
        pollProblem = true;
        $("loading").textContent = r.status === 404 ? "No PA " + paId + " here." : "This PA could not be loaded.";
        if (r.status !== 404) { schedule(POLL_MS); }
        return;
      }
      if (pollProblem) { C.problem(""); pollProblem = false; }
      $("token-form").hidden = true;
      if (r.text !== lastPayload) { lastPayload = r.text; render(r.data); }
      $("updated").textContent = new Date().toLocaleTimeString();
      schedule(POLL_MS);
    }, function () {
      C.problem("Lost contact with pa-bridge. Retrying every few seconds.");
      pollProblem = true;
      $("loading").textContent = "This PA could not be loaded: pa-bridge could not be reached.";
      schedule(POLL_MS);
    });
  }

  function problem(text) { C.problem(text); pollProblem = true; }

  function acknowledge() {
    if (acking) { return; }
    acking = true;
    lastPayload = null;
    var btn = $("ack-button");
    if (btn) { btn.setAttribute("aria-disabled", "true"); btn.firstChild.textContent = "Acknowledging…"; }
    // what the pharmacist saw is what is acknowledged: news after it keeps it listed
    var seen = lastPa ? lastPa.cursor : null;
    C.api("POST", "/v1/pa/" + encodeURIComponent(paId) + "/acknowledge", seen ? { cursor: seen } : undefined).then(function (r) {
      acking = false;
      if (r.ok) {
        C.problem("");
        C.say("PA " + paId + " acknowledged: it leaves the worklist.", { hold: 4000, force: true });
        schedule(0);
        return;
      }
      C.problem("PA " + paId + " was not acknowledged. " + C.plainError(r));
      schedule(0);
    }, function () {
      acking = false;
      C.problem("PA " + paId + " was not acknowledged: pa-bridge could not be reached.");
      schedule(0);
    });
  }

  function init() {
    C.takeTokenFromUrl();
    document.addEventListener("click", function (ev) {
      if (ev.target.closest && ev.target.closest("#ack-button")) { acknowledge(); }
    });
    C.onTokenForm(function () {
      C.problem("");
      pollProblem = false;
      schedule(0);
    });
    load();
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", init);
  } else {
    init();
  }
})();
