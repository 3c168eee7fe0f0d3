// Light or dark: the page follows prefers-color-scheme; the toggle pins the other one.
// A classic script in <head> (not a module), so a pinned theme is set before the first paint.
(() => {
  const KEY = "promptmanager.theme";
  const root = document.documentElement;
  const media = window.matchMedia("(prefers-color-scheme: dark)");

  function stored() {
    try {
      const value = window.localStorage.getItem(KEY);
      return value === "light" || value === "dark" ? value : null;
    } catch {
      return null; // storage blocked: follow the system
    }
  }

  function store(value) {
    try {
      if (value) window.localStorage.setItem(KEY, value);
      else window.localStorage.removeItem(KEY);
    } catch {
      // Not remembered across pages, still applied to this one.
    }
  }

  const system = () => (media.matches ? "dark" : "light");
  const current = () => root.dataset.theme || system();

  const pinned = stored();
  if (pinned) root.dataset.theme = pinned;

  function show(button) {
    button.setAttribute("aria-pressed", String(current() === "dark"));
  }

  document.addEventListener("DOMContentLoaded", () => {
    const button = document.querySelector('[data-role="theme-toggle"]');
    if (!button) return;
    show(button);
    button.addEventListener("click", () => {
      const next = current() === "dark" ? "light" : "dark";
      // Choosing what the system shows anyway means following the system again.
      if (next === system()) delete root.dataset.theme;
      else root.dataset.theme = next;
      store(root.dataset.theme || null);
      show(button);
    });
    media.addEventListener("change", () => show(button));
  });
})();
