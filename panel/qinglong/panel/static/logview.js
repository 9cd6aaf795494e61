// The run page's live log (docs/panel.md "Run detail"): an EventSource on the log stream,
// whose event ids are the log's byte offsets (the browser resends the last as
// Last-Event-ID on reconnect); lines appended in requestAnimationFrame batches; at most
// MAX_LINES lines in the DOM, older ones replaced by one "earlier…" line (the download link
// has the whole log). Colours by ansi_up with classes; every line's text is escaped by
// ansi_up before it becomes HTML, so task output never runs as markup. Following a run (no
// data-pinned), an "attempt" event (a retry's log begins) adds a divider line naming the
// attempt and that attempt's link; with data-pinned the stream is one attempt's log. A
// "run" event (the run's status or attempts changed) updates the status and the attempts'
// facts without a reload.
import { AnsiUp } from "./vendor/ansi_up.js";

const MAX_LINES = 5000;
// Lines turned into elements per animation frame: a burst of output (tens of thousands of
// lines in one stream message) is spread over frames so no frame blocks the page long.
const PER_FRAME = 500;

// A line as a terminal leaves it (docs/panel.md "Run detail"): each "\r" (a progress bar
// redrawing its line) returns to the line's start and what follows overwrites what was
// there, so "10%\r50%\r100%" shows "100%" and "abc\rX" shows "Xbc"; "\r\n" ends a line
// as "\n" does. A line with colour codes keeps the last of its parts that shows anything
// (overwriting by characters would cut a code in two).
export function settle(line) {
  if (!line.includes("\r")) return line;
  const parts = line.split("\r");
  if (line.includes("\x1b")) {
    for (let i = parts.length - 1; i >= 0; i--) {
      if (parts[i].replace(/\x1b\[[0-9;?]*[A-Za-z]/g, "") !== "") return parts[i];
    }
    return parts[parts.length - 1];
  }
  let shown = "";
  for (const part of parts) shown = part + shown.slice(part.length);
  return shown;
}

function start(box) {
  const ansi = new AnsiUp();
  ansi.use_classes = true;
  ansi.escape_html = true;
  let pending = [];
  let partial = "";
  let scheduled = false;
  let dropped = false;
  let earlier = null;
  let count = 0;  // .line elements in the box
  let finish = null;  // what the stream's end does once every pending line is shown

  function flush() {
    scheduled = false;
    if (pending.length > MAX_LINES) {
      // only the newest MAX_LINES can stay: the older ones are never made into elements
      pending = pending.slice(pending.length - MAX_LINES);
      dropped = true;
    }
    const batch = pending.length > PER_FRAME ? pending.splice(0, PER_FRAME) : pending;
    if (batch === pending) pending = [];
    const stick = box.scrollTop + box.clientHeight >= box.scrollHeight - 4;
    const frag = document.createDocumentFragment();
    for (const text of batch) {
      const line = document.createElement("span");
      if (typeof text === "string") {
        line.className = "line";
        line.innerHTML = ansi.ansi_to_html(text);
      } else {  // a retry's divider: text only
        line.className = "line attempt";
        line.textContent = text.divider;
      }
      frag.appendChild(line);
    }
    box.appendChild(frag);
    count += batch.length;
    if (count > MAX_LINES) {
      const first = box.querySelector(".line");
      const lines = box.querySelectorAll(".line");
      const range = document.createRange();
      range.setStartBefore(first);
      range.setEndAfter(lines[count - MAX_LINES - 1]);
      range.deleteContents();
      count = MAX_LINES;
      dropped = true;
    }
    if (dropped && !earlier) {
      earlier = document.createElement("span");
      earlier.className = "earlier";
      earlier.textContent = box.dataset.earlier;
      box.prepend(earlier);
    }
    if (stick) box.scrollTop = box.scrollHeight;
    if (pending.length) schedule();
    else if (finish) { finish(); finish = null; }
  }

  function schedule() {
    if (!scheduled) {
      scheduled = true;
      requestAnimationFrame(flush);
    }
  }

  function push(text) {
    const parts = (partial + text).split("\n");
    partial = parts.pop();
    const cr = partial.lastIndexOf("\r");  // what a terminal shows so far, cursor at 0
    if (cr > 0) partial = settle(partial.slice(0, cr)) + partial.slice(cr);
    for (const part of parts) pending.push(settle(part));
    schedule();
  }

  const statuses = JSON.parse(box.dataset.statuses || "{}");
  const statusName = (status) => statuses[status] || status;
  const source = new EventSource(box.dataset.stream);
  source.onmessage = (event) => push(JSON.parse(event.data));
  source.addEventListener("end", (event) => {
    source.close();
    if (partial) { pending.push(settle(partial)); partial = ""; }
    const done = document.createElement("span");
    done.className = "ended";
    const final = JSON.parse(event.data);
    const pinned = box.dataset.pinned;  // one attempt's log: the run may go on
    done.textContent = pinned ? box.dataset.ended
      : box.dataset.ended + " (" + statusName(final) + ")";
    finish = () => {
      box.appendChild(done);
      if (pinned) { box.dataset.done = "true"; return; }
      const stop = document.getElementById("run-stop");  // nothing left to stop
      if (stop) stop.remove();
      const status = document.getElementById("run-status");
      if (status) {
        status.textContent = statusName(final);
        status.className = "status status-" + final;
      }
      box.dataset.done = "true";  // after the last line is in the page
    };
    schedule();
  });
  source.addEventListener("gap", (event) => {
    if (partial) { pending.push(settle(partial)); partial = ""; }
    push((box.dataset.gap || "[{n}]").replace("{n}", event.data) + "\n");
  });
  source.addEventListener("attempt", (event) => {
    if (partial) { pending.push(settle(partial)); partial = ""; }
    const n = String(JSON.parse(event.data));
    pending.push({ divider: (box.dataset.divider || "{n}").replace("{n}", n) });
    schedule();
    box.dataset.attempt = n;
    const list = document.getElementById("run-attempts");
    // every attempt up to n gets its link (the page may have opened before attempt 1)
    for (let k = 1; list && k <= Number(n); k++) {
      if (list.querySelector('a[data-attempt="' + k + '"]')) continue;
      const item = document.createElement("li");
      const link = document.createElement("a");
      link.href = list.dataset.href.replace("{n}", String(k));
      link.dataset.attempt = String(k);
      link.textContent = list.dataset.label.replace("{n}", String(k));
      item.appendChild(link);
      list.appendChild(item);
    }
  });
  // run-facts: the run's status or attempts changed; the server sends the status and the
  // attempts' facts as the page's own HTML (rendered and escaped by its templates)
  source.addEventListener("run", (event) => {
    const run = JSON.parse(event.data);
    const facts = document.getElementById("run-attempt-facts");
    if (facts) {
      facts.innerHTML = run.html;
      document.dispatchEvent(new CustomEvent("ql3:times", { detail: facts }));
    }
    const status = document.getElementById("run-status");
    if (status && run.status) {
      status.textContent = statusName(run.status);
      status.className = "status status-" + run.status;
      status.dataset.status = run.status;
    }
    if (["succeeded", "failed", "cancelled", "timed_out", "lost"].includes(run.status)) {
      const stop = document.getElementById("run-stop");
      if (stop) stop.remove();
    }
  });
  source.addEventListener("unavailable", () => source.close());
}

const box = document.getElementById("log");
if (box) start(box);
