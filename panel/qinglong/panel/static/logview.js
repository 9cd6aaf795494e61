// The run page's live log (docs/panel.md "Run detail"): an EventSource on the log stream,
// whose event ids are the log's byte offsets (the browser resends the last as
// Last-Event-ID on reconnect); lines appended in requestAnimationFrame batches; at most
// MAX_LINES lines in the DOM, older ones replaced by one "earlier…" line (the download link
// has the whole log). Colours by ansi_up with classes; every line's text is escaped by
// ansi_up before it becomes HTML, so task output never runs as markup.
import { AnsiUp } from "./vendor/ansi_up.js";

const MAX_LINES = 5000;
// Lines turned into elements per animation frame: a burst of output (tens of thousands of
// lines in one stream message) is spread over frames so no frame blocks the page long.
const PER_FRAME = 500;

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
      line.className = "line";
      line.innerHTML = ansi.ansi_to_html(text);
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
    for (const part of parts) pending.push(part);
    schedule();
  }

  const statuses = JSON.parse(box.dataset.statuses || "{}");
  const statusName = (status) => statuses[status] || status;
  const source = new EventSource(box.dataset.stream);
  source.onmessage = (event) => push(JSON.parse(event.data));
  source.addEventListener("end", (event) => {
    source.close();
    if (partial) { pending.push(partial); partial = ""; }
    const done = document.createElement("span");
    done.className = "ended";
    const final = JSON.parse(event.data);
    done.textContent = box.dataset.ended + " (" + statusName(final) + ")";
    finish = () => {
      box.appendChild(done);
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
    if (partial) { pending.push(partial); partial = ""; }
    push((box.dataset.gap || "[{n}]").replace("{n}", event.data) + "\n");
  });
  source.addEventListener("unavailable", () => source.close());
}

const box = document.getElementById("log");
if (box) start(box);
