/* Agent Ledger Toolkit: tables that sort, filter and fit, on every page of the generated site.
 *
 * Written for the toolkit (MIT, like the toolkit). Sorting, filtering and paging are
 * DataTables' (datatables.min.js beside this file; name, version and licence in NOTICE.md).
 * Nothing here asks another host for anything.
 *
 * For every table in a page's article:
 * - more than MIN_ROWS rows, one header row, no merged cells, not a field list (Field/Value):
 *   DataTables makes every column sortable (click a header), adds a filter box (rows that
 *   contain every typed word) and, past PAGE_LENGTH rows, pages: the document holds only the
 *   rows of the page shown, so a table of 10,000 rows stays as quick as one of 25;
 * - every table: it sits in a box that scrolls sideways when the table is wider than the
 *   page, with a shadow at the edge that has more (and the browser's scrollbar); its first
 *   column, and the column that decides its order (a header marked data-tk-key), stay in
 *   view while it scrolls; dates and single short words never wrap; a cell of long text
 *   shows its first lines, ends with an ellipsis and shows all of it on hover (title) or
 *   when clicked (a field list's values wrap whole). Only the rows on screen are fitted.
 *
 * Material's instant navigation replaces the page without reloading: document$ emits for
 * each page shown, and the tables of the new page are set up then.
 */
(function () {
  "use strict";

  var MIN_ROWS = 5;        // a table with more rows than this sorts, filters (and pages)
  var PAGE_LENGTH = 25;    // rows per page
  var LENGTHS = [25, 50, 100, 500];
  var SHORT = 30;          // characters: one word this short (an id, a name) never wraps
  var LONG = 80;           // characters: a longer cell is clamped, with its text on hover
  var DATE = /^\d{4}-\d{2}-\d{2}(?:[ T]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?$/;

  function headerTexts(table) {
    var head = table.tHead;
    if (!head || head.rows.length !== 1) return null;
    return Array.prototype.map.call(head.rows[0].cells, function (c) {
      return c.textContent.trim();
    });
  }

  function sortable(table, header) {
    if (!header || header.length === 0) return false;
    if (isFields(header)) return false;
    if (table.tBodies.length !== 1 || table.tFoot) return false;
    var rows = table.tBodies[0].rows;
    if (rows.length <= MIN_ROWS) return false;
    if (table.querySelector("[colspan], [rowspan]")) return false;
    for (var i = 0; i < rows.length; i++) {
      if (rows[i].cells.length !== header.length) return false;
    }
    return true;
  }

  // the columns marked data-tk-key by the toolkit (toolkit/site.py): they decide the order
  function keyColumns(table) {
    var out = [];
    var cells = table.tHead ? table.tHead.rows[0].cells : [];
    for (var i = 1; i < cells.length; i++) {
      if (cells[i].hasAttribute("data-tk-key")) out.push(i);
    }
    return out;
  }

  // Dates no-wrap; long text clamped with its full text as the title (a click or tap shows
  // it all), except in a field list, where the value is what the page is about and wraps
  // whole. Done once per row.
  function fitRow(row, clamp) {
    if (row.tkFit) return;
    row.tkFit = true;
    var cells = row.cells;
    for (var i = 0; i < cells.length; i++) {
      var cell = cells[i];
      var text = cell.textContent.trim();
      if (DATE.test(text) || (text.length <= SHORT && !/\s/.test(text))) {
        cell.classList.add("tk-nowrap");
      } else if (clamp && text.length > LONG) {
        var box = document.createElement("div");
        box.className = "tk-long";
        box.title = text;
        while (cell.firstChild) box.appendChild(cell.firstChild);
        cell.appendChild(box);
      }
    }
  }

  function fitRows(rows, clamp) {
    for (var i = 0; i < rows.length; i++) fitRow(rows[i], clamp !== false);
  }

  function isFields(header) {
    return !!header && header.length === 2 && header[0] === "Field" && header[1] === "Value";
  }

  // The box that scrolls: shadows at the edges that have more, the first column's width for
  // the sticky key column's offset.
  function frame(table) {
    var outer = document.createElement("div");
    outer.className = "tk-table";
    var scroll = document.createElement("div");
    scroll.className = "tk-scroll";
    scroll.tabIndex = 0;  // reachable by keyboard, scrolls with the arrow keys
    table.parentNode.insertBefore(outer, table);
    outer.appendChild(scroll);
    scroll.appendChild(table);
    var update = function () {
      var max = scroll.scrollWidth - scroll.clientWidth;
      outer.classList.toggle("tk-more-left", scroll.scrollLeft > 1);
      outer.classList.toggle("tk-more-right", scroll.scrollLeft < max - 1);
      var first = table.tHead && table.tHead.rows[0] && table.tHead.rows[0].cells[0];
      if (first) table.style.setProperty("--tk-first-width", first.offsetWidth + "px");
    };
    scroll.addEventListener("scroll", update, { passive: true });
    if (window.ResizeObserver) {
      var watch = new ResizeObserver(update);
      watch.observe(scroll);
      watch.observe(table);
    }
    update();
    return update;
  }

  // Material wraps each table (div.md-typeset__scrollwrap > div.md-typeset__table): the
  // table goes back in the wrapper's place, so the controls stay put and one box scrolls.
  function unwrap(table) {
    var inner = table.parentNode;
    var outer = inner && inner.parentNode;
    if (inner && outer && inner.classList.contains("md-typeset__table") &&
        outer.classList.contains("md-typeset__scrollwrap")) {
      outer.parentNode.replaceChild(table, outer);
    }
  }

  // DataTables gives an event it handles (a click on a header or a page button) a read-only
  // delegateTarget; Material's copy-to-clipboard code, listening on the body, then assigns
  // delegateTarget on every click, which throws. On the way up, at the table's container,
  // the property becomes an ordinary one again, with the same value.
  function writableDelegateTarget(event) {
    var own = Object.getOwnPropertyDescriptor(event, "delegateTarget");
    if (own && own.get && !own.set) {
      Object.defineProperty(event, "delegateTarget", {
        value: event.delegateTarget, writable: true, configurable: true
      });
    }
  }

  function setUp(table) {
    if (table.tkDone) return;
    table.tkDone = true;
    var header = headerTexts(table);
    var keys = keyColumns(table);
    unwrap(table);
    if (sortable(table, header) && window.DataTable) {
      var rows = table.tBodies[0].rows.length;
      var paged = rows > PAGE_LENGTH;
      var update = null;
      try {
        var dt = new window.DataTable(table, {
          order: [],               // the toolkit's order until a header is clicked
          paging: paged,
          pageLength: PAGE_LENGTH,
          lengthMenu: LENGTHS,
          autoWidth: false,
          orderClasses: false,
          columnDefs: keys.length ? [{ targets: keys, className: "tk-key" }] : [],
          layout: {
            topStart: paged ? "pageLength" : null,
            topEnd: "search",
            bottomStart: "info",
            bottomEnd: paged ? "paging" : null
          },
          language: {
            search: "Filter rows:",
            searchPlaceholder: "type to filter",
            lengthMenu: "_MENU_ rows a page",
            info: "Rows _START_ to _END_ of _TOTAL_",
            infoEmpty: "No rows",
            infoFiltered: "(filtered from _MAX_)",
            zeroRecords: "No row matches the filter",
            emptyTable: "No rows"
          },
          drawCallback: function () {
            fitRows(table.tBodies[0].rows);
            if (update) update();
          }
        });
        table.classList.add("tk-sortable", "tk-ready");
        table.tkTable = dt;  // the DataTables API of this table (tests, bench/)
        var container = table.closest(".dt-container");
        if (container) container.addEventListener("click", writableDelegateTarget);
        update = frame(table);
        return dt;
      } catch (err) {
        // a table DataTables cannot read stays as it is: fitted, not sortable
        if (window.console) window.console.warn("table left unsorted:", err);
      }
    }
    for (var k = 0; k < keys.length; k++) {
      var rowsAll = table.rows;
      for (var r = 0; r < rowsAll.length; r++) {
        var c = rowsAll[r].cells[keys[k]];
        if (c) c.classList.add("tk-key");
      }
    }
    if (isFields(header)) table.classList.add("tk-fields");
    if (table.tBodies.length) fitRows(table.tBodies[0].rows, !isFields(header));
    if (!table.parentNode.classList.contains("tk-scroll")) frame(table);
    table.classList.add("tk-ready");
    return null;
  }

  function setUpAll() {
    if (window.DataTable) window.DataTable.ext.errMode = "throw";  // never an alert()
    var tables = document.querySelectorAll("article table");
    for (var i = 0; i < tables.length; i++) setUp(tables[i]);
    // when the page's tables were ready, in ms since the page began to load (tests, bench/)
    document.body.setAttribute("data-tk-tables", String(Math.round(performance.now())));
  }

  document.addEventListener("click", function (event) {
    var target = event.target;
    if (!target || !target.closest || target.closest("a")) return;
    var box = target.closest(".tk-long");
    if (box) box.classList.toggle("tk-open");
  });

  if (window.document$ && typeof window.document$.subscribe === "function") {
    window.document$.subscribe(setUpAll);
  } else if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", setUpAll);
  } else {
    setUpAll();
  }
})();
