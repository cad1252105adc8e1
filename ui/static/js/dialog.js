// Modal dialogs (<dialog>: focus stays inside, Escape cancels): confirming an operator action,
// asking for an API key, editing a JSON value that is checked before it can be sent.

import { useKey } from "./api.js";
import { h } from "./dom.js";
import { DuplicateKeyError, JsonSyntaxError, parseWithPositions, UnpairedSurrogateError } from "./jsontext.js";

function modal(title, body, buttons, { onClose } = {}) {
  const dialog = h(
    "dialog",
    { class: "modal", "aria-labelledby": "modal-title" },
    h("form", { method: "dialog" }, h("h2", { id: "modal-title" }, title), body, h("div", { class: "modal-buttons" }, buttons)),
  );
  document.body.append(dialog);
  dialog.addEventListener("close", () => {
    if (onClose) onClose(dialog.returnValue);
    dialog.remove();
  });
  // A link in it (a breaker's Reset, on the Destinations page) leaves the page: the dialog,
  // modal over it, goes too, as Cancel, so the page the link opens is not hidden under it.
  dialog.addEventListener("click", (event) => {
    if (event.target.closest("a[href]")) dialog.close("cancel");
  });
  dialog.showModal();
  return dialog;
}

/** Ask before doing something: resolves true when confirmed. A `note` (text or inline
 * nodes) is what the operator should know before confirming, in a warning box under `text`;
 * `noteBlocks` (paragraphs, lists) the same when it takes more than a sentence. `dismiss` is
 * the button that backs out: "Cancel" unless that would read as the action (cancelling a run).
 */
export async function confirmAction(options) {
  return (await chooseAction(options)) === "ok";
}

/** `confirmAction`, resolving the value of the button pressed: "ok", "cancel" (Escape too),
 * or that of a submit button the note holds (another action offered instead). `fields`
 * (nodes: an optional input the action takes) go under `text`; Enter in one of their inputs
 * confirms. `confirm: null`: no confirm button (the action cannot work; `dismiss` alone). */
export function chooseAction({ title, text, note = null, noteBlocks = null, fields = null, confirm = "Confirm", dismiss = "Cancel", danger = false }) {
  let warning = null;
  if (noteBlocks) warning = h("div", { class: "warning-box" }, noteBlocks);
  else if (note) warning = h("p", { class: "warning-box" }, "⚠ ", note);
  const ok = confirm === null ? null : h("button", { value: "ok", type: "submit", class: danger ? "danger" : "primary", autofocus: true }, confirm);
  // Enter in a field would submit with the form's first button, Cancel: it confirms instead.
  const confirmOnEnter = (event) => {
    if (!ok || event.key !== "Enter" || event.target.tagName !== "INPUT") return;
    event.preventDefault();
    ok.form.requestSubmit(ok);
  };
  return new Promise((resolve) => {
    modal(
      title,
      [h("p", {}, text), fields ? h("div", { class: "modal-fields", onkeydown: confirmOnEnter }, fields) : null, warning],
      [h("button", { value: "cancel", type: "submit", class: "secondary", autofocus: !ok }, dismiss), ok],
      { onClose: (value) => resolve(value || "cancel") },
    );
  });
}

/** Ask for an API key (the API answered 401): resolves the key, or null. */
export function askForKey(refused = null) {
  return new Promise((resolve) => {
    const use = h("button", { value: "ok", type: "submit", class: "primary" }, "Use this key");
    const input = h("input", {
      type: "password",
      id: "api-key",
      name: "key",
      autocomplete: "off",
      required: true,
      placeholder: "sbk_…",
      // Enter would submit with the form's first button, Cancel: it uses the key instead.
      onkeydown: (event) => {
        if (event.key !== "Enter") return;
        event.preventDefault();
        use.form.requestSubmit(use);
      },
    });
    modal(
      "API key needed",
      [
        h("p", {}, "The API asks for a key. It is kept in this tab only (sessionStorage) and sent with each request."),
        // A newcomer who started `schemabridge serve` has no key yet, and nothing here said
        // where one comes from: keys are made on the database, not through this page.
        h(
          "p",
          { class: "key-howto" },
          "No key yet? Make one where the server runs, with its database settings: ",
          h("code", {}, "schemabridge keys create --admin --name me"),
          " prints an admin key once (",
          h("code", {}, "--tenant NAME"),
          " instead of ",
          h("code", {}, "--admin"),
          ": a key for one tenant's runs).",
        ),
        // Asked again after a key was tried: say why, or the same dialog looks like nothing happened.
        refused ? h("p", { class: "error-box key-refused", role: "alert" }, `The key given was refused: ${refused}`) : null,
        h("label", { for: "api-key" }, "API key"),
        input,
      ],
      [
        h("button", { value: "cancel", type: "submit", class: "secondary", formnovalidate: true }, "Cancel"),
        use,
      ],
      { onClose: (value) => resolve(value === "ok" && input.value.trim() ? input.value.trim() : null) },
    );
    input.focus();
  });
}

/** Edit a JSON value; the confirm button works only while the text parses. Resolves
 * {value} or null when cancelled. A `note` (text or inline nodes) is what the operator should
 * know before sending, in a warning box under `help`, as `chooseAction` shows its note. */
export function editJson({ title, help, initial = "null", confirm = "Send", note = null }) {
  return new Promise((resolve) => {
    const area = h("textarea", { id: "json-value", class: "code", rows: "12", spellcheck: "false" });
    area.value = initial;
    const state = h("p", { class: "json-state", role: "status" });
    const ok = h("button", { value: "ok", type: "submit", class: "primary" }, confirm);
    let parsed = null;
    const check = () => {
      try {
        parsed = { value: parseWithPositions(area.value).value };
        state.textContent = "✓ valid JSON";
        state.className = "json-state ok";
        ok.disabled = false;
      } catch (error) {
        parsed = null;
        state.textContent = error instanceof DuplicateKeyError || error instanceof UnpairedSurrogateError ? `✕ ${error.message}` : `✕ not JSON: ${error instanceof JsonSyntaxError ? error.message : String(error)}`;
        state.className = "json-state bad";
        ok.disabled = true;
      }
    };
    area.addEventListener("input", check);
    check();
    modal(
      title,
      [h("p", {}, help), note ? h("p", { class: "warning-box" }, "⚠ ", note) : null, h("label", { for: "json-value" }, "Output (JSON)"), area, state],
      [h("button", { value: "cancel", type: "submit", class: "secondary", formnovalidate: true }, "Cancel"), ok],
      { onClose: (value) => resolve(value === "ok" && parsed ? parsed : null) },
    );
    area.focus();
  });
}

/** "Use another key…": asks for a key, uses it from now on, then `then()` (draw the page
 * again; or, where a redraw would lose what was typed, say so in place). */
export function otherKeyButton(then) {
  const button = h("button", { type: "button", class: "secondary other-key" }, "Use another key…");
  button.addEventListener("click", async () => {
    const key = await askForKey();
    if (!key) return;
    useKey(key);
    then();
  });
  return button;
}
