// Math with the vendored KaTeX (no CDN). steps/rendering.py has already found every formula
// on the server and written it, escaped and without its delimiters, into
// <span class="math" data-display="true|false">; this only hands each span to katex.render.
// Pages call window.stepwiseRenderMath(element) after swapping content in; htmx swaps are
// caught here too. Rendering a span twice is a no-op.
(function () {
  "use strict";
  const OPTIONS = { throwOnError: true, trust: false, strict: "ignore", maxExpand: 1000, maxSize: 20 };

  function renderOne(span) {
    if (span.dataset.rendered) return;
    const tex = span.textContent;
    try {
      window.katex.render(tex, span, Object.assign({ displayMode: span.dataset.display === "true" }, OPTIONS));
      span.dataset.rendered = "1";
    } catch (error) {
      // Shown as written (KaTeX has already emptied the span), marked, with the reason on hover.
      span.textContent = tex;
      span.dataset.rendered = "error";
      span.title = "Not rendered: " + (error && error.message ? error.message : error);
    }
  }

  window.stepwiseRenderMath = function (root) {
    if (!root || !window.katex) return;
    if (root.matches && root.matches("span.math")) renderOne(root);
    else root.querySelectorAll("span.math").forEach(renderOne);
  };
  document.addEventListener("DOMContentLoaded", function () { window.stepwiseRenderMath(document.body); });
  document.addEventListener("htmx:load", function (event) { window.stepwiseRenderMath(event.target); });
})();
