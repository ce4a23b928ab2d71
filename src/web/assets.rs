//! The dashboard's stylesheet and script, compiled into the binary: pages work offline
//! and behind firewalls, with no CDN. The script is optional: without it every page is
//! complete, it only keeps the page current.

/// Served at `/static/style.css`.
pub(super) const STYLE: &str = r#"
:root { --fg: #1d2430; --muted: #5d6675; --line: #d9dee6; --bg: #f6f7f9; --card: #fff;
        --ok: #1f7a4d; --err: #b42318; --warn: #a15c07; --accent: #2f5fb3; --cancel: #7a7f8a; }
* { box-sizing: border-box; }
body { margin: 0; font: 15px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif;
       color: var(--fg); background: var(--bg); }
header { background: #1d2430; color: #fff; padding: .5rem 1rem; display: flex; flex-wrap: wrap;
         align-items: center; gap: .25rem 1rem; }
header .brand { font-weight: 700; margin-right: .5rem; }
header nav { display: flex; flex-wrap: wrap; gap: .25rem .9rem; }
header a { color: #cfd8e8; text-decoration: none; }
header a.here, header a:hover { color: #fff; text-decoration: underline; }
#live { margin-left: auto; font-size: .85rem; padding: .1rem .5rem; border-radius: 1rem;
        background: #33415a; }
#live.ok::before { content: "● "; color: #5fd39a; }
#live.down { background: var(--err); }
main { padding: 1rem; max-width: 80rem; margin: 0 auto; }
h1 { font-size: 1.35rem; margin: .25rem 0 1rem; }
h2 { font-size: 1.1rem; margin: 1.5rem 0 .5rem; }
.banner { background: #fff4d6; color: #5a4300; border: 1px solid #e2c46a; border-radius: .5rem; padding: .6rem .8rem; margin: 0 0 1rem; }
.cards { display: grid; grid-template-columns: repeat(auto-fit, minmax(9rem, 1fr)); gap: .75rem; }
.card { background: var(--card); border: 1px solid var(--line); border-radius: .5rem; padding: .6rem .8rem; }
.card .n { font-size: 1.5rem; font-weight: 600; }
.card .label { color: var(--muted); font-size: .85rem; }
.scroll { overflow-x: auto; background: var(--card); border: 1px solid var(--line); border-radius: .5rem; }
table { border-collapse: collapse; width: 100%; }
th, td { text-align: left; padding: .4rem .6rem; border-bottom: 1px solid var(--line); vertical-align: top; }
th { font-size: .8rem; text-transform: uppercase; letter-spacing: .03em; color: var(--muted); }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
tr:last-child td { border-bottom: none; }
.status { padding: 0 .4rem; border-radius: .3rem; font-size: .85rem; background: #e8ecf2; }
.status.successful { background: #dcf3e6; color: var(--ok); }
.status.exception, .status.failed { background: #fde4e1; color: var(--err); }
.status.picked { background: #e3ebfb; color: var(--accent); }
.muted { color: var(--muted); }
.stale { color: var(--warn); font-weight: 600; }
pre { background: #11161f; color: #e6e9ef; padding: .75rem; border-radius: .4rem; overflow-x: auto;
      white-space: pre-wrap; word-break: break-word; font-size: .85rem; }
form.inline { display: inline; }
button { font: inherit; padding: .3rem .8rem; border-radius: .35rem; border: 1px solid var(--accent);
         background: var(--accent); color: #fff; cursor: pointer; }
button.quiet { background: #fff; color: var(--err); border-color: var(--err); }
.filters { display: flex; flex-wrap: wrap; gap: .5rem; align-items: end; margin-bottom: .75rem; }
.filters label { display: flex; flex-direction: column; font-size: .8rem; color: var(--muted); }
input, select { font: inherit; padding: .25rem .4rem; border: 1px solid var(--line); border-radius: .3rem; }
.chart { background: var(--card); border: 1px solid var(--line); border-radius: .5rem; padding: .5rem; }
.chart svg { width: 100%; height: 9rem; display: block; }
.legend { font-size: .85rem; color: var(--muted); display: flex; gap: 1rem; flex-wrap: wrap; }
.legend i { display: inline-block; width: .7rem; height: .7rem; margin-right: .3rem; border-radius: .15rem; }
.ok-fill { fill: var(--ok); background: var(--ok); }
.err-fill { fill: var(--err); background: var(--err); }
.cancel-fill { fill: var(--cancel); background: var(--cancel); }
.notice { background: #fff6e5; border: 1px solid #f2cf8f; padding: .5rem .75rem; border-radius: .4rem; }
.pager { margin-top: .75rem; display: flex; gap: 1rem; }
dl.fields { display: grid; grid-template-columns: max-content 1fr; gap: .25rem 1rem; margin: 0;
            background: var(--card); border: 1px solid var(--line); border-radius: .5rem; padding: .75rem; }
dl.fields dt { color: var(--muted); }
dl.fields dd { margin: 0; word-break: break-all; }
@media (max-width: 40rem) { main { padding: .5rem; } th, td { padding: .35rem .4rem; } }
"#;

/// Served at `/static/live.js`: re-fetches the page when the server says the queue
/// changed (Server-Sent Events from `/events`), or every few seconds when the server
/// cannot listen, and says so when the server stops or cannot be reached. Selected checkboxes
/// survive a refresh.
pub(super) const SCRIPT: &str = r#"
(function () {
  "use strict";
  var badge = document.getElementById("live");
  var busy = false, again = false, debounce = null, poller = null;
  function say(text, cls) { if (badge) { badge.textContent = text; badge.className = cls; } }
  function refresh() {
    if (busy) { again = true; return; }
    busy = true;
    fetch(location.href, { credentials: "same-origin", headers: { "X-Requested-With": "pgqueuer-live" } })
      .then(function (r) { if (!r.ok && r.status !== 404) { throw new Error("HTTP " + r.status); } return r.text(); })
      .then(function (html) {
        var fresh = new DOMParser().parseFromString(html, "text/html").querySelector("main");
        var main = document.querySelector("main");
        if (fresh && main) {
          var checked = {};
          main.querySelectorAll("input[type=checkbox]:checked").forEach(function (c) { checked[c.name + "=" + c.value] = true; });
          main.replaceWith(fresh);
          fresh.querySelectorAll("input[type=checkbox]").forEach(function (c) { if (checked[c.name + "=" + c.value]) { c.checked = true; } });
        }
        say("live", "ok");
      })
      .catch(function () { say("server unreachable, retrying", "down"); })
      .then(function () { busy = false; if (again) { again = false; refresh(); } });
  }
  function poll(ms) { if (poller) { clearInterval(poller); } poller = setInterval(refresh, ms); }
  if (window.EventSource) {
    var events = new EventSource("/events");
    events.addEventListener("queue-change", function () {
      clearTimeout(debounce); debounce = setTimeout(refresh, 100);
    });
    events.addEventListener("polling", function () { say("polling", "ok"); poll(5000); });
    events.addEventListener("closing", function () {
      events.close(); say("server stopped", "down"); poll(5000);
    });
    events.onopen = function () { say("live", "ok"); refresh(); };
    events.onerror = function () { say("server unreachable, retrying", "down"); };
    poll(30000);
  } else {
    poll(5000);
  }
})();
"#;
