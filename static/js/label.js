// The labeling page: keyboard, a cursor on the current step, active time, lease heartbeats.
// Every action is an htmx form POST that answers with the task region; keys pressed while a
// request is in flight wait their turn, so fast typing never races the server.
// A step rated -1 changes only by undo (u) or after a confirmation: a stray key must not
// turn the first error into +1 and unlock the steps after it. Typing meant for a box that is
// not there (`w` where no step can be rewritten) is swallowed until Esc or a click, and undo
// goes one rating at a time, each shown before the next: a sentence typed into the page
// never rates, flags, gives up or undoes the steps.
(function () {
  "use strict";

  // The rating keys, the way each rating is written, and which one is an error come from the
  // task's data attributes (the server's list of ratings: annotate/templatetags/workspace.py).
  const KEYS = {
    f: ["flag"], j: ["move", 1], ArrowDown: ["move", 1], k: ["move", -1], ArrowUp: ["move", -1],
    u: ["undo"], Enter: ["submit"], "?": ["help"], g: ["stop", "give_up"], b: ["stop", "bad_problem"],
    w: ["rewrite"],
  };
  const HEARTBEAT_MS = 30000;

  let cursor = null;       // index of the step the keys act on
  const waiting = [];      // keys pressed while a request was running
  let total = 0;           // active ms on the task
  const stepMs = {};       // active ms per step index
  const dirty = new Set(); // steps whose time the server has not seen yet
  let lastActive = Date.now();
  let lastTick = Date.now();
  let pendingMove = null;  // the rating just sent, to place the cursor after the swap
  let confirmedChange = null; // the button whose change of a -1 the annotator confirmed
  let rewriteSent = false; // a written step was saved: the cursor goes on to the next step
  let keysPaused = false;  // `w` found no box: what follows was meant for one, until Esc or a click
  let undoing = false;     // an undo is on its way: another u is refused until its answer is shown
  let undone = null;       // the step number whose rating that undo takes back

  const task = () => document.getElementById("task");
  // What changes with every rating (next step, finish reason) is on the head, which a rating's
  // answer swaps in by id along with the steps it changed (the task itself stays).
  const state = () => (document.getElementById("task-head") || {}).dataset || {};
  const step = (i) => document.getElementById("step-" + i);
  const idleMs = () => Number(task()?.dataset.idleMs || 60000);

  function init() {
    const t = task();
    if (!t) return;
    // The claim (POST /label/next) answers with this page: show the task's own URL, so a
    // reload or a bookmark is a GET of this task, not another claim.
    if (t.dataset.url && location.pathname !== t.dataset.url) history.replaceState(null, "", t.dataset.url);
    startTask();
    setInterval(tick, 1000);
    setInterval(heartbeat, HEARTBEAT_MS);
  }

  // A task's own state; again when a submit answers with the next task's page (the body swapped).
  function startTask() {
    const t = task();
    if (!t) return;
    total = Number(t.dataset.totalMs || 0);
    Object.keys(stepMs).forEach((i) => { delete stepMs[i]; });
    dirty.clear();
    waiting.length = 0;
    pendingMove = null;
    t.querySelectorAll(".step").forEach((li) => { stepMs[li.dataset.index] = Number(li.dataset.timeMs || 0); });
    cursor = defaultCursor();
    renderMath(document.querySelector(".problem"));
    afterSwap();
  }

  // --- time: only while the page is visible and someone touched it recently -----------
  function tick() {
    const now = Date.now();
    const elapsed = now - lastTick;
    lastTick = now;
    if (document.visibilityState !== "visible" || now - lastActive > idleMs() || elapsed > 5000) return;
    total += elapsed;
    if (cursor !== null) {
      stepMs[cursor] = (stepMs[cursor] || 0) + elapsed;
      dirty.add(cursor);
    }
  }
  ["keydown", "mousemove", "mousedown", "wheel", "touchstart", "focusin"].forEach((name) =>
    window.addEventListener(name, () => { lastActive = Date.now(); }, { passive: true, capture: true }));

  function timeFields() {
    tick();
    const steps = [...dirty].map((i) => i + ":" + Math.round(stepMs[i] || 0));
    if (cursor !== null) steps.push(cursor + ":" + Math.round(stepMs[cursor] || 0));
    return { total_ms: String(Math.round(total)), step_ms: [...new Set(steps)].join(",") };
  }

  function heartbeat(final) {
    const t = task();
    if (!t || t.classList.contains("submitted") || t.classList.contains("lost")) return;
    if (!final && Date.now() - lastActive > idleMs()) return; // an idle tab lets its lease lapse
    const body = new URLSearchParams(timeFields());
    fetch(t.dataset.heartbeat, {
      method: "POST", body, keepalive: !!final, credentials: "same-origin",
      headers: { "X-CSRFToken": csrfToken(), "HX-Request": "true" },
    }).then((response) => {
      if (response.ok) dirty.clear();
      else if (response.status === 409) response.text().then(taskLost);
    }).catch(() => {});
  }
  document.addEventListener("visibilitychange", () => { if (document.visibilityState === "hidden") heartbeat(true); });

  function csrfToken() {
    try { return JSON.parse(document.body.getAttribute("hx-headers"))["X-CSRFToken"]; } catch (e) { return ""; }
  }

  // --- htmx: add times to every POST, track requests, restore the cursor --------------
  document.body.addEventListener("htmx:configRequest", (event) => {
    if (!event.detail.elt.closest("#task")) return;
    Object.assign(event.detail.parameters, timeFields());
    busySince = Date.now();
    const saved = document.getElementById("saved");
    if (saved) { saved.textContent = "Saving…"; saved.classList.add("saving"); }
    const form = event.detail.elt.closest("form");
    const submitter = event.detail.triggeringEvent && event.detail.triggeringEvent.submitter;
    if (form && form.classList.contains("human")) rewriteSent = true;
    if (form && form.classList.contains("rate")) {
      pendingMove = { index: Number(form.elements.index.value), rating: submitter ? submitter.value : null };
    }
  });
  // A swapped-out form's own events never reach the body, so a request counts as done
  // when its answer has settled (or failed); a lost answer frees the queue after 15 s.
  let busySince = 0;
  const busy = () => busySince !== 0 && Date.now() - busySince < 15000;
  document.body.addEventListener("htmx:afterSettle", (event) => {
    // Once per answer: on #task, swapped whole or (a rating) left in place around its parts.
    if (event.target.id === "task") { dirty.clear(); afterSwap(); }
    // The next task, answered by the submit: it opens at the top, as a loaded page does.
    else if (event.target === document.body) { window.scrollTo(0, 0); startTask(); }
    if (undoing && undone !== null) showError("Step " + undone + "'s rating undone.");
    undoing = false;
    undone = null;
    busySince = 0;
    setTimeout(drain, 0);
  });
  ["htmx:responseError", "htmx:sendError"].forEach((name) => document.body.addEventListener(name, (event) => {
    const xhr = event.detail.xhr;
    if (xhr && xhr.status === 409) taskLost(xhr.responseText);
    else showError(xhr && xhr.status ? xhr.responseText : "Could not reach the server: your last click was not saved.");
    pendingMove = null;
    rewriteSent = false;
    undoing = false;
    undone = null;
    busySince = 0;
    const saved = document.getElementById("saved");
    if (saved) { saved.textContent = "⚠ Last change not saved"; saved.classList.remove("saving"); saved.classList.add("unsaved"); }
    setTimeout(drain, 0);
  }));
  setInterval(() => { if (waiting.length) drain(); }, 250);

  function afterSwap() {
    const t = task();
    if (!t) return;
    if (pendingMove) {
      const next = state().next;
      const stop = t.dataset.stop === "1";
      // A second look the model asked for (next is that step) holds the cursor there too.
      if (!(pendingMove.rating === errorRating() && stop) && next !== "") cursor = Number(next);
      else cursor = pendingMove.index;
      pendingMove = null;
    }
    if (rewriteSent) { // htmx gave the new box the focus back: the keys go on to the next step
      rewriteSent = false;
      cursor = defaultCursor();
      if (document.activeElement && document.activeElement.closest("form.human")) document.activeElement.blur();
    }
    if (cursor === null || !step(cursor) || step(cursor).classList.contains("locked") || step(cursor).classList.contains("after_error")) {
      cursor = defaultCursor();
    }
    renderMath(t);
    watchSubmitBar();
    showCursor(true);
  }

  // The sticky submit bar covers the bottom of the window; every step keeps a scroll margin
  // of its height (static/css/stepwise.css), so the step scrolled to is never under it.
  const barObserver = window.ResizeObserver ? new ResizeObserver(setBarHeight) : null;
  function watchSubmitBar() {
    const bar = document.querySelector("#task .submitbar");
    if (!bar) return;
    setBarHeight();
    if (barObserver) { barObserver.disconnect(); barObserver.observe(bar); }
  }
  function setBarHeight() {
    const bar = document.querySelector("#task .submitbar");
    const height = bar ? Math.ceil(bar.getBoundingClientRect().height) : 0;
    document.documentElement.style.setProperty("--submitbar-height", height + "px");
  }

  function defaultCursor() {
    const t = task();
    if (!t) return null;
    if (state().next) return Number(state().next);
    const rated = t.querySelectorAll(".step.rated");
    return rated.length ? Number(rated[rated.length - 1].dataset.index) : null;
  }

  function showCursor(focus) {
    document.querySelectorAll(".step.cursor").forEach((li) => { li.classList.remove("cursor"); li.removeAttribute("aria-current"); });
    const li = cursor === null ? null : step(cursor);
    if (!li) return;
    li.classList.add("cursor");
    li.setAttribute("aria-current", "step");
    const typing = document.activeElement && document.activeElement.matches("textarea, input[type=text]");
    if (focus && !typing && !dialogOpen()) {
      li.focus({ preventScroll: true });
      // A step taller than the room above the bar is shown from its top, where reading starts.
      const bar = document.querySelector("#task .submitbar");
      const room = window.innerHeight - (bar ? bar.getBoundingClientRect().height : 0);
      li.scrollIntoView({ block: li.getBoundingClientRect().height > room ? "start" : "nearest" });
    }
  }

  function renderMath(root) {
    if (window.stepwiseRenderMath) window.stepwiseRenderMath(root); // static/js/math.js
  }

  let errorTimer = null;
  function showError(message, { sticky = false } = {}) {
    const banner = document.getElementById("task-error");
    if (!banner) return;
    banner.textContent = message || "That did not work.";
    banner.hidden = false;
    clearTimeout(errorTimer);
    errorTimer = sticky ? null : setTimeout(hideError, 6000);
  }
  function hideError() {
    clearTimeout(errorTimer);
    const banner = document.getElementById("task-error");
    if (banner) banner.hidden = true;
  }

  // A 409 (a heartbeat's or an action's): the lease went to someone else, or the task was
  // submitted elsewhere. The submit bar says so until the annotator goes on, and offers the
  // next task (a claim, which drops this one); the keys no longer act on the steps.
  function taskLost(message) {
    const t = task();
    const notice = document.getElementById("task-lost");
    if (!t || !notice) return showError(message);
    waiting.length = 0;
    t.classList.add("lost");
    notice.querySelector("[data-message]").textContent =
      message || "This task is no longer yours: it went to someone else.";
    notice.hidden = false;
    if (!dialogOpen()) notice.querySelector("button").focus();
  }

  // --- keys ----------------------------------------------------------------------------
  document.addEventListener("keydown", (event) => {
    if (event.ctrlKey || event.metaKey || event.altKey) return;
    const target = event.target;
    if (target.matches && target.matches("textarea, input, select, [contenteditable]")) return;
    if (keysPaused) { // the typing meant for a box: no key acts until Esc
      if (event.key === "Escape") resumeKeys();
      else if (event.key !== "Tab") event.preventDefault();
      return;
    }
    if (dialogOpen()) return;
    if (event.key === "Enter" && target.matches && target.matches("button, a, summary")) return; // native activation
    const action = task() && (KEYS[event.key] || ratingKey(event.key));
    if (!action) return;
    event.preventDefault();
    if (task().classList.contains("lost")) { // only Enter acts: it goes on to the next task
      if (event.key === "Enter") document.querySelector("#task-lost button").click();
      return;
    }
    if (action[0] === "help") return openHelp(); // needs no answer from the server
    if (action[0] === "undo" && (event.repeat || undoing || waiting.some(([kind]) => kind === "undo"))) {
      // Held down, or pressed again before the last undo showed: several ratings must not go unseen.
      showError("Undo goes one rating at a time: press u again once the last undo shows.");
      return;
    }
    waiting.push(action);
    drain();
  });

  function ratingKey(key) {
    const value = JSON.parse(task().dataset.ratingKeys)[key];
    return value === undefined ? null : ["rate", value];
  }

  function errorRating() {
    return task().dataset.errorRating;
  }

  function drain() {
    while (waiting.length && !busy()) run(waiting.shift());
  }

  function run([kind, arg]) {
    const t = task();
    if (kind === "help") return openHelp();
    if (kind === "move") return move(arg);
    if (kind === "stop") return openStop(arg);
    if (kind === "rewrite") return openRewrite();
    if (kind === "submit") {
      const button = document.querySelector("#submit-form button[type=submit]");
      if (button && !button.disabled) press(button);
      else showError("Rate the steps first (or use Give up).");
      return;
    }
    const li = cursor === null ? null : step(cursor);
    if (!li) return;
    if (kind === "rate") {
      const button = li.querySelector('.rate button[value="' + arg + '"]');
      if (button && !button.disabled) press(button);
    } else if (kind === "flag") {
      const button = li.querySelector(".flag button");
      if (button && !button.disabled) press(button);
    } else if (kind === "undo") {
      const rated = t.querySelectorAll(".step.rated");
      if (!rated.length) return;
      const last = rated[rated.length - 1];
      cursor = Number(last.dataset.index);
      busySince = Date.now();
      undoing = true;
      undone = Number(last.dataset.index) + 1;
      htmx.ajax("POST", t.dataset.undo, {
        source: last.querySelector(".rate"), target: "#task", swap: "outerHTML",
        values: { index: last.dataset.index },
      });
    }
  }

  function press(button) {
    busySince = Date.now(); // before htmx sees the click, so the next key waits for the answer
    button.click();
  }

  function move(delta) {
    const open = [...document.querySelectorAll(".step")].filter((li) =>
      li.classList.contains("rated") || li.classList.contains("current"));
    if (!open.length) return;
    const at = open.findIndex((li) => Number(li.dataset.index) === cursor);
    const next = open[Math.min(open.length - 1, Math.max(0, (at < 0 ? 0 : at) + delta))];
    tick();
    cursor = Number(next.dataset.index);
    showCursor(true);
  }

  // --- changing a -1: only after a confirmation (undo needs none) ------------------------
  // Every rating, by key or by mouse, is an htmx request; htmx asks before sending it.
  document.body.addEventListener("htmx:confirm", (event) => {
    const form = event.detail.elt;
    const submitter = event.detail.triggeringEvent && event.detail.triggeringEvent.submitter;
    if (!form.classList || !form.classList.contains("rate") || !submitter) return;
    const li = form.closest(".step");
    if (li.dataset.rating !== errorRating() || submitter.value === errorRating()) return;
    if (confirmedChange === submitter) { confirmedChange = null; return; }
    event.preventDefault();
    askToChangeError(li, submitter);
  });

  function askToChangeError(li, button) {
    const dialog = document.getElementById("change-error");
    if (!dialog) return;
    busySince = 0;
    waiting.length = 0; // keys typed after the stray one must not act on the question
    const number = Number(li.dataset.index) + 1;
    dialog.querySelector("[data-step]").textContent = String(number);
    dialog.querySelector("[data-new-rating]").textContent = JSON.parse(task().dataset.ratingSigns)[button.value];
    dialog.querySelector("[data-unlocks]").hidden = !(task().dataset.stop === "1" && li.nextElementSibling);
    dialog.returnValue = "";
    dialog.changeButton = button;
    dialog.showModal();
  }
  // Dialogs come and go with the page's body, so their "close" (which does not bubble) is
  // caught on the way down.
  document.addEventListener("close", (event) => {
    if (event.target.id === "change-error") changeErrorClosed(event);
    else if (event.target.id === "keys") showCursor(true);
  }, true);
  function changeErrorClosed(event) {
    const dialog = event.target;
    const button = dialog.changeButton;
    dialog.changeButton = null;
    if (dialog.returnValue === "change" && button && document.body.contains(button)) {
      confirmedChange = button;
      press(button);
    } else {
      showCursor(true);
    }
  }

  // --- give up / bad problem: open the form with the reason chosen, then type why --------
  function openStop(reason) {
    const details = document.querySelector("#task details.giveup");
    if (!details) return;
    details.open = true;
    const radio = details.querySelector('input[name=finish_reason][value="' + reason + '"]');
    if (radio) radio.checked = true;
    const note = details.querySelector("textarea[name=note]");
    if (note) note.focus();
  }
  // The reason and a written step: Ctrl+Enter sends the form, Esc goes back to the steps.
  document.addEventListener("keydown", (event) => {
    const note = event.target.closest && event.target.closest("details.giveup textarea, form.human textarea");
    if (!note) return;
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) {
      event.preventDefault();
      note.form.requestSubmit();
    } else if (event.key === "Escape") {
      const details = note.closest("details");
      if (details) details.open = false;
      else { note.blur(); cursor = defaultCursor(); }
      showCursor(true);
    }
  });

  // --- after a -1: write the step as it should be (PRM800K's human completion) ----------
  // The box is on the first step rated -1 while the project collects written corrections.
  function openRewrite() {
    const box = document.querySelector("#task form.human textarea");
    if (!box) {
      pauseKeys(task().dataset.rewrite === "1" ? "Rate a step −1 first: only the first wrong step can be rewritten."
        : "Written corrections are off in this project (an admin turns them on in the labeling settings).");
      return;
    }
    tick(); // the time so far belongs to the step the cursor was on; writing counts on the -1 step
    cursor = Number(box.closest(".step").dataset.index);
    showCursor(false);
    box.focus();
    box.setSelectionRange(box.value.length, box.value.length);
  }

  // The keys typed after a `w` with no box were meant for one: none of them acts on the steps.
  function pauseKeys(message) {
    keysPaused = true;
    waiting.length = 0; // keys typed after the `w` while a request was running
    showError(message + " Keys are paused: press Esc (or click) to go on.", { sticky: true });
  }
  function resumeKeys() {
    keysPaused = false;
    hideError();
    showCursor(true);
  }

  function dialogOpen() {
    return document.querySelector("dialog[open]") !== null;
  }

  function openHelp() {
    const dialog = document.getElementById("keys");
    if (dialog && !dialog.open) dialog.showModal();
  }
  document.addEventListener("click", (event) => {
    if (keysPaused) resumeKeys();
    if (event.target.closest("[data-show-keys]")) openHelp();
    const li = event.target.closest(".step.rated, .step.current");
    if (li) { cursor = Number(li.dataset.index); showCursor(false); }
  });

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
})();
