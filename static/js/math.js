// Render LaTeX on pages without the labeling script (KaTeX is vendored: no CDN).
document.addEventListener("DOMContentLoaded", function () {
  if (typeof window.renderMathInElement !== "function") return;
  document.querySelectorAll(".math").forEach(function (el) {
    window.renderMathInElement(el, {
      delimiters: [
        { left: "$$", right: "$$", display: true }, { left: "\\[", right: "\\]", display: true },
        { left: "$", right: "$", display: false }, { left: "\\(", right: "\\)", display: false },
      ],
      throwOnError: false,
    });
  });
});
