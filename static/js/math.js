// LaTeX rendering with the vendored KaTeX (no CDN): $...$, $$...$$, \(...\), \[...\].
// Pages call window.stepwiseRenderMath(element) after swapping content in.
(function () {
  "use strict";
  const OPTIONS = {
    delimiters: [
      { left: "$$", right: "$$", display: true }, { left: "\\[", right: "\\]", display: true },
      { left: "$", right: "$", display: false }, { left: "\\(", right: "\\)", display: false },
    ],
    throwOnError: false,
  };
  window.stepwiseRenderMath = function (root) {
    if (root && typeof window.renderMathInElement === "function") window.renderMathInElement(root, OPTIONS);
  };
  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll(".math").forEach(window.stepwiseRenderMath);
  });
})();
