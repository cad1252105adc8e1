// Building the page without markup strings: every text goes in as a Text node (textContent),
// so a downstream's answer or a workflow document shown on the page is never parsed as HTML.
// Nothing in the monitor uses innerHTML, outerHTML, insertAdjacentHTML or document.write.

const SVG_NS = "http://www.w3.org/2000/svg";

function append(parent, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    parent.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return parent;
}

function apply(el, attrs) {
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (name.startsWith("on") && typeof value === "function") {
      el.addEventListener(name.slice(2), value);
    } else if (name === "class") {
      el.setAttribute("class", Array.isArray(value) ? value.filter(Boolean).join(" ") : value);
    } else if (name === "dataset") {
      Object.assign(el.dataset, value);
    } else if (name === "text") {
      el.textContent = String(value);
    } else if (value === true) {
      el.setAttribute(name, "");
    } else {
      el.setAttribute(name, String(value));
    }
  }
  return el;
}

/** An HTML element: h("a", {href: "#/runs"}, "Runs", child, ...). */
export function h(tag, attrs, ...children) {
  return append(apply(document.createElement(tag), attrs), children);
}

/** An SVG element, the same way. */
export function s(tag, attrs, ...children) {
  return append(apply(document.createElementNS(SVG_NS, tag), attrs), children);
}

/** Replace the children of `el` with `children`. */
export function fill(el, ...children) {
  el.replaceChildren();
  return append(el, children);
}

/** `el` (a `pre` that may scroll sideways) made reachable from the keyboard: a region that
 * scrolls but holds nothing focusable cannot be scrolled without a mouse. */
export function scrollable(el) {
  el.tabIndex = 0;
  return el;
}

/** Set a CSS width in percent through the CSSOM (allowed by the page's style-src policy,
 * unlike a style attribute). */
export function widthPercent(el, percent) {
  el.style.width = `${Math.max(0, Math.min(100, percent))}%`;
  return el;
}

/** Announce `text` to screen readers and sighted users in the page's status line. */
export function announce(text, kind = "info") {
  const line = document.getElementById("announce");
  if (!line) return;
  line.className = `announce announce-${kind}`;
  line.textContent = text;
}

/** Give `el` (an action's answer) the focus when the focus was lost: the button a keyboard
 * user pressed was disabled or drawn anew by the action, which leaves the focus on <body>
 * (the next Tab starts again at the top of the page). A focus still somewhere is kept. */
export function focusIfLost(el) {
  if (!el || !el.isConnected) return;
  const at = document.activeElement;
  if (at && at !== document.body && at.isConnected) return;
  el.setAttribute("tabindex", "-1");
  el.focus();
}
