// The node table sorts (click a heading) and filters (words, severity); the export lines copy.
// Everything the page shows is in it already: this only hides, orders and copies.
"use strict";
(function () {
  const SEVERITY = { "": 0, pass: 1, warn: 2, fail: 3 };
  const table = document.getElementById("node-table");
  if (table) {
    nodeTable(table);
  }
  const copy = document.getElementById("copy-exports");
  if (copy) {
    copy.addEventListener("click", copyExports);
  }

  function nodeTable(table) {
    const body = table.tBodies[0];
    const rows = Array.from(body.rows);              // in the report's order, for ties
    const text = new Map(rows.map((row) => [row, row.textContent.toLowerCase()]));
    const input = document.getElementById("node-filter");
    const severity = document.getElementById("severity-filter");
    const count = document.getElementById("node-count");
    const more = document.getElementById("show-all");
    const most = Number(table.dataset.shown);
    let everyMatch = false;

    // The rows that match, in the table's order, up to `most` of them unless all were asked for.
    function filter() {
      const words = input.value.toLowerCase().split(/\s+/).filter(Boolean);
      const wanted = severity.value;
      const order = Array.from(body.rows);
      let matching = 0;
      for (const row of order) {
        const match = (!wanted || row.dataset.severity === wanted) && words.every((w) => text.get(row).includes(w));
        matching += match ? 1 : 0;
        row.hidden = !match || (!everyMatch && matching > most);
      }
      const shown = everyMatch ? matching : Math.min(matching, most);
      count.textContent = shown + " of " + rows.length + " shown" + (shown < matching ? ", " + matching + " match" : "");
      more.hidden = shown === matching;
    }

    function sortBy(th) {
      const column = th.cellIndex;
      const kind = th.dataset.kind;
      const order = th.getAttribute("aria-sort") === "ascending" ? -1 : 1;
      for (const other of th.parentNode.cells) {
        other.removeAttribute("aria-sort");
      }
      th.setAttribute("aria-sort", order === 1 ? "ascending" : "descending");
      const key = (row) => kind === "number" ? Number(row.cells[column].textContent)
        : kind === "severity" ? SEVERITY[row.dataset.severity] : row.cells[column].textContent.toLowerCase();
      const keyed = rows.map((row, i) => [key(row), i, row]);
      keyed.sort((a, b) => (a[0] < b[0] ? -order : a[0] > b[0] ? order : a[1] - b[1]));
      const ordered = document.createDocumentFragment();
      keyed.forEach((k) => ordered.appendChild(k[2]));
      body.appendChild(ordered);
      filter();   // the first rows in the new order are the ones shown
    }

    const refilter = () => { everyMatch = false; filter(); };
    input.addEventListener("input", refilter);
    severity.addEventListener("change", refilter);
    more.addEventListener("click", () => { everyMatch = true; filter(); });
    table.tHead.addEventListener("click", (event) => {
      const th = event.target.closest("th");
      if (th) {
        sortBy(th);
      }
    });
  }

  function copyExports() {
    const text = document.getElementById("export-lines").textContent;
    const status = document.getElementById("copy-status");
    const said = (ok) => { status.textContent = ok ? "copied" : "select the lines and copy them"; };
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(text).then(() => said(true), () => said(selectAndCopy(text)));
    } else {
      said(selectAndCopy(text));
    }
  }

  // A page opened from a file may be refused the clipboard API: copy through a selection.
  function selectAndCopy(text) {
    const area = document.createElement("textarea");
    area.value = text;
    document.body.appendChild(area);
    area.select();
    const ok = document.execCommand("copy");
    area.remove();
    return ok;
  }
})();
