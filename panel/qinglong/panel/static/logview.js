// The run page's live log (docs/panel.md "Run detail"): an EventSource on the log stream,
// whose event ids are the log's byte offsets (the browser resends the last as
// Last-Event-ID on reconnect); lines appended in requestAnimationFrame batches; at most
// MAX_LINES lines in the DOM, older ones replaced by one "earlier…" line (the download link
// has the whole log). Colours by ansi_up with classes; every line's text is escaped by
// ansi_up before it becomes HTML, so task output never runs as markup.
import { AnsiUp } from "./vendor/ansi_up.js";

const MAX_LINES = 5000;

function start(box) {
  const ansi = new AnsiUp();
  ansi.use_classes = true;
  ansi.escape_html = true;
  let pending = [];
  let partial = "";
  let scheduled = false;
  let dropped = false;
  let earlier = null;

  function flush() {
    scheduled = false;
    const stick = box.scrollTop + box.clientHeight >= box.scrollHeight - 4;
    const frag = document.createDocumentFragment();
    for (const text of pending) {
      const line = document.createElement("span");
      line.className = "line";
      line.innerHTML = ansi.ansi_to_html(text);
      frag.appendChild(line);
    }
    pending = [];
    box.appendChild(frag);
    let count = box.querySelectorAll(".line").length;
    while (count > MAX_LINES) {
      const first = box.querySelector(".line");
      first.remove();
      count -= 1;
      dropped = true;
    }
    if (dropped && !earlier) {
      earlier = document.createElement("span");
      earlier.className = "earlier";
      earlier.textContent = box.dataset.earlier;
      box.prepend(earlier);
    }
    if (stick) box.scrollTop = box.scrollHeight;
  }

  function push(text) {
    const parts = (partial + text).split("\n");
    partial = parts.pop();
    pending.push(...parts);
    if (!scheduled) {
      scheduled = true;
      requestAnimationFrame(flush);
    }
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
    requestAnimationFrame(() => {
      flush();
      box.appendChild(done);
      const stop = document.getElementById("run-stop");  // nothing left to stop
      if (stop) stop.remove();
      const status = document.getElementById("run-status");
      if (status) {
        status.textContent = statusName(final);
        status.className = "status status-" + final;
      }
      box.dataset.done = "true";  // after the last line is in the page
    });
  });
  source.addEventListener("gap", (event) => {
    if (partial) { pending.push(partial); partial = ""; }
    push((box.dataset.gap || "[{n}]").replace("{n}", event.data) + "\n");
  });
  source.addEventListener("unavailable", () => source.close());
}

const box = document.getElementById("log");
if (box) start(box);
