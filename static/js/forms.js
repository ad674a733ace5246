// Small form behaviours, as data attributes instead of inline handlers (the CSP runs no
// inline script). <select data-submit-on-change> submits its form when its value changes.
(function () {
  "use strict";
  document.addEventListener("change", function (event) {
    const field = event.target;
    if (field.matches && field.matches("[data-submit-on-change]") && field.form) field.form.requestSubmit();
  });
})();
